"""Heads whose keys the sparse storage knows before it runs them, run on the stream's spans.

Their plans are the dense storage's (:class:`attnsim.model.plans.HeadPlan`, found once per
input length by the same functions), a gather in its listed form (one key per query: the
queries that do not read the ``fill`` key are listed with their keys) or a list of keys per
query (CSR) whose values are averaged (hard attention) or weighted (softmax); a candidate
plan adds the gap its run-time certificate checks. :func:`run_plan` mixes a head's values
on the positions where they can be non-zero (the span of the rows they read, see
:class:`attnsim.model.store.Store`) and returns the mixed values on the span of the queries
that read those positions.
"""

from __future__ import annotations

import numpy as np
import torch

from attnsim.model import plan_core, plan_keys
from attnsim.model.config import AttentionMode, ModelConfig
from attnsim.model.costs import RUN_POSITIONS, TERMS_PER_CHUNK, TRIES
from attnsim.model.plans import HeadPlan
from attnsim.model.sparse_ops import rows_last, split_qk

__all__ = [
    "dense_head",
    "mixed",
    "run_candidates",
    "run_plan",
    "runs",
    "whole_head",
]


def runs(p: HeadPlan, n: int, listed: bool = False) -> np.ndarray | None:
    """A listed gather over ``n`` positions as runs ``[start, end, key, step]`` (queries
    ``start .. end - 1`` read keys ``key + step * (q - start)``, step 0 or 1; runs may
    overlap where they agree), when they average at least :data:`RUN_POSITIONS` positions,
    else None; ``listed``: the runs of the listed queries only (the others read the fill),
    averaging that many listed queries (found once per ``n``, kept with the plan).

    >>> q = torch.arange(100, 300)  # queries 100 .. 299 read keys 1000 .. 1199
    >>> p = HeadPlan(0, None, q + 900, None, True, queries=q)
    >>> runs(p, 400).tolist()  # the others read the fill, key 0
    [[0, 100, 0, 0], [100, 300, 1000, 1], [300, 400, 0, 0]]
    >>> runs(p, 400, listed=True).tolist()
    [[100, 300, 1000, 1]]
    >>> runs(HeadPlan(0, None, q[::2] + 7, None, True, queries=q[::2]), 400) is None  # 201 runs
    True
    """
    got = p.__dict__.setdefault("_runs", {})  # (derived from the frozen plan, as its rows)
    if (n, listed) not in got:
        size = len(p.queries) if listed else n
        if listed and _fewest_runs(p, n) * RUN_POSITIONS > size:  # too many, however they fall
            got[n, listed] = None
            return None
        found = _listed_runs(p, n) if listed else _runs(p, n)
        got[n, listed] = found if len(found) * RUN_POSITIONS <= size else None
    return got[n, listed]


def _fewest_runs(p: HeadPlan, n: int) -> int:
    """At least this many runs of a listed gather's listed queries over ``n`` positions
    (:func:`runs`), where they ascend and none reads the fill (else 0): one per group of
    queries less than 3 apart, as no run holds two positions that read the fill but the
    fill's own.

    >>> _fewest_runs(HeadPlan(0, None, torch.tensor([4, 5, 9]), None, True,
    ...                       queries=torch.tensor([1, 3, 8])), 10)
    2
    """
    q, k = p.queries.numpy(), p.keys.numpy()
    if n < 2 or not len(q) or bool((k == p.fill).any()) or not bool((q[1:] > q[:-1]).all()):
        return 0
    return 1 + int((q[1:] - q[:-1] >= 3).sum())


def _listed_runs(p: HeadPlan, n: int) -> np.ndarray:
    """:func:`runs` with ``listed``, whatever their length, from the positions within 2 of
    a listed query: a run that is not of the fill (one key, the fill) holds no two
    positions that read the fill, so it lies there, and whether a run starts or ends at a
    pair of positions depends on the pairs beside it only. The positions between (all
    reading the fill) are left out, their runs of the fill with them.

    >>> q = torch.tensor([5, 6, 7, 40])  # 5 .. 7 read 11 .. 13, 40 reads 3
    >>> p = HeadPlan(0, None, torch.tensor([11, 12, 13, 3]), None, True, queries=q)
    >>> _listed_runs(p, 100).tolist() == _runs(p, 100)[[1, 3]].tolist()
    True
    """
    queries = p.queries.numpy()
    if len(queries) > 1 and bool((queries[1:] > queries[:-1]).all()):  # (ascending, as listed)
        lo, hi = np.maximum(queries - 2, 0), np.minimum(queries + 3, n)
        new = np.r_[True, lo[1:] > hi[:-1]]  # the positions near them: merged intervals
        a, z = lo[new], hi[np.r_[new[1:], True]]
        size = z - a
        near = np.arange(size.sum()) + np.repeat(a - (np.cumsum(size) - size), size)
    else:
        near = np.unique(np.clip(queries[:, None] + np.arange(-2, 3), 0, n - 1))
    found = _runs(p, len(near), np.searchsorted(near, queries))
    found = found[(found[:, 2] != p.fill) | (found[:, 3] != 0)]
    found[:, 1] = near[found[:, 1] - 1] + 1
    found[:, 0] = near[found[:, 0]]
    return found


