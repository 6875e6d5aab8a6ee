"""The compiler: RASP programs to exact PyTorch transformer weights.

Stages (each a module): tracing, value_inference, lowering, scheduling, assembly;
``pipeline.compile_program`` runs them in order.
"""

from attnsim.compiler.pipeline import compile_program

__all__ = ["compile_program"]
