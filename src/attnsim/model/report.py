"""What a compiled model is made of: its sizes (:class:`Resources`, :class:`Report`) and the
ground-truth table of which part computes which RASP expression (:class:`Component`).

Plain data (strings, ints, lists): the model package knows no RASP, and a report saved in a
checkpoint's JSON loads back with ``Report(**d)``. Re-exported by
:mod:`attnsim.model.compiled`.

>>> c = Component("attn", 1, "head", 0, 1, ("reverse",), hook="blocks.1.attn.hook_z")
>>> c.name, Component.from_dict(c.to_dict()) == c
('L1H0', True)
>>> ComponentTable([c]).heads("reverse")[0].hook
'blocks.1.attn.hook_z'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["Component", "ComponentTable", "Report", "Resources"]


@dataclass(frozen=True)
class Component:
    """One row of the ground-truth table: a part of the model and the RASP operations it computes.

    Plain data (strings and ints): the model package knows no RASP.

    Attributes:
        site: "embed" (token and positional embedding), "attn" (one head), "mlp" (a range of
            units of one kind) or "output" (the readout of the final residual stream).
        layer: the block index (``blocks.{layer}``), -1 for the embedding and the output.
        kind: "tokens" or "static" (embed), "head" (attn), "relu", "bilinear" or a native
            kind such as "exp" (mlp), "readout" (output).
        start: the first head or unit index (within its kind) of the range.
        stop: one past the last.
        labels: the labels of the RASP expressions this component computes.
        ops: one line per expression: what it is (``Aggregate 'sort'``, ``Select(keys=...)``).
        reads: ``(side, directions)`` pairs: "query", "key", "value" for a head, "input"
            for units, "output" for the readout.
        writes: the residual directions it writes.
        hook: the cache/TransformerLens hook whose slice ``[start:stop]`` on the head or unit
            axis holds this component's activation.
    """

    site: str
    layer: int
    kind: str
    start: int
    stop: int
    labels: tuple[str, ...]
    ops: tuple[str, ...] = ()
    reads: tuple[tuple[str, tuple[str, ...]], ...] = ()
    writes: tuple[str, ...] = ()
    hook: str = ""

    @property
    def name(self) -> str:
        """A short name: ``embed``, ``L1H0``, ``L0 MLP relu 3-7``, ``output``."""
        if self.site == "attn":
            return f"L{self.layer}H{self.start}"
        if self.site == "mlp":
            span = (
                f"{self.start}" if self.stop == self.start + 1 else f"{self.start}-{self.stop - 1}"
            )
            return f"L{self.layer} MLP {self.kind} {span}"
        return self.site

    def to_dict(self) -> dict:
        """JSON-ready: tuples become lists."""
        return {
            "site": self.site,
            "layer": self.layer,
            "kind": self.kind,
            "start": self.start,
            "stop": self.stop,
            "labels": list(self.labels),
            "ops": list(self.ops),
            "reads": [[side, list(dirs)] for side, dirs in self.reads],
            "writes": list(self.writes),
            "hook": self.hook,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Component:
        """The inverse of :meth:`to_dict`."""
        return cls(
            site=d["site"],
            layer=int(d["layer"]),
            kind=d["kind"],
            start=int(d["start"]),
            stop=int(d["stop"]),
            labels=tuple(d["labels"]),
            ops=tuple(d.get("ops", ())),
            reads=tuple((side, tuple(dirs)) for side, dirs in d.get("reads", ())),
            writes=tuple(d.get("writes", ())),
            hook=d.get("hook", ""),
        )


class ComponentTable(tuple):
    """The rows of :meth:`CompiledModel.components` (a tuple of :class:`Component`), with
    look-ups by label and by place, printed as a table."""

    def for_label(self, label: str) -> tuple[Component, ...]:
        """The components that compute the expression ``label``."""
        return tuple(c for c in self if label in c.labels)

    def heads(self, label: str | None = None) -> tuple[Component, ...]:
        """The attention heads (that compute ``label``, if given)."""
        return tuple(c for c in self if c.site == "attn" and (label is None or label in c.labels))

    def at(self, site: str, layer: int, index: int, kind: str | None = None) -> Component:
        """The row holding head or unit ``index`` of ``layer`` (a KeyError if none does)."""
        for c in self:
            if (
                c.site == site
                and c.layer == layer
                and c.start <= index < c.stop
                and (kind is None or c.kind == kind)
            ):
                return c
        raise KeyError(f"no {site} component {index} in layer {layer}")

    def labels(self) -> set[str]:
        """Every label that some component computes."""
        return {label for c in self for label in c.labels}

    def to_list(self) -> list[dict]:
        return [c.to_dict() for c in self]

    def __str__(self) -> str:
        rows = [("component", "hook", "computes", "reads -> writes")]
        for c in self:
            reads = "; ".join(f"{side}: {_few(dirs)}" for side, dirs in c.reads)
            ops = " | ".join(c.ops) if c.ops else ", ".join(c.labels)
            ops = ops if len(ops) <= 100 else ops[:97] + "..."
            rows.append((c.name, c.hook, ops, f"{reads} -> {_few(c.writes)}"))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        return "\n".join(
            "  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows
        ).rstrip()


def _few(dirs: Sequence[str], n: int = 4) -> str:
    shown = ", ".join(dirs[:n])
    return shown + (f", ... ({len(dirs)} in all)" if len(dirs) > n else "")


@dataclass
class Resources:
    """A compiled transformer's sizes: depth, heads, widths and parameters."""

    layers: int
    attention_layers: int
    heads_per_layer: list[int]
    d_model: int
    d_head: int
    d_mlp: int
    d_bilinear: int
    d_native: dict[str, int]
    parameters: int
    nonzero_parameters: int

    def resources(self) -> dict:
        """Just the fields of :class:`Resources`, by name.

        >>> r = Resources(1, 1, [1], 4, 1, 0, 0, {}, 10, 3)
        >>> r.resources()["nonzero_parameters"]
        3
        """
        return {f.name: getattr(self, f.name) for f in fields(Resources)}


