"""Wide planned heads and wide MLPs run in parts, written straight to the stream.

A planned head (a gather or a mean over keys its static part selects) mixes each value
column on its own: column c of the head's output depends only on column c of its values.
A head that moves a whole row (the vector layout's gathers move rows of width d + d_ff)
would otherwise hold its values, its mixed values and its output, each ``[width, batch,
positions]``, plus the layer's buffer of written directions: at 262,144 positions and width
1,025, over 2 GiB each. Run in parts of a few columns, each part reads its values, mixes
them and adds its output into the stream, so a head needs a part's memory, not its width's.
An MLP's units are independent of each other in the same way: :func:`run_units` computes
a few units at a time (the vector layout's products have one unit per channel), and
:func:`write_channels` writes vector tokens into the stream a few positions at a time.

Writing into the stream while the sublayer runs is only right when nothing the sublayer
runs reads a direction it writes (:func:`writes_apart`); in a compiled model that always holds
(a block reads what earlier layers wrote), and the check keeps it so for any weights.

Each function below has its own example.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from attnsim.model.costs import PART_BYTES
from attnsim.model.sparse_ops import HeadMaps, Linear, UnitMaps

__all__ = [
    "PART_BYTES",
    "check_vector_tokens",
    "columns_per_part",
    "parts",
    "run_units",
    "write_channels",
    "writes_apart",
]


def columns_per_part(b: int, n: int, itemsize: int = 8) -> int:
    """How many value columns one part holds for a batch of ``b`` inputs of ``n`` positions.

    >>> columns_per_part(1, 262_144), columns_per_part(1, 100)
    (32, 83886)
    """
    return max(1, PART_BYTES // max(1, itemsize * b * n))


def writes_apart(hm: HeadMaps) -> bool:
    """True when no head of the layer reads a direction the layer writes (found once).

    >>> from attnsim.model.sparse import SparseHeads
    >>> w = torch.ones(2, dtype=torch.float64)
    >>> qk = torch.tensor([[0, 0, 0], [1, 0, 0]])
    >>> writes_apart(HeadMaps(SparseHeads(2, qk, w, torch.tensor([[0, 1, 2], [1, 1, 3]]), w)))
    True
    >>> writes_apart(HeadMaps(SparseHeads(2, qk, w, torch.tensor([[0, 1, 2], [1, 2, 3]]), w)))
    False
    """
    got = hm.__dict__.get("_writes_apart")
    if got is None:
        reads: set[int] = set()
        for h in hm.active:
            reads |= hm.reads_qk[h] | hm.reads_v[h]
        got = hm._writes_apart = not (reads & set(hm.written.tolist()))
    return got


def run_units(store, ums: list[UnitMaps], i: int, u, static=None, step=None) -> bool:
    """Adds the units ``ums[i]`` (stored as ``u``, a SparseUnits) to ``store`` ``step``
    units at a time (default: :func:`columns_per_part`), where they are more than a part
    and no unit of the sublayer ``ums`` reads what one writes; False (nothing done)
    otherwise, for the caller's whole-width pass. ``static``: the static pass's ``(units,
    directions)`` masks (the units that read static directions only, the others adding 0;
    the directions written).

    >>> from attnsim.model.sparse import SparseUnits
    >>> from attnsim.model.sparse_ops import Store
    >>> w = torch.ones(3, dtype=torch.float64)
    >>> inputs = torch.tensor([[0, 0], [1, 0], [2, 0]])  # (unit, direction): each reads dir 0
    >>> outputs = torch.tensor([[0, 1], [1, 2], [2, 2]])  # unit 0 -> dir 1, units 1, 2 -> dir 2
    >>> u = SparseUnits("relu", 3, inputs, w, inputs[:0], w[:0], outputs, w)
    >>> st = Store(1, 2, d=3, dtype=torch.float64, last={0: 9, 1: 9, 2: 9})
    >>> st.write(torch.tensor([0]), torch.tensor([[[-1.0, 2.0]]], dtype=torch.float64))
    >>> run_units(st, [UnitMaps(u)], 0, u, step=2)  # units 0, 1, then unit 2
    True
    >>> st.read(torch.tensor([1, 2]))[:, 0].tolist()  # relu(x) once, then twice
    [[0.0, 2.0], [0.0, 4.0]]
    """
    b, n = store.data.shape[1:]
    step = step or columns_per_part(b, n, store.data.element_size())
    um = ums[i]
    if b != 1 or um.n <= step:  # (a batch looks for repeated rows: unit_output)
        return False
    if "_apart" not in um.__dict__:  # found once per sublayer
        reads = set().union(*(m.reads for m in ums))
        um._apart = not (reads & set(torch.cat([m.written for m in ums]).tolist()))
    if not um._apart:
        return False
    cache = um.__dict__.setdefault("_parts", {})
    if step not in cache:
        cache[step] = [_units_part(u, a, min(a + step, um.n)) for a in range(0, um.n, step)]
    for a, part in zip(range(0, um.n, step), cache[step]):
        lo, hi = part.span(store)  # a unit of 0 inputs gives 0
        if hi <= lo:
            continue
        act = part.activation(store.view(lo, hi), store.slot)
        if static is not None:  # dynamic units add 0; only the static directions are kept
            ok = static[0][a : a + part.n, None, None]
            act = torch.where(ok, act, torch.zeros((), dtype=act.dtype))
        out, dirs = part.O(act, torch.arange(part.n)), part.written
        if static is not None:
            keep = static[1][dirs]
            out, dirs = out[keep], dirs[keep]
        store.write(dirs, out, lo)
    return True


def _units_part(u, a: int, b: int) -> UnitMaps:
    """Units ``a .. b - 1`` of ``u`` as a UnitMaps of their own (numbered from 0)."""

    def cut(idx: torch.Tensor, w: torch.Tensor) -> dict:
        m = (idx[:, 0] >= a) & (idx[:, 0] < b)
        idx = idx[m].clone()
        idx[:, 0] -= a
        return {"idx": idx, "w": w[m]}

    i, s, o = cut(u.inputs, u.inputs_w), cut(u.second, u.second_w), cut(u.outputs, u.outputs_w)
    return UnitMaps(
        replace(
            u,
            n_units=b - a,
            inputs=i["idx"],
            inputs_w=i["w"],
            second=s["idx"],
            second_w=s["w"],
            outputs=o["idx"],
            outputs_w=o["w"],
        )
    )


def parts(hm: HeadMaps, h: int, step: int) -> list[tuple[Linear, Linear, torch.Tensor]]:
    """Head h's value and output maps cut into parts of ``step`` value columns: per part
    ``(values, output, directions)``, where ``output`` maps the part's mixed values to the
    stream ``directions`` it adds to (found once per head and step).

    >>> from attnsim.model.sparse import SparseHeads
    >>> w = torch.ones(3, dtype=torch.float64)
    >>> ov = torch.tensor([[0, 0, 3], [0, 1, 4], [0, 2, 5]])  # head 0 moves dirs 0..2 to 3..5
    >>> hm = HeadMaps(SparseHeads(1, torch.tensor([[0, 0, 0]]), w[:1], ov, w))
    >>> [(v.width, dirs.tolist()) for v, o, dirs in parts(hm, 0, 2)]
    [(2, [3, 4]), (1, [5])]
    """
    cache = hm.__dict__.setdefault("_parts", {})
    if (h, step) in cache:
        return cache[(h, step)]
    V, W = hm.V[h], hm.O[h]
    dest = hm.written[hm.O_at[h]]  # the output map's columns -> stream directions
    out = []
    for a in range(0, V.width, step):
        b = min(a + step, V.width)
        mv = (V.cols >= a) & (V.cols < b)
        mo = (W.dirs >= a) & (W.dirs < b)
        if not bool(mo.any()):
            continue  # columns nothing writes out
        cols, inv = torch.unique(W.cols[mo], return_inverse=True)
        out.append(
            (
                Linear(V.dirs[mv], V.cols[mv] - a, V.weight[mv], b - a),
                Linear(W.dirs[mo] - a, inv, W.weight[mo], len(cols)),
                dest[cols],
            )
        )
    cache[(h, step)] = out
    return out


def check_vector_tokens(width: int, token_ids: torch.Tensor, token_values) -> None:
    """Raises a ValueError unless ``token_values`` is ``[batch, m, width]`` with the batch
    of ``token_ids [batch, pos]`` and ``m <= pos`` (the positions after read as 0).

    >>> check_vector_tokens(2, torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 3, 2))
    >>> check_vector_tokens(2, torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 5, 2))
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: token_values must be [batch, m, 2] ... got [1, 5, 2] for token_ids [1, 4]
    """
    if token_values is None or token_values.shape[-1:] != (width,):
        got = None if token_values is None else list(token_values.shape)
        raise ValueError(
            f"this model reads vector tokens of width {width}: pass token_values [batch, "
            f"pos, {width}], got {got}"
        )
    b, n = token_ids.shape
    if token_values.dim() != 3 or token_values.shape[0] != b or token_values.shape[1] > n:
        raise ValueError(
            f"token_values must be [batch, m, {width}] with the batch of token_ids and m <= "
            f"its {n} positions (the later ones read as 0), got {list(token_values.shape)} "
            f"for token_ids {list(token_ids.shape)}"
        )


def write_channels(store, vals: torch.Tensor, vec: torch.Tensor, w: torch.Tensor) -> None:
    """Adds vector tokens ``vals [batch, pos, width]`` to ``store``: channel ``vec[t, 0]``
    times ``w[t]`` into direction ``vec[t, 1]``, on a slab of positions at a time (a part's
    worth of terms; a slab of zeros adds nothing and is skipped).

    >>> from attnsim.model.sparse_ops import Store
    >>> st = Store(1, 2, d=3, dtype=torch.float64, last={0: 1, 2: 1})
    >>> vals = torch.tensor([[[1.0, 10.0], [2.0, 20.0]]], dtype=torch.float64)
    >>> vec = torch.tensor([[0, 0], [1, 2], [0, 2]])  # direction 2 takes both channels
    >>> write_channels(st, vals, vec, torch.tensor([1.0, 1.0, 3.0], dtype=torch.float64))
    >>> st.read(torch.tensor([0, 2]))[:, 0].tolist()
    [[1.0, 2.0], [13.0, 26.0]]
    """
    b, n, _ = vals.shape
    dirs, inv = torch.unique(vec[:, 1], return_inverse=True)
    step = columns_per_part(b, max(1, len(vec)), vals.element_size())  # positions a part
    for at in range(0, n, step):  # a slab of positions at a time (its channels contiguous)
        slab = vals[:, at : at + step]
        if not bool(slab.ne(0).any()):
            continue  # (an input's zero regions: nothing to add)
        terms = slab[..., vec[:, 0]].permute(2, 0, 1) * w[:, None, None]  # [terms, b, pos]
        out = torch.zeros(len(dirs), b, slab.shape[1], dtype=vals.dtype)
        store.write(dirs, out.index_add_(0, inv, terms), at)


class HeldWrites:
    """Heads' outputs added to the stream together, each ``(rows, z [len(rows), batch, w],
    at)`` with ``rows`` indices into the layer's ``written`` directions: summed on the span
    of the held outputs over the rows they write, then one :meth:`Store.write` (the dense
    forward sums the heads' outputs before it adds them, too). With ``limit`` (bytes), the
    held outputs are written as soon as their buffer would pass it (a layer that writes apart
    from what it reads, :func:`writes_apart`); without, at :meth:`flush` only. ``keep``: a
    bool per direction of ``written`` (the static pass writes static directions only).

    >>> from attnsim.model.store import Store
    >>> st = Store(1, 4, d=2, dtype=torch.float64, last={0: 1, 1: 1})
    >>> held = HeldWrites(st, torch.tensor([0, 1]))
    >>> one = torch.ones(1, 1, 2, dtype=torch.float64)
    >>> held.add(torch.tensor([0]), one, 1); held.add(torch.tensor([0]), 2 * one, 2)
    >>> held.flush(); st.read(torch.tensor([0]))[0, 0].tolist()
    [0.0, 1.0, 3.0, 2.0]
    """

    def __init__(self, store, written: torch.Tensor, limit: int | None = None, keep=None):
        self.store, self.written, self.limit, self.keep = store, written, limit, keep
        self.held: list = []
        self.rows = 0
        self.lo, self.hi = store.n, 0

    def add(self, rows: torch.Tensor, z: torch.Tensor, at: int) -> None:
        lo, hi = min(self.lo, at), max(self.hi, at + z.shape[2])
        size = (self.rows + len(rows)) * (hi - lo) * z.shape[1] * z.element_size()
        if self.held and self.limit is not None and size > self.limit:
            self.flush()
            lo, hi = at, at + z.shape[2]
        self.held.append((rows, z, at))
        self.rows += len(rows)
        self.lo, self.hi = lo, hi

    def flush(self) -> None:
        if not self.held:
            return
        lo, held = self.lo, self.held
        if len(held) == 1:  # as it is
            self._write(held[0][0], held[0][1], held[0][2])
            self.held, self.rows, self.lo, self.hi = [], 0, self.store.n, 0
            return
        rows = torch.unique(torch.cat([r for r, _, _ in held]))  # ascending
        place = torch.empty(int(rows[-1]) + 1, dtype=torch.long)
        place[rows] = torch.arange(len(rows))
        z0 = held[0][1]
        out = z0.new_zeros(len(rows), z0.shape[1], self.hi - lo)
        for r, z, at in held:  # in the heads' order
            out[place[r], :, at - lo : at - lo + z.shape[2]] += z
        self.held, self.rows, self.lo, self.hi = [], 0, self.store.n, 0
        self._write(rows, out, lo)

    def _write(self, rows: torch.Tensor, out: torch.Tensor, at: int) -> None:
        dirs = self.written[rows]
        if self.keep is not None:
            kept = self.keep[dirs]
            dirs, out = dirs[kept], out[kept]
        self.store.write(dirs, out, at)