def _runs(p: HeadPlan, n: int, queries: np.ndarray | None = None) -> np.ndarray:
    """:func:`runs`, whatever their length (``queries``: the listed queries' positions
    among the ``n``, where those are not the plan's)."""
    keys = np.full(n, p.fill, dtype=np.int64)
    keys[p.queries.numpy() if queries is None else queries] = p.keys.numpy()
    if n < 2:
        return np.array([[0, n, p.fill, 0]] if n else [], dtype=np.int64).reshape(-1, 4)
    step = np.diff(keys)
    good = (step == 0) | (step == 1)  # pair (i, i + 1) can lie in one run
    same = np.r_[False, step[1:] == step[:-1]] & np.r_[False, good[:-1]]
    starts = np.flatnonzero(good & ~same)
    ends = np.flatnonzero(good & ~np.r_[same[1:], False]) + 2
    covered = np.zeros(n, dtype=bool)
    covered[:-1] |= good
    covered[1:] |= good
    alone = np.flatnonzero(~covered)
    runs = np.concatenate(
        [
            np.stack([starts, ends, keys[starts], step[starts]], 1),
            np.stack([alone, alone + 1, keys[alone], np.zeros_like(alone)], 1),
        ]
    )
    return runs[np.argsort(runs[:, 0], kind="stable")]


def run_plan(cfg: ModelConfig, p: HeadPlan, v: torch.Tensor, n: int, at: int = 0):
    """A planned head's mixed values from its values ``v [w, batch, span]`` on positions
    ``at .. at + span - 1`` (0 elsewhere): ``(z [w, batch, m], z_at)``, the mixed values on
    positions ``z_at .. z_at + m - 1`` (0 elsewhere), or None where they are 0 at every
    position. A gather takes each listed query's key (and the ``fill`` key for the others):
    only the queries whose keys lie in the span are written; a mean (hard) or weighted sum
    (softmax) over each query's keys runs on every position.

    >>> from attnsim.model.plans import head_plan
    >>> offsets, keys = torch.tensor([0, 1, 2, 3, 4]), torch.tensor([0, 0, 1, 2])
    >>> p = head_plan(0, offsets, keys, None, True, listed=True)
    >>> z, z_at = run_plan(None, p, torch.tensor([[[5.0, 7.0]]]), 4, at=1)  # keys 1, 2 only
    >>> z.flatten().tolist(), z_at  # queries 2 and 3 read keys 1 and 2; 0, 1 read key 0
    ([5.0, 7.0], 2)
    """
    w = v.shape[2]
    if not p.gather:
        return _mean(cfg, p, v, n, at)
    inside = at <= p.fill < at + w
    found = runs(p, n, listed=not inside)
    if found is not None:  # run by run (where the fill is outside the span: it reads 0)
        return _copy_runs(v, found, at)
    if not inside:  # the other queries read 0
        keys, queries = p.by_key
        i, j = torch.searchsorted(keys, torch.tensor([at, at + w])).tolist()
        if i == j:
            return None
        keys, queries = keys[i:j], queries[i:j]
        lo = int(queries.min())
        z = v.new_zeros(v.shape[0], v.shape[1], int(queries.max()) + 1 - lo)
        z[:, :, queries - lo] = v[:, :, keys - at]
        return z, lo
    if at or w != n:  # on every position
        whole = v.new_zeros(v.shape[0], v.shape[1], n)
        whole[:, :, at : at + w] = v
        v = whole
    z = v[:, :, p.fill : p.fill + 1].expand(*v.shape[:2], n).clone()
    z[:, :, p.queries] = v[:, :, p.keys]
    return z, 0


