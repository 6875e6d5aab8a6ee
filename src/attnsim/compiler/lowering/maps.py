"""Maps and sequence maps: each picks the cheapest exact realisation its values allow.

- a numerical readout of a one-hot S-op, affine maps and linear sequence maps: virtual
  (a linear form; no block);
- relu and abs: ReLU units; squares and products of two numbers: bilinear units;
- exp, log, sqrt, 1/x, rsqrt, gelu: a native unit, or with ``maps="relu"`` a certified
  piecewise-linear interpolant (``ir.piecewise``), checked at run time to stay on its range;
- functions of one-hot S-ops: a lookup table (``ir.lookup``);
- functions of a number with a finite value set: a discretiser (``forms.discretise``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from attnsim.compiler.lowering import forms
from attnsim.compiler.lowering.context import (
    FAILED,
    MAX_LOOKUP,
    Context,
    apply_safely,
    call_safely,
    union,
)
from attnsim.compiler.lowering.program import After, Rep, UnsupportedError
from attnsim.compiler.options import MapError, MapMode
from attnsim.compiler.value_inference import dedupe, sort_values
from attnsim.ir import lookup, numeric, piecewise
from attnsim.ir.blocks import NOTBOS, linear_form
from attnsim.model.checks import SINGULAR_AT_ZERO
from attnsim.rasp import expr as E
from attnsim.values import as_number, is_number, is_numeric, value_key, value_text

NATIVE_OPS = {"exp", "log", "sqrt", "reciprocal", "rsqrt", "gelu", "gelu_tanh"}
# how much larger than max(1, |input|) the terms of a declared function's input may be (their
# sum of sizes) before the input is refused as cancelled: its float64 rounding then stays
# below about 1e-8 of max(1, |input|) (2 - (-1e16) - 1e16 is 0, not 2)
CANCELLATION = 2.0**26


def lower_map(ctx: Context, e: E.Map) -> Rep:
    label = ctx.label(e)
    inner = ctx.rep(e.inner)
    op = e._op
    num_out = E.is_numerical(e)
    if inner.kind == "cat":
        if num_out:
            readout = _numeric_readout(e, inner)
            noise = inner.noise_of()
            if readout is not None and forms.check_code_read(
                ctx, label, sum(noise.get(d, 0.0) * abs(v) for d, v in readout.items())
            ):
                ctx.realised(label, "numerical readout of one-hot (virtual)", "exact", 0)
                return Rep("num", inner.after, form=readout)
        return lookup_table(ctx, label, e, [e.inner], num_out)
    form = inner.form
    kind = op.kind if op is not None else None
    if num_out and kind == "affine":
        a, b = op.params
        out = {k: a * v for k, v in form.items()}
        if b:
            out[NOTBOS] = out.get(NOTBOS, 0.0) + b
        ctx.realised(label, "affine (virtual)", "exact", 0)
        return Rep("num", inner.after, form={k: v for k, v in out.items() if v != 0})
    if num_out and kind in ("relu", "abs"):
        stage = ctx.mlp_stage(inner.after)
        d = ctx.new_dir(label)
        ctx.emit_all(stage, numeric.relu_units(label, form, d, absolute=kind == "abs"))
        ctx.realised(label, kind, "exact", 1 + (kind == "abs"))
        return Rep("num", stage, form={d: 1.0})
    if num_out and kind == "pow" and op.params[0] == 2 and not op.params[1]:
        d, stage = forms.square(ctx, form, inner.after, label)
        ctx.realised(label, "square (bilinear)", "exact", 1)
        return Rep("num", stage, form={d: 1.0})
    if num_out and (kind in NATIVE_OPS or kind == "scaled_reciprocal"):
        return native(ctx, label, e, kind, form, inner.after)
    vals = ctx.vi.values(e.inner)
    if vals is not None:
        out_vals = ctx.vi.values(e)
        table = {value_key(v): call_safely(e, (v,)) for v in vals}
        return forms.discretise(
            ctx,
            label,
            form,
            inner.after,
            vals,
            table,
            out_vals,
            num_out,
            uid=e.uid,
            prove_output=True,
        )
    raise UnsupportedError(
        f"{label}: a map of the real-valued S-op {ctx.label(e.inner)!r} with no finite "
        "value set; use a named map (rasp.exp, rasp.reciprocal, rasp.relu, ...), an affine "
        "map (x * a + b), or declare the input's values"
    )


def _numeric_readout(e: E.Map, inner: Rep) -> dict[str, float] | None:
    """f of a one-hot S-op as a linear form (sum of f(v) * onehot_v), if f gives numbers."""
    form: dict[str, float] = {}
    for v, d in zip(inner.values, inner.dims):
        out = apply_safely(e.f, v)
        if out is FAILED or out is None:
            continue  # a value f rejects cannot occur; None is the zero vector
        if isinstance(out, str) or not isinstance(out, (int, float, np.integer, np.floating)):
            return None
        if float(out) != 0.0:
            form[d] = float(out)
    return form


def _map_range(ctx: Context, e: E.SOp, inner: E.SOp) -> tuple[float, float] | None:
    """The declared input range of a map: map_ranges[label] or the input's value_range."""
    for key in (ctx.label(e), ctx.label(inner)):
        if key in ctx.map_ranges:
            lo, hi = ctx.map_ranges[key]
            return float(lo), float(hi)
    return E.value_range(inner) or e._annotations.get("input_range")


