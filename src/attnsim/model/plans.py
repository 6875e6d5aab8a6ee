"""Execution plans: attention heads whose pattern the input cannot change, run as gathers.

A compiled head often selects keys by position alone (reverse, shift, transpose, every
gather and row sum of the universal simulator). Its pattern is then the same for every input
of a given length, and computing it densely over ``[query, key]`` for every batch is waste.
This module finds such heads *from the weights* and runs them as sparse sums.

**Static directions.** A residual direction is static when its value at every position is
the same for every input of a length: the embedding writes it from positions (and from the
BOS row, which always sits at position 0) but never from a token other than BOS, and every
sublayer that writes it reads static directions only. A head whose query and key weights
read static directions only has a static pattern; if its value weights do too, its output is
static as well. The analysis is exact: it reads which weights are non-zero, and a zero weight
contributes an exact 0 to every sum.

**Plans.** For each input length the pattern of every static head is computed once, on one
input of that length, by the same arithmetic the dense forward uses (the scores, the hard
threshold or the softmax), and kept as the selected keys of each query in compressed rows
(CSR). Running the head is then ``z = mean over the selected keys of v`` (hard attention:
the sum, then one division by the count, as the dense path does) or ``z = sum w v`` with the
kept softmax weights (those that are exactly 0 in the dense pattern are dropped), as one
gather of the selected values and one indexed sum. A head that
selects one key per query is a gather and is bit-for-bit the dense result; sums over several
keys add the same terms, possibly in another order (a difference of the order of one
rounding of the sum).

**Constant heads and units**: a static head whose values also read static directions only
(:class:`ConstPlan`), and ReLU units that read static directions only
(:class:`attnsim.model.plan_steps.ConstUnits`), give the same output on every input of the
length: it is computed once, on the stream the plans are built from, and added as it is.

**Token-table heads** (:mod:`attnsim.model.plan_tables`) run over classes of positions, and
**one-sided heads** (:mod:`attnsim.model.plan_keys`) over their other side's distinct rows.

Shapes: batch, pos (BOS included), d_model; a plan: ``offsets [pos + 1]``, ``keys [nnz]``.

>>> import torch
>>> from attnsim.model.config import ModelConfig
>>> from attnsim.model.transformer import Transformer
>>> cfg = ModelConfig(n_layers=1, d_model=3, n_heads=1, d_head=1, d_mlp=0, d_bilinear=0,
...                   n_ctx=4, d_vocab=3)
>>> t = Transformer(cfg)
>>> a = t.blocks[0].attn
>>> with torch.no_grad():  # one head: queries and keys read position 0's direction only
...     t.W_pos[0, 0] = 1.0; a.W_Q[0, 0, 0] = 1.0; a.W_K[0, 0, 0] = 1.0
...     a.W_V[0, 2, 0] = 1.0; a.W_O[0, 0, 1] = 1.0; t.W_E[1, 2] = 1.0; t.W_E[2, 2] = 2.0
>>> static_heads(t)
((0,),)
>>> plan = build_plans(t, 4)
>>> plan[0][0].offsets.tolist(), plan[0][0].keys.tolist()
([0, 1, 5, 9, 13], [0, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3])
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import torch

from attnsim.model import plan_core, plan_keys, plan_static, plan_steps, plan_tables
from attnsim.model.costs import TRIES
from attnsim.model.patterns import gather_keys
from attnsim.model.plan_keys import SidePlan
from attnsim.model.plan_static import (  # noqa: F401 - read by the tests
    _mlp_units,
    _reads,
    _writes,
    pattern_keys,
    static_directions,
    static_heads,
)
from attnsim.model.plan_tables import RowTablePlan, TablePlan
from attnsim.model.projection import (  # noqa: F401 - read by tests
    Projection,
    _project,
    add_columns,
    columns,
    head_output,
    head_values,
    set_columns,
)

__all__ = [
    "HeadPlan",
    "head_plan",
    "keys_plan",
    "pattern_plan",
    "candidate_plan",
    "ConstPlan",
    "TablePlan",
    "SidePlan",
    "RowTablePlan",
    "StaticAnalysis",
    "static_heads",
    "static_directions",
    "build_plans",
    "planned_attention",
    "compact_heads",
]

# "auto": short inputs feature-major where that costs less (attnsim.model.fused), else
# "plan": static heads as gathers; "fused": always feature-major; "dense": the definition;
# "jit": as "auto", its feature-major passes compiled by inductor (attnsim.model.fused)
EXECUTORS = ("auto", "plan", "fused", "dense", "jit")
# the kinds of a layer's head plans (each plan's ``kind``), in the order
# :func:`planned_attention` runs them: constants, token tables (exact whenever every class
# is known), certified candidates, one-sided heads, classes of rows, then fixed keys
KINDS = ("const", "table", "candidates", "side", "rows", "head")
# what a runtime can be built without (Runtime(net, without=...)): every kind of head plan
# and the MLPs' step tables; benchmarks/plan_kinds.py measures what each buys
OPTIONAL_KINDS = KINDS + ("steps",)


def by_kind(plans) -> dict[str, list]:
    """A layer's plans grouped by ``kind``, every kind of :data:`KINDS` present (maybe
    empty), each group in the plans' order.

    >>> by_kind(())["head"]
    []
    """
    out: dict[str, list] = {k: [] for k in KINDS}
    for p in plans:
        out[p.kind].append(p)
    return out


@dataclass(frozen=True)
class HeadPlan:
    """The keys one head selects for every query, for one input length: the plan both
    storages run (the sparse storage, :mod:`attnsim.model.sparse_plans`, on its spans).

    Attributes:
        head: the head's index in its layer.
        offsets: ``[pos + 1]`` int64: query q's keys are ``keys[offsets[q]:offsets[q + 1]]``
            (None in a listed gather).
        keys: ``[nnz]`` int64 key positions, query by query.
        weights: softmax heads: ``[nnz]`` the pattern's weights; hard heads: None (the mean
            of the selected keys' values).
        gather: every query selects exactly one key (then ``keys`` is ``[pos]``, or in a
            listed gather ``[len(queries)]``).
        queries: a listed gather (the sparse storage's form, where most queries of a gather
            read one key, BOS): the queries whose key is not ``fill``, ascending, and
            ``keys`` theirs; None where every query's keys are held.
        fill: a listed gather's key for the queries it does not list.
    """

    head: int
    offsets: torch.Tensor | None
    keys: torch.Tensor
    weights: torch.Tensor | None
    gather: bool
    # a hard head whose scores also read input-dependent directions: ``keys`` are the
    # candidates the static part of the scores selects, ``gap [pos]`` how far below a
    # query's static maximum its best other key lies, ``key_bound [width]`` the largest
    # |static key coordinate| (its run checks the gap: plan_core.candidate_mean)
    gap: torch.Tensor | None = None
    key_bound: torch.Tensor | None = None
    static_rows: torch.Tensor | None = None  # [d_model] bool: the static directions
    queries: torch.Tensor | None = None
    fill: int = 0

    @property
    def kind(self) -> str:
        """ "candidates" (scores checked on run) or "head" (its keys, fixed)."""
        return "candidates" if self.gap is not None else "head"

    @property
    def nnz(self) -> int:
        return int(self.keys.numel())

    @cached_property
    def rows(self) -> torch.Tensor:
        """The query of each key (not in a listed gather; found once)."""
        counts = self.offsets[1:] - self.offsets[:-1]
        return torch.repeat_interleave(torch.arange(len(counts), device=counts.device), counts)

    @cached_property
    def by_key(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A listed gather's keys in ascending order and their queries (found once): the
        queries whose keys lie in a span of positions are one slice."""
        order = torch.argsort(self.keys, stable=True)
        return self.keys[order], self.queries[order]

    def dense(self, dtype: torch.dtype) -> torch.Tensor:
        """The pattern ``[query, key]`` this plan stands for (not of a listed gather)."""
        n = self.offsets.numel() - 1
        counts = self.offsets[1:] - self.offsets[:-1]
        out = torch.zeros(n, n, dtype=dtype, device=counts.device)
        if self.weights is None:
            out[self.rows, self.keys] = 1.0 / counts[self.rows].to(dtype)
        else:
            out[self.rows, self.keys] = self.weights.to(dtype)
        return out


