"""One rule of token identity (``attnsim.values.value_key``), applied everywhere.

Two values are one token when they have the same type and value: ``1``, ``1.0`` and ``True``
are three, ``0.0`` and ``-0.0`` two, tuples element by element; a numpy scalar is the Python
value it holds. The interpreter's vocabulary check, a compiled model's encoding, value
inference and the CLI's ``--vocab`` follow it: a token that Python calls equal to a
vocabulary token but that is another value is refused, naming both; a vocabulary may hold
values that Python calls equal (each is its own token). Every answer is checked against the
interpreter and against the functions applied directly in Python.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from attnsim import compile_program, rasp
from attnsim.cli import main
from attnsim.model.checks import RunTimeCheckError
from attnsim.values import as_token, distinct, lookalike, value_key


def type_name(x):
    return type(x).__name__


def sign(x):
    return math.copysign(1.0, x)


def describe(x):
    """A function that tells apart everything the rule tells apart."""
    if isinstance(x, tuple):
        return "(" + ",".join(describe(v) for v in x) + ")"
    if isinstance(x, float):
        return f"{type_name(x)}:{x!r}:{sign(x):+.0f}"
    return f"{type_name(x)}:{x!r}"


def interpret(program, xs, **kw):
    """The interpreter on one sequence (of tuple tokens too: evaluate reads a list of tuples
    as a batch)."""
    return rasp.evaluate_batch(program, [list(xs)], **kw)[0]


def compiled_and_interpreted(program, vocab, xs, max_seq_len=4):
    model = compile_program(program, vocab=vocab, max_seq_len=max_seq_len)
    return model.run(xs), interpret(program, xs, vocab=vocab)


# -- the rule ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a, b, same",
    [
        (1, 1.0, False),
        (1, True, False),
        (0, False, False),
        (0.0, -0.0, False),
        (float("nan"), float("nan"), True),
        ((1, 2), (True, 2), False),
        ((0.0, "a"), (-0.0, "a"), False),
        ((1, (2, 3.0)), (1, (2, 3.0)), True),
        (frozenset({1}), frozenset({True}), False),
        (complex(0.0, 0.0), complex(0.0, -0.0), False),
        (np.float64(1.0), 1.0, False),  # inside a program; tokens enter through as_token
    ],
)
def test_value_key(a, b, same):
    assert (value_key(a) == value_key(b)) is same
    assert bool(a == b) or a != a  # Python calls every pair here equal (or they are NaN)


def test_as_token_reads_numpy_scalars_as_python_values():
    got = [as_token(v) for v in (np.int64(3), np.float32(0.5), np.bool_(True), np.str_("a"))]
    assert [(type_name(v), v) for v in got] == [
        ("int", 3),
        ("float", 0.5),
        ("bool", True),
        ("str", "a"),
    ]
    assert as_token((np.int64(1), (np.float64(-0.0),))) == (1, (-0.0,))
    assert sign(as_token((np.int64(1), (np.float64(-0.0),)))[1][0]) == -1.0


def test_distinct_and_lookalike():
    assert [describe(v) for v in distinct([1, 1.0, True, 1, -0.0, 0.0, -0.0])] == [
        "int:1",
        "float:1.0:+1",
        "bool:True",
        "float:-0.0:-1",
        "float:0.0:+1",
    ]
    assert lookalike(3.0, [1, 3]) == 3 and type(lookalike(3.0, [1, 3])) is int
    assert lookalike(3, [1, 3]) is None
    assert lookalike(5, [1, 3]) is None


# -- a token equal to a vocabulary value but not the same value is refused ----------------------


# (vocab, token, the vocabulary token it looks like)
LOOKALIKES = [
    ([1, 3], 3.0, 3),
    ([1, 3], True, 1),
    ([True, False], 1, True),
    ([0.0, 1.5], -0.0, 0.0),
    ([-0.0, 1.5], 0.0, -0.0),
    ([1.0, 2.0], 1, 1.0),
    ([(1, 2), (3, 4)], (True, 2), (1, 2)),
    ([(0.0, "a")], (-0.0, "a"), (0.0, "a")),
]


@pytest.mark.parametrize("vocab, token, like", LOOKALIKES)
def test_lookalike_token_is_refused_by_interpreter_and_model(vocab, token, like):
    program = rasp.Map(describe, rasp.tokens).named("describe")
    model = compile_program(program, vocab=vocab, max_seq_len=3)
    xs = [vocab[0], token]
    message = (
        rf"token {re.escape(repr(token))} \({type_name(token)}\) at position 1{{where}} is not "
        rf"the vocabulary token {re.escape(repr(like))} \({type_name(like)}\), though Python "
        rf"calls them equal: RASP tells values apart by type and value \(and a float by its "
        rf"sign\), since a function can answer differently for them; pass "
        rf"{re.escape(repr(like))}, or add {re.escape(repr(token))} to the vocabulary"
    )
    with pytest.raises(ValueError, match=message.format(where=r" \(row 0\)")):
        interpret(program, xs, vocab=vocab)
    with pytest.raises(ValueError, match=message.format(where="")):
        model.run(xs)
    # the vocabulary's own tokens run, and agree with the function applied directly
    assert model.run(vocab) == interpret(program, vocab, vocab=vocab)
    assert model.run(vocab) == [describe(v) for v in vocab]


def test_issue_example_float_token_for_an_int_vocabulary():
    # a map that checks isinstance(x, float): 3.0 and 3 answer differently, so 3.0 is refused
    # (it was read as 3 by the model while the interpreter called the map on 3.0)
    program = rasp.numerical(rasp.Map(lambda x: 1.5 if isinstance(x, float) else 1, rasp.tokens))
    model = compile_program(program, vocab=[1, 3], max_seq_len=3)
    for run in (model.run, lambda xs: rasp.evaluate(program, xs, vocab=[1, 3])):
        with pytest.raises(ValueError, match=r"token 3\.0 \(float\) .*vocabulary token 3 \(int\)"):
            run([3.0])
    assert model.run([3, 1]) == rasp.evaluate(program, [3, 1]) == [1.0, 1.0]


def test_unknown_token_keeps_the_plain_message():
    program = rasp.Map(describe, rasp.tokens)
    model = compile_program(program, vocab=[1, 3], max_seq_len=3)
    plain = r"token 2 at position 0{} is not in the vocabulary \[1, 3\]; use only"
    with pytest.raises(ValueError, match=plain.format("")):
        model.run([2])
    with pytest.raises(ValueError, match=plain.format(r" \(row 0\)")):
        rasp.evaluate(program, [2], vocab=[1, 3])


# -- a vocabulary of values Python calls equal: each is its own token ---------------------------


@pytest.mark.parametrize(
    "vocab",
    [
        [0.0, -0.0],
        [1, True, 1.0],
        [0, False, 0.0, -0.0],
        [(1,), (True,), (1.0,)],
        [(0.0, 1), (-0.0, 1)],
    ],
)
@pytest.mark.parametrize("fn", [describe, type_name, repr])
def test_vocab_of_python_equal_values(vocab, fn):
    program = rasp.Map(fn, rasp.tokens).named("f")
    xs = list(reversed(vocab)) + vocab[:1]
    compiled, interpreted = compiled_and_interpreted(program, vocab, xs, max_seq_len=len(xs))
    assert compiled == interpreted == [fn(v) for v in xs]
    assert [type(v) for v in compiled] == [type(fn(v)) for v in xs]


def test_signed_zero_tokens_atan2_and_copysign():
    # atan2 and copysign tell -0.0 from 0.0: the interpreter and the model did not
    vocab = [0.0, -0.0, 1.0]
    xs = [0.0, -0.0, -0.0, 1.0]
    for f in (sign, lambda x: math.atan2(x, -1.0)):
        program = rasp.numerical(rasp.Map(f, rasp.tokens))
        compiled, interpreted = compiled_and_interpreted(program, vocab, xs)
        assert compiled == interpreted == [f(x) for x in xs]
    assert rasp.evaluate(rasp.Map(sign, rasp.tokens), [0.0, -0.0]) == [1.0, -1.0]


def test_hist_counts_python_equal_tokens_apart():
    hist = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ))
    same = rasp.SelectorWidth(
        rasp.Select(rasp.tokens, rasp.tokens, lambda k, q: value_key(k) == value_key(q))
    )
    xs = [1, True, 1.0, 1]
    # EQ is Python's ==: all four are equal; a predicate on the rule counts them apart
    compiled, interpreted = compiled_and_interpreted(hist, [1, True, 1.0], xs)
    assert compiled == interpreted == [4, 4, 4, 4]
    compiled, interpreted = compiled_and_interpreted(same, [1, True, 1.0], xs)
    assert compiled == interpreted == [2, 1, 1, 2]


def test_checkpoint_keeps_python_equal_tokens_apart(tmp_path):
    program = rasp.Map(describe, rasp.tokens).named("describe")
    vocab = [0.0, -0.0, 1, True, 1.0]
    model = compile_program(program, vocab=vocab, max_seq_len=5)
    model.save(tmp_path / "m")
    loaded = type(model).load(tmp_path / "m")
    assert [describe(v) for v in loaded.vocab] == [describe(v) for v in vocab]
    xs = [-0.0, True, 1.0, 0.0, 1]
    assert loaded.run(xs) == rasp.evaluate(program, xs) == [describe(v) for v in xs]


# -- value inference keeps the values of maps apart by the same rule ----------------------------


def _mapped(f, name):
    return rasp.Map(f, rasp.tokens).named(name)  # named: not fused into the next map


@pytest.mark.parametrize(
    "inner",
    [
        lambda t: -0.0 if t == "a" else 0.0,
        lambda t: {"a": 1, "b": True, "c": 1.0}[t],
        lambda t: {"a": 0, "b": False, "c": -0.0}[t],
        lambda t: np.float64(1.0) if t == "a" else 1.0,
        lambda t: (1, 0.0) if t == "a" else ((True, 0.0) if t == "b" else (1, -0.0)),
    ],
)
def test_map_values_stay_apart(inner):
    vocab = ["a", "b", "c"]
    xs = ["a", "b", "c", "a"]
    first = _mapped(inner, "first")
    program = rasp.Map(describe, first).named("second")
    compiled, interpreted = compiled_and_interpreted(program, vocab, xs)
    assert compiled == interpreted == [describe(inner(t)) for t in xs]
    # a categorical aggregate moves the values unchanged (each position reads itself)
    same_pos = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.EQ)
    moved = rasp.Map(describe, rasp.Aggregate(same_pos, first).named("moved")).named("shown")
    compiled, interpreted = compiled_and_interpreted(moved, vocab, xs)
    assert compiled == interpreted == [describe(inner(t)) for t in xs]
    # and a sequence map sees them as the interpreter does
    pair = rasp.SequenceMap(lambda v, t: describe(v) + t, first, rasp.tokens).named("pair")
    compiled, interpreted = compiled_and_interpreted(pair, vocab, xs)
    assert compiled == interpreted == [describe(inner(t)) + t for t in xs]


def test_constant_sop_values_stay_apart():
    const = rasp.ConstantSOp([1, 1.0, -0.0, 0.0])
    program = rasp.SequenceMap(lambda c, t: describe(c) + t, const, rasp.tokens)
    compiled, interpreted = compiled_and_interpreted(program, ["a"], ["a"] * 4)
    assert compiled == interpreted == [describe(c) + "a" for c in [1, 1.0, -0.0, 0.0]]


def test_aggregate_of_both_zeros_is_refused_as_two_values():
    zeros = _mapped(lambda t: -0.0 if t == "a" else 0.0, "zeros")
    agg = rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE), zeros)
    with pytest.raises(rasp.RASPEvaluationError, match=r"several distinct values \(-0\.0, 0\.0\)"):
        rasp.evaluate(agg, ["a", "b"])
    model = compile_program(agg, vocab=["a", "b"], max_seq_len=2)
    with pytest.raises(RunTimeCheckError, match=r"several distinct values \(-0\.0, 0\.0\)"):
        model.run(["a", "b"])
    assert model.run(["b", "b"]) == rasp.evaluate(agg, ["b", "b"]) == [0.0, 0.0]


# -- numpy: scalars and arrays of tokens are their Python values --------------------------------


def test_numpy_scalar_tokens_are_python_values():
    program = rasp.Map(describe, rasp.tokens).named("describe")
    vocab = [3, 2.5, True, "a", -0.0]
    xs = [np.int64(3), np.float64(2.5), np.bool_(True), np.str_("a"), np.float32(-0.0)]
    compiled, interpreted = compiled_and_interpreted(program, vocab, xs, max_seq_len=5)
    assert compiled == interpreted == [describe(x.item()) for x in xs]
    assert rasp.evaluate(program, xs) == [describe(x.item()) for x in xs]  # no vocab too
    # a numpy vocabulary holds Python values too
    model = compile_program(program, vocab=np.array([1, 3]), max_seq_len=2)
    assert model.run([3]) == rasp.evaluate(program, [3], vocab=np.array([1, 3])) == ["int:3"]
    with pytest.raises(ValueError, match=r"token 3\.0 \(float\) .*vocabulary token 3 \(int\)"):
        rasp.evaluate(program, [3.0], vocab=np.array([1, 3]))


@pytest.mark.parametrize(
    "arr",
    [
        np.array([3.0, -0.0, 2.0, 0.0]),
        np.array([True, False, True]),
        np.array([2**60 + 1, 2**60, 7]),
        np.array([0.5, -0.0], dtype=np.float32),
    ],
)
def test_numpy_array_tokens_read_as_their_list(arr):
    program = rasp.Map(describe, rasp.tokens).named("describe")
    expected = [describe(v) for v in arr.tolist()]
    assert rasp.evaluate(program, arr) == rasp.evaluate(program, arr.tolist()) == expected
    vocab = distinct(arr.tolist())
    compiled, interpreted = compiled_and_interpreted(program, vocab, arr, max_seq_len=len(arr))
    assert compiled == interpreted == expected


# -- the CLI's --vocab ----------------------------------------------------------------------------


@pytest.fixture
def rasp_file(tmp_path):
    path = tmp_path / "ident.rasp"
    path.write_text("ty = tokens_asis;\n")
    return str(path)


def test_cli_vocab_keeps_python_equal_tokens_apart(rasp_file, capsys):
    argv = ["rasp", rasp_file, "--example", "[1, 2.0, -0.0, 1.0]", "--compile", "ty"]
    assert main([*argv, "--vocab", "1,1.0,2.0,-0.0"]) == 0
    out = capsys.readouterr().out
    assert "vocab:       [1, 1.0, 2.0, -0.0]" in out
    assert "compiled:    [1, 2.0, -0.0, 1.0]" in out
    assert main(argv) == 0  # the vocabulary from the example: four tokens
    assert "vocab:       [1, 2.0, -0.0, 1.0]" in capsys.readouterr().out


def test_cli_vocab_refuses_lookalike_example_tokens(rasp_file, capsys):
    argv = ["rasp", rasp_file, "--example", "[1, 2.0, -0.0]", "--compile", "ty"]
    assert main([*argv, "--vocab", "1,2,0.0"]) == 2
    err = capsys.readouterr().err
    assert (
        "the example [1, 2.0, -0.0] has token(s) 2.0, -0.0 outside --vocab 1,2,0.0 (2.0 is not "
        "the token 2, -0.0 is not the token 0.0: tokens differ by type and value, and a float "
        "by its sign); add them to --vocab" in err
    )
    assert "Traceback" not in err


def test_cli_vocab_takes_string_tokens_in_quotes(rasp_file, capsys):
    # digits as strings: in quotes in --vocab, and named when given bare
    argv = ["rasp", rasp_file, "--example", '"123"', "--compile", "ty"]
    assert main([*argv, "--vocab", '"1",\'2\', "3"']) == 0
    out = capsys.readouterr().out
    assert "vocab:       ['1', '2', '3']" in out and "compiled == interpreted: yes" in out
    assert main([*argv, "--vocab", "1,2,3"]) == 2
    err = capsys.readouterr().err
    assert "'1' is not the token 1" in err and "a string token is given in quotes" in err
