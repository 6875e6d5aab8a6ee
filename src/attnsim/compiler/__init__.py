"""The compiler: RASP programs to exact PyTorch transformer weights.

Stages (each a module): tracing, value_inference, lowering, scheduling, assembly (then
guards for the run-time checks); ``pipeline.compile_program`` runs them in order, with the
choices of one :class:`CompileOptions` (``options``).
"""

from attnsim.compiler.options import AttentionMode, CompileOptions, MapError, MapMode
from attnsim.compiler.pipeline import compile_program

__all__ = ["AttentionMode", "CompileOptions", "MapError", "MapMode", "compile_program"]
