"""Stacks of encoder layers: a spec, the torch adapter, the oracle and random stacks.

A stack is what ``torch.nn.TransformerEncoder`` computes: L encoder layers of one model width,
each layer's output the next one's input. A U built with ``n_layers=L`` (vector layout)
simulates it in one forward pass, and a stack of fewer layers too: the layers it does not
have are written as identity layers (pre-norm, every weight 0).

>>> import torch
>>> stack = random_stack(np.random.default_rng(0), 3, 4, 2, 10.0, 8, layers=2)[0]
>>> len(stack.layers), stack.d_model
(2, 4)
>>> X = torch.randn(3, 4, dtype=torch.float64)
>>> out = reference_stack(stack, X)
>>> bool(torch.equal(out, R.encoder_layer(stack.layers[1], R.encoder_layer(stack.layers[0], X))))
True
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from attnsim.simulator import adapters, exact_modules, sampling
from attnsim.simulator import reference as R
from attnsim.simulator import spec as S

__all__ = ["EncoderStackSpec", "from_torch_stack", "random_stack", "reference_stack"]


@dataclass(frozen=True, eq=False)
class EncoderStackSpec:
    """L encoder layers applied one after the other (``torch.nn.TransformerEncoder``).

    Args:
        layers: the :class:`~attnsim.simulator.spec.EncoderLayerSpec` of each layer, first
            first; all of one model width.

    Raises:
        TypeError: ``layers`` is not a non-empty sequence of EncoderLayerSpec.
        ValueError: the layers disagree on the model width.
    """

    layers: tuple[S.EncoderLayerSpec, ...]

    def __post_init__(self) -> None:
        layers = tuple(self.layers) if isinstance(self.layers, (list, tuple)) else None
        if not layers or not all(isinstance(x, S.EncoderLayerSpec) for x in layers):
            raise TypeError(
                "EncoderStackSpec.layers must be a non-empty list of EncoderLayerSpec, got "
                f"{self.layers!r:.80}"
            )
        widths = sorted({x.d_model for x in layers})
        if len(widths) > 1:
            raise ValueError(
                f"the layers of a stack share one model width, got widths {widths}; each "
                "layer's output is the next layer's input"
            )
        object.__setattr__(self, "layers", layers)

    @property
    def d_model(self) -> int:
        return self.layers[0].d_model

    def with_causal(self, causal: bool) -> EncoderStackSpec:
        """The stack with every layer's attention causal (or not)."""
        causal = S._check_bool(causal, "causal")
        return EncoderStackSpec(tuple(_with_causal(x, causal) for x in self.layers))


def _with_causal(layer: S.EncoderLayerSpec, causal: bool) -> S.EncoderLayerSpec:
    if layer.attention.causal == causal:
        return layer
    return dataclasses.replace(layer, attention=dataclasses.replace(layer.attention, causal=causal))


def from_torch_stack(
    module: nn.TransformerEncoder, *, causal: bool = False, trust_subclass: bool = False
) -> EncoderStackSpec:
    """The stack of a ``torch.nn.TransformerEncoder`` (each layer read by ``from_torch``;
    a subclass that redefines ``forward``, or hooks, are refused unless ``trust_subclass``
    says they compute the torch classes' function, as there).

    >>> layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True)
    >>> enc = nn.TransformerEncoder(layer, 3, enable_nested_tensor=False)
    >>> len(from_torch_stack(enc).layers)
    3

    Raises:
        TypeError: not a TransformerEncoder, or a subclass or hooks (see ``from_torch``).
        NotImplementedError: the encoder has a final norm (``norm=...``), which U does not
            simulate.
    """
    if not isinstance(module, nn.TransformerEncoder):
        raise TypeError(f"expected a torch.nn.TransformerEncoder, got {type(module).__name__}")
    trust = S._check_bool(trust_subclass, "trust_subclass")
    exact_modules.check_exact(module, nn.TransformerEncoder, "the module", trust)
    if module.norm is not None:
        raise NotImplementedError(
            "this TransformerEncoder has a final norm after its layers, which U does not "
            "simulate; build it with norm=None (or apply the norm yourself afterwards)"
        )
    return EncoderStackSpec(
        tuple(
            adapters.from_torch(layer, causal=causal, trust_subclass=trust_subclass)
            for layer in module.layers
        )
    )


def reference_stack(stack: EncoderStackSpec, X: Any) -> torch.Tensor:
    """The plain-torch oracle: each layer's reference on the previous layer's output."""
    out = R.check_input(stack.layers[0], X)
    for layer in stack.layers:
        out = R.encoder_layer(layer, out)
    return out


def random_stack(
    rng: np.random.Generator,
    max_n: int,
    max_d: int,
    max_heads: int,
    max_logit: float,
    max_ff: int,
    *,
    layers: int,
) -> tuple[EncoderStackSpec, torch.Tensor, int]:
    """A random stack of ``layers`` encoder layers within the sizes, its X, and its seed.

    The model width and X are drawn once; each layer draws its own heads (a divisor of d up
    to ``max_heads``), feed-forward width, activation and norm placement like
    :func:`~attnsim.simulator.sampling.random_target`, its largest score scaled on its own
    input (the previous layer's output); the causal flag is shared.
    """
    first, X, seed = sampling.random_target(rng, max_n, max_d, max_heads, max_logit, max_ff)
    causal = first.attention.causal
    out = [first]
    inner = R.encoder_layer(first, X)  # each layer's scores are scaled on its own input
    for _ in range(layers - 1):
        layer = sampling.random_target(rng, max_n, max_d, max_heads, max_logit, max_ff, X=inner)
        out.append(_with_causal(layer[0], causal))
        inner = R.encoder_layer(out[-1], inner)
    return EncoderStackSpec(tuple(out)), X, seed
