"""attnsim.tracr's compiler call against the interpreter, numpy, tracr's conformance vectors
and (when tracr-pypi is installed) tracr's own compiled models."""

import math

import numpy as np
import pytest

from attnsim.model.compiled import RunTimeCheckError
from attnsim.tracr.compiler import assemble, compiling, lib
from attnsim.tracr.rasp import rasp

from .conformance.cases import CASES_PATH, MISSING_REASON, load_cases


def _compile(program, vocab, max_seq_len=5, **kw):
    return compiling.compile_rasp_to_model(program, vocab, max_seq_len, compiler_bos="BOS", **kw)


def test_readme_example():
    model = compiling.compile_rasp_to_model(
        lib.make_length(), vocab={1, 2, 3}, max_seq_len=5, compiler_bos="BOS"
    )
    assert isinstance(model, assemble.AssembledTransformerModel)
    assert model.apply(["BOS", 1, 2, 3]).decoded == ["BOS", 3, 3, 3]


PROGRAMS = {
    "hist": (lambda: lib.make_hist(), {"a", "b", "c"}, ["a", "b", "a", "c"]),
    "sort_unique": (lambda: lib.make_sort_unique(rasp.tokens, rasp.tokens), {1, 2, 5}, [5, 1, 2]),
    "frac_prevs": (
        lambda: lib.make_frac_prevs(rasp.tokens == "x"),
        {"x", "y"},
        ["x", "y", "y", "x"],
    ),
    "shift_by": (lambda: lib.shift_by(1, rasp.tokens), {"a", "b"}, ["a", "b", "b"]),
    "reverse": (lambda: lib.make_reverse(rasp.tokens), {"a", "b", "c"}, ["a", "b", "c"]),
    "detect_pattern": (
        lambda: lib.detect_pattern(rasp.tokens, "ab"),
        {"a", "b"},
        ["a", "b", "a", "b"],
    ),
    "map_of_none": (
        lambda: rasp.Map(lambda x: x + "!", lib.shift_by(1, rasp.tokens)),
        {"a", "b"},
        ["a", "b", "a"],
    ),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_apply_equals_the_interpreter(name):
    build, vocab, xs = PROGRAMS[name]
    program = build()
    out = _compile(program, vocab).apply(["BOS", *xs])
    want = rasp.evaluate(program, xs)
    assert out.decoded[0] == "BOS" and len(out.decoded) == 1 + len(xs)
    if rasp.is_numerical(program):
        assert all(math.isclose(g, w, abs_tol=1e-9) for g, w in zip(out.decoded[1:], want))
    else:
        assert out.decoded[1:] == want


def test_activations_add_up_and_have_tracrs_shapes():
    model = _compile(lib.make_sort_unique(rasp.tokens, rasp.tokens), {1, 2, 5})
    out = model.apply(["BOS", 5, 1, 2])
    cfg, d = model.model_config, len(model.residual_labels)
    t = 4
    assert len(out.residuals) == len(out.layer_outputs) == 2 * cfg.num_layers
    assert len(out.attn_logits) == cfg.num_layers
    assert all(r.shape == (1, t, d) for r in out.residuals)
    assert all(a.shape == (1, cfg.num_heads, t, t) for a in out.attn_logits)
    assert out.input_embeddings.shape == out.transformer_output.shape == (1, t, d)
    # the stream is the embedding plus every sublayer's output (numpy as the oracle)
    total = out.input_embeddings + np.sum(out.layer_outputs, axis=0)
    np.testing.assert_allclose(total, out.transformer_output, atol=1e-5)
    np.testing.assert_array_equal(out.residuals[-1], out.transformer_output)
    # unembedded: the output encoder's id of each decoded value
    ids = model.output_encoder.encoding_map
    assert out.unembedded.tolist() == [[-1] + [ids[v] for v in out.decoded[1:]]]
    assert model.output_encoder.decode(out.unembedded[0, 1:].tolist()) == [1, 2, 5]


def test_encoders_and_config():
    model = _compile(lib.make_hist(), {"b", "a"}, 4)
    enc = model.input_encoder
    assert enc.bos_token == "BOS" and enc.pad_token == compiling.COMPILER_PAD
    assert enc.encode(["BOS", "a", "b"]) == [0, enc.encoding_map["a"], enc.encoding_map["b"]]
    assert sorted(enc.encoding_map) == sorted(["BOS", "a", "b", compiling.COMPILER_PAD])
    cfg = model.compiled.config
    assert (model.model_config.num_layers, model.model_config.num_heads) == (
        cfg.n_layers,
        cfg.n_heads,
    )
    assert model.model_config.layer_norm is False and model.model_config.dropout_rate == 0.0
    assert model.params and all(isinstance(v, np.ndarray) for v in model.params.values())
    assert model.get_compiled_model() is model.compiled.model


def test_numerical_output():
    program = lib.make_frac_prevs(rasp.tokens == "x")
    out = _compile(program, {"x", "y"}).apply(["BOS", "x", "y"])
    assert out.decoded == ["BOS", 1.0, 0.5]
    assert out.unembedded.tolist() == [[0.0, 1.0, 0.5]]


def test_trailing_pad():
    model = _compile(lib.make_length(), {1, 2})
    pad = compiling.COMPILER_PAD
    out = model.apply(["BOS", 1, 2, pad, pad])
    assert out.decoded == ["BOS", 2, 2, None, None]
    assert out.residuals[0].shape[1] == 5 and not out.residuals[0][0, 3:].any()
    with pytest.raises(ValueError, match="PAD may only end the input"):
        model.apply(["BOS", 1, pad, 2])


def test_causal():
    model = _compile(lib.make_length(), {1, 2}, causal=True)
    assert model.model_config.causal
    assert model.apply(["BOS", 1, 2, 1]).decoded == ["BOS", 1, 2, 3]


def test_mlp_exactness_is_ignored():
    a = _compile(lib.make_hist(), {"a", "b"}, mlp_exactness=1).apply(["BOS", "a", "a", "b"])
    b = _compile(lib.make_hist(), {"a", "b"}, mlp_exactness=100).apply(["BOS", "a", "a", "b"])
    assert a.decoded == b.decoded == ["BOS", 2, 2, 1]
    np.testing.assert_array_equal(a.transformer_output, b.transformer_output)


def test_refusals_use_tracrs_words():
    with pytest.raises(ValueError, match="Compiler BOS token must not be present in the vocab"):
        compiling.compile_rasp_to_model(lib.make_hist(), {"a", "BOS"}, 3, compiler_bos="BOS")
    with pytest.raises(ValueError, match="Compiler PAD token must not be present in the vocab"):
        compiling.compile_rasp_to_model(lib.make_hist(), {"a", "P"}, 3, compiler_pad="P")
    model = _compile(lib.make_hist(), {"a"})
    with pytest.raises(ValueError, match="First input token must be BOS token"):
        model.apply(["a", "a"])
    with pytest.raises(ValueError, match=r"Inputs \['z'\] not found in encoding"):
        model.apply(["BOS", "z"])
    with pytest.raises(ValueError, match="are longer than the maximum sequence length 6"):
        model.apply(["BOS"] + ["a"] * 6)
    with pytest.raises(TypeError, match="compile_rasp_to_model expects a RASP SOp"):
        compiling.compile_rasp_to_model(
            rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ), {"a"}, 3
        )


