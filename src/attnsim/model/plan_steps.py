"""Step plans: ReLU units of one input-dependent number, run as a piecewise-linear table.

A discretiser (a selector width's ``1/(w+1)`` turned into a one-hot width, a number turned
into its category) is a group of ReLU units that all read one input-dependent residual
direction ``t``, besides static directions that hold the same value at every position but
BOS. Their summed output is then a piecewise-linear function of ``t`` alone:
``sum_u relu(a_u t + c_u) W_out[u] = slope[k] t + offset[k]`` on the k-th interval between the
units' breakpoints ``-c_u / a_u``. The plan executor looks the interval up
(``searchsorted``) and writes ``slope[k] t + offset[k]``: ``[positions, outputs]`` work
instead of ``[positions, units]`` activations and a ``[units, outputs]`` product. BOS (where
the static directions may differ) runs the units as they are.

The tables are computed from the weights and from the static stream of one input of the
length (the same canonical input the attention plans use), in float64 sums of the same
terms the dense units add; on the flat parts of a step (the values the program takes) the
outputs are the same to rounding.

>>> import torch
>>> from attnsim.model.config import ModelConfig
>>> from attnsim.model.transformer import Transformer
>>> t = Transformer(ModelConfig(n_layers=1, d_model=3, n_heads=1, d_head=1, d_mlp=2,
...                             d_bilinear=0, n_ctx=4, d_vocab=1, numerical_tokens=True))
>>> m = t.blocks[0].mlp
>>> with torch.no_grad():  # |x| as relu(x) + relu(-x), x the token value (direction 0)
...     t.W_E_num[0] = 1.0; m.W_in[0, 0] = 1.0; m.W_in[0, 1] = -1.0
...     m.W_out[0, 2] = 1.0; m.W_out[1, 2] = 1.0
>>> x = torch.zeros(1, 4, 3, dtype=torch.float64)
>>> (plan,) = for_layer(m, x, torch.tensor([False, True, True]), min_units=1)
>>> plan.bounds.abs().tolist(), plan.slope[:, 0].tolist(), plan.offset[:, 0].tolist()
([0.0], [-1.0, 1.0], [0.0, 0.0])
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from attnsim.model import plan_core
from attnsim.model.costs import FLAT_TERMS, MAX_UNITS, MIN_UNITS, ROW_TABLE_WIDTH
from attnsim.model.native import NATIVE_FUNCTIONS
from attnsim.model.plan_static import _mlp_units
from attnsim.model.projection import add_columns, columns, set_columns

__all__ = ["StepPlan", "ConstUnits", "for_layer", "const_units", "run", "compact"]


@dataclass(frozen=True)
class StepPlan:
    """ReLU units of one MLP that read one input-dependent direction, as a table.

    Attributes:
        units: ``[U]`` the units' indices in the MLP.
        row: the residual direction they read (``t``).
        cols: ``[C]`` the residual directions they write.
        bounds: ``[S]`` the sorted breakpoints in ``t``.
        slope: ``[S + 1, C]`` the output's slope in ``t`` on each interval.
        offset: ``[S + 1, C]`` its value at ``t = 0`` on each interval.
    """

    kind: ClassVar[str] = "step"

    units: torch.Tensor
    row: int
    cols: torch.Tensor
    bounds: torch.Tensor
    slope: torch.Tensor
    offset: torch.Tensor
    # per interval: flat with at most FLAT_TERMS non-zero outputs (a step's plateau: the
    # values a program takes), then those outputs' columns (into cols) and values
    flat: torch.Tensor | None = None
    flat_col: torch.Tensor | None = None  # [S + 1, FLAT_TERMS]
    flat_value: torch.Tensor | None = None  # [S + 1, FLAT_TERMS] (0 where unused)
    # the units as BOS runs them: the directions they read there, ``W_in[bos_rows][:,
    # units]`` and ``W_out[units][:, cols]``
    bos_rows: torch.Tensor | None = None
    bos_in: torch.Tensor | None = None
    bos_out: torch.Tensor | None = None


@dataclass(frozen=True)
class ConstUnits:
    """ReLU units of one MLP that read static directions only: for one input length their
    output is the same on every input, computed once (on the static stream the plans are
    built from) and added as it is.

    Attributes:
        units: ``[U]`` the units' indices in the MLP.
        cols: ``[C]`` the residual directions they write.
        values: ``[pos, C]`` their summed output at each position.
    """

    kind: ClassVar[str] = "const"

    units: torch.Tensor
    cols: torch.Tensor
    values: torch.Tensor


def const_units(mlp, x: torch.Tensor, static: torch.Tensor) -> tuple[ConstUnits, ...]:
    """The MLP's ReLU units that read static directions only and write columns no other unit
    writes, as one :class:`ConstUnits` (none when there are none), given the static stream
    ``x [1, pos, d_model]`` entering it (other directions 0) and its static directions
    ``static``. Their values are the MLP's own output there, so each column is the sum the
    dense forward computes.

    >>> import torch
    >>> from attnsim.model.config import ModelConfig
    >>> from attnsim.model.transformer import MLP
    >>> m = MLP(ModelConfig(n_layers=1, d_model=2, n_heads=1, d_head=1, d_mlp=2,
    ...                     d_bilinear=0, n_ctx=3, d_vocab=1), torch.float64)
    >>> with torch.no_grad():  # unit 0 reads static direction 0, unit 1 dynamic direction 1
    ...     m.W_in[0, 0], m.W_in[1, 1], m.W_out[0, 1], m.W_out[1, 0] = 2.0, 1.0, 1.0, 1.0
    >>> x = torch.tensor([[[1.0, 0.0], [3.0, 0.0], [-1.0, 0.0]]], dtype=torch.float64)
    >>> (c,) = const_units(m, x, torch.tensor([True, False]))
    >>> c.units.tolist(), c.cols.tolist(), c.values[:, 0].tolist()
    ([0], [1], [2.0, 6.0, 0.0])
    """
    W_in, W_out = mlp.W_in, mlp.W_out
    if W_in.shape[1] == 0:
        return ()
    writes = W_out != 0  # [units, d_model]
    used = writes.any(dim=1)
    ok = used & ~((W_in != 0) & ~static[:, None]).any(dim=0)
    # columns the other kinds of unit write: a constant there would split their sums
    others = torch.zeros(W_out.shape[1], dtype=torch.bool, device=W_out.device)
    for _, w_out, *_ in _mlp_units(mlp)[1:]:
        others |= (w_out != 0).any(dim=0)
    while bool(ok.any()):  # drop units sharing a column with a unit that is not constant
        others_now = others | writes[used & ~ok].any(dim=0)
        shared = ok & (writes & others_now[None, :]).any(dim=1)
        if not bool(shared.any()):
            break
        ok &= ~shared
    if not bool(ok.any()):
        return ()
    units = torch.nonzero(ok).flatten()
    cols = torch.nonzero(writes[units].any(dim=0)).flatten()
    values = mlp(x, None, "")[0][:, cols]  # the dense forward's sums, on the static stream
    return (ConstUnits(units=units, cols=cols, values=values),)


def for_layer(
    mlp,
    x: torch.Tensor,
    static: torch.Tensor,
    min_units: int = MIN_UNITS,
    max_units: int = MAX_UNITS,
) -> tuple[StepPlan, ...]:
    """The step plans of an MLP's ReLU units, given the static stream ``x [1, pos,
    d_model]`` that enters it (other directions 0) and its static directions ``static``."""
    W_in, W_out = mlp.W_in, mlp.W_out
    n = x.shape[1]
    if W_in.shape[1] == 0 or n < 2:
        return ()
    reads = W_in != 0  # [d_model, units]
    dynamic = reads & ~static[:, None]
    rest = x[0, 1:]  # [pos - 1, d_model]: every position but BOS
    same = (rest == rest[:1]).all(dim=0)  # static directions equal at every such position
    ok = (dynamic.sum(dim=0) == 1) & ~(reads & static[:, None] & ~same[:, None]).any(dim=0)
    if not bool(ok.any()):
        return ()
    row_of = dynamic.to(torch.int8).argmax(dim=0)  # [units]: the direction each unit reads
    out = []
    for row in torch.unique(row_of[ok]).tolist():
        units = torch.nonzero(ok & (row_of == row)).flatten()
        if not min_units <= len(units) <= max_units:
            continue
        a = W_in[row, units]  # [U]
        c = rest[0] @ W_in[:, units]  # [U]: the static part (the row itself holds 0 here)
        w = W_out[units]  # [U, d_model]
        cols = torch.nonzero((w != 0).any(dim=0)).flatten()
        w = w[:, cols]
        bos_rows = torch.nonzero((W_in[:, units] != 0).any(dim=1)).flatten()
        bounds = torch.unique(-c / a)  # sorted
        # one probe inside each interval, and one beyond each end
        mids = (bounds[1:] + bounds[:-1]) / 2
        probes = torch.cat([bounds[:1] - 1.0, mids, bounds[-1:] + 1.0])
        active = (a[None, :] * probes[:, None] + c[None, :]) > 0  # [S + 1, U]
        act = active.to(W_in.dtype)
        slope, offset = (act * a[None, :]) @ w, (act * c[None, :]) @ w
        nonzero = offset != 0
        flat = ((slope == 0).all(dim=1)) & (nonzero.sum(dim=1) <= FLAT_TERMS)
        # the non-zero columns of each row first (a stable sort of "is zero")
        order = torch.sort((~nonzero).to(torch.int8), dim=1, stable=True).indices
        flat_col = order[:, :FLAT_TERMS]  # [S + 1, FLAT_TERMS]
        out.append(
            StepPlan(
                units=units,
                row=row,
                cols=cols,
                bounds=bounds,
                slope=slope,
                offset=offset,
                flat=flat,
                flat_col=flat_col,
                flat_value=offset.gather(1, flat_col),
                bos_rows=bos_rows,
                bos_in=W_in[bos_rows][:, units],
                bos_out=w,
            )
        )
    return tuple(out)


def run(mlp, p: StepPlan | ConstUnits, x: torch.Tensor, out: torch.Tensor, where=None) -> None:
    """Adds the units' output to ``out [batch, pos, d_model]`` for the stream ``x`` (or to
    ``out [batch, pos, k]`` when ``where [d_model]`` maps each residual column to its place
    there).

    >>> import torch
    >>> from attnsim.model.config import ModelConfig
    >>> from attnsim.model.transformer import MLP
    >>> m = MLP(ModelConfig(n_layers=1, d_model=2, n_heads=1, d_head=1, d_mlp=2,
    ...                     d_bilinear=0, n_ctx=3, d_vocab=1), torch.float64)
    >>> with torch.no_grad():  # |t| as relu(t) + relu(-t), t in direction 0, out in 1
    ...     m.W_in[0, 0], m.W_in[0, 1], m.W_out[0, 1], m.W_out[1, 1] = 1.0, -1.0, 1.0, 1.0
    >>> static = torch.tensor([False, True])
    >>> (p,) = for_layer(m, torch.zeros(1, 3, 2, dtype=torch.float64), static, min_units=1)
    >>> x = torch.tensor([[[0.0, 0.0], [-2.5, 0.0], [float("nan"), 0.0]]], dtype=torch.float64)
    >>> out = torch.zeros_like(x); run(m, p, x, out); out[0, :, 1].tolist()
    [0.0, 2.5, nan]
    """
    cols = p.cols if where is None else where[p.cols]
    if p.kind == "const":
        add_columns(out, cols, p.values)
        return
    t = x[:, 1:, p.row]  # [batch, pos - 1]
    k = torch.searchsorted(p.bounds, t.contiguous())  # the interval of each t
    flat = p.flat[k]
    every = bool(flat.all())
    flat_out = out[:, 1:]  # a view
    if cols.numel() <= ROW_TABLE_WIDTH:  # each position's whole row: one gather, one add
        vals = p.offset.index_select(0, k.view(-1)).view(*k.shape, -1)
        if not every:  # slope times t plus offset (on a plateau the slope is 0)
            vals = torch.addcmul(
                vals, p.slope.index_select(0, k.view(-1)).view_as(vals), t[..., None]
            )
        add_columns(flat_out, cols, vals)
    elif every:  # every position on a plateau: its few outputs, one scatter
        flat_out.scatter_add_(2, cols[p.flat_col][k], p.flat_value[k])
    else:
        if bool(flat.any()):
            bi, pi = torch.nonzero(flat, as_tuple=True)
            kk = k[bi, pi]
            flat_out.index_put_(
                (bi[:, None], pi[:, None], cols[p.flat_col[kk]]), p.flat_value[kk], accumulate=True
            )
        # the rest: slope times t plus offset, on their intervals
        bi, pi = torch.nonzero(~flat, as_tuple=True)
        kk = k[bi, pi]
        vals = p.slope[kk] * t[bi, pi][:, None] + p.offset[kk]  # [m, C]
        flat_out.index_put_((bi[:, None], pi[:, None], cols[None, :]), vals, accumulate=True)
    # a sum of finite values that is finite: every t is (one sum, where the check costs two
    # passes); the units would give NaN at a t that is not: so does the table
    if not math.isfinite(float(t.sum())) and bool((bad := ~torch.isfinite(t)).any()):
        bi, pi = torch.nonzero(bad, as_tuple=True)
        flat_out.index_put_(
            (bi[:, None], pi[:, None], cols[None, :]),
            out.new_full((len(bi), len(cols)), float("nan")),
            accumulate=True,
        )
    # BOS: the units as they are (its static directions may differ)
    add_columns(out[:, 0], cols, torch.relu(columns(x[:, 0], p.bos_rows) @ p.bos_in) @ p.bos_out)


def flops(p: StepPlan | ConstUnits, n: int) -> int:
    """FLOPs of one step plan on ``n`` positions: a binary search, and a multiply-add per
    output.

    >>> p = StepPlan(torch.arange(4), 0, torch.arange(3), torch.zeros(3), None, None)
    >>> flops(p, 10)  # 10 * (2 * 3 outputs + 2 search steps)
    80
    """
    if p.kind == "const":
        return n * p.cols.numel()
    return n * (2 * p.cols.numel() + p.bounds.numel().bit_length())


def compact(
    mlp,
    x: torch.Tensor,
    plan: tuple[torch.Tensor, torch.Tensor] | None,
    steps: tuple = (),
    state=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """An MLP's output on ``x`` as ``(cols, values)``: only the columns some unit writes,
    each summed in the order the full forward sums it (``plan``: the rows the ReLU units
    read and the columns they write; ``steps``: the step plans of the plan executor, with
    the other ReLU units over their rows and columns). ``state``: the layer's
    :class:`attnsim.model.runtime.LayerState`, where the written columns are kept between
    calls and repeated rows are counted (None: found again, nothing counted).

    >>> from attnsim import compile_program, library
    >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4).model
    >>> ids = torch.tensor([[0, 1, 2, 2, 1]])
    >>> x = m.W_E[ids] + m.W_pos[:5]
    >>> x = x + m.blocks[0].attn.dense_heads(x, m.blocks[0].attn.active_heads())
    >>> mlp = m.blocks[0].mlp
    >>> cols, vals = compact(mlp, x, mlp._plan())  # its ReLU units' rows and columns
    >>> full = mlp(x, None, "")  # the MLP's dense forward
    >>> rest = torch.ones(full.shape[-1], dtype=torch.bool).index_fill(0, cols, False)
    >>> torch.equal(full[..., cols], vals), bool((full[..., rest] == 0).all())
    (True, True)
    """
    slices = mlp._unit_slices()
    got = None if state is None else state.mlp_written
    # kept with the weights' slices, the plan and the step plans
    if got is None or got[0] is not slices or got[1] is not plan or got[4] is not steps:
        groups = [slices[k] for k in (["bilinear"] if mlp.W_bil_a.shape[1] else [])]
        groups += [slices[k] for k in mlp.native_kinds]
        rest = rest_units(mlp, steps) if steps else None
        relu = (rest if steps else plan) if rest is not None or not steps else None
        parts = [relu[1]] if relu is not None else []
        parts += [p.cols for p in steps]
        none = torch.zeros(0, dtype=torch.long, device=x.device)
        written = torch.unique(torch.cat(parts + [g[1] for g in groups] + [none]))
        where = torch.full((x.shape[-1],), -1, dtype=torch.long, device=x.device)
        where[written] = torch.arange(len(written), device=x.device)
        got = (slices, plan, written, where, steps, rest)
        if state is not None:
            state.mlp_written = got
    written, where, rest = got[2], got[3], got[5]
    out = x.new_zeros(*x.shape[:-1], len(written))
    if steps:  # the other units first, then the plans (as the full forward adds them)
        if rest is not None:
            rows, cols, w_in, w_out = rest
            set_columns(out, where[cols], plan_core.relu_rows(x, rows, w_in, w_out, state))
        for p in steps:
            run(mlp, p, x, out, where)
    elif plan is not None:  # the ReLU units over the rows they read, in slices of positions
        rows, cols = plan
        set_columns(
            out,
            where[cols],
            plan_core.relu_rows(x, rows, mlp.W_in[rows], mlp.W_out[:, cols], state),
        )
    if mlp.W_bil_a.shape[1]:
        proj, cols, w_out = slices["bilinear"]
        a, b = proj(x).chunk(2, dim=-1)
        add_columns(out, where[cols], (a * b) @ w_out)
    for kind in mlp.native_kinds:
        proj, cols, w_out = slices[kind]
        pre, gate = proj(x).chunk(2, dim=-1)
        val = torch.where(gate != 0, NATIVE_FUNCTIONS[kind](pre), torch.zeros_like(pre)) * gate
        add_columns(out, where[cols], val @ w_out)
    return written, out


def rest_units(mlp, steps: tuple) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The ReLU units the step plans leave, as (rows they read, columns they write) with
    their weights there: ``(rows, cols, w_in, w_out)``; None when none is left."""
    keep = torch.ones(mlp.W_in.shape[1], dtype=torch.bool, device=mlp.W_in.device)
    for p in steps:
        keep[p.units] = False
    units = torch.nonzero(keep & (mlp.W_out != 0).any(dim=1)).flatten()
    if len(units) == 0:
        return None
    w_in, w_out = mlp.W_in[:, units], mlp.W_out[units]
    rows = torch.nonzero((w_in != 0).any(dim=1)).flatten()
    cols = torch.nonzero((w_out != 0).any(dim=0)).flatten()
    return rows, cols, w_in[rows], w_out[:, cols]
