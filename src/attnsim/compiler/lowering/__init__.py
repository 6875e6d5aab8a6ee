"""Stage 3, lowering: every S-op becomes named residual directions written by IR blocks.

Each S-op gets a representation in the residual stream (``program.Rep``):

- categorical: one direction per value, ``"label:value"`` (one-hot; the zero vector is None);
- numerical: a linear form over residual directions. Linear maps (affine maps, sums,
  numerical readouts of categorical S-ops) stay *virtual*: they cost no block and no layer.

Lowering is pure: ``lower(graph, vi, options)`` returns a frozen ``LoweredProgram`` (blocks,
residual basis, static embedding, output, run-time checks, realisations) and places no block
in a layer; each block is attached to a slot ("the first MLP after these"), which scheduling
turns into a layer. The IR constructions live in ``attnsim.ir``; the modules here choose them:

- ``program``: the output types (``LoweredProgram``, ``Rep``, ``Slot``, ``Realisation``);
- ``context``: the state of one lowering (names, directions, slots, blocks, memo);
- ``forms``: embedded S-ops, numbers <-> one-hot blocks (discretisers), squares;
- ``maps``: Map and SequenceMap (virtual forms, lookup tables, products, native and ReLU maps);
- ``selectors``: selectors as attention scores (tables, equality, SelectMax);
- ``aggregates``: Aggregate (mean, sum, default) and SelectorWidth heads.

>>> from attnsim import rasp
>>> from attnsim.compiler import tracing, value_inference
>>> from attnsim.compiler.options import CompileOptions
>>> hist = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ))
>>> graph = tracing.trace(hist.named("hist"))
>>> vi = value_inference.ValueInference(("a", "b"), 3, causal=False, fixed_length=False)
>>> low = lower(graph, vi, CompileOptions())
>>> low.output.kind, low.output.values, [s.kind for s in low.slots]
('cat', (0, 1, 2, 3), ['attn', 'mlp'])
"""

from __future__ import annotations

from attnsim.compiler import tracing
from attnsim.compiler.lowering import aggregates, forms, maps
from attnsim.compiler.lowering.context import Context
from attnsim.compiler.lowering.program import (
    LoweredProgram,
    Realisation,
    Rep,
    Slot,
    UnsupportedError,
)
from attnsim.compiler.options import CompileOptions
from attnsim.compiler.value_inference import ValueInference
from attnsim.rasp import expr as E

__all__ = ["LoweredProgram", "Realisation", "Rep", "Slot", "UnsupportedError", "lower"]


def lower(graph: tracing.Graph, vi: ValueInference, options: CompileOptions) -> LoweredProgram:
    """Lowers every S-op of ``graph`` that needs weights.

    Raises:
        NotImplementedError: parts of the program cannot be compiled; every one is listed
            (the message says what to change).
    """
    ctx = Context(vi, graph.labels, options, lower_sop)
    errors: list[str] = []
    failed: set[int] = set()
    for uid in graph.order:
        node = graph.nodes[uid]
        if not isinstance(node, E.SOp) or (vi.is_static(node) and node is not graph.output):
            continue  # static S-ops are embedded only where something reads them
        if any(c.uid in failed for c in _sop_inputs(node)):
            failed.add(uid)
            continue
        try:
            ctx.rep(node)
        except UnsupportedError as exc:
            errors.append(str(exc))
            failed.add(uid)
    if errors:
        raise NotImplementedError(
            "cannot compile this program:\n" + "\n".join(f"  - {m}" for m in dict.fromkeys(errors))
        )
    return ctx.freeze(graph.output)


def lower_sop(ctx: Context, e: E.SOp) -> Rep:
    """The representation of one S-op (what ``Context.rep`` computes on first use)."""
    if ctx.vi.is_static(e):
        return forms.static(ctx, e)
    if isinstance(e, E.TokensType):
        return forms.tokens(ctx, e)
    if isinstance(e, E.LengthType):
        width = E.SelectorWidth(E.Select(E.tokens, E.tokens, E.Comparison.TRUE))
        width = E.numerical(width) if E.is_numerical(e) else width
        ctx.labels[width.uid] = ctx.label(e)
        return ctx.rep(width)
    if isinstance(e, E.Map):
        return maps.lower_map(ctx, e)
    if isinstance(e, E.SequenceMap):
        return maps.lower_sequence_map(ctx, e)
    if isinstance(e, E.Aggregate):
        return aggregates.lower_aggregate(ctx, e)
    if isinstance(e, E.SelectorWidth):
        return aggregates.lower_selector_width(ctx, e)
    raise UnsupportedError(f"{ctx.label(e)}: cannot compile {type(e).__name__}")


def _sop_inputs(node: E.RASPExpr) -> list[E.RASPExpr]:
    """The S-ops a node reads (through its selectors too)."""
    out = []
    stack = list(node.children)
    while stack:
        c = stack.pop()
        if isinstance(c, E.SOp):
            out.append(c)
        else:
            stack.extend(c.children)
    return out
