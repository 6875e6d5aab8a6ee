"""The hierarchy, literally: a compiled transformer (U itself, or any compiled program) as
targets of a larger U.

A compiled block is ``resid_mid = x + attn(x)``, ``resid_post = resid_mid + mlp(resid_mid)``
with softmax attention (``softmax(beta q.k)``, no biases, BOS at position 0 like any other
row), and an MLP of ReLU units and bilinear units side by side. A decoder U reads it as two
pre-norm layers without norms (:func:`block_targets`):

1. the attention, with ``scale = beta``, and the ReLU units as a plain feed-forward
   ``relu(x W_in) W_out``;
2. no attention (one head with zero weights adds exactly 0), and the bilinear units as a gated
   feed-forward with the identity gate ``((x W_a) * (x W_b)) W_out``.

The second reads the stream after the first, which holds the ReLU units' outputs as well: a
compiled MLP's units never read what the units of the same sublayer write (they run side by
side), so the bilinear units see the same values. A block without bilinear units is one
layer. The input of the first block is the compiled model's embedded stream
(:func:`embedded`): token rows, positions and token values, BOS included.

>>> import torch
>>> from attnsim import compile_program, library
>>> from attnsim.simulator import reference
>>> m = compile_program(library.make_length(), vocab="ab", max_seq_len=3, attention="softmax")
>>> layers = stack_targets(m)
>>> X = embedded(m, ["ab"])
>>> Y = X
>>> for layer in layers.layers:
...     Y = reference.encoder_layer(layer, Y)
>>> with torch.no_grad():
...     want = m.model(*m.encode(["ab"]))[0]
>>> bool((Y - want).abs().max() < 1e-9)
True
"""

from __future__ import annotations

from typing import Any

import torch

from attnsim.simulator import spec as S
from attnsim.simulator.stack import EncoderStackSpec

__all__ = ["block_targets", "stack_targets", "embedded"]

DTYPE = torch.float64


def _transformer(model: Any):
    """The ``Transformer`` of a compiled model (or the model itself); refuses what a decoder
    U does not read."""
    net = getattr(model, "model", model)
    cfg = getattr(net, "cfg", None)
    if cfg is None or not hasattr(net, "blocks"):
        raise TypeError(
            f"expected a CompiledModel or its dense Transformer, got {type(model).__name__}; "
            "a model in sparse storage converts with to_dense()"
        )
    if cfg.attention.value != "softmax":
        raise ValueError(
            "a compiled model with hard attention has no softmax layer to simulate; compile it "
            "with attention='softmax' (for U: simulator.build(..., attention='softmax'))"
        )
    if any(v > 0 for v in cfg.d_native.values()):
        raise ValueError(
            f"the model has native units ({', '.join(k for k, v in cfg.d_native.items() if v)}); "
            "compile it with maps='relu' so that its MLPs hold ReLU and bilinear units only"
        )
    return net


def block_targets(model: Any, layer: int) -> tuple[S.EncoderLayerSpec, ...]:
    """Block ``layer`` of a compiled softmax model with ReLU and bilinear units as decoder-U
    layers (one, or two when it has bilinear units; see the module text).

    >>> from attnsim import compile_program, library
    >>> m = compile_program(library.make_length(), vocab="ab", max_seq_len=3,
    ...                     attention="softmax")
    >>> [(x.attention.n_heads, x.ffn.activation.value) for x in block_targets(m, 0)]
    [(1, 'relu')]
    """
    net = _transformer(model)
    cfg = net.cfg
    if not 0 <= layer < len(net.blocks):
        raise ValueError(f"layer must be in [0, {len(net.blocks)}), got {layer}")
    block = net.blocks[layer]
    d = cfg.d_model
    with torch.no_grad():
        a, mlp = block.attn, block.mlp
        h, dh = a.W_Q.shape[0], a.W_Q.shape[2]
        if h == 0 or dh == 0:
            attention = _no_attention(d)
        else:
            attention = S.AttentionSpec(
                W_Q=a.W_Q.to(DTYPE),
                W_K=a.W_K.to(DTYPE),
                W_V=a.W_V.to(DTYPE),
                W_O=a.W_O.to(DTYPE),
                causal=cfg.causal,
                scale=float(cfg.beta),
            )
        relu = _ffn(mlp.W_in, mlp.W_out, None, "relu", d)
        first = S.EncoderLayerSpec(attention, relu, None, None, norm_first=True)
        if mlp.W_bil_a.shape[1] == 0:
            return (first,)
        bil = _ffn(mlp.W_bil_a, mlp.W_bil_out, mlp.W_bil_b, "identity", d)
        return first, S.EncoderLayerSpec(_no_attention(d), bil, None, None, norm_first=True)


def stack_targets(model: Any) -> EncoderStackSpec:
    """Every block of a compiled model, in order, as one stack of decoder-U layers."""
    net = _transformer(model)
    layers: list[S.EncoderLayerSpec] = []
    for i in range(len(net.blocks)):
        layers += block_targets(net, i)
    return EncoderStackSpec(tuple(layers))


def embedded(model: Any, xs: Any = None, *, ids=None, values=None) -> torch.Tensor:
    """The stream entering a compiled model's first block for one input: ``xs`` (encoded as
    the model encodes it), or the model's own inputs ``ids [1, n + 1]`` and ``values`` (U's:
    ``UniversalSimulator.model_inputs``). Returns ``[n + 1, d_model]`` float64, BOS first."""
    net = _transformer(model)
    ids, vals = model.encode(xs) if xs is not None else (ids, values)
    with torch.no_grad():
        x = net.W_E[ids] + net.W_pos[: ids.shape[1]]
        if net.cfg.numerical_tokens and vals is not None:
            x = x + vals.to(net.W_E.dtype)[..., None] * net.W_E_num
        if net.cfg.token_width:
            x = x + vals.to(net.W_E.dtype) @ net.W_E_vec
    return x[0].to(DTYPE)


def _no_attention(d: int) -> S.AttentionSpec:
    """One head with zero weights: its output is exactly 0."""
    zero = torch.zeros(1, d, 1, dtype=DTYPE)
    return S.AttentionSpec(W_Q=zero, W_K=zero, W_V=zero, W_O=torch.zeros(1, 1, d, dtype=DTYPE))


def _ffn(w_in, w_out, w_gate, activation: str, d: int) -> S.FeedForwardSpec:
    """A feed-forward of the given units (one zero unit where there is none)."""
    if w_in.shape[1] == 0:
        return S.FeedForwardSpec(
            W1=torch.zeros(d, 1, dtype=DTYPE), W2=torch.zeros(1, d, dtype=DTYPE)
        )
    return S.FeedForwardSpec(
        W1=w_in.to(DTYPE),
        W2=w_out.to(DTYPE),
        W3=None if w_gate is None else w_gate.to(DTYPE),
        activation=activation,
    )
