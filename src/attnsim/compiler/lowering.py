"""Stage 3, lowering: every S-op becomes named residual directions written by IR blocks.

Each S-op gets a representation in the residual stream:

- categorical: one direction per value, ``"label:value"`` (one-hot; the zero vector is None);
- numerical: a linear form over residual directions. Linear maps (affine maps, sums,
  numerical readouts of categorical S-ops) stay *virtual*: they cost no block and no layer.

Each block is placed at the earliest *stage* its inputs allow: stage 0 is the embedding,
layer l (1-based) has its attention sublayer at stage 2l-1 and its MLP at stage 2l.

Realisations (the report lists one line per map):

- lookup tables on finite value sets (ReLU units; exact);
- step functions on finite numerical value sets (ReLU units; exact at the values);
- products of two real numbers (bilinear units; exact);
- exp, log, sqrt, 1/x (declared elementwise units, gated by ``notbos``; native = exact);
- relu and abs (ReLU units; exact).

Selectors become bilinear scores where a selected key scores ``max_score``, any other key at
most ``max_score - 1`` and BOS ``max_score - 0.5`` (so BOS wins only when nothing is selected):
tables over one-hot values, ``1 - (f - g)^2`` for equality of integer-valued numbers (against
a constant: ``1 - (c - g)^2`` read on one side only), sums of those for conjunctions, and
tables over joint values for disjunctions and negations. ``SelectMax(base, score)`` scores
``G * base + score`` with a power of two ``G`` above the declared score range (bounded: a
hard head averages the keys within its tolerance of the maximum).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnsim.compiler import approximation
from attnsim.compiler.value_inference import ValueInference, call_function, dedupe, sort_values
from attnsim.ir.basis import Basis
from attnsim.ir.blocks import BilinearUnit, Head, NativeUnit, ReluUnit, linear_form
from attnsim.rasp import expr as E
from attnsim.rasp import interpret as I

BOS, NOTBOS = "bos", "notbos"
BIG = 1.0e3  # extra score of BOS for the BOS query (it then reads only itself)
NATIVE_OPS = {"exp", "log", "sqrt", "reciprocal", "rsqrt", "gelu", "gelu_tanh"}
MAX_LOOKUP = 50_000  # hidden units one lookup table may use


class UnsupportedError(NotImplementedError):
    """Valid RASP this compiler cannot realise (collected, then raised once)."""


def attn_stage(ready: int) -> int:
    """The first attention stage (odd) after ``ready``."""
    return ready + 1 if ready % 2 == 0 else ready + 2


def mlp_stage(ready: int) -> int:
    """The first MLP stage (even) after ``ready``."""
    return ready + 1 if ready % 2 == 1 else ready + 2


def value_key(v: Any) -> tuple:
    return (type(v).__name__, v)


def value_text(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)


@dataclass
class Rep:
    """Where an S-op lives in the residual stream.

    Attributes:
        kind: "cat" or "num".
        ready: the stage after which it can be read.
        values: categorical values (in the order of ``dims``).
        dims: categorical direction labels, one per value.
        form: numerical linear form (direction -> coefficient).
    """

    kind: str
    ready: int
    values: tuple = ()
    dims: tuple = ()
    form: dict[str, float] = field(default_factory=dict)

    def dim_of(self) -> dict[tuple, str]:
        return {value_key(v): d for v, d in zip(self.values, self.dims)}


@dataclass(frozen=True)
class Guard:
    """A run-time check: the linear form's value must be one of ``allowed`` (or in range)."""

    label: str
    form: tuple[tuple[str, float], ...]
    stage: int
    allowed: tuple[float, ...] | None = None
    value_range: tuple[float, float] | None = None
    integer: bool = False
    reason: str = ""


@dataclass
class Realisation:
    label: str
    how: str
    level: str  # exact | native | bounded
    units: int
    note: str = ""
    bound: float | None = None  # bounded maps: the certified error bound on the range
    relative: bool = False  # whether ``bound`` is relative to |f|