def head_plan(h: int, offsets, keys, weights, gather: bool, listed: bool = False) -> HeadPlan:
    """Head h's plan from every query's keys ``offsets [pos + 1], keys [nnz]`` (and, for
    softmax, ``weights [nnz]``; ``gather``: one key per query); ``listed``: a gather in the
    listed form, with the most read key (BOS, mostly) as the fill.

    >>> p = head_plan(0, torch.tensor([0, 1, 2, 3]), torch.tensor([0, 2, 0]), None, True, True)
    >>> p.fill, p.queries.tolist(), p.keys.tolist(), p.offsets
    (0, [1], [2], None)
    """
    if not (listed and gather):
        return HeadPlan(h, offsets, keys, weights, gather)
    fill = int(torch.bincount(keys).argmax())
    queries = torch.nonzero(keys != fill).flatten()
    return HeadPlan(h, None, keys[queries], None, True, queries=queries, fill=fill)


def keys_plan(cfg, h: int, q: torch.Tensor, k: torch.Tensor, listed=False):
    """Head h's plan from its queries and keys ``[pos, width]`` on one input, by the dense
    forward's arithmetic (:func:`attnsim.model.plan_core.select_keys`).

    >>> from attnsim.model.config import ModelConfig
    >>> cfg = ModelConfig(n_layers=1, d_model=1, n_heads=1, d_head=1, d_mlp=0, d_bilinear=0,
    ...                   n_ctx=3, d_vocab=2)
    >>> pos = torch.arange(3, dtype=torch.float64)[:, None]  # query i reads key 2 - i
    >>> q, k = torch.cat([2 * (2 - pos), -torch.ones(3, 1)], 1), torch.cat([pos, pos**2], 1)
    >>> p = keys_plan(cfg, 0, q, k)
    >>> p.kind, p.gather, p.keys.tolist()
    ('head', True, [2, 1, 0])
    """
    return head_plan(h, *plan_core.select_keys(cfg, q, k), listed=listed)