def test_unsupported_programs_are_named_as_tracr_names_them():
    # a numerical aggregate of a categorical S-op that holds strings cannot be averaged
    odd = rasp.numerical(
        rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ), rasp.tokens)
    )
    with pytest.raises((NotImplementedError, ValueError)) as info:
        _compile(odd, {"a", "b"})
    if info.type is NotImplementedError:
        assert str(info.value).startswith("Unsupported RASP expressions:\n")


def test_run_time_check_failures_surface():
    # a categorical aggregate over two distinct values: the interpreter raises, so does apply
    mixed = rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.NEQ), rasp.tokens)
    model = _compile(mixed, {"a", "b", "c"})
    assert model.apply(["BOS", "a", "b"]).decoded == ["BOS", "b", "a"]
    with pytest.raises(RunTimeCheckError, match="would average several distinct values"):
        model.apply(["BOS", "a", "b", "c"])


CONFORMANCE = load_cases() if CASES_PATH.exists() else []


@pytest.mark.skipif(not CASES_PATH.exists(), reason=MISSING_REASON)
@pytest.mark.parametrize("case", CONFORMANCE, ids=[c["name"] for c in CONFORMANCE])
def test_conformance_case_through_the_compat_module(case):
    program = case["build"]()
    model = compiling.compile_rasp_to_model(
        program,
        set(case["vocab"]),
        case["max_seq_len"],
        causal=case["causal"],
        compiler_bos="BOS",
    )
    # padded to max_seq_len, as tracr's own integration test runs these cases
    pad = case["max_seq_len"] - len(case["input"])
    got = model.apply(["BOS", *case["input"], *[compiling.COMPILER_PAD] * pad]).decoded
    assert got[0] == "BOS" and got[len(got) - pad :] == [None] * pad
    got = got[: len(got) - pad]
    expected = case["expected"]
    assert len(got) == 1 + len(expected)
    if rasp.is_numerical(program):
        assert all(math.isclose(g, e, abs_tol=1e-9) for g, e in zip(got[1:], expected))
    else:
        assert got[1:] == expected


TRACR_PROGRAMS = ["hist", "sort_unique", "frac_prevs", "shift_by", "reverse", "detect_pattern"]


@pytest.mark.slow  # tracr's compiler takes 3-25 s a program
@pytest.mark.parametrize("name", TRACR_PROGRAMS)
def test_decoded_equals_tracrs_compiled_model(name):
    """tracr's own compiled model (with its lib and rasp) against the compat module's, at
    every position where the value is not None (tracr decodes None as an arbitrary value)."""
    tracr_compiling = pytest.importorskip("tracr.compiler.compiling")
    tracr_lib = pytest.importorskip("tracr.compiler.lib")
    tracr_rasp = pytest.importorskip("tracr.rasp.rasp")
    build, vocab, xs = PROGRAMS[name]
    theirs_program = {
        "hist": lambda: tracr_lib.make_hist(),
        "sort_unique": lambda: tracr_lib.make_sort_unique(tracr_rasp.tokens, tracr_rasp.tokens),
        "frac_prevs": lambda: tracr_lib.make_frac_prevs(tracr_rasp.tokens == "x"),
        "shift_by": lambda: tracr_lib.shift_by(1, tracr_rasp.tokens),
        "reverse": lambda: tracr_lib.make_reverse(tracr_rasp.tokens),
        "detect_pattern": lambda: tracr_lib.detect_pattern(tracr_rasp.tokens, "ab"),
    }[name]()
    theirs = tracr_compiling.compile_rasp_to_model(theirs_program, vocab, 5, compiler_bos="BOS")
    want = theirs.apply(["BOS", *xs]).decoded
    got = _compile(build(), vocab).apply(["BOS", *xs]).decoded
    assert len(got) == len(want) and got[0] == want[0] == "BOS"
    for g, w in zip(got[1:], want[1:]):
        if g is None:
            continue
        if isinstance(g, float):
            assert math.isclose(g, w, abs_tol=1e-3), (got, want)  # tracr is approximate
        else:
            assert g == w, (got, want)