class Lowerer:
    """Lowers expressions on demand (memoised) into IR blocks placed at stages."""

    def __init__(
        self,
        vi: ValueInference,
        labels: dict[int, str],
        *,
        maps: str = "native",
        map_tolerance: float = 1e-6,
        map_ranges: dict | None = None,
        map_error: str = "absolute",
    ) -> None:
        self.vi = vi
        self.map_tolerance = map_tolerance
        self.map_error = map_error
        self.map_ranges = dict(map_ranges or {})
        self.bounds: dict[str, float] = {}
        self.L = vi.L
        self.labels = dict(labels)
        self.used_labels = set(labels.values())
        self.maps = maps
        self.basis = Basis([BOS, NOTBOS])
        self.static_embed: dict[str, np.ndarray] = {}  # direction -> value per position
        self.token_dims: dict[str, Any] = {}  # direction -> vocabulary value (one-hot tokens)
        self.token_num_dir: str | None = None
        self.heads: list[tuple[int, Head]] = []
        self.units: list[tuple[int, Any]] = []
        self.reps: dict[int, Rep] = {}
        self.scores: dict[int, tuple[tuple, float, int]] = {}
        self.guards: list[Guard] = []
        self.realisations: list[Realisation] = []
        self.errors: list[str] = []
        self._n_units = 0
        self._squares: dict[tuple, tuple[str, int]] = {}
        self.gains: dict[int, float] = {}  # SelectMax selector uid -> the gain G of its base
        self.reps_extra: dict[tuple, Rep] = {}

    # -- naming ------------------------------------------------------------------------------
    def label(self, e: E.RASPExpr) -> str:
        got = self.labels.get(e.uid)
        if got is None:
            base = e.label
            got = base if base not in self.used_labels else f"{base}#{e.uid}"
            self.used_labels.add(got)
            self.labels[e.uid] = got
        return got

    def fresh(self, base: str) -> str:
        i = 1
        name = base
        while name in self.used_labels:
            i += 1
            name = f"{base}_{i}"
        self.used_labels.add(name)
        return name

    def unit_name(self, base: str) -> str:
        self._n_units += 1
        return f"{base}/{self._n_units}"

    def new_dir(self, label: str) -> str:
        self.basis.add(label)
        return label

    # -- representations ---------------------------------------------------------------------
    def rep(self, e: E.SOp) -> Rep:
        got = self.reps.get(e.uid)
        if got is None:
            got = self.reps[e.uid] = self._lower(e)
        return got

    def _lower(self, e: E.SOp) -> Rep:
        if self.vi.is_static(e):
            return self._static(e)
        if isinstance(e, E.TokensType):
            return self._tokens(e)
        if isinstance(e, E.LengthType):
            width = E.SelectorWidth(E.Select(E.tokens, E.tokens, E.Comparison.TRUE))
            width = E.numerical(width) if E.is_numerical(e) else width
            self.labels[width.uid] = self.label(e)
            return self.rep(width)
        if isinstance(e, E.Map):
            return self._map(e)
        if isinstance(e, E.SequenceMap):
            return self._sequence_map(e)
        if isinstance(e, E.Aggregate):
            return self._aggregate(e)
        if isinstance(e, E.SelectorWidth):
            return self._selector_width(e)
        raise UnsupportedError(f"{self.label(e)}: cannot compile {type(e).__name__}")

    def _static(self, e: E.SOp) -> Rep:
        label = self.label(e)
        vals = self.vi.static_values(e)
        if E.is_numerical(e):
            arr = np.asarray(vals, dtype=np.float64)
            d = self.new_dir(label)
            self.static_embed[d] = arr
            return Rep("num", 0, form={d: 1.0})
        distinct = sort_values(dedupe(v for v in vals if v is not None))
        dims = []
        for v in distinct:
            d = self.new_dir(f"{label}:{value_text(v)}")
            self.static_embed[d] = np.array([1.0 if _same(x, v) else 0.0 for x in vals])
            dims.append(d)
        return Rep("cat", 0, values=distinct, dims=tuple(dims))

    def _tokens(self, e: E.SOp) -> Rep:
        vocab = self.vi.vocab
        if E.is_numerical(e):
            self.token_num_dir = self.new_dir("tokens")
            return Rep("num", 0, form={"tokens": 1.0})
        if vocab is None:
            raise UnsupportedError(
                "tokens are used categorically but no vocab was given; pass vocab=[...] or "
                "annotate the tokens rasp.numerical(rasp.tokens) for real-valued input"
            )
        dims = []
        for v in sort_values(vocab):
            d = self.new_dir(f"tokens:{value_text(v)}")
            self.token_dims[d] = v
            dims.append(d)
        return Rep("cat", 0, values=sort_values(vocab), dims=tuple(dims))

    # -- helpers on representations ------------------------------------------------------------
    def numeric_form(self, e: E.SOp, r: Rep | None = None) -> dict[str, float]:
        """The S-op's value as a linear form (categorical values must be numbers)."""
        r = r or self.rep(e)
        if r.kind == "num":
            return dict(r.form)
        form = {}
        for v, d in zip(r.values, r.dims):
            if isinstance(v, str) or v is None:
                raise UnsupportedError(
                    f"{self.label(e)}: used as a number but takes the value {v!r}"
                )
            if float(v) != 0.0:
                form[d] = float(v)
        return form

    def categorical_rep(self, e: E.SOp) -> Rep:
        """A one-hot representation of ``e`` (converting a numerical one if needed)."""
        r = self.rep(e)
        if r.kind == "cat":
            return r
        if self.vi.is_static(e):
            key = ("cat", e.uid)
            if key not in self.reps_extra:
                self.reps_extra[key] = self._static(E.categorical(e))
            return self.reps_extra[key]
        vals = self.vi.values(e)
        if vals is None:
            raise UnsupportedError(
                f"{self.label(e)}: needs a one-hot encoding (for a table) but its values are "
                "not a known finite set; declare them with a categorical S-op or use EQ on "
                "integer values"
            )
        key = ("cat", e.uid)
        if key in self.reps_extra:
            return self.reps_extra[key]
        out = self._discretise(self.label(e) + "@cat", r.form, r.ready, vals, None, vals)
        self.reps_extra[key] = out
        return out

    def _material_form(self, form: dict[str, float], ready: int, label: str) -> tuple[str, int]:
        """A direction holding the form's value (the form itself if it is one direction)."""
        if len(form) == 1 and next(iter(form.values())) == 1.0:
            return next(iter(form)), ready
        stage = mlp_stage(ready)
        d = self.new_dir(label)
        lf = linear_form(form)
        self.units.append((stage, ReluUnit(self.unit_name(label), lf, ((d, 1.0),))))
        neg = tuple((k, -v) for k, v in lf)
        self.units.append((stage, ReluUnit(self.unit_name(label), neg, ((d, -1.0),))))
        return d, stage

    def square(self, form: dict[str, float], ready: int, label: str) -> tuple[str, int]:
        """A direction holding the square of a linear form (one bilinear unit)."""
        key = linear_form(form)
        got = self._squares.get(key)
        if got is not None:
            return got
        stage = mlp_stage(ready)
        d = self.new_dir(self.fresh(f"{label}^2"))
        self.units.append((stage, BilinearUnit(self.unit_name(d), key, key, ((d, 1.0),))))
        self._squares[key] = (d, stage)
        return d, stage

    # -- maps ----------------------------------------------------------------------------------
    def _map(self, e: E.Map) -> Rep:
        label = self.label(e)
        inner = self.rep(e.inner)
        op = e._op
        num_out = E.is_numerical(e)
        if inner.kind == "cat":
            if num_out:
                readout = self._numeric_readout(e, inner)
                if readout is not None:
                    self.realisations.append(
                        Realisation(label, "numerical readout of one-hot (virtual)", "exact", 0)
                    )
                    return Rep("num", inner.ready, form=readout)
            return self._lookup(label, e, [e.inner], num_out)
        form = inner.form
        kind = op.kind if op is not None else None
        if num_out and kind == "affine":
            a, b = op.params
            out = {k: a * v for k, v in form.items()}
            if b:
                out[NOTBOS] = out.get(NOTBOS, 0.0) + b
            self.realisations.append(Realisation(label, "affine (virtual)", "exact", 0))
            return Rep("num", inner.ready, form={k: v for k, v in out.items() if v != 0})
        if num_out and kind in ("relu", "abs"):
            stage = mlp_stage(inner.ready)
            d = self.new_dir(label)
            lf = linear_form(form)
            self.units.append((stage, ReluUnit(self.unit_name(label), lf, ((d, 1.0),))))
            if kind == "abs":
                neg = tuple((k, -v) for k, v in lf)
                self.units.append((stage, ReluUnit(self.unit_name(label), neg, ((d, 1.0),))))
            self.realisations.append(Realisation(label, kind, "exact", 1 + (kind == "abs")))
            return Rep("num", stage, form={d: 1.0})
        if num_out and kind == "pow" and op.params[0] == 2 and not op.params[1]:
            d, stage = self.square(form, inner.ready, label)
            self.realisations.append(Realisation(label, "square (bilinear)", "exact", 1))
            return Rep("num", stage, form={d: 1.0})
        if num_out and (kind in NATIVE_OPS or kind == "scaled_reciprocal"):
            return self._native(label, e, kind, form, inner.ready)
        vals = self.vi.values(e.inner)
        if vals is not None:
            out_vals = self.vi.values(e)
            table = {value_key(v): _call_function(e, (v,)) for v in vals}
            r = self._discretise(label, form, inner.ready, vals, table, out_vals, num_out)
            return r
        raise UnsupportedError(
            f"{label}: a map of the real-valued S-op {self.label(e.inner)!r} with no finite "
            "value set; use a named map (rasp.exp, rasp.reciprocal, rasp.relu, ...), an affine "
            "map (x * a + b), or declare the input's values"
        )

    def _numeric_readout(self, e: E.Map, inner: Rep) -> dict[str, float] | None:
        """f of a one-hot S-op as a linear form (sum of f(v) * onehot_v), if f gives numbers."""
        form: dict[str, float] = {}
        for v, d in zip(inner.values, inner.dims):
            out = _apply(e.f, v)
            if out is _FAILED or out is None:
                continue  # a value f rejects cannot occur; None is the zero vector
            if isinstance(out, str) or not isinstance(out, (int, float, np.integer, np.floating)):
                return None
            if float(out) != 0.0:
                form[d] = float(out)
        return form

    def _map_range(self, e: E.SOp, inner: E.SOp) -> tuple[float, float] | None:
        """The declared input range of a map: map_ranges[label] or the input's value_range."""
        for key in (self.label(e), self.label(inner)):
            if key in self.map_ranges:
                lo, hi = self.map_ranges[key]
                return float(lo), float(hi)
        return E.value_range(inner) or e._annotations.get("input_range")

    def _relu_map(
        self,
        label: str,
        e: E.SOp,
        kind: str,
        form: dict,
        ready: int,
        scale: float,
        inner: E.SOp,
    ) -> Rep:
        """A bounded realisation: the certified piecewise-linear interpolant (ReLU units)."""
        rng = self._map_range(e, inner)
        if rng is None:
            raise UnsupportedError(
                f"{label}: maps='relu' needs the input range of this {kind} map; declare it "
                "with rasp.numerical(x, value_range=(lo, hi)) on its input or pass "
                f"map_ranges={{{self.label(inner)!r}: (lo, hi)}}"
            )
        # relative where f has no zero on the range; maps that reach 0 (gelu, log) stay absolute
        relative = self.map_error == "relative" and (
            kind in approximation.RELATIVE_KINDS and not (kind == "sqrt" and rng[0] <= 0)
        )
        try:
            pl = approximation.fit(
                kind,
                rng[0],
                rng[1],
                tolerance=self.map_tolerance if relative else self.map_tolerance / abs(scale),
                relative=relative,
            )
        except ValueError as exc:
            raise UnsupportedError(f"{label}: {exc}") from None
        stage = mlp_stage(ready)
        d = self.new_dir(label)
        knots, values = list(pl.knots), list(pl.values)
        if kind == "exp":
            # ramp down to exactly 0 one unit below the range: inputs pushed far down (masked
            # scores, say) then give 0, and the error below lo stays within exp(lo)
            knots.insert(0, knots[0] - 1.0)
            values.insert(0, 0.0)
        slopes = [
            (values[k + 1] - values[k]) / (knots[k + 1] - knots[k]) for k in range(len(knots) - 1)
        ]
        # the slope changes at each knot (flat outside the knots)
        deltas = [s1 - s0 for s0, s1 in zip([0.0, *slopes], [*slopes, 0.0])]
        # anchor at the end where f is flatter: inside the range every active unit then adds
        # terms of one sign for convex monotone f (no cancellation, even across a range where
        # f spans many orders of magnitude, such as 1/x on [e^-50, e^50])
        left = abs(slopes[-1]) < abs(slopes[0])
        units = [((NOTBOS, 1.0),)]
        outs = [(values[-1] if left else values[0]) * scale]
        for x_k, delta in zip(knots, deltas):
            if delta == 0.0:
                continue
            if left:  # delta * relu(x_k - x)
                inputs = {k: -c for k, c in form.items()}
                inputs[NOTBOS] = inputs.get(NOTBOS, 0.0) + x_k
            else:  # delta * relu(x - x_k)
                inputs = dict(form)
                inputs[NOTBOS] = inputs.get(NOTBOS, 0.0) - x_k
            units.append(linear_form(inputs))
            outs.append(delta * scale)
        for lf, w in zip(units, outs):
            self.units.append((stage, ReluUnit(self.unit_name(label), lf, ((d, w),))))
        lo = -math.inf if kind == "exp" else rng[0]  # below lo exp stays within exp(lo)
        self.guards.append(Guard(label, linear_form(form), ready, value_range=(lo, rng[1])))
        bound = pl.bound if relative else pl.bound * abs(scale)
        below = (
            f"; below {rng[0]:g}: <= {math.exp(rng[0]) * abs(scale):.3g}" if kind == "exp" else ""
        )
        what = "relative |error|" if relative else "|error|"
        self.realisations.append(
            Realisation(
                label,
                f"{kind} by {len(pl.knots)} ReLU knots on [{rng[0]:g}, {rng[1]:g}]",
                "bounded",
                len(units),
                note=f"{what} <= {bound:.3g} on the range{below}",
                bound=bound,
                relative=relative,
            )
        )
        self.bounds[label] = bound
        return Rep("num", stage, form={d: 1.0})

    def _native(
        self,
        label: str,
        e: E.SOp,
        kind: str,
        form: dict,
        ready: int,
        inner: E.SOp | None = None,
    ) -> Rep:
        scale = 1.0
        if kind == "scaled_reciprocal":
            scale, kind = float(e._op.params[0]), "reciprocal"
        if self.maps == "relu":
            return self._relu_map(
                label, e, kind, form, ready, scale, inner if inner is not None else e.inner
            )
        stage = mlp_stage(ready)
        d = self.new_dir(label)
        unit = NativeUnit(
            self.unit_name(label), kind, linear_form(form), ((NOTBOS, 1.0),), ((d, scale),)
        )
        self.units.append((stage, unit))
        self.realisations.append(Realisation(label, f"{kind} unit", "native", 1))
        return Rep("num", stage, form={d: 1.0})

    def _lookup(self, label: str, e: E.SOp, args: Sequence[E.SOp], num_out: bool) -> Rep:
        """A table over the joint values of categorical arguments (ReLU units)."""
        reps = [self.categorical_rep(a) for a in args]
        ready = max(r.ready for r in reps)
        size = int(np.prod([max(len(r.values), 1) for r in reps]))
        if size > MAX_LOOKUP:
            raise UnsupportedError(
                f"{label}: a lookup table over {size} value combinations is too large "
                f"(limit {MAX_LOOKUP}); reduce the value sets or split the map"
            )
        stage = mlp_stage(ready)
        combos = _product([list(zip(r.values, r.dims)) for r in reps])
        outputs = []
        for combo in combos:
            vals = [v for v, _ in combo]
            outputs.append((combo, _call_function(e, vals)))
        if num_out:
            d = self.new_dir(label)
            rep = Rep("num", stage, form={d: 1.0})
            # a value that is not a number cannot be held: a run-time check raises there, as
            # the interpreter does (guards.py), so its row writes nothing
            out_dim = lambda v: ((d, float(v)),) if is_real(v) and float(v) != 0 else ()
        else:
            out_vals = sort_values(
                dedupe(v for _, v in outputs if v is not None and v is not _FAILED)
            )
            dims = tuple(self.new_dir(f"{label}:{value_text(v)}") for v in out_vals)
            rep = Rep("cat", stage, values=out_vals, dims=dims)
            index = rep.dim_of()
            out_dim = lambda v: ((index[value_key(v)], 1.0),) if v is not None else ()
        n_units = 0
        for combo, out in outputs:
            if out is _FAILED:
                continue
            w = out_dim(out)
            if not w:
                continue
            inputs: dict[str, float] = {}
            for _, arg_dim in combo:
                inputs[arg_dim] = inputs.get(arg_dim, 0.0) + 1.0
            if len(combo) > 1:
                inputs[NOTBOS] = -(len(combo) - 1.0)
            self.units.append((stage, ReluUnit(self.unit_name(label), linear_form(inputs), w)))
            n_units += 1
        self.realisations.append(Realisation(label, "lookup table", "exact", n_units))
        return rep

    def _discretise(
        self,
        label: str,
        form: dict[str, float],
        ready: int,
        in_vals: Sequence[float],
        table: dict | None,
        out_vals: Sequence[Any] | None,
        num_out: bool = False,
        bos_guard: float = 0.0,
    ) -> Rep:
        """A function of a number with finite value set, by ReLU steps between the values.

        ``table`` maps value keys of the inputs to outputs (None: the identity, as a one-hot).
        """
        xs, outs = [], []
        for group in _close_groups(sorted({float(v) for v in in_vals})):
            if table is None:
                got = [_as_number(x) for x in group]
            else:
                got = [table.get(value_key(_as_number(x)), table.get(value_key(x))) for x in group]
            if not _same_outputs(got):
                raise UnsupportedError(
                    f"{label}: its input takes values that differ only by float rounding "
                    f"({group[0]!r} and {group[-1]!r}) but its function gives different "
                    f"results there ({got[0]!r} and {got[-1]!r}); a compiled model computes "
                    "up to float rounding and cannot tell them apart: round the input first "
                    "(for example with a map to round(x, 9)) or give the function results "
                    "that are numbers"
                )
            # values equal up to rounding are one value: steps between them would need a
            # slope of 1/ulp, which amplifies every rounding error of the model
            xs.append(group[0])
            outs.append(got[0])
        stage = mlp_stage(ready)
        if num_out:
            d = self.new_dir(label)
            rep = Rep("num", stage, form={d: 1.0})

            def vec(v):
                return {d: float(v)} if v is not _FAILED and is_real(v) else {}
        else:
            cats = sort_values(dedupe(v for v in outs if v is not None and v is not _FAILED))
            dims = tuple(self.new_dir(f"{label}:{value_text(v)}") for v in cats)
            rep = Rep("cat", stage, values=cats, dims=dims)
            index = rep.dim_of()

            def vec(v):
                return {} if v is None or v is _FAILED else {index[value_key(v)]: 1.0}

        lf = dict(form)
        guard = {BOS: -bos_guard} if bos_guard else {}
        first = vec(outs[0])
        n_units = 0
        if first:
            inputs = {NOTBOS: 1.0}
            self.units.append(
                (stage, ReluUnit(self.unit_name(label), linear_form(inputs), _lf(first)))
            )
            n_units += 1
        for i in range(len(xs) - 1):
            lo, hi = xs[i], xs[i + 1]
            delta = vec_sub(vec(outs[i + 1]), vec(outs[i]))
            if not delta:
                continue
            t = (lo + hi) / 2
            a = 2.0 / (hi - lo)
            base = {k: a * v for k, v in lf.items()}
            up = dict(base)
            up[NOTBOS] = up.get(NOTBOS, 0.0) - a * t + 0.5
            down = dict(base)
            down[NOTBOS] = down.get(NOTBOS, 0.0) - a * t - 0.5
            for g, w in guard.items():
                up[g] = up.get(g, 0.0) + w * a
                down[g] = down.get(g, 0.0) + w * a
            self.units.append((stage, ReluUnit(self.unit_name(label), linear_form(up), _lf(delta))))
            neg = {k: -v for k, v in delta.items()}
            self.units.append((stage, ReluUnit(self.unit_name(label), linear_form(down), _lf(neg))))
            n_units += 2
        self.guards.append(Guard(label, linear_form(form), ready, allowed=tuple(xs)))
        self.realisations.append(Realisation(label, "steps on finite values", "exact", n_units))
        return rep

    # -- sequence maps -------------------------------------------------------------------------
    def _sequence_map(self, e: E.SequenceMap) -> Rep:
        label = self.label(e)
        op = e._op
        kind = op.kind if op is not None else None
        num_out = E.is_numerical(e)
        if num_out and kind == "linear":
            a, b = op.params
            f1, f2 = self.numeric_form(e.sops[0]), self.numeric_form(e.sops[1])
            out = {k: a * v for k, v in f1.items()}
            for k, v in f2.items():
                out[k] = out.get(k, 0.0) + b * v
            ready = max(self.rep(s).ready for s in e.sops)
            self.realisations.append(Realisation(label, "linear (virtual)", "exact", 0))
            return Rep("num", ready, form={k: v for k, v in out.items() if v != 0})
        reps = [self.rep(s) for s in e.sops]
        if num_out and kind == "mul" and len(e.sops) == 2:
            f1, f2 = self.numeric_form(e.sops[0]), self.numeric_form(e.sops[1])
            return self._product(label, f1, f2, max(r.ready for r in reps))
        if num_out and kind == "div" and len(e.sops) == 2:
            f1 = self.numeric_form(e.sops[0])
            den = e.sops[1]
            if reps[1].kind == "cat":
                inv = {}
                for v, d in zip(reps[1].values, reps[1].dims):
                    if v is None or isinstance(v, str):
                        raise UnsupportedError(f"{label}: divides by the value {v!r}")
                    if float(v) != 0.0:
                        inv[d] = 1.0 / float(v)
                return self._product(label, f1, inv, max(r.ready for r in reps))
            recip = self._native(
                self.fresh(f"1/{self.label(den)}"),
                e,
                "reciprocal",
                reps[1].form,
                reps[1].ready,
                inner=den,
            )
            return self._product(label, f1, recip.form, max(reps[0].ready, recip.ready))
        finite = all(self.vi.values(s) is not None for s in e.sops)
        if not num_out and kind == "linear" and finite:
            got = self._linear_categorical(label, e)
            if got is not None:
                return got
        if finite:
            return self._lookup(label, e, e.sops, num_out)
        raise UnsupportedError(
            f"{label}: a sequence map of real-valued S-ops other than +, -, * and /; "
            "give its inputs finite value sets or build it from those operations"
        )

    def _linear_categorical(self, label: str, e: E.SequenceMap) -> Rep | None:
        """``a*x + b*y`` with a one-hot output: a virtual sum, then steps between its values.

        Costs about two units per output value instead of one per argument combination;
        None when a lookup table is smaller or the values are not plain numbers.
        """
        out_vals = self.vi.values(e)
        parts = [self.vi.values(s) for s in e.sops]
        if out_vals is None or not all(_is_num(v) for p in parts + [out_vals] for v in p):
            return None
        if len({float(v) for v in out_vals}) != len(out_vals):
            return None  # 1 and 1.0 both occur: keep the exact types with a table
        if 2 * len(out_vals) + 1 >= int(np.prod([len(p) for p in parts])):
            return None
        a, b = e._op.params
        f1, f2 = self.numeric_form(e.sops[0]), self.numeric_form(e.sops[1])
        form = {k: a * v for k, v in f1.items()}
        for k, v in f2.items():
            form[k] = form.get(k, 0.0) + b * v
        form = {k: v for k, v in form.items() if v != 0}
        ready = max(self.rep(s).ready for s in e.sops)
        table = {}
        for v in out_vals:
            table[value_key(float(v))] = v
            table[value_key(_as_number(float(v)))] = v
        return self._discretise(label, form, ready, [float(v) for v in out_vals], table, out_vals)

    def _product(self, label: str, f1: dict, f2: dict, ready: int) -> Rep:
        stage = mlp_stage(ready)
        d = self.new_dir(label)
        unit = BilinearUnit(self.unit_name(label), linear_form(f1), linear_form(f2), ((d, 1.0),))
        self.units.append((stage, unit))
        self.realisations.append(Realisation(label, "product (bilinear)", "exact", 1))
        return Rep("num", stage, form={d: 1.0})

    # -- selectors -----------------------------------------------------------------------------
    def score(self, sel: E.Selector) -> tuple[tuple, float, int]:
        """``(qk terms, max_score, ready stage)`` of a selector (memoised)."""
        got = self.scores.get(sel.uid)
        if got is None:
            got = self.scores[sel.uid] = self._score(sel)
        return got

    def _score(self, sel: E.Selector) -> tuple[tuple, float, int]:
        if self.vi.is_static(sel):
            return self._static_score(sel)
        if isinstance(sel, E.SelectMax):
            return self._max_score(sel)
        if isinstance(sel, E.SelectorAnd):
            for part in (sel.fst, sel.snd):
                if _contains_select_max(part):
                    raise UnsupportedError(
                        f"{self.label(sel)}: a SelectMax inside a conjunction cannot be "
                        "compiled; put the other selector into its base: "
                        "SelectMax(base & other, score)"
                    )
            t1, m1, r1 = self.score(sel.fst)
            t2, m2, r2 = self.score(sel.snd)
            return t1 + t2, m1 + m2, max(r1, r2)
        if isinstance(sel, E.Select):
            return self._select_score(sel)
        if isinstance(sel, (E.SelectorOr, E.SelectorNot)):
            if _contains_select_max(sel):
                raise UnsupportedError(
                    f"{self.label(sel)}: a SelectMax inside Or/Not cannot be compiled; "
                    "aggregate over the SelectMax itself"
                )
            return self._joint_score(sel)
        raise UnsupportedError(f"{self.label(sel)}: cannot compile {type(sel).__name__}")

    def _max_score(self, sel: E.SelectMax) -> tuple[tuple, float, int]:
        """``G * base + score``: the base selection first, then the largest score.

        With ``|score| <= F`` (declared, checked at run time) and ``G >= 4 (F + 1)``, a key
        the base selects outscores every key it does not select and BOS (which scores
        ``G (max_score - 1/2)`` and so still wins when the base selects nothing); among the
        selected keys the score decides. ``G`` is a power of two, so scaling the base
        scores (integers on integer features) adds no rounding.
        """
        label = self.label(sel)
        if _contains_select_max(sel.base):
            raise UnsupportedError(
                f"{label}: a SelectMax whose base holds another SelectMax cannot be compiled; "
                "take the maximum of a combined score instead"
            )
        rng = E.value_range(sel.score)
        if rng is None:
            raise UnsupportedError(
                f"{label}: SelectMax needs a declared bound on its score "
                f"{self.label(sel.score)!r} to choose the gain of its head; declare it with "
                "rasp.numerical(score, value_range=(lo, hi)) (checked at run time)"
            )
        lo, hi = rng
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise UnsupportedError(
                f"{label}: the declared score range ({lo:g}, {hi:g}) of SelectMax must be "
                "finite; declare finite bounds with rasp.numerical(score, value_range=...)"
            )
        terms, max_score, base_ready = self.score(sel.base)
        form = self.numeric_form(sel.score)
        ready = max(base_ready, self.rep(sel.score).ready)
        # a score with a known finite value set is stretched so that distinct values lie at
        # least 1 apart, beyond the head's tolerance: the head then picks exactly the keys
        # holding the maximum
        values = self.vi.values(sel.score)
        stretch = 1.0
        if values is not None and len(values) > 1:
            gap = _min_gap([float(v) for v in values])
            if 0.0 < gap < 1.0:
                stretch = 2.0 ** math.ceil(math.log2(1.0 / gap))
        bound = max(abs(lo), abs(hi)) * stretch
        gain = 2.0 ** math.ceil(math.log2(4.0 * (bound + 1.0)))
        scaled = tuple((q, k, gain * w) for q, k, w in terms)
        scaled += tuple((NOTBOS, k, stretch * c) for k, c in form.items() if c != 0.0)
        exact = values is not None
        self.gains[sel.uid] = gain
        self.guards.append(
            Guard(self.label(sel.score), linear_form(form), self.rep(sel.score).ready,
                  value_range=(lo, hi))
        )  # fmt: skip
        self.realisations.append(
            Realisation(
                label,
                f"max by one head: score {gain:g} * base + {stretch:g} * {self.label(sel.score)}",
                "exact" if exact else "bounded",
                0,
                note=(
                    "the score's values are known and at least 1 apart once stretched: the "
                    "head selects exactly the keys holding the maximum"
                    if exact
                    else "hard attention averages the keys within its tolerance (0.25) of the "
                    "largest score, softmax weights them by exp(beta * score): the mean of the "
                    "score over it is within that of the row maximum (exact for scores apart "
                    "by more than the tolerance)"
                )
                + "; the score range is checked at run time",
            )
        )
        return scaled, gain * max_score, ready

    def _static_score(self, sel: E.Selector) -> tuple[tuple, float, int]:
        if (
            isinstance(sel, E.Select)
            and sel.predicate is E.Comparison.EQ
            and _integer_valued(self.vi.static_values(sel.keys))
            and _integer_valued(self.vi.static_values(sel.queries))
        ):
            fq = self.numeric_static(sel.queries)
            fk = self.numeric_static(sel.keys)
            sq = self.static_square(sel.queries)
            sk = self.static_square(sel.keys)
            return self._quadratic(fq, sq, fk, sk, 1.0), 1.0, 0
        m = self.vi.static_matrix(sel)
        for i in range(self.L):
            self.position_dir(i)
        terms = tuple((f"pos:{q}", f"pos:{k}", 1.0) for q, k in zip(*np.nonzero(m)))
        return terms, 1.0, 0

    def position_dir(self, i: int) -> str:
        d = f"pos:{i}"
        if d not in self.static_embed:
            self.new_dir(d)
            arr = np.zeros(self.L)
            arr[i] = 1.0
            self.static_embed[d] = arr
        return d

    def numeric_static(self, e: E.SOp) -> dict[str, float]:
        key = f"{self.label(e)}@num"
        if key not in self.static_embed:
            self.new_dir(key)
            self.static_embed[key] = np.asarray(
                [float(v) for v in self.vi.static_values(e)], dtype=np.float64
            )
        return {key: 1.0}

    def static_square(self, e: E.SOp) -> str:
        key = f"{self.label(e)}@num^2"
        if key not in self.static_embed:
            self.new_dir(key)
            vals = np.asarray([float(v) for v in self.vi.static_values(e)], dtype=np.float64)
            self.static_embed[key] = vals * vals
        return key

    def _quadratic(self, fq: dict, sq: str, fk: dict, sk: str, scale: float) -> tuple:
        """Scores ``1 - scale * (q - k)^2`` (0 when the key or the query is BOS)."""
        terms = []
        for qd, qa in fq.items():
            for kd, kb in fk.items():
                terms.append((qd, kd, 2.0 * scale * qa * kb))
        terms.append((sq, NOTBOS, -scale))
        terms.append((NOTBOS, sk, -scale))
        terms.append((NOTBOS, NOTBOS, 1.0))
        return tuple(terms)

    def _select_score(self, sel: E.Select) -> tuple[tuple, float, int]:
        pred = sel.predicate
        # TRUE and FALSE read neither side (``length`` works with real-valued tokens)
        if pred is E.Comparison.TRUE:
            return ((NOTBOS, NOTBOS, 1.0),), 1.0, 0
        if pred is E.Comparison.FALSE:
            return (), 1.0, 0
        kr, qr = self.rep(sel.keys), self.rep(sel.queries)
        if kr.kind == "cat" and qr.kind == "cat":
            return self._table_score(sel.keys, sel.queries, pred)
        kvals, qvals = self.vi.values(sel.keys), self.vi.values(sel.queries)
        if pred is E.Comparison.EQ:
            fk, fq = self.numeric_form(sel.keys), self.numeric_form(sel.queries)
            both = [v for v in (kvals or ()) + (qvals or ()) if v is not None]
            gap = _min_gap(both) if kvals is not None and qvals is not None else 1.0
            if kvals is None or qvals is None:
                for s, f, r in ((sel.keys, fk, kr), (sel.queries, fq, qr)):
                    if self.vi.values(s) is None:
                        self.guards.append(
                            Guard(self.label(s), linear_form(f), r.ready, integer=True)
                        )
            scale = 1.0 / (gap * gap)
            for const_side in ("queries", "keys"):
                c = self._constant(getattr(sel, const_side))
                if c is None:
                    continue
                # one side is a constant c: 1 - s (c - x)^2 reads x and x^2 on the other
                # side against notbos only (no directions for the constant side)
                if const_side == "queries":
                    sx, rx = self._square_of(sel.keys, fk, kr.ready)
                    lin = tuple((NOTBOS, d, 2.0 * scale * c * w) for d, w in fk.items())
                    sq_t = ((NOTBOS, sx, -scale),)
                else:
                    sx, rx = self._square_of(sel.queries, fq, qr.ready)
                    lin = tuple((d, NOTBOS, 2.0 * scale * c * w) for d, w in fq.items())
                    sq_t = ((sx, NOTBOS, -scale),)
                terms = tuple(t for t in lin if t[2] != 0.0) + sq_t
                terms += ((NOTBOS, NOTBOS, 1.0 - scale * c * c),)
                return terms, 1.0, rx
            sk, rk = self._square_of(sel.keys, fk, kr.ready)
            sq, rq = self._square_of(sel.queries, fq, qr.ready)
            terms = self._quadratic(fq, sq, fk, sk, scale)
            return terms, 1.0, max(rk, rq)
        if kvals is not None and qvals is not None:
            return self._table_score(sel.keys, sel.queries, pred)
        raise UnsupportedError(
            f"{self.label(sel)}: compares real-valued S-ops with {_pred_name(pred)}; only "
            "EQ (on integer values) is supported for S-ops without a finite value set"
        )

    def _constant(self, e: E.SOp) -> float | None:
        """The value of a static S-op that is the same number at every position, else None."""
        if not self.vi.is_static(e):
            return None
        vals = self.vi.static_values(e)
        if not vals or not all(_is_num(v) for v in vals):
            return None
        first = float(vals[0])
        return first if all(float(v) == first for v in vals) else None

    def _square_of(self, e: E.SOp, form: dict, ready: int) -> tuple[str, int]:
        if self.vi.is_static(e):
            return self.static_square(e), 0
        return self.square(form, ready, self.label(e))

    def _table_score(self, keys: E.SOp, queries: E.SOp, pred: Any) -> tuple[tuple, float, int]:
        kr, qr = self.categorical_rep(keys), self.categorical_rep(queries)
        if len(kr.values) * len(qr.values) > MAX_LOOKUP * 20:
            raise UnsupportedError(
                f"a selector table over {len(qr.values)} x {len(kr.values)} values is too "
                "large; reduce the value sets of its keys and queries"
            )
        m = pred_matrix(pred, qr.values, kr.values)  # [query value, key value]
        qi, ki = np.nonzero(m)
        terms = tuple((qr.dims[i], kr.dims[j], 1.0) for i, j in zip(qi.tolist(), ki.tolist()))
        return terms, 1.0, max(kr.ready, qr.ready)

    def _joint_score(self, sel: E.Selector) -> tuple[tuple, float, int]:
        leaves: list[E.Select] = []
        _collect_leaves(sel, leaves)
        keys = _unique([s.keys for s in leaves])
        queries = _unique([s.queries for s in leaves])
        # the joint keys and queries get names of the selector's, so that the directions
        # they own are the same in every compile
        name = self.label(sel)
        kj = (
            keys[0]
            if len(keys) == 1
            else E.SequenceMap(lambda *a: tuple(a), *keys).named(f"{name}@keys")
        )
        qj = (
            queries[0]
            if len(queries) == 1
            else E.SequenceMap(lambda *a: tuple(a), *queries).named(f"{name}@queries")
        )
        kpos = {s.uid: i for i, s in enumerate(keys)}
        qpos = {s.uid: i for i, s in enumerate(queries)}
        kr, qr = self.categorical_rep(kj), self.categorical_rep(qj)
        if len(kr.values) * len(qr.values) > MAX_LOOKUP * 20:
            raise UnsupportedError(
                f"a selector table over {len(qr.values)} x {len(kr.values)} values is too "
                "large; reduce the value sets of its keys and queries"
            )
        kts = [k if len(keys) > 1 else (k,) for k in kr.values]
        qts = [q if len(queries) > 1 else (q,) for q in qr.values]
        m = _selector_matrix(sel, qts, kts, qpos, kpos)  # [query value, key value]
        qi, ki = np.nonzero(m)
        terms = tuple((qr.dims[i], kr.dims[j], 1.0) for i, j in zip(qi.tolist(), ki.tolist()))
        return terms, 1.0, max(kr.ready, qr.ready)

    # -- aggregation ---------------------------------------------------------------------------
    def _aggregate(self, e: E.Aggregate) -> Rep:
        label = self.label(e)
        if (
            isinstance(e.selector, E.SelectMax)
            and self.vi.values(e.selector.score) is None
            and (
                e.sop.uid != e.selector.score.uid or not E.is_numerical(e) or e.reduction != "mean"
            )
        ):
            # a real-valued score: the head averages every key whose score is within its
            # tolerance of the maximum; the mean of the score itself is then within that
            # tolerance of the maximum, but any other value would be averaged over near-ties
            # the interpreter tells apart
            raise UnsupportedError(
                f"{label}: over a SelectMax whose score {self.label(e.selector.score)!r} is "
                "real-valued, only the numerical mean of that score (the row maximum) can be "
                "compiled; the head averages the keys whose scores lie within its tolerance "
                "(0.25) of the maximum, so another value would be averaged over near-ties. "
                "Aggregate the score itself, or give the score a finite set of values (a "
                "finite vocabulary) so that the compiler can separate them"
            )
        terms, max_score, sel_ready = self.score(e.selector)
        numeric = E.is_numerical(e) or e.reduction == "sum"
        if numeric:
            vform = self.numeric_form(e.sop)
            vready = self.rep(e.sop).ready
        else:
            vrep = self.categorical_rep(e.sop)
            vready = vrep.ready
        stage = attn_stage(max(sel_ready, vready))
        default = e.default
        if numeric:
            d = self.new_dir(label if e.reduction == "mean" else f"{label}@mean")
            ov = tuple((k, d, v) for k, v in vform.items())
            rep = Rep("num", stage, form={d: 1.0})
        else:
            dims = tuple(self.new_dir(f"{label}:{value_text(v)}") for v in vrep.values)
            ov = tuple((src, dst, 1.0) for src, dst in zip(vrep.dims, dims))
            rep = Rep("cat", stage, values=vrep.values, dims=dims)
        flag = None
        has_default = (numeric and default not in (None, 0, 0.0)) or (
            not numeric and default is not None
        )
        if has_default:
            flag = self.new_dir(self.fresh(f"{label}@empty"))
            ov = ov + ((BOS, flag, 1.0),)
        gain = self.gains.get(e.selector.uid, 1.0)
        self.heads.append((stage, self._head(label, terms, ov, "mean", max_score, gain)))
        if e.reduction == "sum":
            rep = self._sum_from_mean(e, label, rep)
        if has_default:
            rep = self._apply_default(label, rep, flag, stage, default, numeric)
        return rep

    def _head(
        self, label: str, terms: tuple, ov: tuple, mode: str, max_score: float, gain: float = 1.0
    ) -> Head:
        # BOS: half a (scaled) unit below a selected key, so it wins only when none is
        bos = max_score - 0.5 * gain if mode == "mean" else max_score
        qk = terms + ((NOTBOS, BOS, bos), (BOS, BOS, BIG))
        return Head(label, qk, ov, mode, max_score)

    def _apply_default(
        self, label: str, rep: Rep, flag: str, stage: int, default: Any, numeric: bool
    ) -> Rep:
        """Adds the default where nothing was selected: ``flag * notbos`` (bilinear)."""
        mstage = mlp_stage(stage)
        if numeric:
            d = self.new_dir(self.fresh(f"{label}@default"))
            out = ((d, float(default)),)
            unit = BilinearUnit(self.unit_name(label), ((flag, 1.0),), ((NOTBOS, 1.0),), out)
            self.units.append((mstage, unit))
            form = dict(rep.form)
            form[d] = 1.0
            # a sum is ready only after its product (a later MLP than the default's)
            return Rep("num", max(rep.ready, mstage), form=form)
        values = rep.values
        dims = rep.dims
        # 0 and 0.0 are different RASP values (the interpreter keeps them apart too)
        if not any(value_key(v) == value_key(default) for v in values):
            values = values + (default,)
            dims = dims + (self.new_dir(f"{label}:{value_text(default)}"),)
        index = {value_key(v): d for v, d in zip(values, dims)}
        out = ((index[value_key(default)], 1.0),)
        unit = BilinearUnit(self.unit_name(label), ((flag, 1.0),), ((NOTBOS, 1.0),), out)
        self.units.append((mstage, unit))
        return Rep("cat", max(rep.ready, mstage), values=values, dims=dims)

    def _sum_from_mean(self, e: E.Aggregate, label: str, mean: Rep) -> Rep:
        sel = e.selector
        if self.vi.is_static(sel) and (self.vi.fixed_length or self.vi.causal):
            m = self.vi.static_matrix(sel)
            counts = m.sum(axis=1).astype(np.float64)
            nonzero = counts[counts > 0]
            # a query that selects nothing has mean 0 (the default), so any one scale fits it
            if len(nonzero) == 0 or np.all(nonzero == nonzero[0]):
                c = float(nonzero[0]) if len(nonzero) else 0.0
                form = {k: v * c for k, v in mean.form.items()}
                self.realisations.append(Realisation(label, "sum (static count)", "exact", 0))
                return Rep("num", mean.ready, form=form)
            cd = self.new_dir(self.fresh(f"{label}@count"))
            self.static_embed[cd] = counts
            self.realisations.append(Realisation(label, "sum (mean x count)", "exact", 1))
            return self._product(self.fresh(label), mean.form, {cd: 1.0}, mean.ready)
        width = E.numerical(E.SelectorWidth(sel)).named(f"{label}@width")
        wrep = self.rep(width)
        self.realisations.append(Realisation(label, "sum (mean x width)", "exact", 1))
        return self._product(self.fresh(label), mean.form, wrep.form, max(mean.ready, wrep.ready))

    def _selector_width(self, e: E.SelectorWidth) -> Rep:
        label = self.label(e)
        if _contains_select_max(e.selector):
            raise UnsupportedError(
                f"{label}: the width (or a sum aggregate) of a SelectMax cannot be compiled: "
                "its head cannot count the tied keys; use a mean Aggregate over it"
            )
        terms, max_score, ready = self.score(e.selector)
        stage = attn_stage(ready)
        r = self.new_dir(self.fresh(f"{label}@inv"))
        self.heads.append((stage, self._head(label, terms, ((BOS, r, 1.0),), "width", max_score)))
        # the head reads 1/(w+1); steps between those values give w (gated off at BOS)
        ws = list(range(self.L + 1))
        in_vals = [1.0 / (w + 1) for w in ws]
        table = {value_key(1.0 / (w + 1)): w for w in ws}
        return self._discretise(
            label,
            {r: 1.0},
            stage,
            in_vals,
            table,
            None,
            num_out=E.is_numerical(e),
            bos_guard=2.0,  # the head reads 1 at BOS; this keeps every step off there
        )


