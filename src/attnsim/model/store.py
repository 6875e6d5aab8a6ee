"""The live columns of a sparse model's stream (see :class:`Store`)."""

from __future__ import annotations

import math

import numpy as np
import torch

from attnsim.model import zero_rows
from attnsim.model.block_rows import BlockRows
from attnsim.model.costs import BLOCKED_ROW_VALUES, BLOCKED_STORE_BYTES

__all__ = ["Store", "BLOCKED_ROW_VALUES", "BLOCKED_STORE_BYTES"]


def _add_rows(window: torch.Tensor, rows, values, fresh) -> None:
    """Adds ``values`` to ``window[rows]`` (a view of the store's rows): a new row (``fresh``,
    0 before) takes the values (0 + v = v; a -0.0 stays -0.0, equal to the sum's +0.0)."""
    if len(rows) == 1:  # one row: a slice, no index
        row = window[int(rows[0])]
        row.copy_(values[0]) if bool(fresh[0]) else row.add_(values[0])
        return
    if bool(fresh.all()):
        window[rows] = values
    elif not bool(fresh.any()):
        window.index_put_((rows,), values, accumulate=True)
    else:
        window[rows[fresh]] = values[fresh]
        window.index_put_((rows[~fresh],), values[~fresh], accumulate=True)


class _Window:
    """Rows in blocks on positions ``lo .. hi - 1``, read like a tensor where the sparse
    maps need it: ``w[idx]`` (rows ``idx``), ``shape``, ``dtype``, ``element_size()``."""

    def __init__(self, data: BlockRows, lo: int, hi: int) -> None:
        self.data, self.lo, self.hi = data, lo, hi
        self.shape = torch.Size((data.shape[0], data.shape[1], hi - lo))
        self.dtype = data.dtype

    def __getitem__(self, idx: torch.Tensor) -> torch.Tensor:
        return self.data.window(idx, self.lo, self.hi)

    def element_size(self) -> int:
        return self.data.element_size()


