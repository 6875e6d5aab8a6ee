"""The interpreter against tracr's expected outputs on the shared conformance cases."""

import math

import pytest

from attnsim import rasp

from .cases import CASES_PATH, MISSING_REASON, load_cases

CASES = load_cases() if CASES_PATH.exists() else []

pytestmark = pytest.mark.skipif(not CASES_PATH.exists(), reason=MISSING_REASON)


def test_every_case_is_present():
    assert len(CASES) == 54
    assert len({case["name"] for case in CASES}) == 54


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_case(case):
    program = case["build"]()
    got = rasp.evaluate(
        program,
        case["input"],
        causal=case["causal"],
        vocab=case["vocab"],
        max_seq_len=case["max_seq_len"],
    )
    expected = case["expected"]
    assert len(got) == len(expected)
    if rasp.is_numerical(program):
        for i, (g, e) in enumerate(zip(got, expected)):
            assert math.isclose(g, e, rel_tol=0, abs_tol=1e-12), (i, got, expected)
    else:
        assert got == expected
