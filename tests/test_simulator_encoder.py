"""U for full encoder layers against torch.nn.TransformerEncoderLayer and the reference."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from attnsim.simulator import spec, universal
from attnsim.simulator.reference import reference
from attnsim.simulator.verify import relative_error, verify


@functools.cache
def encoder_U(n=3, d=4, h=2, ff=6, dtype=torch.float64):
    return universal.build(n, d, h, layer="encoder", max_ff=ff, dtype=dtype)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_matches_torch_transformer_encoder_layer(norm_first, activation):
    U = encoder_U()
    torch.manual_seed(int(norm_first) * 2 + (activation == "gelu"))
    layer = torch.nn.TransformerEncoderLayer(
        4,
        2,
        dim_feedforward=6,
        dropout=0.0,
        activation=activation,
        norm_first=norm_first,
        batch_first=True,
        dtype=torch.float64,
    ).eval()
    X = torch.randn(3, 4, dtype=torch.float64)
    with torch.no_grad():
        want = layer(X[None])[0]
        causal_want = layer(X[None], src_mask=torch.ones(3, 3, dtype=torch.bool).triu(1))[0]
    assert relative_error(U.simulate(layer, X), want) <= 1e-9
    assert relative_error(U.simulate(layer, X, causal=True), causal_want) <= 1e-9


def test_random_encoder_layers_every_variant():
    result = verify(encoder_U(), targets=12, seed=3, progress=False)
    assert result.failures == [] and result.max_error <= 1e-9


def test_smaller_targets_and_interpreter_agree():
    U = encoder_U()
    rng = np.random.default_rng(0)
    for n, d, h, ff in [(1, 1, 1, 1), (2, 2, 2, 3), (3, 4, 1, 6)]:
        X = torch.tensor(rng.standard_normal((n, d)))
        target = spec.random_encoder_layer(
            h, d, ff, seed=n + d, activation="gelu_tanh", norm_first=bool(d % 2)
        )
        want = reference(target, X)
        assert relative_error(U.simulate(target, X), want) <= 1e-9, (n, d, h, ff)
    assert relative_error(U.interpret(target, X), want) <= 1e-9


def test_layer_norm_variance_in_two_passes():
    """Rows with a large mean and a small spread (mean(x^2) - mean^2 would cancel almost
    every digit) and width-1 rows (variance exactly 0, so any rounding left in x - mean is
    magnified by 1/sqrt(eps)): the encoder U stays within 1e-13 of torch."""
    U = encoder_U()
    rng = np.random.default_rng(5)
    for k, norm_first in enumerate((True, False, True, False)):
        d = 4 if k < 2 else 1
        target = spec.random_encoder_layer(
            1 if d == 1 else 2, d, 6, seed=k, norm_first=norm_first, activation="gelu"
        )
        X = torch.tensor(1e3 + 1e-2 * rng.standard_normal((3, d)))
        if not norm_first:  # keep the attention scores of the raw rows small
            X = X - 1e3
        want = reference(target, X)
        assert relative_error(U.simulate(target, X), want) <= 1e-13, (d, norm_first)
    worst = verify(U, targets=40, seed=11, progress=False).max_error
    assert worst <= 1e-13


def test_float32_encoder():
    U = encoder_U(dtype=torch.float32)
    result = verify(U, targets=4, seed=5, progress=False, max_logit=10.0)
    assert result.failures == [] and result.max_error <= 1e-4


def test_encoder_errors():
    U = encoder_U()
    X = torch.zeros(2, 4, dtype=torch.float64)
    with pytest.raises(
        ValueError, match="feed-forward width is 8, but this U was built for at most 6"
    ):
        U.simulate(spec.random_encoder_layer(1, 4, 8, seed=0), X)
    with pytest.raises(ValueError, match="this U simulates encoder layers"):
        U.simulate(spec.random_attention(1, 4, seed=0), X)
    attn_U = universal.build(2, 2, 1)
    with pytest.raises(ValueError, match="build one with layer='encoder'"):
        attn_U.simulate(spec.random_encoder_layer(1, 2, 2, seed=0), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="layer must be 'attention' or 'encoder' or 'decoder'"):
        universal.build(2, 2, 1, layer="mixer")


def test_cli_simulates_saved_modules(tmp_path, capsys):
    import json

    from attnsim.cli import main

    torch.manual_seed(1)
    layer = torch.nn.TransformerEncoderLayer(
        4, 2, dim_feedforward=5, dropout=0.0, norm_first=True, dtype=torch.float64
    )
    path = tmp_path / "layer.pt"
    torch.save(layer.state_dict(), path)
    argv = [
        "simulate",
        "--module",
        str(path),
        "--heads",
        "2",
        "--norm-first",
        "--layer-norm-eps",
        "1e-5",
        "--no-add-zero-attn",
        "--max-n",
        "2",
        "--max-d",
        "4",
        "--max-heads",
        "2",
        "--activation",
        "relu",
        "--json",
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["relative_error"] <= 1e-9 and out["report"]["max_ff"] == 5
    mha = torch.nn.MultiheadAttention(4, 2, dtype=torch.float64)
    torch.save(mha.state_dict(), tmp_path / "mha.pt")
    argv = [
        "simulate",
        "--module",
        str(tmp_path / "mha.pt"),
        "--heads",
        "2",
        "--no-add-zero-attn",
        "--max-d",
        "4",
        "--max-heads",
        "2",
        "--json",
    ]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["relative_error"] <= 1e-9
    torch.save([1, 2], tmp_path / "bad.pt")
    assert main(["simulate", "--module", str(tmp_path / "bad.pt")]) == 2
    assert "does not hold a state_dict" in capsys.readouterr().err
