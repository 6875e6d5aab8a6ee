"""What lowering produces: the frozen ``LoweredProgram`` and the values it is made of.

Lowering places no block in a layer. Each block is attached to a *slot*: "the first
attention sublayer (or MLP) after the slots in ``after``". Scheduling turns slots into stages
(stage 0 is the embedding; layer l has its attention at stage 2l-1 and its MLP at 2l), so
where a value can be read is an ``After`` (the slots it needs) until then.

>>> r = Rep("cat", values=("a", "b"), dims=("x:'a'", "x:'b'"))
>>> r.dim_of()[value_key("b")], r.after
("x:'b'", frozenset())
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnsim.ir.blocks import BilinearUnit, Head, NativeUnit, ReluUnit
from attnsim.model.compiled import GuardSpec
from attnsim.values import value_key

After = frozenset  # of slot ids: a value is complete after these slots (empty: embedding)
Block = Head | ReluUnit | BilinearUnit | NativeUnit


class UnsupportedError(NotImplementedError):
    """Valid RASP this compiler cannot realise (collected, then raised once)."""


@dataclass(frozen=True)
class Slot:
    """The first sublayer of ``kind`` ("attn" or "mlp") after every slot in ``after``."""

    kind: str
    after: After


@dataclass(frozen=True)
class Rep:
    """Where an S-op lives in the residual stream.

    Attributes:
        kind: "cat" or "num".
        after: the slots after which it can be read (empty: from the embedding on).
        values: categorical values (in the order of ``dims``).
        dims: categorical direction labels, one per value.
        form: numerical linear form (direction -> coefficient).
        noise: a bound on the float rounding of each entry of a categorical code, in the
            order of ``dims`` (empty: every entry is exactly 0 or 1, as the embedding's and
            lookup tables' are; ReLU steps on a numerical input round with the size of its
            terms). A table that sums the code into a number proves its result against it.
    """

    kind: str
    after: After = frozenset()
    values: tuple = ()
    dims: tuple = ()
    form: Mapping[str, float] = field(default_factory=dict)
    noise: tuple[float, ...] = ()

    def noise_of(self) -> dict[str, float]:
        """``direction -> bound`` on the rounding of each entry of a categorical code."""
        return dict(zip(self.dims, self.noise)) if self.noise else {}

    def dim_of(self) -> dict[tuple, str]:
        """``value_key(value) -> direction`` of a categorical representation."""
        return {value_key(v): d for v, d in zip(self.values, self.dims)}


@dataclass(frozen=True)
class Realisation:
    """How one map (or aggregate) is realised: a line of the report."""

    label: str
    how: str
    level: str  # exact | native | bounded
    units: int
    note: str = ""
    bound: float | None = None  # bounded maps: the certified error bound on the range
    relative: bool = False  # whether ``bound`` is relative to |f|


@dataclass(frozen=True)
class Float32Need:
    """A separation a construction relies on, for choosing the dtype (``precision``).

    The construction tells apart quantities ``gap`` apart whose size is up to ``scale``;
    float32 keeps them apart when ``gap > 1e4 * eps32 * scale``. A construction that needs
    float64 outright records ``gap=0``; one that float32 computes exactly, ``scale=0``.

    Attributes:
        label: the expression built (as named in the report).
        what: the construction, in words (the reason given when it needs float64).
        gap: the smallest separation it relies on.
        scale: the size of the quantities separated (inf: unknown).
        form: the linear form read (steps on a number), if any.
        rounds: whether its output carries float32 rounding (one-hot entries ``1 +- tiny``
            instead of exact 0 and 1): what reads it must not need exact numbers.
        uid: the S-op whose value it computes (None: none of the program's).
    """

    label: str
    what: str
    gap: float
    scale: float = 0.0
    form: tuple[tuple[str, float], ...] = ()
    rounds: bool = False
    uid: int | None = None


@dataclass(frozen=True)
class PlannedGuard:
    """A run-time check whose stage is known once its slots are placed.

    ``spec.stage`` is a placeholder (0); guards.py sets it to the stage of ``after``.
    """

    spec: GuardSpec
    after: After


@dataclass(frozen=True)
class PlacedBlock:
    """A head or unit, attached to slot ``slot``."""

    slot: int
    block: Block


@dataclass(frozen=True)
class LoweredProgram:
    """A program as blocks over named residual directions, not yet placed in layers.

    Attributes:
        vocab: the token vocabulary (None: real-valued tokens).
        max_seq_len: the longest input.
        residual: the direction labels, in the residual stream's order (``[d_model]``).
        slots: the placement constraints; every slot's ``after`` names earlier slots only.
        blocks: heads and units in the order they were made (their order within a layer).
        static_embed: direction -> its value at positions 1..max_seq_len (``[max_seq_len]``).
        token_dims: direction -> the vocabulary value it is one-hot for.
        numerical_token_dir: the direction holding real-valued tokens, or None.
        token_channel_dirs: vector tokens: channel -> the direction holding it (empty for
            scalar tokens).
        output: the program's representation (what the model reads out).
        reps: uid -> representation of each S-op lowered.
        categorical: uid -> the one-hot block made for a numerical S-op (for a table).
        guards: run-time checks the constructions need (value sets and ranges).
        realisations: one line per realised map, for the report.
        labels: uid -> label, including those of expressions lowering made itself.
        float32_needs: the separations the constructions rely on (for ``dtype="auto"``).
        numeric_reads: uids of the S-ops some construction reads as a number.
    """

    vocab: tuple | None
    max_seq_len: int
    residual: tuple[str, ...]
    slots: tuple[Slot, ...]
    blocks: tuple[PlacedBlock, ...]
    static_embed: Mapping[str, np.ndarray]
    token_dims: Mapping[str, Any]
    numerical_token_dir: str | None
    token_channel_dirs: Mapping[int, str]
    output: Rep
    reps: Mapping[int, Rep]
    categorical: Mapping[int, Rep]
    guards: tuple[PlannedGuard, ...]
    realisations: tuple[Realisation, ...]
    labels: Mapping[int, str]
    float32_needs: tuple[Float32Need, ...] = ()
    numeric_reads: frozenset[int] = frozenset()

    def block_of(self, uid: int) -> Rep | None:
        """The one-hot block of an S-op (its own, or the one made from its number)."""
        r = self.reps.get(uid)
        if r is not None and r.kind == "cat":
            return r
        r = self.categorical.get(uid)
        return r if r is not None and r.kind == "cat" else None
