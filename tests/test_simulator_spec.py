"""Specs: validation wording, immutability, merging, adapters and random targets."""

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from attnsim.simulator import reference as ref
from attnsim.simulator import spec

TOL = {"rtol": 1e-12, "atol": 1e-12}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny float64 matrices: intra-op threads only add overhead (restored afterwards)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _factors(h=2, d=4, dh=2):
    g = torch.Generator().manual_seed(0)
    return {k: torch.randn(h, d, dh, generator=g) for k in ("W_Q", "W_K", "W_V")} | {
        "W_O": torch.randn(h, dh, d, generator=g)
    }


# ------------------------------------------------------------------------------------------
# storage


def test_arrays_are_private_float64_copies():
    factors = _factors()
    target = spec.AttentionSpec(**factors)
    assert all(getattr(target, k).dtype == torch.float64 for k in factors)
    factors["W_Q"][0, 0, 0] = 123.0  # the caller's array changes, the spec does not
    assert target.W_Q[0, 0, 0].item() != 123.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        target.causal = True


def test_numpy_arrays_and_lists_are_accepted():
    head = spec.MergedAttention(A=np.eye(2)[None], W_OV=[[[1, 0], [0, 1]]], b_O=np.zeros(2))
    assert head.A.dtype == head.W_OV.dtype == torch.float64
    assert head.a_query.tolist() == [[0.0, 0.0]] and head.a_const.tolist() == [0.0]


def test_defaults_are_resolved():
    target = spec.AttentionSpec(**{k: v for k, v in _factors(1, 4, 4).items() if k != "W_O"})
    assert target.scale == 0.5  # 1 / sqrt(d_head)
    assert target.W_O.equal(torch.eye(4, dtype=torch.float64)[None])
    assert target.b_Q.shape == (1, 4) and target.b_O.shape == (4,)
    assert not target.b_V.any()


def test_concatenated_output_projection_is_reshaped():
    factors = _factors(2, 4, 2)
    W_O = factors.pop("W_O")
    target = spec.AttentionSpec(**factors, W_O=W_O.reshape(4, 4))
    assert target.W_O.equal(W_O.double())


# ------------------------------------------------------------------------------------------
# merging


def test_merged_terms_on_a_literal_example():
    target = spec.AttentionSpec(
        W_Q=[[[1.0], [2.0]]], W_K=[[[3.0], [0.0]]], W_V=[[[1.0], [1.0]]], W_O=[[[2.0, 0.0]]],
        b_Q=[[1.0]], b_K=[[-1.0]], b_V=[[0.5]], b_O=[0.0, 1.0], scale=2.0,
    )  # fmt: skip
    m = target.merged()
    assert m.A.tolist() == [[[6.0, 0.0], [12.0, 0.0]]]  # 2 * W_Q W_K^T
    assert m.a_query.tolist() == [[-2.0, -4.0]]  # 2 * W_Q b_K
    assert m.a_key.tolist() == [[6.0, 0.0]]  # 2 * W_K b_Q
    assert m.a_const.tolist() == [-2.0]  # 2 * b_Q . b_K
    assert m.W_OV.tolist() == [[[2.0, 0.0], [2.0, 0.0]]]
    assert m.b_OV.tolist() == [[1.0, 0.0]]
    assert m.output_bias().tolist() == [1.0, 1.0]
    A_aug, W_aug = m.augmented()
    assert A_aug.tolist() == [[[6.0, 0.0, -2.0], [12.0, 0.0, -4.0], [6.0, 0.0, -2.0]]]
    assert W_aug.tolist() == [[[2.0, 0.0], [2.0, 0.0], [1.0, 0.0]]]


def test_merged_is_idempotent_and_keeps_causal():
    target = spec.random_attention(2, 4, seed=3, causal=True)
    merged = target.merged()
    assert merged.merged() is merged and merged.causal
    layer = spec.random_encoder_layer(2, 4, seed=0)
    merged_layer = layer.merged()
    assert merged_layer.merged().attention is merged_layer.attention
    assert merged_layer.ffn is layer.ffn and merged_layer.norm1 is layer.norm1


