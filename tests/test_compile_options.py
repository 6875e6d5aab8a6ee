"""CompileOptions: defaults, enums from plain strings, validation wording, and the keyword
shorthand of compile_program."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from attnsim import rasp
from attnsim.compiler import AttentionMode, CompileOptions, MapError, MapMode, compile_program
from attnsim.compiler import options as O
from attnsim.rasp import library


def test_defaults():
    o = CompileOptions()
    assert (o.causal, o.attention, o.maps, o.map_tolerance, o.map_ranges) == (
        False,
        AttentionMode.HARD,
        MapMode.NATIVE,
        1e-6,
        None,
    )
    assert (o.map_error, o.fixed_length, o.dtype, o.value_scale) == (
        MapError.ABSOLUTE,
        False,
        "auto",
        1.0,
    )
    # "auto" sizes memory checks for float64, the larger of its two choices
    assert o.itemsize == 8 and CompileOptions(dtype=torch.float32).itemsize == 4


def test_enum_fields_accept_plain_strings_and_members():
    o = CompileOptions(attention="softmax", maps="relu", map_error="relative")
    assert o.attention is AttentionMode.SOFTMAX and o.attention == "softmax"
    assert o.maps is MapMode.RELU and o.map_error is MapError.RELATIVE
    assert CompileOptions(attention=AttentionMode.SOFTMAX) == o.__class__(attention="softmax")


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        CompileOptions().causal = True  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"causal": "yes"}, TypeError, r"^causal must be True or False, got str 'yes'$"),
        ({"fixed_length": 1}, TypeError, r"^fixed_length must be True or False, got int 1$"),
        (
            {"attention": "linear"},
            ValueError,
            r"^attention must be 'hard' or 'softmax', got 'linear'$",
        ),
        ({"maps": "taylor"}, ValueError, r"^maps must be 'native' or 'relu', got 'taylor'$"),
        (
            {"map_tolerance": math.nan},
            ValueError,
            r"^map_tolerance must be a positive finite number, got nan$",
        ),
        ({"map_tolerance": 0}, ValueError, r"^map_tolerance must be a positive finite number"),
        (
            {"map_error": "rel"},
            ValueError,
            r"^map_error must be 'absolute' or 'relative', got 'rel'$",
        ),
        (
            {"dtype": torch.float16},
            ValueError,
            r"^dtype must be torch\.float64 or torch\.float32, or one of the strings 'auto', "
            r"'float64', 'float32'; got torch\.float16$",
        ),
        (
            {"value_scale": math.inf},
            ValueError,
            r"^value_scale must be a finite number >= 1, got inf$",
        ),
        ({"value_scale": 0.5}, ValueError, r"^value_scale must be a finite number >= 1, got 0\.5$"),
    ],
)
def test_validation_wording(kwargs, error, message):
    with pytest.raises(error, match=message):
        CompileOptions(**kwargs)
    with pytest.raises(error, match=message):  # the keyword shorthand says the same
        compile_program(library.make_hist(), vocab="ab", max_seq_len=3, **kwargs)


@pytest.mark.parametrize(
    "value, error, message",
    [
        (0, ValueError, r"max_seq_len must be a positive int \(.*\), got 0"),
        (2.5, TypeError, r"max_seq_len must be a positive int \(.*\), got float 2\.5"),
        (True, TypeError, r"got bool True"),
    ],
)
def test_max_seq_len(value, error, message):
    with pytest.raises(error, match=message):
        O.check_max_seq_len(value)


def test_options_object_and_keywords_give_the_same_model():
    program = library.make_hist()
    a = compile_program(program, vocab="abc", max_seq_len=4, causal=True, attention="softmax")
    opts = CompileOptions(causal=True, attention=AttentionMode.SOFTMAX)
    b = compile_program(program, vocab="abc", max_seq_len=4, options=opts)
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert a.report().attention == b.report().attention == "softmax"
    assert b.run("abca") == rasp.evaluate(program, "abca", causal=True)


def test_keyword_repeating_the_options_value_is_fine():
    opts = CompileOptions(causal=True)
    assert O.resolve(opts, {"causal": True}) is opts
    assert O.resolve(CompileOptions(attention="softmax"), {"attention": "softmax"}).causal is False


def test_conflicting_keyword_is_refused():
    with pytest.raises(
        TypeError,
        match=r"causal both in options and as a keyword, with different values "
        r"\(causal=True in options, causal=False as a keyword\)",
    ):
        compile_program(
            library.make_hist(),
            vocab="ab",
            max_seq_len=3,
            options=CompileOptions(causal=True),
            causal=False,
        )


def test_unknown_keyword_and_wrong_options():
    with pytest.raises(
        TypeError,
        match=r"unexpected keyword argument\(s\) casual; the options are causal, attention",
    ):
        compile_program(library.make_hist(), vocab="ab", max_seq_len=3, casual=True)
    with pytest.raises(TypeError, match=r"options must be a CompileOptions .* got dict"):
        compile_program(library.make_hist(), vocab="ab", max_seq_len=3, options={"causal": True})
