"""A text rendering of an S-op's computation flow (``draw(...)`` in the REPL).

Each line is one node of the expression graph, dependencies first, with the attention
layer it needs (selects and aggregates count layers, as in the original's drawings) and
its value on the input.

>>> from attnsim import rasp
>>> rev = rasp.Aggregate(rasp.Select(rasp.indices, rasp.length - rasp.indices - 1,
...                                  rasp.Comparison.EQ), rasp.tokens).named("rev")
>>> print(render(rev, "ab")[-1])
  layer 1  rev (Aggregate, categorical) = [b, a]
"""

from __future__ import annotations

from typing import Any

from attnsim import rasp
from attnsim.rasp.text import values as V

__all__ = ["render"]


def _topological(root: rasp.RASPExpr) -> list[rasp.RASPExpr]:
    order: list[rasp.RASPExpr] = []
    seen: set[int] = set()
    stack: list[tuple[rasp.RASPExpr, bool]] = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if ready:
            order.append(node)
            continue
        if node.uid in seen:
            continue
        seen.add(node.uid)
        stack.append((node, True))
        for c in reversed(node.children):
            if c.uid not in seen:
                stack.append((c, False))
    return order


def render(expr: rasp.SOp, xs: Any) -> list[str]:
    """The lines of the rendering of ``expr`` evaluated on ``xs``.

    Args:
        expr: the S-op to draw.
        xs: the input (list or string).

    Returns:
        Lines: a header, then one line per node (dependencies first).
    """
    nodes = _topological(expr)
    trace = V.Trace(list(xs))
    layer: dict[int, int] = {}
    lines = [f"computation flow of {expr.label} on {V.format_example(xs)}:"]
    for node in nodes:
        below = max((layer[c.uid] for c in node.children), default=0)
        is_attn = isinstance(node, rasp.Aggregate | rasp.SelectorWidth)
        layer[node.uid] = below + 1 if is_attn else below
        if isinstance(node, rasp.Selector):
            continue
        vals = trace.objects(node)
        enc = rasp.get_encoding(node).value
        shown = "[" + ", ".join(V.small_str(v) for v in vals) + "]"
        lines.append(
            f"  layer {layer[node.uid]}  {node.label} ({type(node).__name__}, {enc}) = {shown}"
        )
    return lines
