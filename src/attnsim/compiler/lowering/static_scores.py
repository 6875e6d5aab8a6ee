"""Scores of static selectors (positions and constants decide them), and the keys they
select written down for the execution plans (:mod:`attnsim.model.patterns`)."""

from __future__ import annotations

import numpy as np

from attnsim.compiler import static_tables
from attnsim.compiler.lowering import compare, forms
from attnsim.compiler.lowering.columns import PositionColumn
from attnsim.compiler.lowering.context import Context
from attnsim.ir import attention
from attnsim.model.patterns import KeyIndex, StaticPattern
from attnsim.rasp import expr as E

__all__ = ["static_score"]


def static_score(ctx: Context, sel: E.Selector) -> tuple[tuple, float, frozenset]:
    """``(qk terms, max_score, after)`` of a static selector, and its pattern written down
    (``ctx.patterns``): an equality of static integers as ``1 - (q - k)^2`` where its
    rounding is proved small, any other one as a table over positions (exact)."""
    proof = (
        _static_proof(ctx, sel)
        if isinstance(sel, E.Select)
        and sel.predicate is E.Comparison.EQ
        and ctx.vi.integer_valued(sel.keys)
        and ctx.vi.integer_valued(sel.queries)
        else None
    )
    if proof is not None and proof.holds:
        fq = forms.numeric_static(ctx, sel.queries)
        fk = forms.numeric_static(ctx, sel.keys)
        sq = forms.static_square(ctx, sel.queries)
        sk = forms.static_square(ctx, sel.keys)
        ctx.roundings[sel.uid] = proof.rounding
        queries, keys = (_static_numbers(ctx, e) for e in (sel.queries, sel.keys))
        keys = np.asarray(keys)  # (a sparse table of keys made dense: kept for the pattern)
        index = ctx.key_indexes.get(sel.keys.uid)
        if index is None:  # once per key S-op: the heads of a program share their keys
            index = ctx.key_indexes[sel.keys.uid] = KeyIndex.of(keys)
        if isinstance(queries, PositionColumn):  # what scores select
            pattern = StaticPattern.sparse_equality(
                queries.default, queries.at, queries.values, keys, index
            )
        else:
            pattern = StaticPattern.equality(queries, keys, index)
        ctx.patterns[sel.uid] = pattern
        return attention.equality_scores(fq, sq, fk, sk, 1.0), 1.0, frozenset()
    # any other static selector (and an equality of integers too large for its scores):
    # a table over positions, exact
    m = ctx.vi.static_matrix(sel)
    for i in range(ctx.L):
        forms.position_dir(ctx, i)
    terms = tuple((f"pos:{q}", f"pos:{k}", 1.0) for q, k in zip(*np.nonzero(m)))
    ctx.patterns[sel.uid] = StaticPattern.table(m)
    return terms, 1.0, frozenset()


def _static_numbers(ctx: Context, e: E.SOp) -> np.ndarray | PositionColumn:
    """A static integer-valued S-op's value at every position, float64 ``[L]`` (once per
    S-op: the heads of a program share their sides), a sparse table's as its
    :class:`PositionColumn`."""
    got = ctx.static_arrays.get(e.uid)
    if got is None and static_tables.column(e, ctx.L) is not None:
        got = ctx.static_arrays[e.uid] = PositionColumn(*static_tables.column(e, ctx.L))
    if got is None:
        vals = ctx.vi.static_array(e)
        if not isinstance(vals, np.ndarray):  # a categorical column: its table of numbers
            try:
                vals = np.asarray(vals.table, dtype=np.float64)[vals.codes[0]]
            except (TypeError, ValueError):  # a table entry no position takes is no number
                vals = np.asarray(ctx.vi.static_values(e), dtype=np.float64)
        got = ctx.static_arrays[e.uid] = vals
    return got


def _static_proof(ctx: Context, sel: E.Select) -> compare.Proof:
    """The proof for a static equality of integers written as ``1 - (q - k)^2``."""
    sides = [_static_side(ctx, e) for e in (sel.queries, sel.keys)]
    return compare.equality_proof(ctx, sides[0], sides[1], 1.0, 4)


def _static_side(ctx: Context, e: E.SOp) -> compare.Side:
    """A static integer-valued side's size and grain, from its distinct values (those of
    its positions), once per S-op."""
    got = ctx.static_sides.get(e.uid)
    if got is None:
        vals = np.asarray(ctx.vi.values(e), dtype=np.float64)
        got = compare.Side(float(np.abs(vals).max()), compare.grain_of(vals))
        ctx.static_sides[e.uid] = got
    return got
