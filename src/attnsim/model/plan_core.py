"""The arithmetic of execution plans, shared by both storages: which keys a head selects
for every query (from its queries and keys on one input, as the dense forward computes
them), candidate keys on the static part of a hard head's scores, and the certified run on
those candidates. See :mod:`attnsim.model.plans` for what the plans are and why they hold.

Shapes: ``q, k [pos, width]`` (one input); a plan's ``offsets [pos + 1]`` and ``keys [nnz]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnsim.model.config import AttentionMode, ModelConfig
from attnsim.model.costs import (
    DISTINCT_MIN_ROWS,
    DISTINCT_MIN_WORK,
    GROUP_WORK,
    MIN_PART,
    PAIRS_PER_CHUNK,
    ROWS_PER_CHUNK,
    STREAM_BYTES,
    TRIES,
)
from attnsim.model.hard import HEAD_CHUNK_VALUES, hard_selection, mix  # noqa: F401
from attnsim.model.projection import Projection, add_columns, columns, set_columns
from attnsim.model.transformer import relu_units

__all__ = [
    "select_keys",
    "candidate_keys",
    "candidate_mean",
    "mix",
    "distinct_rows",
    "on_distinct_rows",
    "relu_rows",
    "batch_step",
    "part_size",
]


def batch_step(batch: int, n: int, d_model: int, itemsize: int) -> int:
    """Sequences per part of a planned forward pass on ``batch`` sequences of ``n``
    positions (``batch`` itself when one part is small enough).

    >>> batch_step(256, 161, 168, 8), batch_step(256, 11, 18, 8)
    (38, 256)
    """
    per = max(1, n * d_model * itemsize)
    return min(batch, max(MIN_PART, STREAM_BYTES // per))


def part_size(net, b: int, n: int, split: bool) -> int:
    """Sequences per part of a planned pass (``b``: one part; weights that record gradients
    run in one, their stream is not written into slices).

    >>> from attnsim import compile_program, library
    >>> net = compile_program(library.make_hist(), vocab="ab", max_seq_len=160).model
    >>> part_size(net, 256, 161, True) < 256, part_size(net, 256, 161, False)
    (True, 256)
    """
    if not split or (torch.is_grad_enabled() and any(p.requires_grad for p in net.parameters())):
        return b
    return batch_step(b, n, net.cfg.d_model, net.dtype.itemsize)


def distinct_rows(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, inverse)``: the distinct rows of ``q [pos, width]`` and each row's index
    among them (``rows[inverse] == q``; a row may appear twice in ``rows``, never two
    different rows under one index). Rows are grouped by a hash, checked exactly afterwards:
    first their dot product with fixed random weights (one matrix-vector product), then,
    where that puts two different rows together, a hash of their bits; where that fails too
    (never seen), ``torch.unique(dim=0)``. Rows with one non-zero entry each, a 1 (one-hot
    rows), are grouped by where it sits: ``rows`` is then the identity, every unit row.

    >>> q = torch.tensor([[1.0, 2.0], [0.5, 2.0], [1.0, 2.0]], dtype=torch.float64)
    >>> rows, inverse = distinct_rows(q)
    >>> bool((rows[inverse] == q).all()), len(rows)
    (True, 2)
    """
    n, w = q.shape
    if n == 0 or w == 0:
        return torch.unique(q, dim=0, return_inverse=True)
    if n >= w:  # one-hot rows (a categorical S-op's block): each row's class is its 1
        at = (q @ torch.arange(w, dtype=q.dtype, device=q.device)).long().clamp_(0, w - 1)
        unit = torch.eye(w, dtype=q.dtype, device=q.device)  # (at: where the 1 is, if so)
        if torch.equal(unit.index_select(0, at), q):  # checked exactly
            return unit, at
    gen = torch.Generator().manual_seed(w)  # (drawn on the CPU, the same on every device)
    weights = torch.rand(w, 1, generator=gen, dtype=torch.float64, device="cpu")
    weights = (1.0 + weights).to(q)
    got = _grouped(q, (q @ weights).flatten(), q)
    if got is not None:
        return got
    bits = (
        q.contiguous().view(torch.int64)
        if q.dtype == torch.float64
        else q.double().view(torch.int64)
    )
    mult = torch.randint(1, 1 << 62, (w,), generator=gen, dtype=torch.int64, device="cpu")
    mult = mult.to(q.device) * 2 + 1
    # the high half folded into the low one first: a float's bits often end in zeros
    # (1.0 is 0x3ff0 followed by 48 zero bits), which a product alone would keep
    mixed = bits ^ (bits >> 32)
    got = _grouped(q, (mixed * mult).sum(dim=1), bits)  # wraps around: a hash of the bits
    if got is not None:
        return got
    return torch.unique(q, dim=0, return_inverse=True)


