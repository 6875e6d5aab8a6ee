"""The state of one lowering: names, residual directions, slots, blocks, and the memo of reps.

Every construction module (maps, selectors, aggregates, forms) is a set of functions taking a
``Context`` first. The context knows no construction: ``Context.rep`` calls the dispatch
function it was made with (``lowering.lower_sop``), which keeps the modules free of cycles.
Once every S-op is lowered, ``Context.freeze`` returns the ``LoweredProgram``.

A block's place is a slot (see ``program``): ``ctx.mlp_stage(after)`` is the first MLP after
``after``, as an ``After`` of that one slot, to attach blocks to with ``ctx.emit`` and to
give as the ``after`` of what they write.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from attnsim.compiler.lowering.columns import abs_max
from attnsim.compiler.lowering.program import (
    After,
    Block,
    Float32Need,
    LoweredProgram,
    PlacedBlock,
    PlannedGuard,
    Realisation,
    Rep,
    Slot,
)
from attnsim.compiler.options import CompileOptions
from attnsim.compiler.value_inference import UnhashableResultError, ValueInference, call_function
from attnsim.ir.basis import Basis
from attnsim.ir.blocks import BOS, NOTBOS, Head
from attnsim.model.compiled import GuardSpec
from attnsim.rasp import expr as E

MAX_LOOKUP = 50_000  # hidden units one lookup table may use

FAILED = object()  # what a function gives on a value it raises on


class Context:
    """One program's lowering in progress (memoised: each S-op is lowered once)."""

    def __init__(
        self,
        vi: ValueInference,
        labels: dict[int, str],
        options: CompileOptions,
        lower: Callable[[Context, E.SOp], Rep],
    ) -> None:
        self.vi = vi
        self.L = vi.L
        self.options = options
        self.map_ranges = dict(options.map_ranges or {})
        self.labels = dict(labels)
        self.used_labels = set(labels.values())
        self._lower = lower
        self.basis = Basis([BOS, NOTBOS])
        self.static_embed: dict[str, np.ndarray] = {}  # direction -> value per position
        self.token_dims: dict[str, Any] = {}  # direction -> vocabulary value (one-hot tokens)
        self.token_num_dir: str | None = None
        self.token_channel_dirs: dict[int, str] = {}  # vector tokens: channel -> direction
        self.slots: list[Slot] = []
        self._slot_ids: dict[Slot, int] = {}
        self.blocks: list[PlacedBlock] = []
        self.reps: dict[int, Rep] = {}
        self.categorical: dict[int, Rep] = {}  # uid -> one-hot block made from a number
        self.scores: dict[int, tuple[tuple, float, After]] = {}
        self.guards: list[PlannedGuard] = []
        self.realisations: list[Realisation] = []
        self.squares: dict[tuple, tuple[str, After]] = {}
        self.gains: dict[int, float] = {}  # SelectMax selector uid -> the gain G of its base
        self.roundings: dict[int, float] = {}  # selector uid -> a bound on its scores' rounding
        self.float32_needs: list[Float32Need] = []
        self.numeric_reads: set[int] = set()  # S-ops read as numbers
        self.bounds: dict[str, float] = {}  # direction -> a bound on |its value| (internal ones)
        self.patterns: dict[
            int, Any
        ] = {}  # static selector uid -> its model.patterns.StaticPattern
        self.static_sides: dict[int, Any] = {}  # uid -> compare.Side of a static equality side
        self.static_arrays: dict[int, np.ndarray] = {}  # uid -> a static side's values [L]
        self.key_indexes: dict[int, Any] = {}  # uid -> model.patterns.KeyIndex of a static key
        self._known_bounds: dict[str, float] = {}  # dir_bound's answers that stay
        self._sop_bounds: dict[int, float] = {}  # form_bound's finite answers, by S-op
        # direction -> the first representation holding it (what dir_bound reads), kept as
        # representations are made: ("cat",) or ("num", uid, coefficient)
        self._rep_dirs: dict[str, tuple] = {}
        self._cat_dirs: dict[str, tuple] = {}
        self._cat_dirs_seen: set[int] = set()
        self.exprs: dict[int, E.SOp] = {}  # uid -> S-op, for every one lowered
        self._n_units = 0

    # -- naming ------------------------------------------------------------------------------
    def label(self, e: E.RASPExpr) -> str:
        """The expression's unique label (made unique once, for expressions lowering adds)."""
        got = self.labels.get(e.uid)
        if got is None:
            base = e.label
            got = base if base not in self.used_labels else f"{base}#{e.uid}"
            self.used_labels.add(got)
            self.labels[e.uid] = got
        return got

    def fresh(self, base: str) -> str:
        """A label not used yet: ``base``, else ``base_2``, ``base_3``, ..."""
        i = 1
        name = base
        while name in self.used_labels:
            i += 1
            name = f"{base}_{i}"
        self.used_labels.add(name)
        return name

    def new_dir(self, label: str) -> str:
        """Adds a residual direction (if new) and returns its label."""
        self.basis.add(label)
        return label

    # -- placement ---------------------------------------------------------------------------
    def _slot(self, kind: str, after: After) -> After:
        key = Slot(kind, frozenset(after))
        i = self._slot_ids.get(key)
        if i is None:
            i = self._slot_ids[key] = len(self.slots)
            self.slots.append(key)
        return frozenset((i,))

    def attn_stage(self, after: After) -> After:
        """The first attention sublayer after ``after``."""
        return self._slot("attn", after)

    def mlp_stage(self, after: After) -> After:
        """The first MLP after ``after``."""
        return self._slot("mlp", after)

    def emit(self, stage: After, block: Block) -> None:
        """Attaches a block to ``stage`` (from attn_stage or mlp_stage); units get a numbered
        name (``"base/k"``), heads keep theirs."""
        (slot,) = stage
        if not isinstance(block, Head):
            self._n_units += 1
            block = dataclasses.replace(block, name=f"{block.name}/{self._n_units}")
        self.blocks.append(PlacedBlock(slot, block))

    def emit_all(self, stage: After, blocks: Iterable[Block]) -> int:
        """Attaches every block to ``stage``; returns how many."""
        n = 0
        for b in blocks:
            self.emit(stage, b)
            n += 1
        return n

    def guard(self, after: After, label: str, form: tuple, **kw: Any) -> None:
        """A run-time check on a linear form, read once ``after`` is complete."""
        self.guards.append(PlannedGuard(GuardSpec(label, form, 0, **kw), frozenset(after)))

    def realised(self, label: str, how: str, level: str, units: int, **kw: Any) -> None:
        self.realisations.append(Realisation(label, how, level, units, **kw))

    def needs(self, label: str, what: str, gap: float, **kw: Any) -> None:
        """Records a separation a construction relies on (see ``Float32Need``)."""
        self.float32_needs.append(Float32Need(label, what, gap, **kw))

    # -- sizes, for choosing the dtype -------------------------------------------------------
    def dir_bound(self, d: str) -> float:
        """A bound on ``|value|`` of direction ``d`` at every real position (inf: unknown)."""
        got = self.bounds.get(d)
        if got is not None:
            return got
        got = self._known_bounds.get(d)
        if got is None:
            got, final = self._dir_bound(d)
            if final:  # a direction without an owner yet may get one (a later block)
                self._known_bounds[d] = got
        return got

    def _dir_bound(self, d: str) -> tuple[float, bool]:
        """``(bound, final)``: final unless ``d`` has no owner yet."""
        if d in self.static_embed:
            return abs_max(self.static_embed[d]), True
        if d in (BOS, NOTBOS) or d in self.token_dims:
            return 1.0, True
        self._index_categorical()
        owner = self._rep_dirs.get(d) or self._cat_dirs.get(d)
        if owner is None:
            return math.inf, False
        if owner[0] == "cat":
            return 1.0, True
        _, uid, coef = owner
        e = self.exprs.get(uid)
        vals = None if e is None else self.vi.values(e)
        if vals is None:
            return math.inf, e is not None
        big = max((abs(float(v)) for v in vals if v is not None), default=0.0)
        return big / abs(coef), True

    @staticmethod
    def _index(index: dict[str, tuple], uid: int, r: Rep) -> None:
        """Notes the directions of one representation (the first one holding a direction
        keeps it)."""
        if r.kind == "cat":
            for dim in r.dims:
                index.setdefault(dim, ("cat",))
        elif r.kind == "num" and len(r.form) == 1:
            ((dim, coef),) = r.form.items()
            index.setdefault(dim, ("num", uid, coef))

    def _index_categorical(self) -> None:
        if len(self._cat_dirs_seen) != len(self.categorical):
            for uid, r in self.categorical.items():
                if uid not in self._cat_dirs_seen:
                    self._cat_dirs_seen.add(uid)
                    self._index(self._cat_dirs, uid, r)

    def form_bound(self, form: Mapping[str, float], of: E.SOp | None = None) -> float:
        """A bound on ``|sum c * d|`` over ``form``, term by term; ``of``: the S-op whose
        form it is, to keep a finite bound for it (a lowered S-op's form does not change,
        and a finite bound of a direction is final: U gathers one 385-term form 2,000
        times)."""
        got = None if of is None else self._sop_bounds.get(of.uid)
        if got is None:
            got = sum(abs(c) * self.dir_bound(d) for d, c in form.items())
            if of is not None and math.isfinite(got):
                self._sop_bounds[of.uid] = got
        return got

    def check_exact_scores(self, label: str, terms: tuple, extra: tuple = ()) -> None:
        """Records a need for float64 unless float32 computes the scores exactly: every
        weight a multiple of ``2^-k`` and every partial sum a multiple of it below 2^22."""
        terms = tuple(terms) + tuple(extra)
        weights = [float(w) for _, _, w in terms]
        for k in range(17):
            if all((w * 2.0**k).is_integer() for w in weights):
                size = sum(abs(w) * self.dir_bound(q) * self.dir_bound(kd) for q, kd, w in terms)
                if size * 2.0**k <= 2.0**22:
                    return
                break
        self.needs(label, "attention scores that float32 does not compute exactly", 0.0)

    # -- representations ---------------------------------------------------------------------
    def rep(self, e: E.SOp) -> Rep:
        """The S-op's representation, lowering it (and what it reads) on first use."""
        got = self.reps.get(e.uid)
        if got is None:
            self.exprs[e.uid] = e
            got = self.reps[e.uid] = self._lower(self, e)
            self._index(self._rep_dirs, e.uid, got)
        return got

    def freeze(self, output: E.SOp) -> LoweredProgram:
        """The finished lowering, with ``output`` as the program's representation."""
        return LoweredProgram(
            vocab=self.vi.vocab,
            max_seq_len=self.L,
            residual=self.basis.labels,
            slots=tuple(self.slots),
            blocks=tuple(self.blocks),
            static_embed=MappingProxyType(dict(self.static_embed)),
            token_dims=MappingProxyType(dict(self.token_dims)),
            numerical_token_dir=self.token_num_dir,
            token_channel_dirs=MappingProxyType(dict(sorted(self.token_channel_dirs.items()))),
            output=self.rep(output),
            reps=MappingProxyType(dict(self.reps)),
            categorical=MappingProxyType(dict(self.categorical)),
            guards=tuple(self.guards),
            realisations=tuple(self.realisations),
            labels=MappingProxyType(dict(self.labels)),
            float32_needs=tuple(self.float32_needs),
            numeric_reads=frozenset(self.numeric_reads),
        )


def union(afters: Iterable[After]) -> After:
    """Every slot of several ``After`` sets (the later of several values)."""
    return frozenset().union(*afters)


# -- calling the program's functions ---------------------------------------------------------


def apply_safely(f: Any, *args: Any) -> Any:
    """``f(*args)``; None where an argument is None, ``FAILED`` where f raises."""
    if any(a is None for a in args):
        return None
    try:
        return f(*args)
    except Exception:
        return FAILED


def call_safely(e: E.Map | E.SequenceMap, args: Sequence[Any]) -> Any:
    """The function of a map on input values as the interpreter calls it (``FAILED`` where
    it raises, None where an input is None)."""
    if any(a is None for a in args):
        return None
    try:
        return call_function(e, args)
    except UnhashableResultError:
        raise
    except Exception:
        return FAILED
