"""Static head patterns: which keys a hard head selects, as the compiler knows it.

A head over a static selector (one that only positions and constants decide) selects the
same keys on every input of a length. Lowering knows that selection when it writes the
head's scores, either as an equality of two static integer S-ops (query i selects key j
where ``key_values[j] == query_values[i]``, the scores ``1 - (q - k)^2`` proved to round
below the tolerance) or as a table over positions (the scores ``pos:i . pos:j``, exactly 0
or 1). It writes that down as a :class:`StaticPattern` on the head, so that the execution
plans take each head's keys from here instead of recomputing them from the weights.

Positions here are RASP positions ``0 .. L - 1``; :func:`head_keys` turns a pattern into the
keys of every query of the model's stream (position 0 is BOS): a hard head in "mean" mode
reads BOS where nothing is selected (BOS scores ``max_score - 1/2``), one in "width" mode
always reads BOS as well (BOS scores ``max_score``), and BOS's own query reads BOS only.

>>> import numpy as np
>>> p = StaticPattern.equality(np.array([2.0, 1.0, 0.0]), np.array([0.0, 1.0, 2.0]))
>>> offsets, keys = head_keys(p, n=4, causal=False)  # a reverse: one key each
>>> offsets.tolist(), keys.tolist()
([0, 1, 2, 3, 4], [0, 3, 2, 1])
>>> head_keys(p, n=4, causal=True)[1].tolist()  # query 1 cannot see key 3
[0, 0, 2, 1]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

__all__ = ["KeyIndex", "StaticPattern", "default_and_others", "gather_keys", "head_keys"]


@dataclass(frozen=True, eq=False)
class KeyIndex:
    """The positions of integer key values grouped by value, made once per key S-op (the
    heads of a program share their keys): ``order`` sorts the positions by value (ties in
    position order); where the values span a short range, ``start`` and ``count`` give each
    value's run in ``order`` (value ``low + i`` at ``order[start[i]:start[i] + count[i]]``).

    >>> idx = KeyIndex.of(np.array([2.0, 0.0, 2.0]))
    >>> idx.order.tolist(), idx.low, idx.start.tolist(), idx.count.tolist()
    ([1, 0, 2], 0, [0, 1, 1], [1, 0, 2])
    """

    order: np.ndarray
    values: np.ndarray  # the key values in that order
    low: int = 0
    start: np.ndarray | None = None
    count: np.ndarray | None = None

    @classmethod
    def of(cls, key_values: np.ndarray) -> KeyIndex:
        kv = np.asarray(key_values, dtype=np.float64)
        order = np.argsort(kv, kind="stable")
        if not len(kv):
            return cls(order, kv)
        low, high = float(kv.min()), float(kv.max())
        if high - low > 4 * len(kv) + 64:  # a wide range: searched, not tabled
            return cls(order, kv[order])
        count = np.bincount((kv - low).astype(np.int64), minlength=int(high - low) + 1)
        return cls(order, kv[order], int(low), np.cumsum(count) - count, count)

    def runs(self, qv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(first, counts)``: where each query value's run starts in ``order``, and how
        many keys it holds."""
        if self.start is None:
            first = np.searchsorted(self.values, qv, side="left")
            return first, np.searchsorted(self.values, qv, side="right") - first
        code = qv - self.low
        inside = (code >= 0) & (code < len(self.count))
        code = np.where(inside, code, 0).astype(np.int64)
        return self.start[code], np.where(inside, self.count[code], 0)


