"""Random targets of the kinds a decoder U reads (``layer="decoder"``): today's layers
(RMSNorm or no norm, gated feed-forwards, rotary embeddings, linear attention, Linformer),
for tests, sweeps and ``attnsim verify --layer KIND``. The encoder and attention draws are in
:mod:`attnsim.simulator.sampling`, which these build on."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch

from attnsim.simulator import spec as S
from attnsim.simulator.sampling import (
    ENCODER_ACTIVATIONS,
    _randn,
    random_encoder_layer,
    with_logit_scale,
)

__all__ = [
    "DECODER_ACTIVATIONS",
    "DECODER_KINDS",
    "random_decoder_layer",
    "random_decoder_target",
    "random_kind_target",
]


DECODER_ACTIVATIONS = (*ENCODER_ACTIVATIONS, S.Activation.SILU, S.Activation.IDENTITY)


def random_decoder_layer(
    n_heads: int,
    d: int,
    d_mlp: int,
    *,
    seed: int,
    norm: str = "rms",
    gated: bool = True,
    activation: S.Activation | str = S.Activation.SILU,
    rotary: bool = True,
    norm_first: bool = True,
    bias: bool = False,
    causal: bool = True,
    linear: str | None = None,
    linformer: tuple[int, int] | None = None,
    logit_scale: float | None = None,
    X: Any = None,
) -> S.EncoderLayerSpec:
    """Draw a random layer of today's kinds (the defaults: LLaMA's shape, pre-RMSNorm, causal
    rotary attention without biases, SwiGLU).

    Args:
        n_heads, d, d_mlp: sizes (``d`` divisible by ``n_heads``; rotary needs an even head).
        seed: seed of the private generator.
        norm: "layer" (LayerNorm), "rms" (RMSNorm) or "none".
        gated: a GLU feed-forward (``W3``).
        activation: the FFN's (gate's) activation.
        rotary: rotary embeddings (base drawn in [10, 10^4]).
        norm_first, bias, causal: as in :func:`random_encoder_layer`.
        linear: linear attention's feature map ("elu" or "relu"), or None (softmax).
        linformer: ``(k, n_max)``: Linformer projections E, F ``[k, n_max]`` (entries
            around ``1/sqrt(n_max)``), or None.
        logit_scale, X: the largest |score| on ``X`` (see :func:`with_logit_scale`).

    >>> layer = random_decoder_layer(2, 4, 6, seed=0)
    >>> type(layer.norm1).__name__, layer.ffn.gated, layer.attention.rotary is not None
    ('RMSNormSpec', True, True)
    """
    from attnsim.simulator.spec_modern import RMSNormSpec, RotarySpec

    if norm not in ("layer", "rms", "none"):
        raise ValueError(f"norm must be 'layer', 'rms' or 'none', got {norm!r}")
    gated, rotary = S._check_bool(gated, "gated"), S._check_bool(rotary, "rotary")
    base = random_encoder_layer(
        n_heads,
        d,
        d_mlp,
        seed=seed,
        activation=activation,
        norm_first=norm_first,
        layer_norm=norm == "layer",
        bias=bias,
        causal=causal,
    )
    g = torch.Generator().manual_seed(seed + 2_000_003)
    norms = (base.norm1, base.norm2)
    if norm == "rms":
        norms = tuple(RMSNormSpec(1.0 + _randn(g, d, std=0.2)) for _ in range(2))
    ffn = base.ffn
    if gated:
        W3 = _randn(g, d, d_mlp, std=1.0 / math.sqrt(d))
        b3 = _randn(g, d_mlp, std=0.5) if bias else None
        ffn = dataclasses.replace(ffn, W3=W3, b3=b3)
    attention = base.attention
    if rotary:
        rot = RotarySpec(base=float(10.0 ** (1 + 3 * torch.rand(1, generator=g).item())))
        attention = dataclasses.replace(attention, rotary=rot)
    if linear is not None:
        attention = dataclasses.replace(attention, linear=linear)
    if linformer is not None:
        from attnsim.simulator.spec_modern import LinformerSpec

        k, n_max = linformer
        E, F = (_randn(g, k, n_max, std=1.0 / math.sqrt(n_max)) for _ in range(2))
        attention = dataclasses.replace(attention, linformer=LinformerSpec(E, F))
    layer = S.EncoderLayerSpec(attention, ffn, norms[0], norms[1], norm_first=norm_first)
    if logit_scale is not None and X is not None:
        return with_logit_scale(layer, X, logit_scale)
    return layer


def random_decoder_target(
    rng: np.random.Generator,
    max_n: int,
    max_d: int,
    max_heads: int,
    max_logit: float,
    max_ff: int,
    X: torch.Tensor | None = None,
) -> tuple[S.EncoderLayerSpec, torch.Tensor, int]:
    """A random layer of any kind a decoder U reads (norms LayerNorm, RMSNorm or none;
    gated or not; every activation; rotary where the head width is even; softmax, linear
    or Linformer attention;
    causal, pre-norm and biases drawn), its X and its seed. A draw whose head has all scores
    0 on X (a LayerNorm at d = 1 without bias, say), which no scale brings to the drawn
    largest score, is drawn again.

    >>> rng = np.random.default_rng(0)
    >>> layers = [random_decoder_target(rng, 3, 4, 2, 5.0, 6)[0] for _ in range(30)]
    >>> sorted({type(x.norm1).__name__ for x in layers})
    ['LayerNormSpec', 'NoneType', 'RMSNormSpec']
    """
    while True:
        try:
            return _decoder_target(rng, max_n, max_d, max_heads, max_logit, max_ff, X)
        except ValueError as exc:
            if "all scores zero" not in str(exc):
                raise


def _decoder_target(rng, max_n, max_d, max_heads, max_logit, max_ff, X):
    h = int(rng.integers(1, max_heads + 1))
    d = int(rng.integers(1, max_d // h + 1)) * h
    n = int(rng.integers(1, max_n + 1)) if X is None else X.shape[0]
    if X is not None:
        d = X.shape[1]
        h = max(k for k in range(1, max_heads + 1) if d % k == 0)
    seed = int(rng.integers(1 << 31))
    if X is None:
        X = torch.tensor(np.random.default_rng(seed).standard_normal((n, d)), dtype=torch.float64)
    d_mlp = int(rng.integers(1, max_ff + 1))
    activation = DECODER_ACTIVATIONS[int(rng.integers(len(DECODER_ACTIVATIONS)))]
    if activation is S.Activation.MAXMIN:
        if max_ff < 2:
            activation = S.Activation.SILU
        elif d_mlp % 2:
            d_mlp = d_mlp + 1 if d_mlp < max_ff else d_mlp - 1
    # the attention's kind: softmax, linear or Linformer (which has no mask, rotary or phi)
    kind = ("softmax", "linear", "linformer")[int(rng.integers(3))]
    causal = kind != "linformer" and bool(rng.integers(2))
    linear = ("elu", "relu")[int(rng.integers(2))] if kind == "linear" else None
    rotary = kind != "linformer" and (d // h) % 2 == 0 and bool(rng.integers(2))
    norm = ("layer", "rms", "none")[int(rng.integers(3))]
    gated = bool(rng.integers(2))
    norm_first = bool(rng.integers(2))
    # a LayerNorm of one feature outputs its bias: drawn, so that the layer is not all 0
    bias = bool(rng.integers(2)) or (d == 1 and norm == "layer")
    layer = random_decoder_layer(
        h,
        d,
        d_mlp,
        seed=seed,
        norm=norm,
        gated=gated,
        activation=activation,
        rotary=rotary,
        norm_first=norm_first,
        bias=bias,
        causal=causal,
        linear=linear,
        linformer=(int(rng.integers(1, max_n + 1)), max_n) if kind == "linformer" else None,
        logit_scale=float(rng.uniform(0.1, max_logit)),
        X=X,
    )
    return layer, X, seed


# the target kinds a decoder U reads, for sweeps and ``attnsim verify --layer KIND``
DECODER_KINDS = ("llama", "rmsnorm", "no_norm", "glu", "rotary", "linear", "linformer", "mixed")
_PLAIN_ACTS = ("relu", "gelu", "gelu_tanh", "maxmin")


def random_kind_target(
    rng: np.random.Generator,
    kind: str,
    max_n: int,
    max_d: int,
    max_heads: int,
    max_ff: int,
    *,
    max_logit: float = 20.0,
) -> tuple[S.EncoderLayerSpec, torch.Tensor, int]:
    """A random layer of one kind a decoder U reads (``DECODER_KINDS``), its X and its seed:
    ``llama`` (pre-RMSNorm, causal rotary attention, SwiGLU), ``rmsnorm`` and ``no_norm``
    (plain feed-forwards), ``glu`` (every gate), ``rotary`` (in a LayerNorm layer),
    ``linear`` (elu + 1 or relu feature maps), ``linformer`` or ``mixed`` (every option,
    :func:`random_decoder_target`). A draw whose head has all scores 0 on X is drawn again.

    >>> rng = np.random.default_rng(0)
    >>> layer, X, _ = random_kind_target(rng, "linear", 3, 4, 2, 6)
    >>> layer.attention.linear in ("elu", "relu"), X.shape[1] == layer.d_model
    (True, True)
    >>> random_kind_target(rng, "tanh", 3, 4, 2, 6)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: kind must be one of llama, rmsnorm, ..., mixed; got 'tanh'
    """
    if kind not in DECODER_KINDS:
        raise ValueError(f"kind must be one of {', '.join(DECODER_KINDS)}; got {kind!r}")
    if max_ff < 2 and kind != "mixed":
        raise ValueError(f"a {kind} layer needs max_ff >= 2 (maxmin pairs), got {max_ff}")
    if kind == "mixed":
        return random_decoder_target(rng, max_n, max_d, max_heads, max_logit, max_ff)
    while True:
        try:
            return _kind_target(rng, kind, max_n, max_d, max_heads, max_ff, max_logit)
        except ValueError as exc:
            if "all scores zero" not in str(exc):
                raise


def _kind_target(rng, kind, n_max, d_max, h_max, f_max, max_logit):
    h = int(rng.integers(1, h_max + 1))
    d = int(rng.integers(1, d_max // h + 1)) * h
    if kind in ("llama", "rotary") and (d // h) % 2:
        d = 2 * h  # rotary pairs columns: an even head width
    n = int(rng.integers(1, n_max + 1))
    f = int(rng.integers(1, f_max // 2 + 1)) * 2  # even: maxmin pairs
    seed = int(rng.integers(1 << 31))
    X = torch.tensor(np.random.default_rng(seed).standard_normal((n, d)), dtype=torch.float64)
    coin = bool(rng.integers(2))
    acts = _PLAIN_ACTS[seed % 4]
    options = {
        "llama": {},
        "rmsnorm": {"gated": False, "rotary": False, "activation": acts, "norm_first": coin},
        "no_norm": {"norm": "none", "gated": False, "rotary": False, "activation": acts},
        "glu": {
            "rotary": False,
            "activation": ("identity", "relu", "gelu", "silu")[seed % 4],
            "bias": coin,
        },
        "rotary": {"norm": "layer", "gated": False, "activation": "gelu", "causal": coin},
        "linformer": {
            "linformer": (1 + seed % n_max, n_max),
            "causal": False,
            "rotary": False,
            "norm": ("layer", "rms")[seed % 2],
            "bias": True,
        },
        "linear": {
            "linear": ("elu", "relu")[seed % 2],
            "causal": coin,
            "rotary": False,
            "gated": bool(seed % 3),
            "bias": True,
        },
    }[kind]
    layer = random_decoder_layer(
        h, d, f, seed=seed, logit_scale=float(rng.uniform(0.1, max_logit)), X=X, **options
    )
    return layer, X, seed
