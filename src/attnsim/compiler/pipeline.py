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
import time
from collections.abc import Sequence
from typing import Any

import torch

from attnsim.compiler import assembly, lowering, scheduling, tracing, value_inference
from attnsim.model.compiled import CompiledModel, GuardSpec, OutputSpec, Report
from attnsim.rasp import expr as E


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
        TypeError: ``program`` is not a RASP S-op.
        ValueError: bad arguments.
        NotImplementedError: parts of the program cannot be compiled; all are listed.
    """
    start = time.perf_counter()
    if attention not in ("hard", "softmax"):
        raise ValueError(f"attention must be 'hard' or 'softmax', got {attention!r}")
    if maps not in ("native", "relu"):
        raise ValueError(f"maps must be 'native' or 'relu', got {maps!r}")
    if not map_tolerance > 0:
        raise ValueError(f"map_tolerance must be positive, got {map_tolerance!r}")
    if map_error not in ("absolute", "relative"):
        raise ValueError(f"map_error must be 'absolute' or 'relative', got {map_error!r}")
    if not isinstance(max_seq_len, int) or max_seq_len < 1:
        raise ValueError(f"max_seq_len must be a positive int, got {max_seq_len!r}")
    if dtype not in (torch.float64, torch.float32):
        raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype}")

    graph = tracing.trace(program)
    vi = value_inference.ValueInference(vocab, max_seq_len, causal, fixed_length)
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
    if not value_scale >= 1.0:
        raise ValueError(f"value_scale must be >= 1, got {value_scale!r}")
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
    guards = [
        GuardSpec(g.label, g.form, g.stage, g.allowed, g.integer, g.value_range)
        for g in _dedupe_guards(low)
    ]
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
    )
    return CompiledModel(
        model,
        residual=low.basis.labels,
        vocab=None if vi.vocab is None else list(vi.vocab),
        numerical_tokens=low.token_num_dir is not None,
        max_seq_len=max_seq_len,
        fixed_length=fixed_length,
        output=output,
        guards=guards,
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


def _dedupe_guards(low: lowering.Lowerer) -> list[lowering.Guard]:
    seen = set()
    out = []
    for g in low.guards:
        key = (g.form, g.stage, g.allowed, g.integer, g.value_range)
        if key not in seen:
            seen.add(key)
            out.append(g)
    return out
