"""attnsim bugs that the differential test against tracr found (tests/test_tracr_differential.py),
each as a minimal attnsim-only reproducer checked against the interpreter (no tracr needed)."""

from __future__ import annotations

import pytest

from attnsim import rasp
from attnsim.compiler import compile_program
from attnsim.model.compiled import RunTimeCheckError


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


def _agrees_or_raises(model, prog, xs):
    """The model gives the interpreter's answer, or raises a run-time check where it raises."""
    try:
        want = rasp.evaluate(prog, xs)
    except rasp.RASPEvaluationError:
        with pytest.raises(RunTimeCheckError):
            model.run(xs)
        return
    assert model.run(xs) == want, xs


@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_categorical_linear_sequence_map_of_none_is_none(attention):
    # pick is None where the token is no index; a categorical a*x + b*y built as a virtual sum
    # read that None as 0 and gave a value: the interpreter gives None, and a comparison
    # of it raises ("query is None!"), where the model answered
    pick = rasp.Aggregate(rasp.Select(rasp.indices, rasp.tokens, rasp.Comparison.EQ), rasp.indices)
    both = rasp.LinearSequenceMap(pick, rasp.tokens, 1, 1)
    sel = rasp.Select(rasp.indices, both, rasp.Comparison.EQ)
    for prog in (both, rasp.Aggregate(sel, rasp.Full("b"))):
        model = compile_program(prog, vocab=[0, 1, 2, 3], max_seq_len=4, attention=attention)
        for xs in ([3], [0, 1], [1, 0, 3], [1, 0, 0, 3], [0, 0, 0, 0]):
            _agrees_or_raises(model, prog, xs)
    assert rasp.evaluate(both, [3]) == [None]
    with pytest.raises(RunTimeCheckError, match="query is None"):
        model.run([3])


@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_table_of_a_map_that_raises_on_every_value(attention):
    # bad has no value at all (int() raises on every token); a table over it stopped the
    # compiler at an assertion: the model now raises where the interpreter does
    bad = rasp.numerical(rasp.Map(lambda x: int(x), rasp.tokens))
    prog = rasp.numerical(rasp.SequenceMap(lambda x, y: x + y, bad, rasp.indices))
    model = compile_program(prog, vocab=["a", "b"], max_seq_len=3, attention=attention)
    for xs in (["a"], ["b", "a"], ["a", "a", "b"]):
        with pytest.raises(rasp.RASPEvaluationError, match="invalid literal"):
            rasp.evaluate(prog, xs)
        with pytest.raises(RunTimeCheckError, match="gives no value on any input"):
            model.run(xs)


@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_ranked_comparison_of_strings_with_numbers(attention):
    # a predicate over string keys and numerical queries is a table over their values; the
    # rounding proof of its steps converted the string keys with float()
    letters = rasp.Map(lambda i: "abc"[i % 3], rasp.indices)
    sel = rasp.Select(letters, rasp.numerical(rasp.tokens), lambda k, q: k == "a" and q != 2)
    prog = rasp.Aggregate(sel, rasp.indices, default=-1)
    model = compile_program(prog, vocab=[0, 1, 2, 3, 4], max_seq_len=3, attention=attention)
    for xs in ([2], [0, 4], [1, 2, 3], [2, 2, 4]):
        assert model.run(xs) == rasp.evaluate(prog, xs), xs
