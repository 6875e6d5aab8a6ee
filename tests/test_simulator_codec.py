"""The codec: packing <T, X> and reading it back gives the target's parameters and X exactly."""

from __future__ import annotations

import functools

import pytest
import torch

from attnsim.simulator import codec, sampling, spec, universal
from attnsim.simulator.layout import Layout

F64 = torch.float64


def _x(n: int, d: int, seed: int) -> torch.Tensor:
    return torch.randn(n, d, dtype=F64, generator=torch.Generator().manual_seed(seed))


def _assert_same_attention(got: spec.MergedAttention, want: spec.MergedAttention) -> None:
    for name in ("A", "W_OV", "a_query", "a_key", "a_const", "b_OV", "b_O"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    assert got.causal == want.causal


def _assert_same_layer(got: spec.EncoderLayerSpec, want: spec.EncoderLayerSpec) -> None:
    _assert_same_attention(got.attention, want.attention.merged())
    for name in ("W1", "W2", "b1", "b2"):
        assert torch.equal(getattr(got.ffn, name), getattr(want.ffn, name)), name
    assert got.ffn.activation is want.ffn.activation
    for norm in ("norm1", "norm2"):
        g, w = getattr(got, norm), getattr(want, norm)
        assert torch.equal(g.weight, w.weight) and torch.equal(g.bias, w.bias)
        assert g.eps == w.eps
    assert got.norm_first == want.norm_first


# (n, d, heads) of the target, all within the build (4, 4, 2) and up to it
ATTENTION_SIZES = [(1, 1, 1), (2, 3, 1), (3, 4, 2), (4, 4, 2), (4, 2, 2), (4, 4, 1)]


@pytest.mark.parametrize("n, d, h", ATTENTION_SIZES)
@pytest.mark.parametrize("causal", [False, True])
def test_attention_round_trip(n, d, h, causal):
    lay = Layout(4, 4, 2)
    target = sampling.random_attention(h, d, seed=n + 10 * d + h, causal=causal, bias=True)
    case = codec.Case(target.merged(), _x(n, d, seed=n * d))
    seq = codec.pack(lay, case)
    assert seq.shape == (lay.length,) and seq.dtype == F64
    back = codec.unpack(lay, seq, case.shape)
    assert torch.equal(back.X, case.X)
    _assert_same_attention(back.attention, target.merged())
    assert back.layer is None
    # every position outside the input regions is zero, and so are the padded entries
    assert not seq[lay.input_length :].any()
    grid = seq[lay.region("X")].reshape(4, 4)
    assert not grid[n:].any() and not grid[:, d:].any()


# (n, d, heads, d_mlp) within the build (4, 4, 2, F=8)
ENCODER_SIZES = [(1, 1, 1, 1), (2, 2, 2, 3), (3, 4, 2, 8), (4, 4, 1, 8), (4, 4, 2, 5)]


@pytest.mark.parametrize("n, d, h, dm", ENCODER_SIZES)
@pytest.mark.parametrize(
    "norm_first, activation", [(False, "relu"), (True, "gelu"), (True, "gelu_tanh")]
)
def test_encoder_round_trip(n, d, h, dm, norm_first, activation):
    lay = Layout(4, 4, 2, 8)
    layer = sampling.random_encoder_layer(
        h, d, dm, seed=d + dm, activation=activation, norm_first=norm_first, causal=norm_first
    )
    layer = spec.EncoderLayerSpec(
        layer.attention,
        layer.ffn,
        spec.LayerNormSpec(layer.norm1.weight, layer.norm1.bias, eps=1e-3),
        spec.LayerNormSpec(layer.norm2.weight, layer.norm2.bias, eps=2e-5),
        norm_first=norm_first,
    )
    case = codec.Case(layer.attention.merged(), _x(n, d, seed=dm), layer)
    assert case.shape == codec.Shape(n, d, h, dm)
    back = codec.unpack(lay, codec.pack(lay, case), case.shape)
    assert torch.equal(back.X, case.X)
    _assert_same_attention(back.attention, layer.attention.merged())
    _assert_same_layer(back.layer, layer)


def test_pack_batch_and_unpack_output():
    lay = Layout(3, 2, 1)
    cases = [
        codec.Case(sampling.random_attention(1, d, seed=d).merged(), _x(n, d, seed=n))
        for n, d in ((1, 1), (3, 2), (2, 2))
    ]
    seqs = codec.pack_batch(lay, cases)
    assert seqs.shape == (3, lay.length)
    # the X region of a packed sequence read as output gives X back: unpack_output reads
    # T(X)[i, c] where pack wrote X[i, c]
    outs = codec.unpack_output(lay, seqs, [c.shape for c in cases])
    for out, case in zip(outs, cases):
        assert torch.equal(out, case.X)
    outs[0][0, 0] = 99.0  # copies, not views of U's output
    assert seqs[0, lay.xpos(0, 0)] != 99.0


def test_bad_shapes_raise():
    lay = Layout(2, 2, 1)
    head = sampling.random_attention(1, 2, seed=0).merged()
    with pytest.raises(ValueError, match=r"n=3, d=2, 1 heads does not fit the layout for n <= 2"):
        codec.pack(lay, codec.Case(head, torch.zeros(3, 2)))
    wide = sampling.random_attention(1, 3, seed=0).merged()
    with pytest.raises(ValueError, match=r"d=3, 1 heads does not fit"):
        codec.pack(lay, codec.Case(wide, torch.zeros(1, 3)))
    with pytest.raises(ValueError, match=r"Case.X must have shape \[n, d\] = \[n, 2\]"):
        codec.Case(head, torch.zeros(2, 3))
    with pytest.raises(TypeError, match="Case.attention must be a MergedAttention in the scalar"):
        codec.pack(lay, codec.Case(sampling.random_attention(1, 2, seed=0), torch.zeros(2, 2)))
    with pytest.raises(TypeError, match="Case.attention must be an AttentionSpec or a Merged"):
        codec.Case("not an attention", torch.zeros(2, 2))
    layer = sampling.random_encoder_layer(1, 2, 2, seed=0)
    with pytest.raises(ValueError, match="the case is an encoder layer, but the layout holds"):
        codec.pack(lay, codec.Case(layer.attention.merged(), torch.zeros(1, 2), layer))
    with pytest.raises(ValueError, match=r"seq must be a real tensor of shape \[24\]"):
        codec.unpack(lay, torch.zeros(23, dtype=F64), codec.Shape(1, 2, 1))
    with pytest.raises(
        ValueError, match=r"U's output must be a real tensor of shape \[batch, 24\]"
    ):
        codec.unpack_output(lay, torch.zeros(24, dtype=F64), [codec.Shape(1, 2, 1)])
    with pytest.raises(ValueError, match="holds 1 sequences, but 2 shapes were given"):
        codec.unpack_output(lay, torch.zeros(1, 24, dtype=F64), [codec.Shape(1, 2, 1)] * 2)
    with pytest.raises(ValueError, match="not one-hot: it is not a packed encoder layer"):
        big = Layout(2, 2, 1, 2)
        codec.unpack(big, torch.zeros(big.length, dtype=F64), codec.Shape(1, 2, 1, 2))


@functools.cache
def _u(layer: str) -> universal.UniversalSimulator:
    return universal.build(2, 2, 1, layer=layer, layout="scalar")  # this codec's layout


@pytest.mark.parametrize("layer", ["attention", "encoder"])
def test_simulator_encode_is_the_codec(layer):
    U = _u(layer)
    X = _x(2, 2, seed=1)
    if layer == "encoder":
        target = sampling.random_encoder_layer(1, 2, 3, seed=2)
        case = codec.Case(target.attention.merged(), X, target)
    else:
        target = sampling.random_attention(1, 2, seed=2)
        case = codec.Case(target.merged(), X)
    assert torch.equal(U.encode(target, X), codec.pack(U.layout, case))


def test_model_inputs_match_the_compiled_models_encoding():
    """U feeds its transformer tensors directly; they are what ``model.encode`` makes."""
    U = _u("attention")
    X = _x(2, 2, seed=3)
    seqs = torch.stack([U.encode(sampling.random_attention(1, 2, seed=s), X) for s in (1, 2)])
    ids, vals = U.model_inputs(seqs)
    want_ids, want_vals = U.model.encode(seqs.numpy())
    assert torch.equal(ids, want_ids) and torch.equal(vals, want_vals)