@dataclass(frozen=True, eq=False)
class StaticPattern:
    """The keys a static head selects at each query, over RASP positions ``0 .. L - 1``.

    Attributes:
        kind: "equality" (``key_values [L]`` float64 and the query values: query i selects
            the keys j with an equal value) or "table" (``offsets [L + 1]`` and ``keys
            [nnz]`` int64, ascending per query: compressed rows).
        mode: the head's: "mean" (BOS where nothing is selected) or "width" (BOS always).
        query_default, query_at, query_at_values: an equality's query values, held as
            their most common value and the positions (ascending int64) and values where
            they differ from it (a gather's source index is one value at most positions;
            :attr:`query_values` gives them dense); where that would take more memory than
            the values themselves, ``query_at`` is None and ``query_at_values`` holds all.
    """

    kind: str
    mode: str = "mean"
    key_values: np.ndarray | None = None
    offsets: np.ndarray | None = None
    keys: np.ndarray | None = None
    query_default: float = 0.0
    query_at: np.ndarray | None = None
    query_at_values: np.ndarray | None = None

    key_index: KeyIndex | None = None

    @classmethod
    def equality(cls, query_values, key_values, key_index=None) -> StaticPattern:
        """Query i selects the keys j with ``key_values[j] == query_values[i]`` (integers);
        ``key_index``: the keys' :class:`KeyIndex`, when made already."""
        q = np.asarray(query_values, dtype=np.float64)
        k = np.asarray(key_values, dtype=np.float64)
        if q.shape != k.shape or q.ndim != 1:
            raise ValueError(f"query and key values must be [L] alike, got {q.shape}, {k.shape}")
        default, at = default_and_others(q)
        if 2 * len(at) >= len(q):  # listed entries (16 bytes each) would take more than
            # the dense values (8 per position): kept dense (query_at None), not copied
            return cls("equality", key_values=k, query_at_values=q, key_index=key_index)
        return cls.sparse_equality(default, at, q[at], k, key_index)

    @classmethod
    def sparse_equality(
        cls, query_default: float, query_at, query_at_values, key_values, key_index=None
    ) -> StaticPattern:
        """:meth:`equality` with the query values given as their default and the entries
        that differ: ``query_at`` (ascending positions) and ``query_at_values``.

        >>> p = StaticPattern.sparse_equality(-1.0, [1], [0.0], [0.0, 1.0, 2.0])
        >>> p.query_values.tolist()
        [-1.0, 0.0, -1.0]
        """
        k = np.asarray(key_values, dtype=np.float64)
        at = np.asarray(query_at, dtype=np.int64).reshape(-1)
        vals = np.asarray(query_at_values, dtype=np.float64).reshape(-1)
        if k.ndim != 1 or at.shape != vals.shape:
            raise ValueError(
                f"key values must be [L] and the listed queries one value each, got "
                f"{k.shape}, {at.shape}, {vals.shape}"
            )
        if len(at) and (int(at[0]) < 0 or int(at[-1]) >= len(k) or bool(np.any(np.diff(at) <= 0))):
            raise ValueError(
                f"the listed query positions must ascend within 0..{len(k) - 1}, got "
                f"{at[:8].tolist()}{' ...' if len(at) > 8 else ''}; list each position once, "
                "in order"
            )
        return cls(
            "equality",
            key_values=k,
            query_default=float(query_default),
            query_at=at,
            query_at_values=vals,
            key_index=key_index,
        )

    @property
    def query_values(self) -> np.ndarray | None:
        """An equality's query values, ``[L]`` float64 (made on each call)."""
        if self.kind != "equality":
            return None
        if self.query_at is None:  # held dense
            return self.query_at_values
        out = np.full(len(self.key_values), self.query_default, dtype=np.float64)
        out[self.query_at] = self.query_at_values
        return out

    def with_mode(self, mode: str) -> StaticPattern:
        """The same keys for a head of ``mode`` ("mean" or "width")."""
        if mode not in ("mean", "width"):
            raise ValueError(f"mode must be 'mean' or 'width', got {mode!r}")
        return dataclasses.replace(self, mode=mode)

    @classmethod
    def table(cls, matrix: np.ndarray) -> StaticPattern:
        """From a ``[query, key]`` boolean selection matrix."""
        m = np.asarray(matrix, dtype=bool)
        rows, cols = np.nonzero(m)  # row-major: ascending keys per query
        offsets = np.zeros(m.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=m.shape[0]), out=offsets[1:])
        return cls("table", offsets=offsets, keys=cols.astype(np.int64))

    @property
    def length(self) -> int:
        """L, the positions the pattern covers."""
        if self.kind == "equality":
            return len(self.key_values)
        return len(self.offsets) - 1

    def selected(self, m: int, causal: bool) -> tuple[np.ndarray, np.ndarray]:
        """``(counts [m], keys [nnz])``: the keys among the first ``m`` positions that each of
        the first ``m`` queries selects (only keys up to the query's own when ``causal``),
        ascending per query.

        >>> StaticPattern.table(np.eye(3, dtype=bool)).selected(2, causal=False)[1].tolist()
        [0, 1]
        """
        if m > self.length:
            raise ValueError(
                f"the pattern covers {self.length} positions, not {m}: ask for at most "
                f"{self.length} (the model's max_seq_len)"
            )
        if self.kind == "equality":
            index = self.key_index
            if index is None or m < self.length:  # the first m keys alone
                index = KeyIndex.of(self.key_values[:m])
            lo, counts = index.runs(self.query_values[:m])
            rows = np.repeat(np.arange(m), counts)
            start = np.cumsum(counts) - counts
            keys = index.order[lo[rows] + np.arange(len(rows)) - start[rows]]
        else:
            lo, hi = self.offsets[:m], self.offsets[1 : m + 1]
            rows = np.repeat(np.arange(m), hi - lo)
            start = np.cumsum(hi - lo) - (hi - lo)
            keys = self.keys[lo[rows] + np.arange(len(rows)) - start[rows]]
            keep = keys < m
            rows, keys = rows[keep], keys[keep]
        if causal:
            keep = keys <= rows
            rows, keys = rows[keep], keys[keep]
        return np.bincount(rows, minlength=m).astype(np.int64), keys.astype(np.int64)


