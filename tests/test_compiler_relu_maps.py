"""maps="relu": transcendental maps realised with ReLU units within certified bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnsim import rasp
from attnsim.compiler import compile_program
from attnsim.ir import piecewise
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
    pl = piecewise.fit("reciprocal", 1.0, 10.0, tolerance=1e-5)
    xs = np.linspace(1.0, 10.0, 5001)
    assert max(abs(pl(v) - 1.0 / v) for v in xs) <= pl.bound <= 1e-5
    with pytest.raises(ValueError, match="excludes 0"):
        piecewise.fit("reciprocal", -1.0, 1.0, tolerance=1e-3)


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


def test_matrix_softmax_rows_wider_than_the_spread_add_at_most_c_exp_minus_spread():
    # not refused (the ReLU exp ramps to 0 below the range, as masked scores need): the
    # docstring's bound for such rows
    c, tol, spread = 3, 1e-6, 5.0
    model = compile_program(
        programs.softmax(1, c, spread=spread),
        vocab=None,
        max_seq_len=c,
        fixed_length=True,
        maps="relu",
        map_tolerance=tol,
    )
    rows = np.array([[0.0, 0.0, 6.0], [-3.0, 0.0, 3.0], [-40.0, 1.0, 2.0]])
    want = np.exp(rows - rows.max(axis=1, keepdims=True))
    want /= want.sum(axis=1, keepdims=True)
    got = np.asarray(model.run(rows))
    bound = programs.softmax_relu_error_bound(c, tol) + c * np.exp(-spread)
    assert np.abs(got - want).max() <= bound


@pytest.mark.parametrize(
    "kind, lo, hi",
    [
        ("exp", -30.0, 30.0),
        ("reciprocal", 1e-9, 1e9),
        ("reciprocal", -50.0, -0.01),
        ("rsqrt", 1e-6, 1e6),
        ("sqrt", 1e-4, 1e4),
    ],
)
def test_relative_tolerance_holds_across_many_orders_of_magnitude(kind, lo, hi):
    tol = 1e-4
    x = rasp.numerical(rasp.tokens, value_range=(lo, hi))
    prog = getattr(rasp, kind)(x)
    model = compile_program(
        prog, vocab=None, max_seq_len=64, maps="relu", map_tolerance=tol, map_error="relative"
    )
    (row,) = [r for r in model.report().realisations if r["level"] == "bounded"]
    assert row["relative"] and row["bound"] <= tol and "relative |error|" in row["note"]
    rng = np.random.default_rng(1)
    if lo > 0:  # log-uniform samples: every decade of the range is hit
        xs = np.exp(rng.uniform(math.log(lo), math.log(hi), 62))
    else:
        xs = rng.uniform(lo, hi, 62)
    xs = np.concatenate([xs, [lo, hi]])
    got = np.asarray(model.run(xs))
    want = np.asarray(rasp.evaluate(prog, xs))
    rel = np.abs(got - want) / np.abs(want)
    # the certified interpolation bound, plus float64 rounding of sums of that many terms
    assert rel.max() <= row["bound"] + row["units"] * 2.2e-16
    assert rel.max() > 0


def test_relative_tolerance_is_refused_where_f_reaches_zero():
    with pytest.raises(ValueError, match="relative tolerance needs a function with no zero"):
        piecewise.fit("log", 0.5, 2.0, tolerance=1e-3, relative=True)
    with pytest.raises(ValueError, match="relative tolerance"):
        piecewise.fit("sqrt", 0.0, 2.0, tolerance=1e-3, relative=True)
    x = rasp.numerical(rasp.tokens, value_range=(-1.0, 1.0))
    # the compiler keeps an absolute tolerance for maps that reach 0, and says so
    model = compile_program(
        rasp.gelu(x), vocab=None, max_seq_len=2, maps="relu", map_error="relative"
    )
    (row,) = [r for r in model.report().realisations if r["level"] == "bounded"]
    assert not row["relative"] and row["note"].startswith("|error| <= ")
    with pytest.raises(ValueError, match="map_error must be 'absolute' or 'relative'"):
        compile_program(rasp.exp(x), vocab=None, max_seq_len=2, maps="relu", map_error="ulp")


def test_relu_exp_ramps_to_exactly_zero_far_below_its_range():
    x = rasp.numerical(rasp.tokens, value_range=(-5.0, 5.0))
    model = compile_program(rasp.exp(x), vocab=None, max_seq_len=4, maps="relu")
    got = model.run([-1e4, -6.5, -5.5, 0.0])
    assert got[0] == 0.0 and got[1] == 0.0  # one below the range and further: exactly 0
    assert 0.0 < got[2] <= math.exp(-5.0)  # on the ramp: within exp(lo)
    assert abs(got[3] - 1.0) <= 1e-6


def test_wide_maps_widen_only_their_own_layer_and_round_trip(tmp_path):
    x = rasp.numerical(rasp.tokens, value_range=(0.5, 4.0))
    prog = rasp.exp(rasp.numerical(rasp.reciprocal(x) + 1.0, value_range=(1.25, 3.0)))
    model = compile_program(prog, vocab=None, max_seq_len=3, maps="relu", map_tolerance=1e-7)
    cfg = model.model.cfg
    widths = [b.mlp.W_in.shape[1] for b in model.model.blocks]
    assert cfg.mlp_widths == tuple(widths) and max(widths) == cfg.d_mlp
    xs = [0.5, 1.0, 4.0]
    want = [math.exp(1.0 / v + 1.0) for v in xs]
    got = model.run(xs)
    assert max(abs(g - w) for g, w in zip(got, want)) <= 1e-5
    # the sliced MLP (only the rows and columns the units use) agrees with the cached pass,
    # which multiplies the whole hidden layer
    cached, cache = model.run_with_cache(xs)
    assert list(cached) == list(got)
    assert any(v.shape[-1] == cfg.d_mlp for k, v in cache.items() if k.endswith("hook_post"))
    model.save(tmp_path / "m")
    from attnsim.model.compiled import CompiledModel

    back = CompiledModel.load(tmp_path / "m")
    assert back.model.cfg.mlp_widths == cfg.mlp_widths
    assert back.run(xs) == got
