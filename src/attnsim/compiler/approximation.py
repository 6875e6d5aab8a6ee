"""Piecewise-linear ReLU realisations of elementwise functions, with certified error bounds.

On an interval of width h, the linear interpolant of a twice-differentiable f is off by at
most ``h^2 / 8 * max|f''|`` on that interval. ``fit`` places knots greedily so that every
interval meets the tolerance, using an upper bound of ``|f''|`` on the interval that is
known in closed form for each supported function. Outside ``[lo, hi]`` the realisation is
flat (the compiled model checks at run time that inputs stay inside, except below ``lo`` for
exp, where the error is at most ``exp(lo)``).

>>> pl = fit("exp", -2.0, 2.0, tolerance=1e-3)
>>> len(pl.knots) > 10, pl.bound <= 1e-3
(True, True)
>>> abs(pl(0.3) - 1.3498588075760032) <= pl.bound
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
        bound: the certified max |f - interpolant| on [knots[0], knots[-1]].
    """

    kind: str
    knots: tuple[float, ...]
    values: tuple[float, ...]
    bound: float

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
    kind: str, lo: float, hi: float, *, tolerance: float, max_knots: int = 200_000
) -> PiecewiseLinear:
    """Knots on ``[lo, hi]`` such that the interpolant is within ``tolerance`` of f.

    Raises:
        ValueError: an unknown function, a range outside its domain, or more than
            ``max_knots`` knots needed (widen the tolerance or narrow the range).
    """
    if kind not in KINDS:
        raise ValueError(f"no ReLU realisation for {kind!r}; expected one of {KINDS}")
    if not tolerance > 0:
        raise ValueError(f"tolerance must be positive, got {tolerance}")
    _check_domain(kind, lo, hi)
    f = _f(kind)
    knots = [lo]
    worst = 0.0
    x = lo
    while x < hi:
        h = hi - x

        # sqrt at 0: the interpolant of sqrt on [0, h] is off by sqrt(h)/4 at most
        def err(h: float, x: float = x) -> float:
            if kind == "sqrt" and x == 0.0:
                return math.sqrt(h) / 4.0
            return h * h / 8.0 * curvature_bound(kind, x, x + h)

        while err(h) > tolerance:
            h /= 2.0
            if h < 1e-300:
                raise ValueError(f"cannot reach tolerance {tolerance} for {kind} near {x}")
        # grow back towards the largest step that still meets the tolerance
        step = h / 2.0
        for _ in range(30):
            if x + h + step <= hi and err(h + step) <= tolerance:
                h += step
            step /= 2.0
        worst = max(worst, err(h))
        x = min(hi, x + h)
        knots.append(x)
        if len(knots) > max_knots:
            raise ValueError(
                f"a ReLU {kind} on [{lo}, {hi}] to {tolerance:g} needs more than {max_knots} "
                "knots; widen the tolerance or narrow the declared range"
            )
    return PiecewiseLinear(kind, tuple(knots), tuple(f(k) for k in knots), worst)