def default_and_others(values: np.ndarray) -> tuple[float, np.ndarray]:
    """The most common value of ``values`` (of a sample of 64) and the positions whose bits
    differ from it (int64, ascending): how a column over positions is kept sparse.

    >>> d, at = default_and_others(np.array([-1.0, 2.0, -1.0, -1.0, 0.0]))
    >>> d, at.tolist()
    (-1.0, [1, 4])
    """
    if not len(values):
        return 0.0, np.zeros(0, dtype=np.int64)
    values = np.ascontiguousarray(values, dtype=np.float64)
    sample = values[:: max(1, len(values) // 64)]
    vals, counts = np.unique(sample, return_counts=True)
    default = float(vals[np.argmax(counts)])
    return default, np.flatnonzero(values.view(np.int64) != np.float64(default).view(np.int64))


def head_keys(pattern: StaticPattern, n: int, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets [n + 1], keys [nnz])``: every query's keys in a stream of ``n`` positions
    (BOS at 0, RASP position i at i + 1), ascending per query, for a hard head of the
    pattern's mode (see the module docstring).

    >>> p = StaticPattern.table(np.zeros((2, 2), dtype=bool)).with_mode("width")
    >>> [a.tolist() for a in head_keys(p, 3, causal=False)]  # nothing selected: BOS only
    [[0, 1, 2, 3], [0, 0, 0]]
    """
    mode = pattern.mode
    m = n - 1
    counts, keys = pattern.selected(m, causal)
    rows = np.repeat(np.arange(m), counts)
    rank = np.arange(len(keys)) - (np.cumsum(counts) - counts)[rows]  # place in its row
    bos = counts == 0 if mode == "mean" else np.ones(m, dtype=bool)  # rows that read BOS
    total = counts + bos
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1] = 1  # BOS's own query reads BOS only
    np.cumsum(total, out=offsets[2:])
    offsets[2:] += 1
    out = np.zeros(int(offsets[-1]), dtype=np.int64)  # BOS (key 0) where not overwritten
    out[offsets[1:-1][rows] + bos[rows] + rank] = keys + 1  # BOS first where it is read
    return offsets, out


def gather_keys(
    pattern: StaticPattern, n: int, causal: bool
) -> tuple[int, np.ndarray, np.ndarray] | None:
    """``(fill, queries, keys)``: the keys of a pattern that selects one key at every query
    of a stream of ``n`` positions, as :func:`head_keys` gives them (BOS included), kept as
    the key most queries read and the queries that read another, ascending, with theirs;
    made from an equality's listed queries alone (the work follows the queries that differ
    from the default, not ``n``). None where that does not apply: a table, queries held
    dense, a "width" head, a causal model, fewer positions than the pattern covers, a query
    that selects more than one key, or too many listed queries for the default's key to be
    read most (the plans' ``fill``).

    >>> p = StaticPattern.sparse_equality(0.0, [2], [5.0], np.array([9.0, 0.0, 1.0, 5.0]))
    >>> fill, queries, keys = gather_keys(p, 5, causal=False)  # key 1 (stream 2), query 2: 3
    >>> fill, queries.tolist(), keys.tolist()
    (2, [0, 3], [0, 4])
    >>> offsets, every = head_keys(p, 5, causal=False)  # the same keys, every query listed
    >>> every.tolist()
    [0, 2, 2, 4, 2]
    """
    m = n - 1
    if (
        pattern.kind != "equality"
        or pattern.query_at is None
        or causal
        or pattern.mode != "mean"  # (a "width" head reads BOS beside what it selects)
        or m != pattern.length
        or m < 1
    ):
        return None
    index = pattern.key_index if pattern.key_index is not None else KeyIndex.of(pattern.key_values)
    values = np.concatenate([[pattern.query_default], pattern.query_at_values])
    first, counts = index.runs(values)
    if (counts > 1).any():
        return None
    # stream keys: RASP key j at j + 1; a query that selects nothing reads BOS (0)
    picked = np.where(counts == 1, index.order[np.where(counts == 1, first, 0)] + 1, 0)
    fill, listed = int(picked[0]), picked[1:]
    if 2 * (len(listed) + 1) >= n:  # (then another key could be read as often)
        return None
    at = pattern.query_at + 1  # stream positions of the listed queries
    other = listed != fill
    queries = np.concatenate([[0], at[other]]) if fill != 0 else at[other]
    keys = np.concatenate([[0], listed[other]]) if fill != 0 else listed[other]
    return fill, queries.astype(np.int64), keys.astype(np.int64)
