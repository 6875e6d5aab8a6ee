"""The simulated layer T as validated, immutable data.

A target is one of:

- :class:`AttentionSpec`: multi-head self-attention given by its factors
  (``W_Q, W_K, W_V, W_O`` and biases), as a torch module stores it;
- :class:`MergedAttention`: the same layer in the merged form a simulator reads, per head a
  bilinear score form ``A_h = scale * W_Q,h W_K,h^T`` with its bias terms and an output map
  ``W_OV,h = W_V,h W_O,h`` (the paper's ``T(X) = softmax(X A X^T) X V`` is one such head);
- :class:`EncoderLayerSpec`: a whole encoder layer, attention plus a feed-forward block
  (:class:`FeedForwardSpec`) with residual connections and optional LayerNorms
  (:class:`LayerNormSpec`) before (``norm_first``) or after each sublayer.

Specs from torch modules: :func:`attnsim.simulator.adapters.from_torch`; random ones:
:mod:`attnsim.simulator.sampling` (also reachable here: ``spec.from_torch`` etc.).

Every array is stored as a detached float64 ``torch.Tensor`` (a private copy of what was
passed in); treat it as read-only. Shapes follow TransformerLens (rows are inputs, so a
layer computes ``x @ W``). Glossary: ``n`` positions, ``d_model`` model width ``d``,
``n_heads`` heads ``h``, ``d_head`` width of one head, ``d_mlp`` hidden width of the FFN.

Biases in the scores. With query and key biases the score of query ``i`` and key ``j`` is
``scale * (x_i W_Q + b_Q)(x_j W_K + b_K)^T``, which expands to ``x_i A x_j^T + x_i . a_query
+ x_j . a_key + a_const``, with ``A = scale W_Q W_K^T``, ``a_query = scale W_Q b_K^T``,
``a_key = scale W_K b_Q^T``, ``a_const = scale b_Q . b_K``.

:class:`AttentionSpec` keeps the factors and biases exactly as given; :class:`MergedAttention`
keeps the four score terms separately, and :meth:`MergedAttention.augmented` folds them into
one ``(d+1) x (d+1)`` form over ``[x, 1]`` (a constant-1 feature appended to every position),
so that ``S_h = X~ A~_h X~^T`` with no separate bias. ``a_query`` and ``a_const`` are constant
along a query's row and so do not change the softmax; they are kept anyway so that the scores
themselves are reproduced. Likewise the value bias gives ``softmax(S) 1 b_OV = 1 b_OV`` (rows
sum to one), so it could be folded into ``b_O``; it is kept per head
(:meth:`MergedAttention.output_bias` gives the folded constant).

>>> import torch
>>> W = torch.ones(2, 4, 2)  # [n_heads, d_model, d_head]
>>> spec = AttentionSpec(W_Q=W, W_K=W, W_V=W, W_O=torch.ones(4, 4))
>>> spec.n_heads, spec.d_model, spec.d_head, tuple(spec.merged().A.shape)
(2, 4, 2, (2, 4, 4))
"""

import dataclasses
import enum
import importlib
import math
from dataclasses import dataclass
from typing import Any

import torch

from attnsim.simulator.spec_checks import (  # the helpers, also read here by other modules
    DTYPE,
    Tensor,
    _check_bool,
    _check_real,
    _optional,
    _set,
    _shaped,
    _sizes,
    _tensor,
)
from attnsim.simulator.spec_modern import (  # re-exported here too
    LinformerSpec,
    RMSNormSpec,
    RotarySpec,
)

__all__ = [
    "Activation",
    "AttentionSpec",
    "MergedAttention",
    "LayerNormSpec",
    "FeedForwardSpec",
    "EncoderLayerSpec",
]

# names that moved out of this module -> their module, imported on first use (no cycle)
_SAMPLED = ("random_attention", "random_encoder_layer", "with_logit_scale")
_MOVED = {"from_torch": "attnsim.simulator.adapters"} | dict.fromkeys(
    _SAMPLED, "attnsim.simulator.sampling"
)


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_MOVED[name]), name)


# --------------------------------------------------------------------------------------------
# attention


