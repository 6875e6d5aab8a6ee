"""Selectors as attention scores: ``score(ctx, sel) -> (terms, max_score, after)``.

A selected key scores ``max_score``, any other key at most ``max_score - 1`` (the head adds
BOS: ``ir.attention.bos_default_head``). The score terms are

- tables over one-hot values (``ir.attention.table_scores``), for any predicate;
- ``1 - s (q - k)^2`` for equality of numbers (``equality_scores``; against a constant
  ``1 - s (c - x)^2``, read on one side only) where ``compare`` proves its float rounding
  below the margin over the values; otherwise, and for the other numerical comparisons, a
  table over the values' one-hot steps (their ranks), refused where float rounding merges
  values the predicate tells apart;
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

from attnsim.compiler.lowering import compare, forms
from attnsim.compiler.lowering.context import FAILED, MAX_LOOKUP, Context, apply_safely
from attnsim.compiler.lowering.program import After, UnsupportedError
from attnsim.compiler.lowering.static_scores import static_score
from attnsim.ir import attention
from attnsim.ir import discretise as D
from attnsim.ir.blocks import BOS, NOTBOS, linear_form
from attnsim.rasp import expr as E
from attnsim.values import as_number, as_truth, is_number, value_key

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
        rounding = ctx.roundings.get(sel.uid, 0.0)
        if isinstance(sel, E.SelectorAnd) and not rounding < compare.TOLERANCE / 2:
            raise UnsupportedError(
                f"{ctx.label(sel)}: a conjunction whose numerical comparisons round by up "
                f"to {rounding:.3g} together, not below {compare.TOLERANCE / 2:g}: the head "
                "cannot tell its selected keys from the others; combine fewer numerical "
                "comparisons in one selector"
            )
    return got


def _score(ctx: Context, sel: E.Selector) -> Score:
    if ctx.vi.is_static(sel):
        return static_score(ctx, sel)
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
        parts = (ctx.roundings.get(sel.fst.uid, 0.0), ctx.roundings.get(sel.snd.uid, 0.0))
        ctx.roundings[sel.uid] = sum(parts)
        return t1 + t2, m1 + m2, r1 | r2
    if isinstance(sel, E.Select):
        return _select_score(ctx, sel)
    if isinstance(sel, (E.SelectorOr, E.SelectorNot)):
        if contains_select_max(sel):
            raise UnsupportedError(
                f"{ctx.label(sel)}: a SelectMax inside Or/Not cannot be compiled; "
                "aggregate over the SelectMax itself"
            )
        fixed = _fixed_truth(sel)  # TRUE and FALSE read no value, None included
        if fixed is not None:
            return _select_score(ctx, E.Select(E.indices, E.indices, _TRUTH[fixed]))
        return _joint_score(ctx, sel)
    raise UnsupportedError(f"{ctx.label(sel)}: cannot compile {type(sel).__name__}")


_TRUTH = {True: E.Comparison.TRUE, False: E.Comparison.FALSE}


def _fixed_truth(sel: E.Selector) -> bool | None:
    """The selector's value where it does not depend on any key or query (its TRUE and FALSE
    parts decide it), else None.

    >>> t = E.Select(E.tokens, E.tokens, E.Comparison.TRUE)
    >>> f = E.Select(E.tokens, E.tokens, E.Comparison.FALSE)
    >>> eq = E.Select(E.tokens, E.tokens, E.Comparison.EQ)
    >>> _fixed_truth(~f), _fixed_truth(eq | t), _fixed_truth(eq & f), _fixed_truth(eq | f)
    (True, True, False, None)
    """
    if isinstance(sel, E.Select):
        return {E.Comparison.TRUE: True, E.Comparison.FALSE: False}.get(sel.predicate)
    if isinstance(sel, E.SelectorNot):
        inner = _fixed_truth(sel.inner)
        return None if inner is None else not inner
    if isinstance(sel, (E.SelectorAnd, E.SelectorOr)):
        a, b = _fixed_truth(sel.fst), _fixed_truth(sel.snd)
        absorbing = isinstance(sel, E.SelectorOr)  # True absorbs an Or, False an And
        if absorbing in (a, b):
            return absorbing
        if a is not None and b is not None:
            return a if isinstance(sel, E.SelectorOr) else a and b
    return None


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
    # rounding: the base's, scaled by the gain, and that of the sum itself
    base_rounding = ctx.roundings.get(sel.base.uid, 0.0)
    proof = compare.max_proof(ctx, base_rounding, gain, max_score, bound, len(scaled))
    what = f"{stretch:g} * {ctx.label(sel.score)}"
    if values is not None and not proof.holds:
        # the score's ranks instead (steps on its values): small integers, 1 apart
        rank_form, rank_after, n = _score_ranks(ctx, sel, form, values)
        after = base_after | rank_after
        gain = 2.0 ** math.ceil(math.log2(4.0 * n))
        scaled = attention.max_scores(terms, gain, rank_form, 1.0)
        first = proof
        proof = compare.max_proof(ctx, base_rounding, gain, max_score, n - 1.0, len(scaled))
        what = f"the rank of {ctx.label(sel.score)} (on its values {first.text()})"
    exact = values is not None and proof.holds
    ctx.roundings[sel.uid] = proof.rounding
    ctx.gains[sel.uid] = gain
    ctx.guard(
        ctx.rep(sel.score).after, ctx.label(sel.score), linear_form(form), value_range=(lo, hi)
    )
    ctx.realised(
        label,
        f"max by one head: score {gain:g} * base + {what}",
        "exact" if exact else "bounded",
        0,
        note=(
            "the score's values are known and at least 1 apart once stretched: the "
            "head selects exactly the keys holding the maximum"
            if exact
            else "hard attention averages the keys within its tolerance (0.25) of the "
            "largest score, softmax weights them by exp(beta * score): the mean of the "
            "score over it is within that of the row maximum (exact for scores apart "
            "by more than the tolerance)" + ("" if proof.holds else f"; {proof.text()}")
        )
        + "; the score range is checked at run time",
    )
    return scaled, gain * max_score, after


def _score_ranks(
    ctx: Context, sel: E.SelectMax, form: dict, values: Sequence[Any]
) -> tuple[dict, After, int]:
    """``(form, after, n)``: the rank (0 to n - 1) of a SelectMax's score among its values,
    by steps; refuses values that differ only by float rounding (the steps merge them)."""
    label = ctx.label(sel)
    xs = sorted({float(v) for v in values if v is not None})
    groups = D.close_groups(xs)
    for group in groups:
        if len(group) > 1:
            raise UnsupportedError(
                f"{label}: its score {ctx.label(sel.score)!r} takes values that differ only "
                f"by float rounding ({group[0]!r} and {group[1]!r}), which the model cannot "
                "tell apart, while the maximum does; round the score first (for example "
                "with a map to round(x, 9)) or keep its values further apart"
            )
    table = {value_key(as_number(x)): float(i) for i, x in enumerate(xs)}
    r = ctx.rep(sel.score)
    rank = forms.discretise(ctx, f"{label}@rank", form, r.after, xs, table, None, num_out=True)
    return dict(rank.form), rank.after, len(xs)


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
    finite = kvals is not None and qvals is not None
    if pred is E.Comparison.EQ:
        fk, fq = forms.numeric_form(ctx, sel.keys), forms.numeric_form(ctx, sel.queries)
        both = [v for v in (kvals or ()) + (qvals or ()) if v is not None]
        # a real-valued side is checked integer at run time: how far from the other's values
        gap = _min_gap(both) if finite else _integer_gap(both)
        # (a gap of 1e-200 or 1e200 has no square: an infinite scale, refused by the proof)
        scale = 1.0 / (gap * gap) if 0.0 < gap * gap < math.inf else math.inf
        proof = _equality_proof(ctx, sel, fk, fq, scale)
        if not proof.holds and finite:
            # the values' ranks instead: each side one-hot on its values, a table over pairs
            return _ranked(ctx, sel, proof)
        if not finite:
            proof = _real_valued_guards(ctx, sel, fk, fq, scale, proof)
        else:
            compare.record(ctx, ctx.label(sel), "equality 1 - s (q - k)^2 on the values", proof)
        ctx.roundings[sel.uid] = proof.rounding
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
    if finite:
        return _ranked(ctx, sel, None)
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


def _equality_proof(ctx: Context, sel: E.Select, fk: dict, fq: dict, scale: float) -> compare.Proof:
    """What float rounding does to the scores ``1 - scale (q - k)^2`` of an equality."""
    sides = []
    for e, f in ((sel.queries, fq), (sel.keys, fk)):
        c = _constant(ctx, e)
        if c is None:
            sides.append(compare.side(ctx, e, f, ctx.vi.values(e)))
        else:  # a constant is a weight of the scores, not a feature
            sides.append(compare.Side(abs(c), compare.grain_of([c])))
    n_terms = len(fq) * len(fk) + 3
    return compare.equality_proof(ctx, sides[0], sides[1], scale, n_terms)


def _ranked(ctx: Context, sel: E.Select, proof: compare.Proof | None) -> Score:
    """A comparison of numbers with finite value sets as a table over their one-hot values
    (their ranks), once no two values it tells apart are merged by float rounding."""
    label = ctx.label(sel)
    compare.check_collisions(ctx, label, sel, pred_matrix)
    got = _table_score(ctx, sel.keys, sel.queries, sel.predicate)
    stepped = [
        (ctx.vi.values(e) or (), ctx.rep(e).kind == "num" and not ctx.vi.is_static(e))
        for e in (sel.keys, sel.queries)
    ]
    table, step = compare.table_proof(ctx, stepped)
    if not table.holds:
        lo, hi, x = step or (math.nan, math.nan, math.nan)
        raise UnsupportedError(
            f"{label}: compares values too close for their size: the model's step between "
            f"{lo!r} and {hi!r} rounds at the value {x!r} ({table.text()}); keep the values "
            "further apart relative to their size (or round them first)"
        )
    ctx.roundings[sel.uid] = table.rounding
    note = "" if proof is None else f"on the values themselves {proof.text()}"
    compare.record(
        ctx, label, f"{_pred_name(sel.predicate)} as a table over the values' ranks", table, note
    )
    return got


def _real_valued_guards(
    ctx: Context, sel: E.Select, fk: dict, fq: dict, scale: float, proof: compare.Proof
) -> compare.Proof:
    """Run-time checks of an equality with a side without a finite value set: integers, and
    within the declared range (or, undeclared, the largest size the proof allows); returns
    the proof that holds within them."""
    label = ctx.label(sel)
    sides = ((sel.keys, fk), (sel.queries, fq))
    unknown = [(e, f) for e, f in sides if ctx.vi.values(e) is None]
    declared = all(E.value_range(e) is not None for e, _ in unknown)
    # the size of a side that has one: its values, or its declared range
    fixed = [compare.side(ctx, e, f, ctx.vi.values(e)).bound for e, f in sides]
    other = next((b for b in fixed if math.isfinite(b)), None)
    n_terms = len(fq) * len(fk) + 3
    bound = math.inf
    if not declared:
        bound = compare.largest_magnitude(ctx, other, scale, n_terms)
        wide = compare.Side(bound if other is None else other, None)
        proof = compare.equality_proof(ctx, compare.Side(bound, None), wide, scale, n_terms)
    if not proof.holds:
        where = "over their declared value_range" if declared else "at any size"
        raise UnsupportedError(
            f"{label}: compares numbers by EQ {where}, where {proof.text()}: its scores "
            "1 - (q - k)^2 cannot tell neighbouring integers apart there; "
            + ("declare a narrower value_range" if declared else "compare smaller numbers")
        )
    for e, f in unknown:
        r = ctx.rep(e)
        ctx.guard(r.after, ctx.label(e), linear_form(f), integer=True)
        rng = E.value_range(e) or (-bound, bound)
        why = (
            ""
            if E.value_range(e)
            else f"{label} compares it by EQ, proved exact only for integers within "
            f"+-{bound:g} ({proof.dtype} rounding of its scores); compare smaller numbers"
        )
        ctx.guard(r.after, ctx.label(e), linear_form(f), value_range=rng, reason=why)
    note = (
        "over the declared value_range (checked at run time)"
        if declared
        else f"for integers within +-{bound:g}, checked at run time"
    )
    compare.record(ctx, label, "equality 1 - (q - k)^2 on integers", proof, note)
    return proof


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
    # TRUE and FALSE leaves read no value: their keys and queries stay out of the table
    leaves = [leaf for leaf in leaves if _fixed_truth(leaf) is None]
    for leaf in leaves:  # numerical sides become one-hot by steps: no value may collide
        compare.check_collisions(ctx, ctx.label(sel), leaf, pred_matrix)
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


def _integer_gap(vals: Sequence[Any]) -> float:
    """The least distance from one of ``vals`` to an integer other than itself (at most 1):
    how far apart the two sides of an equality are at the least, where they differ, when
    the other side holds integers."""
    gap = 1.0
    for v in vals:
        d = abs(float(v) - round(float(v)))
        if d > 0:
            gap = min(gap, d)
    return gap


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
    if isinstance(sel, E.Select) and _fixed_truth(sel) is not None:
        return np.full((len(qts), len(kts)), _fixed_truth(sel), dtype=bool)
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
