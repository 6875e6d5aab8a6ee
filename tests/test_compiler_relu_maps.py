"""maps="relu": transcendental maps realised with ReLU units within certified bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnsim import rasp
from attnsim.compiler import approximation, compile_program
from attnsim.matrix import programs


@pytest.mark.parametrize(
    "kind, lo, hi",
    [
        ("exp", -6.0, 3.0),
        ("log", 0.2, 9.0),
        ("sqrt", 0.0, 4.0),
        ("reciprocal", 0.5, 8.0),
        ("rsqrt", 0.1, 5.0),
        ("gelu", -5.0, 5.0),
        ("gelu_tanh", -5.0, 5.0),
    ],
)
def test_each_map_is_within_its_certified_bound(kind, lo, hi):
    x = rasp.numerical(rasp.tokens, value_range=(lo, hi))
    prog = getattr(rasp, kind)(x)
    tol = 1e-3 if kind == "sqrt" else 1e-5
    model = compile_program(prog, vocab=None, max_seq_len=64, maps="relu", map_tolerance=tol)
    (row,) = [r for r in model.report().realisations if r["level"] == "bounded"]
    assert row["how"].startswith(f"{kind} by ") and f"|error| <= {tol:.3g}" in row["note"]
    rng = np.random.default_rng(0)
    xs = np.concatenate([rng.uniform(lo, hi, 62), [lo, hi]])
    got = np.asarray(model.run(xs))
    want = np.asarray(rasp.evaluate(prog, xs))  # the interpreter uses the exact function
    assert np.abs(got - want).max() <= tol * (1 + 1e-9)
    assert model.model.cfg.d_native == {} and model.model.cfg.d_bilinear == 0  # ReLU only


def test_inputs_outside_the_declared_range_are_refused():
    x = rasp.numerical(rasp.tokens, value_range=(0.5, 2.0))
    model = compile_program(rasp.reciprocal(x), vocab=None, max_seq_len=3, maps="relu")
    assert abs(model.run([1.0, 2.0, 0.5])[0] - 1.0) <= 1e-6
    with pytest.raises(ValueError, match=r"run-time check failed: .* not inside its declared"):
        model.run([1.0, 3.0, 0.5])


def test_missing_range_is_reported_with_what_to_do():
    x = rasp.numerical(rasp.tokens)
    with pytest.raises(NotImplementedError, match=r"maps='relu' needs the input range"):
        compile_program(rasp.exp(x), vocab=None, max_seq_len=3, maps="relu")
    with pytest.raises(ValueError, match="maps must be 'native' or 'relu'"):
        compile_program(rasp.exp(x), vocab=None, max_seq_len=3, maps="tanh")


def test_map_ranges_by_label_and_fit_bounds():
    x = rasp.numerical(rasp.tokens).named("x")
    model = compile_program(
        rasp.exp(x),
        vocab=None,
        max_seq_len=2,
        maps="relu",
        map_ranges={"x": (-1.0, 1.0)},
        map_tolerance=1e-4,
    )
    assert abs(model.run([0.5, -0.5])[0] - math.exp(0.5)) <= 1e-4
    pl = approximation.fit("reciprocal", 1.0, 10.0, tolerance=1e-5)
    xs = np.linspace(1.0, 10.0, 5001)
    assert max(abs(pl(v) - 1.0 / v) for v in xs) <= pl.bound <= 1e-5
    with pytest.raises(ValueError, match="excludes 0"):
        approximation.fit("reciprocal", -1.0, 1.0, tolerance=1e-3)


@pytest.mark.parametrize("shape", [(1, 2), (2, 3), (3, 3)])
def test_matrix_softmax_with_relu_exp_is_within_the_certified_bound(shape):
    r, c = shape
    tol = 1e-6
    prog = programs.softmax(r, c, spread=8.0)
    model = compile_program(
        prog, vocab=None, max_seq_len=r * c, fixed_length=True, maps="relu", map_tolerance=tol
    )
    bound = programs.softmax_relu_error_bound(c, tol)
    rng = np.random.default_rng(r * 10 + c)
    S = rng.uniform(-4.0, 4.0, (40, r, c))  # spread <= 8
    want = np.exp(S - S.max(axis=2, keepdims=True))
    want /= want.sum(axis=2, keepdims=True)
    got = np.asarray(model.run(S.reshape(40, -1)))
    measured = np.abs(got - want.reshape(40, -1)).max()
    assert measured <= bound
    assert measured > 0  # bounded, not exact: the test would notice a native realisation
