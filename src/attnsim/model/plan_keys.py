"""One-sided heads: attention whose keys, or whose queries, the input cannot change.

Many compiled heads compare a computed value with the position on one side only:
``Select(indices, target, ==)`` reads the value at a computed position (its keys are
static), and sort's ``Select(target_pos, indices, ==)`` puts each value at the position it
computed (its queries are static). "Static" directions are those whose value at every
position is the same for every input of a length (see
:func:`attnsim.model.plans.static_directions`); without a causal mask such a head runs over
the few distinct rows its other side takes in a batch instead of over ``[batch, pos, pos]``
scores:

- **static keys** (:class:`SidePlan`, side "keys"): a query's pattern depends on its query
  row alone; the pattern is computed once per distinct query row, ``[rows, pos]``, and
  where every row selects one key (hard attention) the head is a gather, bit for bit the
  dense result.
- **static queries** (side "queries"): the keys fall into classes (their distinct rows);
  each sequence's values are summed per class, the scores are a table ``[pos, class]``, and
  a query attends over the classes present in its sequence, as a token-table head does (see
  :class:`attnsim.model.plan_tables.TablePlan`); where every query selects one class (hard
  attention) its output is that class's mean, one gather. When each query's best class in
  the table lies above all others by more than the tolerance and is present in every
  sequence (a sort's placing head on distinct keys), the classes' scores are not compared
  per sequence at all, and where each such class holds one key the output is that key's
  value, gathered.

>>> from attnsim import compile_program, library, rasp
>>> m = compile_program(library.make_sort_unique(rasp.tokens, rasp.tokens),
...                     vocab=[1, 2, 3], max_seq_len=3)
>>> [(type(p).__name__, p.kind) for p in m.runtime.plans(4)[1]]  # candidates first
[('HeadPlan', 'candidates'), ('SidePlan', 'side')]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from attnsim.model import plan_core
from attnsim.model.config import AttentionMode
from attnsim.model.costs import MAX_CLASS_VALUES, MAX_ROW_SHARE, MIN_DISTINCT_ROWS
from attnsim.model.hard import hard_selection, hard_threshold
from attnsim.model.plan_static import _reads, _writes
from attnsim.model.projection import columns, head_values

__all__ = ["SidePlan", "side_heads", "side_plan", "run", "flops", "one_sided"]


@dataclass(frozen=True)
class SidePlan:
    """A one-sided head for one input length: its keys (``side == "keys"``) or its queries
    (``"queries"``) are the same on every input of this length.

    Attributes:
        head: the head's index in its layer.
        side: which side is static, "keys" or "queries".
        reads: ``[m]`` int64 residual directions the other side reads.
        static: ``[pos, width]`` the static side's rows (keys, or queries).
    """

    kind: ClassVar[str] = "side"  # what runs it (attnsim.model.plans.KINDS)

    head: int
    side: str
    reads: torch.Tensor
    static: torch.Tensor


def side_heads(transformer, masks, heads) -> tuple[tuple[tuple[int, str], ...], ...]:
    """Per layer, ``(head, side)`` for the active heads that are not static and whose keys
    (side ``"keys"``) or queries (``"queries"``) read static directions only, the other side
    some other direction; none in a causal model.

    >>> from attnsim import compile_program, library, rasp
    >>> m = compile_program(library.make_sort_unique(rasp.tokens, rasp.tokens),
    ...                     vocab=[1, 2, 3], max_seq_len=3)
    >>> from attnsim.model.plans import static_directions, static_heads
    >>> side_heads(m.model, static_directions(m.model), static_heads(m.model))
    ((), ((0, 'queries'),))
    """
    if transformer.cfg.causal:
        return tuple(() for _ in transformer.blocks)
    out = []
    with torch.no_grad():
        for layer, block in enumerate(transformer.blocks):
            a, static = block.attn, masks[2 * layer]
            width = a._plan()[1]
            found = []
            for h in a.active_heads().tolist():
                if h in heads[layer]:
                    continue
                wq = max(1, int(width[h]))
                k_reads, q_reads = _reads(a.W_K[h, :, :wq]), _reads(a.W_Q[h, :, :wq])
                if bool((static | ~k_reads).all()) and bool(q_reads.any()):
                    found.append((h, "keys"))
                elif bool((static | ~q_reads).all()) and bool(k_reads.any()):
                    found.append((h, "queries"))
            out.append(tuple(found))
    return tuple(out)


def side_plan(attn, h: int, side: str, x: torch.Tensor) -> SidePlan:
    """Head h's plan from the static stream ``x [1, pos, d_model]``: its static side as the
    dense forward computes it (:meth:`Transformer.plans` builds these per length).

    >>> from attnsim import compile_program, library, rasp
    >>> m = compile_program(library.make_sort_unique(rasp.tokens, rasp.tokens),
    ...                     vocab=[1, 2, 3], max_seq_len=3)
    >>> plan = m.runtime.plans(4)[1][-1]
    >>> plan.side, plan.static.shape[0]  # one static query per position
    ('queries', 4)
    """
    wq = max(1, int(attn._plan()[1][h]))
    W_Q, W_K = attn.W_Q[h, :, :wq], attn.W_K[h, :, :wq]
    reading, static = (W_Q, W_K) if side == "keys" else (W_K, W_Q)
    return SidePlan(h, side, torch.nonzero(_reads(reading)).flatten(), x[0] @ static)


def run(attn, p: SidePlan, x: torch.Tensor, cache: dict | None = None) -> torch.Tensor | None:
    """The head's mixed values ``[batch, pos, width]``, or None when the dynamic side takes so
    many distinct rows in the batch that the dense scores cost about as much (``cache``:
    the runtime's layer cache, where the head's value projection is kept).

    >>> import torch
    >>> from attnsim import compile_program, library, rasp
    >>> m = compile_program(library.make_sort_unique(rasp.tokens, rasp.tokens),
    ...                     vocab=[1, 2, 3], max_seq_len=3)
    >>> net, ids = m.model, m.encode([[3, 1, 2], [2, 3, 1]])[0]
    >>> streams = {2: None}
    >>> _ = net(ids, streams=streams)  # the stream before layer 1's attention
    >>> attn, x = net.blocks[1].attn, streams[2]
    >>> z = run(attn, m.runtime.plans(4)[1][-1], x)
    >>> heads = torch.tensor([0])
    >>> dense = attn.dense_heads(x, heads)  # the dense head's output, through W_O
    >>> W_O = attn.W_O[0, : z.shape[-1]]
    >>> bool(torch.allclose(z @ W_O, dense))
    True
    """
    b, n, _ = x.shape
    h = p.head
    reads = p.reads
    rows, inverse = plan_core.distinct_rows(columns(x, reads).reshape(b * n, -1))
    if _too_many(rows, b * n):
        return None
    v = head_values(attn, h, cache)(x)  # [batch, pos, wv]
    cls = inverse.view(b, n)
    # the distinct rows of the other side, projected (its other rows of W_Q or W_K are 0)
    W = attn.W_Q if p.side == "keys" else attn.W_K
    other = rows @ W[h, reads, : p.static.shape[1]]
    return _mix_side(attn.cfg, p.side, p.static, other, cls, v)


def _too_many(rows: torch.Tensor, positions: int) -> bool:
    """Whether the dynamic side's distinct rows are so many that the dense head costs
    about as much."""
    return rows.shape[0] > max(MIN_DISTINCT_ROWS, MAX_ROW_SHARE * positions)


def _mix_side(cfg, static: str, fixed: torch.Tensor, rows: torch.Tensor, cls, v) -> torch.Tensor:
    """The head's output from its static side ``fixed [pos, width]`` and the projected
    distinct rows ``rows [classes, width]`` of the other side (``cls [batch, pos]``: each
    position's row)."""
    if static == "keys":
        return _by_query(cfg, rows @ fixed.T, cls, v)
    return _static_queries(cfg, fixed @ rows.T, cls, v)


def run_projected(cfg, static: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """A one-sided head from its projected queries and keys ``q, k [batch, pos, width]``
    and values ``v [batch, pos, wv]`` (the sparse storage's heads), ``static`` the side
    that is the same on every input of this length ("keys" or "queries"; its first sequence
    is read): its mixed values ``[batch, pos, wv]``, or None where the other side takes too
    many distinct rows (then the dense head costs about as much).

    Raises:
        ValueError: a causal model (a masked head's pattern is not a function of the
            row), or ``static`` other than "keys" and "queries".

    >>> import torch
    >>> from attnsim.model.config import ModelConfig
    >>> cfg = ModelConfig(n_layers=1, d_model=1, n_heads=1, d_head=1, d_mlp=0, d_bilinear=0,
    ...                   n_ctx=4, d_vocab=2)
    >>> q = torch.arange(4.0, dtype=torch.float64).view(1, 4, 1)  # static queries
    >>> k = torch.tensor([[[0.0], [3.0], [3.0], [1.0]]], dtype=torch.float64)
    >>> v = torch.tensor([[[1.0], [2.0], [4.0], [8.0]]], dtype=torch.float64)
    >>> dense = torch.softmax(cfg.beta * q @ k.transpose(1, 2), dim=-1) @ v
    >>> bool(torch.allclose(run_projected(cfg, "queries", q, k, v), dense))
    True
    """
    if cfg.causal:
        raise ValueError(
            "run_projected: a causal head's pattern depends on each query's position as "
            "well as its row; run it dense (one-sided plans are for heads without a mask)"
        )
    if static not in ("keys", "queries"):
        raise ValueError(f"run_projected: static must be 'keys' or 'queries', got {static!r}")
    b, n, _ = v.shape
    dynamic, fixed = (k, q[0]) if static == "queries" else (q, k[0])
    rows, inverse = plan_core.distinct_rows(dynamic.reshape(b * n, -1))
    if _too_many(rows, b * n):
        return None
    return _mix_side(cfg, static, fixed, rows, inverse.view(b, n), v)


def one_sided(cfg, static, q_dirs, k_dirs, q, k, v):
    """A head whose queries or whose keys (not both) read static directions only, over the
    distinct rows of its other side (:func:`run_projected`); ``static`` marks the stream's
    static directions, ``q_dirs`` and ``k_dirs`` are the directions each side reads. None
    for a causal model, a head without exactly one static side, or too many distinct rows.

    >>> import torch
    >>> from attnsim.model.config import ModelConfig
    >>> cfg = ModelConfig(n_layers=1, d_model=2, n_heads=1, d_head=1, d_mlp=0, d_bilinear=0,
    ...                   n_ctx=3, d_vocab=2)
    >>> static = torch.tensor([True, False])  # direction 0 is static, 1 is not
    >>> q = torch.tensor([[[1.0], [2.0], [3.0]]], dtype=torch.float64)
    >>> k = torch.tensor([[[0.0], [1.0], [1.0]]], dtype=torch.float64)
    >>> v = torch.tensor([[[1.0], [2.0], [4.0]]], dtype=torch.float64)
    >>> z = one_sided(cfg, static, torch.tensor([0]), torch.tensor([1]), q, k, v)
    >>> bool(torch.allclose(z, run_projected(cfg, "queries", q, k, v)))
    True
    >>> one_sided(cfg, static, torch.tensor([0]), torch.tensor([0]), q, k, v) is None
    True
    """
    if cfg.causal:
        return None
    q_static, k_static = bool(static[q_dirs].all()), bool(static[k_dirs].all())
    if q_static == k_static:  # both: the plans run it; neither: no static side
        return None
    return run_projected(cfg, "queries" if q_static else "keys", q, k, v)


def _static_queries(cfg, table: torch.Tensor, cls: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """:func:`_by_key` over the batch in passes of about ``MAX_CLASS_VALUES`` values."""
    b, n, wv = v.shape
    step = max(1, MAX_CLASS_VALUES // (table.shape[1] * (wv + n)))  # sequences per pass
    if step >= b:
        return _by_key(cfg, table, cls, v)
    z = torch.empty_like(v)
    for start in range(0, b, step):
        part = slice(start, start + step)
        z[part] = _by_key(cfg, table, cls[part], v[part])
    return z


def _by_query(cfg, scores: torch.Tensor, cls: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Static keys: ``scores [rows, pos]`` of each distinct query row, ``cls [batch, pos]``
    each query's row."""
    b, n, wv = v.shape
    if cfg.attention is AttentionMode.HARD:
        top, key = scores.max(dim=-1, keepdim=True)
        chosen = hard_selection(scores, cfg.hard_tolerance, best=top)
        count = chosen.sum(dim=-1)
        if bool((count == 1).all()):  # one key per query (the best): that value, exactly
            key = key[..., 0][cls].view(b, n, 1)
            return v.gather(1, key.expand(b, n, wv))
        z = torch.bmm(chosen.to(v.dtype)[cls], v)  # the sums, then one division by the count
        return z / count.to(v.dtype)[cls][..., None]
    return torch.bmm(torch.softmax(cfg.beta * scores, dim=-1)[cls], v)


def _by_key(cfg, table: torch.Tensor, cls: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Static queries: ``table [pos, classes]`` the score of each query for each key class,
    ``cls [batch, pos]`` each key's class. Per sequence, the keys' values are summed by
    class and a query attends over the classes present (as the dense sum, grouped)."""
    b, n, wv = v.shape
    c = table.shape[1]
    at = (cls + torch.arange(b, device=v.device)[:, None] * c).view(-1)  # (sequence, class)
    count = torch.bincount(at, minlength=b * c).to(v.dtype).view(b, c)
    flat = v.reshape(b * n, wv)
    if cfg.attention is AttentionMode.HARD and c:
        # each query's best class in the table, alone above the tolerance: where it is
        # present in every sequence, it is the one class each query selects
        top, best = table.max(dim=1)  # [pos]
        second = table.scatter(1, best[:, None], float("-inf")).amax(dim=1)
        seen = count[:, best]  # [batch, pos]: keys of each query's best class
        alone = bool((second < hard_threshold(top, cfg.hard_tolerance)).all())
        if alone and bool((seen > 0).all()):
            if bool((seen == 1).all()):  # one key: the mean of one value is that value
                every = torch.arange(b * n, device=v.device)
                key = at.new_empty(b * c).scatter_(0, at, every)
                key = key.view(b, c)[:, best].reshape(-1)
                return flat.index_select(0, key).view(b, n, wv)
            sums = v.new_zeros(b * c, wv).index_add_(0, at, flat).view(b, c, wv)
            return sums[:, best] / seen[..., None]
    sums = v.new_zeros(b * c, wv).index_add_(0, at, flat).view(b, c, wv)
    s = table.expand(b, n, c).masked_fill((count == 0)[:, None, :], float("-inf"))
    top, best = s.max(dim=-1, keepdim=True)
    if cfg.attention is AttentionMode.HARD:
        chosen = hard_selection(s, cfg.hard_tolerance, best=top)  # [batch, query, class]
        if bool((chosen.sum(dim=-1) == 1).all()):  # one class per query (the best): its mean
            best = best[..., 0]  # [batch, query]
            z = sums.gather(1, best[..., None].expand(b, n, wv))
            return z / count.gather(1, best)[..., None]
        w = chosen.to(v.dtype)
    else:
        w = torch.exp(cfg.beta * (s - top))  # softmax's terms; an absent class weighs 0
    return (w @ sums) / (w @ count[..., None])


def flops(attn, p: SidePlan, n: int) -> int:
    """FLOPs of one one-sided head on ``n`` positions, batch 1, counting every row of its
    dynamic side as distinct: the row look-up, the scores against the static side, the
    values, the sums over the selected keys (or classes) and the outputs.

    >>> from attnsim import compile_program, library, rasp
    >>> m = compile_program(library.make_sort_unique(rasp.tokens, rasp.tokens),
    ...                     vocab=[1, 2, 3], max_seq_len=3)
    >>> flops(m.model.blocks[1].attn, m.runtime.plans(4)[1][-1], 4) > 0
    True
    """
    static, m = p.static, int(p.reads.numel())
    wq = int(static.shape[1])
    wv = max(1, int(attn._plan()[2][p.head]))
    rows_v = int(_reads(attn.W_V[p.head, :, :wv]).sum())
    cols_o = int(_writes(attn.W_O[p.head, :wv]).sum())
    lookup = n * m * max(1, n.bit_length())
    mix = 2 * n * n * wq + 2 * n * n * (wv + 1)
    return lookup + 2 * n * m * wq + mix + 2 * n * rows_v * wv + 2 * n * wv * cols_o
