"""What the compiler and the compiled model say when something cannot work, word for word."""

from __future__ import annotations

import pytest
import torch

from attnsim import library, rasp
from attnsim.compiler import compile_program

C = rasp.Comparison
LETTERS = ["a", "b", "c"]


def real_tokens() -> rasp.SOp:
    return rasp.numerical(rasp.tokens)


# -- unsupported constructs: all listed at once, each with a reason ---------------------------


def test_every_unsupported_part_is_listed_in_one_error():
    tokens = real_tokens()
    order = rasp.Select(tokens, tokens, C.LT).named("real_order")
    cube = rasp.numerical(rasp.Map(lambda x: x**3, tokens)).named("cube")
    program = rasp.numerical(rasp.SelectorWidth(order)) + cube
    with pytest.raises(NotImplementedError) as info:
        compile_program(program, vocab=None, max_seq_len=4)
    text = str(info.value)
    assert text.startswith("cannot compile this program:")
    # the non-EQ comparison of real values, with the reason and what is supported
    assert "real_order: compares real-valued S-ops with LT" in text
    assert "only EQ (on integer values) is supported" in text
    # the opaque map of a real value, with what to use instead
    assert "cube: a map of the real-valued S-op 'tokens' with no finite value set" in text
    assert "use a named map (rasp.exp, rasp.reciprocal, rasp.relu, ...)" in text
    assert text.count("\n  - ") == 2


def test_a_failure_is_reported_once_not_again_for_what_depends_on_it():
    tokens = real_tokens()
    cube = rasp.numerical(rasp.Map(lambda x: x**3, tokens)).named("cube")
    later = rasp.numerical(cube * 2 + 1)
    with pytest.raises(NotImplementedError, match=r"cube: a map of the real-valued") as info:
        compile_program(later, vocab=None, max_seq_len=4)
    assert str(info.value).count("\n  - ") == 1


def test_categorical_tokens_without_vocab():
    with pytest.raises(
        NotImplementedError,
        match=r"tokens are used categorically but no vocab was given; pass vocab=\[\.\.\.\]",
    ):
        compile_program(library.make_hist(), vocab=None, max_seq_len=4)


def test_sequence_map_of_real_values():
    program = rasp.numerical(
        rasp.SequenceMap(lambda x, y: max(x, y), real_tokens(), real_tokens())
    ).named("biggest")
    with pytest.raises(
        NotImplementedError,
        match=r"biggest: a sequence map of real-valued S-ops other than \+, -, \* and /",
    ):
        compile_program(program, vocab=None, max_seq_len=4)


# -- inputs the model was not compiled for --------------------------------------------------


@pytest.fixture(scope="module")
def hist_model():
    return compile_program(library.make_hist(), vocab=LETTERS, max_seq_len=5)


def test_token_outside_the_vocab(hist_model):
    with pytest.raises(
        ValueError,
        match=r"token 'z' at position 1 is not in the vocabulary \['a', 'b', 'c'\]; use only",
    ):
        hist_model.run(["a", "z"])


def test_input_longer_than_max_seq_len(hist_model):
    with pytest.raises(
        ValueError,
        match=r"input length 6 exceeds the model's max_seq_len=5; compile with a larger",
    ):
        hist_model.run(list("abcab") + ["a"])


def test_rows_of_different_lengths(hist_model):
    with pytest.raises(ValueError, match=r"row 0 has 2, row 1 has 3; run them separately"):
        hist_model.run([["a", "b"], ["a", "b", "c"]])


def test_fixed_length_model_rejects_other_lengths():
    model = compile_program(library.make_hist(), vocab=LETTERS, max_seq_len=4, fixed_length=True)
    with pytest.raises(
        ValueError, match=r"exactly 4 tokens \(it was compiled with fixed_length=True, .*\), got 3"
    ):
        model.run(["a", "b", "c"])