class Store:
    """The live columns of the stream, column-major: ``data [slots, batch, pos]``,
    direction d in row ``slot[d]``; row 0 always holds 0 (directions that hold nothing read
    it). A direction gets a row when first written and gives it back once the stage
    ``last[d]`` has run.

    Each row is 0 outside its **span**, the positions ``lo[row] <= p < hi[row]`` its writes
    reached (a write keeps only the positions from its first to its last non-zero value,
    and a released row is zeroed there): most of U's rows are non-zero on a few positions
    of thousands, so a sublayer reads, computes and writes on the span of the rows it reads
    (:meth:`span`, :meth:`view`), not on every position. Rows in blocks
    (:class:`~attnsim.model.block_rows.BlockRows`) keep spans the same way (a read of a
    span reads its blocks only).

    >>> st = Store(1, 2, d=3, dtype=torch.float64, last={0: 1, 2: 3})
    >>> st.write(torch.tensor([0, 1, 2]), torch.ones(3, 1, 2, dtype=torch.float64))
    >>> st.read(torch.tensor([0, 1, 2]))[:, 0, 0].tolist()  # nobody reads direction 1
    [1.0, 0.0, 1.0]
    >>> st.release(2); st.read(torch.tensor([0, 2]))[:, 0, 0].tolist()  # 0 was last read at 1
    [0.0, 1.0]
    """

    def __init__(self, b: int, n: int, d: int, dtype, last: dict[int, int], size: int = 64) -> None:
        self.b, self.n, self.dtype = b, n, dtype
        self.last = last
        self.slot = torch.zeros(d, dtype=torch.long)
        # long rows live in blocks (block_rows): untouched and released rows take no
        # memory, and a write takes blocks only where it is non-zero
        size = max(2, size)
        full = size * b * n * torch.empty((), dtype=dtype).element_size()
        self.blocked = b * n >= BLOCKED_ROW_VALUES and full >= BLOCKED_STORE_BYTES
        self.data = self._alloc(size)  # rows from the start (a run knows its peak)
        self.top = 0.0  # the largest |value| written so far, inf once one is not finite
        self.lo = np.zeros(self.data.shape[0], dtype=np.int64)  # each row's span
        self.hi = np.zeros(self.data.shape[0], dtype=np.int64)
        self.free: list[int] = list(range(self.data.shape[0] - 1, 0, -1))
        self.by_stage: dict[int, list[int]] = {}
        self.peak = 1

    @property
    def finite(self) -> bool:
        """Whether every value written so far is finite."""
        return math.isfinite(self.top)

    def _alloc(self, size: int) -> torch.Tensor:
        """``size`` rows of zeros (zeroed at once, in large pages: fresh zero pages faulted
        in one by one cost up to half the pass of a small U, measured at U(64, 64, 1); the
        rows are zeroed whether or not a run takes them all)."""
        if self.blocked:
            return BlockRows(size, self.b, self.n, self.dtype)
        return torch.zeros((size, self.b, self.n), dtype=self.dtype)

    def span(self, dirs: torch.Tensor) -> tuple[int, int]:
        """``(lo, hi)``: every row of ``dirs`` is 0 outside positions ``lo .. hi - 1``
        (``(0, 0)`` when all are 0).

        >>> st = Store(1, 6, d=3, dtype=torch.float64, last={0: 1, 1: 1})
        >>> st.write(torch.tensor([0]), torch.tensor([[[0.0, 2.0, 0.0, 3.0, 0.0, 0.0]]]).double())
        >>> st.span(torch.tensor([0])), st.span(torch.tensor([1])), st.span(torch.tensor([0, 1]))
        ((1, 4), (0, 0), (1, 4))
        """
        rows = self.slot[dirs].numpy()
        lo, hi = self.lo[rows], self.hi[rows]
        live = hi > lo
        if not live.any():
            return 0, 0
        return int(lo[live].min()), int(hi[live].max())

    def view(self, lo: int, hi: int) -> torch.Tensor:
        """The rows on positions ``lo .. hi - 1``, indexed by row as the store's data: a
        view ``[slots, batch, hi - lo]`` (for rows in blocks, an object whose ``[rows]``
        reads only the blocks there).

        >>> st = Store(1, 6, d=2, dtype=torch.float64, last={0: 1})
        >>> st.write(torch.tensor([0]), torch.tensor([[[5.0, 7.0]]], dtype=torch.float64), at=3)
        >>> st.view(*st.span(torch.tensor([0])))[st.slot[torch.tensor([0])]].flatten().tolist()
        [5.0, 7.0]
        """
        if lo == 0 and hi == self.n:
            return self.data
        if self.blocked:
            return _Window(self.data, lo, hi)
        return self.data[:, :, lo:hi]

    def write(self, dirs: torch.Tensor, values: torch.Tensor, at: int = 0) -> None:
        """Adds ``values [len(dirs), batch, w]`` to the directions ``dirs`` (distinct) on
        positions ``at .. at + w - 1`` (0 elsewhere); a direction nothing reads later is
        dropped, and only the positions from the first to the last non-zero value are
        written (a write of zeros takes no row).

        >>> st = Store(1, 5, d=2, dtype=torch.float64, last={0: 1, 1: 1})
        >>> v = torch.tensor([[[1.0, 0.0]], [[0.0, 0.0]]], dtype=torch.float64)
        >>> st.write(torch.tensor([0, 1]), v, at=2)
        >>> st.read(torch.tensor([0, 1]))[:, 0].tolist(), int(st.slot[1])  # 1 takes no row
        ([[0.0, 0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]], 0)
        """
        k, b, w = values.shape if values.dim() == 3 else (-1, -1, -1)
        if k != len(dirs) or b != self.b or at < 0 or at + w > self.n:
            raise ValueError(
                f"Store.write: values must be [len(dirs), batch, w] = [{len(dirs)}, {self.b}, "
                f"w] on positions at .. at + w - 1 inside 0 .. {self.n - 1}; got "
                f"{list(values.shape)} at {at}: pass one row of values per direction, over "
                "positions of this stream"
            )
        listed = dirs.tolist()
        keep = [i for i, c in enumerate(listed) if c in self.last]
        if not keep:
            return
        if len(keep) < len(dirs):
            dirs, values = dirs[keep], values[keep]
            listed = [listed[i] for i in keep]
        nz = values.ne(0)  # (a NaN counts)
        nz = (nz[:, 0] if nz.shape[1] == 1 else nz.any(1)).view(torch.uint8)  # [rows, pos]
        hit, first = nz.max(1)  # each row's span: its first to its last non-zero value
        if not bool(hit.all()):  # rows of zeros: left as they are (no row, or 0 added)
            if not bool(hit.any()):
                return
            idx = torch.nonzero(hit).flatten()
            dirs, values, nz, first = dirs[idx], values[idx], nz[idx], first[idx]
            listed = [listed[i] for i in idx.tolist()]
        if self.finite:  # (see UnitMaps.span)
            low, high = (float(v) for v in torch.aminmax(values))
            top = max(-low, high)
            self.top = max(self.top, top) if math.isfinite(top) else math.inf
        w = values.shape[2]
        end = w - nz.flip(1).argmax(1)
        fresh = torch.zeros(len(listed), dtype=torch.bool)
        fresh[self.take(listed)] = True
        rows = self.slot[dirs]
        a, z = int(first.min()), int(end.max())  # one write over the rows' spans
        if self.blocked:  # (only the non-zero blocks are written)
            self.data.add(rows, values[:, :, a:z], at + a, nz[:, a:z])
        else:  # (zeros between a row's span and the others' are added as zeros)
            _add_rows(self.data[:, :, at + a : at + z], rows, values[:, :, a:z], fresh)
        r, f = rows.numpy(), fresh.numpy()
        a, z = first.numpy() + at, end.numpy() + at
        self.lo[r] = np.where(f, a, np.minimum(self.lo[r], a))
        self.hi[r] = np.where(f, z, np.maximum(self.hi[r], z))

    def take(self, dirs: list[int]) -> list[int]:
        """Gives a row to each of ``dirs`` (distinct, each read later) that holds none yet;
        returns their places in ``dirs``. A new row is zero.

        >>> st = Store(1, 2, d=3, dtype=torch.float64, last={0: 4, 1: 4})
        >>> st.write(torch.tensor([0]), torch.ones(1, 1, 2, dtype=torch.float64))
        >>> st.take([0, 1]), bool(st.slot[1] > 0)  # direction 0 holds a row already
        ([1], True)
        """
        held = self.slot[dirs].tolist()
        new = [i for i, at in enumerate(held) if at == 0]
        if new:
            self._grow(len(new))
            slots = [self.free.pop() for _ in new]
            self.slot[[dirs[i] for i in new]] = torch.as_tensor(slots, dtype=torch.long)
            for i in new:
                self.by_stage.setdefault(self.last[dirs[i]], []).append(dirs[i])
            self.peak = max(self.peak, self.data.shape[0] - len(self.free))
        return new

    def _grow(self, k: int) -> None:
        if len(self.free) >= k:
            return
        old = self.data.shape[0]
        size = max(old * 2, old + k - len(self.free) + 64)
        if self.blocked:
            self.data.grow_rows(size)
            self._grow_spans(size)
            self.free = list(range(size - 1, old - 1, -1)) + self.free
            return
        before = self.data
        data = self._alloc(size)
        taken = self.slot[self.slot > 0]  # the rows in use (free rows are zero)
        data[taken] = before[taken]
        self.data = data
        self._grow_spans(size)
        self.free = list(range(size - 1, old - 1, -1)) + self.free

    def _grow_spans(self, size: int) -> None:
        more = np.zeros(size - len(self.lo), dtype=np.int64)
        self.lo, self.hi = np.concatenate([self.lo, more]), np.concatenate([self.hi, more])

    def _clear(self, rows: list[int]) -> None:
        """Zeroes these rows (on their spans; in blocks, their blocks go back)."""
        if self.blocked:
            self.data.clear(rows)
        elif rows:
            idx = np.asarray(rows, dtype=np.int64)
            spans, group = np.unique(
                self.lo[idx] * (self.n + 1) + self.hi[idx], return_inverse=True
            )
            for g, key in enumerate(spans.tolist()):  # the rows of one span at a time
                a, z = divmod(key, self.n + 1)
                if z > a:
                    same = idx if len(spans) == 1 else idx[group.reshape(-1) == g]
                    self.data[:, :, a:z].index_fill_(0, torch.from_numpy(same), 0.0)
        self.lo[rows] = 0
        self.hi[rows] = 0

    def release(self, stage: int) -> None:
        """Frees the rows of the directions whose last reader ran before this stage."""
        for s in [s for s in self.by_stage if s < stage]:
            dirs = self.by_stage.pop(s)
            rows = self.slot[dirs].tolist()
            self._clear(rows)  # back to zero
            self.free.extend(rows)
            self.slot[dirs] = 0

    def drop(self, dirs: list[int]) -> None:
        """Frees these directions' rows now (nothing reads them again); a direction that
        holds no row is skipped.

        >>> st = Store(1, 2, d=3, dtype=torch.float64, last={0: 5, 1: 5})
        >>> st.write(torch.tensor([0, 1]), torch.ones(2, 1, 2, dtype=torch.float64))
        >>> st.drop([0, 2]); st.read(torch.tensor([0, 1]))[:, 0, 0].tolist()
        [0.0, 1.0]
        """
        dirs = [c for c in dirs if int(self.slot[c])]
        gone = set(dirs)
        for s in {self.last[c] for c in dirs}:
            self.by_stage[s] = [c for c in self.by_stage[s] if c not in gone]
        rows = self.slot[dirs].tolist()
        self._clear(rows)
        self.free.extend(rows)
        self.slot[dirs] = 0

    def read(self, cols: torch.Tensor) -> torch.Tensor:
        """``[len(cols), batch, pos]`` (0 for a direction that holds nothing), read on the
        span of these rows."""
        lo, hi = self.span(cols)
        if lo == 0 and hi == self.n:
            return self.data[self.slot[cols]]
        out = torch.zeros(len(cols), self.b, self.n, dtype=self.dtype)
        if hi > lo:
            out[:, :, lo:hi] = self.view(lo, hi)[self.slot[cols]]
        return out

    def live_rows(self) -> torch.Tensor:
        """The rows in use now (row 0 excluded).

        >>> st = Store(1, 2, d=3, dtype=torch.float64, last={0: 1, 2: 1})
        >>> st.write(torch.tensor([0, 2]), torch.ones(2, 1, 2, dtype=torch.float64))
        >>> len(st.live_rows()), st.resident_mb() >= 0
        (2, True)
        """
        free = torch.zeros(self.data.shape[0], dtype=torch.bool)
        free[[0, *self.free]] = True
        return torch.nonzero(~free).flatten()

    def resident_mb(self) -> float:
        """MB of memory the rows take now: the blocks in use (blocked), or the pages of
        the rows' tensor that are resident."""
        if self.blocked:
            return self.data.resident_mb()
        return zero_rows.resident_mb(self.data)
