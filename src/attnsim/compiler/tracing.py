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
    """Collects the expressions of ``program`` in dependency order.

    Raises:
        TypeError: ``program`` is not an S-op. ValueError: its graph has a cycle.
    """
    if not isinstance(program, E.SOp):
        raise TypeError(
            f"compile_program expects a RASP S-op, got {type(program).__name__}; "
            "a selector alone is not a program (aggregate it or take its width)"
        )
    exprs = E.dependency_order(program)  # refuses a cycle
    nodes = {e.uid: e for e in exprs}
    order = [e.uid for e in exprs]
    labels = unique_labels(exprs)
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
    """Refuses a max_seq_len whose attention scores cannot fit, before making any.

    Dense attention holds scores for every (query, key) pair. Sparse storage runs attention
    from plans and in row chunks, so nothing ``[pos, pos]`` is counted for it here. A static
    selector evaluated at full length (``[pos, pos]`` bools) is charged where value inference
    evaluates one (:meth:`ValueInference.static_matrix`), so a program that never needs one
    (the universal simulator's) is not refused for it. The weights are checked again once
    their sizes are known.

    Args:
        graph: the traced program.
        max_seq_len: the longest input.
        itemsize: bytes per number of the model's dtype (8 for float64, 4 for float32).
        storage: "sparse", "dense" or "auto".

    Raises:
        ModelTooLargeError: the arrays would not fit in this machine's memory.
    """
    n_ctx = max_seq_len + 1
    attends = any(
        isinstance(n, (E.Aggregate, E.SelectorWidth, E.LengthType)) for n in graph.nodes.values()
    )
    if not attends or storage == "sparse":
        return
    needed = memory.attention_bytes(n_ctx, 1, itemsize)
    memory.check_fits(
        needed,
        f"compiling with max_seq_len={max_seq_len} (attention over {n_ctx} positions)",
        "lower max_seq_len: the [max_seq_len + 1]^2 attention scores grow with its square",
    )


def check_masks(e: E.RASPExpr, known: dict, max_seq_len: int) -> None:
    """Refuses to evaluate ``e`` at full length when a selector it reads (and ``known``, the
    evaluator's memo, does not hold yet) needs ``[pos, pos]`` masks that cannot fit: the
    selector and one mask of its size (causal, a negation, a conjunction). A static S-op
    that reads no selector never makes one.

    >>> from attnsim import rasp
    >>> width = rasp.SelectorWidth(rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LT))
    >>> check_masks(rasp.indices + 1, {}, 10**7)  # reads no selector: nothing to charge
    >>> try:
    ...     check_masks(width, {}, 10**7)
    ... except memory.ModelTooLargeError as exc:
    ...     print(str(exc)[:30])
    evaluating the static selector

    Raises:
        ModelTooLargeError: the masks would not fit in this machine's memory.
    """
    stack, seen = [e], set()
    while stack:
        node = stack.pop()
        if node.uid in seen or node.uid in known:
            continue
        seen.add(node.uid)
        if isinstance(node, E.Selector):
            L = max_seq_len
            memory.check_fits(
                2 * L * L,
                f"evaluating the static selector {node.label!r} at max_seq_len={L} "
                f"([{L}, {L}] masks)",
                "lower max_seq_len: a static selector's masks grow with its square",
            )
            return
        stack.extend(node.children)
