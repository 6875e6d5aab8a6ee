"""The parts of today's layers a target spec can hold besides torch's encoder layer: RMSNorm
and rotary position embeddings.

A LLaMA-shaped decoder layer is an :class:`~attnsim.simulator.spec.EncoderLayerSpec` with
``norm_first=True``, two :class:`RMSNormSpec`, a causal
:class:`~attnsim.simulator.spec.AttentionSpec` with a :class:`RotarySpec`, and a gated
:class:`~attnsim.simulator.spec.FeedForwardSpec` (``W3``, activation ``"silu"``): see
:mod:`attnsim.simulator.llama`.

>>> norm = RMSNormSpec(weight=[1.0, 2.0])
>>> norm.d_model, norm.eps
(2, 1e-06)
>>> cos, sin = RotarySpec(base=100.0).tables(3, 4)
>>> [round(v, 6) for v in cos[2].tolist()], sin[0].tolist()
([-0.416147, 0.980067, -0.416147, 0.980067], [0.0, 0.0, 0.0, 0.0])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnsim.simulator.spec_checks import DTYPE, Tensor, _check_real, _set, _shaped, _sizes

__all__ = ["RMSNormSpec", "RotarySpec", "LinformerSpec", "rotate_half"]


@dataclass(frozen=True, eq=False)
class RMSNormSpec:
    """RMSNorm over the model width: ``x / sqrt(mean(x^2) + eps) * weight`` (no centring, no
    bias), as ``torch.nn.RMSNorm`` and LLaMA's norms compute it.

    Args:
        weight: ``[d_model]`` gain.
        eps: positive constant added to the mean square (default ``1e-6``, LLaMA's).

    Raises:
        TypeError: ``weight`` is not numeric or ``eps`` not a number.
        ValueError: bad shape, NaN/Inf, or ``eps <= 0``.
    """

    weight: Tensor
    eps: float = 1e-6

    def __post_init__(self) -> None:
        (d,) = _sizes(self.weight, "RMSNormSpec.weight", 1, "[d_model]")
        _set(self, "weight", _shaped(self.weight, "RMSNormSpec.weight", (d,), "[d_model]"))
        eps = _check_real(self.eps, "RMSNormSpec.eps")
        if eps <= 0:
            raise ValueError(f"RMSNormSpec.eps must be positive, got {eps}; use e.g. 1e-6")
        _set(self, "eps", eps)

    @property
    def d_model(self) -> int:
        """Model width ``d``."""
        return self.weight.shape[0]


@dataclass(frozen=True, eq=False)
class RotarySpec:
    """Rotary position embeddings on every head's queries and keys, in the rotate-half form:
    ``q_i' = q_i * cos_i + rotate_half(q_i) * sin_i`` (likewise keys), with
    ``rotate_half([a, b]) = [-b, a]`` over the two halves of ``d_head``.

    The tables ``cos, sin [n, d_head]`` are what a model hands its layers (transformers passes
    them as ``position_embeddings``). Given here, they are used as they are (a model's own,
    rounded as it rounds them); otherwise they follow the standard definition from ``base``:
    ``theta[i, k] = i * base^(-2k / d_head)`` for ``k < d_head / 2``, repeated over both
    halves, computed in float64.

    Args:
        base: the frequency base (10,000 in most models); more than 1.
        cos: ``[n_max, d_head]`` table, or None (then ``sin`` is None too).
        sin: ``[n_max, d_head]`` table, or None.

    Raises:
        TypeError: a table is not numeric or ``base`` not a number.
        ValueError: ``base <= 1``, one table without the other, or tables of other shapes.
    """

    base: float = 10000.0
    cos: Tensor | None = None
    sin: Tensor | None = None

    def __post_init__(self) -> None:
        base = _check_real(self.base, "RotarySpec.base")
        if base <= 1:
            raise ValueError(f"RotarySpec.base must be more than 1, got {base}")
        _set(self, "base", base)
        if (self.cos is None) != (self.sin is None):
            raise ValueError("RotarySpec needs both tables (cos and sin) or neither")
        if self.cos is not None:
            shape = _sizes(self.cos, "RotarySpec.cos", 2, "[n_max, d_head]")
            _set(self, "cos", _shaped(self.cos, "RotarySpec.cos", shape, "[n_max, d_head]"))
            _set(self, "sin", _shaped(self.sin, "RotarySpec.sin", shape, "[n_max, d_head]"))

    def check_head(self, d_head: int, where: str) -> None:
        """Refuses a head width the rotation cannot pair (odd) or its tables do not have."""
        if d_head % 2:
            raise ValueError(
                f"{where}: rotary embeddings rotate pairs of columns, so d_head must be even, "
                f"got {d_head}"
            )
        if self.cos is not None and self.cos.shape[1] != d_head:
            raise ValueError(
                f"{where}: the rotary tables are {self.cos.shape[1]} wide, but d_head is {d_head}"
            )

    def tables(self, n: int, d_head: int) -> tuple[Tensor, Tensor]:
        """``(cos, sin)``, each ``[n, d_head]`` float64, for positions ``0 .. n - 1``.

        Raises:
            ValueError: given tables shorter than ``n`` or of another width.
        """
        self.check_head(d_head, "RotarySpec")
        if self.cos is not None:
            if self.cos.shape[0] < n:
                raise ValueError(
                    f"the rotary tables cover {self.cos.shape[0]} positions, the input has {n}; "
                    "give tables for at least as many positions as X has rows"
                )
            return self.cos[:n].clone(), self.sin[:n].clone()
        k = torch.arange(0, d_head, 2, dtype=DTYPE) / d_head
        inv_freq = 1.0 / (self.base**k)  # [d_head / 2]
        theta = torch.arange(n, dtype=DTYPE)[:, None] * inv_freq[None, :]
        theta = torch.cat([theta, theta], dim=1)
        return torch.cos(theta), torch.sin(theta)


def rotate_half(x: Tensor) -> Tensor:
    """``[-b, a]`` for ``x = [a, b]`` split in halves along the last axis.

    >>> rotate_half(torch.tensor([1.0, 2.0, 3.0, 4.0])).tolist()
    [-3.0, -4.0, 1.0, 2.0]
    """
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


@dataclass(frozen=True, eq=False)
class LinformerSpec:
    """Linformer's projections along the sequence (Wang et al., 2020): keys and values are
    mixed into ``k`` rows before the softmax, ``K' = E K`` and ``V' = F V`` (one ``E`` and
    one ``F`` shared by every head), so a query attends over ``k`` projected keys.

    Args:
        E: ``[k, n_max]`` the keys' projection; an input of ``n <= n_max`` rows uses its
            first ``n`` columns.
        F: ``[k, n_max]`` the values' projection.

    Raises:
        TypeError: a matrix is not numeric.
        ValueError: bad shapes or NaN/Inf.

    >>> lin = LinformerSpec(E=torch.ones(2, 5), F=torch.eye(2, 5))
    >>> lin.k, lin.n_max
    (2, 5)
    """

    E: Tensor
    F: Tensor

    def __post_init__(self) -> None:
        shape = _sizes(self.E, "LinformerSpec.E", 2, "[k, n_max]")
        _set(self, "E", _shaped(self.E, "LinformerSpec.E", shape, "[k, n_max]"))
        _set(self, "F", _shaped(self.F, "LinformerSpec.F", shape, "[k, n_max]"))

    @property
    def k(self) -> int:
        """The projected length."""
        return self.E.shape[0]

    @property
    def n_max(self) -> int:
        """The longest input the projections cover."""
        return self.E.shape[1]

    def check_length(self, n: int) -> None:
        if n > self.n_max:
            raise ValueError(
                f"the Linformer projections cover {self.n_max} positions, the input has {n} "
                "rows; give E and F with at least as many columns as X has rows"
            )
