"""Embedded S-ops and conversions between the two representations.

- ``static`` and ``tokens``: what the embedding writes (static S-ops per position, one-hot or
  numerical tokens);
- ``numeric_form``: a categorical S-op read as a number (a virtual linear form);
- ``categorical_rep``: a numerical S-op with a finite value set made one-hot, by a discretiser
  (``discretise``, ReLU steps between the values: ``ir.discretise``);
- ``square``: the square of a linear form (one bilinear unit, shared by equal forms);
- static numbers, squares and position indicators for selector scores.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from attnsim.compiler import static_tables
from attnsim.compiler.lowering.columns import PositionColumn
from attnsim.compiler.lowering.compare import dtype_of, too_close
from attnsim.compiler.lowering.context import FAILED, Context
from attnsim.compiler.lowering.program import After, Rep, UnsupportedError
from attnsim.compiler.value_inference import dedupe, sort_values
from attnsim.ir import discretise as D
from attnsim.ir import numeric
from attnsim.ir.blocks import linear_form
from attnsim.rasp import expr as E
from attnsim.values import as_number, is_hashable, is_number, is_numeric, value_key, value_text


def static(ctx: Context, e: E.SOp) -> Rep:
    """A static S-op: its value at every position, in the positional embedding."""
    label = ctx.label(e)
    if E.is_numerical(e):
        d = ctx.new_dir(label)
        ctx.static_embed[d] = static_numbers(ctx, e)
        return Rep("num", form={d: 1.0})
    vals = ctx.vi.static_values(e)
    distinct = sort_values(dedupe(v for v in vals if v is not None))
    dims = []
    for v in distinct:
        d = ctx.new_dir(f"{label}:{value_text(v)}")
        ctx.static_embed[d] = np.array([1.0 if _same(x, v) else 0.0 for x in vals])
        dims.append(d)
    return Rep("cat", values=distinct, dims=tuple(dims))


def tokens(ctx: Context, e: E.SOp) -> Rep:
    """The tokens: one direction per vocabulary value, or one real-valued direction."""
    vocab = ctx.vi.vocab
    if isinstance(e, E.TokenChannel):
        if ctx.token_num_dir is not None or ctx.token_dims:
            raise UnsupportedError(
                "this program reads both `tokens` and token channels; with vector tokens "
                "read every input by channel (rasp.token_channel(k))"
            )
        d = ctx.token_channel_dirs.get(e.channel)
        if d is None:
            d = ctx.token_channel_dirs[e.channel] = ctx.new_dir(f"tokens[{e.channel}]")
        return Rep("num", form={d: 1.0})
    if ctx.token_channel_dirs:
        raise UnsupportedError(
            "this program reads both `tokens` and token channels; with vector tokens read "
            "every input by channel (rasp.token_channel(k))"
        )
    if E.is_numerical(e):
        ctx.token_num_dir = ctx.new_dir("tokens")
        return Rep("num", form={"tokens": 1.0})
    if vocab is None:
        raise UnsupportedError(
            "tokens are used categorically but no vocab was given; pass vocab=[...] or "
            "annotate the tokens rasp.numerical(rasp.tokens) for real-valued input"
        )
    dims = []
    for v in sort_values(vocab):
        d = ctx.new_dir(f"tokens:{value_text(v)}")
        ctx.token_dims[d] = v
        dims.append(d)
    return Rep("cat", values=sort_values(vocab), dims=tuple(dims))


def numeric_form(ctx: Context, e: E.SOp, r: Rep | None = None) -> dict[str, float]:
    """The S-op's value as a linear form (categorical values must be numbers)."""
    r = r or ctx.rep(e)
    ctx.numeric_reads.add(e.uid)
    if r.kind == "num":
        return dict(r.form)
    form = {}
    for v, d in zip(r.values, r.dims):
        if isinstance(v, str) or v is None:
            raise UnsupportedError(f"{ctx.label(e)}: used as a number but takes the value {v!r}")
        if float(v) != 0.0:
            form[d] = float(v)
    return form


