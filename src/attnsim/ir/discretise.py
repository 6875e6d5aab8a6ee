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

from collections.abc import Mapping, Sequence

from attnsim.ir.blocks import BOS, NOTBOS, ReluUnit, linear_form


def close_groups(xs: Sequence[float]) -> list[list[float]]:
    """Sorted values grouped where neighbours differ by float rounding only (1e-9 relative).

    >>> close_groups([0.0, 1.0, 1.0 + 1e-12, 2.0])
    [[0.0], [1.0, 1.000000000001], [2.0]]
    """
    groups: list[list[float]] = []
    for x in xs:
        if groups and x - groups[-1][0] <= 1e-9 * max(1.0, abs(x)):
            groups[-1].append(x)
        else:
            groups.append([x])
    return groups


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
