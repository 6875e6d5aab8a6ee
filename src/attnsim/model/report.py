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

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["Component", "ComponentTable", "Report", "Resources"]

WIDTH = 80  # the columns a printed report or table fits in


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

    def __repr__(self) -> str:
        """A short form: name, labels and hook (``str(ComponentTable([c]))`` shows all).

        >>> Component("attn", 1, "head", 0, 1, ("reverse",), hook="blocks.1.attn.hook_z")
        Component(L1H0 computes 'reverse', hook blocks.1.attn.hook_z)
        """
        labels = ", ".join(repr(lb) for lb in self.labels[:3])
        if len(self.labels) > 3:
            labels += f", ... ({len(self.labels)} labels)"
        hook = f", hook {self.hook}" if self.hook else ""
        return f"Component({self.name} computes {labels or 'nothing'}{hook})"

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
        return self.format()

    def format(self, width: int = 80) -> str:
        """The table as text no wider than ``width`` columns: per component a line with its
        name and hook, then what it computes, reads and writes, each wrapped and indented.

        >>> c = Component("attn", 1, "head", 0, 1, ("rev",), ops=("Aggregate 'rev'",),
        ...               reads=(("query", ("indices:0",)),), writes=("rev:a",),
        ...               hook="blocks.1.attn.hook_z")
        >>> print(ComponentTable([c]).format())
        L1H0  blocks.1.attn.hook_z
          computes: Aggregate 'rev'
          reads:    query: indices:0
          writes:   rev:a
        """
        lines: list[str] = []
        for c in self:
            lines.append(f"{c.name}  {c.hook}".rstrip())
            ops = " | ".join(c.ops) if c.ops else ", ".join(c.labels)
            ops = ops if len(ops) <= 300 else ops[:297] + "..."
            parts = [("computes:", ops)]
            parts += [
                ("reads:" if i == 0 else "", f"{side}: {_few(dirs)}")
                for i, (side, dirs) in enumerate(c.reads)
            ]  # one line per side
            parts.append(("writes:", _few(c.writes)))
            for name, text in parts:
                if text:
                    lines.extend(_wrap(text, width, f"  {name:<10}", " " * 12))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"ComponentTable({', '.join(c.name for c in self)})" if self else "ComponentTable()"


def _wrap(text: str, width: int, first: str, rest: str) -> list[str]:
    """``text`` wrapped to ``width`` columns, the first line after ``first``, the others
    after ``rest`` (a word longer than a line is broken)."""
    return textwrap.wrap(
        text, width=width, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False
    ) or [first.rstrip()]


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
        out: list[str] = []
        for line in lines:  # each wrapped to 80 columns, continued 4 deeper
            lead = line[: len(line) - len(line.lstrip())]
            out.extend(_wrap(line.strip(), WIDTH, lead, lead + "    "))
        if self.components:
            out.append("  components (which part computes which RASP expression):")
            table = ComponentTable(Component.from_dict(c) for c in self.components)
            out.extend("    " + line for line in table.format(WIDTH - 4).splitlines())
        return "\n".join(out)
