"""The universal simulator's target side: the simulated layer T as data, and its oracle.

- :mod:`attnsim.simulator.spec`: :class:`~attnsim.simulator.spec.AttentionSpec`,
  :class:`~attnsim.simulator.spec.MergedAttention`,
  :class:`~attnsim.simulator.spec.EncoderLayerSpec` (validated, immutable, float64), adapters
  from ``torch.nn.MultiheadAttention`` / ``torch.nn.TransformerEncoderLayer`` and random
  targets for tests;
- :mod:`attnsim.simulator.reference`: ``reference(spec, X)`` computes T(X) in plain torch;
- :func:`attnsim.simulator.build` (= :func:`attnsim.simulator.universal.build`): builds U, the
  universal simulator, loaded on first use.

>>> import torch
>>> from attnsim.simulator import reference, spec
>>> target = spec.random_attention(2, 4, seed=0)
>>> X = torch.zeros(3, 4, dtype=torch.float64)
>>> tuple(reference.reference(target, X).shape)
(3, 4)
"""

import importlib

from attnsim.simulator import reference, spec

# public name -> (module, attribute or None for the module itself), loaded on first access
_LAZY = {
    "build": ("attnsim.simulator.universal", "build"),
    "UniversalSimulator": ("attnsim.simulator.universal", "UniversalSimulator"),
    "universal": ("attnsim.simulator.universal", None),
    "verify": ("attnsim.simulator.verify", None),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'attnsim.simulator' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    return value if attr is None else getattr(value, attr)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["reference", "spec", *_LAZY]
