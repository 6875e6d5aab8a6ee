"""tracr's ``lib``: the same names, signatures and outputs, so a tracr program ports by
changing its imports (``from attnsim import library as lib``).

>>> from attnsim import rasp
>>> rasp.evaluate(make_hist(), ["a", "b", "a", "c"])
[2, 1, 2, 1]
>>> rasp.evaluate(shift_by(1, rasp.tokens), list("abc"))
[None, 'a', 'b']
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

# the language, under the module name tracr programs use for it
from attnsim.rasp import expr as rasp
from attnsim.rasp.lib import common

__all__ = [
    "make_length",
    "make_reverse",
    "make_frac_prevs",
    "make_pair_balance",
    "make_shuffle_dyck",
    "make_shuffle_dyck2",
    "make_hist",
    "make_sort_unique",
    "make_sort",
    "make_sort_freq",
    "shift_by",
    "detect_pattern",
    "make_count_less_freq",
    "make_count",
    "make_nary_sequencemap",
]

_C = rasp.Comparison


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
    common.check_sop(sop, "make_reverse")
    mirror = (rasp.length - rasp.indices - 1).named("opp_idx")
    flip = rasp.Select(rasp.indices, mirror, _C.EQ).named("reverse_selector")
    return common.aggregate(flip, sop).named("reverse")


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
    common.check_sop(bools, "make_frac_prevs")
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
    common.check_sop(sop, "make_pair_balance")
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
    common.check_pairs(pairs, "make_shuffle_dyck")
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
    common.check_sop(vals, "make_sort_unique (vals)")
    common.check_sop(keys, "make_sort_unique (keys)")
    smaller = rasp.Select(keys, keys, _C.LT).named("smaller")
    target_pos = rasp.SelectorWidth(smaller).named("target_pos")
    sel_new = rasp.Select(target_pos, rasp.indices, _C.EQ).named("sel_new")
    return common.aggregate(sel_new, vals).named("sort")


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
    common.check_sop(vals, "make_sort (vals)")
    common.check_sop(keys, "make_sort (keys)")
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
    common.check_sop(sop, "shift_by")
    source = rasp.Select(rasp.indices, rasp.indices, lambda k, q: q == k + offset)
    return common.aggregate(source.named(f"select_off_by_{offset}"), sop).named(
        f"shift_by({offset})"
    )


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
    common.check_sop(sop, "detect_pattern")
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
    common.check_sop(sop, "make_count")
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
        common.check_sop(sop, f"make_nary_sequencemap (argument {i + 1})")
    if len(sops) == 1:
        return rasp.Map(f, sops[0])
    return rasp.SequenceMap(f, *sops)
