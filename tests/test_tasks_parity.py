"""Parity and k-PARITY against a plain-Python oracle, exhaustively."""

import itertools

import numpy as np
import pytest

from attnsim import rasp
from attnsim.matrix import attention_cost
from attnsim.tasks import parity


def all_bits(n):
    return np.array(list(itertools.product((0, 1), repeat=n)), dtype=np.int64)


def check_plain(n):
    bits = all_bits(n)
    out = rasp.evaluate_batch(parity.parity(), bits)
    expected = [[parity.parity_reference(b)] * n for b in bits.tolist()]
    assert out == expected, n


def subsets(n, most):
    for k in range(most + 1):
        yield from itertools.combinations(range(n), k)


def check_subsets(n):
    prog = parity.k_parity()
    bits = all_bits(n).tolist()
    batch, expected = [], []
    for s in subsets(n, 4):
        for b in bits:
            batch.append(parity.encode_subset(b, s))
            expected.append([parity.parity_reference(b, s)] * n)
    assert rasp.evaluate_batch(prog, batch) == expected, n


@pytest.mark.parametrize("n", range(1, 11))
def test_parity_every_string(n):
    check_plain(n)


@pytest.mark.slow
@pytest.mark.parametrize("n", range(11, 15))
def test_parity_every_long_string(n):
    check_plain(n)


@pytest.mark.parametrize("n", range(1, 7))
def test_k_parity_every_subset_and_string(n):
    check_subsets(n)


@pytest.mark.slow
@pytest.mark.parametrize("n", [7, 8])
def test_k_parity_every_subset_and_string_long(n):
    check_subsets(n)


@pytest.mark.parametrize("n", [1, 4, 6])
def test_fixed_subset_parity(n):
    bits = all_bits(n)
    for s in subsets(n, 4):
        out = rasp.evaluate_batch(parity.fixed_subset_parity(s), bits)
        assert out == [[parity.parity_reference(b, s)] * n for b in bits.tolist()], s


def test_parity_programs_are_one_head():
    for prog in (parity.parity(), parity.k_parity(), parity.fixed_subset_parity([0, 2])):
        assert attention_cost(prog).heads_per_layer == (1,)


def test_parity_accepts_bools_and_rejects_bad_input():
    assert rasp.evaluate(parity.parity(), [True, True, False]) == [0, 0, 0]
    with pytest.raises(ValueError, match="past the 2 bits"):
        parity.encode_subset([1, 0], [2])
    with pytest.raises(ValueError, match="0 or 1"):
        parity.encode_subset([2, 0], [0])
    with pytest.raises(TypeError, match="must be ints"):
        parity.fixed_subset_parity([0.5])
