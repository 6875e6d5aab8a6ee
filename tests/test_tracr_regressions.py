"""attnsim bugs that the differential test against tracr found (tests/test_tracr_differential.py),
each as a minimal attnsim-only reproducer checked against the interpreter (no tracr needed)."""

from __future__ import annotations

import pytest

from attnsim import rasp
from attnsim.compiler import compile_program


@pytest.mark.parametrize("attention", ["hard", "softmax"])
@pytest.mark.parametrize("fill", [2.5, 0.25, 3])
def test_numerical_equality_of_a_fraction_with_integer_checked_reals(attention, fill):
    # keys: a constant fraction; queries: real-valued tokens (checked integer at run time).
    # 2.5 never equals an integer, but 1 - (2.5 - 2)^2 = 0.75 passed for a match.
    sel = rasp.Select(
        rasp.numerical(rasp.Full(fill)), rasp.numerical(rasp.tokens), rasp.Comparison.EQ
    )
    for prog in (
        rasp.numerical(rasp.Aggregate(sel, rasp.numerical(rasp.indices), default=-1)),
        rasp.numerical(rasp.SelectorWidth(sel)),
    ):
        model = compile_program(prog, vocab=None, max_seq_len=3, attention=attention)
        for xs in ([-2, 2, 3], [2, 2], [3, 0, 1], [0]):
            assert model.run(xs) == rasp.evaluate(prog, xs), (fill, xs)


def test_numerical_equality_of_known_fractions_with_integer_checked_reals():
    # the known side holds several values, one a fraction; the other side real-valued
    keys = rasp.numerical(rasp.Map(lambda i: [1, 1.5, 4][i % 3], rasp.indices))
    sel = rasp.Select(keys, rasp.numerical(rasp.tokens), rasp.Comparison.EQ)
    prog = rasp.numerical(rasp.Aggregate(sel, rasp.numerical(rasp.indices), default=-1))
    model = compile_program(prog, vocab=None, max_seq_len=4)
    for xs in ([1, 2, 4, 1], [2, 1, 2, 2], [4, 4, 4]):
        assert model.run(xs) == rasp.evaluate(prog, xs), xs


def test_bool_tokens_read_as_numbers_by_the_compiled_model():
    # the compiler takes bools as 0 and 1 in a numerical vocab; the model refused them at run
    prog = rasp.numerical(rasp.tokens) * 2
    model = compile_program(prog, vocab=[False, True], max_seq_len=3)
    assert model.run([True, False, True]) == rasp.evaluate(prog, [True, False, True])
    assert model.run([True, False, True]) == [2.0, 0.0, 2.0]
