"""Discretisers: a function of a number with a finite value set, as ReLU steps between values.

The input is a linear form ``x`` whose value is one of the sorted values ``xs``. Between
neighbours ``lo < hi`` a pair of units ``relu(a (x - t) + 1/2) - relu(a (x - t) - 1/2)``, with
``t`` the midpoint and ``a = 2 / (hi - lo)``, is a step from 0 (at ``x <= lo``) to 1 (at
``x >= hi``); it is weighted by the change of the output there. A first unit ``relu(notbos)``
writes the output at the smallest value. The result is exact at every value in ``xs``
(tracr's numerical MLP uses the same idea on a discretising hidden layer).

``bos_guard`` adds ``-bos_guard * bos`` to every step's input, for inputs that read a large
value at BOS (a selector width head reads 1 there): the steps then stay off at BOS.

>>> import numpy as np
>>> units = step_units("sign", {"x": 1.0}, [-1.0, 0.0, 2.0], [{"y": -1.0}, {}, {"y": 1.0}])
>>> s = {"bos": np.array([1.0, 0, 0, 0]), "notbos": np.array([0.0, 1, 1, 1]),
...      "x": np.array([0.0, -1, 0, 2])}
>>> sum(u.apply(s)["y"] for u in units).tolist()
[0.0, -1.0, 0.0, 1.0]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from attnsim.ir.blocks import BOS, NOTBOS, ReluUnit, linear_form


def close_groups(xs: Sequence[float]) -> list[list[float]]:
    """Sorted values grouped where neighbours differ by float rounding only: 1e-9 relative,
    and near 0 1e-9 of the values' size (at most 1: values of size 1e-6 that differ by 1e-13
    are told apart, 0 and 1e-10 beside 1 are not).

    >>> close_groups([0.0, 1.0, 1.0 + 1e-12, 2.0])
    [[0.0], [1.0, 1.000000000001], [2.0]]
    >>> close_groups([-1.0000001e-06, -1e-06]), close_groups([0.0, 1e-10, 1.0])
    ([[-1.0000001e-06], [-1e-06]], [[0.0, 1e-10], [1.0]])
    """
    size = min(1.0, max((abs(x) for x in xs), default=0.0))
    groups: list[list[float]] = []
    for x in xs:
        if groups and x - groups[-1][0] <= 1e-9 * max(size, abs(x)):
            groups[-1].append(x)
        else:
            groups.append([x])
    return groups


def on_a_ramp(groups: Sequence[Sequence[float]]) -> tuple[float, float, float] | None:
    """``(first, x, next)`` for a value ``x`` of a group of :func:`close_groups` that lies on
    the ramp of the step from its group's first value to the next group's, where the steps
    of :func:`step_units` (flat up to a quarter of the way) no longer give it the group's
    output; None when every value lies on a flat part.

    >>> on_a_ramp(close_groups([0.0, 1.0, 1.0 + 1e-12, 2.0])) is None
    True
    >>> on_a_ramp(close_groups([1e6, 1e6 + 9e-4, 1e6 + 1.5e-3]))  # 9e-4 of a 1.5e-3 step
    (1000000.0, 1000000.0009, 1000000.0015)
    """
    for gi, group in enumerate(groups):
        nxt = groups[gi + 1][0] if gi + 1 < len(groups) else math.inf
        for x in group:
            if x - group[0] > (nxt - group[0]) / 4:
                return group[0], x, nxt
    return None


def _difference(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0.0) - v
    return {k: v for k, v in out.items() if v != 0}


def step_units(
    name: str,
    form: Mapping[str, float],
    xs: Sequence[float],
    outs: Sequence[Mapping[str, float]],
    bos_guard: float = 0.0,
) -> list[ReluUnit]:
    """The units that write ``outs[i]`` where the form's value is ``xs[i]``.

    Args:
        name: the units' name.
        form: the input, a linear form (direction -> coefficient).
        xs: the input's values, sorted and distinct (none: the input never has a value,
            for example a map whose function raises on every value, and nothing is written).
        outs: the output at each value, a linear form (empty: write nothing).
        bos_guard: how much of ``bos`` to subtract from each step's input (see above).

    Returns:
        ``relu(notbos)`` for a non-empty first output, then two units per value whose output
        differs from the previous one.
    """
    if len(xs) != len(outs):
        raise ValueError(f"step_units: {len(xs)} values but {len(outs)} outputs; give one each")
    units = []
    if not xs:
        return units
    if outs[0]:
        units.append(ReluUnit(name, linear_form({NOTBOS: 1.0}), linear_form(outs[0])))
    for i in range(len(xs) - 1):
        lo, hi = xs[i], xs[i + 1]
        delta = _difference(outs[i + 1], outs[i])
        if not delta:
            continue
        t = (lo + hi) / 2
        a = 2.0 / (hi - lo)
        base = {k: a * v for k, v in form.items()}
        up = dict(base)
        up[NOTBOS] = up.get(NOTBOS, 0.0) - a * t + 0.5
        down = dict(base)
        down[NOTBOS] = down.get(NOTBOS, 0.0) - a * t - 0.5
        if bos_guard:
            up[BOS] = up.get(BOS, 0.0) - bos_guard * a
            down[BOS] = down.get(BOS, 0.0) - bos_guard * a
        units.append(ReluUnit(name, linear_form(up), linear_form(delta)))
        neg = {k: -v for k, v in delta.items()}
        units.append(ReluUnit(name, linear_form(down), linear_form(neg)))
    return units


def output_rounding(
    xs: Sequence[float], outs: Sequence[float], size: float, n_terms: int, u: float
) -> tuple[list[float], int | None]:
    """Bounds on the float rounding of :func:`step_units`' numerical output at each value.

    With unit roundoff ``u`` (``2^-53`` in float64) and exact inputs read through a form of
    ``n_terms`` terms whose sizes sum to at most ``F = max(size, |x|)`` at the value ``x``, a
    step between ``lo < hi`` (midpoint ``t``, slope ``a``) has ReLU inputs that round by at
    most ``e = c u (a (F + |t|) + 1)`` with ``c = n_terms + 4`` (the sum over the form and
    ``notbos``, and the rounding of the slope and threshold); a ReLU passes that on at
    most (it is 1-Lipschitz), and a step above ``x`` passes on only what exceeds its distance
    ``a (t - x) - 1/2`` below 0. A step below ``x`` has two ReLUs ``a (x - t) +- 1/2``
    weighted ``+-delta`` (the output's change there): they cancel, and the MLP's sum over its
    ``k`` units that are not 0 there rounds with their size (zeros add exactly). So the
    output at ``x`` rounds by at most
    ``(k + 2) u (|outs[0]| + S) + sum 2 |delta_i| e_i'`` with ``S`` the sum of
    ``|delta_i| (2 a_i (|x| + |t_i|) + 2)`` over the steps below ``x`` and ``e_i'`` the error
    each step passes on.

    Args:
        xs: the values, sorted and distinct.
        outs: the output at each value (finite numbers).
        size: a bound on the summed sizes of the form's terms (0 for a single term: the
            value itself).
        n_terms: the number of terms of the input's form.
        u: the unit roundoff.

    Returns:
        ``(bounds, worst)``: the bound at each value, and the index ``i`` of the step
        (between ``xs[i]`` and ``xs[i + 1]``) whose terms are largest (None without steps).

    >>> b, _ = output_rounding([0.0, 1.0, 2.0], [0.0, 1.0, 4.0], 0.0, 1, 2.0**-53)
    >>> [f"{x:.2g}" for x in b]
    ['0', '8.9e-15', '8e-14']
    >>> b, worst = output_rounding([1.0, 1.006, 6e12], [0.0, 0.01, 3.6e25], 0.0, 1, 2.0**-53)
    >>> b[0] == 0.0, b[2] > 1e9, worst
    (True, True, 1)
    """
    c = n_terms + 4
    steps = [
        ((lo + hi) / 2, 2.0 / (hi - lo), y1 - y0)
        for lo, hi, y0, y1 in zip(xs, xs[1:], outs, outs[1:])
        if y1 != y0
    ]
    index = [i for i, (y0, y1) in enumerate(zip(outs, outs[1:])) if y1 != y0]
    bounds, worst, top = [], None, -1.0
    for x in xs:
        f = max(size, abs(x))
        total, passed = abs(outs[0]) if outs else 0.0, 0.0
        k = 1  # the units not 0 at x: relu(notbos), then two per step below x
        for i, (t, a, delta) in zip(index, steps):
            err = c * u * (a * (f + abs(t)) + 1.0)
            if t < x:
                term = abs(delta) * (2.0 * a * (abs(x) + abs(t)) + 2.0)
                total += term
                passed += 2.0 * abs(delta) * err
                k += 2
                if term > top:
                    worst, top = i, term
            elif err > a * (t - x) - 0.5:  # a step above x that rounding may switch on
                passed += 2.0 * abs(delta) * (err - (a * (t - x) - 0.5))
                total += 2.0 * abs(delta) * err
                k += 2
        bounds.append((k + 2) * u * total + passed if total or passed else 0.0)
    return bounds, worst


def one_hot_rounding(
    xs: Sequence[float],
    outs: Sequence[Mapping[str, float]],
    size: float,
    n_terms: int,
    u: float,
) -> dict[str, float]:
    """Bounds on the float rounding of each entry of :func:`step_units`' vector output.

    The categorical case of :func:`output_rounding`: the output is a vector (a one-hot code)
    and each entry moves by at most 1 at each step that touches it. An entry at the value
    ``x`` rounds by what its own steps pass on (``2 e_i``, with ``e_i`` as there, at the
    summed size ``F = max(size, max |xs|)``) and by the rounding of the MLP's sum over the
    units that write it (``(k + 2) u`` times their sizes); other steps write it nothing.
    Each bound holds at every value; entries no step writes are exact and left out.

    Args:
        xs: the values, sorted and distinct.
        outs: the output vector at each value (direction -> coefficient).
        size: a bound on the summed sizes of the form's terms (0 for a single term).
        n_terms: the number of terms of the input's form.
        u: the unit roundoff.

    >>> b = one_hot_rounding([0.0, 1.0, 2.0], [{"a": 1.0}, {"b": 1.0}, {"c": 1.0}], 0.0, 1, 2**-53)
    >>> sorted(b), max(b.values()) < 1e-13
    (['a', 'b', 'c'], True)
    >>> b = one_hot_rounding([-4.5, -1.5, 6e11], [{"a": 1.0}, {"b": 1.0}, {"c": 1.0}],
    ...                      9e11, 2, 2.0**-53)
    >>> 1e-6 < max(b.values()) < 1e-2
    True
    """
    if len(xs) != len(outs):
        raise ValueError(
            f"one_hot_rounding: {len(xs)} values but {len(outs)} outputs; give one each"
        )
    c = n_terms + 4
    f = max([size] + [abs(x) for x in xs])
    per_entry: dict[str, list[tuple[float, float]]] = {}
    for lo, hi, y0, y1 in zip(xs, xs[1:], outs, outs[1:]):
        delta = _difference(y1, y0)
        if not delta:
            continue
        t, a = (lo + hi) / 2, 2.0 / (hi - lo)
        err = c * u * (a * (f + abs(t)) + 1.0)
        term = 2.0 * a * (f + abs(t)) + 2.0 + 2.0 * err
        for k, v in delta.items():
            per_entry.setdefault(k, []).append((abs(v) * 2.0 * err, abs(v) * term))
    bounds = {}
    for entry, steps in per_entry.items():
        k = 1 + 2 * len(steps)  # relu(notbos) and two units per step that write the entry
        passed = sum(p for p, _ in steps)
        total = 1.0 + sum(s for _, s in steps)
        bounds[entry] = passed + (k + 2) * u * total
    return bounds
