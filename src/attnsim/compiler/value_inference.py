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
            parts = [self.values(s) for s in e.sops]
            if any(p is None for p in parts):
                return None
            size = int(np.prod([len(p) for p in parts]))
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
        default = 0.0 if e.default is None else float(e.default)
        if not all(v in (0, 1) for v in inner if v is not None):
            return None
        if e.reduction == "sum":
            return dedupe([float(k) for k in range(self.L + 1)] + [default])
        fracs = {0.0, default}
        if 1 in inner or True in inner:
            for w in range(1, self.L + 1):
                for k in range(w + 1):
                    fracs.add(k / w)
        return tuple(sorted(fracs))


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
