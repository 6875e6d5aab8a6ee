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

import dataclasses
import math
from typing import Any

import torch
from torch import nn

from attnsim.model import zero_rows
from attnsim.simulator import checks, stack
from attnsim.simulator import spec as S
from attnsim.simulator.case import Case
from attnsim.simulator.config import SimulatorConfig
from attnsim.simulator.vector_layout import VectorLayout

__all__ = ["Case", "prepare", "pack", "pack_batch", "unpack_output"]

DTYPE = torch.float64
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "maxmin")


def prepare(
    config: SimulatorConfig, layout: VectorLayout, target: Any, X: Any, causal: bool | None
) -> Case:
    """Validates a target and X against a vector-layout build.

    A U built with ``n_layers=L`` takes a stack (an :class:`~attnsim.simulator.stack.
    EncoderStackSpec` or a ``torch.nn.TransformerEncoder``) of at most L layers, or one
    encoder layer.

    >>> from attnsim.simulator import sampling
    >>> cfg = SimulatorConfig(2, 4, 2)
    >>> target = sampling.random_attention(2, 4, seed=0)
    >>> case = prepare(cfg, cfg.layout, target, torch.ones(2, 4), None)
    >>> tuple(case.X.shape), case.rest
    ((2, 4), ())

    Raises:
        TypeError: ``target`` is not a spec or a supported torch module.
        ValueError: the target or X does not fit the build (the message says what to build),
            or the target is given merged (the vector layout reads the factors W_Q, W_K,
            W_V, W_O as torch stores them).
        NotImplementedError: an encoder layer without its LayerNorms, or an encoder with a
            final norm.
    """
    causal = checks.check_causal(causal)
    if isinstance(target, nn.TransformerEncoder):
        target = stack.from_torch_stack(target, causal=bool(causal))
    layers: tuple = ()
    if isinstance(target, stack.EncoderStackSpec):
        if len(target.layers) > layout.layers:
            raise ValueError(
                f"the stack has {len(target.layers)} layers, but this U was built for at most "
                f"{layout.layers}; build U with n_layers={len(target.layers)} (and "
                "layer='encoder')"
            )
        layers = target.layers
        target = layers[0]
    attention, layer = checks.split_target(config, target, causal)
    for extra in layers[1:]:
        checks.split_target(config, extra, causal)
    X = checks._check_x(X, attention.d_model, layout.N)
    out = []
    for att, lay in [(attention, layer), *((x.attention, x) for x in layers[1:])]:
        _check_attention(layout, att)
        if att.linformer is not None:
            att.linformer.check_length(X.shape[0])
        if lay is not None:
            checks._check_norm_eps(config, lay)
        if causal is not None and bool(causal) != att.causal:
            att = dataclasses.replace(att, causal=bool(causal))
            lay = None if lay is None else dataclasses.replace(lay, attention=att)
        out.append((att, lay))
    return Case(out[0][0], X, out[0][1], tuple(lay for _, lay in out[1:]))


def _check_attention(layout: VectorLayout, attention: Any) -> None:
    if isinstance(attention, S.MergedAttention):
        raise ValueError(
            "the vector layout reads the attention's factors (W_Q, W_K, W_V, W_O) as torch "
            "stores them, not merged forms; give an AttentionSpec or a torch module, or "
            "build U with layout='scalar' for a MergedAttention"
        )
    h, d, dh = attention.n_heads, attention.d_model, attention.d_head
    modern = (attention.rotary, attention.linear, attention.linformer)
    if any(x is not None for x in modern) and not layout.modern:
        raise ValueError(
            "this U does not read rotary position embeddings, linear attention or Linformer; "
            "build one with layer='decoder' (vector layout)"
        )
    if attention.linformer is not None and attention.linformer.k > layout.N:
        raise ValueError(
            f"the Linformer projects onto k = {attention.linformer.k} keys, but this U was "
            f"built for at most {layout.N} keys (max_n); build U with max_n >= "
            f"{attention.linformer.k}"
        )
    if attention.linear == "relu" and attention.linear_eps == 0:
        raise ValueError(
            "linear attention with phi = relu needs linear_eps > 0: a query whose features "
            "meet no key's would have weights 0/0"
        )
    if h > layout.H or d > layout.D or h * dh > layout.D:
        raise ValueError(
            f"target has {h} heads of width {dh} (together {h * dh}) and d={d}, but this U "
            f"was built for at most {layout.H} heads, d <= {layout.D} and heads together at "
            f"most {layout.D} wide; build a larger U with simulator.build(max_n, max_d, "
            "max_heads, layout='vector')"
        )