# ------------------------------------------------------------------------------------------
# validation wording


def test_non_numeric_array():
    with pytest.raises(TypeError, match=r"AttentionSpec.W_Q must be a real array .* got str"):
        spec.AttentionSpec(W_Q="weights", W_K=None, W_V=None)


def test_complex_array():
    with pytest.raises(TypeError, match=r"MergedAttention.A must hold real numbers, got dtype"):
        spec.MergedAttention(A=torch.ones(1, 2, 2, dtype=torch.complex64), W_OV=torch.ones(1, 2, 2))


@pytest.mark.parametrize(("value", "shown"), [(float("nan"), "nan"), (float("-inf"), "-inf")])
def test_non_finite_entries_are_located(value, shown):
    factors = _factors()
    factors["W_K"][1, 3, 0] = value
    with pytest.raises(
        ValueError,
        match=rf"AttentionSpec.W_K has 1 non-finite entry \(first: {shown} at index \(1, 3, 0\)\); "
        r"expected finite numbers; replace NaN/Inf",
    ):
        spec.AttentionSpec(**factors)
    bias = torch.zeros(4)
    bias[[1, 2]] = value
    with pytest.raises(ValueError, match=r"AttentionSpec.b_O has 2 non-finite entries .*\(1,\)"):
        spec.AttentionSpec(**_factors(), b_O=bias)


def test_wrong_rank_suggests_a_head_axis():
    with pytest.raises(ValueError, match=r"W_Q must have 3 dimensions .* add a leading head axis"):
        spec.AttentionSpec(W_Q=torch.ones(4, 4), W_K=torch.ones(4, 4), W_V=torch.ones(4, 4))


def test_zero_sizes():
    with pytest.raises(
        ValueError, match=r"AttentionSpec.W_Q has shape \(0, 4, 2\), but every size"
    ):
        spec.AttentionSpec(W_Q=torch.ones(0, 4, 2), W_K=None, W_V=None)
    with pytest.raises(ValueError, match=r"FeedForwardSpec.W1 has shape \(2, 0\), but every size"):
        spec.FeedForwardSpec(W1=torch.ones(2, 0), W2=torch.ones(0, 2))


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("W_K", torch.ones(2, 4, 3), r"W_K must have shape \[n_heads, d_model, d_head\] = \(2, 4, 2\), got \(2, 4, 3\)"),  # noqa: E501
        ("W_V", torch.ones(1, 4, 2), r"W_V must have shape .* got \(1, 4, 2\); check its orientation"),  # noqa: E501
        ("W_O", torch.ones(2, 4, 2), r"W_O must have shape \[n_heads, d_head, d_model\] = \(2, 2, 4\)"),  # noqa: E501
        ("b_Q", torch.ones(4), r"b_Q must have shape \[n_heads, d_head\] = \(2, 2\), got \(4,\)"),
        ("b_O", torch.ones(2), r"b_O must have shape \[d_model\] = \(4,\), got \(2,\)"),
    ],
)  # fmt: skip
def test_shape_mismatches(name, value, expected):
    with pytest.raises(ValueError, match=expected):
        spec.AttentionSpec(**(_factors() | {name: value}))


def test_missing_output_projection():
    factors = _factors()
    del factors["W_O"]
    with pytest.raises(
        ValueError, match=r"W_O is None, which means the identity, but that needs n_heads == 1"
    ):
        spec.AttentionSpec(**factors)


def test_causal_and_scale_types():
    with pytest.raises(TypeError, match=r"AttentionSpec.causal must be True or False, got int 1"):
        spec.AttentionSpec(**_factors(), causal=1)
    with pytest.raises(TypeError, match=r"AttentionSpec.scale must be a real number, got 'x'"):
        spec.AttentionSpec(**_factors(), scale="x")
    with pytest.raises(ValueError, match=r"AttentionSpec.scale must be finite, got nan"):
        spec.AttentionSpec(**_factors(), scale=float("nan"))
    with pytest.raises(TypeError, match=r"MergedAttention.causal must be True or False"):
        spec.MergedAttention(A=torch.ones(1, 2, 2), W_OV=torch.ones(1, 2, 2), causal="yes")