@dataclass(frozen=True, eq=False)
class MergedAttention:
    """Multi-head self-attention in merged form: score terms and output maps per head.

    ``S_h[i, j] = x_i A_h x_j^T + x_i . a_query_h + x_j . a_key_h + a_const_h`` (keys ``j`` with
    ``j > i`` removed when ``causal``) and
    ``T(X) = sum_h softmax_rows(S_h) (X W_OV_h + 1 b_OV_h) + 1 b_O``.
    Any scale is already folded into the score terms.

    Args:
        A: ``[n_heads, d_model, d_model]`` bilinear score forms.
        W_OV: ``[n_heads, d_model, d_model]`` value-then-output maps ``W_V,h W_O,h``.
        a_query: ``[n_heads, d_model]`` query-side linear score term; ``None`` means zeros.
        a_key: ``[n_heads, d_model]`` key-side linear score term; ``None`` means zeros.
        a_const: ``[n_heads]`` constant score term; ``None`` means zeros.
        b_OV: ``[n_heads, d_model]`` value bias after the output map; ``None`` means zeros.
        b_O: ``[d_model]`` output bias; ``None`` means zeros.
        causal: whether query ``i`` only sees keys ``j <= i``.

    Raises:
        TypeError: an array is not numeric, or ``causal`` is not a bool.
        ValueError: shapes disagree, a size is zero, or a value is NaN/Inf.

    Example (the paper's single head ``softmax(X A X^T) X V``):

    >>> import torch
    >>> A, V = torch.eye(3), 2 * torch.eye(3)
    >>> head = MergedAttention(A=A[None], W_OV=V[None])
    >>> head.n_heads, head.d_model, head.causal
    (1, 3, False)
    """

    A: Tensor
    W_OV: Tensor
    a_query: Tensor | None = None
    a_key: Tensor | None = None
    a_const: Tensor | None = None
    b_OV: Tensor | None = None
    b_O: Tensor | None = None
    causal: bool = False

    def __post_init__(self) -> None:
        h, d, d2 = _sizes(self.A, "MergedAttention.A", 3, "[n_heads, d_model, d_model]")
        if d2 != d:
            raise ValueError(
                f"MergedAttention.A must be square per head, [n_heads, d_model, d_model], got "
                f"shape {(h, d, d2)}; A_h = scale * W_Q,h W_K,h^T is d_model x d_model"
            )
        hd, hdd = "[n_heads, d_model]", "[n_heads, d_model, d_model]"
        _set(self, "A", _shaped(self.A, "MergedAttention.A", (h, d, d), hdd))
        _set(self, "W_OV", _shaped(self.W_OV, "MergedAttention.W_OV", (h, d, d), hdd))
        _set(self, "a_query", _optional(self.a_query, "MergedAttention.a_query", (h, d), hd))
        _set(self, "a_key", _optional(self.a_key, "MergedAttention.a_key", (h, d), hd))
        _set(self, "a_const", _optional(self.a_const, "MergedAttention.a_const", (h,), "[n_heads]"))
        _set(self, "b_OV", _optional(self.b_OV, "MergedAttention.b_OV", (h, d), hd))
        _set(self, "b_O", _optional(self.b_O, "MergedAttention.b_O", (d,), "[d_model]"))
        _set(self, "causal", _check_bool(self.causal, "MergedAttention.causal"))

    @property
    def n_heads(self) -> int:
        """Number of heads ``h``."""
        return self.A.shape[0]

    @property
    def d_model(self) -> int:
        """Model width ``d``."""
        return self.A.shape[1]

    def merged(self) -> "MergedAttention":
        """Return ``self`` (already merged); lets callers merge any attention spec.

        Returns:
            This spec.

        >>> head = MergedAttention(A=[[[1.0]]], W_OV=[[[1.0]]])
        >>> head.merged() is head
        True
        """
        return self

    def augmented(self) -> tuple[Tensor, Tensor]:
        """Fold all bias terms into forms over the augmented input ``X~ = [X, 1]``.

        With ``X~`` of shape ``[n, d_model + 1]`` (a constant-1 feature appended),
        ``S_h = X~ A~_h X~^T`` and ``T(X) = sum_h softmax_rows(S_h) X~ W~_OV_h + 1 b_O``.

        Returns:
            ``(A_aug, W_OV_aug)`` of shapes ``[n_heads, d+1, d+1]`` and ``[n_heads, d+1, d]``:
            ``A_aug = [[A, a_query], [a_key^T, a_const]]``, ``W_OV_aug = [[W_OV], [b_OV]]``.

        >>> head = MergedAttention(A=[[[2.0]]], W_OV=[[[1.0]]], a_key=[[3.0]], b_OV=[[5.0]])
        >>> A_aug, W_aug = head.augmented()
        >>> A_aug[0].tolist(), W_aug[0].tolist()
        ([[2.0, 0.0], [3.0, 0.0]], [[1.0], [5.0]])
        """
        h, d = self.n_heads, self.d_model
        A_aug = torch.zeros(h, d + 1, d + 1, dtype=DTYPE)
        A_aug[:, :d, :d] = self.A
        A_aug[:, :d, d] = self.a_query  # x_i . a_query: multiplies the key's constant 1
        A_aug[:, d, :d] = self.a_key  # x_j . a_key: multiplies the query's constant 1
        A_aug[:, d, d] = self.a_const
        W_aug = torch.cat([self.W_OV, self.b_OV[:, None, :]], dim=1)  # [h, d+1, d]
        return A_aug, W_aug

    def output_bias(self) -> Tensor:
        """The constant added to every output row: ``b_O + sum_h b_OV_h``.

        Valid because each softmax row sums to one.

        Returns:
            ``[d_model]`` tensor.

        >>> head = MergedAttention(A=[[[0.0]]], W_OV=[[[1.0]]], b_OV=[[2.0]], b_O=[1.0])
        >>> head.output_bias().tolist()
        [3.0]
        """
        return self.b_O + self.b_OV.sum(0)


