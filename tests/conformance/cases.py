"""The tracr conformance cases (../shared/conformance/tracr_cases.json) as runnable programs.

Each case in the JSON names its program by a short description (``"hist()"``,
``"sort(vals=tokens, keys=1 - indices, max_seq_len=5, min_key=1)"``); ``BUILDERS`` maps every
description to a function that builds that program from ``attnsim.library``. Other test
modules reuse the cases::

    from tests.conformance.cases import load_cases

    for case in load_cases():
        program = case["build"]()
        ...
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnsim import library, rasp

REPO_ROOT = Path(__file__).resolve().parents[2]
CASES_PATH = REPO_ROOT.parent / "shared" / "conformance" / "tracr_cases.json"
MISSING_REASON = (
    f"the conformance cases are not at {CASES_PATH}; check out the shared/ folder beside the "
    "repository to run them"
)

BUILDERS: dict[str, Callable[[], rasp.SOp]] = {
    "frac_prevs(tokens == 'l')": lambda: library.make_frac_prevs(rasp.tokens == "l"),
    "frac_prevs(tokens == '(')": lambda: library.make_frac_prevs(rasp.tokens == "("),
    "frac_prevs(tokens == ')')": lambda: library.make_frac_prevs(rasp.tokens == ")"),
    "shift_by(1, tokens)": lambda: library.shift_by(1, rasp.tokens),
    "shift_by(2, tokens)": lambda: library.shift_by(2, rasp.tokens),
    "detect_pattern(tokens, 'a')": lambda: library.detect_pattern(rasp.tokens, "a"),
    "detect_pattern(tokens, 'ab')": lambda: library.detect_pattern(rasp.tokens, "ab"),
    "detect_pattern(tokens, 'abc')": lambda: library.detect_pattern(rasp.tokens, "abc"),
    "reverse(tokens)": lambda: library.make_reverse(rasp.tokens),
    "length (categorical)": library.make_length,
    "length (numerical)": lambda: rasp.numerical(library.make_length()),
    "pair_balance(tokens, '(', ')')": lambda: library.make_pair_balance(rasp.tokens, "(", ")"),
    "shuffle_dyck(['()', '{}'])": lambda: library.make_shuffle_dyck(["()", "{}"]),
    "shuffle_dyck(['()', '{}', '[]'])": lambda: library.make_shuffle_dyck(["()", "{}", "[]"]),
    "hist()": library.make_hist,
    "sort_unique(vals=tokens, keys=tokens)": lambda: library.make_sort_unique(
        rasp.tokens, rasp.tokens
    ),
    "sort_unique(vals=tokens, keys=1 - indices)": lambda: library.make_sort_unique(
        rasp.tokens, 1 - rasp.indices
    ),
    "sort(vals=tokens, keys=tokens, max_seq_len=5, min_key=1)": lambda: library.make_sort(
        rasp.tokens, rasp.tokens, max_seq_len=5, min_key=1
    ),
    "sort(vals=tokens, keys=1 - indices, max_seq_len=5, min_key=1)": lambda: library.make_sort(
        rasp.tokens, 1 - rasp.indices, max_seq_len=5, min_key=1
    ),
    "sort_freq(max_seq_len=5)": lambda: library.make_sort_freq(max_seq_len=5),
    "count_less_freq(n=2) (categorical)": lambda: library.make_count_less_freq(2),
    "count_less_freq(n=2) (numerical)": lambda: rasp.numerical(library.make_count_less_freq(2)),
    "count(tokens, 'a')": lambda: library.make_count(rasp.tokens, "a"),
    "nary_sequencemap(lambda x, y, z: x + y - z, tokens, tokens, indices)": lambda: (
        library.make_nary_sequencemap(
            lambda x, y, z: x + y - z, rasp.tokens, rasp.tokens, rasp.indices
        )
    ),
    "nary_sequencemap(lambda x, y, z: x * y / z, indices, indices, tokens)": lambda: (
        library.make_nary_sequencemap(
            lambda x, y, z: x * y / z, rasp.indices, rasp.indices, rasp.tokens
        )
    ),
    "selector_width(select(tokens, tokens, TRUE))": lambda: rasp.SelectorWidth(
        rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE)
    ),
}


def load_cases(path: Path = CASES_PATH) -> list[dict[str, Any]]:
    """The cases of the JSON file, each with an added ``"build"``: a zero-argument callable.

    Keys of a case: name, program (the description), vocab, max_seq_len, input, expected,
    causal, build.

    Raises:
        FileNotFoundError: the JSON file is missing (tests skip with ``MISSING_REASON``).
        KeyError: a case describes a program that ``BUILDERS`` does not know.
    """
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    cases = []
    for case in data["cases"]:
        build = BUILDERS.get(case["program"])
        if build is None:
            raise KeyError(
                f"conformance case {case['name']!r} describes the program {case['program']!r}, "
                f"which tests/conformance/cases.py does not know; add it to BUILDERS"
            )
        cases.append({**case, "build": build})
    return cases