def pattern_plan(pattern, h: int, n: int, causal: bool, device=None, listed=False) -> HeadPlan:
    """Head h's plan for ``n`` positions from the keys the compiler wrote down for it
    (``pattern``, an :class:`attnsim.model.patterns.StaticPattern`); a listed gather is made
    from the pattern's listed queries where it is one
    (:func:`attnsim.model.patterns.gather_keys`).

    >>> from attnsim.model.patterns import StaticPattern
    >>> p = pattern_plan(StaticPattern.equality([1.0, 0.0], [0.0, 1.0]), 0, 3, False, listed=True)
    >>> p.gather, p.fill, p.queries.tolist(), p.keys.tolist()  # BOS reads BOS: the fill
    (True, 0, [1, 2], [2, 1])
    """
    got = gather_keys(pattern, n, causal) if listed else None
    if got is not None:
        fill, queries, keys = got
        keys, queries = torch.from_numpy(keys), torch.from_numpy(queries)
        return HeadPlan(h, None, keys, None, True, queries=queries, fill=fill)
    offsets, keys = pattern_keys(pattern, n, causal, device)
    return head_plan(h, offsets, keys, None, bool((offsets.diff() == 1).all()), listed)


def candidate_plan(cfg, h: int, q, k, static_rows=None) -> HeadPlan | None:
    """A plan on the static part ``q, k [pos, width]`` of hard head h's scores, or None when
    it would not save work: the static part selects more than a quarter of all pairs, or
    leaves some query without a gap above the tolerance
    (:func:`attnsim.model.plan_core.candidate_keys`).

    >>> from attnsim.model.config import ModelConfig
    >>> cfg = ModelConfig(n_layers=1, d_model=1, n_heads=1, d_head=1, d_mlp=0, d_bilinear=0,
    ...                   n_ctx=4, d_vocab=2)
    >>> k = torch.tensor([[0.0], [9.0], [0.0], [0.0]], dtype=torch.float64)
    >>> p = candidate_plan(cfg, 0, torch.ones(4, 1, dtype=torch.float64), k)
    >>> p.kind, p.keys.tolist()  # each query's candidate: key 1, 9 above the others
    ('candidates', [1, 1, 1, 1])
    """
    got = plan_core.candidate_keys(cfg, q, k)
    if got is None:
        return None
    offsets, keys, gap, key_bound = got
    return HeadPlan(h, offsets, keys, None, False, gap, key_bound, static_rows)