def _relu_map(
    ctx: Context, label: str, e: E.SOp, kind: str, form: dict, after: After, scale: float,
    inner: E.SOp,
) -> Rep:  # fmt: skip
    """A bounded realisation: the certified piecewise-linear interpolant (ReLU units)."""
    rng = _map_range(ctx, e, inner)
    if rng is None:
        raise UnsupportedError(
            f"{label}: maps='relu' needs the input range of this {kind} map; declare it "
            "with rasp.numerical(x, value_range=(lo, hi)) on its input or pass "
            f"map_ranges={{{ctx.label(inner)!r}: (lo, hi)}}"
        )
    # relative where f has no zero on the range; maps that reach 0 (gelu, log) stay absolute
    tolerance = ctx.options.map_tolerance
    relative = ctx.options.map_error is MapError.RELATIVE and (
        kind in piecewise.RELATIVE_KINDS and not (kind == "sqrt" and rng[0] <= 0)
    )
    try:
        pl = piecewise.fit(
            kind,
            rng[0],
            rng[1],
            tolerance=tolerance if relative else tolerance / abs(scale),
            relative=relative,
        )
    except ValueError as exc:
        raise UnsupportedError(f"{label}: {exc}") from None
    stage = ctx.mlp_stage(after)
    d = ctx.new_dir(label)
    # exp ramps down to exactly 0 one unit below the range: inputs pushed far down (masked
    # scores, say) then give 0, and the error below lo stays within exp(lo)
    units = piecewise.interpolant_units(label, form, pl, d, scale=scale, ramp=kind == "exp")
    n_units = ctx.emit_all(stage, units)
    lo = -math.inf if kind == "exp" else rng[0]  # below lo exp stays within exp(lo)
    ctx.guard(after, label, linear_form(form), value_range=(lo, rng[1]))
    bound = pl.bound if relative else pl.bound * abs(scale)
    below = f"; below {rng[0]:g}: <= {math.exp(rng[0]) * abs(scale):.3g}" if kind == "exp" else ""
    what = "relative |error|" if relative else "|error|"
    ctx.realised(
        label,
        f"{kind} by {len(pl.knots)} ReLU knots on [{rng[0]:g}, {rng[1]:g}]",
        "bounded",
        n_units,
        note=f"{what} <= {bound:.3g} on the range{below}",
        bound=bound,
        relative=relative,
    )
    return Rep("num", stage, form={d: 1.0})


