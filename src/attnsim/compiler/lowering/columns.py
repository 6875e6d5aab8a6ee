"""A static direction's values over the positions, held as a default and the entries that
differ from it (:class:`PositionColumn`).

Lowering embeds position-only S-ops as columns of the positional embedding. Most of the
universal simulator's columns are one value almost everywhere (a gather's source index is
-1 wherever a position reads nothing), so a column lowering makes itself (the square of a
static query side, a position's one-hot) is kept in this form: at 128 tokens of the MiniLM
layer shape the squares alone were 2,717 dense columns of 196,608 positions (4.3 GB).

Everything that reads ``LoweredProgram.static_embed`` as an array keeps working:
``np.asarray(column)`` gives the dense values (made on demand, one column at a time).

>>> col = PositionColumn.of(np.array([-1.0, -1.0, 3.0, -1.0, -0.0]))
>>> col.default, col.at.tolist(), col.values.tolist()
(-1.0, [2, 4], [3.0, -0.0])
>>> np.asarray(col).tolist(), col.square().default, np.asarray(col.square()).tolist()
([-1.0, -1.0, 3.0, -1.0, -0.0], 1.0, [1.0, 1.0, 9.0, 1.0, 0.0])
>>> col.abs_max(), len(col)
(3.0, 5)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnsim.model.patterns import default_and_others

__all__ = ["PositionColumn", "abs_max"]


@dataclass(frozen=True, eq=False)
class PositionColumn:
    """``length`` values: ``default`` everywhere except ``values`` at positions ``at``.

    Attributes:
        length: the number of positions.
        default: the value at every position not listed.
        at: the listed positions, ascending (int64).
        values: their values (float64), bit for bit those of the dense column.
    """

    length: int
    default: float
    at: np.ndarray
    values: np.ndarray

    @classmethod
    def of(cls, dense: np.ndarray) -> PositionColumn:
        """The column of a dense float64 array: its default is its most common value (of a
        sample), the listed entries are those whose bits differ (so ``-0.0`` beside a
        default ``0.0`` is kept)."""
        dense = np.ascontiguousarray(dense, dtype=np.float64).reshape(-1)
        default, at = default_and_others(dense)
        return cls(dense.size, default, at, dense[at].copy())

    def __len__(self) -> int:
        return self.length

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = np.full(self.length, self.default, dtype=np.float64)
        out[self.at] = self.values
        return out if dtype is None else out.astype(dtype, copy=False)

    @property
    def nbytes(self) -> int:
        return self.at.nbytes + self.values.nbytes

    def square(self) -> PositionColumn:
        """Each value times itself (the same products as the dense column's)."""
        return PositionColumn(
            self.length, self.default * self.default, self.at, self.values * self.values
        )

    def abs_max(self) -> float:
        """The largest ``|value|`` (0 for no positions)."""
        if not self.length:
            return 0.0
        top = float(np.abs(self.values).max()) if self.values.size else 0.0
        return max(top, abs(self.default)) if self.values.size < self.length else top


def abs_max(col: np.ndarray | PositionColumn) -> float:
    """The largest ``|value|`` of a static column in either form (0 for no positions)."""
    if isinstance(col, PositionColumn):
        return col.abs_max()
    arr = np.abs(np.asarray(col, dtype=np.float64))
    return float(arr.max()) if arr.size else 0.0