def on_distinct_rows(xs: torch.Tensor, fn, owner, work: int) -> torch.Tensor:
    """``fn(xs)`` for a row-wise function ``fn`` of ``xs [rows, width]``, computed once per
    distinct row and gathered where the rows repeat (a categorical MLP reads few distinct
    one-hot rows in a batch). ``work``: ``fn``'s multiply-adds per row. ``owner`` keeps
    count of the batches whose rows were mostly distinct; after two, ``fn`` runs on every
    row without looking. Each row's result is computed by the same arithmetic either way.

    >>> xs = torch.tensor([[1.0, 0.0], [0.0, 1.0]]).repeat(200, 1)
    >>> class Owner: pass
    >>> got = on_distinct_rows(xs, lambda u: u * 2.0, Owner(), 4096)
    >>> torch.equal(got, xs * 2.0)
    True
    """
    grouped = repeated_rows(xs.shape[0], lambda: xs, owner, work)
    if grouped is None:
        return fn(xs)
    rows, inverse = grouped
    return fn(rows)[inverse]


def repeated_rows(n: int, get_rows, owner, work: int):
    """``(rows, inverse)``, the distinct rows of ``get_rows() [n, width]``, where computing a
    row-wise function of ``work`` multiply-adds per row once per distinct row pays (see
    :func:`on_distinct_rows`), else None (``owner`` counts the batches whose rows were
    mostly distinct; after two it stops looking, and ``get_rows`` is not called).

    >>> class Owner: pass
    >>> rows, inverse = repeated_rows(300, lambda: torch.ones(300, 2), Owner(), 4096)
    >>> rows.tolist(), int(inverse.max())
    ([[1.0, 1.0]], 0)
    """
    misses = getattr(owner, "_distinct_misses", 0)
    if owner is None or n < DISTINCT_MIN_ROWS or work < DISTINCT_MIN_WORK or misses >= TRIES:
        return None
    xs = get_rows()
    rows, inverse = distinct_rows(xs)
    if (n - rows.shape[0]) * work <= n * (GROUP_WORK + 4 * xs.shape[1]):
        owner._distinct_misses = misses + 1
        return None
    return rows, inverse


def relu_rows(
    x: torch.Tensor, rows, w_in: torch.Tensor, w_out: torch.Tensor, owner=None
) -> torch.Tensor:
    """``relu(x[..., rows] @ w_in) @ w_out`` (``[batch, pos, columns]``), over slices of
    positions so that a wide layer's hidden activations stay small, and with an ``owner``
    (the MLP) once per distinct input row where rows repeat; each position's sums are the
    same.

    >>> x = torch.tensor([[[1.0, -2.0], [3.0, 4.0]]], dtype=torch.float64)
    >>> w_in = torch.eye(2, dtype=torch.float64)
    >>> relu_rows(x, torch.tensor([0, 1]), w_in, torch.ones(2, 1, dtype=torch.float64)).tolist()
    [[[1.0], [7.0]]]
    """
    xs = columns(x, rows).reshape(-1, len(rows))

    def units(u: torch.Tensor) -> torch.Tensor:
        return relu_units(u, w_in, w_out)

    work = w_in.shape[1] * (len(rows) + w_out.shape[1])
    part = on_distinct_rows(xs, units, owner, work)
    return part.reshape(*x.shape[:-1], w_out.shape[1])


def _grouped(q: torch.Tensor, key: torch.Tensor, exact: torch.Tensor):
    """``(rows, inverse)`` grouping the rows of ``q`` by ``key [pos]``, or None when some
    group holds rows that differ in ``exact`` (or a key is NaN)."""
    if key.is_floating_point() and bool(torch.isnan(key).any()):
        return None
    _, inverse = torch.unique(key, return_inverse=True)
    first = inverse.new_zeros(int(inverse.max()) + 1)
    first.scatter_(0, inverse, torch.arange(q.shape[0], device=q.device))  # a row of each
    if not torch.equal(exact[first][inverse], exact):  # two different rows shared a key
        return None
    return q[first], inverse


