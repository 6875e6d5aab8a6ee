"""The compiled models against tracr's expected outputs on the shared conformance cases.

Every case is compiled with its own vocabulary and max_seq_len (``causal=True`` for the
``_causal`` cases) in both attention modes, and must reproduce tracr's expected output:
categorical values equal, numerical ones within 1e-9 (float64).
"""

import math

import pytest

from attnsim import rasp
from attnsim.compiler import compile_program

from .cases import CASES_PATH, MISSING_REASON, load_cases

CASES = load_cases() if CASES_PATH.exists() else []

pytestmark = pytest.mark.skipif(not CASES_PATH.exists(), reason=MISSING_REASON)


def test_all_54_cases_are_compiled():
    assert len(CASES) == 54
    assert all(case["causal"] == case["name"].endswith("_causal") for case in CASES)


@pytest.mark.parametrize("attention", ["hard", "softmax"])
@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_case_compiled(case, attention):
    program = case["build"]()
    model = compile_program(
        program,
        vocab=case["vocab"],
        max_seq_len=case["max_seq_len"],
        causal=case["causal"],
        attention=attention,
    )
    got = model.run(case["input"])
    expected = case["expected"]
    assert len(got) == len(expected)
    if rasp.is_numerical(program):
        for i, (g, e) in enumerate(zip(got, expected)):
            assert g is not None and math.isclose(g, e, rel_tol=0, abs_tol=1e-9), (i, got, expected)
    else:
        assert got == expected