def test_real_valued_model_rejects_text_and_infinities():
    model = compile_program(real_tokens() * 2, vocab=None, max_seq_len=4)
    with pytest.raises(ValueError, match=r"token 'x' at position 0 is not a number"):
        model.run(["x"])
    with pytest.raises(ValueError, match=r"token inf at position 1 is not finite"):
        model.run([1.0, float("inf")])


# -- run-time checks: refuse instead of returning garbage ------------------------------------


def test_numerical_eq_on_a_non_integer_value_is_refused_at_run_time():
    # EQ of real-valued S-ops compiles to a quadratic score that is exact on integers only;
    # the model checks that assumption on every input
    tokens = real_tokens()
    program = rasp.numerical(rasp.Aggregate(rasp.Select(tokens, tokens, C.EQ), tokens * 3))
    model = compile_program(program, vocab=None, max_seq_len=4)
    xs = [1.0, 2.0, 1.0]
    assert model.run(xs) == rasp.evaluate(program, xs)  # integers: exact
    bad = [0.5, 1.0, 0.5]
    with pytest.raises(
        ValueError,
        match=r"run-time check failed: 'tokens' = 0\.5 at position 0 \(row 0\) is not an integer",
    ):
        model.run(bad)
    # without the check the model returns a wrong answer, which is what the check prevents
    assert model.run(bad, check=False) != rasp.evaluate(program, bad)


def test_numerical_eq_on_a_near_integer_mean_is_refused_at_run_time():
    # a mean of 1000 and 1000.0008 is 1000.0004: not an integer (the score would take it for
    # 1000, as it would 1.0000005 for 1), though within 1e-6 of one; integer means pass
    tokens = real_tokens()
    m = rasp.numerical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, C.LEQ), tokens))
    program = rasp.SelectorWidth(rasp.Select(m.named("m"), m, C.EQ))
    model = compile_program(program, vocab=None, max_seq_len=3)
    for bad, shown in (([1000.0, 1000.0008], "1000.0004"), ([1.0, 1.000001], "1.0000005")):
        with pytest.raises(ValueError, match=rf"'m' = {shown} at position 1 .* not an integer"):
            model.run(bad)
    for xs in ([1000.0, 1002.0], [5.0, 1.0, 3.0], [3.0, 3.0, 3.0]):
        assert model.run(xs) == rasp.evaluate(program, xs)


def test_run_time_check_names_the_offending_row_and_position():
    tokens = real_tokens()
    doubled = (tokens * 2).named("doubled")
    program = rasp.SelectorWidth(rasp.Select(doubled, tokens, C.EQ))
    model = compile_program(program, vocab=None, max_seq_len=4)
    with pytest.raises(ValueError, match=r"'doubled' = 2\.5 at position 2 \(row 1\)"):
        model.run([[1.0, 2.0, 3.0], [1.0, 2.0, 1.25]])


# -- bad arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            {"attention": "linear"},
            ValueError,
            r"attention must be 'hard' or 'softmax', got 'linear'",
        ),
        ({"maps": "taylor"}, ValueError, r"maps must be 'native' or 'relu', got 'taylor'"),
        ({"max_seq_len": 0}, ValueError, r"max_seq_len must be a positive int \(.*\), got 0"),
        (
            {"max_seq_len": 2.5},
            TypeError,
            r"max_seq_len must be a positive int \(.*\), got float 2\.5",
        ),
        ({"dtype": torch.float16}, ValueError, r"dtype must be torch\.float64 or torch\.float32"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    args = {"vocab": LETTERS, "max_seq_len": 4, **kwargs}
    with pytest.raises(error, match=message):
        compile_program(library.make_hist(), **args)


def test_a_selector_is_not_a_program():
    with pytest.raises(TypeError, match=r"expects a RASP S-op, got Select; a selector alone"):
        compile_program(rasp.Select(rasp.tokens, rasp.tokens, C.EQ), vocab=LETTERS, max_seq_len=3)


def test_a_python_value_is_not_a_program():
    with pytest.raises(TypeError, match=r"expects a RASP S-op, got list"):
        compile_program([1, 2], vocab=LETTERS, max_seq_len=3)
