"""How big a transformer a RASP program needs: attention layers, heads per layer, MLPs.

Every operation is scheduled as early as possible:

- an ``Aggregate`` or a ``SelectorWidth`` is one attention head, in layer
  1 + (the deepest attention operation it depends on, through Maps, SequenceMaps and
  selectors);
- ``length``, when a program uses it, is one head in layer 1 (a transformer computes it with
  attention, as the RASP paper counts it);
- ``tokens``, ``indices`` and constants, and Maps/SequenceMaps of those alone, need no layer
  (they are embeddings, or an MLP before the first attention layer);
- each ``Map``/``SequenceMap`` node is an MLP, placed in the MLP block of the layer whose
  attention it waits for.

>>> from attnsim import library, rasp
>>> a = analyze(library.make_reverse(rasp.tokens))
>>> a.n_layers, a.heads_per_layer, a.n_mlps
(2, (1, 1), 2)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from attnsim.rasp import expr as E

__all__ = ["ProgramAnalysis", "AttentionOp", "analyze"]


@dataclasses.dataclass(frozen=True)
class AttentionOp:
    """One attention head of the schedule."""

    label: str  # the expression's name
    kind: str  # "Aggregate", "SelectorWidth" or "length"
    layer: int  # 1-based attention layer


@dataclasses.dataclass(frozen=True)
class ProgramAnalysis:
    """The resources of a RASP program scheduled as early as possible.

    Attributes:
        name: the program's label.
        n_layers: attention layers (each one multi-head attention sublayer plus its MLP).
        heads_per_layer: the number of heads in layers 1..n_layers.
        n_mlps: Map and SequenceMap nodes.
        mlps_per_layer: those nodes per MLP block 0..n_layers (block 0: before the first
            attention layer, on tokens, indices and constants only).
        uses_length: whether the program reads ``length``.
        attention: every head with its layer, in layer order.
    """

    name: str
    n_layers: int
    heads_per_layer: tuple[int, ...]
    n_mlps: int
    mlps_per_layer: tuple[int, ...]
    uses_length: bool
    attention: tuple[AttentionOp, ...]

    @property
    def n_heads(self) -> int:
        """All heads together."""
        return sum(self.heads_per_layer)

    @property
    def max_heads(self) -> int:
        """The most heads in one layer (the paper's "heads" column)."""
        return max(self.heads_per_layer, default=0)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary of the analysis."""
        return {
            "name": self.name,
            "n_layers": self.n_layers,
            "heads_per_layer": list(self.heads_per_layer),
            "n_heads": self.n_heads,
            "max_heads": self.max_heads,
            "n_mlps": self.n_mlps,
            "mlps_per_layer": list(self.mlps_per_layer),
            "uses_length": self.uses_length,
            "attention": [dataclasses.asdict(op) for op in self.attention],
        }

    def __str__(self) -> str:
        lines = [
            f"program {self.name}: {self.n_layers} attention layer(s), {self.n_heads} head(s) "
            f"(at most {self.max_heads} per layer), {self.n_mlps} MLP(s)",
            f"{'layer':>5}  {'heads':>5}  {'MLPs':>4}  attention operations",
        ]
        if self.mlps_per_layer and self.mlps_per_layer[0]:
            lines.append(f"{0:>5}  {0:>5}  {self.mlps_per_layer[0]:>4}  -")
        for layer in range(1, self.n_layers + 1):
            ops = ", ".join(
                op.label if op.kind == "length" else f"{op.label} ({op.kind})"
                for op in self.attention
                if op.layer == layer
            )
            lines.append(
                f"{layer:>5}  {self.heads_per_layer[layer - 1]:>5}  "
                f"{self.mlps_per_layer[layer]:>4}  {ops}"
            )
        return "\n".join(lines)


def analyze(program: E.RASPExpr) -> ProgramAnalysis:
    """Schedules every operation of ``program`` as early as possible and counts resources.

    Args:
        program: an S-op or a selector.

    Returns:
        The layer count, heads per layer and MLP count.

    Raises:
        TypeError: ``program`` is not a RASP expression, or holds a node kind this analysis
            does not know.
        ValueError: the program's graph has a cycle.

    >>> from attnsim import library, rasp
    >>> print(analyze(library.sort_by_most_freq(rasp.tokens)))
    program sort_by_most_freq: 3 attention layer(s), 4 head(s) (at most 2 per layer), 3 MLP(s)
    layer  heads  MLPs  attention operations
        1      2     3  num_prev_copies (SelectorWidth), hist (SelectorWidth)
        2      1     0  target_pos (SelectorWidth)
        3      1     0  sort_by_most_freq (Aggregate)
    """
    if not isinstance(program, E.RASPExpr):
        raise TypeError(
            f"analyze expects a RASP expression, got {type(program).__name__} {program!r}; "
            "build one with attnsim.rasp"
        )
    depth: dict[int, int] = {}  # uid -> the deepest attention layer the value waits for
    attention: list[AttentionOp] = []
    mlp_layers: list[int] = []
    uses_length = False
    for node in E.dependency_order(program):  # children first; refuses a cycle
        below = max((depth[c.uid] for c in node.children), default=0)
        if isinstance(node, E.LengthType):
            uses_length = True
            depth[node.uid] = 1
        elif isinstance(node, (E.Aggregate, E.SelectorWidth)):
            depth[node.uid] = below + 1
            attention.append(AttentionOp(node.label, type(node).__name__, below + 1))
        elif isinstance(node, (E.Map, E.SequenceMap)):
            depth[node.uid] = below
            mlp_layers.append(below)
        elif isinstance(
            node,
            (
                E.TokensType,
                E.IndicesType,
                E.Full,
                E.ConstantSOp,
                E.Select,
                E.ConstantSelector,
                E.SelectorAnd,
                E.SelectorOr,
                E.SelectorNot,
            ),
        ):
            depth[node.uid] = below
        else:
            raise TypeError(
                f"analyze does not know the RASP node {type(node).__name__} ({node.label!r})"
            )
    if uses_length:
        attention.append(AttentionOp("length", "length", 1))
    n_layers = max((op.layer for op in attention), default=0)
    heads = [0] * n_layers
    for op in attention:
        heads[op.layer - 1] += 1
    mlps = [0] * (n_layers + 1)
    for layer in mlp_layers:
        mlps[layer] += 1
    return ProgramAnalysis(
        name=program.label,
        n_layers=n_layers,
        heads_per_layer=tuple(heads),
        n_mlps=len(mlp_layers),
        mlps_per_layer=tuple(mlps),
        uses_length=uses_length,
        attention=tuple(sorted(attention, key=lambda op: op.layer)),
    )
