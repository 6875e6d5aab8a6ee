"""Bad inputs, round 2 (API): sizes that cannot fit, unclear errors made clear, reports that
read at 80 columns, and the note on torch's tanh-GELU fast path.

Each row asserts the exact error type and wording, or the right answer against an oracle
(the interpreter, numpy, a torch module, the measured peaks of built sizes).
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from attnsim import compile_program, rasp
from attnsim.compiler.value_inference import UnhashableResultError
from attnsim.matrix import apply
from attnsim.model import memory
from attnsim.model.memory import ModelTooLargeError
from attnsim.rasp import library
from attnsim.rasp.interpret import RASPEvaluationError
from attnsim.simulator import llama, sampling, universal, verify
from attnsim.simulator.config import SimulatorConfig, memory_needed

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
# the machine the layouts benchmark ran on (benchmarks/results/simulator_layouts.json)
MACHINE = int(23.5 * GIB)
AVAILABLE = int(21.3 * GIB)


# -- 1. sizes that cannot fit are refused before building -----------------------------------


def _measured_builds() -> list[tuple[SimulatorConfig, float]]:
    """Every size built by benchmarks/simulator_layouts.py, with its peak resident memory
    (bytes), and two attention builds of one head measured the same way."""
    data = json.loads((ROOT / "benchmarks/results/simulator_layouts.json").read_text())
    out = []
    for r in data["results"]:
        config = SimulatorConfig(
            r["n"], r["d"], r["heads"], layer="encoder", max_ff=r["d_ff"], layout_kind=r["layout"]
        )
        out.append((config, r["peak_rss_mb"] * 2**20))
    m = data["minilm"]
    minilm = dict(layer="encoder", max_ff=m["d_ff"], layout_kind="vector")
    out.append((SimulatorConfig(m["n"], m["d"], m["heads"], **minilm), m["peak_rss_mb"] * 2**20))
    s = data["minilm_stack"]
    stack = SimulatorConfig(m["n"], m["d"], m["heads"], **minilm, n_layers=s["layers"])
    out.append((stack, s["peak_rss_mb"] * 2**20))
    # attention, one head, n = d = 128, peak resident memory of the build (ru_maxrss)
    out.append((SimulatorConfig(128, 128, 1, layout_kind="scalar"), 1616 * 2**20))
    out.append((SimulatorConfig(128, 128, 1, layout_kind="vector"), 657 * 2**20))
    return out


MEASURED = _measured_builds()


@pytest.mark.parametrize(
    "config, peak",
    MEASURED,
    ids=[
        f"{c.layout_kind.value}-{c.layer.value}-{c.max_n}x{c.max_d}x{c.max_heads}-L{c.n_layers}"
        for c, _ in MEASURED
    ],
)
def test_the_estimate_lies_below_every_measured_peak(config, peak):
    """No size that builds today is refused: the estimate is under its measured peak."""
    assert memory_needed(config) < peak
    assert memory_needed(config) < MACHINE


def _largest_measured() -> list[tuple[SimulatorConfig, float]]:
    """The largest builds of each layout in benchmarks/simulator_layouts.py's results, with
    their peak resident memory in GiB (build and simulate): the largest n = d of each layout
    and the MiniLM layer shape on its longest input."""
    data = json.loads((ROOT / "benchmarks/results/simulator_layouts.json").read_text())
    out = []
    for layout in ("scalar", "vector"):
        r = max((r for r in data["results"] if r["layout"] == layout), key=lambda r: r["d"])
        config = SimulatorConfig(
            r["n"], r["d"], r["heads"], layer="encoder", max_ff=r["d_ff"], layout_kind=layout
        )
        out.append((config, r["peak_rss_mb"] / 1024))
    longest = max((r for r in data["minilm_tokens"] if r.get("built")), key=lambda r: r["tokens"])
    minilm = SimulatorConfig(longest["tokens"], 384, 12, layer="encoder", max_ff=1536)
    out.append((minilm, longest["peak_rss_mb"] / 1024))
    return out


def test_the_estimate_admits_the_largest_builds_of_each_layout():
    for config, measured_gib in _largest_measured():
        assert memory_needed(config) / GIB < measured_gib
        # and tracks them: within a factor 2.5 of the largest peaks
        assert memory_needed(config) / GIB > measured_gib / 2.5, config


@pytest.fixture
def small_machine(monkeypatch):
    """This process sees the benchmark machine: 23.5 GiB, 21.3 GiB of it available; and
    building anything fails the test (a refusal must come before it)."""
    monkeypatch.setattr(memory, "memory_limit", lambda: MACHINE)
    monkeypatch.setattr(memory, "available_memory", lambda: AVAILABLE)

    def no_build(*args, **kwargs):
        raise AssertionError("build compiled U instead of refusing it")

    monkeypatch.setattr(universal, "compile_program", no_build)


TOO_LARGE = {
    "scalar-attention": ((400, 400, 1), {"layout": "scalar"}),
    "vector-attention": ((600, 600, 1), {}),
    "scalar-encoder": ((256, 256, 4), {"layout": "scalar", "layer": "encoder"}),
    "vector-encoder": ((800, 800, 4), {"layer": "encoder"}),
    "vector-decoder": ((800, 800, 4), {"layer": "decoder"}),
    "vector-encoder-stack": ((600, 600, 4), {"layer": "encoder", "n_layers": 6}),
}


@pytest.mark.parametrize("name", list(TOO_LARGE))
def test_build_refuses_what_cannot_fit_before_building(small_machine, name):
    args, kw = TOO_LARGE[name]
    n, d, h = args
    with pytest.raises(ModelTooLargeError) as info:
        universal.build(*args, **kw)
    text = str(info.value)
    assert re.match(
        rf"building U for max_n={n}, max_d={d}, max_heads={h} \(a sequence of [\d,]+ "
        r"positions\) needs about [\d.]+ GiB \((\w+ layout: its weights while building, at "
        r"the bytes per position and unit of max_d measured on built sizes|a simulation: "
        r"about [\d.]+ groups of max_d \+ 1 rows of its stream over n times the "
        r"feed-forward's width, measured)\), more than the "
        r"21.3 GiB of memory available now \(this machine has 23.5 GiB\); lower max_n, "
        r"max_d or max_heads",
        text,
    ), text
    assert isinstance(info.value, MemoryError)


def test_a_refused_scalar_build_names_the_vector_layout_when_that_is_smaller(small_machine):
    with pytest.raises(ModelTooLargeError) as info:
        universal.build(400, 400, 1, layout="scalar")
    vector = memory_needed(SimulatorConfig(400, 400, 1, layout_kind="vector"))
    assert str(info.value).endswith(
        f", or build with layout='vector' (about {memory.gib(vector)} at these sizes)"
    )
    assert "about 28.7 GiB" in str(info.value)


def test_a_small_build_is_not_refused_on_the_small_machine(monkeypatch):
    monkeypatch.setattr(memory, "memory_limit", lambda: MACHINE)
    monkeypatch.setattr(memory, "available_memory", lambda: AVAILABLE)
    U = universal.build(2, 2, 1)
    target = sampling.random_attention(1, 2, seed=0)
    X = torch.randn(2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    from attnsim.simulator.reference import reference

    assert torch.allclose(U.simulate(target, X), reference(target, X), rtol=1e-9, atol=1e-12)


# -- 2. unclear errors made clear ------------------------------------------------------------


@dataclass
class Case:
    run: Callable[[], Any]
    error: type[BaseException]
    match: str


def _llama_weights(**change) -> dict:
    g = torch.Generator().manual_seed(0)
    w = {k: torch.randn(4, 4, generator=g) for k in "qkvo"}
    w |= {
        "gate": torch.randn(6, 4, generator=g),
        "up": torch.randn(6, 4, generator=g),
        "down": torch.randn(4, 6, generator=g),
        "norm1": torch.ones(4),
        "norm2": torch.ones(4),
    }
    for k, v in change.items():
        if v is None:
            del w[k]
        else:
            w[k] = v
    return w


def _sort_model():
    entry = library.PROGRAMS["sort"]
    return compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)


def _array_predicate():
    return rasp.SelectorWidth(
        rasp.Select(rasp.tokens, rasp.tokens, lambda k, q: np.array([k, q])).named("pairs")
    )


def _meta_x():
    U = universal.build(2, 2, 1)
    X = torch.zeros(2, 2, dtype=torch.float64, device="meta")
    return U.simulate(sampling.random_attention(1, 2, seed=0), X)


CASES = {
    "compiled_map_returns_a_list": Case(
        lambda: compile_program(
            rasp.Map(lambda x: [x], rasp.tokens).named("wrap"), vocab=[1, 2], max_seq_len=3
        ),
        UnhashableResultError,
        r"^map 'wrap' returns the list \[1\] for the input value 1; RASP values must be "
        r"hashable \(they are looked up in tables\): return a tuple instead of a list",
    ),
    "compiled_sequence_map_returns_a_list": Case(
        lambda: compile_program(
            rasp.SequenceMap(lambda x, y: [x, y], rasp.tokens, rasp.indices).named("pair"),
            vocab=[1, 2],
            max_seq_len=3,
        ),
        TypeError,
        r"^map 'pair' returns the list \[1, 0\] for the input values \(1, 0\); RASP values "
        r"must be hashable",
    ),
    "interpreted_map_returns_a_list": Case(
        lambda: rasp.evaluate(rasp.Map(lambda x: [x], rasp.tokens), [1, 2]),
        RASPEvaluationError,
        r"RASP values must be hashable, got list \[1\]; return a tuple instead of a list",
    ),
    "compiled_predicate_returns_an_array": Case(
        lambda: compile_program(_array_predicate(), vocab=[1, 2], max_seq_len=3),
        RASPEvaluationError,
        r"the predicate of 'pairs' on key 1 of 'tokens' and query 1 of 'tokens': a predicate "
        r"must return True or False, got the ndarray array\(\[1, 1\]\), which has no single "
        r"truth value; reduce an array to one bool with \.all\(\) or \.any\(\)",
    ),
    "interpreted_predicate_returns_an_array": Case(
        lambda: rasp.evaluate(_array_predicate(), [1, 2]),
        RASPEvaluationError,
        r"^the function of 'pairs' raised TypeError: a predicate must return True or False, "
        r"got the ndarray array\(\[1, 1\]\), which has no single truth value; reduce an array "
        r"to one bool with \.all\(\) or \.any\(\) on \(1, 1\)$",
    ),
    "numerical_map_of_a_401_digit_token": Case(
        lambda: compile_program(
            rasp.numerical(rasp.Map(lambda x: x, rasp.tokens)).named("same"),
            vocab=[10**400],
            max_seq_len=3,
        ),
        RASPEvaluationError,
        r"numerical map 'same' gives an int of 401 digits \(1000\.\.\.0000\) for the input "
        r"value an int of 401 digits \(1000\.\.\.0000\), too large for a float \(at most about "
        r"1\.8e\+308\); a numerical S-op holds floats",
    ),
    "numerical_tokens_of_401_digits": Case(
        lambda: compile_program(rasp.numerical(rasp.tokens) + 1, vocab=[10**400, 1], max_seq_len=3),
        RASPEvaluationError,
        r"tokens are used as numbers \(rasp\.numerical\(rasp\.tokens\)\) but the vocab holds an "
        r"int of 401 digits \(1000\.\.\.0000\), too large for a float \(at most about "
        r"1\.8e\+308\); use smaller numbers, or keep the tokens categorical",
    ),
    "interpreted_numerical_token_of_401_digits": Case(
        lambda: rasp.evaluate(rasp.numerical(rasp.tokens) + 1, [10**400]),
        RASPEvaluationError,
        r"^S-op 'tokens' is numerical but holds an int of 401 digits \(1000\.\.\.0000\), too "
        r"large for a float",
    ),
    "run_patched_unknown_head_name": Case(
        lambda: _sort_model().run_patched(["c", "a"], ["a", "c"], ["L9H9"]),
        ValueError,
        r"^this model has no head or MLP unit range named 'L9H9'; it has L1H0, L2H0, "
        r"L0 MLP relu 0-31, .* \(see model\.components\(\)\)$",
    ),
    "run_patched_one_name_not_in_a_list": Case(
        lambda: _sort_model().run_patched(["c", "a"], ["a", "c"], "L1H0"),
        TypeError,
        r"^run_patched takes a list of components \(rows of model\.components\(\) or their "
        r"names, such as \['L0H0'\]\), got str 'L1H0'; wrap a single one in a list$",
    ),
    "run_patched_an_int": Case(
        lambda: _sort_model().run_patched(["c", "a"], ["a", "c"], [3]),
        TypeError,
        r"^run_patched components must be rows of model\.components\(\) or their names, got "
        r"int 3$",
    ),
    "simulate_x_on_the_meta_device": Case(
        _meta_x,
        ValueError,
        r"^X is a tensor on the meta device, which holds a shape \(2, 2\) but no values; pass "
        r"a tensor with values",
    ),
    "simulate_a_module_on_the_meta_device": Case(
        lambda: universal.build(2, 2, 1).simulate(
            nn.MultiheadAttention(2, 1, batch_first=True, device="meta"),
            torch.zeros(2, 2, dtype=torch.float64),
        ),
        ValueError,
        r"is a tensor on the meta device, which holds a shape \(.*\) but no values",
    ),
    "llama_layer_missing_weight": Case(
        lambda: llama.llama_layer(4, 2, 6, weights=_llama_weights(up=None)),
        ValueError,
        r"^llama_layer needs exactly the weights q, k, v, o, gate, up, down, norm1, norm2; "
        r"missing up \(from a LlamaDecoderLayer, use from_llama\(layer\)\)$",
    ),
    "llama_layer_unknown_weight": Case(
        lambda: llama.llama_layer(4, 2, 6, weights=_llama_weights(bias=torch.zeros(4))),
        ValueError,
        r"^llama_layer needs exactly the weights .*; unknown bias",
    ),
    "llama_layer_wrongly_shaped_q": Case(
        lambda: llama.llama_layer(4, 2, 6, weights=_llama_weights(q=torch.zeros(4, 5))),
        ValueError,
        r"^llama_layer weight 'q' must have shape \[d_model, d_model\] = \(4, 4\) "
        r"\(out_features x in_features, as nn\.Linear stores it\), got \(4, 5\); "
        r"d_model=4, d_ff=6$",
    ),
    "llama_layer_transposed_gate": Case(
        lambda: llama.llama_layer(4, 2, 6, weights=_llama_weights(gate=torch.zeros(4, 6))),
        ValueError,
        r"^llama_layer weight 'gate' must have shape \[d_ff, d_model\] = \(6, 4\) .*got \(4, 6\)",
    ),
    "llama_layer_weights_not_a_dict": Case(
        lambda: llama.llama_layer(4, 2, 6, weights=[1, 2]),
        TypeError,
        r"^llama_layer weights must be a dict of q, k, v, o, gate, up, down, norm1, norm2, "
        r"got list$",
    ),
    "ragged_matrix_transpose": Case(
        lambda: apply.transpose([[1, 2], [3]]),
        ValueError,
        r"^m is ragged: m\[0\] has 2 entries but m\[1\] has 1 entry; a matrix needs rows of "
        r"one length \(pad the short rows, or pass a numpy array\)$",
    ),
    "ragged_batch_matmul": Case(
        lambda: apply.matmul([[[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0]]], np.eye(2)),
        ValueError,
        r"^a is ragged: a\[1\]\[0\] has 2 entries but a\[1\]\[1\] has 1 entry",
    ),
    "ragged_relu": Case(
        lambda: apply.relu([[1.0], [2.0, 3.0]]),
        ValueError,
        r"^x is ragged: x\[0\] has 1 entry but x\[1\] has 2 entries",
    ),
    "complex_matrix": Case(
        lambda: apply.det([[1, 2j], [3, 4]]),
        TypeError,
        r"^m holds complex numbers \(such as 2j\); attnsim computes over the real numbers",
    ),
    "text_in_a_matrix": Case(
        lambda: apply.transpose([["a", "b"]]),
        TypeError,
        r"^m must hold real numbers \(a numpy array or nested lists of numbers\), got list",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_clear_error(name):
    case = CASES[name]
    with pytest.raises(case.error) as info:
        case.run()
    assert re.search(case.match, str(info.value)), str(info.value)


def test_a_truthful_predicate_still_compiles_and_agrees_with_the_interpreter():
    """A predicate returning numpy bools is fine: the compiled model agrees with the
    interpreter."""
    sel = rasp.Select(rasp.tokens, rasp.tokens, lambda k, q: np.bool_(k <= q))
    program = rasp.SelectorWidth(sel)
    model = compile_program(program, vocab=[1, 2, 3], max_seq_len=4)
    for xs in ([3, 1, 2], [2, 2, 1, 3]):
        assert model.run(xs) == rasp.evaluate(program, xs)


def test_a_categorical_401_digit_token_is_still_a_label():
    program = rasp.Map(lambda x: "big" if x > 10**399 else "small", rasp.tokens)
    model = compile_program(program, vocab=[10**400, 1], max_seq_len=3)
    xs = [10**400, 1, 10**400]
    assert model.run(xs) == rasp.evaluate(program, xs) == ["big", "small", "big"]


def test_ragged_free_matrices_still_compute():
    m = [[1.0, 2.0], [3.0, 4.0]]
    assert np.array_equal(apply.transpose(m), np.asarray(m).T)


def test_run_patched_by_name_is_run_patched_by_row():
    model = _sort_model()
    (head,) = model.components().heads("target_pos")
    a, b = ["c", "a", "d", "b"], ["a", "b", "d", "c"]
    assert model.run_patched(a, b, ["L1H0"]) == model.run_patched(a, b, [head])
    assert model.run_patched(a, b, [head]) == ["c", "a", "b", "d"]


# -- 3. reports and tables read at 80 columns, rows have short reprs -------------------------


@pytest.mark.parametrize("name", ["sort", "make_hist", "make_reverse", "make_shuffle_dyck"])
def test_report_and_components_fit_80_columns(name):
    entry = library.PROGRAMS[name]
    model = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)
    for text in (str(model.report()), str(model.components())):
        widest = max(text.splitlines(), key=len)
        assert len(widest) <= 80, widest
    # nothing is lost: every component's name and hook is in the table
    table = str(model.components())
    assert all(c.name in table and c.hook in table for c in model.components())


def test_a_component_has_a_short_repr():
    model = _sort_model()
    heads = model.components().heads("target_pos")
    assert repr(heads) == "(Component(L1H0 computes 'target_pos', hook blocks.1.attn.hook_z),)"
    assert len(repr(model.components())) < 200


def test_the_interpretability_page_shows_the_repr_the_code_gives():
    page = (ROOT / "docs/interpretability.md").read_text()
    model = _sort_model()
    (head,) = model.components().heads("target_pos")
    assert f"head  # {head!r}" in page


def test_examples_state_measured_times():
    """No example promises a time it does not take ("a few seconds"): times are stated as
    measured, in seconds."""
    for path in sorted((ROOT / "examples").glob("*.py")):
        text = path.read_text()
        assert "a few seconds" not in text and "a minute" not in text, path.name
    large = (ROOT / "examples/large_u.py").read_text()
    assert re.search(r"about \d+ s on two idle cores \(measured: [\d.]+ s", large)


# -- 4. torch's tanh-GELU fast path: a note where errors are reported ------------------------


def _tanh_gelu_layer():
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(
        4,
        2,
        8,
        dropout=0.0,
        activation=nn.GELU(approximate="tanh"),
        batch_first=True,
        dtype=torch.float64,
    ).eval()


def test_the_note_is_true_torch_fast_path_computes_exact_gelu():
    """The oracle for the note: under no_grad torch's module deviates from its definition
    (the reference), with autograd on it does not."""
    from attnsim.simulator import adapters, reference

    layer = _tanh_gelu_layer()
    X = 3 * torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    want = reference.reference(adapters.from_torch(layer), X)
    with torch.no_grad():
        fast = layer(X[None])[0]
    slow = layer(X[None])[0].detach()
    assert verify.relative_error(slow, want) < 1e-12
    assert verify.relative_error(fast, want) > 1e-6


def test_the_tanh_gelu_note_appears_for_a_tanh_gelu_layer():
    from attnsim.simulator import adapters

    layer = _tanh_gelu_layer()
    for target in (layer, adapters.from_torch(layer)):
        (note,) = verify.reference_notes(target)
        assert note == verify.TANH_GELU_NOTE
    assert "GELU(approximate='tanh')" in note and "fast path" in note and "no_grad" in note
    exact = nn.TransformerEncoderLayer(4, 2, 8, activation="gelu", batch_first=True)
    assert verify.reference_notes(exact) == []
    assert verify.reference_notes(nn.MultiheadAttention(4, 2)) == []


def test_the_cli_simulate_prints_the_note(tmp_path, capsys):
    """`attnsim simulate --module` of a tanh-GELU layer prints the note under its error."""
    from attnsim.cli import main

    path = tmp_path / "layer.pt"
    torch.save(_tanh_gelu_layer(), path)
    argv = ["simulate", "--module", str(path), "--max-n", "2", "--n", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert " ".join(out.split()).count("note: " + verify.TANH_GELU_NOTE) == 1
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("note: "))
    assert lines[start - 1].startswith("max relative error: ")  # under the error it explains
    count = len(textwrap.wrap("note: " + verify.TANH_GELU_NOTE, 80))  # the note's lines
    shown = lines[start : start + count]
    assert " ".join(" ".join(shown).split()) == "note: " + verify.TANH_GELU_NOTE
    assert all(len(line) <= 80 for line in shown)
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == [verify.TANH_GELU_NOTE]


def test_the_tanh_gelu_note_is_in_the_simulator_page():
    page = (ROOT / "docs/simulator.md").read_text()
    assert 'nn.GELU(approximate="tanh")' in page and "verify.reference_notes" in page


def test_verify_records_the_note_for_the_tanh_gelu_targets_it_draws(monkeypatch):
    """verify's result carries the note when a drawn target is a tanh-GELU layer, and U
    agrees with the reference (the definition) on it."""
    from attnsim.simulator import adapters

    spec = adapters.from_torch(_tanh_gelu_layer())
    X = torch.randn(2, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    monkeypatch.setattr(verify, "random_target", lambda *args, **kw: (spec, X, 7))
    U = universal.build(2, 4, 2, layer="encoder", max_ff=8)
    result = verify.verify(U, targets=1, progress=False)
    assert result.notes == [verify.TANH_GELU_NOTE]
    assert result.max_error < 1e-9 and not result.failures


def test_the_simulator_page_states_the_estimate_the_code_uses():
    from attnsim.simulator import config

    rates = config.BUILD_BYTES_PER_POSITION_D
    page = " ".join((ROOT / "docs/simulator.md").read_text().split())
    assert (
        f"scalar {rates['scalar', 'attention']}, vector {rates['vector', 'attention']} for "
        f"attention and {rates['vector', 'layer']} for encoder and decoder layers; a stack "
        f"counts {config.BUILD_BYTES_PER_EXTRA_LAYER} more per further layer" in page
    )
    assert rates["scalar", "attention"] == rates["scalar", "layer"]
    needed = memory_needed(SimulatorConfig(400, 400, 1, layout_kind="scalar"))
    assert f"needs about {memory.gib(needed)} by it" in page