def check_code_read(ctx: Context, label: str, leak: float) -> bool:
    """Whether a number summed from categorical codes is exact to float rounding, given
    ``leak``: the sum over the code's entries of their rounding bound (``Rep.noise``) times
    the size of what each contributes; within ``TABLE_REL_TOL`` absolutely (so of any
    result of size 1 or more). With ``dtype="auto"``, a read that only float64 keeps exact
    records a need for it.

    Returns:
        False where the read would carry more (the caller reads the codes another way).
    """
    if leak <= _table_tolerance(dtype_of(ctx)[1]):
        if leak and ctx.options.dtype != torch.float64 and dtype_of(ctx)[0] == "float64":
            if leak * 2.0**29 > _table_tolerance(2.0**-24):
                ctx.needs(label, "a number read from a code whose steps float32 rounds", 0.0)
        return True
    return False


def categorical_rep(ctx: Context, e: E.SOp) -> Rep:
    """A one-hot representation of ``e`` (converting a numerical one if needed)."""
    r = ctx.rep(e)
    if r.kind == "cat":
        return r
    if ctx.vi.is_static(e):
        if e.uid not in ctx.categorical:
            ctx.categorical[e.uid] = static(ctx, E.categorical(e))
        return ctx.categorical[e.uid]
    vals = ctx.vi.values(e)
    if vals is None:
        raise UnsupportedError(
            f"{ctx.label(e)}: needs a one-hot encoding (for a table) but its values are "
            "not a known finite set; declare them with a categorical S-op or use EQ on "
            "integer values"
        )
    if e.uid in ctx.categorical:
        return ctx.categorical[e.uid]
    out = discretise(ctx, ctx.label(e) + "@cat", r.form, r.after, vals, None, vals, uid=e.uid)
    ctx.categorical[e.uid] = out
    return out


def discretise(
    ctx: Context,
    label: str,
    form: dict[str, float],
    after: After,
    in_vals: Sequence[float],
    table: dict | None,
    out_vals: Sequence[Any] | None,
    num_out: bool = False,
    bos_guard: float = 0.0,
    *,
    uid: int | None = None,
    input_scale: float | None = None,
    rounded_input: bool = False,
    prove_output: bool = False,
) -> Rep:
    """A function of a number with finite value set, by ReLU steps between the values.

    ``table`` maps value keys of the inputs to outputs (None: the identity, as a one-hot).
    A run-time check keeps the input on its values. ``uid`` is the S-op computed;
    ``input_scale`` bounds the input's size (None: bounded from its form) and
    ``rounded_input`` says that the input carries rounding (a selector width's 1/(w+1)):
    both only matter for choosing the dtype (``Float32Need``). ``prove_output``: a numerical
    result the program returns or computes with, proved against float rounding (a map's;
    an internal rank read by a comparison has that comparison's proof).
    """
    xs, outs = [], []
    groups = D.close_groups(sorted({float(v) for v in in_vals}))
    ramp = D.on_a_ramp(groups)
    if ramp is not None:  # a value the steps would not give its group's output
        raise UnsupportedError(too_close(label, "its input", *ramp))
    firsts = [g[0] for g in groups]
    for lo, hi in zip(firsts, firsts[1:]):
        # a step's slope 2 / (hi - lo): 0 where the difference overflows, inf where it is
        # below 1e-308
        if not math.isfinite(hi - lo) or not math.isfinite(2.0 / (hi - lo)):
            raise UnsupportedError(
                f"{label}: its input takes the values {lo!r} and {hi!r}, whose difference "
                f"({hi - lo!r}) is beyond float64's range for the model's steps between "
                "them; scale the values to sizes between about 1e-300 and 1e300 first"
            )
    if table is None:
        results = [[as_number(x) for x in group] for group in groups]
    else:
        results = [
            [table.get(value_key(as_number(x)), table.get(value_key(x))) for x in group]
            for group in groups
        ]
    # the size of the function's numerical results: what rounding is measured against
    scale = max((abs(float(o)) for got in results for o in got if _finite(o)), default=0.0)
    for group, got in zip(groups, results):
        if not _same_outputs(got, scale):
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
    stage = ctx.mlp_stage(after)
    if num_out:
        d = ctx.new_dir(label)
        rep = Rep("num", stage, form={d: 1.0})

        def vec(v):
            return {d: float(v)} if v is not FAILED and is_numeric(v) else {}
    else:
        cats = sort_values(dedupe(v for v in outs if v is not None and v is not FAILED))
        dims = tuple(ctx.new_dir(f"{label}:{value_text(v)}") for v in cats)
        rep = Rep("cat", stage, values=cats, dims=dims)
        index = rep.dim_of()

        def vec(v):
            return {} if v is None or v is FAILED else {index[value_key(v)]: 1.0}

    if num_out and prove_output:
        _check_output_rounding(ctx, label, form, xs, outs)
    vecs = [vec(v) for v in outs]
    units = D.step_units(label, form, xs, vecs, bos_guard)
    n_units = ctx.emit_all(stage, units)
    if not num_out:
        # the code's entries carry the steps' rounding (1e-4 when the form's terms are near
        # 1e12): readers that sum them into a number prove their result against it
        _, u, _ = dtype_of(ctx)
        size = ctx.form_bound(form) if len(form) > 1 else 0.0
        if not math.isfinite(size):
            size = 0.0  # terms of unknown size: bounded by the values themselves
        bounds = D.one_hot_rounding(xs, vecs, size, len(form), u)
        rep = dataclasses.replace(rep, noise=tuple(bounds.get(d, 0.0) for d in rep.dims))
    if rounded_input or not _exact_steps(xs):
        # a step switches halfway between neighbouring values: the input's rounding must
        # stay far below the gap, and the steps' outputs carry rounding from then on
        gap = min((b - a for a, b in zip(xs, xs[1:])), default=math.inf)
        what = "the selector width's 1/(w+1) is read by steps" if rounded_input else "steps"
        scale = input_scale
        if scale is None:
            scale = max([ctx.form_bound(form)] + [abs(x) for x in xs])
        ctx.needs(
            label,
            f"{what} between values {gap:.3g} apart",
            gap,
            scale=scale,
            form=linear_form(form),
            rounds=True,
            uid=uid,
        )
    ctx.guard(after, label, linear_form(form), allowed=tuple(xs))
    ctx.realised(label, "steps on finite values", "exact", n_units)
    return rep


