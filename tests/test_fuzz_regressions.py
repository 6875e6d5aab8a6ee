"""Regressions found by the differential fuzzer (tests/test_compiler_fuzz.py): each is the
minimal program of one class of disagreement, compared with the interpreter as oracle in both
attention modes."""

from __future__ import annotations

import math

import pytest

from attnsim import rasp
from attnsim.compiler import compile_program
from attnsim.model.compiled import RunTimeCheckError

ATTENTION = ("hard", "softmax")
EQ = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.EQ)
TRUE = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.TRUE)


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return type(a) is type(b) and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return type(a) is type(b) and a == b


def _agrees(program, vocab, max_seq_len, inputs, attention, **kw):
    model = compile_program(
        program, vocab=vocab, max_seq_len=max_seq_len, attention=attention, **kw
    )
    causal = kw.get("causal", False)
    for xs in inputs:
        expected = rasp.evaluate(program, xs, causal=causal)
        got = model.run(xs)
        assert len(got) == len(expected), (xs, got, expected)
        assert all(_same(g, e) for g, e in zip(got, expected)), (xs, got, expected)


# -- a sum with a default: read only once its product (mean x width) is written ----------------
@pytest.mark.parametrize("attention", ATTENTION)
def test_sum_with_default_read_by_an_mlp(attention):
    program = abs(rasp.SumAggregate(EQ, rasp.numerical(rasp.Full(1)), default=2.5))
    _agrees(program, ["a"], 1, [["a"]], attention)


@pytest.mark.parametrize("attention", ATTENTION)
def test_sum_with_default_in_a_product(attention):
    sel = rasp.Select(rasp.tokens, rasp.indices, rasp.Comparison.TRUE)
    total = rasp.SumAggregate(sel, rasp.numerical(rasp.indices), default=2.5)
    program = total * rasp.numerical(rasp.ConstantSOp([1, 0, 1], check_length=False))
    _agrees(program, ["a", "b"], 3, [["a", "b", "a"]], attention, causal=True, fixed_length=True)


@pytest.mark.parametrize("attention", ATTENTION)
def test_sum_with_default_in_a_lookup(attention):
    sel = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.LEQ)
    total = rasp.SumAggregate(sel, rasp.numerical(rasp.tokens), default=2.5)
    diff = rasp.numerical(rasp.indices) - rasp.numerical(rasp.tokens)
    program = rasp.numerical(rasp.SequenceMap(lambda x, y: max(x, y), total, diff))
    _agrees(program, [-1, 3, 4], 3, [[4], [3, -1], [-1, 4, 3]], attention)


# -- a categorical default equal to a value of another type (0 and 0.0) -------------------------
@pytest.mark.parametrize("attention", ATTENTION)
def test_categorical_default_of_another_type(attention):
    inner = rasp.Aggregate(TRUE, rasp.indices, reduction="sum") * 2
    program = rasp.Aggregate(TRUE, inner, default=0)
    _agrees(program, ["a"], 1, [["a"]], attention)
    _agrees(program, ["a"], 3, [["a"], ["a", "a", "a"]], attention)


# -- functions see the values the interpreter passes: integer-valued floats as ints ------------
@pytest.mark.parametrize("attention", ATTENTION)
def test_map_of_a_number_gets_ints(attention):
    total = rasp.Aggregate(TRUE, rasp.tokens, reduction="sum")
    program = rasp.Map(lambda x: repr(x), total, simplify=False)
    _agrees(program, [0, 1, 2], 2, [[0, 0], [1, 0], [2, 2]], attention)
    program = rasp.Map(repr, rasp.numerical(rasp.tokens) * 0.5, simplify=False)
    _agrees(program, [1, 2, 3], 2, [[1, 2], [3, 2]], attention)


@pytest.mark.parametrize("attention", ATTENTION)
def test_categorical_named_op_of_a_number(attention):
    # a named op on numbers runs vectorised in the interpreter, then reads back ints
    program = rasp.Map(lambda x: x, rasp.numerical(rasp.tokens) * 0.5, simplify=False)
    half = rasp.Map(repr, rasp.categorical(rasp.numerical(rasp.tokens) * 0.5), simplify=False)
    for p in (program, half):
        _agrees(p, [1, 2, 3], 2, [[1, 2], [3, 2]], attention)


# -- a numerical map whose function gives a string: refused where the interpreter raises -------
@pytest.mark.parametrize("attention", ATTENTION)
def test_numerical_map_giving_a_string(attention):
    letters = rasp.ConstantSOp(["b", "a", "c"], check_length=False)
    picked = rasp.Aggregate(rasp.Select(rasp.indices, rasp.length, rasp.Comparison.EQ), letters)
    program = rasp.numerical(rasp.Map(lambda x: x, picked))
    model = compile_program(program, vocab=["a", "b"], max_seq_len=3, attention=attention)
    with pytest.raises(ValueError):
        rasp.evaluate(program, ["a", "b"])
    with pytest.raises(RunTimeCheckError, match="numerical but holds"):
        model.run(["a", "b"])
    ok = rasp.numerical(rasp.Map(lambda x: 1.0 if x == "a" else "no", rasp.tokens))
    _agrees(ok, ["a", "b"], 3, [["a", "a"]], attention)
    with pytest.raises(RunTimeCheckError, match="numerical but holds"):
        compile_program(ok, vocab=["a", "b"], max_seq_len=3, attention=attention).run(["b"])