def select_keys(cfg: ModelConfig, q: torch.Tensor, k: torch.Tensor) -> tuple:
    """``(offsets, keys, weights, gather)``: the keys each query selects (hard: within the
    tolerance of its best score; softmax: a non-zero weight, kept in ``weights``), computed
    in row chunks once per distinct query vector (each query's selection depends on its
    query vector alone, unless the model is causal).

    >>> from attnsim.model.config import ModelConfig
    >>> cfg = ModelConfig(n_layers=1, d_model=1, n_heads=1, d_head=1, d_mlp=0, d_bilinear=0,
    ...                   n_ctx=3, d_vocab=2)
    >>> q = torch.ones(3, 1, dtype=torch.float64)
    >>> offsets, keys, _, gather = select_keys(cfg, q, torch.tensor([[1.0], [1.1], [0.0]]).double())
    >>> offsets.tolist(), keys.tolist(), gather  # keys 0 and 1 are within the tolerance
    ([0, 2, 4, 6], [0, 1, 0, 1, 0, 1], False)
    """
    n = q.shape[0]
    if cfg.causal:
        rows_q, inverse = q, None
    else:
        rows_q, inverse = distinct_rows(q)
    count, key, weight = _select_rows(cfg, rows_q, k)
    if inverse is not None:
        first = torch.zeros_like(count)
        first[1:] = torch.cumsum(count, 0)[:-1]
        count = count[inverse]
        offsets = count.new_zeros(n)
        offsets[1:] = torch.cumsum(count, 0)[:-1]
        shift = torch.repeat_interleave(first[inverse] - offsets, count)
        pick = torch.arange(int(count.sum()), device=k.device) + shift
        key = key[pick]
        weight = None if weight is None else weight[pick]
    offsets = count.new_zeros(n + 1)
    offsets[1:] = torch.cumsum(count, 0)
    return offsets, key, weight, bool((count == 1).all())