@dataclass(frozen=True, eq=False)
class AttentionSpec:
    """Multi-head self-attention given by its factors, as a torch module stores it.

    Per head ``h``: ``Q_h = X W_Q,h + b_Q,h``, ``K_h = X W_K,h + b_K,h``,
    ``S_h = scale * Q_h K_h^T`` (causal: keys after the query removed), and
    ``T(X) = sum_h softmax_rows(S_h) (X W_V,h + b_V,h) W_O,h + b_O``.

    Args:
        W_Q: ``[n_heads, d_model, d_head]`` query weights.
        W_K: ``[n_heads, d_model, d_head]`` key weights.
        W_V: ``[n_heads, d_model, d_head]`` value weights.
        W_O: ``[n_heads, d_head, d_model]`` (or the concatenated ``[n_heads * d_head,
            d_model]``) output projection; ``None`` means the identity, allowed only when
            ``n_heads == 1`` and ``d_head == d_model``.
        b_Q: ``[n_heads, d_head]`` query bias; ``None`` means zeros (likewise ``b_K``, ``b_V``).
        b_K: ``[n_heads, d_head]`` key bias.
        b_V: ``[n_heads, d_head]`` value bias.
        b_O: ``[d_model]`` output bias; ``None`` means zeros.
        causal: whether query ``i`` only sees keys ``j <= i``.
        scale: score scale; ``None`` means ``1 / sqrt(d_head)`` (stored resolved).
        rotary: rotary position embeddings on queries and keys
            (:class:`~attnsim.simulator.spec_modern.RotarySpec`), or ``None``.
        linear: ``None`` (softmax attention) or linear attention with the feature map
            ``"elu"`` (``phi = elu + 1``) or ``"relu"``: the weight of key j for query i is
            ``phi(q_i) . phi(k_j) / (sum_j' phi(q_i) . phi(k_j') + linear_eps)`` (keys after
            the query left out when causal); ``scale`` is not used.
        linear_eps: the normaliser's eps (``>= 0``; default 1e-6, as the reference
            implementations add).
        linformer: keys and values projected along the sequence
            (:class:`~attnsim.simulator.spec_modern.LinformerSpec`), or ``None``; not with
            ``causal``, ``rotary`` or ``linear``.

    Raises:
        TypeError: an array is not numeric, ``causal`` is not a bool or ``scale`` not a number.
        ValueError: shapes disagree, a size is zero, a value is NaN/Inf, or ``W_O`` is
            missing where it cannot be the identity.

    >>> import torch
    >>> spec = AttentionSpec(W_Q=torch.ones(1, 4, 4), W_K=torch.ones(1, 4, 4),
    ...                      W_V=torch.eye(4)[None])
    >>> spec.scale, tuple(spec.W_O.shape)
    (0.5, (1, 4, 4))
    """

    W_Q: Tensor
    W_K: Tensor
    W_V: Tensor
    W_O: Tensor | None = None
    b_Q: Tensor | None = None
    b_K: Tensor | None = None
    b_V: Tensor | None = None
    b_O: Tensor | None = None
    causal: bool = False
    scale: float | None = None
    rotary: Any = None  # spec_modern.RotarySpec or None
    linear: str | None = None  # None: softmax; "elu" or "relu": linear attention's phi
    linear_eps: float = 1e-6
    linformer: Any = None  # spec_modern.LinformerSpec or None

    def __post_init__(self) -> None:
        names = "[n_heads, d_model, d_head]"
        h, d, dh = _sizes(self.W_Q, "AttentionSpec.W_Q", 3, names)
        shape = (h, d, dh)
        _set(self, "W_Q", _shaped(self.W_Q, "AttentionSpec.W_Q", shape, names))
        _set(self, "W_K", _shaped(self.W_K, "AttentionSpec.W_K", shape, names))
        _set(self, "W_V", _shaped(self.W_V, "AttentionSpec.W_V", shape, names))
        if self.W_O is None:
            if h != 1 or dh != d:
                raise ValueError(
                    f"AttentionSpec.W_O is None, which means the identity, but that needs "
                    f"n_heads == 1 and d_head == d_model; got n_heads={h}, d_head={dh}, "
                    f"d_model={d}; pass W_O of shape [n_heads, d_head, d_model] = {(h, dh, d)}"
                )
            W_O = torch.eye(d, dtype=DTYPE)[None]
        else:
            W_O = _tensor(self.W_O, "AttentionSpec.W_O")
            if tuple(W_O.shape) == (h * dh, d):  # concatenated heads, as torch stores it
                W_O = W_O.reshape(h, dh, d)
            W_O = _shaped(W_O, "AttentionSpec.W_O", (h, dh, d), "[n_heads, d_head, d_model]")
        _set(self, "W_O", W_O)
        hb = "[n_heads, d_head]"
        _set(self, "b_Q", _optional(self.b_Q, "AttentionSpec.b_Q", (h, dh), hb))
        _set(self, "b_K", _optional(self.b_K, "AttentionSpec.b_K", (h, dh), hb))
        _set(self, "b_V", _optional(self.b_V, "AttentionSpec.b_V", (h, dh), hb))
        _set(self, "b_O", _optional(self.b_O, "AttentionSpec.b_O", (d,), "[d_model]"))
        _set(self, "causal", _check_bool(self.causal, "AttentionSpec.causal"))
        if self.scale is None:
            _set(self, "scale", 1.0 / math.sqrt(dh))
        else:
            _set(self, "scale", _check_real(self.scale, "AttentionSpec.scale"))
        if self.rotary is not None:
            if not isinstance(self.rotary, RotarySpec):
                raise TypeError(
                    f"AttentionSpec.rotary must be a RotarySpec or None, got "
                    f"{type(self.rotary).__name__}"
                )
            self.rotary.check_head(dh, "AttentionSpec")
        if self.linear not in (None, "elu", "relu"):
            raise ValueError(
                f"AttentionSpec.linear must be None (softmax), 'elu' or 'relu', got {self.linear!r}"
            )
        eps = _check_real(self.linear_eps, "AttentionSpec.linear_eps")
        if eps < 0:
            raise ValueError(f"AttentionSpec.linear_eps must be >= 0, got {eps}")
        _set(self, "linear_eps", eps)
        if self.linformer is not None:
            if not isinstance(self.linformer, LinformerSpec):
                raise TypeError(
                    f"AttentionSpec.linformer must be a LinformerSpec or None, got "
                    f"{type(self.linformer).__name__}"
                )
            clash = [
                n for n in ("causal", "rotary", "linear") if getattr(self, n) not in (False, None)
            ]
            if clash:
                raise ValueError(
                    f"a Linformer attention mixes keys along the sequence, so it has no "
                    f"{' or '.join(clash)}; leave {'it' if len(clash) == 1 else 'them'} out"
                )

    @property
    def n_heads(self) -> int:
        """Number of heads ``h``."""
        return self.W_Q.shape[0]

    @property
    def d_model(self) -> int:
        """Model width ``d``."""
        return self.W_Q.shape[1]

    @property
    def d_head(self) -> int:
        """Width of one head's queries, keys and values."""
        return self.W_Q.shape[2]

    def merged(self) -> MergedAttention:
        """Merge the factors into per-head score terms and output maps.

        ``A = scale W_Q W_K^T``, ``a_query = scale W_Q b_K``, ``a_key = scale W_K b_Q``,
        ``a_const = scale b_Q . b_K``, ``W_OV = W_V W_O``, ``b_OV = b_V W_O``.

        Returns:
            The equivalent :class:`MergedAttention` (same scores, same outputs).

        >>> from attnsim.simulator.sampling import random_attention
        >>> spec = random_attention(3, 6, seed=1)
        >>> m = spec.merged()
        >>> m.n_heads, tuple(m.A.shape), m.causal == spec.causal
        (3, (3, 6, 6), True)
        """
        if self.rotary is not None or self.linear is not None or self.linformer is not None:
            raise ValueError(
                "a rotary, linear or Linformer attention has no merged form: its weights "
                "are not softmax(X W_Q W_K^T X^T); keep it as an AttentionSpec"
            )
        s = self.scale
        return MergedAttention(
            A=s * self.W_Q @ self.W_K.transpose(1, 2),  # [h, d, dh] @ [h, dh, d] -> [h, d, d]
            a_query=s * (self.W_Q @ self.b_K[:, :, None])[:, :, 0],  # [h, d]
            a_key=s * (self.W_K @ self.b_Q[:, :, None])[:, :, 0],  # [h, d]
            a_const=s * (self.b_Q * self.b_K).sum(-1),  # [h]
            W_OV=self.W_V @ self.W_O,  # [h, d, dh] @ [h, dh, d] -> [h, d, d]
            b_OV=(self.b_V[:, None, :] @ self.W_O)[:, 0, :],  # [h, d]
            b_O=self.b_O,
            causal=self.causal,
        )