# -- small helpers ---------------------------------------------------------------------------

_FAILED = object()


def _apply(f: Any, *args: Any) -> Any:
    if any(a is None for a in args):
        return None
    try:
        return f(*args)
    except Exception:
        return _FAILED


def _call_function(e: E.Map | E.SequenceMap, args: Sequence[Any]) -> Any:
    """The function of a map on input values as the interpreter calls it (``_FAILED`` where
    it raises, None where an input is None)."""
    if any(a is None for a in args):
        return None
    try:
        return call_function(e, args)
    except Exception:
        return _FAILED


def _same(a: Any, b: Any) -> bool:
    return value_key(a) == value_key(b) or (_is_num(a) and _is_num(b) and float(a) == float(b))


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _close_groups(xs: list[float]) -> list[list[float]]:
    """Sorted values grouped where neighbours differ by float rounding only (1e-9 relative)."""
    groups: list[list[float]] = []
    for x in xs:
        if groups and x - groups[-1][0] <= 1e-9 * max(1.0, abs(x)):
            groups[-1].append(x)
        else:
            groups.append([x])
    return groups


def _same_outputs(outs: list) -> bool:
    """Whether a function's results on values equal up to rounding agree (numbers: up to
    rounding too)."""
    first = outs[0]
    for o in outs[1:]:
        hashable = I.is_hashable(o) and I.is_hashable(first)
        if value_key(o) == value_key(first) if hashable else o is first:
            continue
        if _is_num(o) and _is_num(first) and math.isclose(o, first, rel_tol=1e-9, abs_tol=1e-12):
            continue
        return False
    return True


