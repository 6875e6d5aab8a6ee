"""Bad inputs to the compiled-model API: each ends in a clear error or the right answer.

One table. A row does one bad (or borderline) thing and expects either an exception of a
given type whose message matches a pattern (the wording is part of the contract: what was
expected, what arrived, what to do), or the interpreter's answer (``rasp.evaluate``, the
independent oracle). Where the interpreter itself refuses the input, the row says so and the
test checks that it does.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from attnsim import library, rasp
from attnsim.compiler import compile_program
from attnsim.model.checkpoint import DamagedCheckpointError
from attnsim.model.compiled import CompiledModel, RunTimeCheckError
from attnsim.model.memory import ModelTooLargeError
from attnsim.rasp.interpret import RASPEvaluationError

C = rasp.Comparison
PAIRS = [(0, False), (0, True), (1, False), (1, True)]


@dataclass(frozen=True)
class Case:
    """``act`` does the bad thing; then either ``error`` (and ``match``) or ``oracle``.

    Attributes:
        act: runs the API on the bad input and returns what it answers.
        error: the exception type expected (None: an answer is expected).
        match: a regular expression the message must match.
        oracle: the right answer, from the interpreter.
        interpreter: a callable running the interpreter on the same input, when it must
            raise too (a RASPEvaluationError matching ``match_interpreter``).
        match_interpreter: the pattern for the interpreter's message.
    """

    act: Callable[[], Any]
    error: type[BaseException] | None = None
    match: str = ""
    oracle: Callable[[], Any] | None = None
    interpreter: Callable[[], Any] | None = None
    match_interpreter: str = ""


# -- programs ----------------------------------------------------------------------------------


def pick_other() -> rasp.SOp:
    """The token at the other positions: a mixture wherever two distinct tokens remain."""
    return rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens, C.NEQ), rasp.tokens).named(
        "pick_other"
    )


def previous(default: Any = None) -> rasp.SOp:
    """The token one position back: None at position 0 (nothing selected) unless default."""
    sel = rasp.Select(rasp.indices, rasp.indices - 1, C.EQ)
    return rasp.Aggregate(sel, rasp.tokens, default=default).named("prev")


def hist() -> rasp.SOp:
    return rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, C.EQ)).named("hist")


def compiled(program: rasp.SOp, vocab: Any, max_seq_len: int = 4, **kw: Any) -> CompiledModel:
    return compile_program(program, vocab=vocab, max_seq_len=max_seq_len, **kw)


def same(program: rasp.SOp, xs: Any, **kw: Any) -> Callable[[], Any]:
    return lambda: rasp.evaluate(program, xs, **kw)


def run_case(program: rasp.SOp, vocab: Any, xs: Any, **kw: Any) -> Case:
    """A row expecting the interpreter's answer from the compiled model."""
    return Case(lambda: compiled(program, vocab, **kw).run(xs), oracle=same(program, xs, **kw))


# -- checkpoints ---------------------------------------------------------------------------------


def saved(program: rasp.SOp | None = None, vocab: Any = "ab") -> Path:
    path = Path(tempfile.mkdtemp(prefix="attnsim-bad-"))
    compiled(program if program is not None else hist(), vocab, max_seq_len=3).save(path)
    return path


def edit_json(change: Callable[[dict], None]) -> Callable[[], Any]:
    def act() -> Any:
        path = saved()
        meta = json.loads((path / "model.json").read_text())
        change(meta)
        (path / "model.json").write_text(json.dumps(meta))
        return CompiledModel.load(path)

    return act


def edit_weights(change: Callable[[dict], None]) -> Callable[[], Any]:
    def act() -> Any:
        path = saved()
        state = load_file(str(path / "model.safetensors"))
        change(state)
        save_file(state, str(path / "model.safetensors"))
        return CompiledModel.load(path)

    return act


def poison(name: str, value: float) -> Callable[[dict], None]:
    def change(state: dict) -> None:
        state[name].view(-1)[0] = value

    return change


