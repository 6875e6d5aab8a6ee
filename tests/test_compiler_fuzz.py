"""Differential fuzzing: on random programs of the whole RASP language, the compiled model
agrees with the interpreter, or says clearly that it cannot compile or run the program.

The programs come from ``tests/fuzz_programs.py`` (every S-op and selector kind, numerical and
categorical, causal and not, several vocabularies); the compiler may refuse them. A refusal
counts only when it is a clear error (``fuzz_programs.is_clear_error``). Where the interpreter
raises on an input, the compiled model must raise too. The larger sweep is
``benchmarks/compiler_fuzz.py``.
"""

from __future__ import annotations

import pytest

from attnsim import rasp
from tests import fuzz_programs as fp

N_PROGRAMS = 300  # per attention mode: a few seconds on one core


def _report(tally: fp.Tally) -> str:
    lines = [f"{k}: {v}" for k, v in tally.bad_reasons.most_common(10)]
    lines += [f"--- {e['status']}: {e['reason']}\n{e['source']}" for e in tally.examples[:3]]
    return "\n".join(lines)


@pytest.mark.parametrize("attention, seed", [("hard", 1), ("softmax", 2)])
def test_random_programs_agree_or_refuse_clearly(attention, seed):
    tally = fp.fuzz(N_PROGRAMS, seed, attention)
    assert tally.drawn == N_PROGRAMS
    # not vacuous: most programs compile and run, and the language's constructs all occur
    assert tally.compiled >= N_PROGRAMS // 2
    assert tally.statuses["agreed"] + tally.statuses["agreed_by_error"] >= N_PROGRAMS // 2
    assert tally.disagreements == 0, _report(tally)
    assert tally.unclear_errors == 0, _report(tally)


# -- classes the fuzzer found (now fixed): each a minimal reproducer that must stay fixed --------
# More, each compared with the interpreter value by value, are in tests/test_fuzz_regressions.py.
FIXED_CLASSES = {
    "categorical aggregate of distinct values returns a value instead of raising": (
        rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.TRUE), rasp.tokens),
        ["a", "b"],
        ["b", "a"],
    ),
    "Select on incompatible value types compiles and returns a value": (
        rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.indices, rasp.Comparison.LT)),
        ["a"],
        ["a"],
    ),
    "a map giving NaN/inf for one vocab value poisons other positions": (
        rasp.log(rasp.numerical(rasp.tokens)) * 1 + rasp.numerical(rasp.indices),
        [0, 1, 2],
        [0, 1, 2],
    ),
    "a None token collides with 'no value'": (
        rasp.Map(lambda x: x is None, rasp.tokens),
        [None, 1],
        [None, 1],
    ),
}


@pytest.mark.parametrize("name", sorted(FIXED_CLASSES))
def test_fixed_class_reproducers(name):
    program, vocab, xs = FIXED_CLASSES[name]
    case = fp.FuzzCase(
        program=program,
        lines=("v0 = <see FIXED_CLASSES>",),
        kinds=("?",),
        vocab=vocab,
        vocab_kind="fixed class",
        max_seq_len=len(xs),
        causal=False,
        fixed_length=False,
        inputs=[xs],
        features=frozenset(),
    )
    for attention in ("hard", "softmax"):
        out = fp.check_case(case, attention)
        assert out.status in ("agreed", "agreed_by_error", "refused"), (attention, out)