@dataclass(frozen=True)
class ConstPlan:
    """Static heads whose values read static directions only: for one input length their
    summed output is the same on every input, computed once and added as it is.

    Attributes:
        heads: the heads' indices in their layer.
        values: ``[pos, written columns]`` their summed output, on the columns the layer's
            heads write (:meth:`Attention.written_columns`).
    """

    kind: ClassVar[str] = "const"  # what runs it (attnsim.model.plans.KINDS)

    heads: tuple[int, ...]
    values: torch.Tensor


def _canonical_input(transformer, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """BOS and then token row 1 (any token: static directions do not read it), values 0."""
    device = transformer.W_E.device
    ids = torch.zeros(1, n, dtype=torch.long, device=device)
    if transformer.W_E.shape[0] > 1:
        ids[0, 1:] = 1
    return ids, torch.zeros(1, n, dtype=torch.float64, device=device)


def _qk(attn, h: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Head h's queries and keys ``[pos, used width]`` on the stream ``x [1, pos, d_model]``."""
    width = max(1, int(attn._plan()[1][h]))
    return x[0] @ attn.W_Q[h, :, :width], x[0] @ attn.W_K[h, :, :width]


@dataclass(frozen=True)
class StaticAnalysis:
    """What :func:`build_plans` needs from the weights, computed once per set of weights."""

    masks: list  # static_directions(transformer)
    heads: tuple[tuple[int, ...], ...]  # static_heads(transformer)
    parts: list  # per layer, (attention, MLP) keeping only what writes static directions
    # per layer, the other active heads whose queries or keys read some static direction
    # (hard attention): candidates for a plan on the static part of their scores
    partial: tuple[tuple[int, ...], ...] = ()
    # per layer, the token-table heads (not static): their queries and keys read directions
    # that only the token row of the embedding writes (see :class:`TablePlan`)
    tables: tuple[tuple[TablePlan, ...], ...] = ()
    # per layer, (head, side) of the one-sided heads (not static): their keys or their
    # queries read static directions only (see attnsim.model.plan_keys)
    sides: tuple[tuple[tuple[int, str], ...], ...] = ()
    # per layer, the other heads that are not static: run over the classes of their rows
    rows: tuple[tuple[RowTablePlan, ...], ...] = ()
    # the kinds of OPTIONAL_KINDS left out: their heads run by the next way that applies
    without: frozenset = frozenset()

    @classmethod
    def of(cls, transformer, without=frozenset()) -> StaticAnalysis:
        flow, without = plan_static.analysis(transformer), frozenset(without)

        def kept(kind: str, per_layer) -> tuple:  # () per layer for a kind left out
            return tuple(() if kind in without else tuple(x) for x in per_layer)

        masks, heads = flow["masks"], kept("head", flow["heads"])
        with torch.no_grad():
            parts = [
                _static_part(b, masks[2 * i], masks[2 * i + 1])
                for i, b in enumerate(transformer.blocks)
            ]
            found = kept("table", plan_tables.table_plans(transformer, heads))
            sides = kept("side", plan_keys.side_heads(transformer, masks, heads))
        partial = kept("candidates", flow["partial"])
        skip = [
            set(hs) | {t.head for t in tb} | {h for h, _ in one}
            for hs, tb, one in zip(heads, found, sides)
        ]
        rows = kept("rows", plan_tables.row_table_plans(transformer, skip))
        return cls(masks, heads, parts, partial, found, sides, rows, without)


def summary(transformer) -> dict:
    """The heads a plan covers, per layer, as plain lists (saved with checkpoints).

    >>> from attnsim import compile_program, library, rasp
    >>> m = compile_program(library.make_reverse(rasp.tokens), vocab="ab", max_seq_len=4)
    >>> summary(m.model)
    {'static_heads': [[0], [], [], [0]], 'partial_heads': [[], [], [], []]}
    """
    flow = plan_static.analysis(transformer)
    return {"static_heads": flow["heads"], "partial_heads": flow["partial"]}


def build_plans(transformer, n: int, analysis=None, steps: list | None = None) -> list[tuple]:
    """The plans of every static head for inputs of ``n`` positions (BOS included), the
    candidates and the token-table heads whose class sums cost less than their dense form.

    The static part of the stream is computed once, on one input of that length, layer by
    layer (with the plans of the layers before). ``steps``, a list, receives each MLP's step
    plans (:mod:`attnsim.model.plan_steps`), found on the same stream.

    >>> from attnsim import compile_program, library, rasp
    >>> m = compile_program(library.make_reverse(rasp.tokens), vocab="ab", max_seq_len=4)
    >>> plans = build_plans(m.model, 5)
    >>> [[type(p).__name__ for p in layer] for layer in plans]  # length: the same on every input
    [['ConstPlan'], [], [], ['HeadPlan']]
    >>> [(p.head, p.gather, p.nnz) for p in plans[3]]  # the reversing gather
    [(0, True, 5)]
    """
    analysis = StaticAnalysis.of(transformer) if analysis is None else analysis
    masks, heads = analysis.masks, analysis.heads
    patterns = plan_static.known_patterns(transformer)
    ids, _ = _canonical_input(transformer, n)
    out: list[tuple[HeadPlan, ...]] = []

    def keep_static(x: torch.Tensor, stage: int) -> torch.Tensor:
        # the other directions hold this one input's values, which may be infinite (1/x of
        # a 0 token); a zero weight times an infinity is NaN, so they are cleared
        return torch.where(masks[stage], x, x.new_zeros(()))

    with torch.no_grad():
        x = keep_static(transformer.W_E[ids] + transformer.W_pos[:n], 0)
        for layer, block in enumerate(transformer.blocks):
            cfg, mine = block.attn.cfg, patterns[layer] if patterns else None
            plans = tuple(
                pattern_plan(mine[h], h, n, cfg.causal, x.device)
                if mine and mine[h] is not None
                else keys_plan(cfg, h, *_qk(block.attn, h, x))
                for h in heads[layer]
            )
            partial = analysis.partial[layer] if analysis.partial else ()
            static = masks[2 * layer]
            cands = (candidate_plan(cfg, h, *_qk(block.attn, h, x), static) for h in partial)
            cands = tuple(p for p in cands if p is not None)
            found = analysis.tables[layer] if analysis.tables else ()
            found = tuple(t for t in found if plan_tables.pays(t, n, block.attn))
            one = analysis.sides[layer] if analysis.sides else ()
            found += tuple(plan_keys.side_plan(block.attn, h, side, x) for h, side in one)
            found += analysis.rows[layer] if analysis.rows else ()
            const = "const" not in analysis.without  # (the static pass runs the plans)
            heads_or_const = _const_plan(block.attn, x, plans, masks[2 * layer]) if const else plans
            out.append(heads_or_const + cands + found)
            attn, mlp = analysis.parts[layer]
            x = keep_static(x + planned_attention(attn, x, plans), 2 * layer + 1)
            if steps is not None:
                static, leave = masks[2 * layer + 1], analysis.without
                found = () if "const" in leave else plan_steps.const_units(block.mlp, x, static)
                found += () if "steps" in leave else plan_steps.for_layer(block.mlp, x, static)
                steps.append(found)
            x = keep_static(x + mlp(x, None, ""), 2 * layer + 2)
    return out


def _static_part(block, before_attn: torch.Tensor, before_mlp: torch.Tensor):
    """Copies of a block's attention and MLP that keep only what writes static directions:
    the other heads and units get zero weights, so that on the one input a plan is built
    from they add exact zeros (not ``0 * inf`` where a unit reads a cleared direction).
    The shapes stay the same, so every static value is summed exactly as in the model."""
    attn, mlp = copy.deepcopy(block.attn), copy.deepcopy(block.mlp)
    for h in attn.active_heads().tolist():
        reads = _reads(attn.W_Q[h]) | _reads(attn.W_K[h]) | _reads(attn.W_V[h])
        if not bool((before_attn | ~reads).all()):
            attn.W_O[h].zero_()
    for w_in, w_out, *gates in _mlp_units(mlp):
        reads = w_in.abs() > 0
        for g in gates:
            reads = reads | (g.abs() > 0)
        dynamic = ~(before_mlp[:, None] | ~reads).all(dim=0)  # [units]
        for w in (w_in, *gates):
            w[:, dynamic] = 0.0
        w_out[dynamic] = 0.0
    return attn, mlp


def planned_attention(
    attn,
    x: torch.Tensor,
    plans: tuple,
    compact: bool = False,
    ids: torch.Tensor | None = None,
    state=None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """An attention sublayer's output ``[batch, pos, d_model]``: the planned heads as gathers
    and sparse sums, a certified candidate head on its candidates, a token-table head over
    its classes, the other active heads dense. With ``compact``: ``(cols, values)``, the
    columns the layer's heads can write and the output there ``[batch, pos, len(cols)]``
    (every other column of the output is 0), so that the caller adds only those. ``ids``:
    the token ids of ``x``, from which token-table heads read their classes where they can.
    ``state``: what the runtime keeps for this layer between calls
    (:class:`attnsim.model.runtime.LayerState`: the count of failed certificates per head,
    the planned heads' stacked weights; None: nothing is kept).

    >>> from attnsim import compile_program, library, rasp
    >>> m = compile_program(library.make_reverse(rasp.tokens), vocab="ab", max_seq_len=4)
    >>> net, ids = m.model, m.encode(["abba"])[0]
    >>> x, attn = net.W_E[ids] + net.W_pos[:5], net.blocks[0].attn  # layer 0: length
    >>> planned = planned_attention(attn, x, m.runtime.plans(5)[0])
    >>> torch.allclose(planned, attn.dense_heads(x, attn.active_heads()), rtol=1e-15)
    True
    """
    heads, _, ov_width = attn._plan()
    if state is None:
        written, where = attn.written_columns()
    else:  # (the runtime drops its layer states when the weights change)
        if "written" not in state.cache:
            state.cache["written"] = attn.written_columns()
        written, where = state.cache["written"]
    out = x.new_zeros(*x.shape[:-1], len(written))
    planned: set[int] = set()
    layer_plans = plans  # (kept for the length: the key of what is stacked for it)
    by = by_kind(plans)
    for p in by["const"]:  # the same output on every input of this length
        out += p.values
        planned.update(p.heads)
    fixed = tuple(by["head"])
    planned.update(p.head for p in fixed)

    kept = None if state is None else state.cache  # derived from the weights, kept

    def add(h: int, z: torch.Tensor) -> None:
        cols, proj = head_output(attn, h, where, kept)
        add_columns(out, cols, proj(z))
        planned.add(h)

    # a token-table head's class sums are exact for every input whose classes are known:
    # they go before its candidates, whose certificate may fail
    for p in by["table"]:
        z = plan_tables.run(attn, p, x, ids, kept)
        if z is not None:  # every position's class is known
            add(p.head, z)
    # a candidate head whose certificate failed twice runs dense from then on: its check
    # would cost more than it saves (the outputs are the dense ones either way)
    misses = {} if state is None else state.misses
    for p in by["candidates"]:
        if p.head not in planned and misses.get(p.head, 0) < TRIES:
            z = _run_candidates(attn, p, x, kept)
            if z is not None:  # certified: the head's keys are among its candidates
                add(p.head, z)
            else:
                misses[p.head] = misses.get(p.head, 0) + 1
    # None twice (too many distinct rows on the dynamic side): the head stops trying
    for p in by["side"]:
        if p.head not in planned and misses.get(("side", p.head), 0) < TRIES:
            z = plan_keys.run(attn, p, x, kept)
            if z is not None:
                add(p.head, z)
            else:
                misses[("side", p.head)] = misses.get(("side", p.head), 0) + 1
    for p in by["rows"]:  # None (too many classes) twice: the head runs dense from then on
        if p.head not in planned and misses.get(("rows", p.head), 0) < TRIES:
            z = plan_tables.run_rows(attn, p, x, misses, kept)
            if z is not None:
                add(p.head, z)
    if fixed:
        cache = None if state is None else state.cache
        plan_core.sum_planned(attn, x, fixed, out, where, cache, layer_plans)
    rest = [h for h in heads.tolist() if h not in planned]
    if rest:
        out += compact_heads(attn, x, torch.tensor(rest, device=x.device), written)
    if compact:
        return written, out
    full = torch.zeros_like(x)
    full.index_copy_(-1, written, out)
    return full


def _const_plan(attn, x: torch.Tensor, plans: tuple, static: torch.Tensor) -> tuple:
    """The planned heads whose values read static directions only, as one
    :class:`ConstPlan` computed on the static stream ``x [1, pos, d_model]``, followed by the
    other plans; ``plans`` as they are when there is no such head."""
    const = tuple(p for p in plans if not bool((_reads(attn.W_V[p.head]) & ~static).any()))
    if not const:
        return plans
    written, where = attn.written_columns()
    out = x.new_zeros(1, x.shape[1], len(written))
    plan_core.sum_planned(attn, x, const, out, where)
    heads = tuple(p.head for p in const)
    rest = tuple(p for p in plans if p.head not in heads)
    return (ConstPlan(heads=heads, values=out[0]),) + rest


def _run_candidates(attn, p: HeadPlan, x: torch.Tensor, cache=None) -> torch.Tensor | None:
    """A hard head's mean values ``[batch, pos, width]`` computed on its candidate keys, or
    None when the input-dependent part of its scores could reach a key outside them (the
    certificate: :func:`attnsim.model.plan_core.candidate_mean`)."""
    cfg = attn.cfg
    h = p.head
    width = int(p.key_bound.numel())
    W_Q, W_K = attn.W_Q[h, :, :width], attn.W_K[h, :, :width]
    reads = _reads(W_Q) | _reads(W_K)
    stat = torch.nonzero(reads & p.static_rows).flatten()  # the few rows the scores read
    dyn = torch.nonzero(reads & ~p.static_rows).flatten()
    xs, xd = columns(x, stat), columns(x, dyn)
    q_s, k_s = xs @ W_Q[stat], xs @ W_K[stat]
    q_d, k_d = xd @ W_Q[dyn], xd @ W_K[dyn]
    v = head_values(attn, h, cache)(x)  # [batch, pos, wv]
    return plan_core.candidate_mean(
        cfg, p.offsets, p.keys, p.gap, p.key_bound, q_s, q_d, k_s, k_d, v
    )


def compact_heads(attn, x: torch.Tensor, heads: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """The plan executor's dense heads: as :meth:`Attention.dense_heads`, but each product runs over
    the rows the heads read and the output over the columns ``cols`` only (``[batch, pos,
    len(cols)]``): the same sums without their zero terms, which may round in another
    order (the dense executor, the definition, keeps the full products).

    >>> from attnsim import compile_program, library
    >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    >>> net, ids = m.model, m.encode(["abba"])[0]
    >>> x, a = net.W_E[ids] + net.W_pos[:5], net.blocks[0].attn
    >>> cols, heads = a.written_columns()[0], a.active_heads()
    >>> got = compact_heads(a, x, heads, cols)
    >>> bool(torch.allclose(got, a.dense_heads(x, heads)[..., cols]))
    True
    """
    _, qk_width, ov_width = attn._plan()
    out = x.new_zeros(*x.shape[:-1], len(cols))
    n = x.shape[1]
    chunk = max(1, plan_core.HEAD_CHUNK_VALUES // max(1, x.shape[0] * n * n))
    for start in range(0, len(heads), chunk):
        hs = heads[start : start + chunk]
        wq = max(1, int(qk_width[hs].max()))
        wv = max(1, int(ov_width[hs].max()))
        reads = (attn.W_Q[hs, :, :wq] != 0) | (attn.W_K[hs, :, :wq] != 0)
        rows = torch.nonzero(reads.any(dim=(0, 2)) | (attn.W_V[hs, :, :wv] != 0).any(dim=(0, 2)))
        rows = rows.flatten()
        _, _, z = attn._heads(columns(x, rows), hs, wq, wv, False, rows)
        out += torch.einsum("bhqk,hkd->bqd", z, attn.W_O[hs, :wv][:, :, cols])
    return out