def is_real(v: Any) -> bool:
    """A value a numerical S-op can hold (bools count as 0 and 1, as in the interpreter)."""
    if v is None or isinstance(v, (str, bytes)):
        return False
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return True


def _as_number(x: float) -> Any:
    return int(x) if float(x).is_integer() else x


def _lf(d: dict) -> tuple:
    return linear_form(d)


def vec_sub(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0.0) - v
    return {k: v for k, v in out.items() if v != 0}


def _product(lists: list[list]) -> list[tuple]:
    out: list[tuple] = [()]
    for items in lists:
        out = [o + (it,) for o in out for it in items]
    return out


def _integer_valued(vals: Sequence[Any]) -> bool:
    try:
        return all(v is not None and float(v).is_integer() for v in vals)
    except (TypeError, ValueError):
        return False


def _min_gap(vals: Sequence[Any]) -> float:
    xs = sorted({float(v) for v in vals})
    gaps = [b - a for a, b in zip(xs, xs[1:])]
    return min(gaps) if gaps else 1.0


def _pred_name(pred: Any) -> str:
    return pred.name if isinstance(pred, E.Comparison) else getattr(pred, "__name__", "a function")


def _contains_select_max(sel: E.Selector) -> bool:
    """Whether a selector is, or combines, a SelectMax."""
    if isinstance(sel, E.SelectMax):
        return True
    return any(isinstance(c, E.Selector) and _contains_select_max(c) for c in sel.children)