def replace_with_directory(name: str) -> Callable[[], Any]:
    def act() -> Any:
        path = saved()
        (path / name).unlink()
        (path / name).mkdir()
        return CompiledModel.load(path)

    return act


def round_trip(program: rasp.SOp, vocab: Any, xs: Any) -> Callable[[], Any]:
    def act() -> Any:
        return CompiledModel.load(saved(program, vocab)).run(xs)

    return act


def json_text(text: str) -> Callable[[], Any]:
    def act() -> Any:
        path = saved()
        (path / "model.json").write_text(text)
        return CompiledModel.load(path)

    return act


def set_key(*keys: str, value: Any) -> Callable[[dict], None]:
    def change(meta: dict) -> None:
        d = meta
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value

    return change


def guard_with(**fields: Any) -> Callable[[dict], None]:
    """Replaces the checkpoint's run-time checks by one guard with these fields."""
    guard = {"label": "x", "form": [], "stage": 0, "allowed": None, "integer": False}
    return set_key("guards", value=[guard | fields])


def drop_key(key: str) -> Callable[[dict], None]:
    return lambda meta: meta.pop(key)


# -- the table -------------------------------------------------------------------------------

MIXTURE = (
    r"categorical Aggregate 'pick_other' would average several distinct values "
    r"\('b', 'c'\) at query position 0"
)
NONE_REACHES = r"'prev' is None \(no value\) at position 0 \(row 0\);.*give the Aggregate"
PREV_EQ = rasp.SelectorWidth(rasp.Select(previous(), previous(), C.EQ))
FIRST = rasp.Map(lambda p: p[0], rasp.tokens).named("first")
NUM_TOKENS = rasp.numerical(rasp.tokens)

