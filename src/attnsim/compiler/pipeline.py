"""compile_program: RASP program -> exact PyTorch transformer, stage by stage.

>>> from attnsim import rasp
>>> from attnsim.compiler import CompileOptions, compile_program
>>> hist = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ))
>>> model = compile_program(hist, vocab=["a", "b"], max_seq_len=5)
>>> model.run(["a", "b", "a"])
[2, 1, 2]
>>> causal = compile_program(hist, vocab="ab", max_seq_len=5, options=CompileOptions(causal=True))
>>> causal.run(["a", "b", "a"])
[1, 1, 2]
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from attnsim.compiler import (
    assembly,
    guards,
    lowering,
    precision,
    scheduling,
    tracing,
    value_inference,
)
from attnsim.compiler import options as opts
from attnsim.compiler.collector import paused
from attnsim.compiler.options import CompileOptions
from attnsim.model.compiled import CompiledModel
from attnsim.rasp import expr as E


@paused
def compile_program(
    program: E.SOp,
    *,
    vocab: Sequence[Any] | None,
    max_seq_len: int,
    options: CompileOptions | None = None,
    **kwargs: Any,
) -> CompiledModel:
    """Compiles a RASP program into a transformer that computes it exactly.

    Args:
        program: the RASP S-op to compute.
        vocab: the token vocabulary, or None for real-valued tokens (``numerical(tokens)``).
        max_seq_len: the longest input the model accepts.
        options: how to compile (a :class:`CompileOptions`: causal, attention, maps,
            map_tolerance, map_ranges, map_error, fixed_length, dtype, value_scale); None
            for the defaults. ``dtype="auto"`` (the default) builds float32 weights when
            every value the model computes is exact in float32, else float64; the report's
            ``dtype`` and ``dtype_reason`` say which and why.
        **kwargs: any of those options by name, as a shorthand (``causal=True``); with
            ``options`` too, a keyword may only repeat the value ``options`` holds.

    Returns:
        A CompiledModel: ``.run(xs)``, ``.run_with_cache(xs)``, ``.report()``, ``.save(dir)``.

    Raises:
        TypeError: ``program`` is not a RASP S-op, or an argument is of the wrong kind
            (an unhashable token, a max_seq_len that is not an int, an unknown keyword, an
            option given twice with two values).
        ValueError: bad arguments (an empty vocab, None or NaN as a token, max_seq_len < 1).
        RASPEvaluationError: (a ValueError) the program fails on inputs the vocabulary
            allows: a selector's predicate raises on a pair of values, or a map gives NaN or
            an infinity; all are listed.
        NotImplementedError: parts of the program cannot be compiled; all are listed.
        ModelTooLargeError: (a MemoryError and a ValueError) the model would not fit in
            this machine's memory; the message gives the estimate and what to lower.
    """
    start = time.perf_counter()
    max_seq_len = opts.check_max_seq_len(max_seq_len)  # 1. validate
    options = opts.resolve(options, kwargs)
    vocab = value_inference.check_vocab(vocab)
    graph = tracing.trace(program)  # 2. trace
    tracing.check_size(graph, max_seq_len, options.itemsize, options.storage)
    vi = value_inference.infer(graph, vocab, max_seq_len, options)  # 3. infer values
    lowered = lowering.lower(graph, vi, options)  # 4. lower
    dtype = precision.choose(graph, vi, lowered, options)  # 5. choose the dtype
    # 6. run-time checks, read on the earliest schedule; 7. schedule (late in sparse storage)
    checks = guards.runtime_guards(graph, vi, lowered, early := scheduling.schedule(lowered))
    sched = _late(lowered, early, checks, options, dtype.dtype)
    model = assembly.build(sched.layers, lowered, options, dtype.dtype)  # 8. assemble, report
    return assembly.package(program, graph, lowered, sched, model, checks, options, start, dtype)


def _late(lowered, early, checks, options: CompileOptions, dtype) -> scheduling.Schedule:
    """The blocks in layers: in sparse storage, which keeps a value from its write to its
    last read, each as late as the depth of ``early`` allows (what a run-time check reads
    stays where the check reads it); ``early`` itself in dense storage."""
    if assembly.storage_for(early.layers, lowered, options, dtype) != "sparse":
        return early
    pinned = frozenset(d for g in checks for d in [*(d for d, _ in g.form), *g.dims])
    return scheduling.schedule(lowered, late=True, pinned=pinned)