def _select_rows(cfg: ModelConfig, rows_q: torch.Tensor, k: torch.Tensor) -> tuple:
    """``(count, keys, weights)`` of every query row against every key, in row chunks."""
    n = k.shape[0]
    step = max(1, ROWS_PER_CHUNK // max(1, n))
    counts, keys, weights = [], [], []
    for start in range(0, rows_q.shape[0], step):
        scores = rows_q[start : start + step] @ k.T
        if cfg.causal:
            rows = torch.arange(start, start + scores.shape[0], device=k.device)[:, None]
            later = torch.arange(n, device=k.device)[None, :] > rows
            scores = scores.masked_fill(later, float("-inf"))
        if cfg.attention is AttentionMode.HARD:
            chosen = hard_selection(scores, cfg.hard_tolerance)
        else:
            pattern = torch.softmax(cfg.beta * scores, dim=-1)
            chosen = pattern != 0
        r, c = chosen.nonzero(as_tuple=True)
        counts.append(torch.bincount(r, minlength=scores.shape[0]))
        keys.append(c)
        if cfg.attention is not AttentionMode.HARD:
            weights.append(pattern[r, c])
    empty = torch.zeros(0, dtype=torch.long, device=k.device)
    weight = torch.cat(weights) if weights else None
    return torch.cat(counts) if counts else empty, torch.cat(keys) if keys else empty, weight


def candidate_keys(cfg: ModelConfig, q: torch.Tensor, k: torch.Tensor) -> tuple | None:
    """``(offsets, keys, gap, key_bound)`` on the static part ``q, k`` of a hard head's
    scores: the candidates per query, how far below its best static score its best other
    key lies, and the largest |static key coordinate|; None when that would not save work
    (more than a quarter of all pairs) or some query has no gap above the tolerance.

    >>> cfg = ModelConfig(n_layers=1, d_model=1, n_heads=1, d_head=1, d_mlp=0, d_bilinear=0,
    ...                   n_ctx=4, d_vocab=2)
    >>> q = torch.ones(4, 1, dtype=torch.float64)
    >>> k = torch.tensor([[0.0], [9.0], [0.0], [0.0]], dtype=torch.float64)
    >>> _, keys, gap, _ = candidate_keys(cfg, q, k)  # each query's candidate: key 1, 9 above
    >>> keys.tolist(), gap.tolist()
    ([1, 1, 1, 1], [9.0, 9.0, 9.0, 9.0])
    """
    n = q.shape[0]
    offsets, keys, _, _ = select_keys(cfg, q, k)
    if len(keys) * 4 > n * n:
        return None
    counts = offsets[1:] - offsets[:-1]
    rows = torch.repeat_interleave(torch.arange(n, device=q.device), counts)
    best = torch.full((n,), float("-inf"), dtype=q.dtype, device=q.device)
    for at in _term_parts(len(keys), q.shape[1]):  # (the largest: in any order)
        best.scatter_reduce_(0, rows[at], (q[rows[at]] * k[keys[at]]).sum(-1), "amax")
    # the best other key of each query: found once per distinct query vector (without a
    # causal mask a query's candidates and scores depend on its vector alone), then spread
    if cfg.causal:
        rows_q, inverse, first = q, None, torch.arange(n, device=q.device)
    else:
        rows_q, inverse = distinct_rows(q)
        # a query of each row (any: they share their candidates, select_keys spreads
        # each row's)
        first = inverse.new_zeros(len(rows_q))
        first.scatter_(0, inverse, torch.arange(n, device=q.device))
    others = torch.full((len(rows_q),), float("-inf"), dtype=q.dtype, device=q.device)
    step = max(1, ROWS_PER_CHUNK // max(1, n))
    for part in torch.split(torch.arange(len(rows_q), device=q.device), step):
        # every key, less the row's candidates
        scores = rows_q[part] @ k.T
        at_q = first[part]  # the query whose candidates the row has
        if cfg.causal:
            later = torch.arange(n, device=q.device)[None, :] > at_q[:, None]
            scores = scores.masked_fill(later, float("-inf"))
        c = counts[at_q]
        at = torch.repeat_interleave(offsets[at_q] - (torch.cumsum(c, 0) - c), c)
        own = keys[at + torch.arange(len(at), device=q.device)]
        row = torch.repeat_interleave(torch.arange(len(part), device=q.device), c)
        scores[row, own] = float("-inf")
        others[part] = scores.amax(dim=-1)
    gap = best - (others if inverse is None else others[inverse])
    if not bool((gap > cfg.hard_tolerance).all()):
        return None
    return offsets, keys, gap, k.abs().amax(dim=0)


def candidate_mean(cfg, offsets, keys, gap, key_bound, q_s, q_d, k_s, k_d, v):
    """A candidate head's mean values ``[batch, pos, wv]`` on its candidate keys, or None
    when the input-dependent part of its scores could reach a key outside them.

    The certificate: write a score as static + rest. For a query, every candidate's static
    score is within the tolerance of the best, and every other key's is at least ``gap``
    below it. With ``B`` an upper bound on |rest| over all keys, an outside key scores at
    most ``best - gap + B`` and the best candidate at least ``best - B``; if ``gap > 2 B +
    tolerance`` no outside key reaches the threshold ``max - tolerance``. ``B`` is bounded
    coordinate by coordinate: ``|q_s . k_d + q_d . k| <= sum_c |q_s,c| K_d,c + |q_d,c|
    (K_s,c + K_d,c)`` with ``K`` the largest |key coordinate| over all keys. Inputs are
    ``[batch, pos, width]`` (``v``: ``[batch, pos, wv]``). Example:
    :func:`attnsim.model.sparse_ops.run_candidates`.
    """
    n = q_s.shape[1]
    k_bound = k_d.abs().amax(dim=1, keepdim=True)
    rest = (q_s.abs() * k_bound + q_d.abs() * (key_bound + k_bound)).sum(-1)
    terms = (q_s.abs() * key_bound).sum(-1) + rest + 1.0
    finite_gap = torch.where(torch.isfinite(gap), gap.abs(), torch.zeros_like(gap))
    slack = 1e3 * torch.finfo(q_s.dtype).eps * (terms + finite_gap)
    if not bool((gap > 2 * rest + cfg.hard_tolerance + slack).all()):
        return None
    q, k = q_s + q_d, k_s + k_d
    counts = offsets[1:] - offsets[:-1]
    rows = torch.repeat_interleave(torch.arange(n, device=q.device), counts)
    parts = _query_parts(offsets, q.shape[0] * max(q.shape[2], v.shape[2]))
    pairs = [slice(int(offsets[a]), int(offsets[b])) for a, b in parts]
    scores = torch.cat([(q[:, rows[at]] * k[:, keys[at]]).sum(-1) for at in pairs], 1)
    best = torch.full((q.shape[0], n), float("-inf"), dtype=q.dtype, device=q.device)
    best.scatter_reduce_(1, rows.expand_as(scores), scores, "amax")
    chosen = hard_selection(scores, cfg.hard_tolerance, best=best[:, rows]).to(q.dtype)
    z = q.new_empty(q.shape[0], n, v.shape[-1])
    for (a, b), at in zip(parts, pairs):  # whole queries per part: each sum in one piece
        z[:, a:b] = segment_sum(v[:, keys[at]] * chosen[:, at, None], offsets[a : b + 1] - at.start)
    count = segment_sum(chosen[..., None], offsets)[..., 0]
    return z / count[..., None]


def segment_sum(terms: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``[batch, pos, w]``: for each query ``q`` the sum of ``terms[:, offsets[q] :
    offsets[q + 1]]`` (``terms [batch, pairs, w]``, a query's pairs consecutive), added left
    to right from 0, as ``index_add_`` over the pairs' queries adds them (the same sums, to
    the bit; an empty run is 0). One ``segment_reduce`` over the batch's runs.

    >>> t = torch.tensor([[[1.0], [2.0], [4.0]]], dtype=torch.float64)
    >>> segment_sum(t, torch.tensor([0, 2, 2, 3]))[0, :, 0].tolist()
    [3.0, 0.0, 4.0]
    """
    b, nnz, w = terms.shape
    n = offsets.numel() - 1
    offsets = offsets.to(terms.device)
    starts = (offsets[None, :-1] + nnz * torch.arange(b, device=terms.device)[:, None]).flatten()
    offs = torch.cat([starts, starts.new_full((1,), b * nnz)])
    flat = terms.reshape(b * nnz, w)
    return torch.segment_reduce(flat, "sum", offsets=offs, axis=0, initial=0).view(b, n, w)


def _query_parts(offsets: torch.Tensor, width: int) -> list[tuple[int, int]]:
    """Runs of whole queries ``(first, last + 1)``, each with at most ``ROWS_PER_CHUNK``
    numbers of ``width`` per pair (a query with more pairs alone).

    >>> _query_parts(torch.tensor([0, 3, 4, 9, 10]), ROWS_PER_CHUNK // 4)
    [(0, 2), (2, 3), (3, 4)]
    """
    step = max(1, ROWS_PER_CHUNK // max(1, width))
    n, parts, a = offsets.numel() - 1, [], 0
    ends = offsets.tolist()
    while a < n:
        b = a + 1
        while b < n and ends[b + 1] - ends[a] <= step:
            b += 1
        parts.append((a, b))
        a = b
    return parts


def _term_parts(terms: int, width: int) -> list[slice]:
    """Slices of ``terms`` (query, key) pairs, each gathering at most ``ROWS_PER_CHUNK``
    numbers of ``width`` per pair.

    >>> _term_parts(10, ROWS_PER_CHUNK // 4)
    [slice(0, 4, None), slice(4, 8, None), slice(8, 10, None)]
    """
    step = max(1, ROWS_PER_CHUNK // max(1, width))
    return [slice(a, min(a + step, terms)) for a in range(0, terms, step)]


@dataclass(frozen=True)
class Summed:
    """The planned heads of a layer as one product: their values' projection (rounded as
    the dense one, :class:`Projection`), their output weights on the columns they write,
    and the one-key gathers as one index ``[pos, their value columns]``."""

    values: Projection
    W_O: torch.Tensor  # [sum of widths, len(cols)]
    cols: torch.Tensor  # the residual columns the heads write
    # where W_O moves each value column, unscaled, to a column of its own (every column
    # one weight 1, every row one): the residual column each value column is added to
    # (no product: x * 1 plus zeros is x), else None
    moved_to: torch.Tensor | None
    gather_cols: torch.Tensor  # the value columns of the one-key heads
    gather_keys: torch.Tensor  # [pos, len(gather_cols)]: each column's key per query
    rest: tuple  # (plan, first value column, width) of every other planned head


def summed(attn, plans: tuple) -> Summed:
    """The planned heads ``plans`` (``attnsim.model.plans.HeadPlan``, no candidates) of
    ``attn`` stacked as one :class:`Summed`."""
    _, _, ov_width = attn._plan()
    widths = [max(1, int(ov_width[p.head])) for p in plans]
    hs = [p.head for p in plans]
    # every planned head's values in one product: [batch, pos, sum of widths]
    W_V = torch.cat([attn.W_V[h, :, :w] for h, w in zip(hs, widths)], dim=1)
    W_O = torch.cat([attn.W_O[h, :w] for h, w in zip(hs, widths)], dim=0)
    # the values read a few directions and the outputs write a few: the sums run over
    # those only where that cannot change a rounding (at most two terms per sum, whose
    # order does not matter), so that a gather gives the dense result to the last bit
    cols = torch.nonzero(W_O.abs().sum(dim=0) > 0).flatten()
    starts = [0]
    for w in widths:
        starts.append(starts[-1] + w)
    gathered = [(p, c, w) for p, c, w in zip(plans, starts, widths) if p.gather]
    dev = W_V.device
    g_cols = [torch.arange(c, c + w, device=dev) for _, c, w in gathered]
    g_keys = [p.keys.to(dev)[:, None].expand(-1, w) for p, _, w in gathered]
    none = torch.zeros(0, dtype=torch.long, device=dev)
    W_O = W_O[:, cols]
    moved_to = None
    if W_O.shape[0] == W_O.shape[1] and bool(((W_O == 0) | (W_O == 1)).all()):
        rows_of, cols_of = torch.nonzero(W_O, as_tuple=True)  # by row
        if len(rows_of) == W_O.shape[0] and torch.equal(
            rows_of, torch.arange(len(rows_of), device=dev)
        ):
            if len(torch.unique(cols_of)) == len(cols_of):  # a permutation
                moved_to = cols[cols_of]
    return Summed(
        values=Projection(W_V),
        W_O=W_O,
        moved_to=moved_to,
        cols=cols,
        gather_cols=torch.cat([none, *g_cols]),
        gather_keys=torch.cat(g_keys, dim=1) if g_keys else none.view(len(plans[0].keys), 0),
        rest=tuple((p, c, w) for p, c, w in zip(plans, starts, widths) if not p.gather),
    )


def sum_planned(
    attn,
    x: torch.Tensor,
    plans: tuple,
    out: torch.Tensor,
    where,
    cache: dict | None = None,
    key: object = None,
) -> None:
    """Adds the planned heads' output to ``out [batch, pos, written columns]`` (``where``
    maps a residual column to its place there). ``cache``: where the heads' stacked weights
    are kept between calls, for the layer's plans ``key`` (the same object each call)."""
    got = None if cache is None else cache.get("summed")
    if got is None or got[0] is not key or key is None:
        got = (key, summed(attn, plans))
        if cache is not None:
            cache["summed"] = got
    s = got[1]
    b, n, _ = x.shape
    v_all = s.values(x)
    k = len(s.gather_cols)
    # one key per query: the dense mean of one value is that value
    if k == v_all.shape[-1]:  # every planned head (the columns in order)
        z_all = torch.gather(v_all, 1, s.gather_keys[None].expand(b, n, k))
    else:
        z_all = torch.empty_like(v_all)
        if k:
            z = torch.gather(columns(v_all, s.gather_cols), 1, s.gather_keys[None].expand(b, n, k))
            set_columns(z_all, s.gather_cols, z)
    for p, col, w in s.rest:
        v = v_all[..., col : col + w]  # [batch, pos, w]
        z_all[..., col : col + w] = run_head(p, v, attn.cfg.attention, n, b, w)
    if s.moved_to is not None:  # each value column to its own output column, as it is
        add_columns(out, where[s.moved_to], z_all)
    else:
        add_columns(out, where[s.cols], z_all @ s.W_O)


def run_head(p, v: torch.Tensor, mode, n: int, b: int, w: int) -> torch.Tensor:
    """One planned head's mixed values ``[batch, pos, w]`` from its values ``v``: a gather
    (one key per query), else the sum over each query's keys (softmax: weighted), divided
    by their count under hard attention.

    >>> from types import SimpleNamespace
    >>> p = SimpleNamespace(gather=False, offsets=torch.tensor([0, 1, 3]),
    ...                     keys=torch.tensor([0, 0, 1]), weights=None, nnz=3)
    >>> v = torch.tensor([[[2.0], [4.0]]], dtype=torch.float64)
    >>> run_head(p, v, AttentionMode.HARD, 2, 1, 1)[0, :, 0].tolist()  # query 1: mean
    [2.0, 3.0]
    """
    if p.gather:  # one key per query: the dense mean of one value is that value exactly
        return v[:, p.keys]
    counts = p.offsets[1:] - p.offsets[:-1]
    z = torch.empty_like(v)
    step = max(1, PAIRS_PER_CHUNK // max(1, p.nnz * w))  # batch rows per pass
    for start in range(0, b, step):
        terms = v[start : start + step, p.keys]  # [rows, nnz, w]
        if p.weights is not None:
            terms = terms * p.weights.to(v.dtype)[None, :, None]
        z[start : start + step] = segment_sum(terms, p.offsets)
    if mode is AttentionMode.HARD:  # the sum, then one division by the count
        z = z / counts.to(v.dtype)[None, :, None]
    return z