# a numerical table's output may round by this much, relative to max(|result|, 1): "exact up
# to float rounding" (README, Exactness); float32 keeps it within about a thousand roundings
TABLE_REL_TOL = 1e-9


def _table_tolerance(u: float) -> float:
    return max(TABLE_REL_TOL, 1024.0 * u)


def _check_output_rounding(
    ctx: Context, label: str, form: dict[str, float], xs: Sequence[float], outs: Sequence[Any]
) -> None:
    """Refuses a numerical table whose steps' output sums round by more than the tolerance.

    The steps write the result at the smallest value, then add the change at each step
    below the input (``ir.discretise``): where the table's results are large and some
    values close, those sums cancel and float rounding swamps a small result
    (``D.output_rounding`` bounds it at each value). Proved in the dtype the model computes
    in (float64 unless float32 is asked for); with ``dtype="auto"``, a table that float32
    would round too much records a need for float64.

    Raises:
        UnsupportedError: naming the value, its result and the values that cause it.
    """
    ys = [float(v) if v is not FAILED and is_numeric(v) else 0.0 for v in outs]
    if not all(math.isfinite(y) for y in ys + list(xs)):
        return  # inf or nan results: nothing to bound (the model writes them as they are)
    n_terms = len(form)
    size = ctx.form_bound(form) if n_terms > 1 else 0.0
    name, u, _ = dtype_of(ctx)
    bounds, i = D.output_rounding(xs, ys, size, n_terms, u)
    tol = _table_tolerance(u)
    bad = [j for j, (b, y) in enumerate(zip(bounds, ys)) if not b <= tol * max(abs(y), 1.0)]
    if bad:
        j = bad[0]
        i = 0 if i is None else i
        raise UnsupportedError(
            f"{label}: a table of its function on {len(xs)} input values cannot be computed "
            f"to float rounding in {name}: at the input {xs[j]!r} (result {outs[j]!r}) its "
            f"steps' sums round by up to {bounds[j]:.3g}, more than {tol:g} of the result; "
            f"the results reach {max(abs(y) for y in ys):.3g} and the values {xs[i]!r} and "
            f"{xs[i + 1]!r} are {xs[i + 1] - xs[i]:.3g} apart among values up to "
            f"{max(abs(x) for x in xs):.3g}; narrow the input's value set (round it, or keep "
            "its values closer in size) or compute the map from +, - and * on the input"
        )
    if name == "float64" and ctx.options.dtype != torch.float64:
        u32 = 2.0**-24
        b32, _ = D.output_rounding(xs, ys, size, n_terms, u32)
        tol32 = _table_tolerance(u32)
        if not all(b <= tol32 * max(abs(y), 1.0) for b, y in zip(b32, ys)):
            ctx.needs(label, "a numerical table whose sums float32 rounds too much", 0.0)