def _collect_leaves(sel: E.Selector, out: list) -> None:
    if isinstance(sel, E.Select):
        out.append(sel)
        return
    if isinstance(sel, E.ConstantSelector):
        raise UnsupportedError("a ConstantSelector inside a dynamic Or/Not is not supported")
    for c in sel.children:
        _collect_leaves(c, out)


def _unique(sops: list[E.SOp]) -> list[E.SOp]:
    seen: set[int] = set()
    out = []
    for s in sops:
        if s.uid not in seen:
            seen.add(s.uid)
            out.append(s)
    return out


def pred_matrix(pred: Any, qvals: Sequence[Any], kvals: Sequence[Any]) -> np.ndarray:
    """``m[i, j] = pred(kvals[j], qvals[i])`` as booleans (False where it fails or is None)."""
    nq, nk = len(qvals), len(kvals)
    if (
        isinstance(pred, E.Comparison)
        and nq
        and nk
        and all(_is_num(v) for v in qvals)
        and all(_is_num(v) for v in kvals)
    ):
        q = np.asarray([float(v) for v in qvals])[:, None]
        k = np.asarray([float(v) for v in kvals])[None, :]
        return np.asarray(pred.numpy_fn(k, q), dtype=bool).reshape(nq, nk)
    m = np.zeros((nq, nk), dtype=bool)
    for i, qv in enumerate(qvals):
        for j, kv in enumerate(kvals):
            r = _apply(pred, kv, qv)
            m[i, j] = r is not _FAILED and r is not None and bool(r)
    return m


