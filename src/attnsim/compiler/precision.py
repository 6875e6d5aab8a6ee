"""Stage 5, choosing the dtype: float32 only where every value the model computes is exact.

With ``dtype="auto"`` (the default) a program compiles in float32 when this stage proves,
from value inference and from the separations the constructions record while lowering
(``lowering.program.Float32Need``), that float32 computes what float64 computes; otherwise
in float64. The rule, checked in this order (the first failure is the reason given):

1. hard attention (softmax weights are not exact) and a finite vocabulary;
2. every map realised exactly (no native unit, no ReLU interpolant: no real arithmetic);
3. every S-op has a finite value set, and every number the program computes or reads as a
   number is an integer with ``|v| <= 2^24`` (so a numerical mean must not average several
   keys into a fraction: its inferred values are integers, or its selector is static and
   selects at most one key per query); a numerical mean's sum stays within 2^24 too;
4. every linear form (an affine map, a sum, a readout) has weights that are multiples of
   ``2^-8`` and partial sums within 2^24 (float32 then adds them exactly), and the
   positional embedding holds integers within 2^24;
5. every construction's separation holds: attention scores are exact (multiples of a power
   of two, within 2^22), and steps between values that may carry rounding (a selector
   width's ``1/(w+1)``, or values whose gaps are not powers of two) are more than
   ``1e4`` float32 epsilons (times the values' size) apart; sums computed as mean times
   count and divisions need float64;
6. what carries float32 rounding (a selector width's one-hot value and what is computed
   from it) is only compared or moved, never read as a number.

Under these conditions float32 computes every number exactly (integers, sums and products of
integers within 2^24), every hard selection exactly (exact scores), and one-hot values either
exactly or within a tiny relative error that no threshold downstream comes near.

>>> import torch
>>> from attnsim import rasp
>>> from attnsim.compiler import lowering, tracing, value_inference
>>> from attnsim.compiler.options import CompileOptions
>>> hist = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ))
>>> graph = tracing.trace(hist.named("hist"))
>>> opts = CompileOptions()
>>> vi = value_inference.infer(graph, ("a", "b"), 8, opts)
>>> p = choose(graph, vi, lowering.lower(graph, vi, opts), opts)
>>> p.dtype, p.text == "float32: " + EXACT
(torch.float32, True)
>>> EXACT
'every value is an integer within 2^24 or one-hot, and every attention is hard'
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

from attnsim.compiler import tracing
from attnsim.compiler.lowering import LoweredProgram
from attnsim.compiler.options import AUTO, AttentionMode, CompileOptions
from attnsim.compiler.value_inference import ValueInference
from attnsim.rasp import expr as E

__all__ = ["EPS32", "MAX_INT32", "SEPARATION", "Precision", "choose", "float32_blockers"]

EPS32 = float(torch.finfo(torch.float32).eps)  # 2^-23
MAX_INT32 = 2.0**24  # every integer up to this is a float32
SEPARATION = 1e4  # how many float32 epsilons (times the size) a separation must exceed
FORM_UNIT = 2.0**-8  # weights of linear forms must be multiples of this

EXACT = "every value is an integer within 2^24 or one-hot, and every attention is hard"


@dataclass(frozen=True)
class Precision:
    """The dtype a model is built in, and why.

    Attributes:
        dtype: torch.float64 or torch.float32.
        reason: why, in words.
        auto: whether the compiler chose it (``dtype="auto"``) or it was asked for.
    """

    dtype: torch.dtype
    reason: str
    auto: bool = True

    @property
    def name(self) -> str:
        """``"float64"`` or ``"float32"``."""
        return "float64" if self.dtype == torch.float64 else "float32"

    @property
    def text(self) -> str:
        """``"float32: ..."``: the dtype and the reason, as the report shows them."""
        return f"{self.name}: {self.reason}"


def choose(
    graph: tracing.Graph, vi: ValueInference, lowered: LoweredProgram, options: CompileOptions
) -> Precision:
    """The dtype of the model: as asked, or with ``"auto"`` float32 where it is exact.

    Args:
        graph: the traced program.
        vi: its value inference.
        lowered: the lowered program (its constructions' recorded separations).
        options: the compile options (``dtype``, ``attention``).

    Returns:
        A :class:`Precision`; for an explicit dtype its reason says whether float32 would be
        exact.
    """
    blockers = float32_blockers(graph, vi, lowered, options)
    if options.dtype != AUTO:
        asked = "float64" if options.dtype == torch.float64 else "float32"
        exact = f"float32 would be exact ({EXACT})"
        why = f"as asked (dtype={asked}); " + (
            exact if not blockers else f"float32 is not proven exact: {blockers[0]}"
        )
        return Precision(options.dtype, why, auto=False)
    if blockers:
        return Precision(torch.float64, blockers[0])
    return Precision(torch.float32, EXACT)


def float32_blockers(
    graph: tracing.Graph, vi: ValueInference, lowered: LoweredProgram, options: CompileOptions
) -> list[str]:
    """Why float32 would not be exact (each reason in words), most basic first; empty when
    it is exact."""
    if options.attention is not AttentionMode.HARD:
        return ["softmax attention: its weights are not exact"]
    if vi.vocab is None:
        return ["real-valued tokens (vocab=None)"]
    out: list[str] = []
    for r in lowered.realisations:
        if r.level != "exact":
            out.append(f"`{r.label}` is realised as {r.how} ({r.level}): real arithmetic")
    sops = [n for n in (graph.nodes[u] for u in graph.order) if isinstance(n, E.SOp)]
    labels = lowered.labels
    name = lambda e: labels.get(e.uid, e.label)  # noqa: E731
    out.extend(_value_blockers(sops, vi, lowered, name))
    out.extend(_embedding_blockers(lowered))
    out.extend(_form_blockers(lowered))
    for need in lowered.float32_needs:
        if not need.gap > SEPARATION * EPS32 * need.scale:
            if need.gap == 0:
                out.append(f"`{need.label}` {need.what}")
            else:
                out.append(
                    f"`{need.label}`: {need.what}, not more than {SEPARATION:g} float32 "
                    f"epsilons x {need.scale:.3g} ({SEPARATION * EPS32 * need.scale:.3g})"
                )
    out.extend(_rounding_blockers(sops, vi, lowered, name))
    return list(dict.fromkeys(out))


def _value_blockers(sops: list[E.SOp], vi: ValueInference, lowered: LoweredProgram, name) -> list:
    out = []
    for e in sops:
        vals = vi.values(e)
        if vals is None:
            out.append(f"`{name(e)}` has no finite value set (real-valued)")
            continue
        if not (E.is_numerical(e) or e.uid in lowered.numeric_reads):
            continue  # a categorical value is one-hot: only compared and moved
        if _mean_of_one_key(e, vi):
            # each query reads one key (or none): the mean is a value of what it averages
            default = 0 if e.default is None else e.default
            vals = tuple(vi.values(e.sop) or ()) + (default,)
        bad = _first_non_integer(vals)
        if bad is not None:
            if isinstance(e, E.Aggregate) and E.is_numerical(e) and e.reduction == "mean":
                out.append(f"`{name(e)}` averages several keys (fractions such as {bad!r})")
            else:
                out.append(f"`{name(e)}` takes the value {bad!r}, not an integer within 2^24")
            continue
        if isinstance(e, E.Aggregate) and e.reduction == "mean" and E.is_numerical(e):
            inner = vi.values(e.sop) or ()
            big = max((abs(float(v)) for v in inner if v is not None), default=0.0)
            if big * vi.L > MAX_INT32:
                out.append(f"`{name(e)}` sums up to {vi.L} values of size {big:g}, beyond 2^24")
    return out


def _mean_of_one_key(e: E.SOp, vi: ValueInference) -> bool:
    """Whether ``e`` is a numerical mean whose selector is static and selects at most one key
    for every query (at full length, so at every length)."""
    if not (isinstance(e, E.Aggregate) and e.reduction == "mean" and E.is_numerical(e)):
        return False
    if not vi.is_static(e.selector) or vi.values(e.sop) is None:
        return False
    return bool(np.all(vi.static_counts(e.selector) <= 1))


def _first_non_integer(vals: Iterable) -> object | None:
    """The first value that is not an integer within 2^24 (None, True, False count as 0/1)."""
    for v in vals:
        if v is None or isinstance(v, bool):
            continue
        try:
            x = float(v)
        except (TypeError, ValueError):
            return v  # a string read as a number: lowering refuses it anyway
        if not (x.is_integer() and abs(x) <= MAX_INT32):
            return v
    return None


def _embedding_blockers(lowered: LoweredProgram) -> list[str]:
    for d, vals in lowered.static_embed.items():
        arr = np.asarray(vals, dtype=np.float64)
        if not (np.all(arr == np.round(arr)) and np.all(np.abs(arr) <= MAX_INT32)):
            return [f"the positional embedding of `{d}` holds values that are not integers"]
    return []


def _form_blockers(lowered: LoweredProgram) -> list[str]:
    """Linear forms (affine maps, sums, readouts) whose weights float32 does not add exactly."""
    out = []
    for uid, r in lowered.reps.items():
        if r.kind != "num":
            continue
        for c in r.form.values():
            if not (float(c) / FORM_UNIT).is_integer() or abs(c) > 2.0**12:
                out.append(
                    f"`{lowered.labels.get(uid, uid)}` weighs a value by {c!r}, which float32 "
                    "does not hold exactly"
                )
                break
    return out


def _rounding_blockers(sops: list[E.SOp], vi: ValueInference, lowered: LoweredProgram, name):
    """S-ops that carry float32 rounding (from a selector width, or inexact steps) and are
    read as numbers (exactness there is what every later check relies on)."""
    rounds = {n.uid for n in lowered.float32_needs if n.rounds and n.uid is not None}
    rounded: set[int] = set()
    out = []
    for e in sops:
        if vi.is_static(e):
            continue
        inputs = [e.inner] if isinstance(e, E.Map) else []
        if isinstance(e, E.SequenceMap):
            inputs = list(e.sops)
        elif isinstance(e, E.Aggregate):
            inputs = [e.sop]
        if (
            isinstance(e, (E.SelectorWidth, E.LengthType))
            or e.uid in rounds
            or any(s.uid in rounded for s in inputs)
        ):
            rounded.add(e.uid)
            if E.is_numerical(e) or e.uid in lowered.numeric_reads:
                out.append(
                    f"`{name(e)}` is read as a number but carries float32 rounding (it is "
                    "computed from a selector width or from steps between values)"
                )
    return out
