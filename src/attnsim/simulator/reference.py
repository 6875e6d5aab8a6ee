"""The oracle: T(X) in plain float64 torch, written from the equations.

Nothing here calls a torch module; each function is the equation in the docstring of the spec
class it reads (:mod:`attnsim.simulator.spec`). Shapes: ``X`` is ``[n, d_model]`` (one
sequence, no batch axis); scores and patterns are ``[n_heads, n_query, n_key]``.

Masks follow the selector convention: ``mask[i, j]`` is True when query ``i`` may attend to
key ``j``. (``torch.nn.MultiheadAttention`` uses the opposite convention for a boolean
``attn_mask``: True there means "blocked"; pass ``~attn_mask`` here.) A spec's ``causal`` flag
is combined with the mask.

>>> import torch
>>> from attnsim.simulator import spec
>>> from attnsim.simulator.reference import reference
>>> head = spec.MergedAttention(A=torch.zeros(1, 2, 2), W_OV=torch.eye(2)[None])
>>> X = torch.tensor([[1.0, 0.0], [0.0, 3.0]], dtype=torch.float64)
>>> reference(head, X).tolist()  # zero scores: every query averages the values
[[0.5, 1.5], [0.5, 1.5]]
"""

from typing import Any

import torch

from attnsim.simulator import spec as specs

__all__ = [
    "check_input",
    "check_mask",
    "scores",
    "pattern",
    "values",
    "attention",
    "layer_norm",
    "activation",
    "feed_forward",
    "encoder_layer",
    "reference",
]

Tensor = torch.Tensor
Spec = specs.AttentionSpec | specs.MergedAttention | specs.EncoderLayerSpec
Attention = specs.AttentionSpec | specs.MergedAttention


def check_input(spec: Spec, X: Any) -> Tensor:
    """Validate an input sequence for ``spec`` and return it as a float64 tensor.

    Args:
        spec: any spec (gives ``d_model``).
        X: ``[n, d_model]`` array with ``n >= 1``.

    Returns:
        A float64 copy of ``X``.

    Raises:
        TypeError: ``X`` is not numeric.
        ValueError: wrong shape, empty, or NaN/Inf.

    >>> import torch
    >>> from attnsim.simulator import spec as specs
    >>> head = specs.MergedAttention(A=torch.zeros(1, 2, 2), W_OV=torch.eye(2)[None])
    >>> check_input(head, [[1, 2]]).dtype
    torch.float64
    """
    X = specs._tensor(X, "X")
    d = spec.d_model
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] != d:
        raise ValueError(
            f"X must have shape [n, d_model] = [n, {d}] with n >= 1, got {tuple(X.shape)}; "
            f"pass one unbatched sequence whose rows are the {d}-wide positions"
        )
    return X


def check_mask(mask: Any, n: int, causal: bool) -> Tensor:
    """Combine a user mask with the causal flag into a boolean ``[n, n]`` "may attend" matrix.

    Args:
        mask: ``None`` or a boolean ``[n, n]`` array, True where query ``i`` may see key ``j``.
        n: sequence length.
        causal: also forbid keys ``j > i``.

    Returns:
        Boolean ``[n, n]`` tensor.

    Raises:
        TypeError: ``mask`` is not boolean.
        ValueError: wrong shape, or a query that may attend to no key.

    >>> check_mask(None, 2, causal=True).tolist()
    [[True, False], [True, True]]
    """
    allowed = torch.ones(n, n, dtype=torch.bool)
    if mask is not None:
        m = torch.as_tensor(mask)
        if m.dtype != torch.bool:
            raise TypeError(
                f"mask must be boolean (True where query i may attend to key j), got dtype "
                f"{m.dtype}; for a torch attn_mask of booleans pass ~attn_mask"
            )
        if tuple(m.shape) != (n, n):
            raise ValueError(f"mask must have shape [n, n] = {(n, n)}, got {tuple(m.shape)}")
        allowed = m.to("cpu").clone()
    if causal:
        allowed = allowed.tril()
    empty = ~allowed.any(dim=1)
    if bool(empty.any()):
        row = int(empty.nonzero()[0])
        raise ValueError(
            f"query {row} may attend to no key (mask combined with causal={causal}); softmax "
            f"over no keys is undefined; allow at least one key per query, e.g. itself"
        )
    return allowed


