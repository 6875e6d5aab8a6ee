"""The compiler's head patterns (:mod:`attnsim.model.patterns`) in a checkpoint: a table of
``model.json`` (``"head_patterns"``: per layer, per head, None or the pattern's kind, mode
and the tensors it reads) and tensors ``head_patterns.<i>`` in ``model.safetensors``, each
distinct array once (the heads of a program share their sides). An equality's query values
are stored as their default (``query_default``) and the entries that differ (``query_at``,
``query_at_values``); a checkpoint that stores them dense (``query_values``, written before)
loads too. The digest covers both; a checkpoint without them loads as before, its plans
reading the weights.

>>> import numpy as np
>>> from attnsim.model.patterns import StaticPattern
>>> p = StaticPattern.equality([-1.0, -1.0, -1.0, 0.0], [0.0, 1.0, 2.0, 3.0])
>>> table, tensors = to_checkpoint(((p, None),))
>>> entry = table[0][0]  # the tensors' numbers, and the query values' default itself
>>> entry["query_at"], entry["query_at_values"], entry["key_values"], entry["query_default"]
(0, 1, 2, -1.0)
>>> table[0][1] is None
True
>>> sorted(tensors)
['head_patterns.0', 'head_patterns.1', 'head_patterns.2']
>>> back = from_checkpoint(table, tensors, [2], 4, "model.json")
>>> back[0][0].query_values.tolist(), back[0][1]
([-1.0, -1.0, -1.0, 0.0], None)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attnsim.model.patterns import KeyIndex, StaticPattern

__all__ = ["PREFIX", "to_checkpoint", "from_checkpoint"]

PREFIX = "head_patterns."  # the tensors' names in model.safetensors
FIELDS = {
    "equality": ("query_at", "query_at_values", "key_values"),
    "table": ("offsets", "keys"),
}
DENSE_EQUALITY = ("query_values", "key_values")  # the form checkpoints had before


class PatternTableError(ValueError):
    """A head-pattern table or tensor that is not what :func:`to_checkpoint` wrote."""


def to_checkpoint(patterns: tuple) -> tuple[list | None, dict[str, torch.Tensor]]:
    """``(table, tensors)`` for a model's ``head_patterns`` (``(None, {})`` when it knows
    none)."""
    if not any(p is not None for layer in patterns for p in layer):
        return None, {}
    tensors: dict[str, torch.Tensor] = {}
    seen: dict[int, int] = {}

    def ref(arr: np.ndarray) -> int:
        if id(arr) not in seen:
            seen[id(arr)] = len(seen)
            tensors[f"{PREFIX}{seen[id(arr)]}"] = torch.from_numpy(np.array(arr))  # a copy
        return seen[id(arr)]

    table = []
    for layer in patterns:
        row: list[Any] = []
        for p in layer:
            if p is None:
                row.append(None)
                continue
            entry: dict[str, Any] = {"kind": p.kind, "mode": p.mode}
            if p.kind == "equality" and p.query_at is None:  # held dense: stored dense
                entry["query_values"] = ref(p.query_at_values)
                entry["key_values"] = ref(p.key_values)
                row.append(entry)
                continue
            if p.kind == "equality":
                entry["query_default"] = p.query_default
            for name in FIELDS[p.kind]:
                entry[name] = ref(getattr(p, name))
            row.append(entry)
        table.append(row)
    return table, tensors


def from_checkpoint(
    table: Any, tensors: dict[str, torch.Tensor], heads: list[int], length: int, where: str
) -> tuple:
    """The patterns of a checkpoint, each checked: ``heads``, the heads of each layer;
    ``length``, the positions L (``max_seq_len``); ``where``, the file for messages.

    Raises:
        PatternTableError: a table or tensor that is not what :func:`to_checkpoint` wrote
            (the message names it).
    """
    if table is None:
        if tensors:
            raise PatternTableError(f"{where}: head-pattern tensors without their table")
        return ()
    if not isinstance(table, list) or len(table) != len(heads):
        raise PatternTableError(f"{where}: 'head_patterns' is not a list of {len(heads)} layers")
    used: set[int] = set()
    indexes: dict[int, KeyIndex] = {}
    arrays: dict[int, np.ndarray] = {}
    out = []
    for li, (row, n_heads) in enumerate(zip(table, heads)):
        if not isinstance(row, list) or len(row) != n_heads:
            raise PatternTableError(
                f"{where}: 'head_patterns[{li}]' is not a list of the layer's {n_heads} heads"
            )
        layer = []
        for h, entry in enumerate(row):
            what = f"{where}: 'head_patterns[{li}][{h}]'"
            if entry is None:
                layer.append(None)
                continue
            kind = entry.get("kind") if isinstance(entry, dict) else None
            fields = FIELDS.get(kind, ())
            extra = {"query_default"} if kind == "equality" else set()
            if kind == "equality" and set(entry) == {"kind", "mode", *DENSE_EQUALITY}:
                fields, extra = DENSE_EQUALITY, set()
            if kind not in FIELDS or set(entry) != {"kind", "mode", *fields, *extra}:
                raise PatternTableError(f"{what} is not a head pattern")
            if entry["mode"] not in ("mean", "width"):
                raise PatternTableError(f"{what} has mode {entry['mode']!r}")
            default = entry.get("query_default", 0.0)
            if type(default) not in (int, float) or not np.isfinite(default):
                raise PatternTableError(f"{what} has query_default {default!r}")
            got = {}
            for name in fields:
                i = entry[name]
                if type(i) is not int or f"{PREFIX}{i}" not in tensors:
                    raise PatternTableError(f"{what} reads {name} from a tensor there is not")
                used.add(i)
                if i not in arrays:
                    arrays[i] = _array(tensors[f"{PREFIX}{i}"], name, length, what)
                got[name] = arrays[i]
            if kind == "equality":
                key = entry["key_values"]
                if key not in indexes:
                    indexes[key] = KeyIndex.of(got["key_values"])
                if "query_values" in got:  # the dense form
                    p = StaticPattern.equality(got["query_values"], got["key_values"], indexes[key])
                else:
                    at, vals = got["query_at"], got["query_at_values"]
                    try:
                        p = StaticPattern.sparse_equality(
                            default, at, vals, got["key_values"], indexes[key]
                        )
                    except ValueError as exc:
                        raise PatternTableError(f"{what}: {exc}") from None
            else:
                p = StaticPattern("table", offsets=got["offsets"], keys=got["keys"])
                _check_rows(p, length, what)
            layer.append(p.with_mode(entry["mode"]))
        out.append(tuple(layer))
    extra = sorted(set(tensors) - {f"{PREFIX}{i}" for i in used})
    if extra:
        raise PatternTableError(f"{where}: the tensor {extra[0]!r} belongs to no head pattern")
    return tuple(out)


def _array(t: torch.Tensor, name: str, length: int, what: str) -> np.ndarray:
    values = name.endswith("values")
    dtype = torch.float64 if values else torch.int64
    size = length + 1 if name == "offsets" else length
    free = name in ("keys", "query_at", "query_at_values")  # as long as they list
    if t.dtype != dtype or t.dim() != 1 or (not free and len(t) != size):
        shape = "[any length]" if free else f"[{size}]"
        raise PatternTableError(f"{what}: its {name} are not {dtype} {shape}")
    arr = t.numpy()
    if values and not bool(np.all(np.isfinite(arr) & (arr == np.floor(arr)))):
        raise PatternTableError(f"{what}: its {name} are not all integers")
    return arr


def _check_rows(p: StaticPattern, length: int, what: str) -> None:
    offsets, keys = p.offsets, p.keys
    if offsets[0] != 0 or offsets[-1] != len(keys) or bool(np.any(np.diff(offsets) < 0)):
        raise PatternTableError(f"{what}: its offsets do not index its keys")
    if len(keys) and (int(keys.min()) < 0 or int(keys.max()) >= length):
        raise PatternTableError(f"{what}: a key outside positions 0..{length - 1}")
    rows = np.repeat(np.arange(length), np.diff(offsets))
    if len(keys) > 1 and bool(np.any((np.diff(keys) <= 0) & (np.diff(rows) == 0))):
        raise PatternTableError(f"{what}: its keys are not ascending in each row")
