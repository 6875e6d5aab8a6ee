"""The pieces of sparse storage's forward pass (:mod:`attnsim.model.sparse`): sparse maps
between residual directions and columns, the store of live columns, and the execution plans
of heads computed from their queries and keys.

Streams are column-major here: ``[slots, batch, pos]``, one contiguous row per direction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from attnsim.model import plan_core
from attnsim.model.costs import ROW_BY_TERM, TERMS_PER_CHUNK
from attnsim.model.native import NATIVE_FUNCTIONS
from attnsim.model.store import Store
from attnsim.model.transformer import Transformer

if TYPE_CHECKING:  # the storage classes, for annotations only
    from attnsim.model.sparse_layers import SparseHeads, SparseUnits

__all__ = [
    "HeadMaps",
    "Linear",
    "Store",
    "UnitMaps",
    "dense_of",
    "choose_side",
    "factor_side",
    "split_qk",
]


def long_tensor(xs: Sequence[int]) -> torch.Tensor:
    """An int64 tensor of ``xs`` (empty when ``xs`` is).

    >>> long_tensor([3, 1]).tolist(), long_tensor([]).dtype
    ([3, 1], torch.int64)
    """
    return torch.as_tensor(list(xs), dtype=torch.long)


class Linear:
    """A sparse map from residual directions to ``width`` output columns: output column
    ``col[t]`` sums ``weight[t] * x[dir[t]]`` over its terms t (in the order given).

    Streams are column-major here: ``x [slots, batch, pos]``, one contiguous row per
    direction, so that reading a direction and adding into a column are whole-row moves.

    >>> lin = Linear(torch.tensor([0, 2, 2]), torch.tensor([0, 0, 1]),
    ...              torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), 2)
    >>> x = torch.tensor([[[1.0]], [[0.0]], [[10.0]]], dtype=torch.float64)  # [dirs, 1, 1]
    >>> lin(x, torch.arange(3)).flatten().tolist()
    [21.0, 30.0]
    """

    def __init__(self, dirs: torch.Tensor, cols: torch.Tensor, weight: torch.Tensor, width: int):
        self.dirs, self.cols, self.weight, self.width = dirs, cols, weight, int(width)
        # a copy: every column has one term of weight 1 (an identity factor, a gather's values)
        self.copy = None
        self.repeat: tuple[Linear, torch.Tensor] | None = None
        if len(cols) == self.width and bool((weight == 1).all()):
            order = torch.argsort(cols)
            if bool((cols[order] == torch.arange(self.width)).all()):
                self.copy = dirs[order]
                return
        if len(cols) > 2 * self.width > 2:
            # columns with the same terms (one scale factor multiplying every channel, say)
            # are computed once and repeated
            terms: list[list] = [[] for _ in range(self.width)]
            for d, c, w in zip(dirs.tolist(), cols.tolist(), weight.tolist()):
                terms[c].append((d, w))
            first: dict[tuple, int] = {}
            which = [first.setdefault(tuple(t), len(first)) for t in terms]
            if len(first) < self.width:
                rows = [(d, j, w) for t, j in first.items() for d, w in t]
                inner = Linear(
                    torch.tensor([r[0] for r in rows], dtype=torch.long),
                    torch.tensor([r[1] for r in rows], dtype=torch.long),
                    torch.tensor([r[2] for r in rows], dtype=weight.dtype),
                    len(first),
                )
                self.repeat = (inner, torch.tensor(which, dtype=torch.long))

    def gain(self) -> float:
        """The largest sum of |weights| over an output column (0 for no terms): a bound
        on ``|output| / max |input|``.

        >>> Linear(torch.tensor([0, 1, 1]), torch.tensor([0, 0, 1]),
        ...        torch.tensor([2.0, -3.0, 1.0], dtype=torch.float64), 2).gain()
        5.0
        """
        if "_gain" not in self.__dict__:
            sums = torch.zeros(self.width + 1, dtype=self.weight.dtype)
            self._gain = float(sums.index_add_(0, self.cols, self.weight.abs()).max())
        return self._gain

    def __call__(self, x: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
        """``x [slots, batch, pos]`` (direction d at slot ``slot[d]``) -> ``[width, batch,
        pos]`` (a copy of consecutive long rows is a view of ``x``: read it, do not write
        it)."""
        if self.copy is not None:
            rows = slot[self.copy]
            _, b, n = x.shape
            if b * n >= ROW_BY_TERM and isinstance(x, torch.Tensor):  # long rows, in one
                lo = int(rows[0])  # tensor: consecutive rows are read as they are (a view)
                if int(rows[-1]) - lo == len(rows) - 1 and bool((rows.diff() == 1).all()):
                    return x[lo : lo + len(rows)]
            return x[rows]
        if self.repeat is not None:
            inner, which = self.repeat
            return inner(x, slot)[which]
        _, b, n = x.shape
        out = torch.zeros(self.width, b, n, dtype=x.dtype)
        if not len(self.dirs):
            return out
        if b * n >= ROW_BY_TERM and isinstance(x, torch.Tensor):  # (not rows in blocks)
            cache = self.__dict__.setdefault("_terms", {})  # per dtype: x's weights
            terms = cache.get(x.dtype)
            if terms is None:
                terms = cache[x.dtype] = (self.cols.tolist(), self.weight.to(x.dtype).tolist())
            scratch = torch.empty(b, n, dtype=x.dtype)
            for row, col, w in zip(slot[self.dirs].tolist(), *terms):
                out[col].add_(torch.mul(x[row], w, out=scratch))
            return out
        src = slot[self.dirs]
        w = self.weight.to(x.dtype)
        step = max(1, TERMS_PER_CHUNK // max(1, b * n))
        for s in range(0, len(src), step):
            terms = x[src[s : s + step]]  # [terms, batch, pos]: a new tensor (or a view of
            if terms.is_contiguous():  # one): scaled in place where that leaves it whole
                terms.mul_(w[s : s + step, None, None])
            else:
                terms = terms * w[s : s + step, None, None]
            out.index_add_(0, self.cols[s : s + step], terms)
        return out


def factor_side(terms) -> tuple[bool, list]:
    """How a head's bilinear map ``sum_t w_t e_left e_right^T`` (``(left, right, w)``
    triples) is factored, in both storages: one column per distinct direction of the side
    with fewer of them (the left on ties), identity there, the weights on the other side.
    Returns ``(by_left, those directions in first-seen order)``.

    >>> factor_side([("q", "k1", 2.0), ("q", "k2", -1.0)])  # one query direction
    (True, ['q'])
    >>> factor_side([("a", "x", 1.0), ("b", "x", 1.0)])
    (False, ['x'])
    """
    if not len(terms):
        return True, []
    lefts, rights, _ = zip(*terms)
    return choose_side(lefts, rights)


def choose_side(lefts: Sequence, rights: Sequence) -> tuple[bool, list]:
    """:func:`factor_side` of the terms whose left and right directions are ``lefts`` and
    ``rights`` (the one rule both storages factor by).

    >>> choose_side([7, 7], [3, 1]), choose_side([5, 6], [2, 2])
    ((True, [7]), (False, [2]))
    """
    left, right = dict.fromkeys(lefts), dict.fromkeys(rights)  # (first-seen order)
    by_left = len(left) <= len(right)
    return by_left, list(left if by_left else right)


class HeadMaps:
    """A layer's heads as :class:`Linear` maps, head by head: the query and key factors
    (stream -> ``qk_width`` columns), the value factor (stream -> ``ov_width`` columns) and
    the output map (those columns -> the layer's written directions).

    >>> from attnsim.model.sparse import SparseHeads
    >>> w = torch.ones(1, dtype=torch.float64)
    >>> heads = SparseHeads(1, torch.tensor([[0, 1, 2]]), w, torch.tensor([[0, 3, 4]]), w)
    >>> hm = HeadMaps(heads)  # head 0: query dir 1, key dir 2; moves dir 3 into dir 4
    >>> hm.active, set(hm.reads_qk[0]), set(hm.reads_v[0]), set(hm.writes[0])
    ([0], {1, 2}, {3}, {4})
    """

    def __init__(self, heads: SparseHeads) -> None:
        self.n = heads.n_heads
        qk = _by_head(heads.qk, heads.qk_w, self.n)
        ov = _by_head(heads.ov, heads.ov_w, self.n)
        self.active = [h for h in range(self.n) if len(ov[h][0])]
        self.written = torch.unique(heads.ov[:, 2]) if len(heads.ov) else long_tensor([])
        written = self.written.cpu().numpy()  # (the maps' indices live on the CPU, as before)
        self.Q, self.K, self.V, self.O, self.O_at = {}, {}, {}, {}, {}
        shared: dict[tuple, Linear] = {}
        uses: dict[int, int] = {}
        self.qk_width, self.ov_width = {}, {}
        # what each head reads and writes, as sets (frozen: heads with the same directions
        # share one; a layer of U has thousands of heads that read the same values)
        self.reads_qk: dict[int, frozenset[int]] = {}
        self.reads_v: dict[int, frozenset[int]] = {}
        self.writes: dict[int, frozenset[int]] = {}
        sets: dict[bytes, frozenset[int]] = {}

        def one(dirs: np.ndarray) -> frozenset[int]:
            key = np.unique(dirs).tobytes()
            got = sets.get(key)
            if got is None:
                got = sets[key] = frozenset(dirs.tolist())
            return got

        for h in self.active:
            (a_d, a_c, a_w), (b_d, b_c, b_w), w = _factor_maps(*qk[h])
            self.Q[h] = Linear(_t(a_d), _t(a_c), _t(a_w), max(1, w))
            self.K[h] = Linear(_t(b_d), _t(b_c), _t(b_w), max(1, w))
            self.qk_width[h] = w
            (v_d, v_c, v_w), (o_d, o_c, o_w), w = _factor_maps(*ov[h])
            # the output factor maps destinations (its "directions") to value columns:
            # turned around, it reads value column c and writes destination d.
            # Heads that read the same values (one per column of a transpose, say) share them
            key = (v_d.tobytes(), v_c.tobytes(), v_w.tobytes())
            if key not in shared:
                shared[key] = Linear(_t(v_d), _t(v_c), _t(v_w), max(1, w))
            self.V[h] = shared[key]
            uses[id(self.V[h])] = uses.get(id(self.V[h]), 0) + 1
            mine = np.unique(o_d)  # the head's destinations (sorted), and their places
            self.O[h] = Linear(_t(o_c), _t(np.searchsorted(mine, o_d)), _t(o_w), len(mine))
            self.O_at[h] = _t(np.searchsorted(written, mine))
            self.ov_width[h] = w
            self.reads_qk[h] = one(np.concatenate([a_d, b_d]))
            self.reads_v[h] = one(v_d)
            self.writes[h] = one(mine)
        self.shared_values = {k for k, c in uses.items() if c > 1}  # value maps kept per run


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a))


def _by_head(idx: torch.Tensor, w: torch.Tensor, n: int) -> list[tuple[np.ndarray, ...]]:
    """``(left dirs, right dirs, weights)`` of each head's terms ``[head, left, right]``,
    in their order."""
    ia, wa = idx.cpu().numpy().reshape(-1, 3), w.cpu().numpy()
    order = np.argsort(ia[:, 0], kind="stable")
    ia, wa = ia[order], wa[order]
    bounds = np.searchsorted(ia[:, 0], np.arange(n + 1))
    return [(ia[s:e, 1], ia[s:e, 2], wa[s:e]) for s, e in zip(bounds[:-1], bounds[1:])]


def _factor_maps(left: np.ndarray, right: np.ndarray, w: np.ndarray):
    """A bilinear map ``sum_t w_t e_left e_right^T`` as two factors, by the rule assembly
    factors it by (:func:`choose_side`): one column per distinct direction of the side with
    fewer (the left on ties), in first-seen order, identity there and the weights on the
    other side.
    Returns ``((left dirs, cols, weights), (right dirs, cols, weights), width)``.

    >>> (l_d, l_c, l_w), (r_d, r_c, r_w), width = _factor_maps(
    ...     np.array([7, 7]), np.array([3, 1]), np.array([2.0, -1.0]))
    >>> width, l_d.tolist(), r_d.tolist(), r_c.tolist(), r_w.tolist()  # one query direction
    (1, [7], [3, 1], [0, 0], [2.0, -1.0])
    """
    by_left, ident = choose_side(left.tolist(), right.tolist())
    key, other = (left, right) if by_left else (right, left)
    place = {d: i for i, d in enumerate(ident)}
    cols = np.array([place[d] for d in key.tolist()], dtype=np.int64)
    ident = np.array(ident, dtype=np.int64)
    idf = (ident, np.arange(len(ident), dtype=np.int64), np.ones(len(ident), dtype=w.dtype))
    wf = (other, cols, w)
    return (idf, wf, len(ident)) if by_left else (wf, idf, len(ident))


class UnitMaps:
    """A kind of MLP unit as :class:`Linear` maps: inputs (and the second form), outputs.

    >>> from attnsim.model.sparse import SparseUnits
    >>> idx, w = torch.tensor([[0, 0]]), torch.tensor([2.0], dtype=torch.float64)
    >>> relu = UnitMaps(SparseUnits("relu", 1, idx, w, idx[:0], w[:0], torch.tensor([[0, 1]]), w))
    >>> x = torch.tensor([[[-1.0, 3.0]], [[0.0, 0.0]]], dtype=torch.float64)  # [dirs, 1, pos]
    >>> relu.activation(x, torch.arange(2)).flatten().tolist()  # relu(2 * x[0]) at each pos
    [0.0, 6.0]
    """

    def __init__(self, u: SparseUnits) -> None:
        self.kind, self.n = u.kind, u.n_units
        self.A = Linear(u.inputs[:, 1], u.inputs[:, 0], u.inputs_w, u.n_units)
        self.B = Linear(u.second[:, 1], u.second[:, 0], u.second_w, u.n_units)
        written = torch.unique(u.outputs[:, 1])
        self.written = written
        where = torch.full((int(written.max()) + 1 if len(written) else 1,), -1, dtype=torch.long)
        where[written] = torch.arange(len(written))
        # outputs read the units' activations (columns 0..n-1)
        self.O = Linear(u.outputs[:, 0], where[u.outputs[:, 1]], u.outputs_w, len(written))
        self.reads = set(u.inputs[:, 1].tolist()) | set(u.second[:, 1].tolist())
        self.read_dirs = torch.tensor(sorted(self.reads), dtype=torch.long)
        self.unit_reads: list[set[int]] = [set() for _ in range(u.n_units)]
        ks, ds = torch.cat([u.inputs, u.second]).T.tolist() if self.n else ([], [])
        for k, d in zip(ks, ds):
            self.unit_reads[k].add(d)

    def span(self, store) -> tuple[int, int]:
        """``(lo, hi)``: every unit is 0 outside positions ``lo .. hi - 1`` of ``store`` (a
        :class:`attnsim.model.store.Store`; ``(0, 0)`` when all are): a ReLU unit outside
        its inputs' span, a declared unit outside its gate's (the gate is 0 there, and so
        the unit, by definition), a product outside the overlap of its two factors' spans
        (one factor is 0 there) while the stream holds finite values only (0 times a
        non-finite value is NaN), else outside its factors' span.

        >>> from attnsim.model.sparse import SparseUnits
        >>> from attnsim.model.store import Store
        >>> idx, w = torch.tensor([[0, 0]]), torch.ones(1, dtype=torch.float64)
        >>> um = UnitMaps(SparseUnits("bilinear", 1, idx, w, idx + torch.tensor([0, 1]), w,
        ...                           idx + torch.tensor([0, 2]), w))  # dir 0 times dir 1
        >>> st = Store(1, 8, d=3, dtype=torch.float64, last={0: 9, 1: 9})
        >>> st.write(torch.tensor([0]), torch.ones(1, 1, 4, dtype=torch.float64), at=0)
        >>> st.write(torch.tensor([1]), torch.ones(1, 1, 4, dtype=torch.float64), at=2)
        >>> um.span(st)  # the factors overlap on positions 2 and 3
        (2, 4)
        """
        if self.kind == "relu" or (self.kind == "bilinear" and not self._bounded(store)):
            return store.span(self.read_dirs)
        lo, hi = store.span(self.B.dirs)
        if self.kind == "bilinear":
            a_lo, a_hi = store.span(self.A.dirs)
            lo, hi = max(lo, a_lo), min(hi, a_hi)
        return (lo, hi) if lo < hi else (0, 0)

    def _bounded(self, store) -> bool:
        """Whether both factors are finite wherever the store is: each is at most the sum
        of its column's |weights| times the largest |value| written (a sum of finite values
        may overflow, ``3 * 1e308``, and 0 times that is NaN)."""
        top = max(self.A.gain(), self.B.gain()) * store.top
        return top <= torch.finfo(store.dtype).max / 2

    def activation(self, x: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
        a = self.A(x, slot)
        if self.kind == "relu":
            return torch.relu(a)
        b = self.B(x, slot)
        if self.kind == "bilinear":
            return a * b
        f = torch.where(b != 0, NATIVE_FUNCTIONS[self.kind](a), torch.zeros_like(a))
        return f * b


def check_groups_apart(layer: int, ums: Sequence[UnitMaps]) -> None:
    """Refuses an MLP whose unit groups (which sparse storage runs one after the other,
    each added to the stream) read what an earlier group writes: the definition's units
    all read the stream before the MLP.

    >>> from attnsim.model.sparse_layers import SparseUnits
    >>> idx, w = torch.tensor([[0, 0]]), torch.ones(1, dtype=torch.float64)
    >>> a = UnitMaps(SparseUnits("relu", 1, idx, w, idx[:0], w[:0], torch.tensor([[0, 1]]), w))
    >>> reads_1, writes_2 = torch.tensor([[0, 1]]), torch.tensor([[0, 2]])  # (unit, direction)
    >>> b = UnitMaps(SparseUnits("relu", 1, reads_1, w, idx[:0], w[:0], writes_2, w))
    >>> check_groups_apart(0, [a, b])  # b reads direction 1, which a writes
    Traceback (most recent call last):
    ...
    ValueError: layer 0's relu units read directions its other units write ([1]): an MLP ...
    """
    written: set = set()
    for um in ums:
        if um.reads & written:
            raise ValueError(
                f"layer {layer}'s {um.kind} units read directions its other units write "
                f"({sorted(um.reads & written)[:5]}): an MLP reads the stream before it, "
                "which sparse storage keeps only where no unit reads another's output; "
                "compile with storage='dense'"
            )
        written |= set(um.written.tolist())


def unit_output(um: UnitMaps, x: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
    """The units' summed output ``[written, batch, pos]`` on the stream ``x``; in a batch
    of several sequences, where the rows of the directions they read repeat (a categorical
    map's few one-hot inputs), once per distinct row
    (:func:`attnsim.model.plan_core.repeated_rows`), each row's terms summed as on the
    whole stream. (One long sequence, U's, reads real-valued rows that rarely repeat:
    looking would cost a pass over them.)

    >>> from attnsim.model.sparse import SparseUnits
    >>> idx, w = torch.tensor([[0, 0]]), torch.tensor([2.0], dtype=torch.float64)
    >>> um = UnitMaps(SparseUnits("relu", 1, idx, w, idx[:0], w[:0], torch.tensor([[0, 1]]), w))
    >>> x = torch.tensor([[-1.0, 3.0] * 200, [0.0, 0.0] * 200], dtype=torch.float64)
    >>> x = x.view(2, 2, 200)  # [dirs, batch, pos]
    >>> unit_output(um, x, torch.arange(2))[0, 0, :4].tolist()  # 2 relu(2 x) at each position
    [0.0, 12.0, 0.0, 12.0]
    """
    _, b, n = x.shape
    if b == 1:
        return um.O(um.activation(x, slot), torch.arange(um.n))
    reads = getattr(um, "_reads", None)
    if reads is None:  # the directions read, and a slot map onto rows 1.. of a small store
        dirs = torch.tensor(sorted(um.reads), dtype=torch.long)
        local = torch.zeros(slot.shape[0], dtype=torch.long)
        local[dirs] = torch.arange(1, len(dirs) + 1)
        reads = um._reads = (dirs, local)
    dirs, local = reads
    work = len(um.A.dirs) + len(um.B.dirs) + len(um.O.dirs)
    grouped = plan_core.repeated_rows(
        b * n, lambda: x[slot[dirs]].reshape(len(dirs), b * n).T, um, work
    )
    if grouped is None:
        return um.O(um.activation(x, slot), torch.arange(um.n))
    rows, inverse = grouped  # [distinct, len(dirs)]
    small = torch.cat([torch.zeros(1, rows.shape[0], dtype=x.dtype), rows.T])[:, None]
    out = um.O(um.activation(small, local), torch.arange(um.n))  # [written, 1, distinct]
    return out[:, 0, inverse].view(-1, b, n)


def distinct_nonzero(lins: Sequence[Linear]) -> int:
    """Distinct (map, direction, column) cells with a non-zero summed weight, over several
    maps (one pass over all their terms).

    >>> lin = Linear(torch.tensor([0, 0, 1]), torch.tensor([0, 0, 1]),
    ...              torch.tensor([1.0, -1.0, 2.0], dtype=torch.float64), 2)
    >>> distinct_nonzero([lin])  # the two terms of cell (0, 0) cancel
    1
    >>> distinct_nonzero([lin, lin])  # a map listed twice is counted twice
    2
    """
    lins = [lin for lin in lins if len(lin.dirs)]
    if not lins:
        return 0
    dirs = torch.cat([lin.dirs.cpu() for lin in lins])
    cols = torch.cat([lin.cols.cpu() for lin in lins])
    weight = torch.cat([lin.weight.cpu() for lin in lins])
    sizes = torch.tensor([len(lin.dirs) for lin in lins])
    which = torch.repeat_interleave(torch.arange(len(lins)), sizes)
    cell = dirs * (int(cols.max()) + 1) + cols
    # sorted by (map, cell), each cell's terms in their order (two stable sorts)
    order = torch.argsort(cell, stable=True)
    order = order[torch.argsort(which[order], stable=True)]
    cell, which = cell[order], which[order]
    new = torch.ones(len(cell), dtype=torch.bool)
    new[1:] = (cell[1:] != cell[:-1]) | (which[1:] != which[:-1])
    inv = torch.cumsum(new, 0) - 1
    sums = torch.zeros(int(new.sum()), dtype=weight.dtype).index_add_(0, inv, weight[order])
    return int((sums != 0).sum())


def unit_writes(um: UnitMaps, units: list[int]) -> set[int]:
    """The directions the given units (indices in ``um``) write.

    >>> from attnsim.model.sparse import SparseUnits
    >>> idx, w = torch.tensor([[0, 0], [1, 0]]), torch.ones(2, dtype=torch.float64)
    >>> out = torch.tensor([[0, 5], [1, 6]])
    >>> um = UnitMaps(SparseUnits("relu", 2, idx, w, idx[:0], w[:0], out, w))
    >>> unit_writes(um, [1])
    {6}
    """
    sel = torch.isin(um.O.dirs, long_tensor(units))
    return set(um.written[um.O.cols[sel]].tolist())


def rows_last(t: torch.Tensor) -> torch.Tensor:
    """``[width, batch, pos]`` -> ``[batch, pos, width]`` (a view).

    >>> rows_last(torch.zeros(3, 1, 2)).shape
    torch.Size([1, 2, 3])
    """
    return t.permute(1, 2, 0)


def split_qk(hm: HeadMaps, h: int, x, slot, mask):
    """Head h's queries and keys, each as (the terms that read static directions, the
    others): ``q_s, q_d, k_s, k_d [batch, pos, width]``, column-major like the stream
    (``[width, batch, pos]``); ``q_s + q_d`` are the head's queries.

    >>> from attnsim.model.sparse import SparseHeads
    >>> w = torch.ones(2, dtype=torch.float64)
    >>> hm = HeadMaps(SparseHeads(1, torch.tensor([[0, 0, 1], [0, 2, 1]]), w,
    ...                           torch.tensor([[0, 1, 3]]), w[:1]))
    >>> x = torch.tensor([5.0, 7.0, 11.0, 0.0], dtype=torch.float64)[:, None, None]
    >>> static = torch.tensor([True, True, False, False])  # directions 0 and 1
    >>> q_s, q_d, k_s, k_d = split_qk(hm, 0, x, torch.arange(4), static)
    >>> q_s.flatten().tolist(), q_d.flatten().tolist(), k_s.flatten().tolist()
    ([5.0], [11.0], [7.0])
    """
    parts = []
    for lin in (hm.Q[h], hm.K[h]):
        st = mask[lin.dirs]
        for m in (st, ~st):
            parts.append(Linear(lin.dirs[m], lin.cols[m], lin.weight[m], lin.width)(x, slot))
    return tuple(parts)


def dense_of(sp):
    """The dense :class:`Transformer` holding a sparse model's weights (assembly's
    factorisation).

    >>> from attnsim import compile_program, library
    >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=3, storage="sparse")
    >>> ids, vals = m.encode(["aba"])
    >>> bool(torch.allclose(dense_of(m.model)(ids, vals), m.model(ids, vals)))
    True
    """
    model = Transformer(sp.cfg)
    e = sp.embed
    dt = model.dtype
    with torch.no_grad():
        E = e["E"]
        model.W_E[E[:, 0], E[:, 1]] = e["E_w"].to(dt)
        model.W_E_num[e["num"]] = e["num_w"].to(dt)
        if sp.cfg.token_width:
            model.W_E_vec[e["vec"][:, 0], e["vec"][:, 1]] = e["vec_w"].to(dt)
        cols = sp.position_rows(torch.arange(len(e["pos_dirs"])), sp.cfg.n_ctx)
        model.W_pos[:, e["pos_dirs"]] = cols.T.to(dt)
        for li, (hm, block) in enumerate(zip(sp._heads, model.blocks)):
            a = block.attn
            for h in hm.active:
                for lin, W in ((hm.Q[h], a.W_Q), (hm.K[h], a.W_K), (hm.V[h], a.W_V)):
                    W[h].index_put_((lin.dirs, lin.cols), lin.weight.to(dt), accumulate=True)
                o = hm.O[h]
                dst = hm.written[hm.O_at[h][o.cols]]
                a.W_O[h].index_put_((o.dirs, dst), o.weight.to(dt), accumulate=True)
            m = block.mlp
            for um in sp._units[li]:
                if um.kind == "relu":
                    names = ("W_in", None, "W_out")
                elif um.kind == "bilinear":
                    names = ("W_bil_a", "W_bil_b", "W_bil_out")
                else:
                    names = tuple(f"W_{um.kind}_{p}" for p in ("in", "gate", "out"))
                parts = [(names[0], um.A.dirs, um.A.cols, um.A.weight)]
                if names[1] is not None:
                    parts.append((names[1], um.B.dirs, um.B.cols, um.B.weight))
                parts.append((names[2], um.O.dirs, um.written[um.O.cols], um.O.weight))
                for name, r, c, w in parts:
                    getattr(m, name).index_put_((r, c), w.to(dt), accumulate=True)
    return model


def static_reads(um: UnitMaps):
    """``reads(static)`` of :func:`attnsim.model.plan_static.static_flow` for the units of
    ``um``: ``[units]`` bool, those that read static directions only."""

    def reads(static: torch.Tensor) -> torch.Tensor:
        on = static.tolist()
        return torch.tensor([all(on[c] for c in r) for r in um.unit_reads], dtype=torch.bool)

    return reads


def writes_of(um: UnitMaps):
    """``writes(units)`` of :func:`attnsim.model.plan_static.static_flow` for ``um``."""
    return lambda units: torch.tensor(sorted(unit_writes(um, units.tolist())), dtype=torch.long)