def scores(spec: Attention, X: Tensor) -> Tensor:
    """Pre-softmax scores ``S_h`` of every head, with all bias terms, before any masking.

    Factors: ``S_h = scale (X W_Q,h + b_Q,h)(X W_K,h + b_K,h)^T``. Merged:
    ``S_h = X A_h X^T + (X a_query,h) 1^T + 1 (X a_key,h)^T + a_const,h``.

    Args:
        spec: an :class:`~attnsim.simulator.spec.AttentionSpec` or
            :class:`~attnsim.simulator.spec.MergedAttention`.
        X: ``[n, d_model]`` float64 input (see :func:`check_input`).

    Returns:
        ``[n_heads, n, n]`` tensor.

    >>> import torch
    >>> from attnsim.simulator import spec as specs
    >>> head = specs.MergedAttention(A=torch.eye(2)[None], W_OV=torch.eye(2)[None])
    >>> scores(head, torch.eye(2, dtype=torch.float64)).tolist()
    [[[1.0, 0.0], [0.0, 1.0]]]
    """
    if isinstance(spec, specs.AttentionSpec):
        Q = X @ spec.W_Q + spec.b_Q[:, None, :]  # [h, n, d_head]
        K = X @ spec.W_K + spec.b_K[:, None, :]  # [h, n, d_head]
        if spec.rotary is not None:  # q cos + rotate_half(q) sin, likewise k
            from attnsim.simulator.spec_modern import rotate_half

            cos, sin = spec.rotary.tables(X.shape[0], spec.d_head)
            Q = Q * cos + rotate_half(Q) * sin
            K = K * cos + rotate_half(K) * sin
        return spec.scale * Q @ K.transpose(1, 2)
    query_term = (X @ spec.a_query.T).T[:, :, None]  # [h, n, 1]
    key_term = (X @ spec.a_key.T).T[:, None, :]  # [h, 1, n]
    return X @ spec.A @ X.T + query_term + key_term + spec.a_const[:, None, None]


def pattern(spec: Attention, X: Tensor, mask: Any = None) -> Tensor:
    """Attention pattern: row-wise softmax of the scores over the keys a query may see.

    Args:
        spec: an attention spec.
        X: ``[n, d_model]`` float64 input.
        mask: optional boolean ``[n, n]`` "may attend" mask (see :func:`check_mask`).

    Returns:
        ``[n_heads, n, n]`` tensor; each row sums to one.

    Raises:
        ValueError: see :func:`check_mask`.

    >>> import torch
    >>> from attnsim.simulator import spec as specs
    >>> head = specs.MergedAttention(A=torch.zeros(1, 2, 2), W_OV=torch.eye(2)[None], causal=True)
    >>> pattern(head, torch.ones(2, 2, dtype=torch.float64)).tolist()
    [[[1.0, 0.0], [0.5, 0.5]]]
    """
    allowed = check_mask(mask, X.shape[0], spec.causal)
    if getattr(spec, "linear", None) is not None:
        return _linear_pattern(spec, X, allowed)
    s = scores(spec, X).masked_fill(~allowed, float("-inf"))
    e = torch.exp(s - s.amax(dim=-1, keepdim=True))  # the largest entry per row is exp(0) = 1
    return e / e.sum(dim=-1, keepdim=True)


def _linear_pattern(spec: specs.AttentionSpec, X: Tensor, allowed: Tensor) -> Tensor:
    """Linear attention's weights: ``phi(q_i) . phi(k_j)`` over the allowed keys, divided by
    their sum plus ``linear_eps``."""
    Q = X @ spec.W_Q + spec.b_Q[:, None, :]
    K = X @ spec.W_K + spec.b_K[:, None, :]
    if spec.rotary is not None:
        from attnsim.simulator.spec_modern import rotate_half

        cos, sin = spec.rotary.tables(X.shape[0], spec.d_head)
        Q, K = Q * cos + rotate_half(Q) * sin, K * cos + rotate_half(K) * sin

    def phi(t: Tensor) -> Tensor:
        return torch.nn.functional.elu(t) + 1 if spec.linear == "elu" else t.clamp(min=0)

    s = (phi(Q) @ phi(K).transpose(1, 2)) * allowed
    den = s.sum(dim=-1, keepdim=True) + spec.linear_eps
    if bool((den == 0).any()):
        raise ValueError(
            "a row of this linear attention has no weight at all (phi(q) . phi(k) = 0 for "
            "every key it sees and linear_eps = 0): its output is 0/0; use linear_eps > 0"
        )
    return s / den