CASES: dict[str, Case] = {
    # 1. a categorical aggregate over several distinct values: the interpreter's error
    "mixture_output": Case(
        lambda: compiled(pick_other(), "abc").run("abc"),
        RunTimeCheckError,
        MIXTURE,
        interpreter=same(pick_other(), "abc"),
        match_interpreter=r"categorical Aggregate 'pick_other' would average several distinct "
        r"values \('b', 'c'\) at query position 0",
    ),
    "mixture_hidden_by_a_constant_map": Case(
        lambda: compiled(rasp.Map(lambda x: "same", pick_other()), "abc").run("abc"),
        RunTimeCheckError,
        MIXTURE,
        interpreter=same(rasp.Map(lambda x: "same", pick_other()), "abc"),
        match_interpreter=r"would average several distinct values",
    ),
    "mixture_in_softmax_mode": Case(
        lambda: compiled(pick_other(), "abc", attention="softmax").run("abc"),
        RunTimeCheckError,
        MIXTURE,
    ),
    "mixture_in_a_batch_row": Case(
        lambda: compiled(pick_other(), "abc").run([list("aba"), list("bab"), list("cab")]),
        RunTimeCheckError,
        r"would average several distinct values \('a', 'b'\) at query position 0 \(row 2\)",
    ),
    "mixture_unchecked_output_still_refused": Case(
        lambda: compiled(pick_other(), "abc").run("abc", check=False),
        RunTimeCheckError,
        r"the output at position 0 \(row 0\) is not one value but a mixture \('b': 0\.5, "
        r"'c': 0\.5\)",
    ),
    "one_other_value_is_fine": run_case(pick_other(), "abc", "ab"),
    "mixture_causal": Case(
        lambda: compiled(pick_other(), "abc", causal=True).run("abc"),
        RunTimeCheckError,
        r"would average several distinct values \('a', 'b'\) at query position 2",
        interpreter=lambda: rasp.evaluate(pick_other(), "abc", causal=True),
        match_interpreter=r"several distinct values \('a', 'b'\) at query position 2",
    ),
    # 2. a selector whose predicate fails on values that can meet
    "select_str_lt_int": Case(
        lambda: compiled(
            rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.indices, C.LT).named("lt")), "abc"
        ),
        RASPEvaluationError,
        r"fails on inputs the vocabulary allows.*\n  - the function of 'lt' raised TypeError: "
        r"'<' not supported between instances of 'str' and 'int' on \('a', 0\) \(key 'a' of "
        r"'tokens', query 0 of 'indices'\); every key value must be comparable",
        interpreter=same(
            rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.indices, C.LT).named("lt")), "abc"
        ),
        match_interpreter=r"the function of 'lt' raised TypeError: '<' not supported between "
        r"instances of 'str' and 'int' on \('a', 0\)",
    ),
    "select_predicate_divides_by_zero": Case(
        lambda: compiled(
            rasp.SelectorWidth(
                rasp.Select(rasp.tokens, rasp.tokens, lambda k, q: k / q > 1).named("ratio")
            ),
            [0, 1, 2],
        ),
        RASPEvaluationError,
        r"the function of 'ratio' raised ZeroDivisionError: division by zero on \(0, 0\)",
    ),
    "select_eq_across_kinds_is_fine": run_case(
        rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.indices, C.EQ)), ["a", 1], ["a", 1, 1]
    ),
    # 3. non-finite map values
    "map_nan": Case(
        lambda: compiled(
            rasp.numerical(rasp.Map(lambda x: math.nan if x == 2 else float(x), rasp.tokens)).named(
                "half"
            ),
            [1, 2, 3],
        ).run([1, 3]),
        RASPEvaluationError,
        r"map 'half' gives nan for the input value 2; a compiled model computes with finite "
        r"values only",
    ),
    "map_inf": Case(
        lambda: compiled(
            rasp.numerical(rasp.Map(lambda x: 1 / x if x else math.inf, rasp.tokens)).named("inv"),
            [0, 1, 2],
        ),
        RASPEvaluationError,
        r"map 'inv' gives inf for the input value 0",
    ),
    "categorical_map_inf": Case(
        lambda: compiled(rasp.Map(lambda x: -math.inf if x == "a" else x, rasp.tokens), "ab"),
        RASPEvaluationError,
        r"gives -inf for the input value 'a'",
    ),
    "division_by_index_zero": Case(
        lambda: compiled(
            rasp.numerical(NUM_TOKENS / rasp.numerical(rasp.indices)).named("q"), [1, 2]
        ),
        RASPEvaluationError,
        r"map 'q' gives inf for the input values \(1\.0, 0\.0\)",
    ),
    "map_raises_on_a_token_that_occurs": Case(
        lambda: compiled(
            rasp.numerical(rasp.Map(lambda x: 10 // x, rasp.tokens)).named("tenth"), [0, 1, 2]
        ).run([0, 1]),
        RunTimeCheckError,
        r"at position 0 \(row 0\): the function of 'tenth' raised ZeroDivisionError: integer "
        r"division or modulo by zero on \(0\)",
        interpreter=same(
            rasp.numerical(rasp.Map(lambda x: 10 // x, rasp.tokens)).named("tenth"), [0, 1]
        ),
        match_interpreter=r"the function of 'tenth' raised ZeroDivisionError",
    ),
    "map_fails_on_every_value_it_sees": Case(
        lambda: compiled(
            rasp.numerical(rasp.Map(math.sqrt, -rasp.numerical(rasp.tokens))).named("root"), [1]
        ).run([1]),
        RunTimeCheckError,
        r"is not a value: its function gives no value on any input the compiler saw.*"
        r"math domain error",
        interpreter=same(rasp.numerical(rasp.Map(math.sqrt, -rasp.numerical(rasp.tokens))), [1]),
        match_interpreter=r"math domain error",
    ),
    "map_raises_on_a_token_that_does_not_occur": run_case(
        rasp.numerical(rasp.Map(lambda x: 10 // x, rasp.tokens)), [0, 1, 2], [1, 2]
    ),
    "numerical_map_gives_none": Case(
        lambda: compiled(
            rasp.numerical(rasp.Map(lambda x: None if x == 2 else x, rasp.tokens)).named("m"),
            [1, 2, 3],
        ).run([1, 2]),
        RunTimeCheckError,
        r"at position 1 \(row 0\): S-op 'm' is numerical but holds the value None",
        interpreter=same(
            rasp.numerical(rasp.Map(lambda x: None if x == 2 else x, rasp.tokens)).named("m"),
            [1, 2],
        ),
        match_interpreter=r"S-op 'm' is numerical but holds the value None",
    ),
    # 4. None as a token, and None (no value) meeting functions and selectors
    "none_in_vocab": Case(
        lambda: compiled(hist(), [None, "a"]),
        ValueError,
        r"vocab contains None, which RASP reserves for 'no value' .* use another token",
    ),
    "none_eq_none_in_a_selector": Case(
        lambda: compiled(PREV_EQ, "abc").run("abca"),
        RunTimeCheckError,
        r"'prev' is None \(no value\) at position 0 \(row 0\); the interpreter raises there: "
        r"the function of '\S+' raised ValueError: key is None!",
    ),
    "function_called_on_none": run_case(  # tracr's semantics: a map of None is None
        rasp.Map(lambda x: x is None, previous()).named("is_none"), "ab", "ab"
    ),
    "function_that_keeps_none": run_case(
        rasp.Map(lambda x: None if x is None else x.upper(), previous()), "ab", "abba"
    ),
    "function_raising_on_none": run_case(  # the function is not called on None
        rasp.Map(lambda x: x.upper(), previous()).named("up"), "ab", "ab"
    ),
    "none_pairs_that_never_meet": run_case(
        library.detect_pattern(rasp.tokens, "abc"), "abc", "abcab", max_seq_len=5
    ),
    "numerical_mean_of_none": Case(
        lambda: compiled(
            rasp.numerical(
                rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, C.EQ), previous())
            ).named("mean_prev"),
            [1, 2],
        ).run([1, 2]),
        RunTimeCheckError,
        NONE_REACHES,
        interpreter=same(
            rasp.numerical(
                rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, C.EQ), previous())
            ),
            [1, 2],
        ),
        match_interpreter=r"numerical but holds the value None",
    ),
    "a_default_keeps_none_out": run_case(
        rasp.SelectorWidth(rasp.Select(previous("-"), previous("-"), C.EQ)), "ab", "abba"
    ),
    "constant_sop_of_another_length": Case(
        lambda: compiled(rasp.ConstantSOp(["x", "y", "z"]), "ab", max_seq_len=3).run("ab"),
        ValueError,
        r"this model takes inputs of exactly 3 tokens \(.*a ConstantSOp or a ConstantSelector "
        r"of that length\), got 2",
        interpreter=same(rasp.ConstantSOp(["x", "y", "z"]), "ab"),
        match_interpreter=r"has 3 values but the input has length 2",
    ),
    "numerical_tokens_from_letters": Case(
        lambda: compiled(NUM_TOKENS * 2, "ab"),
        RASPEvaluationError,
        r"tokens are used as numbers .* but the vocab holds 'a', which is not a number",
    ),
    # 6. sizes that cannot fit
    "max_seq_len_a_million": Case(
        lambda: compiled(hist(), "ab", max_seq_len=10**6),
        ModelTooLargeError,
        r"compiling with max_seq_len=1000000 \(attention over 1000001 positions\) needs about "
        r"[\d.]+ GiB, more than this machine's [\d.]+ GiB of memory; lower max_seq_len",
    ),
    "max_seq_len_a_million_is_a_memory_error": Case(
        lambda: compiled(hist(), "ab", max_seq_len=10**6), MemoryError, r"needs about"
    ),
    "static_selector_too_large_in_sparse_storage": Case(
        lambda: compile_program(
            rasp.SelectorWidth(rasp.Select(rasp.indices, rasp.indices, C.LEQ)),
            vocab="ab",
            max_seq_len=300_000,
            fixed_length=True,
            storage="sparse",
        ),
        ModelTooLargeError,
        r"evaluating the static selector '.*' at max_seq_len=300000 \(\[300000, 300000\] "
        r"masks\) needs about [\d.]+ GiB.*lower max_seq_len",
    ),
    "simulator_too_large_to_build": Case(
        lambda: __import__("attnsim").simulator.build(1000, 1000, 8),
        MemoryError,
        r"building U for max_n=1000, max_d=1000, max_heads=8 \(a sequence of 8,000,000 "
        r"positions\) needs about .* GiB.*lower max_n, max_d or max_heads",
    ),
    "scalar_simulator_too_large_to_build": Case(
        lambda: __import__("attnsim").simulator.build(1000, 1000, 8, layout="scalar"),
        MemoryError,
        r"building U for max_n=1000, max_d=1000, max_heads=8 \(a sequence of 17,026,009 "
        r"positions\) needs about .* GiB.*lower max_n, max_d or max_heads",
    ),
    # 7. arguments of the wrong kind or value
    "max_seq_len_zero": Case(
        lambda: compiled(hist(), "ab", max_seq_len=0),
        ValueError,
        r"max_seq_len must be a positive int \(the longest input the model accepts\), got 0",
    ),
    "max_seq_len_negative": Case(
        lambda: compiled(hist(), "ab", max_seq_len=-3), ValueError, r"got -3"
    ),
    "max_seq_len_str": Case(
        lambda: compiled(hist(), "ab", max_seq_len="5"),
        TypeError,
        r"max_seq_len must be a positive int .*, got str '5'",
    ),
    "max_seq_len_bool": Case(
        lambda: compiled(hist(), "ab", max_seq_len=True), TypeError, r"got bool True"
    ),
    "max_seq_len_numpy_int_is_fine": run_case(hist(), "ab", "aba", max_seq_len=np.int64(4)),
    "vocab_empty": Case(
        lambda: compiled(hist(), []), ValueError, r"vocab is empty; list the tokens"
    ),
    "vocab_unhashable": Case(
        lambda: compiled(hist(), [[1], [2]]),
        TypeError,
        r"vocab tokens must be hashable .* token 0 is the list \[1\]: use a tuple instead",
    ),
    "vocab_an_int": Case(
        lambda: compiled(hist(), 5),
        TypeError,
        r"vocab must be a collection of tokens .* got int 5",
    ),
    "vocab_nan": Case(
        lambda: compiled(hist(), [1.0, math.nan]),
        ValueError,
        r"vocab token 1 is nan, which is not a finite value",
    ),
    "causal_not_a_bool": Case(
        lambda: compiled(hist(), "ab", causal="yes"),
        TypeError,
        r"causal must be True or False, got str 'yes'",
    ),
    "value_scale_inf": Case(
        lambda: compiled(hist(), "ab", value_scale=math.inf),
        ValueError,
        r"value_scale must be a finite number >= 1, got inf",
    ),
    "map_tolerance_nan": Case(
        lambda: compiled(hist(), "ab", map_tolerance=math.nan),
        ValueError,
        r"map_tolerance must be a positive finite number, got nan",
    ),
    # 7. inputs to run
    "evaluate_an_int": Case(
        lambda: rasp.evaluate(hist(), 5),
        TypeError,
        r"evaluate expects a sequence of tokens .* got int 5; wrap one token as \[token\]",
    ),
    "evaluate_a_batch_with_a_bare_token": Case(
        lambda: rasp.evaluate(hist(), [[1, 2], 3]),
        TypeError,
        r"expects a list of token sequences .* pass \[sequence\] for one sequence",
    ),
    "evaluate_an_empty_sequence_of_a_sort": Case(
        lambda: rasp.evaluate(library.make_sort_unique(rasp.tokens, rasp.tokens), []),
        None,
        None,
        oracle=lambda: [],  # no position, no value
    ),
    "evaluate_an_unhashable_vocab": Case(
        lambda: rasp.evaluate(hist(), ["a"], vocab=[["a"], ["b"]]),
        TypeError,
        r"vocab tokens must be hashable values .* got list \['a'\]; use a tuple",
    ),
    "run_an_int": Case(
        lambda: compiled(hist(), "ab").run(5),
        TypeError,
        r"expected a sequence of tokens \(a list, or a string of characters\) .* got int 5; "
        r"wrap one token in a list",
    ),
    "run_a_string_of_characters": run_case(hist(), "abc", "abca"),
    "run_a_ragged_nesting": Case(
        lambda: compiled(hist(), "abc").run([["a", "b"], "c"]),
        TypeError,
        r"a batch is a list of sequences, but row 1 is the str 'c'",
    ),
    "run_too_deep": Case(
        lambda: compiled(hist(), "abc").run([[["a"]]]),
        TypeError,
        r"token \['a'\] at position 0 \(row 0\) is a list, not a token",
    ),
    "run_a_3d_array": Case(
        lambda: compiled(hist(), [0, 1]).run(np.zeros((1, 2, 2), dtype=int)),
        ValueError,
        r"expected a sequence of tokens \(1-D\) or a batch of them \(2-D\), got a 3-D array",
    ),
    "run_a_dict": Case(
        lambda: compiled(hist(), "ab").run({"a": 1}),
        TypeError,
        r"expected a sequence of tokens in order, got a dict; pass a list",
    ),
    "run_token_outside_vocab": Case(
        lambda: compiled(hist(), "abc").run(["a", "z"]),
        ValueError,
        r"token 'z' at position 1 is not in the vocabulary \['a', 'b', 'c'\]",
        interpreter=lambda: rasp.evaluate(hist(), ["a", "z"], vocab="abc"),
    ),
    "run_none_token": Case(
        lambda: compiled(hist(), "abc").run(["a", None]),
        ValueError,
        r"token None at position 1 is not in the vocabulary",
    ),
    "run_too_long": Case(
        lambda: compiled(hist(), "ab", max_seq_len=3).run("abab"),
        ValueError,
        r"input length 4 exceeds the model's max_seq_len=3; compile with a larger max_seq_len",
    ),
    "run_nan_real_token": Case(
        lambda: compiled(NUM_TOKENS * 2, None).run([1.0, math.nan]),
        ValueError,
        r"token nan at position 1 is not finite; this model computes on finite real numbers",
    ),
    "run_text_real_token": Case(
        lambda: compiled(NUM_TOKENS * 2, None).run([1.0, "x"]),
        ValueError,
        r"token 'x' at position 1 is not a number; this model reads real-valued tokens",
    ),
    "run_one_sequence_of_pair_tokens": Case(
        lambda: compiled(FIRST, PAIRS).run([(0, True), (1, False)]),
        oracle=lambda: rasp.evaluate(FIRST, [[(0, True), (1, False)]])[0],
    ),
    # 5. damaged checkpoints
    "checkpoint_nan_weight": Case(
        edit_weights(poison("W_E", math.nan)),
        DamagedCheckpointError,
        r"damaged checkpoint: .*model\.safetensors holds nan in the tensor 'W_E' at \[0, 0\]; "
        r"weights must be finite; save the model again",
    ),
    "checkpoint_inf_weight": Case(
        edit_weights(poison("blocks.0.attn.W_Q", -math.inf)),
        DamagedCheckpointError,
        r"holds -inf in the tensor 'blocks\.0\.attn\.W_Q'",
    ),
    "checkpoint_extra_tensor": Case(
        edit_weights(lambda s: s.update(extra=torch.zeros(2, dtype=torch.float64))),
        DamagedCheckpointError,
        r"holds the tensor 'extra', which the config has no place for",
    ),
    "checkpoint_missing_tensor": Case(
        edit_weights(lambda s: s.pop("W_pos")),
        DamagedCheckpointError,
        r"lacks the tensor 'W_pos'",
    ),
    "checkpoint_extra_key": Case(
        edit_json(set_key("extra", value=1)),
        DamagedCheckpointError,
        r"damaged checkpoint: .*model\.json has an unexpected key 'extra' in the file",
    ),
    "checkpoint_missing_key": Case(
        edit_json(drop_key("residual")),
        DamagedCheckpointError,
        r"model\.json lacks the key 'residual' in the file",
    ),
    "checkpoint_max_seq_len_as_text": Case(
        edit_json(set_key("max_seq_len", value="3")),
        DamagedCheckpointError,
        r"has max_seq_len='3' for n_ctx=4",
    ),
    "checkpoint_config_wrong_type": Case(
        edit_json(set_key("config", "n_heads", value="one")),
        DamagedCheckpointError,
        r"has an invalid 'config' \(ModelConfig\.n_heads must be an int, got str 'one'\)",
    ),
    "checkpoint_config_unknown_field": Case(
        edit_json(set_key("config", "d_extra", value=1)),
        DamagedCheckpointError,
        r"invalid 'config' \(unknown ModelConfig fields \['d_extra'\]\)",
    ),
    "checkpoint_huge_d_model": Case(
        edit_json(set_key("config", "d_model", value=10**7)),
        DamagedCheckpointError,
        r"damaged checkpoint: the config in .*model\.json \(n_layers=\d+, d_model=10000000, "
        r".*\) asks for about [\d.]+ GiB of weights, but .*model\.safetensors holds only \d+ "
        r"bytes",
    ),
    "checkpoint_output_names_unknown_direction": Case(
        edit_json(set_key("output", "dims", value=["nowhere"])),
        DamagedCheckpointError,
        r"names the direction 'nowhere' in 'output\.dims', not in 'residual'",
    ),
    "checkpoint_guards_not_a_list": Case(
        edit_json(set_key("guards", value={"a": 1})),
        DamagedCheckpointError,
        r"has a 'guards' that is not a list",
    ),
    "checkpoint_guard_cancellation_not_a_number": Case(
        edit_json(guard_with(cancellation="big")),
        DamagedCheckpointError,
        r"has 'guards\[0\]'\.cancellation = 'big', expected a number above 0",
    ),
    "checkpoint_guard_cancellation_not_above_0": Case(
        edit_json(guard_with(cancellation=False)),
        DamagedCheckpointError,
        r"has 'guards\[0\]'\.cancellation = False, expected a number above 0",
    ),
    "checkpoint_json_is_a_directory": Case(
        replace_with_directory("model.json"),
        DamagedCheckpointError,
        r"model\.json is not a file \(a directory\?\)",
    ),
    "checkpoint_weights_are_a_directory": Case(
        replace_with_directory("model.safetensors"),
        DamagedCheckpointError,
        r"model\.safetensors is not a file \(a directory\?\)",
    ),
    "checkpoint_json_is_a_list": Case(
        json_text("[1, 2]"),
        DamagedCheckpointError,
        r"is not an attnsim compiled model",
    ),
    "checkpoint_of_pair_tokens_round_trips": Case(
        round_trip(FIRST, PAIRS, [[(1, True), (0, False)]]),
        oracle=lambda: rasp.evaluate(FIRST, [[(1, True), (0, False)]]),
    ),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_bad_input(case: Case) -> None:
    if case.error is not None:
        with pytest.raises(case.error, match=case.match):
            case.act()
    else:
        assert case.act() == case.oracle()
    if case.interpreter is not None:
        kind = ValueError if not case.match_interpreter else RASPEvaluationError
        with pytest.raises(kind, match=case.match_interpreter or None):
            case.interpreter()


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 30
    assert sum(c.error is None for c in CASES.values()) >= 8  # right answers, not just errors
