"""The universal simulator U with maps="relu": exp and 1/x by ReLU units, certified bounds.

The oracle is plain-torch attention (``simulator.reference``); the bound under test is
``U.error_bound`` (the per-map certified relative errors carried through the softmax).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import pytest
import torch

from attnsim.simulator import spec, universal, verify
from attnsim.simulator.reference import reference

# small builds and a loose tolerance keep the ReLU widths (and the suite) small
LOGITS = 12.0
TOL = 1e-5


@functools.cache
def relu_u(n: int, d: int, h: int, dtype=torch.float64):
    return universal.build(
        n, d, h, maps="relu", logit_bound=LOGITS, map_tolerance=TOL, dtype=dtype, layout="scalar"
    )  # the scalar layout (merged targets); tests/test_simulator_vector.py has the other


def test_relu_u_has_only_relu_and_bilinear_units_and_the_same_depth():
    U = relu_u(3, 4, 2)
    cfg = U.model.model.cfg
    assert cfg.d_native == {}  # no exp or reciprocal units
    r = U.report()
    assert (r.layers, r.attention_layers) == (6, 5)  # as the native U
    assert U.maps == "relu" and U.logit_bound == LOGITS
    assert set(U.map_bounds) == {"e", "inv_Z"}
    assert all(0 < b <= TOL for b in U.map_bounds.values())
    # only the exp and 1/Z layers are wide; the other layers keep their own (small) widths.
    # 1/Z covers [1/2, 2 e max_n] only (the row sums of a shifted softmax), so it is far
    # narrower than exp
    widths = sorted(b.mlp.W_in.shape[1] for b in U.model.model.blocks)
    assert widths[-1] > 2000 and 100 < widths[-2] < widths[-1] / 4 and widths[0] == 0


@pytest.mark.parametrize("sizes", [(2, 2, 1), (3, 4, 2)])
def test_every_entry_is_within_its_certified_bound(sizes):
    U = relu_u(*sizes)
    rng = np.random.default_rng(sum(sizes))
    worst_rel, worst_ratio = 0.0, 0.0
    for _ in range(15):
        target, X, _ = verify.random_target(rng, *sizes, LOGITS)
        got, want = U.simulate(target, X), reference(target, X)
        bound = U.error_bound(target, X)
        ratio = float(((got - want).abs() / bound).max())
        assert ratio <= 1.0
        worst_ratio = max(worst_ratio, ratio)
        worst_rel = max(worst_rel, verify.relative_error(got, want))
    # the bound is not vacuous: it is a few times the tolerance, and the error is real
    assert worst_rel <= 10 * TOL
    assert 1e-9 < worst_rel and worst_ratio > 1e-3


def test_bound_composition_matches_the_per_map_bounds():
    U = relu_u(2, 2, 1)
    target = spec.random_attention(1, 2, seed=3)
    X = torch.tensor([[0.5, -1.0], [1.5, 0.25]], dtype=torch.float64)
    eps_e, eps_r = U.map_bounds["e"], U.map_bounds["inv_Z"]
    kappa = (1 + eps_e) * (1 + eps_r) / (1 - eps_e) - 1
    from attnsim.simulator.reference import pattern, values

    merged = target.merged()
    weight = (pattern(merged, X) @ values(merged, X).abs()).sum(0)
    bound = U.error_bound(target, X)
    assert torch.all(bound >= kappa * weight) and torch.all(bound <= (kappa + 1e-9) * weight + 1e-9)
    native = universal.build(2, 2, 1, layout="scalar")
    assert float(native.error_bound(target, X).max()) < 1e-10  # rounding only


def test_rows_far_beyond_the_logit_bound_stay_within_the_certificate():
    """U shifts each row by its maximum: scores of size 20 (or 5,000) with logit_bound 12
    are fine, and a key far below its row's maximum is within e^-24 absolutely."""
    U = relu_u(2, 2, 1)
    X = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    for scale in (20.0, 5000.0, -5000.0):
        target = spec.MergedAttention(A=torch.eye(2)[None] * scale, W_OV=torch.eye(2)[None])
        got, want = U.simulate(target, X), reference(target, X)
        assert bool(((got - want).abs() <= U.error_bound(target, X)).all())
        assert verify.relative_error(got, want) <= 10 * TOL
    # causal: a masked (future) score may be large
    A = torch.tensor([[[0.0, 30.0], [0.0, 0.0]]], dtype=torch.float64)
    causal = spec.MergedAttention(A=A, W_OV=torch.eye(2)[None], causal=True)
    got, want = U.simulate(causal, X), reference(causal, X)
    assert float((got - want).abs().max()) <= float(U.error_bound(causal, X).max())


def test_scores_beyond_the_score_bound_are_refused_by_the_run_time_check():
    U = relu_u(2, 2, 1)
    X = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    target = spec.MergedAttention(A=torch.eye(2)[None] * 2e4, W_OV=torch.eye(2)[None])
    with pytest.raises(
        ValueError,
        match=r"score of query row 0 and key row 0 in head 0 is 20000, beyond \+-10000, the "
        r"score bound this U was built for .*build U with a larger score_bound",
    ):
        U.simulate(target, X)


def test_masked_keys_contribute_exactly_zero():
    """Padding keys sit 2,000 below the range, where the ReLU exp is exactly 0: a target
    whose rows see one key gives that key's value up to the 1/Z and exp bounds only."""
    U = relu_u(3, 2, 1)
    X = torch.tensor([[0.3, -0.7]], dtype=torch.float64)  # n = 1: two padding keys
    target = spec.random_attention(1, 2, seed=5)
    got, want = U.simulate(target, X), reference(target, X)
    assert float((got - want).abs().max()) <= float(U.error_bound(target, X).max())


