"""Attention layers and heads of a RASP program, counted by the compiler's cost model.

The rules (the ones the matrix programs are designed for):

- an S-op computed only from ``indices`` and constants (``Full``, ``ConstantSOp``, maps of
  them) is computed at compile time: it costs nothing and sits at layer 0;
- ``tokens`` sits at layer 0; ``length`` costs one attention layer (layer 1, one head);
- Maps and SequenceMaps run in MLPs and sit at the deepest layer of their inputs;
- an ``Aggregate`` (or ``SelectorWidth``) sits at ``1 +`` the deepest layer among its values
  and its selector's keys and queries;
- the heads of a layer are its distinct selector objects: Aggregates at the same layer that
  use the same selector object share one head.

>>> from attnsim import rasp
>>> x = rasp.numerical(rasp.tokens)
>>> sel = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.EQ)
>>> a = rasp.numerical(rasp.Aggregate(sel, x))
>>> attention_cost(a * rasp.numerical(rasp.Aggregate(sel, a)))
ProgramCost(heads_per_layer=(1, 1))
"""

from __future__ import annotations

import dataclasses

from attnsim import rasp

__all__ = ["ProgramCost", "attention_cost"]


@dataclasses.dataclass(frozen=True)
class ProgramCost:
    """Attention resources of a program.

    Attributes:
        heads_per_layer: the number of heads in attention layers 1, 2, ... (layer 0, the
            embedding and compile-time index arithmetic, has none).
    """

    heads_per_layer: tuple[int, ...]

    @property
    def layers(self) -> int:
        """The number of attention layers."""
        return len(self.heads_per_layer)

    @property
    def total_heads(self) -> int:
        """The number of heads over all layers."""
        return sum(self.heads_per_layer)

    @property
    def max_heads(self) -> int:
        """The most heads in one layer (0 for a program without attention)."""
        return max(self.heads_per_layer, default=0)


_LENGTH_HEAD = "length"


def attention_cost(program: rasp.RASPExpr) -> ProgramCost:
    """Counts the attention layers and heads per layer of ``program`` (see the module rules).

    Args:
        program: a RASP S-op (or selector).

    Returns:
        A :class:`ProgramCost`.

    Raises:
        TypeError: ``program`` is not a RASP expression.

    >>> from attnsim import rasp
    >>> attention_cost(rasp.numerical(rasp.tokens) * 2).layers
    0
    """
    if not isinstance(program, rasp.RASPExpr):
        raise TypeError(f"attention_cost expects a RASP expression, got {type(program).__name__}")
    layer: dict[int, int] = {}  # uid -> attention layer at which the node's value is ready
    heads: dict[int, set] = {}  # attention layer -> selector uids (or the length head)

    for node in rasp.dependency_order(program):  # children first; refuses a cycle
        kids = node.children
        if isinstance(node, rasp.TokensType):
            layer[node.uid] = 0
        elif isinstance(node, rasp.LengthType):
            layer[node.uid] = 1
            heads.setdefault(1, set()).add(_LENGTH_HEAD)
        elif isinstance(node, (rasp.Aggregate, rasp.SelectorWidth)):
            depth = 1 + max(layer[c.uid] for c in kids)
            layer[node.uid] = depth
            heads.setdefault(depth, set()).add(node.selector.uid)
        else:  # maps, selectors, indices, constants: as deep as their inputs (or 0)
            layer[node.uid] = max((layer[c.uid] for c in kids), default=0)
    depth = max(heads, default=0)
    return ProgramCost(tuple(len(heads.get(i, ())) for i in range(1, depth + 1)))
