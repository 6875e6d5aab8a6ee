"""A layer's small planned gathers as one batch (sparse storage).

A layer of U may hold hundreds of planned gathers that each move a few value cells (one per
column of a transpose, say: a head of width 1 whose queries read a dozen keys). One at a
time, each costs a few dozen small tensor operations; as a :class:`GatherBatch`, found once
per input length, they are three index operations over all of them:

1. the values at the keys the heads read, once per value map: from the map's terms read at
   the keys (summed in the map's term order, as :class:`attnsim.model.sparse_ops.Linear`
   sums them), or, for a map of many terms, by the map on its span (as a head alone);
2. each head's output cells, from its output map's terms (in their order);
3. the cells added into one buffer over the rows the heads write, head after head (as
   :class:`attnsim.model.head_parts.HeldWrites` adds heads' outputs).

A query that is not listed reads the plan's ``fill`` key: the batch runs only when every
head's values are 0 there (checked on each call), as a gather's values on positions past
its span are. Positions without a row read the store's zero row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnsim.model.costs import BATCH_CELLS, PART_BYTES

__all__ = ["GatherBatch", "build", "run"]


@dataclass(frozen=True)
class GatherBatch:
    """The index arrays of a layer's batched gathers (see the module's docstring): value
    terms ``(v_dir, v_key, v_w) -> v_entry``, output terms ``(o_entry, o_w) -> o_cell``,
    cells ``-> (cell_row, cell_q)`` of a buffer over ``rows`` (places in the layer's written
    directions) and queries ``lo .. hi - 1``; ``fill_dirs`` at ``fill_keys``: the values
    the other queries read, which must be 0."""

    heads: frozenset[int]
    wide: tuple  # (value map, first entry, keys): maps run on their span, then gathered
    v_dir: torch.Tensor
    v_key: torch.Tensor
    v_w: torch.Tensor
    v_entry: torch.Tensor
    entries: int
    o_entry: torch.Tensor
    o_w: torch.Tensor
    o_cell: torch.Tensor
    cells: int
    cell_row: torch.Tensor
    cell_q: torch.Tensor
    rows: torch.Tensor
    lo: int
    hi: int
    fill_dirs: torch.Tensor
    fill_keys: torch.Tensor


def _pairs(terms: int, i: np.ndarray, to: np.ndarray, at: int, m: int | None = None):
    """Index ``at + to[t] * m + i[j]`` for each term t (outer) and each j (inner); ``m``:
    ``len(i)`` by default."""
    m = len(i) if m is None else m
    return at + np.repeat(to, len(i)) * m + np.tile(i, terms)


def build(hm, plans: dict) -> GatherBatch | None:
    """The batch of the planned gathers of ``hm`` (a :class:`attnsim.model.sparse_ops.HeadMaps`)
    that move at most :data:`BATCH_CELLS` value cells each (``plans``: head -> plan), or
    None where fewer than two heads do.

    >>> from attnsim.model.sparse import SparseHeads
    >>> from attnsim.model.sparse_ops import HeadMaps
    >>> from attnsim.model.plans import HeadPlan
    >>> w = torch.ones(2, dtype=torch.float64)  # head h moves direction h into 2 + h
    >>> hm = HeadMaps(SparseHeads(2, torch.tensor([[0, 0, 0], [1, 0, 0]]), w,
    ...                           torch.tensor([[0, 0, 2], [1, 1, 3]]), w))
    >>> p = HeadPlan(0, None, torch.tensor([3]), None, True, queries=torch.tensor([1]))
    >>> g = build(hm, {0: p, 1: p})  # both: query 1 reads key 3
    >>> sorted(g.heads), g.rows.tolist(), (g.lo, g.hi)
    ([0, 1], [0, 1], (1, 2))
    """
    heads = []
    for h in hm.active:
        p = plans.get(h)
        if p is not None and p.gather and p.kind == "head" and len(p.queries):
            if hm.V[h].width * len(p.queries) <= BATCH_CELLS:
                heads.append(h)
    if len(heads) < 2:
        return None
    parts: dict[str, list] = {k: [] for k in GatherBatch.__dataclass_fields__}
    maps: dict[int, list] = {}  # a value map that serves several heads: its keys, once
    for h in heads:
        maps.setdefault(id(hm.V[h]), [hm.V[h]]).append(plans[h].keys.numpy())
    entries = cells = 0
    wide = []  # value maps of many terms: computed on their span, as a head alone does
    for key, (V, *keys) in maps.items():
        keys = np.unique(np.concatenate(keys))
        maps[key] = [entries, keys]
        if len(V.dirs) * len(keys) > BATCH_CELLS:
            wide.append((V, entries, torch.from_numpy(keys)))
            entries += V.width * len(keys)
            continue
        vd, vc, vw = V.dirs.numpy(), V.cols.numpy(), V.weight.numpy()
        parts["v_dir"].append(np.repeat(vd, len(keys)))
        parts["v_key"].append(np.tile(keys, len(vd)))
        parts["v_w"].append(np.repeat(vw, len(keys)))
        parts["v_entry"].append(_pairs(len(vd), np.arange(len(keys)), vc, entries))
        entries += V.width * len(keys)
    for h in heads:
        p, out = plans[h], hm.O[h]
        q, m = p.queries.numpy(), len(p.queries)
        base, keys = maps[id(hm.V[h])]
        at = np.searchsorted(keys, p.keys.numpy())  # each pair's value entries
        oc, oj, ow = out.dirs.numpy(), out.cols.numpy(), out.weight.numpy()
        parts["o_entry"].append(_pairs(len(oc), at, oc, base, len(keys)))
        parts["o_w"].append(np.repeat(ow, m))
        parts["o_cell"].append(_pairs(len(oc), np.arange(m), oj, cells))
        parts["cell_row"].append(np.repeat(hm.O_at[h].numpy(), m))
        parts["cell_q"].append(np.tile(q, out.width))
        parts["fill_dirs"].append(hm.V[h].dirs.numpy())
        parts["fill_keys"].append(np.full(len(hm.V[h].dirs), p.fill))
        cells += out.width * m
    cat = {k: np.concatenate(v) for k, v in parts.items() if v}
    for k in ("v_dir", "v_key", "v_entry"):
        cat.setdefault(k, np.zeros(0, dtype=np.int64))
    cat.setdefault("v_w", np.zeros(0))
    rows, cell_row = np.unique(cat["cell_row"], return_inverse=True)
    lo, hi = int(cat["cell_q"].min()), int(cat["cell_q"].max()) + 1

    def t(a: np.ndarray) -> torch.Tensor:  # indices in 32 bits where they fit (half the
        if a.dtype.kind == "i" and (not a.size or a.max() < 2**31):  # memory kept)
            a = a.astype(np.int32)
        return torch.from_numpy(a)

    return GatherBatch(
        heads=frozenset(heads),
        wide=tuple(wide),
        v_dir=t(cat["v_dir"]),
        v_key=t(cat["v_key"]),
        v_w=t(cat["v_w"]),
        v_entry=t(cat["v_entry"]),
        entries=entries,
        o_entry=t(cat["o_entry"]),
        o_w=t(cat["o_w"]),
        o_cell=t(cat["o_cell"]),
        cells=cells,
        cell_row=t(cell_row.reshape(-1)),
        cell_q=t(cat["cell_q"] - lo),
        rows=t(rows),
        lo=lo,
        hi=hi,
        fill_dirs=t(cat["fill_dirs"]),
        fill_keys=t(cat["fill_keys"]),
    )


def run(g: GatherBatch, store) -> tuple | None:
    """The batched heads' summed output ``(rows, out [len(rows), batch, hi - lo], lo)`` on
    ``store`` (a :class:`attnsim.model.store.Store`), or None where the batch does not run:
    rows in blocks, a buffer past :data:`PART_BYTES`, or some head's values not 0 at its
    fill key (then each head runs on its own).

    >>> from attnsim.model.sparse import SparseHeads
    >>> from attnsim.model.sparse_ops import HeadMaps
    >>> from attnsim.model.plans import HeadPlan
    >>> from attnsim.model.store import Store
    >>> w = torch.ones(2, dtype=torch.float64)
    >>> hm = HeadMaps(SparseHeads(2, torch.tensor([[0, 0, 0], [1, 0, 0]]), w,
    ...                           torch.tensor([[0, 0, 2], [1, 1, 3]]), w))
    >>> p = HeadPlan(0, None, torch.tensor([3]), None, True, queries=torch.tensor([1]))
    >>> st = Store(1, 4, d=4, dtype=torch.float64, last={0: 9, 1: 9})
    >>> vals = torch.tensor([[[0, 0, 0, 5.0]], [[0, 0, 0, 7.0]]], dtype=torch.float64)
    >>> st.write(torch.tensor([0, 1]), vals)
    >>> rows, out, lo = run(build(hm, {0: p, 1: p}), st)
    >>> rows.tolist(), out.flatten().tolist(), lo  # query 1 reads key 3 of both
    ([0, 1], [5.0, 7.0], 1)
    """
    x, slot, b = store.data, store.slot, store.b
    if not isinstance(x, torch.Tensor):  # rows in blocks: each head on its own
        return None
    if len(g.rows) * b * (g.hi - g.lo) * x.element_size() > PART_BYTES:
        return None
    if bool(x[slot[g.fill_dirs], :, g.fill_keys].ne(0).any()):
        return None
    terms = x[slot[g.v_dir], :, g.v_key] * g.v_w.to(x.dtype)[:, None]  # [terms, batch]
    ent = terms.new_zeros(g.entries, b).index_add_(0, g.v_entry, terms)
    for V, first, keys in g.wide:
        lo, hi = store.span(V.dirs)
        inside = (keys >= lo) & (keys < hi)
        if hi <= lo or not bool(inside.any()):
            continue  # its values are 0 at every key
        v = V(store.view(lo, hi), slot)[:, :, keys[inside] - lo]  # [width, batch, keys]
        at = first + torch.arange(V.width)[:, None] * len(keys) + torch.nonzero(inside).T
        ent[at.reshape(-1)] = v.permute(0, 2, 1).reshape(-1, b)
    outs = ent[g.o_entry] * g.o_w.to(x.dtype)[:, None]
    cells = ent.new_zeros(g.cells, b).index_add_(0, g.o_cell, outs)
    out = ent.new_zeros(len(g.rows), g.hi - g.lo, b)
    out.index_put_((g.cell_row, g.cell_q), cells, accumulate=True)  # head after head
    return g.rows, out.permute(0, 2, 1), g.lo
