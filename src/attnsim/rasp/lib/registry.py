"""The registry of ready-to-run library programs (the CLI's ``attnsim info`` and ``demo``).

``PROGRAMS`` maps a function's name to a :class:`LibraryProgram`: a zero-argument factory, an
example input, the vocabulary and the maximum sequence length.

>>> from attnsim import rasp
>>> entry = PROGRAMS["make_hist"]
>>> rasp.evaluate(entry.factory(), entry.example)
[2, 3, 3, 1, 2, 3]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

# the language, under the module name tracr programs use for it
from attnsim.rasp import expr as rasp
from attnsim.rasp.lib import original as O
from attnsim.rasp.lib import tracr as T

__all__ = ["LibraryProgram", "PROGRAMS"]


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
    "make_length": LibraryProgram(T.make_length, list("abc"), _LETTERS, 8),
    "make_reverse": LibraryProgram(lambda: T.make_reverse(rasp.tokens), list("abcd"), _LETTERS, 8),
    "make_pair_balance": LibraryProgram(
        lambda: T.make_pair_balance(rasp.tokens, "(", ")"), list("(a)(()"), _PARENS, 8
    ),
    "make_shuffle_dyck": LibraryProgram(
        lambda: T.make_shuffle_dyck(["()", "{}", "[]"]), list("([{)]}"), tuple("(){}[]"), 8
    ),
    "make_shuffle_dyck2": LibraryProgram(T.make_shuffle_dyck2, list("({)}"), tuple("(){}"), 8),
    "make_hist": LibraryProgram(T.make_hist, list("abbcab"), _LETTERS, 8),
    "make_sort_unique": LibraryProgram(
        lambda: T.make_sort_unique(rasp.tokens, rasp.tokens), [3, 1, 4, 2], _DIGITS, 8
    ),
    "make_sort": LibraryProgram(
        lambda: T.make_sort(rasp.tokens, rasp.tokens, max_seq_len=8, min_key=1),
        [3, 1, 3, 2],
        _DIGITS,
        8,
    ),
    "make_sort_freq": LibraryProgram(lambda: T.make_sort_freq(8), [2, 4, 2, 1], _DIGITS, 8),
    "make_frac_prevs": LibraryProgram(
        lambda: T.make_frac_prevs(rasp.tokens == "a"), list("abaa"), _LETTERS, 8
    ),
    "shift_by": LibraryProgram(lambda: T.shift_by(1, rasp.tokens), list("abcd"), _LETTERS, 8),
    "detect_pattern": LibraryProgram(
        lambda: T.detect_pattern(rasp.tokens, "ab"), list("aaba"), _LETTERS, 8
    ),
    "make_count_less_freq": LibraryProgram(
        lambda: T.make_count_less_freq(2), list("aaabbc"), _LETTERS, 8
    ),
    "make_count": LibraryProgram(lambda: T.make_count(rasp.tokens, "a"), list("abca"), _LETTERS, 8),
    "make_nary_sequencemap": LibraryProgram(
        lambda: T.make_nary_sequencemap(
            lambda x, y, z: x + y - z, rasp.tokens, rasp.tokens, rasp.indices
        ),
        [1, 2, 3],
        _DIGITS,
        8,
    ),
    "sort": LibraryProgram(lambda: O.sort(rasp.tokens, rasp.tokens), list("bcab"), _LETTERS, 8),
    "sort_by_most_freq": LibraryProgram(
        lambda: O.sort_by_most_freq(rasp.tokens), list("abbccc"), _LETTERS, 8
    ),
    "make_dyck1_ptf": LibraryProgram(O.make_dyck1_ptf, list("(())())("), _PARENS, 16),
    "make_dyck2_ptf": LibraryProgram(O.make_dyck2_ptf, list("({})(}"), tuple("(){}"), 16),
    "make_dyck3_ptf": LibraryProgram(O.make_dyck3_ptf, list("[{}]()"), tuple("(){}[]"), 16),
    "count": LibraryProgram(lambda: O.count(rasp.tokens, "a"), list("abca"), _LETTERS, 8),
    "contains": LibraryProgram(lambda: O.contains(rasp.tokens, "d"), list("abcd"), _LETTERS, 8),
    "shift": LibraryProgram(lambda: O.shift(rasp.tokens, 1, "_"), list("abcd"), _LETTERS, 8),
    "mark_first_instance": LibraryProgram(
        lambda: O.mark_first_instance(rasp.tokens, "a"), list("babab"), _LETTERS, 8
    ),
    "mark_last_instance": LibraryProgram(
        lambda: O.mark_last_instance(rasp.tokens, "a"), list("babab"), _LETTERS, 8
    ),
    "minimum": LibraryProgram(lambda: O.minimum(rasp.tokens, rasp.indices), [3, 0, 5], _DIGITS, 8),
    "maximum": LibraryProgram(lambda: O.maximum(rasp.tokens, rasp.indices), [3, 0, 5], _DIGITS, 8),
    "load_from_location": LibraryProgram(
        lambda: O.load_from_location(rasp.tokens, rasp.tokens), [2, 0, 3, 1], _DIGITS, 8
    ),
}
