"""Stage 2, value inference: which values each S-op can take, and which are static.

An S-op is *static* when it depends only on positions and constants (``indices``, ``Full``,
``ConstantSOp``, maps of those; ``length`` too when the input length is fixed): the compiler
computes it for every position at compile time and writes it into the positional embedding.

The value set of an S-op is a tuple of distinct values, or None when it is not finite or
not known (real-valued S-ops such as matrix entries): lowering then picks a realisation that
needs no enumeration (linear, bilinear, native or ReLU units).

>>> from attnsim import rasp
>>> vi = ValueInference(vocab=("a", "b"), max_seq_len=4, causal=False, fixed_length=False)
>>> vi.values(rasp.indices + 1)
(1, 2, 3, 4)
>>> vi.is_static(rasp.indices + 1), vi.is_static(rasp.tokens)
(True, False)
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from attnsim.compiler import static_tables, tracing
from attnsim.compiler.functions import (  # noqa: F401 - call_function, as_read: read here
    UnhashableResultError,
    as_read,
    call_function,
    safe_map,
)
from attnsim.compiler.functions import is_number_or_bool as _is_number
from attnsim.compiler.options import CompileOptions
from attnsim.compiler.vocab import _finite_value, check_vocab  # noqa: F401 - check_vocab: API
from attnsim.rasp import expr as E
from attnsim.rasp import interpret as I
from attnsim.values import (
    as_truth,
    brief,
    distinct,
    distinct_floats,
    distinct_numbers,
    fits_float,
    one_orderable_kind,
)

MAX_TABLE = 20_000  # the most argument combinations a map is enumerated on
MAX_LINEAR_TABLE = 1_000_000  # the most value pairs a linear map of two S-ops is summed on
MAX_MEAN_VALUES = 200_000  # the most candidate values of a numerical mean or sum


def dedupe(values) -> tuple:
    """Distinct values, first-seen order (True, 1 and 1.0 kept apart, and -0.0 and 0.0).

    >>> dedupe([1, True, 1.0, 1, -0.0, 0.0])
    (1, True, 1.0, -0.0, 0.0)
    """
    return tuple(distinct(values))


def sort_values(values: Sequence[Any]) -> tuple:
    """Values in a stable order (sorted where comparable, else by repr)."""
    try:
        return tuple(sorted(values))
    except TypeError:
        return tuple(sorted(values, key=repr))


class ValueInference:
    """Answers, on demand and memoised, what values and staticness each expression has.

    Args:
        vocab: the token vocabulary, or None for real-valued (numerical) tokens.
        max_seq_len: the longest input.
        causal: whether the model is causal (changes ``length`` and selector widths).
        fixed_length: inputs always have exactly ``max_seq_len`` tokens.
    """

    def __init__(
        self, vocab: Sequence[Any] | None, max_seq_len: int, causal: bool, fixed_length: bool
    ) -> None:
        self.vocab = None if vocab is None else dedupe(vocab)
        self.L = max_seq_len
        self.causal = causal
        self.fixed_length = fixed_length
        self._static: dict[int, bool] = {}
        self._values: dict[int, tuple | None] = {}
        self._none: dict[int, bool] = {}
        self._kinds: dict[int, str | None] = {}
        self._integer: dict[int, bool] = {}
        self._evaluator_obj: I._Evaluator | None = None

    @property
    def _evaluator(self) -> I._Evaluator:
        # made on first use: a program without static S-ops never needs it
        if self._evaluator_obj is None:
            self._evaluator_obj = I._Evaluator(np.zeros((1, self.L)), causal=self.causal)
        return self._evaluator_obj

    # -- static --------------------------------------------------------------------------
    def is_static(self, e: E.RASPExpr) -> bool:
        if e.uid not in self._static:
            self._static[e.uid] = self._compute_static(e)
        return self._static[e.uid]

    def _compute_static(self, e: E.RASPExpr) -> bool:
        if isinstance(e, (E.IndicesType, E.Full, E.ConstantSOp, E.ConstantSelector)):
            return True
        if isinstance(e, E.LengthType):
            return self.fixed_length or self.causal
        if isinstance(e, E.TokensType):
            return False
        if isinstance(e, (E.Aggregate,)):
            return False
        if isinstance(e, E.SelectMax):
            # which keys hold the maximum depends on which keys exist: static only when every
            # key a query could see exists (causal, or a fixed input length)
            return (self.fixed_length or self.causal) and all(self.is_static(c) for c in e.children)
        if isinstance(e, E.SelectorWidth):
            # the count over a static selector is static when every key a query could
            # select exists: in causal mode, or with a fixed input length
            return (self.fixed_length or self.causal) and self.is_static(e.selector)
        return all(self.is_static(c) for c in e.children)

    def static_values(self, e: E.RASPExpr) -> list:
        """The value at each position 0..max_seq_len-1 of a static S-op."""
        val = self.static_array(e)
        return val.tolist() if isinstance(val, np.ndarray) else list(val.to_objects()[0])

    def static_array(self, e: E.RASPExpr) -> np.ndarray | I.Cat:
        """A static S-op at full length: float64 ``[L]`` (the evaluator's own) or a Cat."""
        assert self.is_static(e), e
        if (col := static_tables.column(e, self.L)) is not None:  # a sparse table: dense
            return static_tables.dense(col, self.L)  # for the caller alone (not memoised)
        tracing.check_masks(e, self._evaluator.memo, self.L)  # refuses masks that cannot fit
        val = self._evaluator.eval(e)
        return np.asarray(val[0], dtype=np.float64) if isinstance(val, np.ndarray) else val

    def static_counts(self, sel: E.Selector) -> np.ndarray:
        """Keys selected per query of a static selector at full length, ``[pos]``; an
        equality of two static numbers is counted by value, without ``[query, key]``.

        >>> from attnsim import rasp
        >>> from attnsim.compiler import options, tracing
        >>> sel = rasp.Select(rasp.indices, rasp.indices // 2, rasp.Comparison.EQ)
        >>> opts = options.resolve(None, {"fixed_length": True})
        >>> infer(tracing.trace(rasp.SelectorWidth(sel)), ["a"], 4, opts).static_counts(sel)
        array([1, 1, 1, 1])
        """
        assert self.is_static(sel), sel
        if (
            isinstance(sel, E.Select)
            and sel.predicate is E.Comparison.EQ
            and not self.causal
            and E.is_numerical(sel.keys) == E.is_numerical(sel.queries)
        ):
            kv, qv = self.static_array(sel.keys), self.static_array(sel.queries)
            if not isinstance(kv, np.ndarray):  # categorical: numbers only
                keys, queries = self.static_values(sel.keys), self.static_values(sel.queries)
                ok = one_orderable_kind(keys + queries) and isinstance(keys[0], (int, float))
                kv = np.asarray(keys, dtype=np.float64) if ok else None
                qv = np.asarray(queries, dtype=np.float64) if ok else None
            if kv is not None and not (np.isnan(kv).any() or np.isnan(qv).any()):
                uniq, counts = np.unique(kv, return_counts=True)
                at = np.clip(np.searchsorted(uniq, qv), 0, len(uniq) - 1)
                return np.where(uniq[at] == qv, counts[at], 0).astype(np.int64)
        return self.static_matrix(sel).sum(axis=-1)

    def static_matrix(self, sel: E.Selector) -> np.ndarray:
        """The selection matrix ``[query, key]`` of a static selector at full length."""
        assert self.is_static(sel), sel
        tracing.check_masks(sel, self._evaluator.memo, self.L)
        return np.asarray(self._evaluator.eval(sel)[0], dtype=bool)

    # -- values ------------------------------------------------------------------------------
    def values(self, e: E.SOp) -> tuple | None:
        if e.uid not in self._values:
            self._values[e.uid] = self._compute_values(e)
        return self._values[e.uid]

    def _compute_values(self, e: E.SOp) -> tuple | None:
        num = E.is_numerical(e)
        if (col := static_tables.column(e, self.L)) is not None:  # a sparse table (not dense)
            return distinct_floats(static_tables.first_seen(col))
        if self.is_static(e):
            arr = self.static_array(e)
            if num and isinstance(arr, np.ndarray):
                return distinct_floats(arr)
            vals = self.static_values(e)
            return distinct_numbers(vals) if num else dedupe(vals)
        if isinstance(e, E.TokenChannel):
            return None  # real numbers: unknown values
        if isinstance(e, E.TokensType):
            if self.vocab is None:
                return None
            if num and not all(_is_number(v) and fits_float(v) for v in self.vocab):
                return None  # program_errors names the token that is not a float
            return distinct_numbers(self.vocab) if num else self.vocab
        if isinstance(e, E.LengthType):
            vals = tuple(range(1, self.L + 1))
        elif isinstance(e, E.SelectorWidth):
            vals = tuple(range(0, self.L + 1))
        elif isinstance(e, E.Map):
            inner = self.values(e.inner)
            if inner is None:
                return None
            vals = dedupe(safe_map(e, [(v,) for v in inner]))
        elif isinstance(e, E.SequenceMap):
            linear = e._op is not None and e._op.kind == "linear"
            if linear and num:
                got = self._same_selector_means(e)
                if got is not None:
                    return got
            parts = [self.values(s) for s in e.sops]
            if any(p is None for p in parts):
                return None
            size = int(np.prod([len(p) for p in parts]))
            if linear and size <= MAX_LINEAR_TABLE and _all_numbers(parts):
                # a*x + b*y over all pairs, vectorised (the values of sums of real S-ops)
                a, b = e._op.params
                xs = np.add.outer(a * np.asarray(parts[0], float), b * np.asarray(parts[1], float))
                if num:
                    return tuple(float(v) for v in np.unique(xs))
            if size > MAX_TABLE:
                return None
            vals = dedupe(safe_map(e, itertools.product(*parts)))
        elif isinstance(e, E.Aggregate):
            vals = self._aggregate_values(e)
            if vals is None:
                return None
            if not num and e.reduction == "sum":
                # a categorical sum is computed on floats and read back as the interpreter
                # reads a numerical array: integer-valued floats become ints
                vals = dedupe(as_read(v) for v in vals)
        else:
            return None
        if num:
            try:
                return distinct_numbers(v for v in vals if v is not None)
            except (TypeError, ValueError, OverflowError):
                return None
        return vals

    def integer_valued(self, e: E.SOp) -> bool:
        """Whether every value of ``e`` is a finite integer-valued number (None or a string:
        not; no value set: not); kept per S-op.

        >>> from attnsim import rasp
        >>> vi = ValueInference(vocab=("a",), max_seq_len=3, causal=False, fixed_length=False)
        >>> vi.integer_valued(rasp.indices + 1), vi.integer_valued(rasp.tokens)
        (True, False)
        """
        if e.uid not in self._integer:
            vals = self.values(e)
            ok = vals is not None
            if ok:
                try:
                    arr = np.asarray(vals, dtype=np.float64)
                except (TypeError, ValueError):
                    ok = False
                else:
                    ok = bool(np.all(np.isfinite(arr) & (arr == np.floor(arr))))
            self._integer[e.uid] = ok
        return self._integer[e.uid]

    def orderable_kind(self, e: E.SOp) -> str | None:
        """ "number" when every value of ``e`` (None left out) is a number and none is NaN,
        "string" when every one is a string, else None (or no value set); kept per S-op.

        >>> from attnsim import rasp
        >>> vi = ValueInference(vocab=("a",), max_seq_len=3, causal=False, fixed_length=False)
        >>> vi.orderable_kind(rasp.indices), vi.orderable_kind(rasp.tokens)
        ('number', 'string')
        """
        if e.uid not in self._kinds:
            vals = self.values(e)
            vals = None if vals is None else [v for v in vals if v is not None]
            kind = None
            if vals is not None and one_orderable_kind(vals):
                kind = "string" if vals and isinstance(vals[0], str) else "number"
            self._kinds[e.uid] = kind
        return self._kinds[e.uid]

    # -- None ("no value") ------------------------------------------------------------------
    def may_be_none(self, e: E.SOp) -> bool:
        """Whether a categorical S-op can hold None (no value) at some position.

        None enters through a categorical Aggregate without a default (an empty selection)
        and through functions that return None; a compiled model carries it as the zero
        vector and never calls a function on it. Numerical S-ops never hold None.

        >>> from attnsim import rasp
        >>> vi = ValueInference(vocab=("a", "b"), max_seq_len=4, causal=False, fixed_length=False)
        >>> sel = rasp.Select(rasp.indices, rasp.indices - 1, rasp.Comparison.EQ)
        >>> vi.may_be_none(rasp.tokens), vi.may_be_none(rasp.Aggregate(sel, rasp.tokens))
        (False, True)
        """
        if e.uid not in self._none:
            self._none[e.uid] = self._compute_none(e)
        return self._none[e.uid]

    def _compute_none(self, e: E.SOp) -> bool:
        if E.is_numerical(e):
            return False
        if self.is_static(e):
            return any(v is None for v in self.static_values(e))
        if isinstance(e, E.Aggregate):
            return e.reduction == "mean" and (e.default is None or self.may_be_none(e.sop))
        if isinstance(e, (E.Map, E.SequenceMap)):
            vals = self.values(e)
            inputs = [e.inner] if isinstance(e, E.Map) else list(e.sops)
            return (
                vals is None
                or any(v is None for v in vals)
                or any(self.may_be_none(s) for s in inputs)
            )
        return False

    def _aggregate_values(self, e: E.Aggregate) -> tuple | None:
        inner = self.values(e.sop)
        if inner is None:
            return None
        numeric = E.is_numerical(e) or e.reduction == "sum"
        if not numeric:
            return dedupe(list(inner) + ([e.default] if e.default is not None else []))
        return self._mean_values(inner, e.reduction, e.default)

    def _mean_values(self, inner: Sequence[Any], reduction: str, default: Any) -> tuple | None:
        """Every mean (or sum) of 1..max_seq_len values drawn from the integers ``inner``.

        None when the values are not all integers or there would be too many candidates.
        """
        default = 0.0 if default is None else float(default)
        try:
            ints = sorted({int(v) for v in inner if v is not None and float(v).is_integer()})
            if len(ints) != len({float(v) for v in inner if v is not None}):
                return None
        except (TypeError, ValueError):
            return None
        if not ints:
            return (default,)
        lo, hi = ints[0], ints[-1]
        if reduction == "sum":
            if hi - lo == 0:
                sums = np.arange(1, self.L + 1, dtype=np.float64) * lo
            elif (hi - lo) * self.L > MAX_MEAN_VALUES:
                return None
            else:
                sums = np.arange(min(lo, lo * self.L), max(hi, hi * self.L) + 1, dtype=np.float64)
            return tuple(float(v) for v in np.unique(np.append(sums, default)))
        # a mean of w integers in [lo, hi] is s / w for an integer s in [w * lo, w * hi]
        if (hi - lo) * self.L * self.L > 2 * MAX_MEAN_VALUES:
            return None
        fracs = [np.array([default])]
        for w in range(1, self.L + 1):
            fracs.append(np.arange(w * lo, w * hi + 1, dtype=np.float64) / w)
        return tuple(float(v) for v in np.unique(np.concatenate(fracs)))

    def _same_selector_means(self, e: E.SequenceMap) -> tuple | None:
        """Values of ``a * mean_s(x) + b * mean_s(y)``: a mean of ``a*x + b*y`` over ``s``.

        Two numerical means over the same selector (structurally equal) with default 0 read
        the same keys, so their linear combination takes only the values of one mean.
        """
        fst, snd = e.sops
        for agg in (fst, snd):
            if not (
                isinstance(agg, E.Aggregate)
                and E.is_numerical(agg)
                and agg.reduction == "mean"
                and agg.default in (None, 0)
            ):
                return None
        if selector_key(fst.selector) != selector_key(snd.selector):
            return None
        xs, ys = self.values(fst.sop), self.values(snd.sop)
        if xs is None or ys is None or not _all_numbers([xs, ys]):
            return None
        if len(xs) * len(ys) > MAX_TABLE:
            return None
        a, b = e._op.params
        combos = {a * float(x) + b * float(y) for x in xs for y in ys}
        return self._mean_values(tuple(combos), "mean", 0)


def infer(
    graph: tracing.Graph, vocab: tuple | None, max_seq_len: int, options: CompileOptions
) -> ValueInference:
    """Value inference for a program, refusing one that fails on inputs the vocab allows.

    Args:
        graph: the traced program.
        vocab: the checked vocabulary (``check_vocab``), or None for real-valued tokens.
        max_seq_len: the longest input.
        options: the compile options (``causal`` and ``fixed_length`` matter here).

    Raises:
        RASPEvaluationError: (a ValueError) a selector's predicate raises on a pair of
            values, or a map gives NaN or an infinity; all are listed.
    """
    vi = ValueInference(vocab, max_seq_len, options.causal, options.fixed_length)
    errors = program_errors(vi, (graph.nodes[u] for u in graph.order))
    if errors:
        raise I.RASPEvaluationError(
            "this program fails on inputs the vocabulary allows (a function that raises "
            "there raises in the interpreter too; a NaN or an infinity is a value no compiled "
            "model can hold):\n" + "\n".join(f"  - {m}" for m in errors)
        )
    return vi


def program_errors(vi: ValueInference, nodes: Iterable[E.RASPExpr]) -> list[str]:
    """What fails on some input the vocabulary allows, found from the value sets.

    The compiled model has no way to raise where the interpreter does when a selector's
    predicate fails on a pair of values, and it cannot compute with a map's non-finite
    result (an infinity or a NaN in one lookup row poisons every position through
    ``0 * inf``). Both are refused at compile time, each named with its values.

    >>> from attnsim import rasp
    >>> vi = ValueInference(vocab=("a",), max_seq_len=2, causal=False, fixed_length=False)
    >>> sel = rasp.Select(rasp.tokens, rasp.indices, rasp.Comparison.LT).named("lt")
    >>> program_errors(vi, [sel])[0][:62]
    "the function of 'lt' raised TypeError: '<' not supported betwe"
    """
    errors: list[str] = []
    for e in nodes:
        if (
            isinstance(e, E.TokensType)
            and not isinstance(e, E.TokenChannel)
            and E.is_numerical(e)
            and vi.vocab is not None
        ):
            bad = [v for v in vi.vocab if not _is_number(v)]
            huge = [v for v in vi.vocab if _is_number(v) and not fits_float(v)]
            if bad:
                errors.append(
                    f"tokens are used as numbers (rasp.numerical(rasp.tokens)) but the vocab "
                    f"holds {brief(bad[0])}, which is not a number; map the tokens to numbers "
                    "first (rasp.numerical(rasp.Map(f, rasp.tokens))) or use a vocab of numbers"
                )
            elif huge:
                errors.append(
                    f"tokens are used as numbers (rasp.numerical(rasp.tokens)) but the vocab "
                    f"holds {brief(huge[0])}, too large for a float (at most about "
                    f"{sys.float_info.max:.1e}); use smaller numbers, or keep the tokens "
                    "categorical (a categorical token may be any int)"
                )
        if isinstance(e, E.Select):
            errors.extend(_select_errors(vi, e))
        elif isinstance(e, (E.Map, E.SequenceMap)):
            if vi.is_static(e):
                # a position-only map is evaluated whether or not anything reads it (the
                # interpreter does, for a selector's keys too): a failure is a failure
                try:
                    vi.static_array(e)
                except Exception as exc:
                    errors.append(
                        f"the position-only S-op {e.label!r} fails on the positions of a "
                        f"full-length input ({type(exc).__name__}: {exc}); the interpreter "
                        "raises there too: make its function total on 0..max_seq_len-1"
                    )
                    continue
            errors.extend(_non_finite_errors(vi, e))
    return list(dict.fromkeys(errors))


def _select_errors(vi: ValueInference, e: E.Select) -> list[str]:
    pred = e.predicate
    if pred in (E.Comparison.TRUE, E.Comparison.FALSE):
        return []
    kvals, qvals = vi.values(e.keys), vi.values(e.queries)
    if kvals is None or qvals is None:
        return []
    kinds = {vi.orderable_kind(e.keys), vi.orderable_kind(e.queries)}
    if isinstance(pred, E.Comparison) and len(kinds) == 1 and None not in kinds:
        return []  # numbers with numbers or strings with strings: every comparison works
    kvals = [v for v in kvals if v is not None]
    qvals = [v for v in qvals if v is not None]
    if len(kvals) * len(qvals) > MAX_LINEAR_TABLE:
        return []
    for k in kvals:
        for q in qvals:
            try:
                got = pred(k, q)
            except Exception as exc:  # the interpreter raises here too: say the same
                return [
                    f"the function of {e.label!r} raised {type(exc).__name__}: {exc} on "
                    f"({k!r}, {q!r}) (key {k!r} of {e.keys.label!r}, query {q!r} of "
                    f"{e.queries.label!r}); every key value must be comparable with every "
                    "query value: compare values of one kind (map one side first)"
                ]
            try:
                as_truth(got)
            except TypeError as exc:
                return [
                    f"the predicate of {e.label!r} on key {brief(k)} of {e.keys.label!r} and "
                    f"query {brief(q)} of {e.queries.label!r}: {exc}"
                ]
    return []


def _non_finite_errors(vi: ValueInference, e: E.Map | E.SequenceMap) -> list[str]:
    """A map whose result is NaN or infinite for some value its inputs can take."""
    inputs = [e.inner] if isinstance(e, E.Map) else list(e.sops)
    op = e._op
    if static_tables.finite(e, vi.L):  # a sparse table of finite values (not made dense)
        return []
    if op is not None and op.kind == "position_table" and vi.is_static(e):
        got = vi.static_array(e)  # its value at every position (the interpreter's, kept)
        if isinstance(got, np.ndarray) and bool(np.all(np.isfinite(got))):
            return []
    parts = [vi.values(s) for s in inputs]
    if any(p is None for p in parts):
        return []
    parts = [[v for v in p if v is not None] for p in parts]
    if int(np.prod([len(p) for p in parts])) > MAX_TABLE:
        return []
    if op is not None and op.kind == "position_table":  # a table of numbers: check it whole
        with np.errstate(all="ignore"):
            got = op.numpy_fn(np.asarray(parts[0], dtype=np.int64))
        if bool(np.all(np.isfinite(got))):
            return []
    # the interpreter runs a named numerical op vectorised (numpy: 1/0 is inf, log 0 is -inf)
    vectorised = (
        op is not None and op.numpy_fn is not None and all(E.is_numerical(s) for s in inputs)
    )
    if vectorised and _all_finite_at_once(op.numpy_fn, parts):
        return []  # (else the loop below finds the first input that is not, and says so)
    for args in itertools.product(*parts):
        try:
            if vectorised:
                with np.errstate(all="ignore"):
                    out = op.numpy_fn(*(np.asarray([float(a)]) for a in args))
                out = np.asarray(out).reshape(-1)[0]
                out = out.item() if isinstance(out, np.generic) else out
            else:
                out = e.f(*args)
        except Exception:
            continue  # a run-time check covers a function that raises (as the interpreter does)
        shown = args[0] if len(args) == 1 else args
        what = "input value" if len(args) == 1 else "input values"
        if E.is_numerical(e) and _is_number(out) and not fits_float(out):
            return [
                f"numerical map {e.label!r} gives {brief(out)} for the {what} {brief(shown)}, "
                f"too large for a float (at most about {sys.float_info.max:.1e}); a numerical "
                "S-op holds floats: scale the result down, or make the map categorical"
            ]
        if not _finite_value(out):
            return [
                f"map {e.label!r} gives {out!r} for the {what} {shown!r}; a compiled model "
                "computes with finite values only (a NaN or an infinity in one table row "
                "reaches every position as 0 * inf). Return a finite value there (or a "
                "string), or leave that value out of the vocabulary"
            ]
    return []


def _all_finite_at_once(fn, parts: list[list]) -> bool:
    """Whether the elementwise numpy function ``fn`` is finite on every combination of the
    values in ``parts`` (one call over the whole grid, as the interpreter runs it); False
    also where that call raises (then each combination is tried on its own)."""
    try:
        grids = np.meshgrid(*(np.array([float(v) for v in p]) for p in parts), indexing="ij")
        with np.errstate(all="ignore"):
            got = np.asarray(fn(*(g.reshape(-1) for g in grids)), dtype=np.float64)
    except Exception:  # noqa: BLE001 - the loop over single values decides then
        return False
    return bool(np.all(np.isfinite(got)))


def selector_key(sel: E.Selector) -> tuple:
    """A structural key: two selectors with equal keys select the same keys everywhere."""
    if isinstance(sel, E.Select):
        return ("select", _sop_key(sel.keys), _sop_key(sel.queries), sel.predicate)
    if isinstance(sel, (E.SelectorAnd, E.SelectorOr)):
        return (type(sel).__name__, selector_key(sel.fst), selector_key(sel.snd))
    if isinstance(sel, E.SelectorNot):
        return ("not", selector_key(sel.inner))
    return ("uid", sel.uid)


def _sop_key(sop: E.SOp) -> tuple:
    if isinstance(sop, E.TokenChannel):
        return ("TokenChannel", sop.channel)
    if isinstance(sop, (E.TokensType, E.IndicesType, E.LengthType)):
        return (type(sop).__name__,)
    return ("uid", sop.uid)


def _all_numbers(parts: Sequence[Sequence[Any]]) -> bool:
    return all(_is_number(v) for p in parts for v in p)
