"""Stage 4, scheduling: every block is placed in the earliest layer its inputs allow.

Stage 0 is the embedding; layer l (1-based) has its attention sublayer at stage 2l-1 and its
MLP at stage 2l. Lowering attaches each block to a slot, "the first attention sublayer (or
MLP) after these slots"; ``place`` gives every slot its stage, as soon as possible. Then the
blocks are grouped into layers, in the order they were made. Two heads with the same scores
(same query-key terms and mode) in one layer become one head whose value/output map moves all
their values: Aggregates that share a selector cost one head.

>>> place([Slot("attn", frozenset()), Slot("mlp", frozenset({0})), Slot("mlp", frozenset())])
(1, 2, 2)
>>> from attnsim.ir.blocks import Head, ReluUnit
>>> h1 = Head("a", (("q", "k", 1.0),), (("x", "ax", 1.0),))
>>> h2 = Head("b", (("q", "k", 1.0),), (("y", "by", 1.0),))
>>> layers = group([(1, h1), (1, h2)], [(2, ReluUnit("u", (("ax", 1.0),), (("z", 1.0),)))])
>>> len(layers), len(layers[0].heads), layers[0].heads[0].name
(1, 1, 'a+b')
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from attnsim.compiler.lowering.program import LoweredProgram, Slot
from attnsim.ir.blocks import BilinearUnit, Head, Layer, NativeUnit, ReluUnit


def attn_stage(ready: int) -> int:
    """The first attention stage (odd) after stage ``ready``."""
    return ready + 1 if ready % 2 == 0 else ready + 2


def mlp_stage(ready: int) -> int:
    """The first MLP stage (even) after stage ``ready``."""
    return ready + 1 if ready % 2 == 1 else ready + 2


@dataclass(frozen=True)
class Schedule:
    """The layers of a program and the stage of every slot of its lowering.

    Attributes:
        layers: one per transformer block (``n_layers``), heads and units in place.
        slot_stages: the stage of each slot of the lowering (by slot id).
    """

    layers: tuple[Layer, ...]
    slot_stages: tuple[int, ...]

    def stage(self, after: Iterable[int]) -> int:
        """The stage after which a value needing the slots ``after`` is complete."""
        return max((self.slot_stages[s] for s in after), default=0)


def schedule(lowered: LoweredProgram, late: bool = False, pinned: frozenset = frozenset()):
    """Places the blocks of a lowered program in layers. ``late``: each block as late as the
    same depth allows (:func:`place_late`), except the writers of the directions in
    ``pinned`` (those the run-time checks read at their stages); the slots keep their
    earliest stages either way."""
    stages = place(lowered.slots)
    at = [stages[p.slot] for p in lowered.blocks]
    if late:
        at = place_late([p.block for p in lowered.blocks], at, pinned)
    heads = [(s, p.block) for s, p in zip(at, lowered.blocks) if isinstance(p.block, Head)]
    units = [(s, p.block) for s, p in zip(at, lowered.blocks) if not isinstance(p.block, Head)]
    return Schedule(tuple(group(heads, units)), stages)


def place(slots: Sequence[Slot]) -> tuple[int, ...]:
    """The earliest stage of each slot: the first sublayer of its kind after its inputs."""
    stages: list[int] = []
    for slot in slots:
        ready = max((stages[s] for s in slot.after), default=0)
        stages.append(attn_stage(ready) if slot.kind == "attn" else mlp_stage(ready))
    return tuple(stages)


def place_late(blocks: Sequence, early: Sequence[int], pinned: frozenset = frozenset()):
    """The latest stage of each block that keeps the depth of ``early`` (the earliest
    stages): the last sublayer of its kind before the first block that reads what it
    writes. A block that nothing reads later, or that writes a ``pinned`` direction, stays
    where it is (outputs and checked values are read there).

    Sparse storage keeps a direction from its write to its last read, so computing a value
    just before it is needed (a parameter row of the last layer of a stack, say) keeps it
    out of memory for the layers before.

    >>> a = ReluUnit("a", (("x", 1.0),), (("y", 1.0),))
    >>> b = ReluUnit("b", (("x", 1.0),), (("z", 1.0),))
    >>> c = ReluUnit("c", (("z", 1.0),), (("w", 1.0),))
    >>> d = ReluUnit("d", (("w", 1.0), ("y", 1.0)), (("out", 1.0),))
    >>> place_late([a, b, c, d], [2, 2, 4, 6])  # a moves next to its reader d
    (4, 2, 4, 6)
    """
    writes = [_writes(b) for b in blocks]
    readers: dict[str, list[int]] = {}
    for i, b in enumerate(blocks):
        for d in _reads(b):
            readers.setdefault(d, []).append(i)
    late = list(early)
    for i in sorted(range(len(blocks)), key=lambda i: -early[i]):  # readers first
        if writes[i] & pinned:
            continue
        after = [j for d in writes[i] for j in readers.get(d, ()) if early[j] > early[i]]
        if not after:
            continue
        stage = min(late[j] for j in after) - 1  # complete before the first reader
        if (stage % 2 == 1) != isinstance(blocks[i], Head):
            stage -= 1
        late[i] = max(early[i], stage)
    return tuple(late)


def _reads(b) -> set[str]:
    if isinstance(b, Head):
        return {d for q, k, _ in b.qk for d in (q, k)} | {s for s, _, _ in b.ov}
    forms = (b.a, b.b) if isinstance(b, BilinearUnit) else (b.inputs, getattr(b, "gate", ()))
    return {d for f in forms for d, _ in f}


def _writes(b) -> set[str]:
    if isinstance(b, Head):
        return {d for _, d, _ in b.ov}
    return {d for d, _ in b.outputs}


def group(heads: list[tuple[int, Head]], units: list[tuple[int, object]]) -> list[Layer]:
    """Groups blocks by stage into layers (layer l = stages 2l-1 and 2l)."""
    last = max([s for s, _ in heads] + [s for s, _ in units] + [0])
    n_layers = (last + 1) // 2
    layers = [Layer() for _ in range(n_layers)]
    merged: list[dict[tuple, Head]] = [dict() for _ in range(n_layers)]
    for stage, head in heads:
        assert stage % 2 == 1, (stage, head.name)
        key = (tuple(sorted(head.qk)), head.mode, head.max_score)
        slot = merged[(stage - 1) // 2]
        if key in slot:
            old = slot[key]
            slot[key] = Head(
                f"{old.name}+{head.name}",
                old.qk,
                old.ov + head.ov,
                old.mode,
                old.max_score,
                old.pattern,  # one score, one pattern
            )
        else:
            slot[key] = head
    for i, slot in enumerate(merged):
        layers[i].heads = list(slot.values())
    for stage, unit in units:
        assert stage % 2 == 0 and stage > 0, (stage, unit)
        layer = layers[stage // 2 - 1]
        if isinstance(unit, ReluUnit):
            layer.relu.append(unit)
        elif isinstance(unit, BilinearUnit):
            layer.bilinear.append(unit)
        elif isinstance(unit, NativeUnit):
            layer.native.append(unit)
        else:
            raise TypeError(f"unknown unit {unit!r}")
    return layers