# --------------------------------------------------------------------------------------------
# encoder layer


class Activation(str, enum.Enum):
    """The FFN's elementwise (or pairwise) activation."""

    RELU = "relu"  # max(0, x)
    GELU = "gelu"  # x * Phi(x), exact (erf), torch's approximate="none"
    GELU_TANH = "gelu_tanh"  # torch's approximate="tanh"
    MAXMIN = "maxmin"  # GroupSort-2: hidden pairs (2k, 2k+1) -> (max, min)
    SILU = "silu"  # x * sigmoid(x) (SwiGLU's gate)
    IDENTITY = "identity"  # x (a bilinear GLU's gate)


@dataclass(frozen=True, eq=False)
class LayerNormSpec:
    """LayerNorm over the model width: ``(x - mean) / sqrt(var + eps) * weight + bias``.

    ``var`` is the biased variance (divide by ``d_model``), as in ``torch.nn.LayerNorm``.

    Args:
        weight: ``[d_model]`` gain.
        bias: ``[d_model]`` shift; ``None`` means zeros.
        eps: positive constant added to the variance (default ``1e-5``, torch's default).

    Raises:
        TypeError: an array is not numeric or ``eps`` not a number.
        ValueError: bad shapes, NaN/Inf, or ``eps <= 0``.

    >>> norm = LayerNormSpec(weight=[1.0, 1.0])
    >>> norm.d_model, norm.bias.tolist(), norm.eps
    (2, [0.0, 0.0], 1e-05)
    """

    weight: Tensor
    bias: Tensor | None = None
    eps: float = 1e-5  # torch.nn.LayerNorm's default

    def __post_init__(self) -> None:
        (d,) = _sizes(self.weight, "LayerNormSpec.weight", 1, "[d_model]")
        _set(self, "weight", _shaped(self.weight, "LayerNormSpec.weight", (d,), "[d_model]"))
        _set(self, "bias", _optional(self.bias, "LayerNormSpec.bias", (d,), "[d_model]"))
        eps = _check_real(self.eps, "LayerNormSpec.eps")
        if eps <= 0:
            raise ValueError(
                f"LayerNormSpec.eps must be positive, got {eps}; use a small positive number "
                f"such as 1e-5"
            )
        _set(self, "eps", eps)

    @property
    def d_model(self) -> int:
        """Model width ``d``."""
        return self.weight.shape[0]


