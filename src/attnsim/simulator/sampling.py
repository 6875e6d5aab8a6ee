"""Random targets: specs drawn from a seed, scaled to a wanted score size, and shifted.

For tests, benchmarks and ``verify``: :func:`random_attention` and
:func:`random_encoder_layer` draw specs (Gaussian weights, a private generator per seed);
:func:`with_logit_scale` rescales a spec's scores on an X; :func:`random_target` draws a
target and its X within build sizes, and :func:`shift_rows` / :func:`random_shifted_target`
move every row of scores anywhere within a bound (what U's row-maximum shift must absorb).

>>> import numpy as np
>>> target, X, seed = random_target(np.random.default_rng(0), 3, 4, 2, max_logit=10.0)
>>> X.shape[0] <= 3 and target.d_model == X.shape[1] <= 4
True
"""

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from attnsim.simulator import reference
from attnsim.simulator import spec as S

__all__ = [
    "random_attention",
    "random_encoder_layer",
    "with_logit_scale",
    "random_target",
    "shift_rows",
    "random_shifted_target",
]


# the activations ``random_target`` draws for encoder layers
ENCODER_ACTIVATIONS = (
    S.Activation.RELU,
    S.Activation.GELU,
    S.Activation.GELU_TANH,
    S.Activation.MAXMIN,
)


def _randn(g: torch.Generator, *shape: int, std: float) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=S.DTYPE) * std