def values(spec: Attention, X: Tensor) -> Tensor:
    """Per-head value vectors already mapped to the output: ``(X W_V,h + b_V,h) W_O,h``.

    Args:
        spec: an attention spec.
        X: ``[n, d_model]`` float64 input.

    Returns:
        ``[n_heads, n, d_model]`` tensor (merged: ``X W_OV,h + b_OV,h``).

    >>> import torch
    >>> from attnsim.simulator import spec as specs
    >>> head = specs.MergedAttention(A=torch.zeros(1, 1, 1), W_OV=2 * torch.ones(1, 1, 1))
    >>> values(head, torch.ones(1, 1, dtype=torch.float64)).tolist()
    [[[2.0]]]
    """
    if isinstance(spec, specs.AttentionSpec):
        return (X @ spec.W_V + spec.b_V[:, None, :]) @ spec.W_O  # [h, n, d_head] -> [h, n, d]
    return X @ spec.W_OV + spec.b_OV[:, None, :]


def attention(spec: Attention, X: Tensor, mask: Any = None) -> Tensor:
    """``T(X) = sum_h pattern_h values_h + b_O``.

    Args:
        spec: an attention spec.
        X: ``[n, d_model]`` float64 input.
        mask: optional boolean "may attend" mask.

    Returns:
        ``[n, d_model]`` tensor.

    >>> import torch
    >>> from attnsim.simulator import spec as specs
    >>> head = specs.MergedAttention(A=torch.zeros(1, 1, 1), W_OV=torch.ones(1, 1, 1), b_O=[1.0])
    >>> attention(head, torch.tensor([[2.0], [4.0]], dtype=torch.float64)).tolist()
    [[4.0], [4.0]]
    """
    if getattr(spec, "linformer", None) is not None:
        return _linformer(spec, X, mask)
    return (pattern(spec, X, mask) @ values(spec, X)).sum(dim=0) + spec.b_O


def _linformer(spec: specs.AttentionSpec, X: Tensor, mask: Any) -> Tensor:
    """Linformer: ``softmax(scale Q (E K)^T) (F V) W_O + b_O`` per head, E and F cut to
    the input's ``n`` columns (no mask: the projected keys are not positions)."""
    if mask is not None:
        raise ValueError("a Linformer attention takes no mask: its keys are projections")
    n = X.shape[0]
    spec.linformer.check_length(n)
    E, F = spec.linformer.E[:, :n], spec.linformer.F[:, :n]
    Q = X @ spec.W_Q + spec.b_Q[:, None, :]  # [h, n, dh]
    K = E @ (X @ spec.W_K + spec.b_K[:, None, :])  # [h, k, dh]
    V = F @ (X @ spec.W_V + spec.b_V[:, None, :])
    P = torch.softmax(spec.scale * Q @ K.transpose(1, 2), dim=-1)  # [h, n, k]
    return (P @ V @ spec.W_O).sum(dim=0) + spec.b_O


