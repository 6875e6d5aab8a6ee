"""attnsim: programming transformers exactly.

RASP programs (``attnsim.rasp``), an exact compiler to PyTorch weights, matrix programs,
and the universal simulator of attention.
"""

from attnsim import rasp

__version__ = "0.1.0"
__all__ = ["rasp", "__version__"]