def _check_size(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def random_attention(
    n_heads: int,
    d: int,
    d_head: int | None = None,
    *,
    seed: int,
    logit_scale: float | None = None,
    X: Any = None,
    bias: bool = True,
    causal: bool = False,
) -> S.AttentionSpec:
    """Draw a random :class:`AttentionSpec` (Gaussian weights, entries of variance ``1/d``).

    Args:
        n_heads: number of heads.
        d: model width.
        d_head: width of one head; ``None`` means ``d // n_heads`` (``d`` must then be
            divisible by ``n_heads``).
        seed: seed of the private generator (the same seed gives the same spec).
        logit_scale: if given with ``X``, rescale each head so that its largest pre-softmax
            score on ``X`` has magnitude exactly ``logit_scale`` (see
            :func:`with_logit_scale`); without ``X``, rescale each head so that the spectral
            norm of its augmented score form (:meth:`MergedAttention.augmented`) is
            ``logit_scale``, which bounds ``|S[i, j]| <= logit_scale * |[x_i, 1]| |[x_j, 1]|``.
        X: ``[n, d]`` input the scores refer to (only used with ``logit_scale``).
        bias: draw biases (True) or leave them zero.
        causal: the spec's causal flag.

    Returns:
        The spec.

    Raises:
        ValueError: non-positive sizes, ``d`` not divisible by ``n_heads`` when ``d_head`` is
            None, or a logit scale that cannot be reached (all scores zero).

    >>> import torch
    >>> X = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    >>> spec = random_attention(2, 4, seed=0, logit_scale=50.0, X=X)
    >>> peaks = reference.scores(spec, X).abs().amax(dim=(1, 2))  # per head
    >>> [round(p, 9) for p in peaks.tolist()]
    [50.0, 50.0]
    """
    n_heads, d = _check_size(n_heads, "n_heads"), _check_size(d, "d")
    bias, causal = S._check_bool(bias, "bias"), S._check_bool(causal, "causal")
    if d_head is None:
        if d % n_heads:
            raise ValueError(
                f"d={d} is not divisible by n_heads={n_heads}; pass d_head explicitly or "
                f"choose d as a multiple of n_heads"
            )
        d_head = d // n_heads
    d_head = _check_size(d_head, "d_head")
    g = torch.Generator().manual_seed(seed)
    std = 1.0 / math.sqrt(d)
    W_Q, W_K, W_V = (_randn(g, n_heads, d, d_head, std=std) for _ in range(3))
    W_O = _randn(g, n_heads, d_head, d, std=1.0 / math.sqrt(n_heads * d_head))
    biases = [_randn(g, n_heads, d_head, std=0.5) for _ in range(3)] + [_randn(g, d, std=0.5)]
    if not bias:
        biases = [None] * 4
    spec = S.AttentionSpec(W_Q, W_K, W_V, W_O, *biases, causal=causal)
    if logit_scale is None:
        return spec
    if X is not None:
        return with_logit_scale(spec, X, logit_scale)
    target = S._check_real(logit_scale, "logit_scale")
    norms = torch.linalg.matrix_norm(spec.merged().augmented()[0], ord=2)  # [h]
    return _scale_queries(spec, target / norms)


def _scale_queries(spec: S.AttentionSpec, factor: torch.Tensor) -> S.AttentionSpec:
    """Multiply each head's query weights and bias by ``factor[h]`` (scores scale likewise)."""
    return dataclasses.replace(
        spec, W_Q=spec.W_Q * factor[:, None, None], b_Q=spec.b_Q * factor[:, None]
    )


def with_logit_scale(
    spec: S.AttentionSpec | S.MergedAttention | S.EncoderLayerSpec, X: Any, magnitude: float
) -> S.AttentionSpec | S.MergedAttention | S.EncoderLayerSpec:
    """Rescale each head so that its largest pre-softmax score on ``X`` is ``magnitude``.

    Scores are linear in the query side (``W_Q`` and ``b_Q``; for a merged spec, all four
    score terms), so multiplying it by ``magnitude / max_ij |S_h[i, j]|`` makes
    ``max |S_h| == magnitude`` for every head (only the entries a query can see count when the
    spec is causal). For an encoder layer, ``X`` is the layer's input and the scores are
    those of the attention's input (``norm1(X)`` when ``norm_first``).

    Args:
        spec: the target.
        X: ``[n, d_model]`` input.
        magnitude: the wanted largest ``|score|`` per head (positive).

    Returns:
        A new spec of the same type.

    Raises:
        ValueError: ``magnitude <= 0``, a bad ``X``, or a head whose scores on ``X`` are all
            zero (it cannot be rescaled).

    >>> import torch
    >>> spec = random_attention(1, 3, seed=2)
    >>> X = torch.eye(3, dtype=torch.float64)
    >>> round(reference.scores(with_logit_scale(spec, X, 20.0), X).abs().max().item(), 9)
    20.0
    """
    target = S._check_real(magnitude, "magnitude")
    if target <= 0:
        raise ValueError(f"magnitude must be positive, got {target}; pass e.g. 50.0")
    if isinstance(spec, S.EncoderLayerSpec):
        X = reference.check_input(spec, X)
        if spec.norm_first:
            X = reference.layer_norm(spec.norm1, X)
        return dataclasses.replace(spec, attention=with_logit_scale(spec.attention, X, target))
    if not isinstance(spec, (S.AttentionSpec, S.MergedAttention)):
        raise TypeError(
            f"with_logit_scale needs an AttentionSpec, MergedAttention or EncoderLayerSpec, "
            f"got {type(spec).__name__}"
        )
    X = reference.check_input(spec, X)
    scores = reference.scores(spec, X)  # [h, n, n]
    if spec.causal:
        scores = scores.tril()  # entries above the diagonal are never seen
    peak = scores.abs().amax(dim=(1, 2))  # [h]
    if bool((peak == 0).any()):
        head = int((peak == 0).nonzero()[0])
        raise ValueError(
            f"head {head} has all scores zero on X, so no rescaling reaches |score| = "
            f"{target}; use an X with nonzero rows or draw the spec with another seed"
        )
    factor = target / peak
    if isinstance(spec, S.AttentionSpec):
        return _scale_queries(spec, factor)
    return dataclasses.replace(
        spec,
        A=spec.A * factor[:, None, None],
        a_query=spec.a_query * factor[:, None],
        a_key=spec.a_key * factor[:, None],
        a_const=spec.a_const * factor,
    )


def random_encoder_layer(
    n_heads: int,
    d: int,
    d_mlp: int | None = None,
    *,
    seed: int,
    activation: S.Activation | str = S.Activation.RELU,
    norm_first: bool = False,
    layer_norm: bool = True,
    bias: bool = True,
    causal: bool = False,
    logit_scale: float | None = None,
    X: Any = None,
) -> S.EncoderLayerSpec:
    """Draw a random :class:`EncoderLayerSpec`.

    Args:
        n_heads: number of heads (``d`` must be divisible by it).
        d: model width.
        d_mlp: FFN hidden width; ``None`` means ``4 * d``.
        seed: seed of the private generator.
        activation: FFN activation (see :class:`Activation`).
        norm_first: pre-norm (True) or post-norm (False).
        layer_norm: include the two LayerNorms (random gains near 1 and small shifts).
        bias: draw biases (True) or leave them zero.
        causal: the attention's causal flag.
        logit_scale: as in :func:`random_attention`; with ``X`` it refers to the scores of
            this layer on input ``X`` (see :func:`with_logit_scale`).
        X: ``[n, d]`` layer input for ``logit_scale``.

    Returns:
        The spec.

    Raises:
        ValueError: bad sizes or activation (see the spec classes).

    >>> layer = random_encoder_layer(2, 4, seed=0, activation="gelu")
    >>> layer.ffn.d_mlp, layer.ffn.activation.value, layer.norm1 is not None
    (16, 'gelu', True)
    """
    d = _check_size(d, "d")
    d_mlp = 4 * d if d_mlp is None else _check_size(d_mlp, "d_mlp")
    layer_norm = S._check_bool(layer_norm, "layer_norm")
    attention = random_attention(
        n_heads,
        d,
        seed=seed,
        bias=bias,
        causal=causal,
        logit_scale=None if X is not None else logit_scale,
    )
    g = torch.Generator().manual_seed(seed + 1_000_003)  # independent of the attention draw
    ffn = S.FeedForwardSpec(
        W1=_randn(g, d, d_mlp, std=1.0 / math.sqrt(d)),
        b1=_randn(g, d_mlp, std=0.5) if bias else None,
        W2=_randn(g, d_mlp, d, std=1.0 / math.sqrt(d_mlp)),
        b2=_randn(g, d, std=0.5) if bias else None,
        activation=activation,
    )
    norms: Sequence[S.LayerNormSpec | None] = [None, None]
    if layer_norm:
        norms = [
            S.LayerNormSpec(
                weight=1.0 + _randn(g, d, std=0.2), bias=_randn(g, d, std=0.2) if bias else None
            )
            for _ in range(2)
        ]
    layer = S.EncoderLayerSpec(attention, ffn, norms[0], norms[1], norm_first=norm_first)
    if logit_scale is not None and X is not None:
        return with_logit_scale(layer, X, logit_scale)
    return layer


def random_target(
    rng: np.random.Generator,
    max_n: int,
    max_d: int,
    max_heads: int,
    max_logit: float,
    max_ff: int = 0,
    X: torch.Tensor | None = None,
) -> tuple[S.AttentionSpec | S.EncoderLayerSpec, torch.Tensor, int]:
    """A random target within the sizes, its input X, and the seed that made it (given
    ``X``: a target of X's width for it, such as the next layer of a stack).

    With ``max_ff > 0`` the target is a full encoder layer (norm first or last, causal or
    not, relu, gelu, gelu_tanh or maxmin: a quarter each, maxmin with an even width, and
    never where ``max_ff`` is 1), else a multi-head attention layer.

    >>> rng = np.random.default_rng(1)
    >>> drawn = [random_target(rng, 2, 2, 1, 5.0, max_ff=4)[0].ffn for _ in range(40)]
    >>> sorted({f.activation.value for f in drawn})
    ['gelu', 'gelu_tanh', 'maxmin', 'relu']
    >>> all(f.d_mlp % 2 == 0 for f in drawn if f.activation.value == "maxmin")
    True
    """
    if X is None:
        h = int(rng.integers(1, max_heads + 1))
        d = int(rng.integers(1, max_d // h + 1)) * h
        n = int(rng.integers(1, max_n + 1))
        seed = int(rng.integers(1 << 31))
        X = torch.tensor(np.random.default_rng(seed).standard_normal((n, d)), dtype=torch.float64)
    else:  # a layer for this X (the next layer of a stack): its width, heads dividing it
        d = X.shape[1]
        heads = [k for k in range(1, max_heads + 1) if d % k == 0]
        h = heads[int(rng.integers(len(heads)))]
        seed = int(rng.integers(1 << 31))
    logit = float(rng.uniform(0.1, max_logit))
    if max_ff:
        d_mlp = int(rng.integers(1, max_ff + 1))
        # seed bits 0 and 1 choose norm_first and causal; bits 2 and 3 the activation
        activation = ENCODER_ACTIVATIONS[(seed // 4) % 4]
        if activation is S.Activation.MAXMIN:
            if max_ff < 2:  # no pair of hidden units fits
                activation = ENCODER_ACTIVATIONS[seed % 3]
            elif d_mlp % 2:  # maxmin sorts pairs: the next even width (the one below at F)
                d_mlp = d_mlp + 1 if d_mlp < max_ff else d_mlp - 1
        return (
            random_encoder_layer(
                h,
                d,
                d_mlp,
                seed=seed,
                activation=activation,
                norm_first=bool(seed % 2),
                causal=bool((seed // 2) % 2),
                logit_scale=logit,
                X=X,
            ),
            X,
            seed,
        )
    target = random_attention(h, d, seed=seed, causal=bool(seed % 2), bias=True)
    target = with_logit_scale(target, X, logit)
    return target, X, seed


def shift_rows(
    rng: np.random.Generator, target: S.MergedAttention, X: torch.Tensor, bound: float
) -> S.MergedAttention:
    """``target`` with every row of every head's scores on X shifted by its own amount.

    The shift of row i in head h, ``x_i . a_query_h + a_const_h``, adds the same amount to
    every key of the row (softmax does not change; a softmax without a max shift fails):
    drawn uniformly so that every score stays within ``bound`` (solved exactly when
    n <= d + 1, else a random direction scaled to reach the drawn size).

    >>> import torch
    >>> T, X = S.MergedAttention(A=torch.eye(2)[None], W_OV=torch.eye(2)[None]), torch.eye(2)
    >>> shifted = shift_rows(np.random.default_rng(0), T, X.double(), 1e4)
    >>> peak = reference.scores(shifted, X.double()).abs().max()
    >>> bool(peak <= 1e4), bool(peak > 100)
    (True, True)
    """
    n, d = X.shape
    room = bound - float(reference.scores(target, X).abs().max()) - 1e-6 * bound
    if room <= 0:
        raise ValueError(f"the target's scores already reach the bound {bound:g}")
    Xt = torch.cat([X, torch.ones(n, 1, dtype=X.dtype)], dim=1)  # [n, d + 1]
    a_query, a_const = target.a_query.clone(), target.a_const.clone()
    for h in range(target.n_heads):
        want = torch.tensor(rng.uniform(-room, room, n), dtype=X.dtype)
        if n <= d + 1:
            w = torch.linalg.lstsq(Xt, want[:, None]).solution[:, 0]
        else:
            w = torch.tensor(rng.standard_normal(d + 1), dtype=X.dtype)
            w = w * float(want.abs().max()) / float((Xt @ w).abs().max())
        w = w * min(1.0, room / float((Xt @ w).abs().max()))
        a_query[h] += w[:d]
        a_const[h] += w[d]
    return dataclasses.replace(target, a_query=a_query, a_const=a_const)


def random_shifted_target(
    rng: np.random.Generator, max_n: int, max_d: int, max_heads: int, bound: float
) -> tuple[S.MergedAttention, torch.Tensor, int]:
    """A random attention target (as ``random_target``, scores scaled up to 20) whose rows
    are shifted anywhere within ``bound`` (see ``shift_rows``), its X and its seed."""
    target, X, seed = random_target(rng, max_n, max_d, max_heads, 20.0)
    return shift_rows(rng, target.merged(), X, bound), X, seed
