"""Each compiler stage on small inputs: lowering is pure and frozen, scheduling places its
slots, guards take their stages from the schedule, and the lowered blocks run in numpy."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import numpy as np
import pytest

from attnsim import rasp
from attnsim.compiler import CompileOptions, lowering, pipeline, scheduling, tracing
from attnsim.compiler import guards as G
from attnsim.compiler import value_inference as V
from attnsim.compiler.lowering.program import Slot
from attnsim.ir.blocks import BOS, NOTBOS, Head
from attnsim.rasp import library

SRC = Path(__file__).resolve().parents[1] / "src" / "attnsim"


def lowered_of(program, vocab, max_seq_len, **kw):
    options = CompileOptions(**kw)
    graph = tracing.trace(program)
    vi = V.infer(graph, V.check_vocab(vocab), max_seq_len, options)
    return graph, vi, lowering.lower(graph, vi, options)


def hist():
    return rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)).named(
        "hist"
    )


def test_lowered_program_is_frozen_and_read_only():
    _, _, low = lowered_of(hist(), "ab", 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        low.output = None  # type: ignore[misc]
    with pytest.raises(TypeError):
        low.static_embed["x"] = np.zeros(3)  # type: ignore[index]
    assert low.residual[:2] == (BOS, NOTBOS) and low.vocab == ("a", "b")


def test_hist_lowers_to_one_head_and_a_discretiser():
    _, _, low = lowered_of(hist(), "ab", 3)
    assert low.slots == (Slot("attn", frozenset()), Slot("mlp", frozenset({0})))
    heads = [p.block for p in low.blocks if isinstance(p.block, Head)]
    assert [h.name for h in heads] == ["hist"] and heads[0].mode == "width"
    assert all(p.slot == 1 for p in low.blocks if not isinstance(p.block, Head))
    assert low.output.kind == "cat" and low.output.values == (0, 1, 2, 3)
    assert low.output.after == frozenset({1})
    (guard,) = low.guards  # the head's 1/(w+1) may take only its values
    assert guard.after == frozenset({0}) and guard.spec.allowed == (0.25, 1 / 3, 0.5, 1.0)
    assert [r.how for r in low.realisations] == ["steps on finite values"]


def test_lowering_twice_gives_equal_programs():
    program = library.make_sort_unique(rasp.tokens, rasp.tokens)
    a = lowered_of(program, [1, 2, 3], 4)[2]
    b = lowered_of(program, [1, 2, 3], 4)[2]
    assert a.residual == b.residual and a.slots == b.slots and a.blocks == b.blocks


def test_place_is_as_soon_as_possible():
    slots = [
        Slot("attn", frozenset()),  # 1
        Slot("mlp", frozenset()),  # 2
        Slot("mlp", frozenset({0})),  # 2: the MLP of the same layer
        Slot("attn", frozenset({2})),  # 3
        Slot("attn", frozenset({0, 1})),  # 3: after stage 2
        Slot("mlp", frozenset({3, 4})),  # 4
    ]
    assert scheduling.place(slots) == (1, 2, 2, 3, 3, 4)


def test_schedule_and_guard_stages():
    graph, vi, low = lowered_of(hist(), "ab", 3)
    sched = scheduling.schedule(low)
    assert sched.slot_stages == (1, 2) and len(sched.layers) == 1
    assert sched.stage(frozenset()) == 0 and sched.stage({0, 1}) == 2
    checks = G.runtime_guards(graph, vi, low, sched)
    assert [(g.label, g.stage) for g in checks] == [("hist", 1)]


def test_frac_prevs_layers():
    program = library.make_frac_prevs(rasp.tokens == "x")
    _, _, low = lowered_of(program, "xy", 5)
    sched = scheduling.schedule(low)
    # the map is virtual (a numerical readout), the aggregate one head in layer 1
    assert [len(layer.heads) for layer in sched.layers] == [1]
    assert sched.stage(low.output.after) == 1


def embed(low, tokens) -> dict[str, np.ndarray]:
    """The residual stream after the embedding, as assembly would build it, in numpy."""
    n = len(tokens)
    s = {d: np.zeros(n + 1) for d in low.residual}
    s[BOS][0] = 1.0
    s[NOTBOS][1:] = 1.0
    for d, v in low.token_dims.items():
        s[d][1:] = [1.0 if (type(t), t) == (type(v), v) else 0.0 for t in tokens]
    for d, vals in low.static_embed.items():
        s[d][1:] = np.asarray(vals)[:n]
    return s


@pytest.mark.parametrize(
    "program, vocab, xs",
    [
        (hist(), "abc", "abcab"),
        (library.make_frac_prevs(rasp.tokens == "x"), "xy", "xyxxy"),
        (library.make_sort_unique(rasp.tokens, rasp.tokens), [1, 2, 3, 4], [3, 1, 4, 2]),
        (library.make_length(), "ab", "abba"),
    ],
)
def test_lowered_blocks_run_in_numpy_like_the_interpreter(program, vocab, xs):
    _, _, low = lowered_of(program, vocab, 5)
    s = embed(low, list(xs))
    for layer in scheduling.schedule(low).layers:
        s = layer.apply(s)
    out = low.output
    expected = rasp.evaluate(program, list(xs))
    if out.kind == "cat":
        block = np.stack([s[d][1:] for d in out.dims])  # [value, pos]
        got = [out.values[i] for i in block.argmax(axis=0)]
        assert np.allclose(block.max(axis=0), 1.0)
    else:
        got = sum(c * s[d][1:] for d, c in out.form.items()).tolist()
    assert got == pytest.approx(expected)


def test_compile_program_reads_as_its_stages():
    source = inspect.getsource(pipeline.compile_program)
    fn = ast.parse(source).body[0]
    body = [n for n in fn.body if not isinstance(n, ast.Expr)]  # past the docstring
    assert len(body) <= 12, len(body)
    called = {
        n.func.value.id
        for n in ast.walk(fn)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name)
    }
    assert {"tracing", "value_inference", "lowering", "scheduling", "assembly", "guards"} <= called


def test_compiler_and_ir_modules_are_short_and_acyclic():
    modules = {}
    for pkg in ("compiler", "ir"):
        for path in sorted((SRC / pkg).rglob("*.py")):
            lines = path.read_text().count("\n")
            assert lines < 600, f"{path.relative_to(SRC)} has {lines} lines"
            name = "attnsim." + ".".join(path.relative_to(SRC).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    deps = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            found |= {t for t in targets if t in modules and t != name}
        deps[name] = found

    def visit(m, stack):
        assert m not in stack, "import cycle: " + " -> ".join([*stack, m])
        for d in deps[m]:
            if not d.startswith(m + "."):  # a package importing its own modules
                visit(d, [*stack, m])

    for m in modules:
        visit(m, [])
