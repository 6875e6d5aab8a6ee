"""Aggregates and selector widths: one attention head each, plus MLP units for the rest.

- a mean ``Aggregate``: a BOS-default head (``ir.attention.bos_default_head``) that moves the
  values (a number, or a one-hot block) of the selected keys; a default other than None/0 is
  written where only BOS was attended, by ``flag * notbos`` (``ir.numeric``);
- a sum: the mean times the selector's width (or a static count when it is known);
- ``SelectorWidth``: a head that always attends BOS reads ``1 / (w + 1)``; a discretiser turns
  that into ``w`` (kept off at BOS, where the head reads 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attnsim.compiler.lowering import forms, maps, selectors
from attnsim.compiler.lowering.columns import PositionColumn
from attnsim.compiler.lowering.context import Context
from attnsim.compiler.lowering.program import After, Rep, UnsupportedError
from attnsim.ir import numeric
from attnsim.ir.attention import bos_default_head
from attnsim.ir.blocks import BOS
from attnsim.rasp import expr as E
from attnsim.values import value_key, value_text


def lower_aggregate(ctx: Context, e: E.Aggregate) -> Rep:
    label = ctx.label(e)
    if (
        isinstance(e.selector, E.SelectMax)
        and ctx.vi.values(e.selector.score) is None
        and (e.sop.uid != e.selector.score.uid or not E.is_numerical(e) or e.reduction != "mean")
    ):
        # a real-valued score: the head averages every key whose score is within its
        # tolerance of the maximum; the mean of the score itself is then within that
        # tolerance of the maximum, but any other value would be averaged over near-ties
        # the interpreter tells apart
        raise UnsupportedError(
            f"{label}: over a SelectMax whose score {ctx.label(e.selector.score)!r} is "
            "real-valued, only the numerical mean of that score (the row maximum) can be "
            "compiled; the head averages the keys whose scores lie within its tolerance "
            "(0.25) of the maximum, so another value would be averaged over near-ties. "
            "Aggregate the score itself, or give the score a finite set of values (a "
            "finite vocabulary) so that the compiler can separate them"
        )
    terms, max_score, sel_after = selectors.score(ctx, e.selector)
    numeric_value = E.is_numerical(e) or e.reduction == "sum"
    if numeric_value:
        vform = forms.numeric_form(ctx, e.sop)
        vafter = ctx.rep(e.sop).after
    else:
        vrep = forms.categorical_rep(ctx, e.sop)
        vafter = vrep.after
    stage = ctx.attn_stage(sel_after | vafter)
    default = e.default
    if numeric_value:
        d = ctx.new_dir(label if e.reduction == "mean" else f"{label}@mean")
        ctx.bounds[d] = ctx.form_bound(vform, e.sop)  # a mean is no larger than what it averages
        ov = tuple((k, d, v) for k, v in vform.items())
        rep = Rep("num", stage, form={d: 1.0})
    else:
        dims = tuple(ctx.new_dir(f"{label}:{value_text(v)}") for v in vrep.values)
        ov = tuple((src, dst, 1.0) for src, dst in zip(vrep.dims, dims))
        rep = Rep("cat", stage, values=vrep.values, dims=dims, noise=vrep.noise)
    flag = None
    has_default = (numeric_value and default not in (None, 0, 0.0)) or (
        not numeric_value and default is not None
    )
    if has_default:
        flag = ctx.new_dir(ctx.fresh(f"{label}@empty"))
        ctx.bounds[flag] = 1.0  # BOS's share of the head
        ov = ov + ((BOS, flag, 1.0),)
    gain = ctx.gains.get(e.selector.uid, 1.0)
    pattern = ctx.patterns.get(e.selector.uid)
    head = bos_default_head(label, terms, ov, max_score=max_score, gain=gain, pattern=pattern)
    ctx.emit(stage, head)
    if e.reduction == "sum":
        rep = _sum_from_mean(ctx, e, label, rep)
    if has_default:
        rep = _apply_default(ctx, label, rep, flag, stage, default, numeric_value)
    return rep


def _apply_default(
    ctx: Context, label: str, rep: Rep, flag: str, stage: After, default: Any, numeric_value: bool
) -> Rep:
    """Adds the default where nothing was selected: ``flag * notbos`` (bilinear)."""
    mstage = ctx.mlp_stage(stage)
    if numeric_value:
        d = ctx.new_dir(ctx.fresh(f"{label}@default"))
        ctx.bounds[d] = abs(float(default))
        ctx.emit(mstage, numeric.gated_constant_unit(label, flag, d, float(default)))
        form = dict(rep.form)
        form[d] = 1.0
        # a sum is ready only after its product (a later MLP than the default's)
        return Rep("num", rep.after | mstage, form=form)
    values = rep.values
    dims = rep.dims
    # 0 and 0.0 are different RASP values (the interpreter keeps them apart too)
    if not any(value_key(v) == value_key(default) for v in values):
        values = values + (default,)
        dims = dims + (ctx.new_dir(f"{label}:{value_text(default)}"),)
    index = {value_key(v): d for v, d in zip(values, dims)}
    ctx.emit(mstage, numeric.gated_constant_unit(label, flag, index[value_key(default)]))
    noise = rep.noise + (0.0,) * (len(dims) - len(rep.dims)) if rep.noise else ()
    return Rep("cat", rep.after | mstage, values=values, dims=dims, noise=noise)


def _sum_from_mean(ctx: Context, e: E.Aggregate, label: str, mean: Rep) -> Rep:
    sel = e.selector
    ctx.needs(label, "sums as a mean (a fraction) times a count", 0.0, uid=e.uid)
    if ctx.vi.is_static(sel) and (ctx.vi.fixed_length or ctx.vi.causal):
        counts = ctx.vi.static_counts(sel).astype(np.float64)
        nonzero = counts[counts > 0]
        # a query that selects nothing has mean 0 (the default), so any one scale fits it
        if len(nonzero) == 0 or np.all(nonzero == nonzero[0]):
            c = float(nonzero[0]) if len(nonzero) else 0.0
            form = {k: v * c for k, v in mean.form.items()}
            ctx.realised(label, "sum (static count)", "exact", 0)
            return Rep("num", mean.after, form=form)
        cd = ctx.new_dir(ctx.fresh(f"{label}@count"))
        ctx.static_embed[cd] = PositionColumn.of(counts)  # (most queries: one count)
        ctx.realised(label, "sum (mean x count)", "exact", 1)
        return maps.product(ctx, ctx.fresh(label), mean.form, {cd: 1.0}, mean.after)
    width = E.numerical(E.SelectorWidth(sel)).named(f"{label}@width")
    wrep = ctx.rep(width)
    ctx.realised(label, "sum (mean x width)", "exact", 1)
    return maps.product(ctx, ctx.fresh(label), mean.form, wrep.form, mean.after | wrep.after)


def lower_selector_width(ctx: Context, e: E.SelectorWidth) -> Rep:
    label = ctx.label(e)
    if selectors.contains_select_max(e.selector):
        raise UnsupportedError(
            f"{label}: the width (or a sum aggregate) of a SelectMax cannot be compiled: "
            "its head cannot count the tied keys; use a mean Aggregate over it"
        )
    terms, max_score, after = selectors.score(ctx, e.selector)
    stage = ctx.attn_stage(after)
    r = ctx.new_dir(ctx.fresh(f"{label}@inv"))
    ctx.bounds[r] = 1.0  # 1 / (w + 1)
    head = bos_default_head(
        label,
        terms,
        ((BOS, r, 1.0),),
        mode="width",
        max_score=max_score,
        pattern=ctx.patterns.get(e.selector.uid),
    )
    ctx.emit(stage, head)
    # the head reads 1/(w+1); steps between those values give w (gated off at BOS)
    ws = list(range(ctx.L + 1))
    in_vals = [1.0 / (w + 1) for w in ws]
    table = {value_key(1.0 / (w + 1)): w for w in ws}
    return forms.discretise(
        ctx,
        label,
        {r: 1.0},
        stage,
        in_vals,
        table,
        None,
        num_out=E.is_numerical(e),
        bos_guard=2.0,  # the head reads 1 at BOS; this keeps every step off there
        uid=e.uid,
        input_scale=1.0,  # 1/(w+1) <= 1
        rounded_input=True,  # 1/(w+1) is rounded
    )