# -- values equal up to float rounding are one value of a lookup ---------------------------------
@pytest.mark.parametrize("attention", ATTENTION)
def test_lookup_on_values_equal_up_to_rounding(attention):
    root = rasp.sqrt(rasp.numerical(rasp.length))
    twice = rasp.numerical(rasp.indices) + rasp.numerical(rasp.indices)
    odd = rasp.Map(lambda x: x % 2 == 0, rasp.indices)
    sel = rasp.Select(odd, rasp.Full(True), rasp.Comparison.LT)
    total = rasp.SumAggregate(sel, rasp.numerical(rasp.Map(lambda x: x, odd)), default=0)
    value = root + twice - total
    program = rasp.numerical(
        rasp.SequenceMap(lambda x, y: max(x, y), rasp.numerical(rasp.tokens), value)
    )
    _agrees(program, [0, 1, 2], 5, [[1, 1, 1, 0], [2], [0, 2, 1, 1, 2]], attention)


# -- a map of a width is called only on widths some position has (interpreter and model) -------
@pytest.mark.parametrize("attention", ATTENTION)
def test_map_of_a_width_only_on_held_widths(attention):
    width = rasp.SelectorWidth(
        rasp.Select(rasp.ConstantSOp(["a", "a", "c"]), rasp.tokens, rasp.Comparison.TRUE)
    )
    program = rasp.numerical(rasp.Map(lambda x: 10 // x, width))  # width 0 never occurs
    _agrees(program, [0, 1, 2], 3, [[0, 2, 1]], attention, causal=True)
    never = rasp.SelectorWidth(rasp.Select(rasp.Full(0), rasp.length, rasp.Comparison.EQ))
    program = rasp.numerical(rasp.Map(lambda x: None if x == 1 else x, never)) / 2
    _agrees(program, ["a", "b"], 4, [["a"], ["b", "a", "a"]], attention)


# -- a lookup whose function fails on some combinations: those give no output value -------------
@pytest.mark.parametrize("attention", ATTENTION)
def test_lookup_with_failing_combinations_in_an_aggregate(attention):
    three = rasp.categorical(rasp.Map(lambda x: int(x) % 3, rasp.numerical(rasp.length)))
    quotient = rasp.SequenceMap(lambda x, y: x // y, rasp.length, three)
    program = rasp.numerical(rasp.Aggregate(TRUE, quotient, default=2.5))
    _agrees(program, ["a", "b"], 5, [["a"], ["a", "b"], ["b", "b", "a", "a"]], attention)


# -- an S-op that is None everywhere, read by a function that treats None as a value ------------
@pytest.mark.parametrize("attention", ATTENTION)
def test_always_none_read_by_a_function_stays_none(attention):
    # tracr's semantics: a map of None is None, the function is not called
    zero = rasp.Map(lambda x: 0, rasp.tokens)
    nothing = rasp.Map(lambda x: None if x == 0 else x, zero)
    program = rasp.Map(lambda x: x is None, nothing, simplify=False)
    assert rasp.evaluate(program, ["a", "a"]) == [None, None]
    _agrees(program, ["a"], 3, [["a"], ["a", "a", "a"]], attention)
    # a numerical S-op cannot hold None: both refuse it
    numeric = rasp.numerical(rasp.Map(lambda x: 1, nothing, simplify=False)).named("one")
    with pytest.raises(ValueError, match="'one' is numerical but holds the value None"):
        rasp.evaluate(numeric, ["a"])
    with pytest.raises(NotImplementedError, match="holds no value but None"):
        compile_program(numeric, vocab=["a"], max_seq_len=3, attention=attention)


# -- TRUE and FALSE inside Or/Not read no value: a None key or query does not matter there ------
@pytest.mark.parametrize("attention", ATTENTION)
def test_true_and_false_under_not_and_or_read_no_value(attention):
    C = rasp.Comparison
    # an S-op that is None wherever its query finds no index equal to the token
    maybe_none = rasp.Aggregate(
        rasp.Select(rasp.indices, rasp.tokens, C.EQ), rasp.Map(lambda x: x % 2, rasp.indices)
    )
    never = rasp.Select(maybe_none, rasp.tokens, C.FALSE)
    always = rasp.Select(maybe_none, rasp.tokens, C.TRUE)
    assert rasp.evaluate(rasp.SelectorWidth(~never), [2]) == [1]  # maybe_none is None here
    _agrees(rasp.SelectorWidth(~never), [0, 1, 2, 3], 4, [[2], [3, 0], [0, 3, 3]], attention)
    eq = rasp.Select(rasp.indices, rasp.tokens, C.EQ)
    for sel in (always | eq, never | ~eq, (never | ~eq) & always):
        _agrees(rasp.SelectorWidth(sel), [0, 1, 2, 3], 4, [[2], [3, 0], [0, 3, 3]], attention)
