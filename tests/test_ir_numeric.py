"""ir.numeric: ReLU, product, default and native constructions against numpy."""

from __future__ import annotations

import numpy as np

from attnsim.ir import numeric as N
from attnsim.ir.blocks import BOS, NOTBOS


def stream(**dirs):
    n = len(next(iter(dirs.values())))
    s = {BOS: np.r_[1.0, np.zeros(n)], NOTBOS: np.r_[0.0, np.ones(n)]}
    s.update({d: np.r_[0.0, np.asarray(v, dtype=np.float64)] for d, v in dirs.items()})
    return s


def total(units, s, out):
    return sum(u.apply(s).get(out, 0.0) for u in units)


def test_relu_and_abs_of_a_linear_form():
    x = np.array([-3.0, -0.5, 0.0, 2.0])
    s = stream(x=x, c=np.ones(4))
    form = {"x": 2.0, NOTBOS: 1.0}  # 2x + 1
    np.testing.assert_array_equal(
        total(N.relu_units("r", form, "y"), s, "y")[1:], np.maximum(2 * x + 1, 0)
    )
    np.testing.assert_array_equal(
        total(N.relu_units("a", form, "y", absolute=True), s, "y")[1:], np.abs(2 * x + 1)
    )


def test_product_and_square():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=6), rng.normal(size=6)
    s = stream(x=x, y=y)
    got = N.product_unit("p", {"x": 1.0, NOTBOS: 2.0}, {"y": -1.0}, "out").apply(s)["out"]
    np.testing.assert_allclose(got, np.r_[0.0, (x + 2) * -y], rtol=1e-15)
    sq = N.product_unit("s", {"x": 1.0}, {"x": 1.0}, "x2").apply(s)["x2"]
    np.testing.assert_array_equal(sq, np.r_[0.0, x * x])


def test_gated_constant_writes_the_default_where_the_flag_is_up():
    s = stream(flag=[0.0, 1.0, 0.0])
    s[BOS] = np.r_[1.0, 0, 0, 0]
    s["flag"][0] = 1.0  # a head reading BOS raises the flag at BOS too: notbos keeps it clean
    got = N.gated_constant_unit("d", "flag", "out", -7.5).apply(s)["out"]
    assert got.tolist() == [0.0, 0.0, -7.5, 0.0]


def test_native_unit_scales_and_gates():
    s = stream(x=[0.5, 2.0])
    got = N.native_unit("inv", "reciprocal", {"x": 1.0}, "y", scale=3.0).apply(s)["y"]
    assert got.tolist() == [0.0, 6.0, 1.5]
