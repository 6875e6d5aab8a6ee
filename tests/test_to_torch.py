"""simulator.to_torch: specs back into torch modules (the inverse of from_torch)."""

from __future__ import annotations

import pytest
import torch

from attnsim.simulator import sampling
from attnsim.simulator.adapters import from_torch
from attnsim.simulator.reference import reference
from attnsim.simulator.to_torch import to_torch

F64 = torch.float64


@pytest.mark.parametrize("heads, d", [(1, 3), (2, 4), (4, 8)])
def test_attention_round_trip(heads, d):
    spec = sampling.random_attention(heads, d, seed=heads, bias=True)
    module = to_torch(spec)
    X = torch.randn(5, d, dtype=F64, generator=torch.Generator().manual_seed(d))
    with torch.no_grad():
        got = module(X[None], X[None], X[None], need_weights=False)[0][0]
    assert torch.allclose(got, reference(spec, X), rtol=1e-12, atol=1e-13)
    back = from_torch(module)
    for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O"):
        assert torch.equal(getattr(back, name), getattr(spec, name)), name


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_the_reference(activation, norm_first):
    spec = sampling.random_encoder_layer(
        2, 4, 6, seed=1, activation=activation, norm_first=norm_first
    )
    module = to_torch(spec)
    X = torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(2))
    # with gradients on: torch's fast inference path computes the exact GELU even for
    # nn.GELU(approximate="tanh") (torch 2.13), the slow path the module's own activation
    got = module(X[None])[0].detach()
    assert torch.allclose(got, reference(spec, X), rtol=1e-12, atol=1e-13)
    assert from_torch(module).ffn.activation.value == activation


def test_what_torch_cannot_hold():
    with pytest.raises(ValueError, match="relu, gelu or tanh-gelu"):
        to_torch(sampling.random_encoder_layer(1, 2, 4, seed=0, activation="maxmin"))
    wide = sampling.random_attention(2, 4, seed=0)
    import dataclasses

    with pytest.raises(ValueError, match="score scale"):
        to_torch(dataclasses.replace(wide, scale=0.25))
    with pytest.raises(TypeError, match="AttentionSpec or EncoderLayerSpec"):
        to_torch("attention")
