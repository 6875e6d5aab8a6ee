"""ir.discretise: the steps give each value's output exactly, and stay off at BOS."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim.ir import discretise as D
from attnsim.ir.blocks import BOS, NOTBOS


def run(units, values, out, bos_value=0.0):
    n = len(values)
    s = {
        BOS: np.r_[1.0, np.zeros(n)],
        NOTBOS: np.r_[0.0, np.ones(n)],
        "x": np.r_[bos_value, np.asarray(values, dtype=np.float64)],
    }
    total = np.zeros(n + 1)
    for u in units:
        total = total + u.apply(s).get(out, 0.0)
    return total


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-50, 50), min_size=1, max_size=12, unique=True),
    st.integers(0, 10**6),
)
def test_bucket_of_every_value(xs, seed):
    xs = sorted(float(x) / 4 for x in xs)
    outs = np.random.default_rng(seed).integers(-3, 4, size=len(xs)).astype(float)
    units = D.step_units("f", {"x": 1.0}, xs, [{"y": o} if o else {} for o in outs])
    got = run(units, xs, "y")
    assert got[0] == 0.0
    np.testing.assert_allclose(got[1:], outs, atol=1e-12)


def test_one_hot_buckets():
    xs = [1.0, 2.0, 4.0]
    outs = [{"b:low": 1.0}, {"b:low": 1.0}, {"b:high": 1.0}]
    units = D.step_units("bucket", {"x": 1.0}, xs, outs)
    assert len(units) == 3  # the first value, then one step (two units) where it changes
    assert run(units, xs, "b:low").tolist() == [0.0, 1.0, 1.0, 0.0]
    assert run(units, xs, "b:high").tolist() == [0.0, 0.0, 0.0, 1.0]


def test_bos_guard_keeps_the_steps_off_at_bos():
    # a width head reads 1/(w+1): 1 at BOS, which is also the value for w = 0
    ws = [0, 1, 2, 3]
    xs = sorted(1.0 / (w + 1) for w in ws)
    outs = [{"w": float(round(1 / x - 1))} if round(1 / x - 1) else {} for x in xs]
    units = D.step_units("w", {"x": 1.0}, xs, outs, bos_guard=2.0)
    got = run(units, [1.0 / (w + 1) for w in ws], "w", bos_value=1.0)
    np.testing.assert_allclose(got, [0.0, *ws], atol=1e-12)


@pytest.mark.parametrize(
    "xs, groups",
    [
        ([0.0, 1e-10, 1.0], [[0.0, 1e-10], [1.0]]),
        ([1e6, 1e6 + 1e-4, 2e6], [[1e6, 1e6 + 1e-4], [2e6]]),
        ([0.1, 0.2, 0.3], [[0.1], [0.2], [0.3]]),
    ],
)
def test_close_groups(xs, groups):
    assert D.close_groups(xs) == groups