def _exact_steps(xs: Sequence[float]) -> bool:
    """Whether steps between ``xs`` compute exactly in float32 on exact inputs: integer
    values at most 2^20 whose gaps are powers of two (slopes and thresholds then are
    multiples of 1/2 that float32 holds, and every sum is an exact small integer)."""
    if not all(float(x).is_integer() and abs(x) <= 2.0**20 for x in xs):
        return False
    return all(math.log2(b - a).is_integer() for a, b in zip(xs, xs[1:]))


def square(ctx: Context, form: dict[str, float], after: After, label: str) -> tuple[str, After]:
    """A direction holding the square of a linear form (one bilinear unit)."""
    key = linear_form(form)
    got = ctx.squares.get(key)
    if got is not None:
        return got
    stage = ctx.mlp_stage(after)
    d = ctx.new_dir(ctx.fresh(f"{label}^2"))
    bound = ctx.form_bound(form)
    ctx.bounds[d] = bound * bound  # (inf where it overflows: a power would raise)
    ctx.emit(stage, numeric.product_unit(d, form, form, d))
    ctx.squares[key] = (d, stage)
    return d, stage


# -- static numbers for selector scores --------------------------------------------------------


def position_dir(ctx: Context, i: int) -> str:
    """The direction that is 1 at position i (0-based, after BOS) only."""
    d = f"pos:{i}"
    if d not in ctx.static_embed:
        ctx.new_dir(d)
        one = np.array([i], dtype=np.int64)
        ctx.static_embed[d] = PositionColumn(ctx.L, 0.0, one, np.ones(1))
    return d


def numeric_static(ctx: Context, e: E.SOp) -> dict[str, float]:
    """A static S-op's value as a number, embedded (``"label@num"``)."""
    key = f"{ctx.label(e)}@num"
    if key not in ctx.static_embed:
        ctx.new_dir(key)
        ctx.static_embed[key] = static_numbers(ctx, e)
    return {key: 1.0}


def static_numbers(ctx: Context, e: E.SOp) -> np.ndarray | PositionColumn:
    """A static S-op's values as float64 ``[max_seq_len]`` (a numerical S-op's is the
    evaluator's array itself: the embedding shares it, read-only), or as a
    :class:`PositionColumn` for a sparse table (never made dense here)."""
    column = static_tables.column(e, ctx.L)
    if column is not None:
        return PositionColumn(*column)
    got = ctx.vi.static_array(e)
    if isinstance(got, np.ndarray):
        return got
    return np.asarray([float(v) for v in got.to_objects()[0]], dtype=np.float64)


def static_square(ctx: Context, e: E.SOp) -> str:
    """The square of a static S-op's value, embedded (``"label@num^2"``)."""
    key = f"{ctx.label(e)}@num^2"
    if key not in ctx.static_embed:
        ctx.new_dir(key)
        # held as its default and the entries that differ (the values' own array is the
        # evaluator's; a dense square would be another array over every position)
        col = static_numbers(ctx, e)
        col = col if isinstance(col, PositionColumn) else PositionColumn.of(col)
        ctx.static_embed[key] = col.square()
    return key


# -- value helpers ---------------------------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    # one RASP value: 1 and 1.0 (or 0.0 and -0.0) are two, with a direction each
    return value_key(a) == value_key(b)


def _finite(o) -> bool:
    return is_number(o) and math.isfinite(float(o))


def _same_outputs(outs: list, scale: float) -> bool:
    """Whether a function's results on values equal up to rounding agree (numbers: up to
    rounding too, 1e-9 relative to each other or to ``scale``, the largest of the function's
    results: two results of size 1e-6 that differ by 1e-13 differ beyond rounding).

    >>> _same_outputs([1.0, 1.0 + 1e-12], 1.0), _same_outputs([-2e-6, -2.0000002e-6], 2e-6)
    (True, False)
    >>> _same_outputs([0.0, 1e-12], 1.0), _same_outputs(["a", "a"], 0.0)
    (True, True)
    """
    first = outs[0]
    for o in outs[1:]:
        hashable = is_hashable(o) and is_hashable(first)
        if value_key(o) == value_key(first) if hashable else o is first:
            continue
        if (
            is_number(o)
            and is_number(first)
            and math.isclose(o, first, rel_tol=1e-9, abs_tol=1e-9 * scale)
        ):
            continue
        return False
    return True
