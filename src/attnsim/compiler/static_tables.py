"""Sparse position tables (:func:`attnsim.rasp.gathers.sparse_table`) as the compiler reads
them: a default and the listed entries, over the program's positions, never an array over
every position unless a caller asks for one (:func:`dense`).

>>> from attnsim.rasp import gathers
>>> col = column(gathers.sparse_table(5, -1.0, [1, 4], [2.0, 3.0]), 3)  # cut to 3 positions
>>> col[1], col[2].tolist(), col[3].tolist(), dense(col, 3).tolist()
(-1.0, [1], [2.0], [-1.0, 2.0, -1.0])
>>> column(gathers.sparse_table(2, -1.0, [1], [2.0]), 3)[2].tolist()  # padded with 0
[1, 2]
"""

from __future__ import annotations

import numpy as np

from attnsim.rasp import expr as E
from attnsim.rasp import gathers

__all__ = ["column", "dense", "finite", "first_seen"]

Column = tuple[int, float, np.ndarray, np.ndarray]


def column(e: E.RASPExpr, length: int) -> Column | None:
    """A sparse table's ``(length, default, at, values)`` over positions ``0 .. length -
    1`` (the table cut, or padded with 0 past its end, as positions past a table hold 0),
    None for any other expression."""
    got = gathers.column_of(e) if isinstance(e, E.SOp) else None
    if got is None:
        return None
    size, default, at, vals = got
    if size == length:
        return got
    keep = at < length
    at, vals = at[keep], vals[keep]
    if size < length:
        pad = np.arange(size, length, dtype=np.int64)
        at, vals = np.concatenate([at, pad]), np.concatenate([vals, np.zeros(len(pad))])
    return length, default, at, vals


def dense(column: tuple[int, float, np.ndarray, np.ndarray], length: int) -> np.ndarray:
    """A sparse table's values at positions ``0 .. length - 1``, float64."""
    _, default, at, vals = column
    out = np.full(length, default, dtype=np.float64)
    out[at] = vals
    return out


def first_seen(column: tuple[int, float, np.ndarray, np.ndarray]) -> np.ndarray:
    """A sparse table's listed values with its default put at its first unlisted position:
    the values of the dense column in the order they first appear there.

    >>> first_seen((4, -1.0, np.array([0, 2]), np.array([5.0, 6.0]))).tolist()
    [5.0, -1.0, 6.0]
    """
    length, default, at, vals = column
    if len(at) == length:
        return vals
    gap = np.flatnonzero(at != np.arange(len(at)))
    first = int(gap[0]) if len(gap) else len(at)  # listed entries before it: 0 .. first - 1
    return np.concatenate([vals[:first], [default], vals[first:]])


def finite(e: E.RASPExpr, length: int) -> bool:
    """Whether ``e`` is a sparse table whose every value is finite.

    >>> finite(gathers.sparse_table(3, 0.0, [1], [np.inf]), 3), finite(E.indices, 3)
    (False, False)
    """
    col = column(e, length)
    return col is not None and bool(np.isfinite(col[1]) and np.all(np.isfinite(col[3])))
