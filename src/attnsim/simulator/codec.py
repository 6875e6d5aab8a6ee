"""Packing <T, X> into U's input sequence and reading T(X) back: the one place that does.

Everything here is float64 ``torch.Tensor`` in, float64 ``torch.Tensor`` out, and follows
the regions of :class:`~attnsim.simulator.layout.Layout`. A
:class:`~attnsim.simulator.case.Case` is one target and its input in the form U reads (here:
the attention merged once, the causal flag resolved); :func:`pack` writes it,
:func:`unpack` reads it back (for tests and inspection), and :func:`unpack_output` reads
T(X) from U's output.

Glossary: ``N, D, H, F`` the build sizes (rows, width, heads, feed-forward width) and
``D' = D + 1``; ``n, d, h, d_mlp`` the sizes of one target and X; ``length`` the positions
of U's input (``Layout.length``); ``batch`` the (target, X) pairs of one forward pass.

>>> import torch
>>> from attnsim.simulator import sampling
>>> from attnsim.simulator.layout import Layout
>>> lay = Layout(3, 4, 2)
>>> case = Case(sampling.random_attention(2, 4, seed=0).merged(), torch.ones(2, 4))
>>> seq = pack(lay, case)
>>> tuple(seq.shape), seq.dtype
((110,), torch.float64)
>>> back = unpack(lay, seq, case.shape)
>>> torch.equal(back.X, case.X), torch.equal(back.attention.A, case.attention.A)
(True, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from attnsim.simulator import spec as S
from attnsim.simulator.case import Case, Shape
from attnsim.simulator.layout import FLAG_NAMES, LN_SLOTS, Layout

__all__ = ["Case", "Shape", "check_fits", "pack", "pack_batch", "unpack", "unpack_output"]

DTYPE = torch.float64
ACTIVATION_FLAGS = FLAG_NAMES[1:]  # relu, gelu, gelu_tanh, maxmin: the activations U simulates


def check_fits(layout: Layout, shape: Shape) -> None:
    """Raises a ValueError unless a (target, X) pair of ``shape`` fits ``layout``.

    >>> check_fits(Layout(2, 2, 1), Shape(n=3, d=2, n_heads=1))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: a case of n=3, d=2, 1 heads does not fit the layout for n <= 2, d <= 2, ...
    """
    encoder = shape.d_mlp > 0
    if encoder != (layout.F > 0):
        have = "an encoder layer" if encoder else "an attention layer"
        want = "encoder layers" if layout.F else "attention layers"
        raise ValueError(f"the case is {have}, but the layout holds {want}; use a matching build")
    sizes = (shape.n, shape.d, shape.n_heads, shape.d_mlp if encoder else 1)
    if any(isinstance(v, bool) or not isinstance(v, int) for v in sizes) or min(sizes) < 1:
        raise ValueError(f"a case's sizes must be positive ints, got {shape}")
    limits = (layout.N, layout.D, layout.H, layout.F if encoder else 1)
    if any(v > lim for v, lim in zip(sizes, limits)):
        ff = f", d_mlp={shape.d_mlp}" if encoder else ""
        ff_max = f", d_mlp <= {layout.F}" if encoder else ""
        raise ValueError(
            f"a case of n={shape.n}, d={shape.d}, {shape.n_heads} heads{ff} does not fit the "
            f"layout for n <= {layout.N}, d <= {layout.D}, at most {layout.H} heads{ff_max}; "
            "use a layout (a build) at least this large"
        )


def _feature_slots(d: int, D: int) -> torch.Tensor:
    """Where feature a of X~ = [X, 1] goes: real features stay, the constant one goes to D."""
    return torch.tensor([*range(d), D])


def pack(layout: Layout, case: Case) -> torch.Tensor:
    """Writes ``case`` into U's input sequence.

    Args:
        layout: the build's layout.
        case: the target and X.

    Returns:
        ``[length]`` float64; zeros in padding and scratch-only positions.

    Raises:
        TypeError: the case's attention is not merged (this layout reads ``A_h`` and
            ``W_V,h W_O,h``), or the case is a stack.
        ValueError: the case does not fit the layout, or is of the other layer kind.
    """
    if not isinstance(case.attention, S.MergedAttention):
        raise TypeError(
            "Case.attention must be a MergedAttention in the scalar layout, got "
            f"{type(case.attention).__name__}; call .merged() on the attention spec"
        )
    if case.rest:
        raise TypeError(
            "the scalar layout holds one layer, the case is a stack; build U with "
            "layout='vector' and n_layers for stacks"
        )
    check_fits(layout, case.shape)
    n, d, h = case.shape.n, case.shape.d, case.shape.n_heads
    N, D, H, Dp = layout.N, layout.D, layout.H, layout.Dp
    seq = torch.zeros(layout.length, dtype=DTYPE)
    A_aug, W_aug = case.attention.augmented()  # [h, d+1, d+1], [h, d+1, d]
    feat = _feature_slots(d, D)
    heads = torch.arange(h)[:, None, None]
    X_pad = torch.zeros(N, D, dtype=DTYPE)  # [n, d] -> [N, D], zero padded
    X_pad[:n, :d] = case.X
    seq[layout.region("X")] = X_pad.reshape(-1)
    A_pad = torch.zeros(H, Dp, Dp, dtype=DTYPE)  # [h, d+1, d+1] -> [H, D', D']
    A_pad[heads, feat[None, :, None], feat[None, None, :]] = A_aug
    seq[layout.region("A")] = A_pad.reshape(-1)
    W_pad = torch.zeros(H, Dp, D, dtype=DTYPE)  # [h, d+1, d] -> [H, D', D]
    W_pad[heads, feat[None, :, None], torch.arange(d)[None, None, :]] = W_aug
    seq[layout.region("W")] = W_pad.reshape(-1)
    seq[layout.bpos(0) : layout.bpos(0) + d] = case.attention.b_O
    seq[layout.padpos(n) : layout.padpos(0) + N] = 1.0  # rows n.. are padding
    seq[layout.flagpos()] = 1.0 if case.attention.causal else 0.0
    if case.layer is not None:
        _pack_encoder(layout, seq, case.layer)
    return seq


def _norm_slots(layer: S.EncoderLayerSpec) -> tuple[S.LayerNormSpec | None, ...]:
    """The layer's LayerNorms in U's slots (input, middle, output); None: an unused slot."""
    if layer.norm_first:
        return (layer.norm1, layer.norm2, None)
    return (None, layer.norm1, layer.norm2)


def _pack_encoder(layout: Layout, seq: torch.Tensor, layer: S.EncoderLayerSpec) -> None:
    """Writes the LayerNorms, flags, valid columns and feed-forward block of ``layer``."""
    if layer.norm1 is None or layer.norm2 is None:
        raise ValueError("the codec packs encoder layers with both LayerNorms; got one missing")
    ffn = layer.ffn
    if ffn.activation.value not in ACTIVATION_FLAGS:
        raise ValueError(
            f"the layout has flags for the activations {', '.join(ACTIVATION_FLAGS)}, got "
            f"{ffn.activation.value!r}"
        )
    d, dm, D, F = layer.d_model, ffn.d_mlp, layout.D, layout.F
    if ffn.activation is S.Activation.MAXMIN and dm % 2:
        raise ValueError(
            f"a maxmin feed-forward block sorts hidden units in pairs (2k, 2k+1), so its "
            f"d_mlp must be even, got {dm}"
        )
    for k, norm in enumerate(_norm_slots(layer)):
        if norm is None:
            seq[layout.lnpos(k, "eps")] = 1.0  # gain 0: the slot's output is 0, never inf
            continue
        gain, bias = layout.lnpos(k, "gain"), layout.lnpos(k, "bias")
        seq[gain : gain + d] = norm.weight
        seq[bias : bias + d] = norm.bias
        seq[layout.lnpos(k, "eps")] = norm.eps
    seq[layout.flagpos_named("norm_first")] = 1.0 if layer.norm_first else 0.0
    seq[layout.flagpos_named(ffn.activation.value)] = 1.0
    seq[layout.colvpos(0) : layout.colvpos(0) + d] = 1.0
    W1 = torch.zeros(D, F, dtype=DTYPE)  # [d, d_mlp] -> [D, F]
    W1[:d, :dm] = ffn.W1
    seq[layout.region("W1")] = W1.reshape(-1)
    W2 = torch.zeros(F, D, dtype=DTYPE)  # [d_mlp, d] -> [F, D]
    W2[:dm, :d] = ffn.W2
    seq[layout.region("W2")] = W2.reshape(-1)
    seq[layout.b1pos(0) : layout.b1pos(0) + dm] = ffn.b1
    seq[layout.b2pos(0) : layout.b2pos(0) + d] = ffn.b2


def pack_batch(layout: Layout, cases: Sequence[Case]) -> torch.Tensor:
    """:func:`pack` for several cases: ``[batch, length]`` float64."""
    if not cases:
        raise ValueError("pack_batch needs at least one case")
    return torch.stack([pack(layout, c) for c in cases])


def _sequence(layout: Layout, seq: Any, what: str, batched: bool) -> torch.Tensor:
    t = torch.as_tensor(seq)
    want = ("[batch, length]" if batched else "[length]").replace("length", str(layout.length))
    ok = t.ndim == (2 if batched else 1) and t.shape[-1] == layout.length
    if not ok or not (t.is_floating_point()):
        raise ValueError(
            f"{what} must be a real tensor of shape {want} (this layout's sequence), got shape "
            f"{tuple(t.shape)} and dtype {t.dtype}; pass what pack (or U's run) produced"
        )
    return t.to(DTYPE)


def unpack(layout: Layout, seq: Any, shape: Shape) -> Case:
    """Reads a case of ``shape`` back from a packed sequence (the inverse of :func:`pack`).

    Args:
        layout: the layout ``seq`` was packed for.
        seq: ``[length]`` sequence.
        shape: the case's sizes (the sequence does not record the number of heads).

    Returns:
        The case: the attention merged, and for an encoder layer the whole layer (with
        that attention).

    Raises:
        ValueError: ``seq`` has the wrong shape, ``shape`` does not fit, or the flags are
            not those of a packed encoder layer.
    """
    seq = _sequence(layout, seq, "seq", batched=False)
    check_fits(layout, shape)
    n, d, h, dm = shape.n, shape.d, shape.n_heads, shape.d_mlp
    N, D, H, Dp = layout.N, layout.D, layout.H, layout.Dp
    feat = _feature_slots(d, D)
    X = seq[layout.region("X")].reshape(N, D)[:n, :d]
    A_aug = seq[layout.region("A")].reshape(H, Dp, Dp)[:h][:, feat][:, :, feat]  # [h, d+1, d+1]
    W_aug = seq[layout.region("W")].reshape(H, Dp, D)[:h][:, feat, :d]  # [h, d+1, d]
    attention = S.MergedAttention(
        A=A_aug[:, :d, :d],
        W_OV=W_aug[:, :d],
        a_query=A_aug[:, :d, d],
        a_key=A_aug[:, d, :d],
        a_const=A_aug[:, d, d],
        b_OV=W_aug[:, d],
        b_O=seq[layout.bpos(0) : layout.bpos(0) + d],
        causal=bool(seq[layout.flagpos()] == 1.0),
    )
    if not layout.F:
        return Case(attention, X)
    flags = {f: float(seq[layout.flagpos_named(f)]) for f in FLAG_NAMES}
    active = [f for f in ACTIVATION_FLAGS if flags[f] == 1.0]
    if len(active) != 1:
        raise ValueError(
            f"the sequence's activation flags {[flags[f] for f in ACTIVATION_FLAGS]} are not "
            "one-hot: it is not a packed encoder layer"
        )
    pre = flags["norm_first"] == 1.0
    norms = []
    for k in range(len(LN_SLOTS)):
        gain, bias = layout.lnpos(k, "gain"), layout.lnpos(k, "bias")
        norms.append(
            S.LayerNormSpec(
                weight=seq[gain : gain + d],
                bias=seq[bias : bias + d],
                eps=float(seq[layout.lnpos(k, "eps")]),
            )
        )
    ffn = S.FeedForwardSpec(
        W1=seq[layout.region("W1")].reshape(D, layout.F)[:d, :dm],
        W2=seq[layout.region("W2")].reshape(layout.F, D)[:dm, :d],
        b1=seq[layout.b1pos(0) : layout.b1pos(0) + dm],
        b2=seq[layout.b2pos(0) : layout.b2pos(0) + d],
        activation=active[0],
    )
    norm1, norm2 = (norms[0], norms[1]) if pre else (norms[1], norms[2])
    return Case(attention, X, S.EncoderLayerSpec(attention, ffn, norm1, norm2, norm_first=pre))


def unpack_output(layout: Layout, out: Any, shapes: Sequence[Shape]) -> list[torch.Tensor]:
    """Reads T(X) for each case from U's output at every position.

    Args:
        layout: the build's layout.
        out: ``[batch, length]`` U's numerical output (T(X)[i, c] at X position (i, c)).
        shapes: the sizes of each case of the batch.

    Returns:
        One ``[n, d]`` float64 tensor per case (copies, not views of ``out``).

    Raises:
        ValueError: ``out`` has the wrong shape, or ``shapes`` another batch size.
    """
    out = _sequence(layout, out, "U's output", batched=True)
    if len(shapes) != out.shape[0]:
        raise ValueError(
            f"U's output holds {out.shape[0]} sequences, but {len(shapes)} shapes were given; "
            "pass one shape per case of the batch"
        )
    grid = out[:, layout.region("X")].reshape(-1, layout.N, layout.D)  # [batch, N, D]
    results = []
    for b, shape in enumerate(shapes):
        check_fits(layout, shape)
        results.append(grid[b, : shape.n, : shape.d].clone())
    return results
