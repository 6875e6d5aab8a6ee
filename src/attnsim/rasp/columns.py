"""How the interpreter holds values: numerical columns, categorical :class:`Cat` columns.

A numerical S-op's values are a float64 array ``[batch, n]``; a categorical S-op's are a
:class:`Cat`, integer codes ``[batch, n]`` into a table of distinct Python values, so a
user's function runs once per distinct value and never once per position. Values are told
apart by :func:`attnsim.values.value_key` (``True``, ``1`` and ``1.0`` are three RASP values,
``0.0`` and ``-0.0`` two). The helpers
here convert between the two forms and tabulate comparisons on the distinct values; the
evaluator is :mod:`attnsim.rasp.interpret`, which re-exports :class:`Cat` and
:class:`RASPEvaluationError`.

>>> table, codes = factorize(["a", 1, "a", True])
>>> table, codes.tolist()
(['a', 1, True], [0, 1, 0, 2])
>>> cat_from_array(np.array([[2.0, 0.5, 2.0]])).table
[0.5, 2]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from attnsim.rasp import expr as E
from attnsim.values import brief, value_key

__all__ = [
    "Cat",
    "RASPEvaluationError",
    "as_python_number",
    "cat_from_array",
    "cat_from_bools",
    "cat_from_table_values",
    "cat_from_tokens",
    "comparison_table",
    "factorize",
    "order_ranks",
    "same_rows",
    "small_int",
    "to_cat",
    "to_float",
    "to_number",
]


class RASPEvaluationError(ValueError):
    """A program cannot be evaluated on the given input (the message says why)."""


class Cat:
    """A categorical value: ``codes [batch, n]`` indexing into ``table`` (distinct values)."""

    __slots__ = ("codes", "table")

    def __init__(self, codes: np.ndarray, table: list) -> None:
        self.codes = codes
        self.table = table

    def to_objects(self) -> np.ndarray:
        tab = np.empty(len(self.table), dtype=object)
        tab[:] = self.table
        return tab[self.codes]


def factorize(values: Iterable[Any]) -> tuple[list, np.ndarray]:
    """Distinct values (first-seen order) and the code of each value."""
    index: dict[tuple, int] = {}
    table: list = []
    codes = []
    try:
        for v in values:
            k = value_key(v)  # True, 1 and 1.0 (or 0.0 and -0.0) stay apart
            c = index.get(k)
            if c is None:
                c = index[k] = len(table)
                table.append(v)
            codes.append(c)
    except TypeError:  # an unhashable value (a list, a dict, an array)
        raise RASPEvaluationError(
            f"RASP values must be hashable, got {type(v).__name__} {v!r}; return a tuple "
            "instead of a list (or another hashable value)"
        ) from None
    return table, np.asarray(codes, dtype=np.int64)


def cat_from_table_values(codes: np.ndarray, raw_table: list) -> Cat:
    """Builds a Cat whose table may contain duplicates: dedupes and remaps the codes."""
    table, remap = factorize(raw_table)
    if len(table) == len(raw_table):
        return Cat(codes, table)
    return Cat(remap[codes] if codes.size else codes, table)


def cat_from_array(arr: np.ndarray) -> Cat:
    """Categorical view of a numerical array (distinct float values)."""
    uniq, inv = np.unique(arr, return_inverse=True)
    table = [as_python_number(u) for u in uniq]
    return Cat(inv.reshape(arr.shape).astype(np.int64), table)


def cat_from_tokens(arr: np.ndarray) -> Cat:
    """Categorical view of a numpy array of tokens (bool, int or float): its values are what
    ``arr.tolist()`` holds, told apart by :func:`~attnsim.values.value_key` (``3.0`` stays a
    float, ``-0.0`` is not ``0.0``, ``True`` is not ``1``), as for a list of the same tokens.

    >>> cat = cat_from_tokens(np.array([[0.0, -0.0, 3.0, 0.0]]))
    >>> cat.to_objects().tolist()
    [[0.0, -0.0, 3.0, 0.0]]
    >>> len(cat.table)
    3
    """
    if arr.dtype.kind == "b":
        return cat_from_bools(arr)
    if arr.dtype.kind in "iu":
        uniq, inv = np.unique(arr, return_inverse=True)
        return Cat(inv.reshape(arr.shape).astype(np.int64), uniq.tolist())
    x = arr.astype(np.float64)  # exact for float16 and float32
    # unique by bits: -0.0 and 0.0 differ; every NaN is made the one NaN first
    bits = np.where(np.isnan(x), np.nan, x).view(np.int64)
    uniq, inv = np.unique(bits, return_inverse=True)
    return Cat(inv.reshape(arr.shape).astype(np.int64), uniq.view(np.float64).tolist())


def cat_from_bools(arr: np.ndarray) -> Cat:
    """Categorical view of a boolean array (values False and True, not 0 and 1)."""
    return Cat(arr.astype(np.int64), [False, True])


def as_python_number(u: Any) -> Any:
    f = float(u)
    return int(f) if f.is_integer() and abs(f) < 2**53 else f


def to_float(v: Any, what: str) -> np.ndarray:
    if isinstance(v, np.ndarray):
        return v
    try:
        tab = np.array([to_number(x, what) for x in v.table], dtype=np.float64)
    except RASPEvaluationError:
        raise
    return tab[v.codes] if len(tab) else np.zeros(v.codes.shape)


def to_number(x: Any, what: str) -> float:
    if x is None or isinstance(x, str):
        raise RASPEvaluationError(
            f"{what} is numerical but holds the value {x!r}; numerical S-ops need numbers "
            "(annotate it categorical, or map the value to a number first)"
        )
    try:
        return float(x)
    except OverflowError:
        raise RASPEvaluationError(
            f"{what} is numerical but holds {brief(x)}, too large for a float (at most "
            "about 1.8e+308); use smaller numbers, or keep the value categorical"
        ) from None


def to_cat(v: Any) -> Cat:
    return v if isinstance(v, Cat) else cat_from_array(v)


def same_rows(a: np.ndarray) -> bool:
    """Whether every row of ``a [batch, n]`` equals the first (indices, constants, ...)."""
    return a.shape[0] == 1 or bool((a == a[:1]).all())


def small_int(size: int) -> type:
    """The narrowest integer type that holds codes 0..size."""
    return np.int16 if size < 2**15 else (np.int32 if size < 2**31 else np.int64)


def _orderable(v: Any) -> bool:
    if isinstance(v, str):
        return True
    if isinstance(v, (int, float, np.integer, np.floating)):
        return v == v  # not NaN
    return False


def order_ranks(keys: list, queries: list) -> tuple[np.ndarray, np.ndarray] | None:
    """Ranks of the key and query values in one sorted order (equal values, equal ranks).

    Comparing ranks answers every ``Comparison`` exactly as comparing the values would, when
    the values are all numbers (no NaN) or all strings; otherwise None.
    """
    values = list(keys) + list(queries)
    if not values:
        return None
    kinds = {isinstance(v, str) for v in values}
    if len(kinds) != 1 or not all(_orderable(v) for v in values):
        return None
    order = sorted(range(len(values)), key=values.__getitem__)
    rank = np.empty(len(values), dtype=np.int64)
    r = 0
    for j, i in enumerate(order):
        if j and values[order[j - 1]] < values[i]:
            r += 1
        rank[i] = r
    rank = rank.astype(small_int(r + 1))
    return rank[: len(keys)], rank[len(keys) :]


def comparison_table(pred: E.Comparison, keys: list, queries: list) -> np.ndarray | None:
    """The predicate on every (query value, key value) pair, vectorised when the values allow."""
    if any(v is None for v in keys) or any(v is None for v in queries):
        return None
    kt = np.empty(len(keys), dtype=object)
    kt[:] = keys
    qt = np.empty(len(queries), dtype=object)
    qt[:] = queries
    try:
        out = pred.numpy_fn(kt[None, :], qt[:, None])
    except TypeError:
        return None
    return np.asarray(out, dtype=bool).reshape(len(queries), len(keys))
