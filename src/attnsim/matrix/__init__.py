"""Matrix arithmetic in RASP: the row-major layout, the programs, their costs, numpy runners.

- :mod:`attnsim.matrix.layout`: the row-major bijection (flatten, unflatten, pack, unpack);
- :mod:`attnsim.matrix.programs`: transpose, matmul, softmax, relu, maxmin, bias_add, scale,
  det, inverse (and multi-head variants) as numerical RASP S-ops;
- :mod:`attnsim.matrix.costs`: attention layers and heads per layer of a program;
- :mod:`attnsim.matrix.apply`: evaluate the programs on numpy arrays.

>>> from attnsim import matrix
>>> matrix.attention_cost(matrix.programs.matmul(3, 3, 3)).heads_per_layer
(4, 1)
"""

from attnsim.matrix import apply, costs, layout, programs
from attnsim.matrix.costs import ProgramCost, attention_cost

__all__ = ["apply", "costs", "layout", "programs", "ProgramCost", "attention_cost"]
