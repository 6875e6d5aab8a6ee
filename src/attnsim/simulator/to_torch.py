"""Specs back into torch modules: the inverse of ``from_torch`` (for benchmarks and tests).

>>> from attnsim.simulator import sampling
>>> from attnsim.simulator.adapters import from_torch
>>> layer = sampling.random_encoder_layer(2, 4, 8, seed=0, activation="gelu")
>>> module = to_torch(layer)
>>> back = from_torch(module)
>>> bool(torch.equal(back.attention.W_Q, layer.attention.W_Q)), back.ffn.activation.value
(True, 'gelu')
"""

from __future__ import annotations

import torch
from torch import nn

from attnsim.simulator import spec as S

__all__ = ["to_torch"]

_ACTIVATIONS = {
    S.Activation.RELU: "relu",
    S.Activation.GELU: "gelu",
    S.Activation.GELU_TANH: nn.GELU(approximate="tanh"),
}


def to_torch(target: S.AttentionSpec | S.EncoderLayerSpec) -> nn.Module:
    """A float64 ``nn.MultiheadAttention`` or ``nn.TransformerEncoderLayer`` (eval mode, no
    dropout, ``batch_first=True``) holding the spec's parameters as torch stores them.

    Note: for a tanh-GELU layer, torch's fast inference path (eval mode, no gradients)
    computes the exact GELU although the module holds ``nn.GELU(approximate="tanh")``
    (torch 2.13); with gradients enabled the module computes what it declares, as
    ``reference`` and U do.

    Raises:
        ValueError: what torch's modules cannot hold: heads of total width other than d, a
            score scale other than 1/sqrt(d_head), a missing LayerNorm, maxmin activation.
    """
    if isinstance(target, S.EncoderLayerSpec):
        return _encoder_layer(target)
    if not isinstance(target, S.AttentionSpec):
        raise TypeError(f"to_torch takes an AttentionSpec or EncoderLayerSpec, got {target!r:.60}")
    return _attention(target)


def _attention(att: S.AttentionSpec) -> nn.MultiheadAttention:
    h, d, dh = att.n_heads, att.d_model, att.d_head
    if h * dh != d or att.scale != 1.0 / dh**0.5:
        raise ValueError(
            "torch.nn.MultiheadAttention has heads of total width d and score scale "
            f"1/sqrt(d_head); this spec has {h} heads of {dh} for d={d}, scale {att.scale}"
        )
    m = nn.MultiheadAttention(d, h, batch_first=True, dtype=torch.float64).eval()
    with torch.no_grad():
        rows = [w.permute(0, 2, 1).reshape(d, d) for w in (att.W_Q, att.W_K, att.W_V)]
        m.in_proj_weight.copy_(torch.cat(rows))
        m.in_proj_bias.copy_(torch.cat([b.reshape(d) for b in (att.b_Q, att.b_K, att.b_V)]))
        m.out_proj.weight.copy_(att.W_O.reshape(d, d).T)
        m.out_proj.bias.copy_(att.b_O)
    return m


def _encoder_layer(layer: S.EncoderLayerSpec) -> nn.TransformerEncoderLayer:
    if layer.norm1 is None or layer.norm2 is None or layer.ffn.activation not in _ACTIVATIONS:
        raise ValueError(
            "torch.nn.TransformerEncoderLayer has both LayerNorms and a relu, gelu or tanh-gelu "
            "activation; this spec has another"
        )
    d, f = layer.d_model, layer.ffn.d_mlp
    m = nn.TransformerEncoderLayer(
        d, layer.attention.n_heads, f, dropout=0.0, activation=_ACTIVATIONS[layer.ffn.activation],
        norm_first=layer.norm_first, batch_first=True, dtype=torch.float64,
    ).eval()  # fmt: skip
    m.self_attn = _attention(layer.attention)
    with torch.no_grad():
        m.linear1.weight.copy_(layer.ffn.W1.T)
        m.linear1.bias.copy_(layer.ffn.b1)
        m.linear2.weight.copy_(layer.ffn.W2.T)
        m.linear2.bias.copy_(layer.ffn.b2)
        for norm, spec in ((m.norm1, layer.norm1), (m.norm2, layer.norm2)):
            norm.weight.copy_(spec.weight)
            norm.bias.copy_(spec.bias)
            norm.eps = spec.eps
    return m
