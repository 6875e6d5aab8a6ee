"""Matrix arithmetic in RASP: the row-major layout, the programs, their costs, numpy runners.

The program builders are at the top level: ``attnsim.matrix.transpose(r, c)``,
``matmul(r, k, c)``, ``softmax(r, c)``, ``inverse(n)``, ``det(n)``, ``relu()``,
``maxmin()``, ``bias_add(r, c)`` and ``scale(s)`` return numerical RASP S-ops (the same
functions as :mod:`attnsim.matrix.programs`). The submodules:

- :mod:`attnsim.matrix.layout`: the row-major bijection (flatten, unflatten, pack, unpack);
- :mod:`attnsim.matrix.programs`: the builders, with multi-head variants and helpers;
- :mod:`attnsim.matrix.costs`: attention layers and heads per layer of a program;
- :mod:`attnsim.matrix.apply`: run the programs on numpy arrays, with the interpreter or the
  compiled transformer (``backend="compiled"``).

>>> from attnsim import matrix
>>> matrix.attention_cost(matrix.matmul(3, 3, 3)).heads_per_layer
(4, 1)
>>> matrix.apply.matmul([[1.0, 2.0]], [[3.0], [4.0]], backend="compiled").tolist()
[[11.0]]
"""

from attnsim.matrix import apply, costs, layout, programs
from attnsim.matrix.costs import ProgramCost, attention_cost
from attnsim.matrix.programs import (
    bias_add,
    det,
    inverse,
    matmul,
    maxmin,
    relu,
    scale,
    softmax,
    transpose,
)

__all__ = [
    "apply",
    "costs",
    "layout",
    "programs",
    "ProgramCost",
    "attention_cost",
    "transpose",
    "matmul",
    "softmax",
    "inverse",
    "det",
    "relu",
    "maxmin",
    "bias_add",
    "scale",
]
