"""Attention layers and heads of every matrix program, against the documented formulas."""

import itertools
import math

import pytest

from attnsim import rasp
from attnsim.matrix import attention_cost, programs

DIMS = range(1, 9)


def heads(program):
    return attention_cost(program).heads_per_layer


def test_cost_rules_on_small_programs():
    x = rasp.numerical(rasp.tokens)
    same = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.EQ)
    other = rasp.Select(rasp.indices, rasp.indices + 1, rasp.Comparison.EQ)
    a = rasp.numerical(rasp.Aggregate(same, x))
    b = rasp.numerical(rasp.Aggregate(same, x * 2))  # same selector, same layer: one head
    c = rasp.numerical(rasp.Aggregate(other, a * b))  # layer 2
    assert heads(a + b) == (1,)
    assert heads(c + a) == (1, 1)
    assert heads(rasp.numerical(rasp.Aggregate(other, x)) + a) == (2,)
    assert heads(rasp.numerical(rasp.Map(lambda n: n * 1.0, rasp.length))) == (1,)
    assert heads(rasp.indices * 3 + 1) == ()


@pytest.mark.parametrize("r, c, h", [(r, c, h) for r in DIMS for c in DIMS for h in (1, 3)])
def test_transpose_is_one_layer_one_head(r, c, h):
    assert heads(programs.transpose(r, c, heads=h)) == (1,)


@pytest.mark.parametrize("h", [1, 2])
def test_matmul_heads_follow_the_chunk_plan(h):
    for r, k, c in itertools.product(DIMS, DIMS, DIMS):
        length = programs.matmul_input_length(r, k, c, heads=h)
        q = min(k, length // (h * r * c))
        s = math.ceil(k / q)
        got = heads(programs.matmul(r, k, c, heads=h))
        expected = (2 * s,) if math.ceil(k / s) == 1 else (2 * s, 1)
        assert got == expected, (r, k, c)
        assert got[0] <= r + c and len(got) <= 2  # the paper: (1, r+c, rc)
        assert heads(programs.matmul(r, k, c, heads=h, layers=1)) == (2 * k,)


@pytest.mark.parametrize("r, c", [(r, c) for r in (1, 3) for c in DIMS])
def test_softmax_costs(r, c):
    assert heads(programs.softmax(r, c)) == ((c,) if c > 1 else ())
    assert heads(programs.softmax(r, c, heads=2, layers=2)) == ((c, 1) if c > 1 else ())


def test_elementwise_and_activation_costs():
    assert heads(programs.relu()) == ()
    assert heads(programs.scale(3.0)) == ()
    assert heads(programs.maxmin()) == (1,)
    assert heads(programs.bias_add(3, 4)) == (1,)


@pytest.mark.parametrize("n", DIMS)
def test_det_and_inverse_costs(n):
    if n == 1:
        assert heads(programs.det(1)) == heads(programs.inverse(1)) == ()
        return
    if n == 3:
        assert heads(programs.det(3)) == (4, 1)
        assert heads(programs.inverse(3)) == (8, 1)  # the paper: 5 layers
    fl = (2 * n + 1,) + (n + 1,) * (n - 2) + (1,)
    assert heads(programs.det(n, method="faddeev_leverrier")) == fl
    assert heads(programs.inverse(n, method="gram")) == (4 * n,) + (3,) * (n - 2) + (2 * n,)
    inv = programs.inverse(n)
    flag = heads(programs.singular_flag(n, inverse_sop=inv))
    assert len(flag) == len(heads(inv)) + 2
