"""compile_program: RASP program -> exact PyTorch transformer, in five stages.

>>> from attnsim import rasp
>>> from attnsim.compiler import compile_program
>>> hist = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ))
>>> model = compile_program(hist, vocab=["a", "b"], max_seq_len=5)
>>> model.run(["a", "b", "a"])
[2, 1, 2]
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Sequence
from typing import Any

import torch

from attnsim.compiler import (
    assembly,
    components,
    guards,
    lowering,
    scheduling,
    tracing,
    value_inference,
)
from attnsim.model import memory
from attnsim.model.compiled import CompiledModel, OutputSpec, Report
from attnsim.rasp import expr as E
from attnsim.rasp import interpret


def compile_program(
    program: E.SOp,
    *,
    vocab: Sequence[Any] | None,
    max_seq_len: int,
    causal: bool = False,
    attention: str = "hard",
    maps: str = "native",
    map_tolerance: float = 1e-6,
    map_ranges: dict[str, tuple[float, float]] | None = None,
    map_error: str = "absolute",
    fixed_length: bool = False,
    dtype: torch.dtype = torch.float64,
    value_scale: float = 1.0,
) -> CompiledModel:
    """Compiles a RASP program into a transformer that computes it exactly.

    Args:
        program: the RASP S-op to compute.
        vocab: the token vocabulary, or None for real-valued tokens (``numerical(tokens)``).
        max_seq_len: the longest input the model accepts.
        causal: build a causal model (each query sees keys at positions <= its own).
        attention: "hard" (average-hard attention) or "softmax" (a softmax transformer whose
            inverse temperature makes the weight on unselected keys below 1e-17).
        maps: "native" (exp, log, sqrt, 1/x, rsqrt and gelu as declared elementwise units,
            exact) or "relu" (ReLU units only: a piecewise-linear interpolant on the map's
            declared input range, with a certified error bound in the report).
        map_tolerance: the largest error of a ReLU-realised map (maps="relu").
        map_ranges: input ranges of maps by label (of the map or of its input), for
            maps="relu"; the input's ``rasp.numerical(x, value_range=...)`` works too.
        map_error: "absolute" (``|f - f^| <= map_tolerance``) or "relative"
            (``|f - f^| <= map_tolerance |f|`` for exp, 1/x, 1/sqrt(x) and sqrt above 0: the
            choice for ranges where f spans many orders of magnitude; maps whose function
            reaches 0 on the range, such as gelu and log, keep the absolute tolerance).
        fixed_length: inputs always have exactly ``max_seq_len`` tokens (then ``length`` and
            counts over position-only selectors are known in advance).
        dtype: torch.float64 (default) or torch.float32.
        value_scale: softmax mode only: how much larger than the smallest relevant value the
            values a head averages can be (for example e^700 for exponentials). The inverse
            temperature grows by 2 ln(value_scale), so that the weight leaked to unselected
            keys stays below 1e-17 relative to that spread.

    Returns:
        A CompiledModel: ``.run(xs)``, ``.run_with_cache(xs)``, ``.report()``, ``.save(dir)``.

    Raises:
        TypeError: ``program`` is not a RASP S-op, or an argument is of the wrong kind
            (an unhashable token, a max_seq_len that is not an int).
        ValueError: bad arguments (an empty vocab, None or NaN as a token, max_seq_len < 1).
        RASPEvaluationError: (a ValueError) the program fails on inputs the vocabulary
            allows: a selector's predicate raises on a pair of values, or a map gives NaN or
            an infinity; all are listed.
        NotImplementedError: parts of the program cannot be compiled; all are listed.
        ModelTooLargeError: (a MemoryError and a ValueError) the model would not fit in
            this machine's memory; the message gives the estimate and what to lower.
    """
    start = time.perf_counter()
    _check_arguments(
        max_seq_len=max_seq_len,
        causal=causal,
        attention=attention,
        maps=maps,
        map_tolerance=map_tolerance,
        map_error=map_error,
        fixed_length=fixed_length,
        dtype=dtype,
        value_scale=value_scale,
    )
    max_seq_len = int(max_seq_len)
    vocab = value_inference.check_vocab(vocab)

    graph = tracing.trace(program)
    _check_size(graph, max_seq_len, dtype)
    vi = value_inference.ValueInference(vocab, max_seq_len, causal, fixed_length)
    errors = value_inference.program_errors(vi, (graph.nodes[u] for u in graph.order))
    if errors:
        raise interpret.RASPEvaluationError(
            "this program fails on inputs the vocabulary allows (a function that raises "
            "there raises in the interpreter too; a NaN or an infinity is a value no compiled "
            "model can hold):\n" + "\n".join(f"  - {m}" for m in errors)
        )
    low = lowering.Lowerer(
        vi,
        graph.labels,
        maps=maps,
        map_tolerance=map_tolerance,
        map_ranges=map_ranges,
        map_error=map_error,
    )
    errors = _lower_all(low, graph)
    if errors:
        raise NotImplementedError(
            "cannot compile this program:\n" + "\n".join(f"  - {m}" for m in errors)
        )
    out_rep = low.rep(program)
    layers = scheduling.schedule(low.heads, low.units)
    table = components.build(graph, low, layers, out_rep)
    beta = 2.0 * (math.log(max_seq_len + 1) + 40.0 + math.log(value_scale))
    model = assembly.assemble(
        layers,
        low.basis,
        static_embed=low.static_embed,
        token_dims=low.token_dims,
        token_vocab=[] if vi.vocab is None else list(vi.vocab),
        numerical_token_dir=low.token_num_dir,
        max_seq_len=max_seq_len,
        attention=attention,
        beta=beta,
        causal=causal,
        dtype=dtype,
    )
    if out_rep.kind == "num":
        output = OutputSpec("num", form=tuple(sorted(out_rep.form.items())))
    else:
        output = OutputSpec("cat", values=tuple(out_rep.values), dims=tuple(out_rep.dims))
    checks = guards.runtime_guards(graph, vi, low)
    n_params, nonzero = assembly.count_parameters(model)
    report = Report(
        name=program.label,
        layers=len(layers),
        attention_layers=sum(1 for layer in layers if layer.heads),
        heads_per_layer=[len(layer.heads) for layer in layers],
        d_model=model.cfg.d_model,
        d_head=model.cfg.d_head,
        d_mlp=model.cfg.d_mlp,
        d_bilinear=model.cfg.d_bilinear,
        d_native=dict(model.cfg.d_native),
        parameters=n_params,
        nonzero_parameters=nonzero,
        compile_seconds=time.perf_counter() - start,
        attention=attention,
        realisations=[r.__dict__ for r in low.realisations],
        components=[c.to_dict() for c in table.rows],
    )
    return CompiledModel(
        model,
        residual=low.basis.labels,
        vocab=None if vi.vocab is None else list(vi.vocab),
        numerical_tokens=low.token_num_dir is not None,
        max_seq_len=max_seq_len,
        fixed_length=fixed_length or _needs_full_length(graph),
        output=output,
        guards=checks,
        report=report,
    )


def _lower_all(low: lowering.Lowerer, graph: tracing.Graph) -> list[str]:
    """Lowers every S-op, collecting every unsupported construct instead of stopping."""
    errors: list[str] = []
    failed: set[int] = set()
    for uid in graph.order:
        node = graph.nodes[uid]
        if not isinstance(node, E.SOp) or (low.vi.is_static(node) and node is not graph.output):
            continue  # static S-ops are embedded only where something reads them
        if any(c.uid in failed for c in _sop_inputs(node)):
            failed.add(uid)
            continue
        try:
            low.rep(node)
        except lowering.UnsupportedError as exc:
            errors.append(str(exc))
            failed.add(uid)
    return list(dict.fromkeys(errors))


def _sop_inputs(node: E.RASPExpr) -> list[E.RASPExpr]:
    out = []
    stack = list(node.children)
    while stack:
        c = stack.pop()
        if isinstance(c, E.SOp):
            out.append(c)
        else:
            stack.extend(c.children)
    return out


def _needs_full_length(graph: tracing.Graph) -> bool:
    """Whether the program runs only on inputs of exactly max_seq_len tokens: a ConstantSOp
    that checks its length, or a ConstantSelector, has one value per position (the
    interpreter refuses other lengths, so the model must too)."""
    return any(
        isinstance(n, E.ConstantSelector) or (isinstance(n, E.ConstantSOp) and n.check_length)
        for n in graph.nodes.values()
    )


def _check_arguments(
    *,
    max_seq_len: Any,
    causal: Any,
    attention: Any,
    maps: Any,
    map_tolerance: Any,
    map_error: Any,
    fixed_length: Any,
    dtype: Any,
    value_scale: Any,
) -> None:
    """Refuses arguments of the wrong kind or value, naming what was expected."""
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, numbers.Integral):
        raise TypeError(
            "max_seq_len must be a positive int (the longest input the model accepts), got "
            f"{type(max_seq_len).__name__} {max_seq_len!r}"
        )
    if max_seq_len < 1:
        raise ValueError(
            f"max_seq_len must be a positive int (the longest input the model accepts), got "
            f"{max_seq_len!r}"
        )
    for name, flag in (("causal", causal), ("fixed_length", fixed_length)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False, got {type(flag).__name__} {flag!r}")
    if attention not in ("hard", "softmax"):
        raise ValueError(f"attention must be 'hard' or 'softmax', got {attention!r}")
    if maps not in ("native", "relu"):
        raise ValueError(f"maps must be 'native' or 'relu', got {maps!r}")
    if not _positive_finite(map_tolerance):
        raise ValueError(f"map_tolerance must be a positive finite number, got {map_tolerance!r}")
    if map_error not in ("absolute", "relative"):
        raise ValueError(f"map_error must be 'absolute' or 'relative', got {map_error!r}")
    if dtype not in (torch.float64, torch.float32):
        raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
    if not (_positive_finite(value_scale) and value_scale >= 1.0):
        raise ValueError(f"value_scale must be a finite number >= 1, got {value_scale!r}")


def _positive_finite(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _check_size(graph: tracing.Graph, max_seq_len: int, dtype: torch.dtype) -> None:
    """Refuses a max_seq_len whose [pos, pos] arrays cannot fit, before making any.

    Attention holds scores for every (query, key) pair; value inference evaluates static
    selectors at full length. The weights are checked again once their sizes are known.
    """
    n_ctx = max_seq_len + 1
    itemsize = 8 if dtype == torch.float64 else 4
    attends = any(
        isinstance(n, (E.Aggregate, E.SelectorWidth, E.LengthType)) for n in graph.nodes.values()
    )
    needed = 2 * max_seq_len * max_seq_len  # the evaluator's masks and a selector, as bool
    if attends:
        needed = max(needed, memory.attention_bytes(n_ctx, 1, itemsize))
    memory.check_fits(
        needed,
        f"compiling with max_seq_len={max_seq_len} (attention over {n_ctx} positions)",
        "lower max_seq_len: the [max_seq_len + 1]^2 attention scores grow with its square",
    )