def test_merged_attention_shapes():
    with pytest.raises(ValueError, match=r"MergedAttention.A must be square per head"):
        spec.MergedAttention(A=torch.ones(1, 2, 3), W_OV=torch.ones(1, 2, 2))
    with pytest.raises(
        ValueError,
        match=r"MergedAttention.W_OV must have shape \[n_heads, d_model, d_model\] = "
        r"\(1, 2, 2\), got \(2, 2, 2\)",
    ):
        spec.MergedAttention(A=torch.ones(1, 2, 2), W_OV=torch.ones(2, 2, 2))
    with pytest.raises(
        ValueError, match=r"MergedAttention.a_const must have shape \[n_heads\] = \(1,\)"
    ):
        spec.MergedAttention(A=torch.ones(1, 2, 2), W_OV=torch.ones(1, 2, 2), a_const=1.0)


def test_layer_norm_validation():
    with pytest.raises(ValueError, match=r"LayerNormSpec.eps must be positive, got 0.0"):
        spec.LayerNormSpec(weight=[1.0], eps=0.0)
    with pytest.raises(
        ValueError, match=r"LayerNormSpec.bias must have shape \[d_model\] = \(2,\)"
    ):
        spec.LayerNormSpec(weight=[1.0, 1.0], bias=[0.0])


def test_feed_forward_validation():
    with pytest.raises(ValueError, match=r"activation must be one of 'relu', 'gelu', 'gelu_tanh'"):
        spec.FeedForwardSpec(W1=torch.ones(2, 2), W2=torch.ones(2, 2), activation="tanh")
    with pytest.raises(ValueError, match=r"'maxmin' sorts hidden units in pairs, so d_mlp must be"):
        spec.FeedForwardSpec(W1=torch.ones(2, 3), W2=torch.ones(3, 2), activation="maxmin")
    with pytest.raises(ValueError, match=r"FeedForwardSpec.W2 must have shape \[d_mlp, d_model\]"):
        spec.FeedForwardSpec(W1=torch.ones(2, 3), W2=torch.ones(2, 3))


def test_encoder_layer_validation():
    ffn = spec.FeedForwardSpec(W1=torch.ones(4, 8), W2=torch.ones(8, 4))
    attention = spec.random_attention(2, 4, seed=0)
    with pytest.raises(TypeError, match=r"EncoderLayerSpec.attention must be AttentionSpec or"):
        spec.EncoderLayerSpec(attention=ffn, ffn=ffn)
    with pytest.raises(TypeError, match=r"EncoderLayerSpec.norm1 must be LayerNormSpec or"):
        spec.EncoderLayerSpec(attention=attention, ffn=ffn, norm1=nn.LayerNorm(4))
    with pytest.raises(
        ValueError, match=r"EncoderLayerSpec.norm2 has d_model=3, but the attention"
    ):
        spec.EncoderLayerSpec(attention, ffn, norm2=spec.LayerNormSpec(weight=torch.ones(3)))
    with pytest.raises(TypeError, match=r"EncoderLayerSpec.norm_first must be True or False"):
        spec.EncoderLayerSpec(attention, ffn, norm_first=None)


# ------------------------------------------------------------------------------------------
# adapters


def test_from_torch_weight_layout():
    m = nn.MultiheadAttention(4, 2, bias=True).double()
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.arange(48.0).reshape(12, 4))
        m.in_proj_bias.copy_(torch.arange(12.0))
    target = spec.from_torch(m)
    # head 1's queries are output rows 2..3 of the query block; W_Q,h is [d_model, d_head]
    assert target.W_Q[1].equal(m.in_proj_weight[2:4].T)
    assert target.W_V[0].equal(m.in_proj_weight[8:10].T)
    assert target.b_K.tolist() == [[4.0, 5.0], [6.0, 7.0]]
    assert target.W_O.reshape(4, 4).equal(m.out_proj.weight.T)
    assert target.scale == 1 / 2**0.5 and not target.causal
    assert spec.from_torch(m, causal=True).causal


