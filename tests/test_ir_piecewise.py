"""ir.piecewise: the ReLU interpolant is within its certified bound on a dense grid."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnsim.ir import piecewise as P
from attnsim.ir.blocks import NOTBOS

F = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "reciprocal": lambda x: 1.0 / x,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "gelu": np.vectorize(lambda x: 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
}


def run_units(units, xs):
    s = {NOTBOS: np.r_[0.0, np.ones(len(xs))], "x": np.r_[0.0, xs]}
    return sum(u.apply(s)["y"] for u in units)[1:]


@pytest.mark.parametrize(
    "kind, lo, hi, relative",
    [
        ("exp", -5.0, 2.0, False),
        ("exp", -20.0, 20.0, True),
        ("log", 0.1, 10.0, False),
        ("sqrt", 0.0, 4.0, False),
        ("sqrt", 0.5, 4.0, True),
        ("reciprocal", 0.01, 100.0, True),
        ("reciprocal", -3.0, -0.5, False),
        ("rsqrt", 0.2, 5.0, False),
        ("gelu", -4.0, 4.0, False),
        ("gelu_tanh", -4.0, 4.0, False),
    ],
)
def test_units_within_the_bound_on_a_dense_grid(kind, lo, hi, relative):
    pl = P.fit(kind, lo, hi, tolerance=1e-4, relative=relative)
    assert pl.bound <= 1e-4 and pl.relative is relative
    xs = np.linspace(lo, hi, 20_001)
    f = F[kind](xs)
    got = run_units(P.interpolant_units("f", {"x": 1.0}, pl, "y"), xs)
    err = np.abs(got - f) / (np.abs(f) if relative else 1.0)
    assert err.max() <= pl.bound * (1 + 1e-6) + 1e-12, (err.max(), pl.bound)
    # the call form agrees with the units
    some = xs[::997]
    np.testing.assert_allclose([pl(x) for x in some], got[::997], rtol=1e-9, atol=1e-12)


def test_scale_and_the_exp_ramp():
    pl = P.fit("exp", -2.0, 1.0, tolerance=1e-5)
    units = P.interpolant_units("f", {"x": 1.0}, pl, "y", scale=3.0, ramp=True)
    xs = np.array([-10.0, -3.0, -2.5, -2.0, 0.0, 1.0, 5.0])
    got = run_units(units, xs)
    assert got[0] == 0.0 and got[1] == 0.0  # at and beyond one unit below the range: 0
    assert 0 < got[2] <= 3 * math.exp(-2.0)  # on the ramp: within exp(lo) of exp
    np.testing.assert_allclose(got[3:6], 3 * np.exp(xs[3:6]), atol=3 * pl.bound)
    assert got[6] == pytest.approx(got[5])  # flat above the range


@pytest.mark.parametrize(
    "args, message",
    [
        (("log", 0.0, 1.0), r"a log map needs a range above 0"),
        (("reciprocal", -1.0, 1.0), r"a reciprocal map needs a range that excludes 0"),
        (("tan", 0.0, 1.0), r"no ReLU realisation for 'tan'"),
        (("exp", 1.0, 1.0), r"must be finite with lo < hi"),
    ],
)
def test_bad_ranges(args, message):
    with pytest.raises(ValueError, match=message):
        P.fit(*args, tolerance=1e-3)
