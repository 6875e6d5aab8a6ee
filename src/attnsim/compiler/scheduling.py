"""Stage 4, scheduling: blocks placed at stages become layers; equal heads are merged.

Stage 2l-1 is layer l's attention sublayer and stage 2l its MLP. Two heads with the same
scores (same query-key terms and mode) in one layer become one head whose value/output map
moves all their values: Aggregates that share a selector cost one head.

>>> from attnsim.ir.blocks import Head, ReluUnit
>>> h1 = Head("a", (("q", "k", 1.0),), (("x", "ax", 1.0),))
>>> h2 = Head("b", (("q", "k", 1.0),), (("y", "by", 1.0),))
>>> layers = schedule([(1, h1), (1, h2)], [(2, ReluUnit("u", (("ax", 1.0),), (("z", 1.0),)))])
>>> len(layers), len(layers[0].heads), layers[0].heads[0].name
(1, 1, 'a+b')
"""

from __future__ import annotations

from attnsim.ir.blocks import BilinearUnit, Head, Layer, NativeUnit, ReluUnit


def schedule(heads: list[tuple[int, Head]], units: list[tuple[int, object]]) -> list[Layer]:
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
                f"{old.name}+{head.name}", old.qk, old.ov + head.ov, old.mode, old.max_score
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