@dataclass(frozen=True, eq=False)
class FeedForwardSpec:
    """The position-wise FFN: ``act(x W1 + b1) W2 + b2``, or gated (a GLU, ``W3`` given):
    ``(act(x W1 + b1) * (x W3 + b3)) W2 + b2`` (SwiGLU: ``W1`` is LLaMA's gate_proj, ``W3``
    its up_proj, activation ``"silu"``).

    Args:
        W1: ``[d_model, d_mlp]`` first layer (a GLU's gate).
        W2: ``[d_mlp, d_model]`` second layer.
        b1: ``[d_mlp]``; ``None`` means zeros.
        b2: ``[d_model]``; ``None`` means zeros.
        activation: an :class:`Activation` or its value (``"relu"``, ``"gelu"``,
            ``"gelu_tanh"``, ``"maxmin"``, ``"silu"``, ``"identity"``); ``"maxmin"`` needs an
            even ``d_mlp``.
        W3: ``[d_model, d_mlp]`` a GLU's linear branch, or ``None`` (no gate).
        b3: ``[d_mlp]`` its bias; ``None`` means zeros (only with ``W3``).

    Raises:
        TypeError: an array is not numeric.
        ValueError: bad shapes, NaN/Inf, an unknown activation, or an odd ``d_mlp`` with
            ``"maxmin"``.

    >>> import torch
    >>> ffn = FeedForwardSpec(W1=torch.ones(2, 4), W2=torch.ones(4, 2), activation="maxmin")
    >>> ffn.d_model, ffn.d_mlp, ffn.activation.value
    (2, 4, 'maxmin')
    """

    W1: Tensor
    W2: Tensor
    b1: Tensor | None = None
    b2: Tensor | None = None
    activation: Activation = Activation.RELU
    W3: Tensor | None = None
    b3: Tensor | None = None

    def __post_init__(self) -> None:
        d, dm = _sizes(self.W1, "FeedForwardSpec.W1", 2, "[d_model, d_mlp]")
        _set(self, "W1", _shaped(self.W1, "FeedForwardSpec.W1", (d, dm), "[d_model, d_mlp]"))
        _set(self, "W2", _shaped(self.W2, "FeedForwardSpec.W2", (dm, d), "[d_mlp, d_model]"))
        _set(self, "b1", _optional(self.b1, "FeedForwardSpec.b1", (dm,), "[d_mlp]"))
        _set(self, "b2", _optional(self.b2, "FeedForwardSpec.b2", (d,), "[d_model]"))
        if self.W3 is not None:
            _set(self, "W3", _shaped(self.W3, "FeedForwardSpec.W3", (d, dm), "[d_model, d_mlp]"))
            _set(self, "b3", _optional(self.b3, "FeedForwardSpec.b3", (dm,), "[d_mlp]"))
        elif self.b3 is not None:
            raise ValueError("FeedForwardSpec.b3 is the bias of W3: give W3 too, or no b3")
        try:
            activation = Activation(self.activation)
        except ValueError:
            choices = ", ".join(repr(a.value) for a in Activation)
            raise ValueError(
                f"FeedForwardSpec.activation must be one of {choices}, got "
                f"{self.activation!r}; pick one of these"
            ) from None
        if activation is Activation.MAXMIN and dm % 2:
            raise ValueError(
                f"FeedForwardSpec with activation 'maxmin' sorts hidden units in pairs, so "
                f"d_mlp must be even, got d_mlp={dm}; add or drop one hidden unit"
            )
        _set(self, "activation", activation)

    @property
    def d_model(self) -> int:
        """Model width ``d``."""
        return self.W1.shape[0]

    @property
    def d_mlp(self) -> int:
        """Hidden width of the FFN."""
        return self.W1.shape[1]

    @property
    def gated(self) -> bool:
        """Whether the FFN is a GLU (``W3`` given)."""
        return self.W3 is not None


