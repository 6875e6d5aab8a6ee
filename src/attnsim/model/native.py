"""The declared elementwise functions of MLP units (``ModelConfig.NATIVE_KINDS``), in torch:
every executor reads them from here."""

from __future__ import annotations

import torch

__all__ = ["NATIVE_FUNCTIONS"]

NATIVE_FUNCTIONS = {
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "reciprocal": torch.reciprocal,
    "rsqrt": torch.rsqrt,
    "gelu": lambda x: torch.nn.functional.gelu(x),
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
}
