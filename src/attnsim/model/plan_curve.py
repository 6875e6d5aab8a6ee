"""Keys on a parabola: a static hard head's selection without ``[query, key]`` scores.

The compiler writes an equality of two numbers ``s == t`` (a gather at a computed position,
``Select(indices, src, EQ)``) as the score ``1 - (s - t)^2``: the query row holds ``(s, s^2,
1)``, the key row ``(2 t, -1, 1 - t^2)``. Every key row, apart from a few (the BOS key), is
then ``alpha + u beta + u^2 gamma`` for one number ``u`` per key (here ``u = 2 t``), and a
query's score is a quadratic in ``u``: ``a0 + a1 u + a2 u^2``. Where ``a2 < 0`` the scores
rise and then fall along the keys sorted by ``u``, so the best keys lie in a window around
``u* = -a1 / (2 a2)``, and every key outside the window scores below the window's ends.

:func:`select_on_curve` finds that structure in the weights (checked exactly on every key),
computes each distinct query's scores on a window of distinct ``u`` values and on the other
keys, and keeps a query's answer only when both ends of its window lie more than the
tolerance (plus a rounding margin) below its best score; the other queries are computed
densely. The selection is then that of ``scores >= max - tolerance`` over all keys, as
:func:`attnsim.model.plan_core.select_keys` computes it, at ``O(pos log pos)`` instead of
``O(pos^2)`` per head: the universal simulator's gathers over 282,000 positions.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnsim.model.costs import CURVE_MIN_KEYS, CURVE_MIN_VALUES, MAX_ODD, WINDOW
from attnsim.model.hard import hard_selection, hard_threshold

__all__ = ["Curve", "find_curve", "select_on_curve"]


def _unique_rows(rows: torch.Tensor) -> tuple:
    return torch.unique(rows, dim=0, return_inverse=True)


class Curve:
    """Keys ``k [pos, w]`` as a parabola in ``u`` plus a few other rows (see the module):
    each a group of equal key rows (one per distinct ``u``; one per distinct odd row)."""

    def __init__(self, k, u, coef, odd: torch.Tensor, odd_class: torch.Tensor):
        on = torch.ones(len(k), dtype=torch.bool, device=k.device)
        on[odd] = False
        keys = torch.nonzero(on).flatten()
        self.on = _Groups(keys, u[keys])  # by u, then position
        self.values = u[keys][torch.argsort(u[keys], stable=True)][self.on.starts]
        self.rows = k[self.on.first()]  # one key row per distinct u
        self.odd = _Groups(odd, odd_class)
        self.odd_rows = k[self.odd.first()]
        self.coef, self.k = coef, k
        self.deviation = k.new_zeros(k.shape[1])  # set by find_curve


class _Groups:
    """Key positions grouped by a value: ``order`` (by value, then position) and each
    group's ``starts`` in it."""

    def __init__(self, keys: torch.Tensor, by: torch.Tensor):
        order = torch.argsort(by, stable=True)
        self.order, sv = keys[order], by[order]
        new = torch.ones(len(sv), dtype=torch.bool, device=by.device)
        new[1:] = sv[1:] != sv[:-1]
        self.starts = torch.nonzero(new).flatten()
        self.ends = torch.cat([self.starts[1:], self.starts.new_full((1,), len(sv))])

    def first(self) -> torch.Tensor:
        return self.order[self.starts]

    def sizes(self) -> torch.Tensor:
        return self.ends - self.starts

    def expand(self, qi: torch.Tensor, group: torch.Tensor) -> tuple:
        """``(rows, keys)``: every key of each (query, group) pair."""
        sizes = self.ends[group] - self.starts[group]
        first = torch.repeat_interleave(self.starts[group] - torch.cumsum(sizes, 0) + sizes, sizes)
        keys = self.order[first + torch.arange(int(sizes.sum()), device=first.device)]
        return torch.repeat_interleave(qi, sizes), keys


def find_curve(k: torch.Tensor, distinct: Callable = _unique_rows) -> Curve | None:
    """The parabola the key rows ``k [pos, w]`` lie on, or None. ``distinct(rows)`` gives
    ``(rows, class of each)`` (:func:`attnsim.model.plan_core.distinct_rows`).

    ``u`` is the column with the most distinct values; each column is fitted as ``alpha +
    beta u + gamma u^2`` through three keys and checked on every key: keys off the fit (at
    most :data:`MAX_ODD`) are kept apart, and keys sharing a ``u`` must have equal rows.

    >>> t = torch.arange(20, dtype=torch.float64)
    >>> k = torch.stack([2 * t, -torch.ones(20), 1 - t * t], 1)
    >>> k[0] = torch.tensor([0.0, 0.0, 0.5])  # a BOS key
    >>> c = find_curve(k)
    >>> c.odd.order.tolist(), c.values[:3].tolist()
    ([0], [2.0, 4.0, 6.0])
    """
    n, w = k.shape
    if (
        n < CURVE_MIN_KEYS
        or w == 0
        or k.dtype != torch.float64
        or not bool(torch.isfinite(k).all())
    ):
        return None  # (NaN or inf keys: the dense path decides, as it always has)
    spread = [len(torch.unique(k[:, j])) for j in range(w)]
    for col in sorted(range(w), key=lambda j: -spread[j]):
        if spread[col] < CURVE_MIN_VALUES:
            return None
        got = _fit(k, col, distinct)
        if got is not None:
            return got
    return None


