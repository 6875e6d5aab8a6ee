"""Writing <T, X> into the vector layout and reading T(X) back.

:func:`prepare` validates a target (an :class:`~attnsim.simulator.spec.AttentionSpec`, an
:class:`~attnsim.simulator.spec.EncoderLayerSpec` with one, or a torch module) and X against a
vector-layout build; :func:`pack` copies their entries into the ``[length, width]`` token
array of :mod:`attnsim.simulator.vector_layout`, with nothing multiplied: every value it
writes is an entry of X or of one of T's parameters (LayerNorm eps included, and the score
scale of a spec that sets its own), or a 0/1 flag (the standard scale 1/sqrt(d_head) is
computed by U from a one-hot flag of d_head). :func:`unpack_output` reads T(X) from U's output at
the OUT(i, k) positions.

>>> import torch
>>> from attnsim.simulator import sampling
>>> from attnsim.simulator.vector_layout import VectorLayout
>>> lay = VectorLayout(2, 4, 2)
>>> case = Case(sampling.random_attention(2, 4, seed=0), torch.ones(2, 4))
>>> tokens = pack(lay, case)
>>> tuple(tokens.shape), float(tokens[lay.xpos(1), lay.B])
((24, 11), 1.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from attnsim.simulator import checks
from attnsim.simulator import spec as S
from attnsim.simulator.config import SimulatorConfig
from attnsim.simulator.vector_layout import VectorLayout

__all__ = ["Case", "prepare", "pack", "pack_batch", "unpack_output"]

DTYPE = torch.float64
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "maxmin")


@dataclass(frozen=True, eq=False)
class Case:
    """One target with its X, as the vector layout reads it: the attention's factors (not
    merged), X ``[n, d]`` float64, and the encoder layer around them (or None)."""

    attention: S.AttentionSpec
    X: torch.Tensor
    layer: S.EncoderLayerSpec | None = None


def prepare(
    config: SimulatorConfig, layout: VectorLayout, target: Any, X: Any, causal: bool | None
) -> Case:
    """Validates a target and X against a vector-layout build.

    Raises:
        TypeError: ``target`` is not a spec or a supported torch module.
        ValueError: the target or X does not fit the build (the message says what to build),
            or the target is given merged (the vector layout reads the factors W_Q, W_K,
            W_V, W_O as torch stores them).
        NotImplementedError: an encoder layer without its LayerNorms.
    """
    attention, layer = checks.split_target(config, target, causal)
    if isinstance(attention, S.MergedAttention):
        raise ValueError(
            "the vector layout reads the attention's factors (W_Q, W_K, W_V, W_O) as torch "
            "stores them, not merged forms; give an AttentionSpec or a torch module, or "
            "build U with layout='scalar' for a MergedAttention"
        )
    h, d, dh = attention.n_heads, attention.d_model, attention.d_head
    if h > layout.H or d > layout.D or h * dh > layout.D:
        raise ValueError(
            f"target has {h} heads of width {dh} (together {h * dh}) and d={d}, but this U "
            f"was built for at most {layout.H} heads, d <= {layout.D} and heads together at "
            f"most {layout.D} wide; build a larger U with simulator.build(max_n, max_d, "
            "max_heads, layout='vector')"
        )
    X = checks._check_x(X, d, layout.N)
    if layer is not None:
        checks._check_norm_eps(config, layer)
    if causal is not None and bool(causal) != attention.causal:
        attention = S.AttentionSpec(
            W_Q=attention.W_Q, W_K=attention.W_K, W_V=attention.W_V, W_O=attention.W_O,
            b_Q=attention.b_Q, b_K=attention.b_K, b_V=attention.b_V, b_O=attention.b_O,
            causal=bool(causal), scale=attention.scale,
        )  # fmt: skip
    return Case(attention, X, layer)


def pack(layout: VectorLayout, case: Case) -> torch.Tensor:
    """The token array ``[length, width]`` of one case (entries copied, nothing computed)."""
    lay, att, X = layout, case.attention, case.X
    B = lay.B
    n, d = X.shape
    h, dh = att.n_heads, att.d_head
    E = h * dh
    out = torch.zeros(lay.length, lay.width, dtype=DTYPE)
    out[lay.PARAM, lay.param("causal")] = float(att.causal)
    if att.scale == 1.0 / math.sqrt(dh):  # the standard scale: U computes it from d_head
        for head in range(h):
            out[lay.hdimpos(head), dh - 1] = 1.0
    else:
        out[lay.PARAM, lay.param("scale")] = float(att.scale)
    out[lay.xpos(0) : lay.xpos(n), :d] = X
    out[lay.xpos(0) : lay.xpos(n), B] = 1.0
    # rows of torch's in_proj_weight: row h * dh + b of W_q is column b of W_Q[h]
    for t, (W, bias) in enumerate(((att.W_Q, att.b_Q), (att.W_K, att.b_K), (att.W_V, att.b_V))):
        rows = W.permute(0, 2, 1).reshape(E, d)  # [h, d, dh] -> [h * dh, d]
        start = lay.wpos(t, 0)
        out[start : start + E, :d] = rows
        out[start : start + E, B] = bias.reshape(E)
    # rows of out_proj.weight [d, E]: row k is column k of the concatenated W_O [E, d]
    out[lay.opos(0) : lay.opos(d), :E] = att.W_O.reshape(E, d).T
    out[lay.opos(0) : lay.opos(d), B] = att.b_O
    for head in range(h):
        out[lay.maskpos(head), head * dh : (head + 1) * dh] = 1.0
    if case.layer is not None:
        _pack_layer(lay, case.layer, d, out)
    return out


def _pack_layer(lay: VectorLayout, layer: S.EncoderLayerSpec, d: int, out: torch.Tensor) -> None:
    B = lay.B
    out[lay.PARAM, lay.param("norm_first")] = float(layer.norm_first)
    out[lay.PARAM, lay.param(layer.ffn.activation.value)] = 1.0
    # slots: input (pre-norm's norm1), middle (post-norm's norm1, pre-norm's norm2), output
    # (post-norm's norm2); an unused slot gets eps 1 and gain 0, so it stays finite
    if layer.norm_first:
        slots = (layer.norm1, layer.norm2, None)
    else:
        slots = (None, layer.norm1, layer.norm2)
    for s, norm in enumerate(slots):
        name = ("eps_input", "eps_middle", "eps_output")[s]
        if norm is None:
            out[lay.PARAM, lay.param(name)] = 1.0
            continue
        out[lay.PARAM, lay.param(name)] = float(norm.eps)
        out[lay.lnpos(s, 0), :d] = norm.weight
        out[lay.lnpos(s, 1), :d] = norm.bias
    out[lay.colvpos, :d] = 1.0
    ffn = layer.ffn
    f = ffn.d_mlp
    out[lay.w1pos(0) : lay.w1pos(f), :d] = ffn.W1.T  # linear1.weight [f, d]
    out[lay.w1pos(0) : lay.w1pos(f), B] = ffn.b1
    out[lay.w2pos(0) : lay.w2pos(d), :f] = ffn.W2.T  # linear2.weight [d, f]
    out[lay.w2pos(0) : lay.w2pos(d), B] = ffn.b2


def pack_batch(layout: VectorLayout, cases: list[Case]) -> torch.Tensor:
    """``[batch, length, width]`` for several cases."""
    return torch.stack([pack(layout, c) for c in cases])


def unpack_output(layout: VectorLayout, out: torch.Tensor, n: int, d: int) -> torch.Tensor:
    """T(X) ``[n, d]`` from U's output ``[length]`` (read at OUT(i, k))."""
    return out[: n * layout.D].reshape(n, layout.D)[:, :d]
