"""The library of the original RASP paper (Weiss et al., 2021), under its names.

``sort`` with a composite selector that breaks ties by position, ``sort_by_most_freq``, the
Dyck-k recognisers with ``"T"``/``"F"``/``"P"`` output (``make_dyck1_ptf`` ...), ``count``,
``contains``, ``shift``, ``mark_first_instance``/``mark_last_instance``,
``select_from_first``/``select_from_last``, ``minimum``/``maximum`` and
``load_from_location``.

>>> from attnsim import rasp
>>> rasp.evaluate(sort(rasp.tokens, rasp.tokens), [3, 1, 3, 2])
[1, 2, 3, 3]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

# the language, under the module name tracr programs use for it
from attnsim.rasp import expr as rasp
from attnsim.rasp.lib import common

__all__ = [
    "sort",
    "sort_by_most_freq",
    "make_dyck_ptf",
    "make_dyck1_ptf",
    "make_dyck2_ptf",
    "make_dyck3_ptf",
    "count",
    "contains",
    "shift",
    "mark_first_instance",
    "mark_last_instance",
    "select_from_first",
    "select_from_last",
    "minimum",
    "maximum",
    "load_from_location",
]

_C = rasp.Comparison


def sort(vals: rasp.SOp, keys: rasp.SOp) -> rasp.SOp:
    """``vals`` ordered by ascending ``keys``, ties kept in input order (a stable sort).

    A key goes before another when it is smaller, or equal and earlier: the composite
    selector ``Select(keys, keys, <) | (Select(keys, keys, ==) & Select(indices, indices, <))``.
    Its width is each position's target; the output reads the value sent to it. Keys need
    only be ordered (not numbers). Two attention layers, one head each.

    Args:
        vals: the values to reorder.
        keys: the sort keys.

    Returns:
        An S-op named ``"sort"`` (numerical when ``vals`` is).

    >>> from attnsim import rasp
    >>> rasp.evaluate(sort(rasp.tokens, rasp.tokens), list("banana"))
    ['a', 'a', 'a', 'b', 'n', 'n']
    """
    common.check_sop(vals, "sort (vals)")
    common.check_sop(keys, "sort (keys)")
    earlier = rasp.Select(keys, keys, _C.LT) | (
        rasp.Select(keys, keys, _C.EQ) & rasp.Select(rasp.indices, rasp.indices, _C.LT)
    )
    target = rasp.SelectorWidth(earlier.named("select_earlier_in_sorted")).named("target_pos")
    read = rasp.Select(target, rasp.indices, _C.EQ).named("select_new_val")
    return common.aggregate(read, vals).named("sort")


def sort_by_most_freq(sop: rasp.SOp, non_token: Any = "§") -> rasp.SOp:
    """The distinct values of ``sop``, most frequent first, then ``non_token`` padding.

    Each value keeps its first occurrence (later copies become ``non_token`` and sort to
    the end); first occurrences are ordered by descending frequency, ties by position.
    Three attention layers with at most two heads, as in the RASP paper.

    Args:
        sop: the S-op to read (usually ``rasp.tokens``).
        non_token: the filler for repeated values.

    Returns:
        A categorical S-op named ``"sort_by_most_freq"``.

    >>> from attnsim import rasp
    >>> rasp.evaluate(sort_by_most_freq(rasp.tokens), list("abbccc"))
    ['c', 'b', 'a', '§', '§', '§']
    """
    common.check_sop(sop, "sort_by_most_freq")
    same = rasp.Select(sop, sop, _C.EQ).named("same_tok")
    freq = rasp.SelectorWidth(same).named("hist")
    copies_before = rasp.SelectorWidth(same & rasp.Select(rasp.indices, rasp.indices, _C.LT))
    repeated = (copies_before.named("num_prev_copies") > 0).named("has_earlier")
    # first occurrences (False) before repeats (True); then higher frequency first
    key = rasp.SequenceMap(lambda rep, f: (rep, -f), repeated, freq).named("freq_key")
    shown = rasp.SequenceMap(lambda rep, v: non_token if rep else v, repeated, sop)
    return sort(shown.named("filtered_tokens"), key).named("sort_by_most_freq")


def _ptf(failed: Any, balance: Any) -> str:
    return "F" if failed else ("T" if balance == 0 else "P")


def make_dyck_ptf(pairs: Sequence[str]) -> rasp.SOp:
    """Dyck-k recognition per prefix: ``"T"`` balanced, ``"P"`` still possible, ``"F"`` failed.

    Position i reads the prefix ``tokens[:i+1]``: ``"F"`` once a closer has no matching
    opener (too many closers, or the wrong kind), ``"T"`` when every bracket is matched,
    ``"P"`` when openers are still waiting. Other tokens are ignored.

    With one pair: the running balance is one mean over the prefix (2 layers, 1 head).
    With several: the depth, each bracket's rank among brackets at its nesting level, the
    opener each closer matches, then any failure so far (4 layers, 1 head each).

    Args:
        pairs: bracket pairs, each a two-character string ``opener + closer``.

    Returns:
        A categorical S-op of "T"/"P"/"F" named ``"dyck<k>_ptf"``.

    Raises:
        ValueError: no pairs, a pair that is not two different characters, or a character
            used twice.

    >>> from attnsim import rasp
    >>> "".join(rasp.evaluate(make_dyck_ptf(["()", "{}"]), list("({})(}")))
    'PPPTPF'
    """
    common.check_pairs(pairs, "make_dyck_ptf")
    openers = {pair[0] for pair in pairs}
    closers = {pair[1]: pair[0] for pair in pairs}
    up_to_self = rasp.Select(rasp.indices, rasp.indices, _C.LEQ).named("up_to_self")
    step = rasp.numerical(
        rasp.Map(lambda t: 1 if t in openers else (-1 if t in closers else 0), rasp.tokens)
    ).named("bracket_step")
    if len(pairs) == 1:
        # (opens - closes) / (i + 1): its sign and its zeros are exact
        balance = rasp.numerical(rasp.Aggregate(up_to_self, step, default=0)).named("balance")
        problem = rasp.numerical(balance < 0).named("negative")
    else:
        balance = rasp.SumAggregate(up_to_self, step).named("depth")  # exact integers
        is_opener = rasp.Map(lambda t: t in openers, rasp.tokens).named("is_opener")
        closes = common.indicator(rasp.tokens, lambda t: t in closers, "closes")
        # an opener and the closer that matches it sit at the same level: the depth after
        # the opener, the depth before the closer
        level = rasp.numerical(balance + closes).named("level")
        is_bracket = rasp.Map(lambda t: t in openers or t in closers, rasp.tokens)
        same_level = (  # other tokens take no part in the matching
            rasp.Select(level, level, _C.EQ)
            & rasp.Select(is_bracket.named("is_bracket"), rasp.Full(True), _C.EQ)
        ).named("same_level")
        rank = rasp.SelectorWidth(same_level & up_to_self).named("depth_index")
        # brackets at one level alternate opener, closer, ...: a closer's opener is the
        # bracket just before it at its level
        partner = (
            rasp.Select(is_opener, rasp.Full(True), _C.EQ)
            & same_level
            & rasp.Select(rank, rank - 1, _C.EQ)
        ).named("open_for_close")
        # "" where a bracket has no partner: no opener is "", and a map of None is None
        opener = rasp.Aggregate(partner, rasp.tokens, default="").named("matched_opener")
        mismatch = rasp.SequenceMap(
            lambda t, o: t in closers and closers[t] != o, rasp.tokens, opener
        ).named("mismatch")
        problem = rasp.numerical(
            rasp.SequenceMap(lambda bad, d: 1 if bad or d < 0 else 0, mismatch, balance)
        ).named("problem")
    seen = rasp.numerical(rasp.Aggregate(up_to_self, problem, default=0)).named("prev_problems")
    failed = rasp.categorical(seen > 0).named("had_problem")
    return rasp.SequenceMap(_ptf, failed, balance).named(f"dyck{len(pairs)}_ptf")


def make_dyck1_ptf() -> rasp.SOp:
    """Dyck-1 (``()``) per prefix: "T", "P" or "F" (see :func:`make_dyck_ptf`).

    Returns:
        A categorical S-op named ``"dyck1_ptf"``.

    >>> from attnsim import rasp
    >>> "".join(rasp.evaluate(make_dyck1_ptf(), list("(())())(")))
    'PPPTPTFF'
    """
    return make_dyck_ptf(["()"])


def make_dyck2_ptf() -> rasp.SOp:
    """Dyck-2 (``()`` and ``{}``) per prefix: "T", "P" or "F" (see :func:`make_dyck_ptf`).

    Returns:
        A categorical S-op named ``"dyck2_ptf"``.

    >>> from attnsim import rasp
    >>> "".join(rasp.evaluate(make_dyck2_ptf(), list("({)}")))
    'PPFF'
    """
    return make_dyck_ptf(["()", "{}"])


def make_dyck3_ptf() -> rasp.SOp:
    """Dyck-3 (``()``, ``{}``, ``[]``) per prefix: "T", "P" or "F" (see :func:`make_dyck_ptf`).

    Returns:
        A categorical S-op named ``"dyck3_ptf"``.

    >>> from attnsim import rasp
    >>> "".join(rasp.evaluate(make_dyck3_ptf(), list("[{}]()")))
    'PPPTPT'
    """
    return make_dyck_ptf(["()", "{}", "[]"])


def count(sop: rasp.SOp, atom: Any) -> rasp.SOp:
    """How many times ``atom`` occurs in ``sop``, at every position.

    The RASP paper's construction: the fraction of positions holding ``atom`` (one head over
    all positions) times the length, rounded. In causal mode it counts the prefix.

    Args:
        sop: the S-op to count in.
        atom: the value to count.

    Returns:
        A categorical S-op of integers named ``"count_<atom>"``.

    >>> from attnsim import rasp
    >>> rasp.evaluate(count(rasp.tokens, "a"), list("banana"))
    [3, 3, 3, 3, 3, 3]
    """
    common.check_sop(sop, "count")
    everyone = rasp.Select(rasp.indices, rasp.indices, _C.TRUE).named("full_s")
    hits = common.indicator(sop, lambda x: x == atom, f"is_{atom}")
    frac = rasp.numerical(rasp.Aggregate(everyone, hits, default=0)).named(f"frac_{atom}")
    total = rasp.numerical(frac * rasp.numerical(rasp.length))
    return rasp.Map(round, total, simplify=False).named(f"count_{atom}")


def contains(sop: rasp.SOp, atom: Any) -> rasp.SOp:
    """Whether ``atom`` occurs anywhere in ``sop`` (the same answer at every position).

    Args:
        sop: the S-op to search.
        atom: the value to look for.

    Returns:
        A categorical S-op of True/False named ``"contains_<atom>"``.

    >>> from attnsim import rasp
    >>> rasp.evaluate(contains(rasp.tokens, "x"), list("abx")), rasp.evaluate(
    ...     contains(rasp.tokens, "x"), list("ab"))
    ([True, True, True], [False, False])
    """
    common.check_sop(sop, "contains")
    everyone = rasp.Select(rasp.indices, rasp.indices, _C.TRUE).named("full_s")
    hits = common.indicator(sop, lambda x: x == atom, f"is_{atom}")
    frac = rasp.numerical(rasp.Aggregate(everyone, hits, default=0)).named(f"frac_{atom}")
    return rasp.categorical(frac > 0).named(f"contains_{atom}")


def shift(sop: rasp.SOp, n: int, filler: Any = None) -> rasp.SOp:
    """``sop`` moved ``n`` positions to the right, ``filler`` where nothing arrives.

    Args:
        sop: the S-op to shift.
        n: how far (negative: to the left).
        filler: the value of positions with no source.

    Returns:
        An S-op named ``"shift_<n>"`` (numerical when ``sop`` is).

    >>> from attnsim import rasp
    >>> rasp.evaluate(shift(rasp.tokens, 1, "_"), list("abc"))
    ['_', 'a', 'b']
    >>> rasp.evaluate(shift(rasp.tokens, -1, "_"), list("abc"))
    ['b', 'c', '_']
    """
    common.check_sop(sop, "shift")
    source = rasp.Select(rasp.indices + n, rasp.indices, _C.EQ).named(f"select_shift_{n}")
    return common.aggregate(source, sop, default=filler).named(f"shift_{n}")


def _has_focus(selector: rasp.Selector, name: str) -> rasp.SOp:
    """True where the query selects at least one key (one head)."""
    ones = rasp.numerical(rasp.Full(1))
    hits = rasp.numerical(rasp.Aggregate(selector, ones, default=0))
    return rasp.categorical(hits > 0).named(name)


def _mark_instance(sop: rasp.SOp, val: Any, direction: _C, name: str) -> rasp.SOp:
    has_val = rasp.categorical(sop == val).named("has_val")
    elsewhere_val = rasp.Select(sop, rasp.Full(val), _C.EQ) & rasp.Select(
        rasp.indices, rasp.indices, direction
    )
    other = _has_focus(elsewhere_val, "has_other_val")
    return rasp.SequenceMap(lambda h, o: h and not o, has_val, other).named(name)


def mark_first_instance(sop: rasp.SOp, val: Any) -> rasp.SOp:
    """True only at the first position where ``sop`` equals ``val``.

    Args:
        sop: the S-op to search.
        val: the value to find.

    Returns:
        A categorical S-op of True/False named ``"mark_first_instance"``.

    >>> from attnsim import rasp
    >>> rasp.evaluate(mark_first_instance(rasp.tokens, "a"), list("babab"))
    [False, True, False, False, False]
    """
    common.check_sop(sop, "mark_first_instance")
    return _mark_instance(sop, val, _C.LT, "mark_first_instance")


def mark_last_instance(sop: rasp.SOp, val: Any) -> rasp.SOp:
    """True only at the last position where ``sop`` equals ``val``.

    Args:
        sop: the S-op to search.
        val: the value to find.

    Returns:
        A categorical S-op of True/False named ``"mark_last_instance"``.

    >>> from attnsim import rasp
    >>> rasp.evaluate(mark_last_instance(rasp.tokens, "a"), list("babab"))
    [False, False, False, True, False]
    """
    common.check_sop(sop, "mark_last_instance")
    return _mark_instance(sop, val, _C.GT, "mark_last_instance")


def select_from_first(sop: rasp.SOp, val: Any) -> rasp.Selector:
    """A selector in which every query selects the first position where ``sop`` is ``val``.

    Args:
        sop: the S-op to search.
        val: the value to find.

    Returns:
        A selector (empty rows when ``val`` does not occur).

    >>> from attnsim import rasp
    >>> at_first_a = select_from_first(rasp.tokens, "a")
    >>> rasp.evaluate(rasp.Aggregate(at_first_a, rasp.indices), list("babab"))
    [1, 1, 1, 1, 1]
    """
    marks = mark_first_instance(sop, val)
    return rasp.Select(marks, rasp.Full(True), _C.EQ).named("select_from_first")


def select_from_last(sop: rasp.SOp, val: Any) -> rasp.Selector:
    """A selector in which every query selects the last position where ``sop`` is ``val``.

    Args:
        sop: the S-op to search.
        val: the value to find.

    Returns:
        A selector (empty rows when ``val`` does not occur).

    >>> from attnsim import rasp
    >>> at_last_a = select_from_last(rasp.tokens, "a")
    >>> rasp.evaluate(rasp.Aggregate(at_last_a, rasp.indices), list("babab"))
    [3, 3, 3, 3, 3]
    """
    marks = mark_last_instance(sop, val)
    return rasp.Select(marks, rasp.Full(True), _C.EQ).named("select_from_last")


def _elementwise_extreme(a: rasp.SOp, b: rasp.SOp, kind: str) -> rasp.SOp:
    common.check_sop(a, kind)
    common.check_sop(b, kind)
    if kind == "minimum":
        out = rasp.SequenceMap(lambda x, y: x if x < y else y, a, b)
        out._op = rasp.ElementwiseOp("minimum", (), np.minimum)
    else:
        out = rasp.SequenceMap(lambda x, y: x if x > y else y, a, b)
        out._op = rasp.ElementwiseOp("maximum", (), np.maximum)
    if rasp.is_numerical(a) and rasp.is_numerical(b):
        out = rasp.numerical(out)
    return out.named(kind)


def minimum(a: rasp.SOp, b: rasp.SOp) -> rasp.SOp:
    """The smaller of ``a`` and ``b`` at each position (RASP's ``min``).

    Args:
        a: an S-op of ordered values.
        b: another.

    Returns:
        An S-op named ``"minimum"`` (numerical when both are).

    >>> from attnsim import rasp
    >>> rasp.evaluate(minimum(rasp.tokens, rasp.indices), [3, 0, 5])
    [0, 0, 2]
    """
    return _elementwise_extreme(a, b, "minimum")


def maximum(a: rasp.SOp, b: rasp.SOp) -> rasp.SOp:
    """The larger of ``a`` and ``b`` at each position (RASP's ``max``).

    Args:
        a: an S-op of ordered values.
        b: another.

    Returns:
        An S-op named ``"maximum"`` (numerical when both are).

    >>> from attnsim import rasp
    >>> rasp.evaluate(maximum(rasp.tokens, rasp.indices), [3, 0, 5])
    [3, 1, 5]
    """
    return _elementwise_extreme(a, b, "maximum")


def load_from_location(sop: rasp.SOp, location: rasp.SOp) -> rasp.SOp:
    """A gather: position i reads ``sop`` at position ``location[i]``.

    Args:
        sop: the values to read.
        location: an S-op of positions (None where the position does not exist).

    Returns:
        An S-op named ``"load_from_location"`` (numerical when ``sop`` is).

    >>> from attnsim import rasp
    >>> rasp.evaluate(load_from_location(rasp.tokens, rasp.tokens), [2, 0, 3, 1])
    [3, 2, 1, 0]
    """
    common.check_sop(sop, "load_from_location")
    common.check_sop(location, "load_from_location (location)")
    at = rasp.Select(rasp.indices, location, _C.EQ).named("select_location")
    return common.aggregate(at, sop).named("load_from_location")