def _copy_runs(v: torch.Tensor, runs: np.ndarray, at: int):
    """:func:`run_plan` of a gather copied run by run (:func:`runs`) from ``v [w,
    batch, span]`` on positions ``at .. at + span - 1`` (0 elsewhere): ``(z, z_at)`` on the
    queries from the first to the last that reads inside the span, or None."""
    w, copies = v.shape[2], []
    for start, end, key, step in runs.tolist():
        if not step:  # queries start .. end - 1 read one key
            if at <= key < at + w:
                copies.append((start, end, key - at, key - at + 1))
            continue
        lo, hi = max(key, at), min(key + end - start, at + w)  # their keys inside the span
        if lo < hi:
            q = start + lo - key
            copies.append((q, q + hi - lo, lo - at, hi - at))
    if not copies:
        return None
    copies.sort()
    z_at, done = copies[0][0], copies[0][0]
    z = v.new_empty(v.shape[0], v.shape[1], max(c[1] for c in copies) - z_at)
    for q, q_end, k, k_end in copies:  # (the queries between runs read 0)
        if q > done:
            z[:, :, done - z_at : q - z_at] = 0
        z[:, :, q - z_at : q_end - z_at] = v[:, :, k:k_end]
        done = max(done, q_end)
    return z, z_at


def _mean(cfg: ModelConfig, p: HeadPlan, v: torch.Tensor, n: int, at: int):
    """:func:`run_plan` of a mean (hard) or weighted sum (softmax) over each query's keys:
    only the terms whose keys lie in the span ``at .. at + w - 1`` of ``v`` (the others
    are 0), written on the queries from the first to the last that has one."""
    rows, keys, weights = p.rows, p.keys, p.weights
    if at or v.shape[2] != n:
        inside = (keys >= at) & (keys < at + v.shape[2])
        if not bool(inside.all()):
            kept = torch.nonzero(inside).flatten()
            if not len(kept):
                return None
            rows, keys = rows[kept], keys[kept]
            weights = None if weights is None else weights[kept]
        keys = keys - at
    lo, hi = int(rows[0]), int(rows[-1]) + 1  # (rows ascend)
    z = v.new_zeros(v.shape[0], v.shape[1], hi - lo)
    rows = rows - lo
    step = max(1, TERMS_PER_CHUNK // max(1, v.shape[0] * v.shape[1]))
    for start in range(0, len(keys), step):  # the terms in parts, added in the same order
        terms = v[:, :, keys[start : start + step]]
        if weights is not None:
            terms = terms * weights[start : start + step].to(v.dtype)
        z.index_add_(2, rows[start : start + step], terms)
    if cfg.attention is AttentionMode.HARD:
        z = z / (p.offsets[lo + 1 : hi + 1] - p.offsets[lo:hi]).to(v.dtype)
    return z, lo


def mixed(cfg: ModelConfig, p: HeadPlan, store, lin, n: int):
    """:func:`run_plan` of the values ``lin`` (a :class:`attnsim.model.sparse_ops.Linear`)
    computes from ``store`` on the span of the rows it reads (None where those are 0).

    >>> from attnsim.model.sparse_ops import Linear, Store
    >>> st = Store(1, 6, d=1, dtype=torch.float64, last={0: 1})
    >>> st.write(torch.tensor([0]), torch.tensor([[[4.0]]], dtype=torch.float64), at=2)
    >>> lin = Linear(torch.tensor([0]), torch.tensor([0]), torch.ones(1, dtype=torch.float64), 1)
    >>> from attnsim.model.plans import head_plan
    >>> p = head_plan(0, torch.arange(7), torch.tensor([0, 0, 0, 0, 0, 2]), None, True, listed=True)
    >>> z, at = mixed(None, p, st, lin, 6)  # query 5 reads key 2; the others BOS (0 there)
    >>> z.flatten().tolist(), at
    ([4.0], 5)
    """
    lo, hi = store.span(lin.dirs)
    if hi <= lo:
        return None
    return run_plan(cfg, p, lin(store.view(lo, hi), store.slot), n, lo)


def run_candidates(cfg, p: HeadPlan, q_s, q_d, k_s, k_d, v) -> torch.Tensor | None:
    """A candidate head on its candidate keys, or None when the certificate fails
    (:func:`attnsim.model.plan_core.candidate_mean`); inputs ``[batch, pos, width]``.

    >>> from attnsim.model.config import ModelConfig
    >>> cfg = ModelConfig(n_layers=1, d_model=1, n_heads=1, d_head=1, d_mlp=0, d_bilinear=0,
    ...                   n_ctx=4, d_vocab=2)
    >>> q, k = torch.ones(4, 1, dtype=torch.float64), torch.tensor([[0.0], [9.0], [0.0], [0.0]])
    >>> from attnsim.model.plans import candidate_plan
    >>> p = candidate_plan(cfg, 0, q, k.double())
    >>> v, none = torch.arange(4.0, dtype=torch.float64)[None, :, None], torch.zeros(1, 4, 1)
    >>> run_candidates(cfg, p, q[None], none.double(), k.double()[None], none.double(), v)
    tensor([[[1.],
             [1.],
             [1.],
             [1.]]], dtype=torch.float64)
    """
    return plan_core.candidate_mean(
        cfg, p.offsets, p.keys, p.gap, p.key_bound, q_s, q_d, k_s, k_d, v
    )


def dense_head(cfg: ModelConfig, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """One head over ``[query, key]`` in row chunks: ``q, k [batch, pos, w]``, ``v [batch,
    pos, wv]`` -> ``[batch, pos, wv]`` (:func:`attnsim.model.plan_core.mix` per chunk).

    >>> from attnsim.model.config import ModelConfig
    >>> cfg = ModelConfig(n_layers=1, d_model=1, n_heads=1, d_head=1, d_mlp=0, d_bilinear=0,
    ...                   n_ctx=2, d_vocab=2)
    >>> q = k = torch.ones(1, 2, 1, dtype=torch.float64)  # every key ties: the mean
    >>> dense_head(cfg, q, k, torch.tensor([[[1.0], [3.0]]], dtype=torch.float64)).flatten()
    tensor([2., 2.], dtype=torch.float64)
    """
    b, n, _ = q.shape
    z = torch.zeros_like(v)
    step = max(1, plan_core.ROWS_PER_CHUNK // max(1, b * n))
    for start in range(0, n, step):
        scores = q[:, start : start + step] @ k.transpose(1, 2)  # [batch, rows, key]
        if cfg.causal:
            r = torch.arange(start, start + scores.shape[1])[:, None]
            scores = scores.masked_fill(torch.arange(n)[None, :] > r, float("-inf"))
        z[:, start : start + step] = plan_core.mix(cfg, scores, v)[1]
    return z


def whole_head(cfg: ModelConfig, hm, h: int, p: HeadPlan | None, store, static_mask, misses):
    """Head ``h`` of the maps ``hm`` (a :class:`attnsim.model.sparse_ops.HeadMaps`) on
    whole rows, ``[w, batch, pos]``: on its candidate keys where the certificate holds
    (``p``, a candidate plan), else as a one-sided head, else dense; ``misses``: the
    layer's failed tries per head (as the dense plans count them, ``h`` and ``("side",
    h)``): after :data:`TRIES`, the candidates (or the one-sided way) are not tried again.

    >>> from attnsim.model.config import ModelConfig
    >>> from attnsim.model.sparse import SparseHeads
    >>> from attnsim.model.sparse_ops import HeadMaps, Store
    >>> cfg = ModelConfig(n_layers=1, d_model=3, n_heads=1, d_head=1, d_mlp=0, d_bilinear=0,
    ...                   n_ctx=3, d_vocab=2)
    >>> w = torch.ones(1, dtype=torch.float64)  # scores 0 everywhere: the mean of the values
    >>> qk, ov = torch.tensor([[0, 0, 0]]), torch.tensor([[0, 1, 2]])  # values: 1 -> 2
    >>> hm = HeadMaps(SparseHeads(1, qk, 0 * w, ov, w))
    >>> st = Store(1, 3, d=3, dtype=torch.float64, last={0: 1, 1: 1})
    >>> st.write(torch.tensor([1]), torch.tensor([[[3.0, 6.0, 9.0]]], dtype=torch.float64))
    >>> whole_head(cfg, hm, 0, None, st, torch.zeros(3, dtype=torch.bool), {}).flatten()
    tensor([6., 6., 6.], dtype=torch.float64)
    """
    x, slot = store.data, store.slot
    v = hm.V[h](x, slot)
    z = None
    if p is not None and misses.get(h, 0) < TRIES:  # certify first
        parts = split_qk(hm, h, x, slot, static_mask)
        z = run_candidates(cfg, p, *(rows_last(t) for t in parts), rows_last(v))
        if z is None:
            misses[h] = misses.get(h, 0) + 1
    if z is None:
        q, k = rows_last(hm.Q[h](x, slot)), rows_last(hm.K[h](x, slot))
        side = ("side", h)
        if misses.get(side, 0) < TRIES:
            qd, kd = hm.Q[h].dirs, hm.K[h].dirs
            z = plan_keys.one_sided(cfg, static_mask, qd, kd, q, k, rows_last(v))
            misses[side] = misses.get(side, 0) + (z is None)
        if z is None:
            z = dense_head(cfg, q, k, rows_last(v))
    return z.permute(2, 0, 1)