def test_build_arguments_are_checked():
    with pytest.raises(ValueError, match="value_bound must be positive and finite"):
        universal.build(2, 2, 1, layer="encoder", maps="relu", value_bound=-1.0)
    with pytest.raises(ValueError, match=r"logit_bound must be in \(0, 350\]"):
        universal.build(2, 2, 1, maps="relu", logit_bound=math.inf)
    with pytest.raises(ValueError, match=r"score_bound must be in \(0, 1e\+09\]"):
        universal.build(2, 2, 1, score_bound=1e10)
    with pytest.raises(ValueError, match=r"score_bound must be in \(0, \d+\] .* float32"):
        universal.build(2, 2, 1, score_bound=1e5, dtype=torch.float32)
    with pytest.raises(ValueError, match="maps must be 'native' or 'relu'"):
        universal.build(2, 2, 1, maps="tanh")


def test_verify_uses_the_entrywise_bound_for_relu_maps():
    U = relu_u(2, 2, 1)
    result = verify.verify(U, targets=6, seed=2, progress=False)
    assert result.failures == []
    assert result.map_bounds == U.map_bounds
    assert 0 < result.max_bound_ratio <= 1.0
    assert result.max_error <= result.max_certified


def test_float32_relu_u_stays_within_its_bound():
    U = relu_u(2, 2, 1, dtype=torch.float32)
    rng = np.random.default_rng(4)
    for _ in range(5):
        target, X, _ = verify.random_target(rng, 2, 2, 1, LOGITS)
        got, want = U.simulate(target, X), reference(target, X)
        assert bool(((got - want).abs() <= U.error_bound(target, X)).all())


def test_cli_verify_with_relu_maps(capsys, monkeypatch):
    from attnsim.cli import main

    monkeypatch.setenv("COLUMNS", "200")  # rich wraps at the terminal width

    code = main(
        ["verify", "--max-n", "2", "--max-d", "2", "--maps", "relu", "--logit-bound", "8",
         "--map-tolerance", "1e-4", "--targets", "3"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "ReLU map e: certified relative error <= 0.0001" in out
    assert "largest |error| / bound" in out and "failures 0" in out


@functools.cache
def relu_encoder():
    return universal.build(
        3, 4, 2, layer="encoder", maps="relu", logit_bound=LOGITS, value_bound=10.0,
        map_tolerance=TOL,
    )  # fmt: skip


def test_encoder_u_with_relu_maps_tracks_torch_encoder_layers():
    U = relu_encoder()
    assert U.model.model.cfg.d_native == {}
    bounds = U.map_bounds
    assert {"e", "inv_Z", "ln_input_rsqrt", "ln_middle_rsqrt", "ln_output_rsqrt"} <= set(bounds)
    assert {"ffn_gelu", "ffn_gelu_tanh"} <= set(bounds)
    assert all(0 < b <= TOL for b in bounds.values())
    torch.manual_seed(0)
    worst = 0.0
    for norm_first in (False, True):
        for activation in ("relu", "gelu"):
            layer = torch.nn.TransformerEncoderLayer(
                4, 2, dim_feedforward=8, dropout=0.0, activation=activation,
                norm_first=norm_first, batch_first=True, dtype=torch.float64,
            ).eval()  # fmt: skip
            X = torch.randn(3, 4, dtype=torch.float64)
            with torch.no_grad():
                want = layer(X[None])[0]
            got = U.simulate(layer, X)
            worst = max(worst, verify.relative_error(got, want))
    assert 0 < worst <= 100 * TOL  # bounded maps: a real, small error


def test_encoder_ranges_are_checked_while_u_runs():
    """U's own run-time checks watch what its ReLU maps read; no reference is consulted."""
    U = relu_encoder()
    layer = spec.random_encoder_layer(2, 4, 8, seed=1, activation="gelu")
    X = torch.randn(3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    big = dataclasses.replace(layer, ffn=dataclasses.replace(layer.ffn, W1=layer.ffn.W1 * 1e3))
    with pytest.raises(
        ValueError,
        match=r"feed-forward pre-activations reach -?[\d.e+]+ for row \d and hidden unit \d+, "
        r"beyond the value bound 10 .*build U with a larger value_bound",
    ):
        U.simulate(big, X)
    with pytest.raises(
        ValueError,
        match=r"LayerNorm '\w+' \(.*\): the variance plus eps .* outside \[1e-06, 102\].*"
        r"build U with a larger value_bound",
    ):
        U.simulate(layer, X * 30.0)
    # a pre-norm layer normalises X first: rows of 30 (variance 0) stay in every map's range
    # and are simulated within the maps' bounds (the old up-front check refused |X| > 10)
    pre = spec.random_encoder_layer(2, 4, 8, seed=1, activation="gelu", norm_first=True)
    flat = torch.full((2, 4), 30.0, dtype=torch.float64)
    assert verify.relative_error(U.simulate(pre, flat), reference(pre, flat)) <= 100 * TOL
    tiny_eps = torch.nn.TransformerEncoderLayer(
        4, 2, dim_feedforward=8, dropout=0.0, layer_norm_eps=1e-9, dtype=torch.float64
    ).eval()
    with pytest.raises(ValueError, match=r"norm1.eps = 1e-09 is outside \[1e-06, 1\]"):
        U.simulate(tiny_eps, torch.zeros(2, 4, dtype=torch.float64))
    result = verify.verify(U, targets=4, seed=3, progress=False)
    assert result.failures == [] and result.max_error <= result.tolerance
    assert result.tolerance == pytest.approx(1e3 * max(U.map_bounds.values()))
