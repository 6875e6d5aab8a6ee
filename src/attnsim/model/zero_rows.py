"""Rows of zeros that take memory only where something non-zero was written.

The sparse model's stream (:class:`~attnsim.model.sparse_ops.Store`) keeps each live
direction as one row over every position. In the universal simulator most rows are zero at
most positions: a direction of the row-wise work (``X(i)``) is non-zero at n positions of a
few hundred thousand, a token channel only where the input regions are. :class:`ZeroRows`
puts such rows in anonymous private pages: a page nobody writes stays the system's shared
zero page (no memory), and :meth:`ZeroRows.clear` hands a row's whole pages back (they read
0 again), zeroing only its partial pages at either end. The store writes only the span of
positions where a write is non-zero, so the resident memory follows the non-zero spans of
the live rows, not rows times positions.

Where the system has no anonymous mappings with ``madvise`` (not Linux), the rows are an
ordinary zero-filled tensor, cleared by writing zeros: the same values, without the saving.

>>> import torch
>>> z = ZeroRows(3, (2, 5), torch.float64)
>>> z.tensor[1] += 7.0
>>> z.clear([1]); float(z.tensor.abs().sum())
0.0
>>> z.tensor.shape
torch.Size([3, 2, 5])
"""

from __future__ import annotations

import math
import mmap
from pathlib import Path

import torch

__all__ = ["ZeroRows", "PAGED", "zeros", "copy_written", "resident_mb"]

# whether this system can hand pages back (anonymous private mappings and madvise)
PAGED = hasattr(mmap, "MAP_ANONYMOUS") and hasattr(mmap, "MADV_DONTNEED")


class ZeroRows:
    """A zero-filled ``[rows, *row_shape]`` tensor (``tensor``) whose rows can be cleared
    and their memory handed back (see the module docstring).

    Args:
        rows: how many rows.
        row_shape: the shape of one row.
        dtype: a floating dtype.
        paged: use anonymous pages (default: where the system has them).
    """

    def __init__(self, rows: int, row_shape: tuple[int, ...], dtype, paged: bool | None = None):
        self.row_elems = math.prod(row_shape)
        self.item = torch.empty((), dtype=dtype).element_size()
        self.paged = PAGED if paged is None else paged and PAGED
        count = rows * self.row_elems
        if self.paged:
            size = max(count * self.item, mmap.PAGESIZE)
            self._map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            if hasattr(mmap, "MADV_NOHUGEPAGE"):  # whole huge pages would defeat the spans
                self._map.madvise(mmap.MADV_NOHUGEPAGE)
            flat = torch.frombuffer(self._map, dtype=dtype, count=size // self.item)
            self.tensor = flat[:count].view(rows, *row_shape)
        else:
            self.tensor = torch.zeros(rows, *row_shape, dtype=dtype)

    def clear(self, rows: list[int]) -> None:
        """Sets these rows to 0; their whole pages go back to the system."""
        flat = self.tensor.view(-1)
        for lo, hi in _runs(sorted(rows)):  # consecutive rows: one range
            start, end = lo * self.row_elems * self.item, hi * self.row_elems * self.item
            if not self.paged:
                flat[start // self.item : end // self.item] = 0.0
                continue
            page = mmap.PAGESIZE
            a0, a1 = -(-start // page) * page, end // page * page
            if a1 <= a0:  # within one or two pages: write the zeros
                flat[start // self.item : end // self.item] = 0.0
                continue
            self._map.madvise(mmap.MADV_DONTNEED, a0, a1 - a0)
            flat[start // self.item : a0 // self.item] = 0.0
            flat[a1 // self.item : end // self.item] = 0.0


def zeros(shape: tuple[int, ...], dtype) -> torch.Tensor:
    """A zero tensor whose pages take memory only where something is written (in
    :class:`ZeroRows`; an ordinary ``torch.zeros`` below a megabyte).

    >>> zeros((3, 4096), torch.float64).sum().item()
    0.0
    """
    item = torch.empty((), dtype=dtype).element_size()
    if not PAGED or math.prod(shape) * item < 1 << 20:
        return torch.zeros(shape, dtype=dtype)
    return ZeroRows(shape[0], tuple(shape[1:]), dtype).tensor


def copy_written(dst: torch.Tensor, src: torch.Tensor, step: int = 4096) -> None:
    """``dst[:, :m] = src[:, :m]`` (``[batch, pos, ...]``), where past ``m`` ``src`` is 0 and
    ``dst`` is already 0: the zero tail is neither copied nor touched.

    >>> src = torch.zeros(1, 5, 2); src[0, 1, 0] = 3.0
    >>> dst = torch.zeros(1, 5, 2); copy_written(dst, src, step=2); dst[0, :, 0].tolist()
    [0.0, 3.0, 0.0, 0.0, 0.0]
    """
    m = src.shape[1]
    while m > 0 and not bool(src[:, max(0, m - step) : m].ne(0).any()):
        m = max(0, m - step)  # a zero chunk at the end
    dst[:, :m] = src[:, :m]


def resident_mb(t: torch.Tensor) -> float:
    """MB of the pages of ``t``'s memory mapping that are resident (Linux smaps; the
    tensor's whole size where there is none). For a tensor of :class:`ZeroRows` that is
    the pages its writes took.

    >>> z = ZeroRows(64, (4096,), torch.float64)
    >>> z.tensor[3, :10] = 1.0
    >>> resident_mb(z.tensor) < 1.0 if PAGED else True  # one page of 2 MiB of rows
    True
    """
    ptr = t.data_ptr()
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return t.numel() * t.element_size() / 2**20
    inside = False
    for line in lines:
        head = line.split()[0] if line else ""
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= ptr < hi
        elif inside and head == "Rss:":
            return int(line.split()[1]) / 1024
    return t.numel() * t.element_size() / 2**20


def _runs(rows: list[int]) -> list[tuple[int, int]]:
    """Sorted rows as ``[lo, hi)`` runs of consecutive indices.

    >>> _runs([1, 2, 3, 7, 9, 10])
    [(1, 4), (7, 8), (9, 11)]
    """
    out: list[tuple[int, int]] = []
    for r in rows:
        if out and out[-1][1] == r:
            out[-1] = (out[-1][0], r + 1)
        else:
            out.append((r, r + 1))
    return out
