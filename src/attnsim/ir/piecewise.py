"""Piecewise-linear ReLU realisations of elementwise functions, with certified error bounds.

On an interval of width h, the linear interpolant of a twice-differentiable f is off by at
most ``h^2 / 8 * max|f''|`` on that interval. ``fit`` places knots greedily so that every
interval meets the tolerance, using an upper bound of ``|f''|`` on the interval that is
known in closed form for each supported function. The tolerance is absolute, or with
``relative=True`` relative to ``min|f|`` on each interval (for functions without a zero on the
range: exp, 1/x, 1/sqrt(x), sqrt above 0), which suits ranges where f spans many orders of
magnitude. Outside ``[lo, hi]`` the realisation is flat (the compiled model checks at run time
that inputs stay inside), except below ``lo`` for exp, where ``interpolant_units(ramp=True)``
ramps it down to 0 at ``lo - 1`` (the error there is at most ``exp(lo)``, and far below it the
value is exactly 0).

``interpolant_units`` writes the interpolant as ReLU units: a constant (the value at one end)
plus one unit per knot where the slope changes.

>>> pl = fit("exp", -2.0, 2.0, tolerance=1e-3)
>>> len(pl.knots) > 10, pl.bound <= 1e-3
(True, True)
>>> abs(pl(0.3) - 1.3498588075760032) <= pl.bound
True
>>> r = fit("reciprocal", 1e-3, 1e3, tolerance=1e-4, relative=True)
>>> abs(r(0.5) * 0.5 - 1.0) <= r.bound <= 1e-4
True
>>> import numpy as np
>>> units = interpolant_units("exp", {"x": 1.0}, pl, "y")
>>> s = {"notbos": np.array([0.0, 1.0]), "x": np.array([0.0, 0.3])}
>>> bool(abs(sum(u.apply(s)["y"] for u in units)[1] - math.exp(0.3)) <= pl.bound)
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from attnsim.ir.blocks import NOTBOS, ReluUnit, linear_form

KINDS = ("exp", "log", "sqrt", "reciprocal", "rsqrt", "gelu", "gelu_tanh")
_PHI0 = 1.0 / math.sqrt(2.0 * math.pi)


def _f(kind: str):
    return {
        "exp": math.exp,
        "log": math.log,
        "sqrt": math.sqrt,
        "reciprocal": lambda x: 1.0 / x,
        "rsqrt": lambda x: 1.0 / math.sqrt(x),
        "gelu": lambda x: 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))),
        "gelu_tanh": lambda x: (
            0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
        ),
    }[kind]


def curvature_bound(kind: str, a: float, b: float) -> float:
    """An upper bound of ``|f''|`` on ``[a, b]`` (closed forms; monotone where used)."""
    if kind == "exp":
        return math.exp(b)
    if kind == "log":
        return 1.0 / (a * a)
    if kind == "sqrt":
        return 0.25 * a**-1.5 if a > 0 else math.inf
    if kind == "reciprocal":
        m = min(abs(a), abs(b))
        return 2.0 / m**3
    if kind == "rsqrt":
        return 0.75 * a**-2.5
    if kind in ("gelu", "gelu_tanh"):
        # |gelu''(x)| = |phi(x) (2 - x^2)| <= 2 phi(0); the tanh form stays below 1
        return 2.0 * _PHI0 if kind == "gelu" else 1.0
    raise ValueError(f"no curvature bound for {kind!r}; expected one of {KINDS}")


def min_abs(kind: str, a: float, b: float) -> float:
    """A lower bound of ``|f|`` on ``[a, b]`` for the kinds with no zero there (monotone).

    >>> min_abs("reciprocal", 2.0, 4.0)
    0.25
    """
    f = _f(kind)
    return min(abs(f(a)), abs(f(b)))


RELATIVE_KINDS = ("exp", "reciprocal", "rsqrt", "sqrt")


def _check_domain(kind: str, lo: float, hi: float) -> None:
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"the range of a {kind} map must be finite with lo < hi, got [{lo}, {hi}]")
    if kind in ("log", "rsqrt") and lo <= 0:
        raise ValueError(f"a {kind} map needs a range above 0, got [{lo}, {hi}]")
    if kind == "sqrt" and lo < 0:
        raise ValueError(f"a sqrt map needs a range at or above 0, got [{lo}, {hi}]")
    if kind == "reciprocal" and lo <= 0 <= hi:
        raise ValueError(f"a reciprocal map needs a range that excludes 0, got [{lo}, {hi}]")


@dataclass(frozen=True)
class PiecewiseLinear:
    """The interpolant through ``(knots[k], values[k])``, flat outside the knots.

    Attributes:
        kind: the function.
        knots / values: the interpolation points.
        bound: the certified max |f - interpolant| on [knots[0], knots[-1]], or with
            ``relative`` the max of |f - interpolant| / |f| there.
        relative: whether ``bound`` is relative.
    """

    kind: str
    knots: tuple[float, ...]
    values: tuple[float, ...]
    bound: float
    relative: bool = False

    def __call__(self, x: float) -> float:
        ks, vs = self.knots, self.values
        if x <= ks[0]:
            return vs[0]
        if x >= ks[-1]:
            return vs[-1]
        lo, hi = 0, len(ks) - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ks[mid] <= x:
                lo = mid
            else:
                hi = mid
        t = (x - ks[lo]) / (ks[hi] - ks[lo])
        return vs[lo] + t * (vs[hi] - vs[lo])

    @property
    def slopes(self) -> list[float]:
        ks, vs = self.knots, self.values
        return [(vs[k + 1] - vs[k]) / (ks[k + 1] - ks[k]) for k in range(len(ks) - 1)]


def fit(
    kind: str,
    lo: float,
    hi: float,
    *,
    tolerance: float,
    relative: bool = False,
    max_knots: int = 200_000,
) -> PiecewiseLinear:
    """Knots on ``[lo, hi]`` such that the interpolant is within ``tolerance`` of f.

    Args:
        kind: one of ``KINDS``.
        lo, hi: the range.
        tolerance: the largest error allowed.
        relative: the error is relative to ``|f|`` (only for ``RELATIVE_KINDS``, with
            ``lo > 0`` for sqrt).
        max_knots: refuse ranges that need more knots than this.

    Raises:
        ValueError: an unknown function, a range outside its domain, a relative tolerance
            for a function that reaches 0, or more than ``max_knots`` knots needed (widen
            the tolerance or narrow the range).
    """
    if kind not in KINDS:
        raise ValueError(f"no ReLU realisation for {kind!r}; expected one of {KINDS}")
    if not tolerance > 0:
        raise ValueError(f"tolerance must be positive, got {tolerance}")
    _check_domain(kind, lo, hi)
    if relative and (kind not in RELATIVE_KINDS or (kind == "sqrt" and lo <= 0)):
        raise ValueError(
            f"a relative tolerance needs a function with no zero on the range; {kind} on "
            f"[{lo}, {hi}] does not qualify (relative works for {RELATIVE_KINDS}, sqrt above 0)"
        )
    f = _f(kind)

    def err(h: float, x: float) -> float:
        if kind == "sqrt" and x == 0.0:
            e = math.sqrt(h) / 4.0  # the interpolant of sqrt on [0, h] is off by sqrt(h)/4
        else:
            e = h * h / 8.0 * curvature_bound(kind, x, x + h)
        return e / min_abs(kind, x, x + h) if relative else e

    knots = [lo]
    worst = 0.0
    x = lo
    h = hi - lo
    while x < hi:
        h = min(hi - x, 4.0 * h)  # steps change slowly: start near the previous one
        while err(h, x) > tolerance:
            h /= 2.0
            if h < 1e-300 or x + h == x:
                raise ValueError(f"cannot reach tolerance {tolerance} for {kind} near {x}")
        # grow back towards the largest step that still meets the tolerance
        step = h / 2.0
        for _ in range(16):
            if x + h + step <= hi and err(h + step, x) <= tolerance:
                h += step
            step /= 2.0
        worst = max(worst, err(h, x))
        x = hi if hi - (x + h) <= 1e-12 * h else x + h
        knots.append(x)
        if len(knots) > max_knots:
            raise ValueError(
                f"a ReLU {kind} on [{lo}, {hi}] to {tolerance:g} needs more than {max_knots} "
                "knots; widen the tolerance or narrow the declared range"
            )
    return PiecewiseLinear(kind, tuple(knots), tuple(f(k) for k in knots), worst, relative)


def interpolant_units(
    name: str,
    form: Mapping[str, float],
    pl: PiecewiseLinear,
    out: str,
    *,
    scale: float = 1.0,
    ramp: bool = False,
) -> list[ReluUnit]:
    """ReLU units writing ``scale * pl(x)`` to ``out``, where x is the linear form ``form``.

    The sum is anchored at the end where f is flatter (the constant unit ``relu(notbos)``
    holds the value there), so that inside the range every active unit adds terms of one sign
    for convex monotone f: no cancellation, even where f spans many orders of magnitude (1/x
    on ``[e^-50, e^50]``). The interpolant is flat outside the knots.

    Args:
        name: the units' name.
        form: the input (direction -> coefficient).
        pl: the interpolant, from :func:`fit`.
        out: the direction written.
        scale: a factor on every output weight (``c / x`` is ``c`` times a reciprocal).
        ramp: prepend the knot ``(knots[0] - 1, 0)``: below the range the output falls to
            exactly 0 (for exp, whose inputs may be pushed far down).

    Returns:
        The units: the constant first, then one per knot with a change of slope.
    """
    knots, values = list(pl.knots), list(pl.values)
    if ramp:
        knots.insert(0, knots[0] - 1.0)
        values.insert(0, 0.0)
    slopes = [
        (values[k + 1] - values[k]) / (knots[k + 1] - knots[k]) for k in range(len(knots) - 1)
    ]
    # the slope changes at each knot (flat outside the knots)
    deltas = [s1 - s0 for s0, s1 in zip([0.0, *slopes], [*slopes, 0.0])]
    left = abs(slopes[-1]) < abs(slopes[0])
    inputs_list = [((NOTBOS, 1.0),)]
    outs = [(values[-1] if left else values[0]) * scale]
    for x_k, delta in zip(knots, deltas):
        if delta == 0.0:
            continue
        if left:  # delta * relu(x_k - x)
            inputs = {k: -c for k, c in form.items()}
            inputs[NOTBOS] = inputs.get(NOTBOS, 0.0) + x_k
        else:  # delta * relu(x - x_k)
            inputs = dict(form)
            inputs[NOTBOS] = inputs.get(NOTBOS, 0.0) - x_k
        inputs_list.append(linear_form(inputs))
        outs.append(delta * scale)
    return [ReluUnit(name, lf, ((out, w),)) for lf, w in zip(inputs_list, outs)]