def _power_of_two(c: float) -> bool:
    """Whether ``c`` is +-2^k: a product by it is exact (short of over- and underflow)."""
    m, _ = math.frexp(abs(c))
    return m == 0.5


def native(
    ctx: Context,
    label: str,
    e: E.SOp,
    kind: str,
    form: dict,
    after: After,
    inner: E.SOp | None = None,
) -> Rep:
    """A declared elementwise function: a native unit, or a ReLU interpolant (maps="relu").
    An input of several terms whose sizes are not bounded below :data:`CANCELLATION` is
    checked at run time not to cancel: terms far larger than their sum carry their rounding
    into it (a row maximum of -1e16 and 2 leaves ``2 - m`` at 0 in some orders of summation),
    and the function of such a sum is not the interpreter's. The input of a function singular
    at 0 (1/x, 1/sqrt(x), log x) is checked against its own size, not against 1, wherever its
    sum may round otherwise than the interpreter's: those functions keep its relative error."""
    scale = 1.0
    if kind == "scaled_reciprocal":
        scale, kind = float(e._op.params[0]), "reciprocal"
    keep = "keep the values it is computed from closer in size"
    if kind in SINGULAR_AT_ZERO:
        # its output's relative error is its input's: measured against |input| itself,
        # wherever the sum may round otherwise than the interpreter's (more than two
        # terms, or a weight that is not a power of two: a product that rounds)
        if len(form) > 2 or any(not _power_of_two(c) for c in form.values()):
            why = (
                f"{kind} of it would not be the interpreter's: {keep} and from cancelling to near 0"
            )
            guard = dict(cancellation=CANCELLATION, relative=True, reason=why)
            ctx.guard(after, label, linear_form(form), **guard)
    elif len(form) > 1 and not ctx.form_bound(form) <= CANCELLATION:
        why = f"{kind} of it would not be the interpreter's: {keep} (a row of -1e16 and 2 loses "
        why += "the 2 to rounding)"
        ctx.guard(after, label, linear_form(form), cancellation=CANCELLATION, reason=why)
    if ctx.options.maps is MapMode.RELU:
        return _relu_map(
            ctx, label, e, kind, form, after, scale, inner if inner is not None else e.inner
        )
    stage = ctx.mlp_stage(after)
    d = ctx.new_dir(label)
    ctx.emit(stage, numeric.native_unit(label, kind, form, d, scale))
    ctx.realised(label, f"{kind} unit", "native", 1)
    return Rep("num", stage, form={d: 1.0})