@dataclass
class Report(Resources):
    """What a compiled model is made of (printed as a table)."""

    name: str = ""
    compile_seconds: float = 0.0
    attention: str = "hard"
    realisations: list[dict] = field(default_factory=list)
    # the ground-truth table (Component.to_dict rows); None in checkpoints written before it
    components: list[dict] | None = None
    # the weights' dtype and why the compiler chose it ("" in checkpoints written before)
    dtype: str = ""
    dtype_reason: str = ""

    @property
    def precision(self) -> str:
        """The dtype and the reason in one line: ``"float32: every value is ..."``.

        >>> Report(1, 1, [1], 4, 1, 0, 0, {}, 10, 3, dtype="float64",
        ...        dtype_reason="softmax attention").precision
        'float64: softmax attention'
        """
        if not self.dtype:
            return ""
        return f"{self.dtype}: {self.dtype_reason}" if self.dtype_reason else self.dtype

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def __str__(self) -> str:
        lines = [
            f"model {self.name}: {self.layers} layers ({self.attention_layers} with attention), "
            f"attention={self.attention}",
            f"  heads per layer: {self.heads_per_layer}",
            *([f"  dtype: {self.precision}"] if self.dtype else []),
            f"  d_model={self.d_model} d_head={self.d_head} d_mlp={self.d_mlp} "
            f"d_bilinear={self.d_bilinear} native={self.d_native}",
            f"  parameters={self.parameters} (nonzero {self.nonzero_parameters}), "
            f"compiled in {self.compile_seconds:.3f} s",
        ]
        if self.realisations:
            lines.append("  maps:")
            for r in self.realisations:
                note = f" ({r['note']})" if r.get("note") else ""
                lines.append(
                    f"    {r['label']}: {r['how']}, {r['level']}, {r['units']} units{note}"
                )
        if self.components:
            lines.append("  components (which part computes which RASP expression):")
            table = ComponentTable(Component.from_dict(c) for c in self.components)
            lines.extend("    " + line for line in str(table).splitlines())
        return "\n".join(lines)