def pack(layout: VectorLayout, case: Case, prefix: bool = False) -> torch.Tensor:
    """The token array ``[length, width]`` of one case (entries copied, nothing computed);
    with ``prefix``, its first ``layout.input_length`` positions only (every entry of a
    case lies there; the scratch positions after are 0).

    Raises:
        ValueError: the case's attention is merged (this layout reads its factors).
    """
    _check_attention(layout, case.attention)
    lay, X = layout, case.X
    n, d = X.shape
    rows = lay.input_length if prefix else lay.length
    out = zero_rows.zeros((rows, lay.width), DTYPE)  # pages only where written
    out[lay.xpos(0) : lay.xpos(n), :d] = X
    out[lay.xpos(0) : lay.xpos(n), lay.B] = 1.0
    if case.layer is not None:
        out[lay.colvpos, :d] = 1.0
    _pack_attention(lay, case.attention, d, out, 0, n)
    if case.layer is not None:
        _pack_layer(lay, case.layer, d, out, 0)
    for ell, layer in enumerate(case.rest, start=1):
        _pack_attention(lay, layer.attention, d, out, ell, n)
        _pack_layer(lay, layer, d, out, ell)
    for ell in range(1 + len(case.rest), lay.layers if case.layer is not None else 1):
        # a layer the stack does not have: pre-norm with every weight 0 is the identity
        # (the norms give 0, so attention and feed-forward add 0 to the residual stream)
        P = lay.parampos(ell)
        out[P, lay.param("norm_first")] = 1.0
        out[P, lay.param("relu")] = 1.0
        for name in ("eps_input", "eps_middle", "eps_output"):
            out[P, lay.param(name)] = 1.0
    return out


def _pack_attention(
    lay: VectorLayout, att: S.AttentionSpec, d: int, out: torch.Tensor, ell: int, n: int
) -> None:
    B = lay.B
    h, dh = att.n_heads, att.d_head
    E = h * dh
    P = lay.parampos(ell)
    out[P, lay.param("causal")] = float(att.causal)
    if att.scale == 1.0 / math.sqrt(dh):  # the standard scale: U computes it from d_head
        for head in range(h):
            out[lay.hdimpos(head, ell), dh - 1] = 1.0
    else:
        out[P, lay.param("scale")] = float(att.scale)
    # rows of torch's in_proj_weight: row h * dh + b of W_q is column b of W_Q[h]
    for t, (W, bias) in enumerate(((att.W_Q, att.b_Q), (att.W_K, att.b_K), (att.W_V, att.b_V))):
        rows = W.permute(0, 2, 1).reshape(E, d)  # [h, d, dh] -> [h * dh, d]
        start = lay.wpos(t, 0, ell)
        out[start : start + E, :d] = rows
        out[start : start + E, B] = bias.reshape(E)
    # rows of out_proj.weight [d, E]: row k is column k of the concatenated W_O [E, d]
    out[lay.opos(0, ell) : lay.opos(d, ell), :E] = att.W_O.reshape(E, d).T
    out[lay.opos(0, ell) : lay.opos(d, ell), B] = att.b_O
    for head in range(h):
        out[lay.maskpos(head, ell), head * dh : (head + 1) * dh] = 1.0
    if lay.modern:
        _pack_rotary(lay, att, d, out, ell, n)
        if att.linformer is not None:  # Linformer: its flag and E, F by rows
            k = att.linformer.k
            out[lay.param2pos(ell), lay.param2("linformer")] = 1.0
            for t, M in enumerate((att.linformer.E, att.linformer.F)):
                start = lay.lpos(t, 0, ell)
                out[start : start + k, :n] = M[:, :n]
            out[lay.lpos(0, 0, ell) : lay.lpos(0, k, ell), lay.B] = 1.0
        if att.linear is not None:  # linear attention: its flags and eps
            P2 = lay.param2pos(ell)
            out[P2, lay.param2("linear")] = 1.0
            out[P2, lay.param2("phi_elu")] = float(att.linear == "elu")
            out[P2, lay.param2("linear_eps")] = att.linear_eps