def lookup_table(ctx: Context, label: str, e: E.SOp, args: Sequence[E.SOp], num_out: bool) -> Rep:
    """A table over the joint values of categorical arguments (ReLU units)."""
    reps = [forms.categorical_rep(ctx, a) for a in args]
    after = union(r.after for r in reps)
    size = int(np.prod([max(len(r.values), 1) for r in reps]))
    if size > MAX_LOOKUP:
        raise UnsupportedError(
            f"{label}: a lookup table over {size} value combinations is too large "
            f"(limit {MAX_LOOKUP}); reduce the value sets or split the map"
        )
    stage = ctx.mlp_stage(after)
    combos = _product([list(zip(r.values, r.dims)) for r in reps])
    outputs = [(combo, call_safely(e, [v for v, _ in combo])) for combo in combos]
    # a row's unit reads the sum of its codes' entries: where they carry rounding (steps on
    # large terms), a row may pass on up to the sum of their bounds, times its output
    noises = [r.noise_of() for r in reps]
    leaks = [sum(n.get(d, 0.0) for n, (_, d) in zip(noises, combo)) for combo in combos]
    if num_out:
        d = ctx.new_dir(label)
        rep = Rep("num", stage, form={d: 1.0})
        # a value that is not a number cannot be held: a run-time check raises there, as
        # the interpreter does (guards.py), so its row writes nothing
        out_dim = lambda v: ((d, float(v)),) if is_numeric(v) and float(v) != 0 else ()
    else:
        out_vals = sort_values(dedupe(v for _, v in outputs if v is not None and v is not FAILED))
        dims = tuple(ctx.new_dir(f"{label}:{value_text(v)}") for v in out_vals)
        rep = Rep("cat", stage, values=out_vals, dims=dims)
        index = rep.dim_of()
        out_dim = lambda v: ((index[value_key(v)], 1.0),) if v is not None else ()
    rows = [
        (tuple(d for _, d in combo), out_dim(out)) for combo, out in outputs if out is not FAILED
    ]
    rows_leak = [leak for leak, (_, out) in zip(leaks, outputs) if out is not FAILED]
    saturate = False
    if any(rows_leak):
        if num_out:
            leak = sum(lk * sum(abs(c) for _, c in out) for lk, (_, out) in zip(rows_leak, rows))
            saturate = not forms.check_code_read(ctx, label, leak)
        else:
            passed = _per_output(rows, rows_leak)
            saturate = max(passed.values(), default=0.0) >= lookup.SATURATED_MARGIN
            if not saturate:
                rep = dataclasses.replace(rep, noise=tuple(passed.get(d, 0.0) for d in rep.dims))
    if saturate:
        if max(rows_leak) >= lookup.SATURATED_MARGIN:
            raise UnsupportedError(
                f"{label}: its arguments' one-hot codes (made by steps on numerical inputs "
                f"whose terms are large) carry float rounding of up to {max(rows_leak):.3g}, "
                "too much for a table to read them; narrow the inputs' value sets or keep "
                "their values closer in size"
            )
        units = lookup.saturated_lookup_units(label, rows)
        if not num_out:
            # what a saturated pair rounds by itself: its two inputs (len(reps) + 1 terms of
            # size up to 2 len(reps) + 2) round apart, and the output sums its rows
            k = len(reps) + 1
            each = 2.0 * k * (2.0 * k) * forms.dtype_of(ctx)[1]
            passed = _per_output(rows, [each] * len(rows))
            rep = dataclasses.replace(rep, noise=tuple(passed.get(d, 0.0) for d in rep.dims))
        how = "lookup table (saturated: its codes carry rounding)"
    else:
        units = lookup.lookup_units(label, rows)
        how = "lookup table"
    n_units = ctx.emit_all(stage, units)
    ctx.realised(label, how, "exact", n_units)
    return rep


def _per_output(rows: Sequence[tuple], leaks: Sequence[float]) -> dict[str, float]:
    """Per output direction of a categorical table: the sum of the leaks of the rows that
    write it (a wrong row's unit may pass on its leak there)."""
    out: dict[str, float] = {}
    for leak, (_, written) in zip(leaks, rows):
        for dim, _ in written:
            out[dim] = out.get(dim, 0.0) + leak
    return out


def _product(lists: list[list]) -> list[tuple]:
    out: list[tuple] = [()]
    for items in lists:
        out = [o + (it,) for o in out for it in items]
    return out


# -- sequence maps ---------------------------------------------------------------------------


