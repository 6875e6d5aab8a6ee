"""Attention heads and MLP units as sparse maps between named directions.

A linear form is a tuple of ``(direction, coefficient)`` pairs. Every block reads and writes
named directions only; assembly turns them into dense weight matrices.

Conventions that keep the BOS position (position 0) clean: constants enter linear forms
through the ``notbos`` direction (1 everywhere except at BOS), so every MLP unit reads 0 at
BOS and writes 0 there.

>>> h = Head("h", qk=(("q", "k", 1.0),), ov=(("v", "out", 1.0),), mode="mean")
>>> h.mode
'mean'
"""

from __future__ import annotations

from dataclasses import dataclass, field

LinearForm = tuple[tuple[str, float], ...]


def linear_form(mapping: dict[str, float]) -> LinearForm:
    """A canonical (sorted, zero-free) linear form from a dict."""
    return tuple(sorted((k, float(v)) for k, v in mapping.items() if v != 0.0))


@dataclass(frozen=True)
class Head:
    """One attention head.

    Attributes:
        name: for reports and hook names.
        qk: ``(query direction, key direction, weight)`` triples of the bilinear score.
        ov: ``(source direction, destination direction, weight)`` triples.
        mode: "mean" (average over the best keys; BOS only when nothing is selected) or
            "width" (BOS always attended; used for selector widths).
        max_score: the score of a selected key (BOS scores max_score - 0.5 in "mean" mode).
    """

    name: str
    qk: tuple[tuple[str, str, float], ...]
    ov: tuple[tuple[str, str, float], ...]
    mode: str = "mean"
    max_score: float = 1.0


@dataclass(frozen=True)
class ReluUnit:
    """``relu(<in, x>)`` written to ``out`` (a linear form over destinations)."""

    name: str
    inputs: LinearForm
    outputs: LinearForm


@dataclass(frozen=True)
class BilinearUnit:
    """``<a, x> * <b, x>`` written to ``out``: an exact product of two real numbers."""

    name: str
    a: LinearForm
    b: LinearForm
    outputs: LinearForm


@dataclass(frozen=True)
class NativeUnit:
    """``f(<in, x>) * <gate, x>`` for a declared elementwise function f (exp, log, ...)."""

    name: str
    kind: str
    inputs: LinearForm
    gate: LinearForm
    outputs: LinearForm


@dataclass
class Layer:
    """One transformer block: attention heads, then MLP units."""

    heads: list[Head] = field(default_factory=list)
    relu: list[ReluUnit] = field(default_factory=list)
    bilinear: list[BilinearUnit] = field(default_factory=list)
    native: list[NativeUnit] = field(default_factory=list)

    @property
    def mlp_size(self) -> int:
        return len(self.relu) + len(self.bilinear) + len(self.native)
