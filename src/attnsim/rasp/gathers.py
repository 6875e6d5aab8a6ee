"""Position-only gathers and sums: selectors that depend on positions alone, and their reads.

A *gather* moves values between positions by index arithmetic fixed when the program is
built: query position ``p`` reads the key at ``source(p)``, where ``source`` is a plain
Python function of ``p`` (or an S-op of the position). Such selectors read only ``indices``,
so the compiler builds them without any MLP and gives one attention head per selector object;
a query whose source is ``-1`` (or any position that does not exist) selects nothing and
reads the default 0.

The pieces, each one line of RASP:

- :func:`index_map`, :func:`index_constant`: S-ops of the position alone (an int for a
  selector to compare, or a numerical per-position coefficient);
- :func:`reader`, :func:`select_keys`, :func:`select_all`: position-only selectors;
- :func:`read`, :func:`gather`, :func:`sum_into`, :func:`any_selected`: numerical reads
  through a selector;
- :func:`sum_of`, :func:`max_of`: elementwise sums and maxima of several S-ops (no
  attention).

Each builder creates the same expressions, in the same order, on every call, so a program
made from them compiles to the same weights every time.

>>> from attnsim import rasp
>>> from attnsim.rasp import gathers
>>> x = rasp.numerical(rasp.tokens)
>>> rasp.evaluate(gathers.gather(lambda p: p + 1, x), [1.0, 2.0, 3.0])  # read the next token
[2.0, 3.0, 0.0]
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

# the language, under the module name tracr programs use for it
from attnsim.rasp import expr as rasp

__all__ = [
    "any_selected",
    "gather",
    "index_constant",
    "index_map",
    "position_table",
    "column_of",
    "max_of",
    "table_of",
    "read",
    "reader",
    "select_all",
    "select_keys",
    "sparse_table",
    "sum_into",
    "sum_of",
]


def index_map(fn: Callable[[int], int]) -> rasp.SOp:
    """A categorical S-op of the position alone: position ``p`` holds ``fn(p)``.

    Args:
        fn: position -> an int (a source position, say).

    Returns:
        ``Map(fn, indices)``.

    >>> from attnsim import rasp
    >>> rasp.evaluate(index_map(lambda p: 2 * p), ["a", "b", "c"])
    [0, 2, 4]
    """
    return rasp.Map(fn, rasp.indices)


def index_constant(fn: Callable[[int], float]) -> rasp.SOp:
    """A numerical S-op of the position alone: ``float(fn(p))`` (a per-position coefficient).

    Args:
        fn: position -> a number or a bool (``True`` reads as 1.0, a mask).

    Returns:
        A numerical ``Map`` of ``indices``.

    >>> from attnsim import rasp
    >>> rasp.evaluate(index_constant(lambda p: p % 2 == 0), ["a", "b", "c"])
    [1.0, 0.0, 1.0]
    """
    return rasp.numerical(rasp.Map(lambda p: float(fn(p)), rasp.indices))


def position_table(values: Sequence[float]) -> rasp.SOp:
    """A numerical S-op of the position alone: position ``p`` holds ``values[p]`` (positions
    past the table hold 0). The same as ``index_constant(lambda p: values[p])``, held as one
    float64 array that the interpreter reads in one look-up (a program with thousands of
    long tables stays small and evaluates fast).

    >>> from attnsim import rasp
    >>> rasp.evaluate(position_table([0.5, -1.0]), ["a", "b", "c"])
    [0.5, -1.0, 0.0]
    """
    table = np.array(values, dtype=np.float64).reshape(-1)  # a copy of the caller's
    size = len(table)

    def at(p: int) -> float:
        return float(table[p]) if 0 <= p < size else 0.0

    def lookup(ps: np.ndarray) -> np.ndarray:
        if ps.shape[-1] == size and np.array_equal(ps, np.broadcast_to(np.arange(size), ps.shape)):
            return np.broadcast_to(table, ps.shape)  # every position once: the table itself
        inside = (ps >= 0) & (ps < size)
        return np.where(inside, table[np.where(inside, ps, 0)] if size else 0.0, 0.0)

    table.flags.writeable = False
    lookup.table = table  # (read by table_of)
    out = rasp.numerical(rasp.Map(at, rasp.indices, simplify=False))
    out._op = rasp.ElementwiseOp("position_table", (), lookup)
    return out


def sparse_table(
    length: int, default: float, at: Sequence[int], values: Sequence[float]
) -> rasp.SOp:
    """:func:`position_table` held as its default and the entries that differ: position
    ``p < length`` holds ``values[k]`` where ``at[k] == p`` and ``default`` elsewhere
    (positions past the table hold 0). A gather's source index is one value (-1) at most
    positions, so a long program's tables take the memory of their listed entries, not of
    every position; the compiler reads them in this form (:func:`column_of`).

    Args:
        length: positions in the table.
        default: the value of every position not listed.
        at: the listed positions, ascending, each once, within ``0 .. length - 1``.
        values: their values, one each.

    >>> from attnsim import rasp
    >>> t = sparse_table(4, -1.0, [2], [7.0])
    >>> rasp.evaluate(t, ["a"] * 5), column_of(t)[2].tolist()
    ([-1.0, -1.0, 7.0, -1.0, 0.0], [2])
    >>> try:
    ...     sparse_table(3, 0.0, [2, 1], [1.0, 1.0])
    ... except ValueError as exc:
    ...     print(str(exc)[:62])
    sparse_table: the listed positions must ascend within 0..2, ea
    """
    size = int(length)
    where = np.array(at, dtype=np.int64).reshape(-1)
    vals = np.array(values, dtype=np.float64).reshape(-1)
    if where.shape != vals.shape:
        raise ValueError(
            f"sparse_table: one value per listed position, got {where.size} positions and "
            f"{vals.size} values; pass one value for each listed position"
        )
    if size < 0 or (
        where.size
        and (int(where[0]) < 0 or int(where[-1]) >= size or bool(np.any(np.diff(where) <= 0)))
    ):
        shown = where[:8].tolist()
        raise ValueError(
            f"sparse_table: the listed positions must ascend within 0..{size - 1}, each once; "
            f"got {shown}{' ...' if where.size > 8 else ''}; sort them and list each once"
        )
    fill = float(default)

    def dense() -> np.ndarray:
        out = np.full(size, fill, dtype=np.float64)
        out[where] = vals
        return out

    def at_one(p: int) -> float:
        if not 0 <= p < size:
            return 0.0
        k = int(np.searchsorted(where, p))
        return float(vals[k]) if k < where.size and where[k] == p else fill

    def lookup(ps: np.ndarray) -> np.ndarray:
        ps = np.asarray(ps, dtype=np.int64)
        k = np.minimum(np.searchsorted(where, ps), max(where.size - 1, 0))
        hit = (where[k] == ps) if where.size else np.zeros(ps.shape, dtype=bool)
        inside = (ps >= 0) & (ps < size)
        got = np.where(hit, vals[k] if where.size else 0.0, fill)
        return np.where(inside, got, 0.0)

    where.flags.writeable = False
    vals.flags.writeable = False
    lookup.column = (size, fill, where, vals)  # (read by column_of)
    lookup.dense = dense  # (read by table_of)
    out = rasp.numerical(rasp.Map(at_one, rasp.indices, simplify=False))
    out._op = rasp.ElementwiseOp("position_table", (), lookup)
    return out


def column_of(sop: rasp.SOp) -> tuple[int, float, np.ndarray, np.ndarray] | None:
    """``(length, default, at, values)`` of a :func:`sparse_table` S-op (read-only arrays),
    None for any other (a dense :func:`position_table` too).

    >>> column_of(sparse_table(3, 0.5, [], [])), column_of(position_table([1.0]))
    ((3, 0.5, array([], dtype=int64), array([], dtype=float64)), None)
    """
    op = getattr(sop, "_op", None)
    if op is None or op.kind != "position_table":
        return None
    return getattr(op.numpy_fn, "column", None)


def table_of(sop: rasp.SOp) -> np.ndarray | None:
    """The values of a :func:`position_table` S-op (read-only float64), None for any other;
    a :func:`sparse_table`'s made dense (a new array on each call).

    >>> table_of(position_table([0.5, -1.0])).tolist(), table_of(index_map(lambda p: p))
    ([0.5, -1.0], None)
    >>> table_of(sparse_table(3, -1.0, [1], [4.0])).tolist()
    [-1.0, 4.0, -1.0]
    """
    op = getattr(sop, "_op", None)
    if op is None or op.kind != "position_table":
        return None
    dense = getattr(op.numpy_fn, "dense", None)
    return dense() if dense is not None else getattr(op.numpy_fn, "table", None)


def reader(source: Callable[[int], int] | rasp.SOp) -> rasp.Selector:
    """The selector with which query ``p`` reads key ``source(p)``: one attention head.

    Args:
        source: position -> the key position to read (-1 for none), or an S-op that holds
            that key position (``indices + 1``, say).

    Returns:
        ``Select(indices, source, EQ)``; a callable source becomes :func:`index_map` first.

    >>> from attnsim import rasp
    >>> x = rasp.numerical(rasp.tokens)
    >>> rasp.evaluate(read(reader(lambda p: 0), x), [5.0, 6.0, 7.0])
    [5.0, 5.0, 5.0]
    """
    queries = source if isinstance(source, rasp.SOp) else index_map(source)
    return rasp.Select(rasp.indices, queries, rasp.Comparison.EQ)


def read(selector: rasp.Selector, values: rasp.SOp) -> rasp.SOp:
    """The numerical mean of the selected values, 0 where nothing is selected.

    With a selector that picks one key per query (a :func:`reader`) this reads that key's
    value; with a wider one it averages.

    Args:
        selector: any selector.
        values: a numerical S-op.

    Returns:
        A numerical ``Aggregate`` with default 0.

    >>> from attnsim import rasp
    >>> x = rasp.numerical(rasp.tokens)
    >>> rasp.evaluate(read(select_all(), x), [1.0, 2.0, 6.0])
    [3.0, 3.0, 3.0]
    """
    return rasp.numerical(rasp.Aggregate(selector, values, default=0))


def gather(source: Callable[[int], int] | rasp.SOp, values: rasp.SOp) -> rasp.SOp:
    """Position ``p`` reads ``values[source(p)]``, or 0 when that position does not exist.

    Args:
        source: as for :func:`reader`.
        values: a numerical S-op.

    Returns:
        ``read(reader(source), values)``.

    >>> from attnsim import rasp
    >>> x = rasp.numerical(rasp.tokens)
    >>> rasp.evaluate(gather(lambda p: 2 - p, x), [1.0, 2.0, 3.0])  # reverse 3 positions
    [3.0, 2.0, 1.0]
    >>> rasp.evaluate(gather(lambda p: -1 if p == 0 else p - 1, x), [1.0, 2.0, 3.0])
    [0.0, 1.0, 2.0]
    """
    return read(reader(source), values)


def select_keys(keep: Callable[[int], bool]) -> rasp.Selector:
    """Every query selects the same keys: the positions ``k`` with ``keep(k)``.

    Args:
        keep: key position -> whether every query selects it.

    Returns:
        ``Select(indices, indices, lambda key, query: keep(key))``.

    >>> from attnsim import rasp
    >>> evens = select_keys(lambda k: k % 2 == 0)
    >>> rasp.evaluate(rasp.SumAggregate(evens, rasp.numerical(rasp.tokens)), [1, 2, 3, 4])
    [4.0, 4.0, 4.0, 4.0]
    """
    return rasp.Select(rasp.indices, rasp.indices, lambda key, query: keep(key))


def select_all() -> rasp.Selector:
    """Every query selects every key (``Comparison.TRUE`` on ``indices``).

    >>> from attnsim import rasp
    >>> rasp.evaluate(rasp.SelectorWidth(select_all()), ["a", "b", "c"])
    [3, 3, 3]
    """
    return rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.TRUE)


def sum_into(
    owner: Callable[[int], int], target: Callable[[int], int], values: rasp.SOp
) -> rasp.SOp:
    """Query ``q`` sums the values of every key ``k`` with ``owner(k) == target(q)``.

    The scatter-add of gathers: each key names the one output position it contributes to
    (-1 for none), and each query names the owner it collects (give it one no key uses,
    -2 say, to collect nothing). One attention head.

    Args:
        owner: key position -> the position its value is added into.
        target: query position -> the owner it sums.
        values: a numerical S-op.

    Returns:
        A numerical ``SumAggregate``.

    >>> from attnsim import rasp
    >>> x = rasp.numerical(rasp.tokens)
    >>> rasp.evaluate(sum_into(lambda k: k % 2, lambda q: q if q < 2 else -2, x), [1, 2, 3, 4])
    [4.0, 6.0, 0.0, 0.0]
    """
    selector = rasp.Select(index_map(owner), index_map(target), rasp.Comparison.EQ)
    return rasp.SumAggregate(selector, values)


def any_selected(selector: rasp.Selector) -> rasp.SOp:
    """1.0 where ``selector`` selects some key, 0.0 where it selects none.

    The mean of a constant 1 over the selected keys (in a compiled model 1 up to float
    rounding). Through a :func:`reader` it tells whether the source position exists.

    Args:
        selector: any selector.

    Returns:
        A numerical S-op.

    >>> from attnsim import rasp
    >>> rasp.evaluate(any_selected(reader(lambda p: p + 1)), ["a", "b", "c"])
    [1.0, 1.0, 0.0]
    """
    return read(selector, rasp.numerical(rasp.Full(1.0)))


def sum_of(terms: Sequence[rasp.SOp]) -> rasp.SOp:
    """``terms[0] + terms[1] + ...``, left to right (no attention).

    >>> from attnsim import rasp
    >>> x = rasp.numerical(rasp.tokens)
    >>> rasp.evaluate(sum_of([x, x * 2.0, x * 3.0]), [1.0, 2.0])
    [6.0, 12.0]
    """
    return functools.reduce(lambda a, b: a + b, terms)


def max_of(terms: Sequence[rasp.SOp]) -> rasp.SOp:
    """The elementwise maximum by a balanced tree of ``max(a, b) = a + relu(b - a)``.

    Only products, sums and ReLUs, so the compiler realises it exactly with ReLU units; the
    tree has ``ceil(log2(len(terms)))`` levels.

    >>> from attnsim import rasp
    >>> x = rasp.numerical(rasp.tokens)
    >>> rasp.evaluate(max_of([x, x * -1.0, rasp.numerical(rasp.Full(0.5))]), [2.0, -3.0, 0.0])
    [2.0, 3.0, 0.5]
    """
    level = list(terms)
    while len(level) > 1:
        nxt = [a + rasp.relu(b - a) for a, b in zip(level[0::2], level[1::2])]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]