def layer_norm(norm: Any, X: Tensor) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` per row (biased variance); for an
    RMSNorm ``x / sqrt(mean(x^2) + eps) * weight``.

    Args:
        norm: the LayerNorm or RMSNorm, or ``None`` for the identity.
        X: ``[n, d_model]`` float64 input.

    Returns:
        ``[n, d_model]`` tensor.

    >>> import torch
    >>> from attnsim.simulator import spec as specs
    >>> norm = specs.LayerNormSpec(weight=[1.0, 1.0], eps=1e-300)
    >>> layer_norm(norm, torch.tensor([[1.0, 3.0]], dtype=torch.float64)).tolist()
    [[-1.0, 1.0]]
    """
    if norm is None:
        return X
    if not isinstance(norm, specs.LayerNormSpec):  # RMSNorm
        return X / torch.sqrt((X**2).mean(dim=-1, keepdim=True) + norm.eps) * norm.weight
    centred = X - X.mean(dim=-1, keepdim=True)
    var = (centred**2).mean(dim=-1, keepdim=True)
    return centred / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def activation(kind: specs.Activation, H: Tensor) -> Tensor:
    """Apply an FFN activation to hidden activations ``H`` of shape ``[n, d_mlp]``.

    Args:
        kind: relu ``max(0, h)``; gelu ``h Phi(h) = h/2 (1 + erf(h / sqrt 2))``; gelu_tanh
            ``h/2 (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))``; maxmin: each pair of hidden units
            ``(2k, 2k+1)`` becomes ``(max, min)``; silu ``h / (1 + e^-h)``; identity ``h``.
        H: ``[n, d_mlp]`` tensor.

    Returns:
        ``[n, d_mlp]`` tensor.

    >>> import torch
    >>> from attnsim.simulator import spec as specs
    >>> activation(specs.Activation.MAXMIN, torch.tensor([[1.0, 5.0, -2.0, -3.0]])).tolist()
    [[5.0, 1.0, -2.0, -3.0]]
    """
    if kind is specs.Activation.RELU:
        return H.clamp(min=0)
    if kind is specs.Activation.GELU:
        return 0.5 * H * (1 + torch.erf(H / 2**0.5))
    if kind is specs.Activation.GELU_TANH:
        return 0.5 * H * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (H + 0.044715 * H**3)))
    if kind is specs.Activation.SILU:
        return H * torch.sigmoid(H)
    if kind is specs.Activation.IDENTITY:
        return H
    pairs = H.reshape(*H.shape[:-1], -1, 2)  # [n, d_mlp / 2, 2]
    return torch.stack([pairs.amax(-1), pairs.amin(-1)], dim=-1).reshape(H.shape)


def feed_forward(ffn: specs.FeedForwardSpec, X: Tensor) -> Tensor:
    """``act(X W1 + b1) W2 + b2``; gated: ``(act(X W1 + b1) * (X W3 + b3)) W2 + b2``.

    Args:
        ffn: the FFN spec.
        X: ``[n, d_model]`` float64 input.

    Returns:
        ``[n, d_model]`` tensor.

    >>> import torch
    >>> from attnsim.simulator import spec as specs
    >>> ffn = specs.FeedForwardSpec(W1=[[1.0, -1.0]], W2=[[1.0], [1.0]])
    >>> feed_forward(ffn, torch.tensor([[-3.0]], dtype=torch.float64)).tolist()
    [[3.0]]
    """
    hidden = activation(ffn.activation, X @ ffn.W1 + ffn.b1)
    if ffn.gated:
        hidden = hidden * (X @ ffn.W3 + ffn.b3)
    return hidden @ ffn.W2 + ffn.b2


def encoder_layer(layer: specs.EncoderLayerSpec, X: Tensor, mask: Any = None) -> Tensor:
    """One encoder layer, pre-norm or post-norm (see ``EncoderLayerSpec``).

    Args:
        layer: the layer spec.
        X: ``[n, d_model]`` float64 input.
        mask: optional boolean "may attend" mask.

    Returns:
        ``[n, d_model]`` tensor.

    >>> import torch
    >>> from attnsim.simulator import spec as specs
    >>> from attnsim.simulator import sampling
    >>> layer = sampling.random_encoder_layer(1, 2, seed=0)
    >>> tuple(encoder_layer(layer, torch.ones(3, 2, dtype=torch.float64)).shape)
    (3, 2)
    """
    attn, ffn, norm1, norm2 = layer.attention, layer.ffn, layer.norm1, layer.norm2
    if layer.norm_first:
        Y = X + attention(attn, layer_norm(norm1, X), mask)
        return Y + feed_forward(ffn, layer_norm(norm2, Y))
    Y = layer_norm(norm1, X + attention(attn, X, mask))
    return layer_norm(norm2, Y + feed_forward(ffn, Y))


def reference(spec: Spec, X: Any, mask: Any = None) -> Tensor:
    """Compute ``T(X)`` for any spec, in float64.

    Args:
        spec: :class:`~attnsim.simulator.spec.AttentionSpec`,
            :class:`~attnsim.simulator.spec.MergedAttention` or
            :class:`~attnsim.simulator.spec.EncoderLayerSpec`.
        X: ``[n, d_model]`` input (tensor, numpy array or nested lists).
        mask: optional boolean ``[n, n]`` mask, True where query ``i`` may attend to key ``j``.

    Returns:
        ``[n, d_model]`` float64 tensor.

    Raises:
        TypeError: ``spec`` is not a spec, or ``X``/``mask`` has the wrong kind.
        ValueError: ``X`` or ``mask`` has the wrong shape or values.

    >>> import torch
    >>> from attnsim.simulator import spec as specs
    >>> from attnsim.simulator import sampling
    >>> spec = sampling.random_attention(2, 4, seed=0)
    >>> X = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    >>> bool(torch.allclose(reference(spec, X), reference(spec.merged(), X), atol=1e-12))
    True
    """
    if not isinstance(spec, (specs.AttentionSpec, specs.MergedAttention, specs.EncoderLayerSpec)):
        raise TypeError(
            f"reference needs an AttentionSpec, MergedAttention or EncoderLayerSpec, got "
            f"{type(spec).__name__}; convert a torch module with spec.from_torch first"
        )
    X = check_input(spec, X)
    if isinstance(spec, specs.EncoderLayerSpec):
        return encoder_layer(spec, X, mask)
    return attention(spec, X, mask)
