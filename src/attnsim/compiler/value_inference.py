"""Stage 2, value inference: which values each S-op can take, and which are static.

An S-op is *static* when it depends only on positions and constants (``indices``, ``Full``,
``ConstantSOp``, maps of those; ``length`` too when the input length is fixed): the compiler
computes it for every position at compile time and writes it into the positional embedding.

The value set of an S-op is a tuple of distinct values, or None when it is not finite or
not known (real-valued S-ops such as matrix entries): lowering then picks a realisation that
needs no enumeration (linear, bilinear, native or ReLU units).

>>> from attnsim import rasp
>>> vi = ValueInference(vocab=("a", "b"), max_seq_len=4, causal=False, fixed_length=False)
>>> vi.values(rasp.indices + 1)
(1, 2, 3, 4)
>>> vi.is_static(rasp.indices + 1), vi.is_static(rasp.tokens)
(True, False)
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from attnsim.rasp import expr as E
from attnsim.rasp import interpret as I

MAX_TABLE = 20_000  # the most argument combinations a map is enumerated on
MAX_LINEAR_TABLE = 1_000_000  # the most value pairs a linear map of two S-ops is summed on
MAX_MEAN_VALUES = 200_000  # the most candidate values of a numerical mean or sum


def dedupe(values) -> tuple:
    """Distinct values in first-seen order (True, 1 and 1.0 kept apart)."""
    seen: set = set()
    out = []
    for v in values:
        k = (type(v), v)
        if k not in seen:
            seen.add(k)
            out.append(v)
    return tuple(out)


def sort_values(values: Sequence[Any]) -> tuple:
    """Values in a stable order (sorted where comparable, else by repr)."""
    try:
        return tuple(sorted(values))
    except TypeError:
        return tuple(sorted(values, key=repr))


class ValueInference:
    """Answers, on demand and memoised, what values and staticness each expression has.

    Args:
        vocab: the token vocabulary, or None for real-valued (numerical) tokens.
        max_seq_len: the longest input.
        causal: whether the model is causal (changes ``length`` and selector widths).
        fixed_length: inputs always have exactly ``max_seq_len`` tokens.
    """

    def __init__(
        self, vocab: Sequence[Any] | None, max_seq_len: int, causal: bool, fixed_length: bool
    ) -> None:
        self.vocab = None if vocab is None else dedupe(vocab)
        self.L = max_seq_len
        self.causal = causal
        self.fixed_length = fixed_length
        self._static: dict[int, bool] = {}
        self._values: dict[int, tuple | None] = {}
        self._evaluator = I._Evaluator(np.zeros((1, max_seq_len)), causal=causal)

    # -- static --------------------------------------------------------------------------
    def is_static(self, e: E.RASPExpr) -> bool:
        got = self._static.get(e.uid)
        if got is None:
            got = self._static[e.uid] = self._compute_static(e)
        return got

    def _compute_static(self, e: E.RASPExpr) -> bool:
        if isinstance(e, (E.IndicesType, E.Full, E.ConstantSOp, E.ConstantSelector)):
            return True
        if isinstance(e, E.LengthType):
            return self.fixed_length or self.causal
        if isinstance(e, E.TokensType):
            return False
        if isinstance(e, (E.Aggregate,)):
            return False
        if isinstance(e, E.SelectorWidth):
            # the count over a static selector is static when every key a query could
            # select exists: in causal mode, or with a fixed input length
            return (self.fixed_length or self.causal) and self.is_static(e.selector)
        return all(self.is_static(c) for c in e.children)

    def static_values(self, e: E.RASPExpr) -> list:
        """The value at each position 0..max_seq_len-1 of a static S-op."""
        assert self.is_static(e), e
        val = self._evaluator.eval(e)
        if isinstance(val, np.ndarray):
            return [float(x) for x in val[0]]
        return list(val.to_objects()[0])

    def static_matrix(self, sel: E.Selector) -> np.ndarray:
        """The selection matrix ``[query, key]`` of a static selector at full length."""
        assert self.is_static(sel), sel
        return np.asarray(self._evaluator.eval(sel)[0], dtype=bool)

    # -- values ------------------------------------------------------------------------------
    def values(self, e: E.SOp) -> tuple | None:
        if e.uid not in self._values:
            self._values[e.uid] = self._compute_values(e)
        return self._values[e.uid]

    def _compute_values(self, e: E.SOp) -> tuple | None:
        num = E.is_numerical(e)
        if self.is_static(e):
            vals = dedupe(self.static_values(e))
            return tuple(float(v) for v in vals) if num else vals
        if isinstance(e, E.TokensType):
            if self.vocab is None:
                return None
            return tuple(float(v) for v in self.vocab) if num else self.vocab
        if isinstance(e, E.LengthType):
            vals = tuple(range(1, self.L + 1))
        elif isinstance(e, E.SelectorWidth):
            vals = tuple(range(0, self.L + 1))
        elif isinstance(e, E.Map):
            inner = self.values(e.inner)
            if inner is None:
                return None
            vals = dedupe(_safe_map(e.f, [(v,) for v in inner]))
        elif isinstance(e, E.SequenceMap):
            linear = e._op is not None and e._op.kind == "linear"
            if linear and num:
                got = self._same_selector_means(e)
                if got is not None:
                    return got
            parts = [self.values(s) for s in e.sops]
            if any(p is None for p in parts):
                return None
            size = int(np.prod([len(p) for p in parts]))
            if linear and size <= MAX_LINEAR_TABLE and _all_numbers(parts):
                # a*x + b*y over all pairs, vectorised (the values of sums of real S-ops)
                a, b = e._op.params
                xs = np.add.outer(a * np.asarray(parts[0], float), b * np.asarray(parts[1], float))
                if num:
                    return tuple(float(v) for v in np.unique(xs))
            if size > MAX_TABLE:
                return None
            vals = dedupe(_safe_map(e.f, itertools.product(*parts)))
        elif isinstance(e, E.Aggregate):
            vals = self._aggregate_values(e)
            if vals is None:
                return None
        else:
            return None
        if num:
            try:
                return dedupe(float(v) for v in vals if v is not None)
            except (TypeError, ValueError):
                return None
        return vals

    def _aggregate_values(self, e: E.Aggregate) -> tuple | None:
        inner = self.values(e.sop)
        if inner is None:
            return None
        numeric = E.is_numerical(e) or e.reduction == "sum"
        if not numeric:
            return dedupe(list(inner) + ([e.default] if e.default is not None else []))
        return self._mean_values(inner, e.reduction, e.default)

    def _mean_values(self, inner: Sequence[Any], reduction: str, default: Any) -> tuple | None:
        """Every mean (or sum) of 1..max_seq_len values drawn from the integers ``inner``.

        None when the values are not all integers or there would be too many candidates.
        """
        default = 0.0 if default is None else float(default)
        try:
            ints = sorted({int(v) for v in inner if v is not None and float(v).is_integer()})
            if len(ints) != len({float(v) for v in inner if v is not None}):
                return None
        except (TypeError, ValueError):
            return None
        if not ints:
            return (default,)
        lo, hi = ints[0], ints[-1]
        if reduction == "sum":
            if hi - lo == 0:
                sums = np.arange(1, self.L + 1, dtype=np.float64) * lo
            elif (hi - lo) * self.L > MAX_MEAN_VALUES:
                return None
            else:
                sums = np.arange(min(lo, lo * self.L), max(hi, hi * self.L) + 1, dtype=np.float64)
            return tuple(float(v) for v in np.unique(np.append(sums, default)))
        # a mean of w integers in [lo, hi] is s / w for an integer s in [w * lo, w * hi]
        if (hi - lo) * self.L * self.L > 2 * MAX_MEAN_VALUES:
            return None
        fracs = [np.array([default])]
        for w in range(1, self.L + 1):
            fracs.append(np.arange(w * lo, w * hi + 1, dtype=np.float64) / w)
        return tuple(float(v) for v in np.unique(np.concatenate(fracs)))

    def _same_selector_means(self, e: E.SequenceMap) -> tuple | None:
        """Values of ``a * mean_s(x) + b * mean_s(y)``: a mean of ``a*x + b*y`` over ``s``.

        Two numerical means over the same selector (structurally equal) with default 0 read
        the same keys, so their linear combination takes only the values of one mean.
        """
        fst, snd = e.sops
        for agg in (fst, snd):
            if not (
                isinstance(agg, E.Aggregate)
                and E.is_numerical(agg)
                and agg.reduction == "mean"
                and agg.default in (None, 0)
            ):
                return None
        if selector_key(fst.selector) != selector_key(snd.selector):
            return None
        xs, ys = self.values(fst.sop), self.values(snd.sop)
        if xs is None or ys is None or not _all_numbers([xs, ys]):
            return None
        if len(xs) * len(ys) > MAX_TABLE:
            return None
        a, b = e._op.params
        combos = {a * float(x) + b * float(y) for x in xs for y in ys}
        return self._mean_values(tuple(combos), "mean", 0)


def selector_key(sel: E.Selector) -> tuple:
    """A structural key: two selectors with equal keys select the same keys everywhere."""
    if isinstance(sel, E.Select):
        return ("select", _sop_key(sel.keys), _sop_key(sel.queries), sel.predicate)
    if isinstance(sel, (E.SelectorAnd, E.SelectorOr)):
        return (type(sel).__name__, selector_key(sel.fst), selector_key(sel.snd))
    if isinstance(sel, E.SelectorNot):
        return ("not", selector_key(sel.inner))
    return ("uid", sel.uid)


def _sop_key(sop: E.SOp) -> tuple:
    if isinstance(sop, (E.TokensType, E.IndicesType, E.LengthType)):
        return (type(sop).__name__,)
    return ("uid", sop.uid)


def _all_numbers(parts: Sequence[Sequence[Any]]) -> bool:
    return all(isinstance(v, (int, float, np.integer, np.floating)) for p in parts for v in p)


def _safe_map(f, arg_tuples) -> list:
    out = []
    for args in arg_tuples:
        if any(a is None for a in args):
            continue
        try:
            out.append(f(*args))
        except Exception:  # a value the function rejects cannot occur at run time
            continue
    return out
