"""The live columns of a sparse model's stream (see :class:`Store`)."""

from __future__ import annotations

import torch

from attnsim.model import zero_rows
from attnsim.model.block_rows import BlockRows
from attnsim.model.costs import BLOCKED_ROW_VALUES, BLOCKED_STORE_BYTES

__all__ = ["Store", "BLOCKED_ROW_VALUES", "BLOCKED_STORE_BYTES"]


class Store:
    """The live columns of the stream, column-major: ``data [slots, batch, pos]``,
    direction d in row ``slot[d]``; row 0 always holds 0 (directions that hold nothing read
    it). A direction gets a row when first written and gives it back once the stage
    ``last[d]`` has run.

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
        self.free: list[int] = list(range(self.data.shape[0] - 1, 0, -1))
        self.by_stage: dict[int, list[int]] = {}
        self.peak = 1

    def _alloc(self, size: int) -> torch.Tensor:
        """``size`` rows, row 0 (and in blocks, every row) zero."""
        if self.blocked:
            return BlockRows(size, self.b, self.n, self.dtype)
        data = torch.empty(size, self.b, self.n, dtype=self.dtype)  # a row is written whole
        data[0] = 0.0  # when taken: the pages of rows never taken are never touched
        return data

    def write(self, dirs: torch.Tensor, values: torch.Tensor) -> None:
        """Adds ``values [len(dirs), batch, pos]`` to the directions ``dirs`` (distinct);
        a direction nothing reads later is dropped."""
        listed = dirs.tolist()
        keep = [i for i, c in enumerate(listed) if c in self.last]
        if not keep:
            return
        if len(keep) < len(dirs):
            dirs, values = dirs[keep], values[keep]
            listed = [listed[i] for i in keep]
        new = self.take(listed)
        rows = self.slot[dirs]
        if self.blocked:  # only the blocks where something is added (free blocks are 0)
            self.data.add(rows, values)
            return
        if len(new) == len(listed):  # every row new: the values are the rows (0 + v = v;
            self.data[rows] = values  # a -0.0 stays -0.0, equal to the sum's +0.0)
            return
        if new:  # the new rows take their values, the others add them
            fresh = torch.as_tensor(new, dtype=torch.long)
            self.data[rows[fresh]] = values[fresh]
            old = torch.as_tensor(sorted(set(range(len(listed))) - set(new)), dtype=torch.long)
            rows, values = rows[old], values[old]
        self.data.index_put_((rows,), values, accumulate=True)

    def take(self, dirs: list[int]) -> list[int]:
        """Gives a row to each of ``dirs`` (distinct, each read later) that holds none yet;
        returns their places in ``dirs``. A new row's content is undefined in a store of one
        tensor (its writer sets all of it) and zero in blocks.

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
            self.free = list(range(size - 1, old - 1, -1)) + self.free
            return
        before = self.data
        data = self._alloc(size)
        taken = self.slot[self.slot > 0]  # the rows in use (free rows are zero or unused)
        data[taken] = before[taken]
        self.data = data
        self.free = list(range(size - 1, old - 1, -1)) + self.free

    def release(self, stage: int) -> None:
        """Frees the rows of the directions whose last reader ran before this stage."""
        for s in [s for s in self.by_stage if s < stage]:
            dirs = self.by_stage.pop(s)
            rows = self.slot[dirs].tolist()
            if self.blocked:  # back to zero, their blocks to the free list
                self.data.clear(rows)
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
        if self.blocked:  # (otherwise a row is zeroed when taken)
            self.data.clear(rows)
        self.free.extend(rows)
        self.slot[dirs] = 0

    def read(self, cols: torch.Tensor) -> torch.Tensor:
        """``[len(cols), batch, pos]`` (0 for a direction that holds nothing)."""
        return self.data[self.slot[cols]]

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