def _fit(k: torch.Tensor, col: int, distinct: Callable) -> Curve | None:
    """The curve with ``u`` the column ``col`` of ``k``, or None (see :func:`find_curve`)."""
    u = k[:, col]
    values = torch.unique(u)  # sorted; three of them (and a key holding each) to fit on
    m = len(values)
    fit = torch.stack([torch.nonzero(u == values[i])[0, 0] for i in (m // 4, m // 2, 3 * m // 4)])
    x = u[fit]
    vander = torch.stack([torch.ones_like(x), x, x * x], 1)
    coef = torch.linalg.solve(vander, k[fit])  # [3, w]: alpha, beta, gamma per column
    coef[:, col] = 0.0
    coef[1, col] = 1.0
    model = coef[0] + u[:, None] * coef[1] + (u * u)[:, None] * coef[2]
    scale = k.abs().amax(dim=0) + 1.0
    dev = (model - k).abs()
    off = (dev > 1e-12 * scale).any(dim=1)
    odd = torch.nonzero(off).flatten()
    _, odd_class = distinct(k[odd]) if len(odd) else (None, odd)
    if len(odd) and int(odd_class.max()) >= MAX_ODD:
        return None
    curve = Curve(k, u, coef, odd, odd_class)
    curve.deviation = dev[~off].amax(dim=0) if bool((~off).any()) else dev[0] * 0
    if len(curve.values) < 3:
        return None
    starts = curve.on.starts
    group = torch.repeat_interleave(torch.arange(len(starts), device=k.device), curve.on.sizes())
    if not torch.equal(k[curve.on.order], curve.rows[group]):  # keys of one u: one row
        return None
    return curve


def select_on_curve(
    curve: Curve, q: torch.Tensor, tolerance: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(keys, counts, others, done)`` for the query rows ``q [Q, w]``: ``done`` marks the
    queries whose window certifies their selection; for those, ``keys`` holds the selected
    key positions query after query (ascending), ``counts`` how many each (0 for the
    others), and ``others`` the best score among the keys not selected (``-inf`` when
    none). Queries not done are for the dense path.

    >>> t = torch.arange(20, dtype=torch.float64)
    >>> k = torch.stack([2 * t, -torch.ones(20), 1 - t * t], 1)
    >>> s = torch.tensor([3.0, 17.0], dtype=torch.float64)
    >>> q = torch.stack([s, s * s, torch.ones(2)], 1)  # score 1 - (s - t)^2
    >>> keys, counts, others, done = select_on_curve(find_curve(k), q, 0.25)
    >>> keys.tolist(), counts.tolist(), others.tolist(), done.tolist()
    ([3, 17], [1, 1], [0.0, 0.0], [True, True])
    """
    a1 = q @ curve.coef[1]
    a2 = q @ curve.coef[2]
    nv = len(curve.values)
    vertex = torch.where(a2 < 0, -a1 / (2 * torch.where(a2 < 0, a2, -1.0)), 0.0)
    mid = torch.searchsorted(curve.values, vertex)
    lo = (mid - WINDOW).clamp(0, max(0, nv - 2 * WINDOW))
    span = min(nv, 2 * WINDOW)
    at = lo[:, None] + torch.arange(span, device=q.device)  # [Q, span] distinct-u indices
    win = (q[:, None, :] * curve.rows[at]).sum(-1)  # [Q, span] exact scores
    odd = q @ curve.odd_rows.T  # [Q, distinct odd rows]
    best = torch.maximum(win.amax(dim=1), odd.amax(dim=1) if odd.shape[1] else win[:, 0])
    cut = hard_threshold(best, tolerance)
    # rounding of the dot products, and the keys' distance from the fitted parabola (the
    # scores along u rise and fall up to that much)
    size = q.abs() @ (curve.rows.abs().amax(dim=0) + curve.k.abs().amax(dim=0))
    slack = 1e3 * torch.finfo(q.dtype).eps * (size + best.abs()) + 4 * (q.abs() @ curve.deviation)
    left_end = (lo == 0) | (win[:, 0] < cut - slack)
    right_end = (lo + span >= nv) | (win[:, -1] < cut - slack)
    done = (a2 < 0) & left_end & right_end & torch.isfinite(best)
    ninf = q.new_full((), float("-inf"))
    # the selection over the window and the odd rows, against their common maximum (a
    # query not done may hold NaN scores, where these differ from ``< cut``: its others are
    # not read)
    in_win = hard_selection(win, tolerance, best=best[:, None])
    in_odd = hard_selection(odd, tolerance, best=best[:, None])
    others = torch.maximum(
        torch.where(in_win, ninf, win).amax(dim=1),
        torch.where(in_odd, ninf, odd).amax(dim=1) if odd.shape[1] else ninf,
    )
    # the selected (query, key) pairs: the keys of each selected u and odd row
    qi, wj = torch.nonzero(in_win & done[:, None], as_tuple=True)
    r1, k1 = curve.on.expand(qi, at[qi, wj])
    oi, oj = torch.nonzero(in_odd & done[:, None], as_tuple=True)
    r2, k2 = curve.odd.expand(oi, oj)
    rows, keys = torch.cat([r1, r2]), torch.cat([k1, k2])
    order = torch.argsort(rows * len(curve.k) + keys)  # by query, then key (as nonzero)
    counts = torch.bincount(rows, minlength=len(q))
    return keys[order], counts, others, done
