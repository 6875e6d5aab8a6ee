"""Selectors as attention scores: ``score(ctx, sel) -> (terms, max_score, after)``.

A selected key scores ``max_score``, any other key at most ``max_score - 1`` (the head adds
BOS: ``ir.attention.bos_default_head``). The score terms are

- tables over one-hot values (``ir.attention.table_scores``), for any predicate;
- ``1 - (q - k)^2`` for equality of integer-valued numbers (``equality_scores``; against a
  constant ``1 - (c - x)^2``, read on one side only);
- sums of those for conjunctions, tables over joint values for disjunctions and negations;
- position tables for static selectors;
- ``G * base + score`` for ``SelectMax(base, score)``, with a power of two ``G`` above the
  declared score range (bounded: a hard head averages the keys within its tolerance of the
  maximum; exact when the score's values are known).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from attnsim.compiler.lowering import forms
from attnsim.compiler.lowering.context import FAILED, MAX_LOOKUP, Context, apply_safely
from attnsim.compiler.lowering.program import After, UnsupportedError
from attnsim.ir import attention
from attnsim.ir.blocks import BOS, NOTBOS, linear_form
from attnsim.rasp import expr as E
from attnsim.values import as_truth, is_number, value_key

Score = tuple[tuple, float, After]


def score(ctx: Context, sel: E.Selector) -> Score:
    """``(qk terms, max_score, after)`` of a selector (memoised)."""
    got = ctx.scores.get(sel.uid)
    if got is None:
        got = ctx.scores[sel.uid] = _score(ctx, sel)
        terms, max_score, _ = got
        gain = ctx.gains.get(sel.uid, 1.0)
        # with the BOS terms a head adds (a real query scores BOS like this)
        bos = ((NOTBOS, BOS, max_score - 0.5 * gain), (NOTBOS, BOS, max_score))
        ctx.check_exact_scores(ctx.label(sel), terms, bos)
    return got


def _score(ctx: Context, sel: E.Selector) -> Score:
    if ctx.vi.is_static(sel):
        return _static_score(ctx, sel)
    if isinstance(sel, E.SelectMax):
        return _max_score(ctx, sel)
    if isinstance(sel, E.SelectorAnd):
        for part in (sel.fst, sel.snd):
            if contains_select_max(part):
                raise UnsupportedError(
                    f"{ctx.label(sel)}: a SelectMax inside a conjunction cannot be "
                    "compiled; put the other selector into its base: "
                    "SelectMax(base & other, score)"
                )
        t1, m1, r1 = score(ctx, sel.fst)
        t2, m2, r2 = score(ctx, sel.snd)
        return t1 + t2, m1 + m2, r1 | r2
    if isinstance(sel, E.Select):
        return _select_score(ctx, sel)
    if isinstance(sel, (E.SelectorOr, E.SelectorNot)):
        if contains_select_max(sel):
            raise UnsupportedError(
                f"{ctx.label(sel)}: a SelectMax inside Or/Not cannot be compiled; "
                "aggregate over the SelectMax itself"
            )
        return _joint_score(ctx, sel)
    raise UnsupportedError(f"{ctx.label(sel)}: cannot compile {type(sel).__name__}")


def _max_score(ctx: Context, sel: E.SelectMax) -> Score:
    """``G * base + score``: the base selection first, then the largest score.

    With ``|score| <= F`` (declared, checked at run time) and ``G >= 4 (F + 1)``, a key
    the base selects outscores every key it does not select and BOS (which scores
    ``G (max_score - 1/2)`` and so still wins when the base selects nothing); among the
    selected keys the score decides. ``G`` is a power of two, so scaling the base
    scores (integers on integer features) adds no rounding.
    """
    label = ctx.label(sel)
    if contains_select_max(sel.base):
        raise UnsupportedError(
            f"{label}: a SelectMax whose base holds another SelectMax cannot be compiled; "
            "take the maximum of a combined score instead"
        )
    rng = E.value_range(sel.score)
    if rng is None:
        raise UnsupportedError(
            f"{label}: SelectMax needs a declared bound on its score "
            f"{ctx.label(sel.score)!r} to choose the gain of its head; declare it with "
            "rasp.numerical(score, value_range=(lo, hi)) (checked at run time)"
        )
    lo, hi = rng
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise UnsupportedError(
            f"{label}: the declared score range ({lo:g}, {hi:g}) of SelectMax must be "
            "finite; declare finite bounds with rasp.numerical(score, value_range=...)"
        )
    terms, max_score, base_after = score(ctx, sel.base)
    form = forms.numeric_form(ctx, sel.score)
    after = base_after | ctx.rep(sel.score).after
    # a score with a known finite value set is stretched so that distinct values lie at
    # least 1 apart, beyond the head's tolerance: the head then picks exactly the keys
    # holding the maximum
    values = ctx.vi.values(sel.score)
    stretch = 1.0
    if values is not None and len(values) > 1:
        gap = _min_gap([float(v) for v in values])
        if 0.0 < gap < 1.0:
            stretch = 2.0 ** math.ceil(math.log2(1.0 / gap))
    bound = max(abs(lo), abs(hi)) * stretch
    gain = 2.0 ** math.ceil(math.log2(4.0 * (bound + 1.0)))
    scaled = attention.max_scores(terms, gain, form, stretch)
    exact = values is not None
    ctx.gains[sel.uid] = gain
    ctx.guard(
        ctx.rep(sel.score).after, ctx.label(sel.score), linear_form(form), value_range=(lo, hi)
    )
    ctx.realised(
        label,
        f"max by one head: score {gain:g} * base + {stretch:g} * {ctx.label(sel.score)}",
        "exact" if exact else "bounded",
        0,
        note=(
            "the score's values are known and at least 1 apart once stretched: the "
            "head selects exactly the keys holding the maximum"
            if exact
            else "hard attention averages the keys within its tolerance (0.25) of the "
            "largest score, softmax weights them by exp(beta * score): the mean of the "
            "score over it is within that of the row maximum (exact for scores apart "
            "by more than the tolerance)"
        )
        + "; the score range is checked at run time",
    )
    return scaled, gain * max_score, after


def _static_score(ctx: Context, sel: E.Selector) -> Score:
    if (
        isinstance(sel, E.Select)
        and sel.predicate is E.Comparison.EQ
        and _integer_valued(ctx.vi.static_values(sel.keys))
        and _integer_valued(ctx.vi.static_values(sel.queries))
    ):
        fq = forms.numeric_static(ctx, sel.queries)
        fk = forms.numeric_static(ctx, sel.keys)
        sq = forms.static_square(ctx, sel.queries)
        sk = forms.static_square(ctx, sel.keys)
        return attention.equality_scores(fq, sq, fk, sk, 1.0), 1.0, frozenset()
    m = ctx.vi.static_matrix(sel)
    for i in range(ctx.L):
        forms.position_dir(ctx, i)
    terms = tuple((f"pos:{q}", f"pos:{k}", 1.0) for q, k in zip(*np.nonzero(m)))
    return terms, 1.0, frozenset()


def _select_score(ctx: Context, sel: E.Select) -> Score:
    pred = sel.predicate
    # TRUE and FALSE read neither side (``length`` works with real-valued tokens)
    if pred is E.Comparison.TRUE:
        return ((NOTBOS, NOTBOS, 1.0),), 1.0, frozenset()
    if pred is E.Comparison.FALSE:
        return (), 1.0, frozenset()
    kr, qr = ctx.rep(sel.keys), ctx.rep(sel.queries)
    if kr.kind == "cat" and qr.kind == "cat":
        return _table_score(ctx, sel.keys, sel.queries, pred)
    kvals, qvals = ctx.vi.values(sel.keys), ctx.vi.values(sel.queries)
    if pred is E.Comparison.EQ:
        fk, fq = forms.numeric_form(ctx, sel.keys), forms.numeric_form(ctx, sel.queries)
        both = [v for v in (kvals or ()) + (qvals or ()) if v is not None]
        gap = _min_gap(both) if kvals is not None and qvals is not None else 1.0
        if kvals is None or qvals is None:
            for s, f, r in ((sel.keys, fk, kr), (sel.queries, fq, qr)):
                if ctx.vi.values(s) is None:
                    ctx.guard(r.after, ctx.label(s), linear_form(f), integer=True)
        scale = 1.0 / (gap * gap)
        for const_side in ("queries", "keys"):
            c = _constant(ctx, getattr(sel, const_side))
            if c is None:
                continue
            # one side is a constant c: 1 - s (c - x)^2 reads x and x^2 on the other
            # side against notbos only (no directions for the constant side)
            if const_side == "queries":
                sx, rx = _square_of(ctx, sel.keys, fk, kr.after)
                terms = attention.constant_equality_scores(c, fk, sx, scale, on_keys=True)
            else:
                sx, rx = _square_of(ctx, sel.queries, fq, qr.after)
                terms = attention.constant_equality_scores(c, fq, sx, scale, on_keys=False)
            return terms, 1.0, rx
        sk, rk = _square_of(ctx, sel.keys, fk, kr.after)
        sq, rq = _square_of(ctx, sel.queries, fq, qr.after)
        return attention.equality_scores(fq, sq, fk, sk, scale), 1.0, rk | rq
    if kvals is not None and qvals is not None:
        return _table_score(ctx, sel.keys, sel.queries, pred)
    raise UnsupportedError(
        f"{ctx.label(sel)}: compares real-valued S-ops with {_pred_name(pred)}; only "
        "EQ (on integer values) is supported for S-ops without a finite value set"
    )


def _constant(ctx: Context, e: E.SOp) -> float | None:
    """The value of a static S-op that is the same number at every position, else None."""
    if not ctx.vi.is_static(e):
        return None
    vals = ctx.vi.static_values(e)
    if not vals or not all(is_number(v) for v in vals):
        return None
    first = float(vals[0])
    return first if all(float(v) == first for v in vals) else None


def _square_of(ctx: Context, e: E.SOp, form: dict, after: After) -> tuple[str, After]:
    if ctx.vi.is_static(e):
        return forms.static_square(ctx, e), frozenset()
    return forms.square(ctx, form, after, ctx.label(e))


def _table_score(ctx: Context, keys: E.SOp, queries: E.SOp, pred: Any) -> Score:
    kr, qr = forms.categorical_rep(ctx, keys), forms.categorical_rep(ctx, queries)
    _check_table_size(len(qr.values), len(kr.values))
    m = pred_matrix(pred, qr.values, kr.values)  # [query value, key value]
    return attention.table_scores(m, qr.dims, kr.dims), 1.0, kr.after | qr.after


def _check_table_size(nq: int, nk: int) -> None:
    if nk * nq > MAX_LOOKUP * 20:
        raise UnsupportedError(
            f"a selector table over {nq} x {nk} values is too "
            "large; reduce the value sets of its keys and queries"
        )


def _joint_score(ctx: Context, sel: E.Selector) -> Score:
    leaves: list[E.Select] = []
    _collect_leaves(sel, leaves)
    keys = _unique([s.keys for s in leaves])
    queries = _unique([s.queries for s in leaves])
    # the joint keys and queries get names of the selector's, so that the directions
    # they own are the same in every compile
    name = ctx.label(sel)
    kj = (
        keys[0]
        if len(keys) == 1
        else E.SequenceMap(lambda *a: tuple(a), *keys).named(f"{name}@keys")
    )
    qj = (
        queries[0]
        if len(queries) == 1
        else E.SequenceMap(lambda *a: tuple(a), *queries).named(f"{name}@queries")
    )
    kpos = {s.uid: i for i, s in enumerate(keys)}
    qpos = {s.uid: i for i, s in enumerate(queries)}
    kr, qr = forms.categorical_rep(ctx, kj), forms.categorical_rep(ctx, qj)
    _check_table_size(len(qr.values), len(kr.values))
    kts = [k if len(keys) > 1 else (k,) for k in kr.values]
    qts = [q if len(queries) > 1 else (q,) for q in qr.values]
    m = _selector_matrix(sel, qts, kts, qpos, kpos)  # [query value, key value]
    return attention.table_scores(m, qr.dims, kr.dims), 1.0, kr.after | qr.after


# -- helpers ---------------------------------------------------------------------------------


def contains_select_max(sel: E.Selector) -> bool:
    """Whether a selector is, or combines, a SelectMax."""
    if isinstance(sel, E.SelectMax):
        return True
    return any(isinstance(c, E.Selector) and contains_select_max(c) for c in sel.children)


def _integer_valued(vals: Sequence[Any]) -> bool:
    try:
        arr = np.asarray(vals, dtype=np.float64)  # None or a string: not integer-valued
    except (TypeError, ValueError):
        return False
    return bool(np.all(np.isfinite(arr) & (arr == np.floor(arr))))


def _min_gap(vals: Sequence[Any]) -> float:
    xs = sorted({float(v) for v in vals})
    gaps = [b - a for a, b in zip(xs, xs[1:])]
    return min(gaps) if gaps else 1.0


def _pred_name(pred: Any) -> str:
    return pred.name if isinstance(pred, E.Comparison) else getattr(pred, "__name__", "a function")


def _collect_leaves(sel: E.Selector, out: list) -> None:
    if isinstance(sel, E.Select):
        out.append(sel)
        return
    if isinstance(sel, E.ConstantSelector):
        raise UnsupportedError("a ConstantSelector inside a dynamic Or/Not is not supported")
    for c in sel.children:
        _collect_leaves(c, out)


def _unique(sops: list[E.SOp]) -> list[E.SOp]:
    seen: set[int] = set()
    out = []
    for s in sops:
        if s.uid not in seen:
            seen.add(s.uid)
            out.append(s)
    return out


def pred_matrix(pred: Any, qvals: Sequence[Any], kvals: Sequence[Any]) -> np.ndarray:
    """``m[i, j] = pred(kvals[j], qvals[i])`` as booleans (False where it fails or is None).

    >>> pred_matrix(E.Comparison.LT, [1, 2], [1, 2, 3]).astype(int).tolist()
    [[0, 0, 0], [1, 0, 0]]
    """
    nq, nk = len(qvals), len(kvals)
    if (
        isinstance(pred, E.Comparison)
        and nq
        and nk
        and all(is_number(v) for v in qvals)
        and all(is_number(v) for v in kvals)
    ):
        q = np.asarray([float(v) for v in qvals])[:, None]
        k = np.asarray([float(v) for v in kvals])[None, :]
        return np.asarray(pred.numpy_fn(k, q), dtype=bool).reshape(nq, nk)
    m = np.zeros((nq, nk), dtype=bool)
    for i, qv in enumerate(qvals):
        for j, kv in enumerate(kvals):
            r = apply_safely(pred, kv, qv)
            m[i, j] = r is not FAILED and r is not None and as_truth(r)
    return m


def _selector_matrix(
    sel: E.Selector, qts: list[tuple], kts: list[tuple], qpos: dict, kpos: dict
) -> np.ndarray:
    """The selector on joint values: ``m[i, j]`` for query tuple i and key tuple j."""
    if isinstance(sel, E.Select):
        qcol = [t[qpos[sel.queries.uid]] for t in qts]
        kcol = [t[kpos[sel.keys.uid]] for t in kts]
        # evaluate the predicate once per distinct pair of component values
        qd, qidx = _codes(qcol)
        kd, kidx = _codes(kcol)
        return pred_matrix(sel.predicate, qd, kd)[np.ix_(qidx, kidx)]
    if isinstance(sel, E.SelectorAnd):
        return _selector_matrix(sel.fst, qts, kts, qpos, kpos) & _selector_matrix(
            sel.snd, qts, kts, qpos, kpos
        )
    if isinstance(sel, E.SelectorOr):
        return _selector_matrix(sel.fst, qts, kts, qpos, kpos) | _selector_matrix(
            sel.snd, qts, kts, qpos, kpos
        )
    if isinstance(sel, E.SelectorNot):
        return ~_selector_matrix(sel.inner, qts, kts, qpos, kpos)
    raise UnsupportedError(f"cannot compile {type(sel).__name__} inside Or/Not")


def _codes(values: list) -> tuple[list, np.ndarray]:
    """Distinct values (first-seen order) and each value's index among them."""
    index: dict[tuple, int] = {}
    distinct: list = []
    codes = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        key = value_key(v)
        c = index.get(key)
        if c is None:
            c = index[key] = len(distinct)
            distinct.append(v)
        codes[i] = c
    return distinct, codes