def _selector_matrix(
    sel: E.Selector, qts: list[tuple], kts: list[tuple], qpos: dict, kpos: dict
) -> np.ndarray:
    """The selector on joint values: ``m[i, j]`` for query tuple i and key tuple j."""
    if isinstance(sel, E.Select):
        qcol = [t[qpos[sel.queries.uid]] for t in qts]
        kcol = [t[kpos[sel.keys.uid]] for t in kts]
        # evaluate the predicate once per distinct pair of component values
        qd, qidx = _codes(qcol)
        kd, kidx = _codes(kcol)
        return pred_matrix(sel.predicate, qd, kd)[np.ix_(qidx, kidx)]
    if isinstance(sel, E.SelectorAnd):
        return _selector_matrix(sel.fst, qts, kts, qpos, kpos) & _selector_matrix(
            sel.snd, qts, kts, qpos, kpos
        )
    if isinstance(sel, E.SelectorOr):
        return _selector_matrix(sel.fst, qts, kts, qpos, kpos) | _selector_matrix(
            sel.snd, qts, kts, qpos, kpos
        )
    if isinstance(sel, E.SelectorNot):
        return ~_selector_matrix(sel.inner, qts, kts, qpos, kpos)
    raise UnsupportedError(f"cannot compile {type(sel).__name__} inside Or/Not")


def _codes(values: list) -> tuple[list, np.ndarray]:
    """Distinct values (first-seen order) and each value's index among them."""
    index: dict[tuple, int] = {}
    distinct: list = []
    codes = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        key = value_key(v)
        c = index.get(key)
        if c is None:
            c = index[key] = len(distinct)
            distinct.append(v)
        codes[i] = c
    return distinct, codes


__all__ = ["Lowerer", "Rep", "Guard", "Realisation", "UnsupportedError", "math"]
