"""Classic RASP programs: tracr's library and the library of the original RASP paper.

Two families live here, each under the names its users know:

- tracr's ``lib`` (``make_length``, ``make_hist``, ``make_sort``, ``shift_by``, ...): the same
  names, signatures and outputs, so a tracr program ports by changing its imports;
- the library of the original RASP paper (Weiss et al., 2021): ``sort`` with a composite
  selector that breaks ties by position, ``sort_by_most_freq``, the Dyck-k recognisers with
  ``"T"``/``"F"``/``"P"`` output (``make_dyck1_ptf`` ...), ``count``, ``contains``, ``shift``,
  ``mark_first_instance``/``mark_last_instance``, ``select_from_first``/``select_from_last``,
  ``minimum``/``maximum`` and ``load_from_location``.

``PROGRAMS`` maps a function's name to a ready-to-run instance: a zero-argument factory, an
example input, the vocabulary and the maximum sequence length (the CLI reads it).

>>> from attnsim import rasp
>>> from attnsim.rasp import library
>>> rasp.evaluate(library.make_hist(), ["a", "b", "a", "c"])
[2, 1, 2, 1]
>>> rasp.evaluate(library.sort(rasp.tokens, rasp.tokens), [3, 1, 3, 2])
[1, 2, 3, 3]
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

# the language, under the module name tracr programs use for it
from attnsim.rasp import expr as rasp

__all__ = [
    # tracr's library
    "make_length",
    "make_reverse",
    "make_pair_balance",
    "make_shuffle_dyck",
    "make_shuffle_dyck2",
    "make_hist",
    "make_sort_unique",
    "make_sort",
    "make_sort_freq",
    "make_frac_prevs",
    "shift_by",
    "detect_pattern",
    "make_count_less_freq",
    "make_count",
    "make_nary_sequencemap",
    # the original RASP library
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
    # the registry
    "LibraryProgram",
    "PROGRAMS",
]

_C = rasp.Comparison


def _aggregate(selector: rasp.Selector, sop: rasp.SOp, default: Any = None) -> rasp.SOp:
    """An Aggregate that is numerical when the values are (a mean of one selected number)."""
    out = rasp.Aggregate(selector, sop, default=default)
    return rasp.numerical(out) if rasp.is_numerical(sop) else out


def _indicator(sop: rasp.SOp, test: Callable[[Any], bool], name: str) -> rasp.SOp:
    """A numerical 0/1 S-op: 1 where ``test`` holds."""
    return rasp.numerical(rasp.Map(lambda x: 1 if test(x) else 0, sop)).named(name)


def _check_sop(obj: Any, what: str) -> None:
    if not isinstance(obj, rasp.SOp):
        raise TypeError(
            f"{what} expects a RASP S-op (rasp.tokens, rasp.indices, a Map, ...), got "
            f"{type(obj).__name__} {obj!r}; wrap a constant with rasp.Full(value)"
        )


def _check_pairs(pairs: Sequence[str], what: str) -> None:
    if isinstance(pairs, str) or len(pairs) == 0:
        raise ValueError(
            f"{what} expects a list of bracket pairs such as ['()', '{{}}'], got {pairs!r}"
        )
    for pair in pairs:
        if not isinstance(pair, str) or len(pair) != 2 or pair[0] == pair[1]:
            raise ValueError(
                f"{what}: each bracket pair must be a string of two different characters "
                f"(opener, closer) such as '()', got {pair!r}"
            )
    tokens = [c for pair in pairs for c in pair]
    if len(set(tokens)) != len(tokens):
        raise ValueError(f"{what}: a bracket character appears in two pairs: {list(pairs)!r}")


# ======================================================================================
# tracr's library
# ======================================================================================


def make_length() -> rasp.SOp:
    """The sequence length at every position, counted by one attention head.

    Every query selects every key; the selector width is the length. (``rasp.length`` is the
    same value as a primitive.)

    Returns:
        A categorical S-op named ``"length"``.

    >>> from attnsim import rasp
    >>> rasp.evaluate(make_length(), ["a", "b", "c"])
    [3, 3, 3]
    """
    everyone = rasp.Select(rasp.tokens, rasp.tokens, _C.TRUE).named("all_true_selector")
    return rasp.SelectorWidth(everyone).named("length")


def make_reverse(sop: rasp.SOp) -> rasp.SOp:
    """``sop`` in reverse order.

    Position i reads position ``length - 1 - i``.

    Args:
        sop: the S-op to reverse.

    Returns:
        An S-op named ``"reverse"`` (numerical when ``sop`` is).

    >>> from attnsim import rasp
    >>> rasp.evaluate(make_reverse(rasp.tokens), list("abcd"))
    ['d', 'c', 'b', 'a']
    """
    _check_sop(sop, "make_reverse")
    mirror = (rasp.length - rasp.indices - 1).named("opp_idx")
    flip = rasp.Select(rasp.indices, mirror, _C.EQ).named("reverse_selector")
    return _aggregate(flip, sop).named("reverse")


def make_frac_prevs(bools: rasp.SOp) -> rasp.SOp:
    """The fraction of positions up to and including each one where ``bools`` is true.

    Args:
        bools: an S-op of booleans (or 0/1 numbers); it is read numerically.

    Returns:
        A numerical S-op named ``"frac_prevs"``.

    >>> from attnsim import rasp
    >>> rasp.evaluate(make_frac_prevs(rasp.tokens == "x"), ["x", "a", "x", "a"])
    [1.0, 0.5, 0.6666666666666666, 0.5]
    """
    _check_sop(bools, "make_frac_prevs")
    prevs = rasp.Select(rasp.indices, rasp.indices, _C.LEQ).named("prevs")
    mean = rasp.Aggregate(prevs, rasp.numerical(bools), default=0)
    return rasp.numerical(mean).named("frac_prevs")


def make_pair_balance(sop: rasp.SOp, open_token: Any, close_token: Any) -> rasp.SOp:
    """The running balance of an opening and a closing token, as a fraction of the prefix.

    At position i: (number of ``open_token`` - number of ``close_token`` in ``sop[:i+1]``)
    divided by i + 1.

    Args:
        sop: the S-op to read (usually ``rasp.tokens``).
        open_token: the opening token.
        close_token: the closing token.

    Returns:
        A numerical S-op named ``"pair_balance"``.

    >>> from attnsim import rasp
    >>> rasp.evaluate(make_pair_balance(rasp.tokens, "(", ")"), list("(()"))
    [1.0, 1.0, 0.3333333333333333]
    """
    _check_sop(sop, "make_pair_balance")
    opens = make_frac_prevs(sop == open_token).named("opens")
    closes = make_frac_prevs(sop == close_token).named("closes")
    balance = rasp.LinearSequenceMap(opens, closes, 1, -1)
    return rasp.numerical(balance).named("pair_balance")


def make_shuffle_dyck(pairs: list[str]) -> rasp.SOp:
    """Whether the input is in shuffle-Dyck-k for the given bracket pairs.

    Shuffle-Dyck-k: every bracket kind is balanced on its own (kinds may interleave). The
    answer (True/False) is the same at every position.

    Args:
        pairs: bracket pairs, each a two-character string ``opener + closer``, e.g. ``["()"]``.

    Returns:
        A categorical S-op named ``"shuffle_dyck"``.

    Raises:
        ValueError: no pairs, or a pair that is not two different characters.

    >>> from attnsim import rasp
    >>> program = make_shuffle_dyck(["()", "{}"])
    >>> rasp.evaluate(program, list("({)}")), rasp.evaluate(program, list("(}"))
    ([True, True, True, True], [False, False])
    """
    _check_pairs(pairs, "make_shuffle_dyck")
    balances = [
        make_pair_balance(rasp.tokens, pair[0], pair[1]).named(f"balance_{pair}") for pair in pairs
    ]
    # a negative running balance anywhere means a closer came before its opener
    negatives = [rasp.numerical(b < 0) for b in balances]
    any_negative = rasp.numerical(functools.reduce(lambda a, b: a | b, negatives))
    everyone = rasp.Select(rasp.indices, rasp.indices, _C.TRUE).named("select_all")
    has_neg = rasp.numerical(
        rasp.Aggregate(everyone, any_negative.named("any_negative"), default=0)
    )
    # every balance must be back at zero at the last position
    zeros = [rasp.categorical(b == 0) for b in balances]
    all_zero = functools.reduce(lambda a, b: a & b, zeros).named("all_zero")
    last = rasp.Select(rasp.indices, rasp.length - 1, _C.EQ).named("select_last")
    last_zero = rasp.Aggregate(last, all_zero).named("last_zero")
    no_neg = (~has_neg.named("has_neg")).named("not_has_neg")
    return (last_zero & no_neg).named("shuffle_dyck")


def make_shuffle_dyck2() -> rasp.SOp:
    """Shuffle-Dyck-2 over ``()`` and ``{}`` (see :func:`make_shuffle_dyck`).

    Returns:
        A categorical S-op named ``"shuffle_dyck2"``.

    >>> from attnsim import rasp
    >>> rasp.evaluate(make_shuffle_dyck2(), list("{(})"))
    [True, True, True, True]
    """
    return make_shuffle_dyck(["()", "{}"]).named("shuffle_dyck2")


def make_hist() -> rasp.SOp:
    """How often each position's token occurs in the whole input.

    Returns:
        A categorical S-op named ``"hist"``.

    >>> from attnsim import rasp
    >>> rasp.evaluate(make_hist(), list("abbc"))
    [1, 2, 2, 1]
    """
    same = rasp.Select(rasp.tokens, rasp.tokens, _C.EQ).named("same_tok")
    return rasp.SelectorWidth(same).named("hist")


def make_sort_unique(vals: rasp.SOp, keys: rasp.SOp) -> rasp.SOp:
    """``vals`` ordered by ascending ``keys``; the keys must be distinct.

    Each position counts the keys smaller than its own (its target position), then each
    output position reads the value whose target it is. Equal keys collide: use
    :func:`make_sort` or :func:`sort` when keys may repeat.

    Args:
        vals: the values to reorder.
        keys: distinct, ordered keys.

    Returns:
        An S-op named ``"sort"`` (numerical when ``vals`` is).

    >>> from attnsim import rasp
    >>> rasp.evaluate(make_sort_unique(rasp.tokens, rasp.tokens), [5, 2, 9, 1])
    [1, 2, 5, 9]
    """
    _check_sop(vals, "make_sort_unique (vals)")
    _check_sop(keys, "make_sort_unique (keys)")
    smaller = rasp.Select(keys, keys, _C.LT).named("smaller")
    target_pos = rasp.SelectorWidth(smaller).named("target_pos")
    sel_new = rasp.Select(target_pos, rasp.indices, _C.EQ).named("sel_new")
    return _aggregate(sel_new, vals).named("sort")


def make_sort(vals: rasp.SOp, keys: rasp.SOp, *, max_seq_len: int, min_key: float) -> rasp.SOp:
    """``vals`` ordered by ascending numeric ``keys``, which may repeat (a stable sort).

    Ties are broken by position: key ``k`` at index ``i`` becomes
    ``k + min_key * i / max_seq_len``. This is exact when distinct keys differ by at least
    ``min_key`` and inputs are at most ``max_seq_len`` long.

    Args:
        vals: the values to reorder.
        keys: numeric keys.
        max_seq_len: the longest input the program will see.
        min_key: the smallest gap between two distinct keys.

    Returns:
        An S-op named ``"sort"`` (numerical when ``vals`` is).

    Raises:
        ValueError: ``max_seq_len`` or ``min_key`` is not positive.

    >>> from attnsim import rasp
    >>> rasp.evaluate(make_sort(rasp.tokens, rasp.tokens, max_seq_len=5, min_key=1), [2, 4, 1, 2])
    [1, 2, 2, 4]
    """
    _check_sop(vals, "make_sort (vals)")
    _check_sop(keys, "make_sort (keys)")
    if not max_seq_len > 0 or not min_key > 0:
        raise ValueError(
            f"make_sort needs max_seq_len > 0 and min_key > 0, got max_seq_len={max_seq_len!r}, "
            f"min_key={min_key!r}"
        )
    offset = min_key / max_seq_len
    unique_keys = rasp.SequenceMap(lambda k, i: k + offset * i, keys, rasp.indices)
    return make_sort_unique(vals, unique_keys.named("keys"))


def make_sort_freq(max_seq_len: int) -> rasp.SOp:
    """The tokens ordered by descending frequency (stable among equal frequencies).

    Args:
        max_seq_len: the longest input the program will see.

    Returns:
        A categorical S-op named ``"sort_freq"``.

    >>> from attnsim import rasp
    >>> rasp.evaluate(make_sort_freq(max_seq_len=5), [2, 4, 2, 1])
    [2, 2, 4, 1]
    """
    neg_hist = (-1 * make_hist()).named("hist")
    return make_sort(rasp.tokens, neg_hist, max_seq_len=max_seq_len, min_key=1).named("sort_freq")


def shift_by(offset: int, /, sop: rasp.SOp) -> rasp.SOp:
    """``sop`` moved ``offset`` positions to the right; the first ``offset`` positions get None.

    Args:
        offset: how far to shift (a negative offset shifts left).
        sop: the S-op to shift.

    Returns:
        An S-op named ``"shift_by(offset)"``.

    >>> from attnsim import rasp
    >>> rasp.evaluate(shift_by(2, rasp.tokens), list("abcd"))
    [None, None, 'a', 'b']
    """
    _check_sop(sop, "shift_by")
    source = rasp.Select(rasp.indices, rasp.indices, lambda k, q: q == k + offset)
    return _aggregate(source.named(f"select_off_by_{offset}"), sop).named(f"shift_by({offset})")


def _and_keep_none(x: Any, y: Any) -> Any:
    # Python's `and`: an unknown left operand (None, before the pattern fits) stays unknown
    return x and y


def detect_pattern(sop: rasp.SOp, pattern: Sequence[Any]) -> rasp.SOp:
    """Marks the positions where ``pattern`` ends in ``sop``.

    The first ``len(pattern) - 1`` positions, where the pattern cannot fit, are None.

    Args:
        sop: the S-op to search.
        pattern: a non-empty sequence of values (a string is a sequence of characters).

    Returns:
        A categorical S-op of True/False/None named ``"detect_pattern_<pattern>"``.

    Raises:
        ValueError: ``pattern`` is empty.

    >>> from attnsim import rasp
    >>> rasp.evaluate(detect_pattern(rasp.tokens, "ab"), list("aaba"))
    [None, False, True, False]
    """
    _check_sop(sop, "detect_pattern")
    if len(pattern) == 0:
        raise ValueError("detect_pattern expects a non-empty pattern, got an empty one")
    detected: rasp.SOp | None = None
    for j, element in enumerate(pattern):
        hit = sop == element
        back = len(pattern) - 1 - j  # element j must sit this far before the pattern's end
        if back:
            hit = shift_by(back, hit)
        detected = hit if detected is None else rasp.SequenceMap(_and_keep_none, detected, hit)
    return detected.named(f"detect_pattern_{pattern}")


def make_count_less_freq(n: int) -> rasp.SOp:
    """How many positions hold a token that occurs at most ``n`` times in the input.

    Args:
        n: the frequency threshold.

    Returns:
        A categorical S-op named ``"count_less_freq"`` (the same value everywhere).

    >>> from attnsim import rasp
    >>> rasp.evaluate(make_count_less_freq(2), list("aaabbc"))
    [3, 3, 3, 3, 3, 3]
    """
    hist = make_hist().named("hist")
    rare = rasp.Select(hist, hist, lambda k, q: k <= n).named("select_less")
    return rasp.SelectorWidth(rare).named("count_less_freq")


def make_count(sop: rasp.SOp, token: Any) -> rasp.SOp:
    """How many times ``token`` occurs in ``sop``, at every position.

    Args:
        sop: the S-op to count in.
        token: the value to count.

    Returns:
        A categorical S-op named ``"count_<token>"``.

    >>> from attnsim import rasp
    >>> rasp.evaluate(make_count(rasp.tokens, "a"), list("cabc"))
    [1, 1, 1, 1]
    """
    _check_sop(sop, "make_count")
    hits = rasp.Select(sop, sop, lambda k, q: k == token).named(f"select_{token}")
    return rasp.SelectorWidth(hits).named(f"count_{token}")


def make_nary_sequencemap(f: Callable[..., Any], *sops: rasp.SOp) -> rasp.SOp:
    """Applies an n-argument function position by position to n S-ops.

    Args:
        f: a function of ``len(sops)`` values.
        *sops: one S-op per argument of ``f`` (at least one).

    Returns:
        One SequenceMap over all ``sops`` (a Map when there is a single S-op).

    Raises:
        TypeError: no S-ops, or an argument that is not an S-op.

    >>> from attnsim import rasp
    >>> program = make_nary_sequencemap(lambda x, y, z: x + y - z, rasp.tokens, rasp.tokens,
    ...                                 rasp.indices)
    >>> rasp.evaluate(program, [1, 2, 3])
    [2, 3, 4]
    """
    if not sops:
        raise TypeError("make_nary_sequencemap expects at least one S-op after the function")
    for i, sop in enumerate(sops):
        _check_sop(sop, f"make_nary_sequencemap (argument {i + 1})")
    if len(sops) == 1:
        return rasp.Map(f, sops[0])
    return rasp.SequenceMap(f, *sops)


# ======================================================================================
# The original RASP library (Weiss et al., 2021)
# ======================================================================================


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
    _check_sop(vals, "sort (vals)")
    _check_sop(keys, "sort (keys)")
    earlier = rasp.Select(keys, keys, _C.LT) | (
        rasp.Select(keys, keys, _C.EQ) & rasp.Select(rasp.indices, rasp.indices, _C.LT)
    )
    target = rasp.SelectorWidth(earlier.named("select_earlier_in_sorted")).named("target_pos")
    read = rasp.Select(target, rasp.indices, _C.EQ).named("select_new_val")
    return _aggregate(read, vals).named("sort")


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
    _check_sop(sop, "sort_by_most_freq")
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
    _check_pairs(pairs, "make_dyck_ptf")
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
        closes = _indicator(rasp.tokens, lambda t: t in closers, "closes")
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
        opener = rasp.Aggregate(partner, rasp.tokens).named("matched_opener")
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
    _check_sop(sop, "count")
    everyone = rasp.Select(rasp.indices, rasp.indices, _C.TRUE).named("full_s")
    hits = _indicator(sop, lambda x: x == atom, f"is_{atom}")
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
    _check_sop(sop, "contains")
    everyone = rasp.Select(rasp.indices, rasp.indices, _C.TRUE).named("full_s")
    hits = _indicator(sop, lambda x: x == atom, f"is_{atom}")
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
    _check_sop(sop, "shift")
    source = rasp.Select(rasp.indices + n, rasp.indices, _C.EQ).named(f"select_shift_{n}")
    return _aggregate(source, sop, default=filler).named(f"shift_{n}")


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
    _check_sop(sop, "mark_first_instance")
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
    _check_sop(sop, "mark_last_instance")
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
    _check_sop(a, kind)
    _check_sop(b, kind)
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
    _check_sop(sop, "load_from_location")
    _check_sop(location, "load_from_location (location)")
    at = rasp.Select(rasp.indices, location, _C.EQ).named("select_location")
    return _aggregate(at, sop).named("load_from_location")


# ======================================================================================
# The registry of ready-to-run programs
# ======================================================================================


class LibraryProgram(NamedTuple):
    """A library program instance the CLI can show and run."""

    factory: Callable[[], rasp.SOp]  # builds the program with its default arguments
    example: list  # an input to evaluate it on
    vocab: tuple  # the tokens it accepts
    max_seq_len: int  # the longest input it is meant for


_LETTERS = ("a", "b", "c", "d")
_DIGITS = (0, 1, 2, 3, 4, 5)
_PARENS = ("(", ")", "a", "b")

PROGRAMS: dict[str, LibraryProgram] = {
    "make_length": LibraryProgram(make_length, list("abc"), _LETTERS, 8),
    "make_reverse": LibraryProgram(lambda: make_reverse(rasp.tokens), list("abcd"), _LETTERS, 8),
    "make_pair_balance": LibraryProgram(
        lambda: make_pair_balance(rasp.tokens, "(", ")"), list("(a)(()"), _PARENS, 8
    ),
    "make_shuffle_dyck": LibraryProgram(
        lambda: make_shuffle_dyck(["()", "{}", "[]"]), list("([{)]}"), tuple("(){}[]"), 8
    ),
    "make_shuffle_dyck2": LibraryProgram(make_shuffle_dyck2, list("({)}"), tuple("(){}"), 8),
    "make_hist": LibraryProgram(make_hist, list("abbcab"), _LETTERS, 8),
    "make_sort_unique": LibraryProgram(
        lambda: make_sort_unique(rasp.tokens, rasp.tokens), [3, 1, 4, 2], _DIGITS, 8
    ),
    "make_sort": LibraryProgram(
        lambda: make_sort(rasp.tokens, rasp.tokens, max_seq_len=8, min_key=1),
        [3, 1, 3, 2],
        _DIGITS,
        8,
    ),
    "make_sort_freq": LibraryProgram(lambda: make_sort_freq(8), [2, 4, 2, 1], _DIGITS, 8),
    "make_frac_prevs": LibraryProgram(
        lambda: make_frac_prevs(rasp.tokens == "a"), list("abaa"), _LETTERS, 8
    ),
    "shift_by": LibraryProgram(lambda: shift_by(1, rasp.tokens), list("abcd"), _LETTERS, 8),
    "detect_pattern": LibraryProgram(
        lambda: detect_pattern(rasp.tokens, "ab"), list("aaba"), _LETTERS, 8
    ),
    "make_count_less_freq": LibraryProgram(
        lambda: make_count_less_freq(2), list("aaabbc"), _LETTERS, 8
    ),
    "make_count": LibraryProgram(lambda: make_count(rasp.tokens, "a"), list("abca"), _LETTERS, 8),
    "make_nary_sequencemap": LibraryProgram(
        lambda: make_nary_sequencemap(
            lambda x, y, z: x + y - z, rasp.tokens, rasp.tokens, rasp.indices
        ),
        [1, 2, 3],
        _DIGITS,
        8,
    ),
    "sort": LibraryProgram(lambda: sort(rasp.tokens, rasp.tokens), list("bcab"), _LETTERS, 8),
    "sort_by_most_freq": LibraryProgram(
        lambda: sort_by_most_freq(rasp.tokens), list("abbccc"), _LETTERS, 8
    ),
    "make_dyck1_ptf": LibraryProgram(make_dyck1_ptf, list("(())())("), _PARENS, 16),
    "make_dyck2_ptf": LibraryProgram(make_dyck2_ptf, list("({})(}"), tuple("(){}"), 16),
    "make_dyck3_ptf": LibraryProgram(make_dyck3_ptf, list("[{}]()"), tuple("(){}[]"), 16),
    "count": LibraryProgram(lambda: count(rasp.tokens, "a"), list("abca"), _LETTERS, 8),
    "contains": LibraryProgram(lambda: contains(rasp.tokens, "d"), list("abcd"), _LETTERS, 8),
    "shift": LibraryProgram(lambda: shift(rasp.tokens, 1, "_"), list("abcd"), _LETTERS, 8),
    "mark_first_instance": LibraryProgram(
        lambda: mark_first_instance(rasp.tokens, "a"), list("babab"), _LETTERS, 8
    ),
    "mark_last_instance": LibraryProgram(
        lambda: mark_last_instance(rasp.tokens, "a"), list("babab"), _LETTERS, 8
    ),
    "minimum": LibraryProgram(lambda: minimum(rasp.tokens, rasp.indices), [3, 0, 5], _DIGITS, 8),
    "maximum": LibraryProgram(lambda: maximum(rasp.tokens, rasp.indices), [3, 0, 5], _DIGITS, 8),
    "load_from_location": LibraryProgram(
        lambda: load_from_location(rasp.tokens, rasp.tokens), [2, 0, 3, 1], _DIGITS, 8
    ),
}
