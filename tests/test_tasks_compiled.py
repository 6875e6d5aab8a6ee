"""Match2 and (k-)PARITY compiled to real transformers, checked exhaustively against numpy.

Match2 runs on every sequence in [M]^N (M <= 7, N <= 6), batched per length; parity on
every binary string of length <= 14; k-PARITY on every string of length <= 8 and every
subset S with |S| <= 4. Each model is compiled for a fixed input length (the paper counts
the ``length`` layer separately). The CI tests take the small cases, the slow ones the rest,
except that by default [7]^6 (117,649 sequences) is checked on a fixed random sample of
``MATCH2_SAMPLE`` sequences and fixed-subset parity on every fifth subset of 8 positions;
``ATTNSIM_FULL_SWEEPS=1`` (``make bench-full``) checks those exhaustively too.
"""

import functools
import itertools
import os

import numpy as np
import pytest

from attnsim.compiler import compile_program
from attnsim.tasks import match2, parity

PAIRS = [(0, False), (0, True), (1, False), (1, True)]
FULL_SWEEPS = os.environ.get("ATTNSIM_FULL_SWEEPS") == "1"
MATCH2_SAMPLE = 20_000  # sequences per Match2 case above this many (unless FULL_SWEEPS)


@functools.cache
def match2_model(modulus, n):
    return compile_program(
        match2.match2(modulus), vocab=list(range(modulus)), max_seq_len=n, fixed_length=True
    )


@functools.cache
def parity_model(n):
    return compile_program(parity.parity(), vocab=[0, 1], max_seq_len=n, fixed_length=True)


@functools.cache
def k_parity_model(n):
    return compile_program(parity.k_parity(), vocab=PAIRS, max_seq_len=n, fixed_length=True)


def every_sequence(alphabet, n):
    return np.array(list(itertools.product(range(alphabet), repeat=n)), dtype=np.int64)


def check_match2(modulus, n):
    if FULL_SWEEPS or modulus**n <= MATCH2_SAMPLE:
        xs = every_sequence(modulus, n)
    else:  # a fixed sample, with the all-zero and all-(M - 1) sequences
        xs = np.random.default_rng(modulus * 10 + n).integers(0, modulus, (MATCH2_SAMPLE, n))
        xs[0], xs[1] = 0, modulus - 1
    got = np.array(match2_model(modulus, n).run(xs.tolist()))
    want = ((xs[:, :, None] + xs[:, None, :]) % modulus == 0).any(axis=2).astype(int)
    np.testing.assert_array_equal(got, want, err_msg=f"M={modulus} N={n}")


def check_parity(n):
    bits = every_sequence(2, n)
    got = np.array(parity_model(n).run(bits.tolist()))
    want = np.repeat((bits.sum(axis=1) % 2)[:, None], n, axis=1)
    np.testing.assert_array_equal(got, want, err_msg=f"n={n}")


def subsets(n, most=4):
    for k in range(min(n, most) + 1):
        yield from itertools.combinations(range(n), k)


def check_k_parity(n):
    """Every subset (|S| <= 4) with every string, as one batch."""
    bits = every_sequence(2, n)
    masks = np.zeros((0, n), dtype=bool)
    for s in subsets(n):
        mask = np.zeros((1, n), dtype=bool)
        mask[0, list(s)] = True
        masks = np.concatenate([masks, mask])
    rows = np.repeat(bits, len(masks), axis=0)  # [strings * subsets, n]
    marks = np.tile(masks, (len(bits), 1))
    batch = [[PAIRS[2 * b + m] for b, m in zip(r, k)] for r, k in zip(rows.tolist(), marks)]
    got = np.array(k_parity_model(n).run(batch))
    want = np.repeat(((rows * marks).sum(axis=1) % 2)[:, None], n, axis=1)
    np.testing.assert_array_equal(got, want, err_msg=f"n={n}")


def check_fixed_subset(n, s):
    bits = every_sequence(2, n)
    model = compile_program(
        parity.fixed_subset_parity(s), vocab=[0, 1], max_seq_len=n, fixed_length=True
    )
    got = np.array(model.run(bits.tolist()))
    want = np.repeat((bits[:, list(s)].sum(axis=1) % 2)[:, None], n, axis=1)
    np.testing.assert_array_equal(got, want, err_msg=f"n={n} S={s}")


MATCH2_FAST = [(m, n) for m in range(1, 8) for n in range(1, 7) if m**n <= 2500]
MATCH2_SLOW = [(m, n) for m in range(1, 8) for n in range(1, 7) if m**n > 2500]


@pytest.mark.parametrize("modulus, n", MATCH2_FAST)
def test_match2_compiled_exhaustive(modulus, n):
    check_match2(modulus, n)


@pytest.mark.slow
@pytest.mark.parametrize("modulus, n", MATCH2_SLOW)
def test_match2_compiled_exhaustive_large(modulus, n):
    check_match2(modulus, n)


def test_match2_compiled_is_one_layer_one_head():
    report = match2_model(7, 6).report()
    assert report.attention_layers == 1 and report.heads_per_layer == [1]
    assert report.layers == 1  # the MLP that rounds the mean sits in the same layer


@pytest.mark.parametrize("n", range(1, 11))
def test_parity_compiled_every_string(n):
    check_parity(n)


@pytest.mark.slow
@pytest.mark.parametrize("n", range(11, 15))
def test_parity_compiled_every_long_string(n):
    check_parity(n)


@pytest.mark.parametrize("n", range(1, 6))
def test_k_parity_compiled_every_subset_and_string(n):
    check_k_parity(n)


@pytest.mark.slow
@pytest.mark.parametrize("n", [6, 7, 8])
def test_k_parity_compiled_every_subset_and_string_long(n):
    check_k_parity(n)


@pytest.mark.parametrize("n, s", [(1, ()), (1, (0,)), (5, (0, 2, 3)), (8, (1, 4, 6, 7))])
def test_fixed_subset_parity_compiled(n, s):
    check_fixed_subset(n, s)


@pytest.mark.slow
def test_fixed_subset_parity_compiled_subsets():
    every = list(subsets(8))  # 163 subsets of size <= 4, each its own model
    for s in every if FULL_SWEEPS else every[::5]:
        check_fixed_subset(8, s)


def test_parity_models_are_one_attention_layer():
    for model in (parity_model(9), k_parity_model(5)):
        report = model.report()
        assert report.attention_layers == 1 and max(report.heads_per_layer) == 1
    assert parity_model(9).report().layers == 1