def test_from_torch_rejects_other_modules():
    with pytest.raises(TypeError, match=r"supports nn.MultiheadAttention and .* got Linear"):
        spec.from_torch(nn.Linear(2, 2))


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"kdim": 3}, r"kdim=3, vdim=4 different from embed_dim=4 is not supported"),
        ({"vdim": 2}, r"kdim=4, vdim=2 different from embed_dim=4"),
        ({"add_bias_kv": True}, r"add_bias_kv=True is not supported: .* add_bias_kv=False"),
        ({"add_zero_attn": True}, r"add_zero_attn=True is not supported: .*add_zero_attn=False"),
    ],
)
def test_from_torch_rejects_unsupported_attention_options(kwargs, expected):
    with pytest.raises(ValueError, match=expected):
        spec.from_torch(nn.MultiheadAttention(4, 2, **kwargs))


def test_from_torch_dropout_needs_eval_mode():
    m = nn.MultiheadAttention(4, 2, dropout=0.1)
    with pytest.raises(ValueError, match=r"dropout=0.1 and is in training mode.*module.eval\(\)"):
        spec.from_torch(m)
    assert spec.from_torch(m.eval()).n_heads == 2
    assert spec.from_torch(nn.MultiheadAttention(4, 2, dropout=0.0)).n_heads == 2  # training
    layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.2)
    with pytest.raises(ValueError, match=r"TransformerEncoderLayer \(dropout\) has dropout=0.2"):
        spec.from_torch(layer)
    assert spec.from_torch(layer.eval()).d_model == 4


def test_from_torch_reads_each_dropout_modules_own_mode():
    # a dropout module drops by its own mode, whatever its layer's
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.9, batch_first=True).double()
    layer.eval()
    layer.dropout2.train()
    with pytest.raises(ValueError, match=r"\(dropout2\) has dropout=0.9 and is in training"):
        spec.from_torch(layer)
    layer.train()  # the layer in training mode, every dropout (and the attention's) not
    for m in (layer.dropout, layer.dropout1, layer.dropout2, layer.self_attn):
        m.eval()
    X = torch.randn(3, 4, dtype=torch.float64)
    with torch.no_grad():
        want = layer(X[None])[0]
    assert torch.allclose(ref.reference(spec.from_torch(layer), X), want, atol=1e-12)
    layer.dropout1 = nn.Identity()  # no dropout at all
    assert spec.from_torch(layer).d_model == 4
    layer.dropout1 = nn.ReLU()
    with pytest.raises(ValueError, match=r"dropout1 must be an nn.Dropout \(or nn.Identity\)"):
        spec.from_torch(layer)


@pytest.mark.parametrize(
    ("activation", "expected"),
    [("relu", "relu"), ("gelu", "gelu"), (F.relu, "relu"), (F.gelu, "gelu"),
     (nn.ReLU(), "relu"), (nn.GELU(), "gelu"), (nn.GELU(approximate="tanh"), "gelu_tanh")],
)  # fmt: skip
def test_from_torch_reads_the_activation(activation, expected):
    layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, activation=activation)
    assert spec.from_torch(layer).ffn.activation.value == expected


def test_from_torch_rejects_unsupported_layer_options():
    layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, activation=F.silu)
    with pytest.raises(ValueError, match=r"option activation=<function silu.* is not supported"):
        spec.from_torch(layer)
    layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0)
    layer.norm2 = nn.RMSNorm(4)
    with pytest.raises(ValueError, match=r"option norm2=RMSNorm.* expected nn.LayerNorm\(4\)"):
        spec.from_torch(layer)
    layer.norm2 = nn.LayerNorm(4)
    layer.linear1 = nn.Identity()
    with pytest.raises(ValueError, match=r"option linear1 must be an nn.Linear"):
        spec.from_torch(layer)
    layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0)
    layer.self_attn = nn.MultiheadAttention(4, 2, add_zero_attn=True)
    with pytest.raises(ValueError, match=r"add_zero_attn=True is not supported"):
        spec.from_torch(layer)