def _pack_rotary(
    lay: VectorLayout, att: S.AttentionSpec, d: int, out: torch.Tensor, ell: int, n: int
) -> None:
    """ROT(r): the rotary tables by column (cos 1 and sin 0 without rotary); WROT(t, r): the
    in_proj row of column r's partner in rotate_half, with its bias."""
    h, dh = att.n_heads, att.d_head
    E, N, B = h * dh, lay.N, lay.B
    rot = slice(lay.rotpos(0, ell), lay.rotpos(E, ell))
    if att.rotary is None:
        out[rot, :n] = 1.0  # q cos + rotate_half(q) sin = q
        return
    cos, sin = att.rotary.tables(n, dh)  # [n, dh]
    col = torch.arange(E) % dh
    out[rot, :n] = cos[:, col].T
    out[rot, N : N + n] = sin[:, col].T
    out[rot, B] = (col < dh // 2).to(DTYPE)  # the first half: rotate_half gives -q[partner]
    half = dh // 2
    partner = torch.arange(E) - col + (col + half) % dh
    for t, (W, bias) in enumerate(((att.W_Q, att.b_Q), (att.W_K, att.b_K))):
        rows = W.permute(0, 2, 1).reshape(E, d)
        start = lay.wrotpos(t, 0, ell)
        out[start : start + E, :d] = rows[partner]
        out[start : start + E, B] = bias.reshape(E)[partner]


def _pack_layer(
    lay: VectorLayout, layer: S.EncoderLayerSpec, d: int, out: torch.Tensor, ell: int
) -> None:
    B = lay.B
    P = lay.parampos(ell)
    out[P, lay.param("norm_first")] = float(layer.norm_first)
    act = layer.ffn.activation.value
    if act in ("silu", "identity"):  # a decoder layout's (checked before packing)
        out[lay.param2pos(ell), lay.param2(act)] = 1.0
    else:
        out[P, lay.param(act)] = 1.0
    # slots: input (pre-norm's norm1), middle (post-norm's norm1, pre-norm's norm2), output
    # (post-norm's norm2); an unused slot gets eps 1 and gain 0, so it stays finite
    if layer.norm_first:
        slots = (layer.norm1, layer.norm2, None)
    else:
        slots = (None, layer.norm1, layer.norm2)
    for s, norm in enumerate(slots):
        name = ("eps_input", "eps_middle", "eps_output")[s]
        if norm is None:
            out[P, lay.param(name)] = 1.0
            continue
        out[P, lay.param(name)] = float(norm.eps)
        out[lay.lnpos(s, 0, ell), :d] = norm.weight
        if lay.modern:  # which kind of norm: centring (LayerNorm) or not (RMSNorm)
            slot = ("input", "middle", "output")[s]
            out[lay.param2pos(ell), lay.param2(f"on_{slot}")] = 1.0
            if isinstance(norm, S.LayerNormSpec):
                out[lay.param2pos(ell), lay.param2(f"centre_{slot}")] = 1.0
        if isinstance(norm, S.LayerNormSpec):  # an RMSNorm has no bias
            out[lay.lnpos(s, 1, ell), :d] = norm.bias
    ffn = layer.ffn
    f = ffn.d_mlp
    out[lay.w1pos(0, ell) : lay.w1pos(f, ell), :d] = ffn.W1.T  # linear1.weight [f, d]
    out[lay.w1pos(0, ell) : lay.w1pos(f, ell), B] = ffn.b1
    out[lay.w2pos(0, ell) : lay.w2pos(d, ell), :f] = ffn.W2.T  # linear2.weight [d, f]
    out[lay.w2pos(0, ell) : lay.w2pos(d, ell), B] = ffn.b2
    if ffn.gated:  # a GLU's linear branch (checked: a decoder layout)
        out[lay.param2pos(ell), lay.param2("gated")] = 1.0
        out[lay.w3pos(0, ell) : lay.w3pos(f, ell), :d] = ffn.W3.T
        out[lay.w3pos(0, ell) : lay.w3pos(f, ell), B] = ffn.b3


def pack_batch(layout: VectorLayout, cases: list[Case], prefix: bool = False) -> torch.Tensor:
    """``[batch, length, width]`` for several cases (``prefix``: ``[batch, input_length,
    width]``, as :func:`pack`).

    >>> from attnsim.simulator import sampling
    >>> lay = VectorLayout(2, 4, 2)
    >>> case = Case(sampling.random_attention(2, 4, seed=0), torch.ones(2, 4))
    >>> tuple(pack_batch(lay, [case, case]).shape)
    (2, 24, 11)
    """
    if len(cases) == 1:  # no copy (U's largest sequences take gigabytes)
        return pack(layout, cases[0], prefix)[None]
    return torch.stack([pack(layout, c, prefix) for c in cases])


def unpack_output(layout: VectorLayout, out: torch.Tensor, n: int, d: int) -> torch.Tensor:
    """T(X) ``[n, d]`` from U's output ``[length]`` (read at OUT(i, k)).

    >>> lay = VectorLayout(2, 3, 1)
    >>> unpack_output(lay, torch.arange(float(lay.length)), 2, 2).tolist()
    [[0.0, 1.0], [3.0, 4.0]]
    """
    return out[: n * layout.D].reshape(n, layout.D)[:, :d]
