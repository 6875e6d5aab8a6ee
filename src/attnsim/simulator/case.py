"""One target and its input as U reads them, in every layout: :class:`Case`, with its sizes
:class:`Shape`.

A layout's ``prepare`` (:mod:`attnsim.simulator.layouts`) checks a target and X against a
build and returns a :class:`Case`; its ``pack`` writes cases into U's input and its
``unpack`` reads T(X) back from U's output. What differs between layouts is the form of the
attention they read: the paper's scalar layout reads it merged
(:class:`~attnsim.simulator.spec.MergedAttention`, ``A_h`` and ``W_V,h W_O,h``), the vector
layout its factors as torch stores them (:class:`~attnsim.simulator.spec.AttentionSpec`);
each layout's ``pack`` says so where it is given the other form. A stack of encoder layers
(vector layout) is its first layer plus ``rest``.

>>> import torch
>>> from attnsim.simulator import sampling
>>> att = sampling.random_attention(2, 4, seed=0)
>>> Case(att, torch.ones(3, 4)).shape, Case(att.merged(), torch.ones(3, 4)).shape.n
(Shape(n=3, d=4, n_heads=2, d_mlp=0), 3)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnsim.simulator import spec as S

__all__ = ["Case", "Shape"]

DTYPE = torch.float64


@dataclass(frozen=True)
class Shape:
    """The sizes of one (target, X) pair.

    Attributes:
        n: rows of X.
        d: the model width.
        n_heads: the target's attention heads.
        d_mlp: the feed-forward width of an encoder layer; 0 for an attention layer.
    """

    n: int
    d: int
    n_heads: int
    d_mlp: int = 0  # 0: an attention layer


@dataclass(frozen=True, eq=False)
class Case:
    """One target and its input, as U reads them.

    Attributes:
        attention: the target's attention (of its first layer, for a stack): merged
            (scalar layout) or as its factors (vector layout); its ``causal`` flag is the
            one U applies.
        X: ``[n, d]`` float64 input.
        layer: for an encoder-layer target, the whole layer (its LayerNorms and its
            feed-forward block are read from here; its attention is ``attention``); None
            for an attention target.
        rest: for a stack of encoder layers, the layers after the first (vector layout).

    Raises:
        TypeError: a part has the wrong type.
        ValueError: ``X`` or a layer's width disagrees with the attention's, or ``rest``
            without a first layer.
    """

    attention: S.AttentionSpec | S.MergedAttention
    X: torch.Tensor
    layer: S.EncoderLayerSpec | None = None  # None: an attention target
    rest: tuple[S.EncoderLayerSpec, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.attention, (S.AttentionSpec, S.MergedAttention)):
            raise TypeError(
                "Case.attention must be an AttentionSpec or a MergedAttention, got "
                f"{type(self.attention).__name__}"
            )
        if self.layer is not None and not isinstance(self.layer, S.EncoderLayerSpec):
            raise TypeError(
                f"Case.layer must be an EncoderLayerSpec or None, got {type(self.layer).__name__}"
            )
        rest = tuple(self.rest) if isinstance(self.rest, (tuple, list)) else None
        if rest is None or not all(isinstance(x, S.EncoderLayerSpec) for x in rest):
            raise TypeError("Case.rest must be a tuple of EncoderLayerSpec (a stack's layers)")
        if rest and self.layer is None:
            raise ValueError("Case.rest holds a stack's later layers: give its first as layer")
        object.__setattr__(self, "rest", rest)
        d = self.attention.d_model
        X = torch.as_tensor(self.X).to(DTYPE)
        if X.ndim != 2 or X.shape[1] != d or X.shape[0] < 1:
            raise ValueError(
                f"Case.X must have shape [n, d] = [n, {d}] with n >= 1 (the attention's "
                f"width), got {tuple(X.shape)}"
            )
        object.__setattr__(self, "X", X)
        for layer in (self.layer, *rest):
            if layer is not None and layer.d_model != d:
                raise ValueError(
                    f"Case.layer has d_model={layer.d_model}, but the attention has {d}; "
                    "pass the layer's own attention"
                )

    @property
    def shape(self) -> Shape:
        """The case's sizes (of its first layer, for a stack)."""
        d_mlp = 0 if self.layer is None else self.layer.ffn.d_mlp
        return Shape(self.X.shape[0], self.attention.d_model, self.attention.n_heads, d_mlp)
