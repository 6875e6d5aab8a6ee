"""Linear algebra on named residual directions: the compiler's intermediate representation.

``basis`` names the directions, ``blocks`` holds the heads and units (each runnable in numpy),
and the constructions build them: ``lookup`` (tables over one-hot values), ``discretise``
(steps between the values of a number), ``piecewise`` (certified ReLU interpolants),
``numeric`` (exact ReLU, bilinear and native units) and ``attention`` (scores and the BOS
default). Imports stdlib and numpy only.
"""

from attnsim.ir.basis import Basis
from attnsim.ir.blocks import BilinearUnit, Head, Layer, NativeUnit, ReluUnit

__all__ = ["Basis", "BilinearUnit", "Head", "Layer", "NativeUnit", "ReluUnit"]
