"""The live columns of a sparse model's stream (see :class:`Store`)."""

from __future__ import annotations

import torch

from attnsim.model import zero_rows

__all__ = ["Store", "PAGED_ROW_VALUES", "PAGED_STORE_BYTES"]

# a store whose rows would take at least PAGED_STORE_BYTES, each row at least
# PAGED_ROW_VALUES values (batch x positions), lives in pages (zero_rows): it then takes
# memory only where writes are non-zero, at the cost of a page fault per page a row takes
# again (a smaller store is faster as plain memory)
PAGED_ROW_VALUES = 1 << 13
PAGED_STORE_BYTES = 2 << 30


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
        # long rows live in pages (zero_rows): untouched and released rows take no memory,
        # and a write touches only the span where it is non-zero
        size = max(2, size)
        full = size * b * n * torch.empty((), dtype=dtype).element_size()
        self.paged = zero_rows.PAGED and b * n >= PAGED_ROW_VALUES and full >= PAGED_STORE_BYTES
        self.data = self._alloc(size)  # rows from the start (a run knows its peak)
        self.free: list[int] = list(range(self.data.shape[0] - 1, 0, -1))
        self.by_stage: dict[int, list[int]] = {}
        self.peak = 1

    def _alloc(self, size: int) -> torch.Tensor:
        """``size`` rows, row 0 (and in pages, every row) zero."""
        if self.paged:
            self._rows = zero_rows.ZeroRows(size, (self.b, self.n), self.dtype)
            return self._rows.tensor
        data = torch.empty(size, self.b, self.n, dtype=self.dtype)  # a row is zeroed when
        data[0] = 0.0  # taken: the pages of rows never taken are never touched
        return data

    def write(self, dirs: torch.Tensor, values: torch.Tensor) -> None:
        """Adds ``values [len(dirs), batch, pos]`` to the directions ``dirs`` (distinct);
        a direction nothing reads later is dropped."""
        keep = [i for i, c in enumerate(dirs.tolist()) if c in self.last]
        if not keep:
            return
        if len(keep) < len(dirs):
            dirs, values = dirs[keep], values[keep]
        new = [c for c in dirs.tolist() if int(self.slot[c]) == 0]
        if new:
            self._grow(len(new))
            slots = [self.free.pop() for _ in new]
            self.slot[new] = torch.as_tensor(slots, dtype=torch.long)
            if not self.paged:  # (free rows in pages are zero already)
                self.data[slots] = 0.0
            for c in new:
                self.by_stage.setdefault(self.last[c], []).append(c)
            self.peak = max(self.peak, self.data.shape[0] - len(self.free))
        rows = self.slot[dirs]
        if self.paged:  # only the positions where something is added
            at = torch.nonzero(values.ne(0).flatten(0, 1).any(0)).flatten()
            if not len(at):
                return
            lo, hi = int(at[0]), int(at[-1]) + 1
            if hi - lo < self.n:
                self.data[:, :, lo:hi].index_put_((rows,), values[:, :, lo:hi], accumulate=True)
                return
        self.data.index_put_((rows,), values, accumulate=True)

    def _grow(self, k: int) -> None:
        if len(self.free) >= k:
            return
        old = self.data.shape[0]
        size = max(old * 2, old + k - len(self.free) + 64)
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
            if self.paged:  # back to zero, their pages to the system
                self._rows.clear(rows)
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
        if self.paged:  # (otherwise a row is zeroed when taken)
            self._rows.clear(rows)
        self.free.extend(rows)
        self.slot[dirs] = 0

    def read(self, cols: torch.Tensor) -> torch.Tensor:
        """``[len(cols), batch, pos]`` (0 for a direction that holds nothing)."""
        return self.data[self.slot[cols]]