@dataclass(frozen=True, eq=False)
class EncoderLayerSpec:
    """A transformer encoder layer: attention and FFN with residuals and LayerNorms.

    ``norm_first=False`` (post-norm, torch's default)::

        Y = norm1(X + attn(X));  T(X) = norm2(Y + ffn(Y))

    ``norm_first=True`` (pre-norm)::

        Y = X + attn(norm1(X));  T(X) = Y + ffn(norm2(Y))

    A norm given as ``None`` is left out (the identity). A LLaMA-shaped decoder layer is a
    pre-norm layer with RMSNorms, causal rotary attention and a gated FFN
    (:func:`~attnsim.simulator.llama.llama_layer`).

    Args:
        attention: an :class:`AttentionSpec` or :class:`MergedAttention`.
        ffn: the :class:`FeedForwardSpec`.
        norm1: LayerNorm or RMSNorm (:class:`~attnsim.simulator.spec_modern.RMSNormSpec`)
            around the attention sublayer, or ``None``.
        norm2: LayerNorm or RMSNorm around the FFN sublayer, or ``None``.
        norm_first: pre-norm (True) or post-norm (False).

    Raises:
        TypeError: a part has the wrong type, or ``norm_first`` is not a bool.
        ValueError: the parts disagree on ``d_model``.

    >>> from attnsim.simulator.sampling import random_encoder_layer
    >>> layer = random_encoder_layer(2, 4, 8, seed=0, norm_first=True)
    >>> layer.d_model, layer.ffn.d_mlp, layer.norm_first
    (4, 8, True)
    """

    attention: AttentionSpec | MergedAttention
    ffn: FeedForwardSpec
    norm1: LayerNormSpec | None = None
    norm2: LayerNormSpec | None = None
    norm_first: bool = False

    def __post_init__(self) -> None:
        norms = (LayerNormSpec, RMSNormSpec, type(None))
        parts = [
            ("attention", self.attention, (AttentionSpec, MergedAttention)),
            ("ffn", self.ffn, (FeedForwardSpec,)),
            ("norm1", self.norm1, norms),
            ("norm2", self.norm2, norms),
        ]
        for name, part, kinds in parts:
            if not isinstance(part, kinds):
                expected = " or ".join(k.__name__ for k in kinds)
                raise TypeError(
                    f"EncoderLayerSpec.{name} must be {expected}, got {type(part).__name__}; "
                    f"build it with the matching spec class"
                )
        _set(self, "norm_first", _check_bool(self.norm_first, "EncoderLayerSpec.norm_first"))
        d = self.attention.d_model
        for name, part, _ in parts[1:]:
            if part is not None and part.d_model != d:
                raise ValueError(
                    f"EncoderLayerSpec.{name} has d_model={part.d_model}, but the attention "
                    f"has d_model={d}; all parts of a layer must share the model width"
                )

    @property
    def d_model(self) -> int:
        """Model width ``d``."""
        return self.attention.d_model

    def merged(self) -> "EncoderLayerSpec":
        """Return a copy whose attention is in merged form (:class:`MergedAttention`).

        Returns:
            A new :class:`EncoderLayerSpec`; the other parts are shared.

        >>> from attnsim.simulator.sampling import random_encoder_layer
        >>> layer = random_encoder_layer(1, 2, 4, seed=0)
        >>> type(layer.merged().attention).__name__
        'MergedAttention'
        """
        return dataclasses.replace(self, attention=self.attention.merged())
