"""Linear algebra on named residual directions: the compiler's intermediate representation."""

from attnsim.ir.basis import Basis
from attnsim.ir.blocks import BilinearUnit, Head, Layer, NativeUnit, ReluUnit

__all__ = ["Basis", "BilinearUnit", "Head", "Layer", "NativeUnit", "ReluUnit"]