def test_from_torch_layer_norm_fields():
    layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, layer_norm_eps=1e-3, bias=False)
    target = spec.from_torch(layer, causal=True)
    assert target.norm1.eps == target.norm2.eps == 1e-3
    assert not target.norm1.bias.any() and not target.ffn.b1.any()
    assert target.attention.causal and not target.norm_first


# ------------------------------------------------------------------------------------------
# random targets


def test_random_attention_is_reproducible_and_sized():
    a, b = spec.random_attention(3, 6, seed=5), spec.random_attention(3, 6, seed=5)
    assert all(getattr(a, k).equal(getattr(b, k)) for k in ("W_Q", "W_O", "b_V"))
    assert not a.W_Q.equal(spec.random_attention(3, 6, seed=6).W_Q)
    c = spec.random_attention(2, 5, d_head=3, seed=0, bias=False)
    assert (c.n_heads, c.d_model, c.d_head) == (2, 5, 3) and not c.b_Q.any()


def test_random_attention_logit_scale_without_input_bounds_the_scores():
    target = spec.random_attention(2, 4, seed=0, logit_scale=50.0)
    A_aug, _ = target.merged().augmented()
    norms = torch.linalg.matrix_norm(A_aug, ord=2)
    torch.testing.assert_close(norms, torch.full((2,), 50.0, dtype=torch.float64), **TOL)
    X = torch.randn(6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    row_norms = torch.cat([X, torch.ones(6, 1, dtype=torch.float64)], 1).norm(dim=1)
    bound = 50.0 * row_norms[:, None] * row_norms[None, :]
    assert bool((ref.scores(target, X).abs() <= bound + 1e-9).all())


@pytest.mark.parametrize("norm_first", [False, True])
def test_random_encoder_layer_logit_scale_refers_to_the_layer_input(norm_first):
    X = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 3
    layer = spec.random_encoder_layer(
        2, 4, seed=1, norm_first=norm_first, causal=True, logit_scale=50.0, X=X
    )
    attn_input = ref.layer_norm(layer.norm1, X) if norm_first else X
    peaks = ref.scores(layer.attention, attn_input).tril().abs().amax(dim=(1, 2))
    torch.testing.assert_close(peaks, torch.full((2,), 50.0, dtype=torch.float64), **TOL)


def test_random_target_errors():
    with pytest.raises(ValueError, match=r"d=5 is not divisible by n_heads=2; pass d_head"):
        spec.random_attention(2, 5, seed=0)
    with pytest.raises(ValueError, match=r"n_heads must be a positive int, got 0"):
        spec.random_attention(0, 4, seed=0)
    with pytest.raises(ValueError, match=r"d_mlp must be a positive int, got -1"):
        spec.random_encoder_layer(1, 4, -1, seed=0)
    with pytest.raises(ValueError, match=r"activation must be one of"):
        spec.random_encoder_layer(1, 4, seed=0, activation="tanh")


def test_with_logit_scale_errors():
    target = spec.random_attention(1, 2, seed=0, bias=False)
    with pytest.raises(ValueError, match=r"magnitude must be positive, got -1.0"):
        spec.with_logit_scale(target, torch.ones(2, 2), -1.0)
    with pytest.raises(ValueError, match=r"head 0 has all scores zero on X"):
        spec.with_logit_scale(target, torch.zeros(2, 2), 50.0)
    with pytest.raises(ValueError, match=r"X must have shape \[n, d_model\] = \[n, 2\]"):
        spec.with_logit_scale(target, torch.zeros(2, 3), 50.0)
    with pytest.raises(TypeError, match=r"with_logit_scale needs an AttentionSpec.* got str"):
        spec.with_logit_scale("T", torch.zeros(2, 2), 50.0)
