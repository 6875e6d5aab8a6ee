"""Attention heads and MLP units as sparse maps between named directions, runnable in numpy.

A linear form is a tuple of ``(direction, coefficient)`` pairs. Every block reads and writes
named directions only; assembly turns them into dense weight matrices.

Conventions that keep the BOS position (position 0) clean: constants enter linear forms
through the ``notbos`` direction (1 everywhere except at BOS), so every MLP unit reads 0 at
BOS and writes 0 there.

A *stream* is the residual stream of one input as a mapping ``direction -> [pos]`` array
(position 0 is BOS; a direction that is absent reads 0). Each block's ``apply`` takes a stream
and returns what the block adds to it (``direction -> [pos]``), so a construction can be
checked in numpy against the function it realises, without building a model.

Glossary: pos = positions including BOS (``n``), a head's scores are ``[query, key]``.

>>> import numpy as np
>>> s = {BOS: np.array([1.0, 0, 0]), NOTBOS: np.array([0.0, 1, 1]), "x": np.array([0.0, 2, -3])}
>>> ReluUnit("relu", (("x", 1.0),), (("y", 1.0),)).apply(s)["y"].tolist()
[0.0, 2.0, 0.0]
>>> h = Head("mean", qk=((NOTBOS, NOTBOS, 1.0), (BOS, BOS, 1.0)), ov=(("x", "out", 1.0),))
>>> h.apply(s)["out"].tolist()  # BOS reads itself, the others the mean over positions 1, 2
[0.0, -0.5, -0.5]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

LinearForm = tuple[tuple[str, float], ...]
Stream = Mapping[str, np.ndarray]  # direction -> [pos]

BOS, NOTBOS = "bos", "notbos"  # 1 at position 0 only / 1 everywhere but position 0
HARD_TOLERANCE = 0.25  # a hard head averages the keys within this of the best score


def linear_form(mapping: Mapping[str, float]) -> LinearForm:
    """A canonical (sorted, zero-free) linear form from a dict.

    >>> linear_form({"b": 2, "a": 0.5, "c": 0})
    (('a', 0.5), ('b', 2.0))
    """
    return tuple(sorted((k, float(v)) for k, v in mapping.items() if v != 0.0))


def read(stream: Stream, form: LinearForm | Mapping[str, float]) -> np.ndarray:
    """The value of a linear form at every position, ``[pos]`` (absent directions read 0)."""
    pairs = form.items() if isinstance(form, Mapping) else form
    out = np.zeros(_length(stream))
    for d, c in pairs:
        if d in stream:
            out = out + c * np.asarray(stream[d], dtype=np.float64)
    return out


def write(form: LinearForm, h: np.ndarray) -> dict[str, np.ndarray]:
    """``h`` (``[pos]``) written along the output form: ``direction -> c * h``."""
    out: dict[str, np.ndarray] = {}
    for d, c in form:
        out[d] = out.get(d, 0.0) + c * h
    return out


def added(stream: Stream, delta: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A new stream: ``stream`` plus ``delta`` (neither is changed)."""
    out = {d: np.asarray(v, dtype=np.float64) for d, v in stream.items()}
    n = _length(stream)
    for d, v in delta.items():
        out[d] = out.get(d, np.zeros(n)) + v
    return out


def _length(stream: Stream) -> int:
    for v in stream.values():
        return len(v)
    raise ValueError("an empty stream has no positions; give at least the bos direction")


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
    # the keys it selects whatever the input, where the compiler knows them (a static
    # selector, see attnsim.model.patterns); not part of what the head computes
    pattern: object | None = field(default=None, compare=False, repr=False)

    def scores(self, stream: Stream, causal: bool = False) -> np.ndarray:
        """The score of every (query, key) pair, ``[pos, pos]`` (future keys -inf if causal)."""
        n = _length(stream)
        s = np.zeros((n, n))
        zero = np.zeros(n)
        for q, k, w in self.qk:
            s += w * np.outer(stream.get(q, zero), stream.get(k, zero))
        if causal:
            s[np.triu_indices(n, 1)] = -math.inf
        return s

    def apply(
        self, stream: Stream, causal: bool = False, tolerance: float = HARD_TOLERANCE
    ) -> dict[str, np.ndarray]:
        """Average-hard attention: each query averages the keys within ``tolerance`` of its
        best score, moved by the value/output map."""
        s = self.scores(stream, causal)  # [query, key]
        # the rule of attnsim.model.hard.hard_selection, in numpy: this layer sits below the
        # model and imports no torch (tests/test_hard_rule.py checks that the two agree)
        chosen = s >= s.max(axis=1, keepdims=True) - tolerance
        pattern = chosen / chosen.sum(axis=1, keepdims=True)  # [query, key]
        n = len(s)
        out: dict[str, np.ndarray] = {}
        for src, dst, w in self.ov:
            out[dst] = out.get(dst, 0.0) + w * (pattern @ stream.get(src, np.zeros(n)))
        return out


@dataclass(frozen=True)
class ReluUnit:
    """``relu(<in, x>)`` written to ``out`` (a linear form over destinations)."""

    name: str
    inputs: LinearForm
    outputs: LinearForm

    def apply(self, stream: Stream) -> dict[str, np.ndarray]:
        return write(self.outputs, np.maximum(read(stream, self.inputs), 0.0))


@dataclass(frozen=True)
class BilinearUnit:
    """``<a, x> * <b, x>`` written to ``out``: an exact product of two real numbers."""

    name: str
    a: LinearForm
    b: LinearForm
    outputs: LinearForm

    def apply(self, stream: Stream) -> dict[str, np.ndarray]:
        return write(self.outputs, read(stream, self.a) * read(stream, self.b))


def _gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


NATIVE_FUNCTIONS = {  # the declared elementwise functions, in numpy
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "reciprocal": lambda x: 1.0 / x,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "gelu": _gelu,
    "gelu_tanh": lambda x: (
        0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    ),
}


@dataclass(frozen=True)
class NativeUnit:
    """``f(<in, x>) * <gate, x>`` for a declared elementwise function f (exp, log, ...)."""

    name: str
    kind: str
    inputs: LinearForm
    gate: LinearForm
    outputs: LinearForm

    def apply(self, stream: Stream) -> dict[str, np.ndarray]:
        """The unit's output; 0 where the gate is 0 (at BOS, where f may be undefined)."""
        gate = read(stream, self.gate)
        with np.errstate(all="ignore"):
            f = NATIVE_FUNCTIONS[self.kind](read(stream, self.inputs)) * gate
        return write(self.outputs, np.where(gate != 0.0, f, 0.0))


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

    def apply(self, stream: Stream, causal: bool = False) -> dict[str, np.ndarray]:
        """The residual stream after this block: ``x + attn(x)``, then ``+ mlp(...)``."""
        delta: dict[str, np.ndarray] = {}
        for h in self.heads:
            for d, v in h.apply(stream, causal).items():
                delta[d] = delta.get(d, 0.0) + v
        mid = added(stream, delta)
        delta = {}
        for u in [*self.relu, *self.bilinear, *self.native]:
            for d, v in u.apply(mid).items():
                delta[d] = delta.get(d, 0.0) + v
        return added(mid, delta)