def lower_sequence_map(ctx: Context, e: E.SequenceMap) -> Rep:
    label = ctx.label(e)
    op = e._op
    kind = op.kind if op is not None else None
    num_out = E.is_numerical(e)
    if num_out and kind == "linear":
        a, b = op.params
        f1, f2 = forms.numeric_form(ctx, e.sops[0]), forms.numeric_form(ctx, e.sops[1])
        out = {k: a * v for k, v in f1.items()}
        for k, v in f2.items():
            out[k] = out.get(k, 0.0) + b * v
        after = union(ctx.rep(s).after for s in e.sops)
        ctx.realised(label, "linear (virtual)", "exact", 0)
        return Rep("num", after, form={k: v for k, v in out.items() if v != 0})
    reps = [ctx.rep(s) for s in e.sops]
    if num_out and kind == "mul" and len(e.sops) == 2:
        f1, f2 = forms.numeric_form(ctx, e.sops[0]), forms.numeric_form(ctx, e.sops[1])
        return product(ctx, label, f1, f2, union(r.after for r in reps))
    if num_out and kind == "div" and len(e.sops) == 2:
        ctx.needs(label, "divides (a reciprocal is not exact)", 0.0, uid=e.uid)
        f1 = forms.numeric_form(ctx, e.sops[0])
        den = e.sops[1]
        if reps[1].kind == "cat":
            inv = {}
            for v, d in zip(reps[1].values, reps[1].dims):
                if v is None or isinstance(v, str):
                    raise UnsupportedError(f"{label}: divides by the value {v!r}")
                if float(v) != 0.0:
                    inv[d] = 1.0 / float(v)
            noise = reps[1].noise_of()
            size = max(1.0, ctx.form_bound(f1))
            if not forms.check_code_read(
                ctx, label, sum(noise.get(d, 0.0) * abs(c) for d, c in inv.items()) * size
            ):
                return lookup_table(ctx, label, e, e.sops, num_out)
            return product(ctx, label, f1, inv, union(r.after for r in reps))
        recip = native(
            ctx,
            ctx.fresh(f"1/{ctx.label(den)}"),
            e,
            "reciprocal",
            reps[1].form,
            reps[1].after,
            inner=den,
        )
        return product(ctx, label, f1, recip.form, reps[0].after | recip.after)
    finite = all(ctx.vi.values(s) is not None for s in e.sops)
    if not num_out and kind == "linear" and finite:
        got = _linear_categorical(ctx, label, e)
        if got is not None:
            return got
    if finite:
        return lookup_table(ctx, label, e, e.sops, num_out)
    raise UnsupportedError(
        f"{label}: a sequence map of real-valued S-ops other than +, -, * and /; "
        "give its inputs finite value sets or build it from those operations"
    )


def _linear_categorical(ctx: Context, label: str, e: E.SequenceMap) -> Rep | None:
    """``a*x + b*y`` with a one-hot output: a virtual sum, then steps between its values.

    Costs about two units per output value instead of one per argument combination;
    None when a lookup table is smaller, the values are not plain numbers, or an argument
    may be None (the sum would read it as 0; the map of None is None, which a table gives).
    """
    if any(not E.is_numerical(s) and ctx.vi.may_be_none(s) for s in e.sops):
        return None
    out_vals = ctx.vi.values(e)
    parts = [ctx.vi.values(s) for s in e.sops]
    if out_vals is None or not all(is_number(v) for p in parts + [out_vals] for v in p):
        return None
    if len({float(v) for v in out_vals}) != len(out_vals):
        return None  # 1 and 1.0 both occur: keep the exact types with a table
    if 2 * len(out_vals) + 1 >= int(np.prod([len(p) for p in parts])):
        return None
    a, b = e._op.params
    f1, f2 = forms.numeric_form(ctx, e.sops[0]), forms.numeric_form(ctx, e.sops[1])
    form = {k: a * v for k, v in f1.items()}
    for k, v in f2.items():
        form[k] = form.get(k, 0.0) + b * v
    form = {k: v for k, v in form.items() if v != 0}
    after = union(ctx.rep(s).after for s in e.sops)
    table = {}
    for v in out_vals:
        table[value_key(float(v))] = v
        table[value_key(as_number(float(v)))] = v
    in_vals = [float(v) for v in out_vals]
    return forms.discretise(ctx, label, form, after, in_vals, table, out_vals, uid=e.uid)


def product(ctx: Context, label: str, f1: dict, f2: dict, after: After) -> Rep:
    """The product of two linear forms (one bilinear unit)."""
    stage = ctx.mlp_stage(after)
    d = ctx.new_dir(label)
    ctx.emit(stage, numeric.product_unit(label, f1, f2, d))
    ctx.realised(label, "product (bilinear)", "exact", 1)
    return Rep("num", stage, form={d: 1.0})
