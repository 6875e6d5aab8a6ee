"""Match2 against a plain-Python oracle, exhaustively over [M]^N."""

import itertools

import numpy as np
import pytest

from attnsim import rasp
from attnsim.matrix import attention_cost
from attnsim.tasks import match2


def check_exhaustive(modulus, n):
    seqs = np.array(list(itertools.product(range(modulus), repeat=n)), dtype=np.int64)
    out = rasp.evaluate_batch(match2.match2(modulus), seqs)
    expected = [[float(v) for v in match2.match2_reference(s, modulus)] for s in seqs.tolist()]
    assert out == expected, (modulus, n)


FAST = [(m, n) for m in range(1, 8) for n in range(1, 7) if m**n <= 3000]
SLOW = [(m, n) for m in range(1, 8) for n in range(1, 7) if m**n > 3000]


@pytest.mark.parametrize("modulus, n", FAST)
def test_match2_exhaustive_small(modulus, n):
    check_exhaustive(modulus, n)


@pytest.mark.slow
@pytest.mark.parametrize("modulus, n", SLOW)
def test_match2_exhaustive_large(modulus, n):
    check_exhaustive(modulus, n)


def test_match2_conventions():
    prog = match2.match2(19)
    assert rasp.evaluate(prog, [63, 70, 77, 94, 67, 39]) == [1, 1, 1, 1, 0, 1]  # the paper's
    assert rasp.evaluate(prog, [19, 38, 5]) == [1, 1, 0]  # residue 0 matches residue 0
    assert rasp.evaluate(match2.match2(4), [2, 1]) == [1, 0]  # j = i counts: 2 + 2 = 0 mod 4
    assert rasp.evaluate(match2.match2(5), [0, 7, -7]) == [1, 1, 1]  # any integers
    assert attention_cost(prog).heads_per_layer == (1,)


@pytest.mark.parametrize("bad, error", [(0, ValueError), (2.0, TypeError), (True, TypeError)])
def test_match2_rejects_bad_moduli(bad, error):
    with pytest.raises(error, match="modulus"):
        match2.match2(bad)
