"""Numerical comparisons proved against float rounding before they become scores.

A selector's scores put a selected key at its maximum and every other key at least 1 below
(BOS half a unit below); hard attention keeps the keys within its tolerance
(``ModelConfig.hard_tolerance``, 0.25) of the best. Scores computed with an error of at most
``e`` keep that choice while ``2 e`` stays below the tolerance; a conjunction adds its
parts' errors, so one comparison may take ``BUDGET``, an eighth of the tolerance (four
comparisons in one conjunction still fit).

The bound: a score is a sum of ``T`` products ``w q k`` of residual features. Computed in
any order with unit roundoff ``u`` (``2^-53`` in float64, ``2^-24`` in float32), from inputs
that carry a few roundings each, its error is at most ``(4 T + 32) u S``, with ``S`` the sum
of ``|w q k|`` over the features' bounds. It is zero where every feature is exact in the
stream (numerical tokens, the positional embedding and their squares), every weight and
value a multiple of ``2^-J`` and ``S 2^J`` below ``2^(p-1)`` (``p`` mantissa bits): every
partial sum is then a float.

An equality ``1 - s (q - k)^2`` (``s = 1 / gap^2``) has ``S = s (|q| + |k|)^2 + 3``: at
magnitude ``M`` and gap ``g`` its rounding grows as ``u (M / g)^2``, and cancels the margin
once ``M / g`` passes about 1e6 in float64. There the compiler compares the values' ranks
instead (each side one-hot on its value set, by ReLU steps, and a table over the pairs:
``selectors._table_score``). Steps cannot tell apart values that differ only by float
rounding (``ir.discretise.close_groups``): where the predicate tells two such values apart,
the comparison is refused with the values named (:func:`check_collisions`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnsim.compiler.lowering.context import Context
from attnsim.compiler.lowering.program import UnsupportedError
from attnsim.compiler.options import AttentionMode
from attnsim.ir import discretise as D
from attnsim.ir.blocks import BOS, NOTBOS
from attnsim.model.config import ModelConfig
from attnsim.rasp import expr as E
from attnsim.values import is_number

TOLERANCE = ModelConfig.hard_tolerance  # hard attention: keys this close to the best count
BUDGET = TOLERANCE / 8  # the rounding one comparison's scores may carry


@dataclass(frozen=True)
class Proof:
    """What the compiler proved about one comparison's scores.

    Attributes:
        rounding: a bound on the float rounding of any of its scores (inf: unbounded).
        budget: the most rounding the selection tolerates.
        dtype: the dtype the bound is for (``"float64"`` or ``"float32"``).
    """

    rounding: float
    budget: float
    dtype: str

    @property
    def holds(self) -> bool:
        """Whether the scores select exactly the keys the predicate selects."""
        return self.rounding < self.budget

    def text(self) -> str:
        """The proof in words, for the report.

        >>> Proof(0.0, BUDGET, "float64").text()
        'float64 computes its scores exactly'
        >>> Proof(2.5e-9, BUDGET, "float64").text()
        'its scores round by at most 2.5e-09 in float64, below 0.03125'
        """
        if self.rounding == 0.0:
            return f"{self.dtype} computes its scores exactly"
        rel = "below" if self.holds else "not below"
        return (
            f"its scores round by at most {self.rounding:.3g} in {self.dtype}, "
            f"{rel} {self.budget:g}"
        )


def dtype_of(ctx: Context) -> tuple[str, float, int]:
    """``(name, unit roundoff, mantissa bits)`` of the dtype the scores are computed in.

    With ``dtype="auto"`` that is float64 unless the precision stage proves every score
    exact in float32 (``Context.check_exact_scores``), where a proof in float64 holds too.
    """
    if ctx.options.dtype == torch.float32:
        return "float32", 2.0**-24, 24
    return "float64", 2.0**-53, 53


def grain(x: float, most: int = 60) -> int | None:
    """The least ``j >= 0`` with ``x 2^j`` an integer (None: none up to ``most``). Every
    float has one; what makes it matter is the size bound it meets in :func:`equality_proof`.

    >>> grain(3.0), grain(0.375), grain(0.1), grain(1e-30)
    (0, 3, 55, None)
    """
    if not math.isfinite(x):
        return None
    for j in range(most + 1):
        if (x * 2.0**j).is_integer():
            return j
    return None


def grain_of(xs: Sequence[float]) -> int | None:
    """The least ``j`` with every ``x 2^j`` an integer (None: not for ``j <= 60``).

    >>> grain_of([1.0, 0.5, 0.25]), grain_of([1.0, 1e-30])
    (2, None)
    """
    arr = np.unique(np.asarray(xs, dtype=np.float64))  # a static S-op: one per position
    if not np.isfinite(arr).all():
        return None
    for j in range(61):  # exact: scaling by 2^j and testing for integers does not round
        if (np.floor(arr * 2.0**j) == arr * 2.0**j).all():
            return j
    return None


@dataclass(frozen=True)
class Side:
    """One side of an equality: a bound on its value and whether it is exact in the stream.

    Attributes:
        bound: ``|value| <=`` this at every real position (inf: unknown).
        grain: every value (and every coefficient of its form) is a multiple of
            ``2^-grain`` and exact in the stream; None when not proven so.
    """

    bound: float
    grain: int | None


def side(ctx: Context, e: E.SOp, form: dict[str, float], values: Sequence[Any] | None) -> Side:
    """The :class:`Side` of an S-op read as a number through ``form``."""
    nums = [float(v) for v in values or () if v is not None and is_number(v)]
    if values is None:
        rng = E.value_range(e)
        bound = math.inf if rng is None else max(abs(rng[0]), abs(rng[1]))
    else:
        bound = max((abs(x) for x in nums), default=0.0)
    r = ctx.rep(e)
    if r.kind == "num" and len(form) > 1:
        # a sum of several directions rounds with their sizes, whatever its value
        bound = max(bound, ctx.form_bound(form))
    exact_dirs = set(ctx.static_embed) | set(ctx.token_dims) | {BOS, NOTBOS}
    if ctx.token_num_dir is not None:
        exact_dirs.add(ctx.token_num_dir)
    # exact in the stream: the value itself in one exact direction, or a one-hot block of
    # exact directions weighted by the values
    one_dir = r.kind == "num" and len(form) == 1 and abs(next(iter(form.values()), 0.0)) == 1.0
    g = None
    if values is not None and (one_dir or r.kind == "cat") and all(d in exact_dirs for d in form):
        g = grain_of(nums)
    return Side(bound, g)


def equality_proof(ctx: Context, q: Side, k: Side, scale: float, n_terms: int) -> Proof:
    """The proof for scores ``1 - scale (q - k)^2`` written as ``n_terms`` products.

    >>> from types import SimpleNamespace
    >>> ctx = SimpleNamespace(options=SimpleNamespace(dtype="auto"))
    >>> equality_proof(ctx, Side(3.0, 0), Side(3.0, 0), 1.0, 4).rounding
    0.0
    >>> equality_proof(ctx, Side(1e8, None), Side(1e8, None), 1.0, 4).holds
    False
    """
    name, u, p = dtype_of(ctx)
    both = q.bound + k.bound
    size = scale * both * both + 3.0  # (a product overflows to inf, a power raises)
    if not math.isfinite(size):
        return Proof(math.inf, BUDGET, name)
    wgrain = grain_of([scale, 2.0 * scale, 0.5])
    if q.grain is not None and k.grain is not None and wgrain is not None:
        j = wgrain + 2 * max(q.grain, k.grain)
        if size * 2.0**j <= 2.0 ** (p - 1):
            return Proof(0.0, BUDGET, name)
    return Proof((4 * (n_terms + 2) + 32) * u * size, BUDGET, name)


def largest_magnitude(ctx: Context, other: float | None, scale: float, n_terms: int) -> float:
    """The largest ``M`` for which an equality of a value of size ``M`` with one of size
    ``other`` (None: also of size ``M``; neither known to be exact) is proved: the run-time
    bound on a real-valued side.

    >>> from types import SimpleNamespace
    >>> ctx = SimpleNamespace(options=SimpleNamespace(dtype="auto"))
    >>> m = largest_magnitude(ctx, 5.0, 1.0, 4)
    >>> equality_proof(ctx, Side(m, None), Side(5.0, None), 1.0, 4).holds
    True
    """
    _, u, _ = dtype_of(ctx)
    room = BUDGET / ((4 * (n_terms + 2) + 32) * u) - 3.0
    if room <= 0.0:
        return 0.0
    reach = math.sqrt(room / scale) * (1 - 1e-9)  # the most |q| + |k| may be
    return max(0.0, math.floor(reach / 2 if other is None else reach - other))


def max_proof(
    ctx: Context, base: float, gain: float, max_score: float, score: float, n_terms: int
) -> Proof:
    """The proof for a SelectMax's scores ``gain * base + score``: the base's rounding
    ``base`` scaled by the gain, and the sum's over its ``n_terms`` products (``score``
    bounds the stretched score). The stretched values lie at least 1 apart, so the
    rounding may take half the tolerance.

    >>> from types import SimpleNamespace
    >>> ctx = SimpleNamespace(options=SimpleNamespace(dtype="auto"))
    >>> max_proof(ctx, 0.0, 2.0**20, 1.0, 1e5, 3).holds
    True
    >>> max_proof(ctx, 0.0, 2.0**60, 1.0, 1e17, 3).holds
    False
    """
    name, u, _ = dtype_of(ctx)
    size = gain * (abs(max_score) + 1.0) + score
    return Proof(gain * base + (4 * (n_terms + 2) + 32) * u * size, TOLERANCE / 2, name)


def table_proof(
    ctx: Context, sides: Sequence[tuple[Sequence[float], bool]]
) -> tuple[Proof, tuple[float, float, float] | None]:
    """The proof for a table over one-hot values, each side ``(values, stepped)``, and the
    step that rounds most (``(lo, hi, x)``: the step between ``lo`` and ``hi`` read at the
    value ``x``; None without steps).

    A side made one-hot by steps (``stepped``) reads a step between neighbours ``lo < hi``
    (midpoint ``t``, slope ``a = 2 / (hi - lo)``, two ReLUs of ``a (x - t) +- 1/2``) with
    an error of at most ``12 u (a (|x| + |t|) / 2 + 1)`` at a value ``x`` above it (the
    ReLUs' inputs round with their terms, and their difference is summed with them): below,
    the step is exactly 0. Each one-hot direction is the difference of two steps, and a
    table score reads one direction of each side, weighted 1.

    >>> from types import SimpleNamespace
    >>> ctx = SimpleNamespace(options=SimpleNamespace(dtype="auto"))
    >>> table_proof(ctx, [([-1e13, 0.0, 1.0], True)])[0].holds
    True
    >>> f32 = SimpleNamespace(options=SimpleNamespace(dtype=torch.float32))
    >>> proof, worst = table_proof(f32, [([1e9, 1e9 + 1e4, 1e9 + 2e4], True)])
    >>> proof.holds, worst
    (False, (1000010000.0, 1000020000.0, 1000020000.0))
    """
    name, u, _ = dtype_of(ctx)
    total = 0.0
    worst: tuple[float, tuple[float, float, float]] | None = None
    for vals, stepped in sides:
        if not stepped:
            continue  # a one-hot side (its values need not be numbers) reads no steps
        xs = [x for x in (float(v) for v in vals if is_number(v)) if math.isfinite(x)]
        if len(xs) < 2:
            continue
        reps = [g[0] for g in D.close_groups(sorted(set(xs)))]
        steps = []
        for i, (lo, hi) in enumerate(zip(reps, reps[1:])):
            t = (lo + hi) / 2
            x = max(reps[i + 1 :], key=abs)
            err = 12.0 * u * ((abs(x) + abs(t)) / (hi - lo) + 1.0)
            steps.append(err)
            if worst is None or err > worst[0]:
                worst = (err, (lo, hi, x))
        # a direction is two steps; the side's worst direction, read once per score
        total += max(a + b for a, b in zip([0.0] + steps, steps + [0.0]))
    return Proof(total, BUDGET, name), None if worst is None else worst[1]


def level(ctx: Context, proof: Proof) -> str:
    """The report's level of a comparison: "exact" only where the proof holds (and softmax
    weighs the selected keys alike: exact scores)."""
    if not proof.holds:
        return "bounded"
    if ctx.options.attention is not AttentionMode.HARD and proof.rounding > 0.0:
        return "bounded"
    return "exact"


def record(ctx: Context, label: str, how: str, proof: Proof, note: str = "") -> None:
    """A report line for a comparison: how it is scored and what was proved."""
    text = proof.text() + (f"; {note}" if note else "")
    if ctx.options.attention is not AttentionMode.HARD and proof.rounding > 0.0:
        text += "; softmax weighs the selected keys within a factor exp(2 beta x that)"
    ctx.realised(label, how, level(ctx, proof), 0, note=text)


def check_collisions(ctx: Context, label: str, sel: E.Select, matrix: Callable) -> None:
    """Refuses a comparison whose one-hot sides merge values that its predicate tells apart.

    A numerical side with a finite value set is made one-hot by steps
    (``forms.categorical_rep``), which give values that differ only by float rounding one
    direction (``ir.discretise.close_groups``: the first of each group stands for it). The
    predicate on the values the model holds must be the predicate on the values; and a
    value of a group must lie within a quarter of the gap to the next group, where the steps
    are flat, else the model reads it between two values. ``matrix(pred, qvals, kvals)`` is
    the predicate on values (``selectors.pred_matrix``).

    Raises:
        UnsupportedError: naming the values that collide.
    """
    kvals = _values(ctx, sel.keys)
    qvals = _values(ctx, sel.queries)
    if kvals is None or qvals is None:
        return
    kmap = _merged(ctx, label, sel.keys, kvals)
    qmap = _merged(ctx, label, sel.queries, qvals)
    if kmap is None and qmap is None:
        return
    kheld = [v if kmap is None else kmap.get(float(v), v) for v in kvals]
    qheld = [v if qmap is None else qmap.get(float(v), v) for v in qvals]
    want = matrix(sel.predicate, qvals, kvals)
    bad = want != matrix(sel.predicate, qheld, kheld)
    if not bad.any():
        return
    i, j = (int(x[0]) for x in bad.nonzero())
    k, q = kvals[j], qvals[i]
    merged_key = kmap is not None and kmap.get(float(k), float(k)) != float(k)
    a, b = (k, kheld[j]) if merged_key else (q, qheld[i])
    pred = getattr(sel.predicate, "name", "its predicate")
    raise UnsupportedError(
        f"{label}: compares values that differ only by float rounding ({b!r} and {a!r}), "
        f"which the model cannot tell apart, while {pred} does (key {k!r}, query {q!r}: "
        f"{bool(want[i, j])}); round the values first (for example with a map to "
        "round(x, 9)) or keep them further apart"
    )


def _values(ctx: Context, e: E.SOp) -> list | None:
    vals = ctx.vi.values(e)
    return None if vals is None else [v for v in vals if v is not None]


def _merged(ctx: Context, label: str, e: E.SOp, vals: list) -> dict[float, float] | None:
    """value -> the value the model holds for it, where steps merge values (None: none)."""
    if ctx.rep(e).kind != "num" or ctx.vi.is_static(e):
        return None  # one-hot already, or exact from the embedding
    xs = sorted({float(v) for v in vals if is_number(v)})
    groups = D.close_groups(xs)
    if all(len(g) == 1 for g in groups):
        return None
    ramp = D.on_a_ramp(groups)
    if ramp is not None:
        raise UnsupportedError(too_close(label, ctx.label(e), *ramp))
    return {x: group[0] for group in groups for x in group}


def too_close(label: str, what: str, first: float, x: float, nxt: float) -> str:
    """The refusal of values too close for the model's steps (:func:`D.on_a_ramp`).

    >>> too_close("m", "its input", 1.0, 1.0000000006, 1.000000001).split(": ")[1][:41]
    'its input takes the values 1.0, 1.0000000'
    """
    return (
        f"{label}: {what} takes the values {first!r}, {x!r} and {nxt!r}, too close for "
        f"the model's steps: {x!r} lies between the first, which it is merged with (they "
        "differ only by float rounding), and the next; round the values first (for "
        "example with a map to round(x, 9)) or keep them further apart"
    )
