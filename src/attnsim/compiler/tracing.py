"""Stage 1, tracing: the program's expressions, in dependency order, with unique labels.

>>> from attnsim import rasp
>>> g = trace(rasp.numerical(rasp.tokens * 2).named("double"))
>>> [g.labels[u] for u in g.order]
['tokens', 'double']
"""

from __future__ import annotations

from dataclasses import dataclass

from attnsim.rasp import expr as E


@dataclass(frozen=True)
class Graph:
    """The expressions reachable from ``output``.

    Attributes:
        output: the program.
        nodes: uid -> expression.
        order: uids, every expression after its children.
        labels: uid -> a label unique within the program (the expression's own label, with
            a ``#uid`` suffix where two expressions share one).
    """

    output: E.RASPExpr
    nodes: dict[int, E.RASPExpr]
    order: tuple[int, ...]
    labels: dict[int, str]


def trace(program: E.RASPExpr) -> Graph:
    """Collects the expressions of ``program`` in dependency order."""
    if not isinstance(program, E.SOp):
        raise TypeError(
            f"compile_program expects a RASP S-op, got {type(program).__name__}; "
            "a selector alone is not a program (aggregate it or take its width)"
        )
    nodes: dict[int, E.RASPExpr] = {}
    order: list[int] = []
    stack: list[tuple[E.RASPExpr, bool]] = [(program, False)]
    while stack:
        node, ready = stack.pop()
        if ready:
            if node.uid not in nodes:
                nodes[node.uid] = node
                order.append(node.uid)
            continue
        if node.uid in nodes:
            continue
        stack.append((node, True))
        for child in node.children:
            if child.uid not in nodes:
                stack.append((child, False))
    labels = unique_labels(nodes[u] for u in order)
    return Graph(output=program, nodes=nodes, order=tuple(order), labels=labels)


def unique_labels(exprs) -> dict[int, str]:
    """uid -> label, made unique with a ``#uid`` suffix where labels collide."""
    exprs = list(exprs)
    count: dict[str, int] = {}
    for e in exprs:
        count[e.label] = count.get(e.label, 0) + 1
    return {e.uid: e.label if count[e.label] == 1 else f"{e.label}#{e.uid}" for e in exprs}
