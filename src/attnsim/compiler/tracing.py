"""Stage 1, tracing: the program's expressions, in dependency order, with unique labels.

>>> from attnsim import rasp
>>> g = trace(rasp.numerical(rasp.tokens * 2).named("double"))
>>> [g.labels[u] for u in g.order]
['tokens', 'double']
"""

from __future__ import annotations

from dataclasses import dataclass

from attnsim.model import memory
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


def needs_full_length(graph: Graph) -> bool:
    """Whether the program runs only on inputs of exactly max_seq_len tokens: a ConstantSOp
    that checks its length, or a ConstantSelector, has one value per position (the
    interpreter refuses other lengths, so the model must too)."""
    return any(
        isinstance(n, E.ConstantSelector) or (isinstance(n, E.ConstantSOp) and n.check_length)
        for n in graph.nodes.values()
    )


def check_size(graph: Graph, max_seq_len: int, itemsize: int, storage: str = "auto") -> None:
    """Refuses a max_seq_len whose [pos, pos] arrays cannot fit, before making any.

    Attention holds scores for every (query, key) pair; value inference evaluates static
    selectors at full length. The weights are checked again once their sizes are known.

    Args:
        graph: the traced program.
        max_seq_len: the longest input.
        itemsize: bytes per number of the model's dtype (8 for float64, 4 for float32).
        storage: "sparse" runs attention from plans and in row chunks: only a static
            selector at full length (``[pos, pos]`` bools) is counted then.

    Raises:
        ModelTooLargeError: the arrays would not fit in this machine's memory.
    """
    n_ctx = max_seq_len + 1
    attends = any(
        isinstance(n, (E.Aggregate, E.SelectorWidth, E.LengthType)) for n in graph.nodes.values()
    )
    needed = 2 * max_seq_len * max_seq_len  # the evaluator's masks and a selector, as bool
    if attends and storage != "sparse":
        needed = max(needed, memory.attention_bytes(n_ctx, 1, itemsize))
    memory.check_fits(
        needed,
        f"compiling with max_seq_len={max_seq_len} (attention over {n_ctx} positions)",
        "lower max_seq_len: the [max_seq_len + 1]^2 attention scores grow with its square",
    )
