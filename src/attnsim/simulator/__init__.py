"""The universal simulator's target side: the simulated layer T as data, and its oracle.

- :mod:`attnsim.simulator.spec`: :class:`~attnsim.simulator.spec.AttentionSpec`,
  :class:`~attnsim.simulator.spec.MergedAttention`,
  :class:`~attnsim.simulator.spec.EncoderLayerSpec` (validated, immutable, float64), adapters
  from ``torch.nn.MultiheadAttention`` / ``torch.nn.TransformerEncoderLayer`` and random
  targets for tests;
- :mod:`attnsim.simulator.reference`: ``reference(spec, X)`` computes T(X) in plain torch.

>>> import torch
>>> from attnsim.simulator import reference, spec
>>> target = spec.random_attention(2, 4, seed=0)
>>> X = torch.zeros(3, 4, dtype=torch.float64)
>>> tuple(reference.reference(target, X).shape)
(3, 4)
"""

from attnsim.simulator import reference, spec

__all__ = ["reference", "spec"]
