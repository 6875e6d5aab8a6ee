"""An expression graph with a cycle is refused at once by every walk of a program.

A cycle cannot be built with the constructors; it takes changing a child after the fact
(``object.__setattr__(node, "inner", later)``). The one walk, ``rasp.dependency_order``, used
by the interpreter, tracing, the analysis and the matrix cost model, raises a ValueError that
names the expressions on the cycle instead of growing a stack until memory runs out.
"""

from __future__ import annotations

import time

import pytest

from attnsim import compile_program, rasp
from attnsim.compiler import tracing
from attnsim.matrix import costs
from attnsim.rasp import analysis


def _through_map():
    """tokens -> m (Map) -> out; then m reads out: out -> m -> out."""
    m = rasp.Map(lambda x: x, rasp.tokens).named("m")
    out = rasp.Map(lambda x: x, m, simplify=False).named("out")
    object.__setattr__(m, "inner", out)
    return out, ["out", "m"]


def _through_sequence_map():
    m = rasp.Map(lambda x: x, rasp.tokens).named("m")
    sm = rasp.SequenceMap(lambda x, i: x, m, rasp.indices).named("sm")
    object.__setattr__(m, "inner", sm)
    return sm, ["sm", "m"]


def _through_select():
    m = rasp.Map(lambda x: x, rasp.tokens).named("m")
    sel = rasp.Select(m, rasp.tokens, rasp.Comparison.EQ).named("sel")
    width = rasp.SelectorWidth(sel).named("width")
    object.__setattr__(m, "inner", width)
    return width, ["width", "sel", "m"]


def _through_aggregate():
    m = rasp.Map(lambda x: x, rasp.tokens).named("m")
    sel = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ).named("sel")
    agg = rasp.Aggregate(sel, m).named("agg")
    object.__setattr__(m, "inner", agg)
    return agg, ["agg", "m"]


def _aggregate_selector():
    sel = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ).named("sel")
    agg = rasp.numerical(rasp.Aggregate(sel, rasp.numerical(rasp.tokens))).named("agg")
    object.__setattr__(sel, "keys", agg)
    return agg, ["agg", "sel"]


def _self_loop():
    m = rasp.Map(lambda x: x, rasp.tokens).named("m")
    object.__setattr__(m, "inner", m)
    return m, ["m"]


CYCLES = [_through_map, _through_sequence_map, _through_select, _through_aggregate]
CYCLES += [_aggregate_selector, _self_loop]

CALLS = {
    "evaluate": lambda p: rasp.evaluate(p, [1, 2, 1]),
    "evaluate-empty": lambda p: rasp.evaluate(p, []),
    "evaluate-vocab": lambda p: rasp.evaluate(p, [1, 2], vocab=[1, 2]),
    "evaluate_batch": lambda p: rasp.evaluate_batch(p, [[1, 2], [2, 1]]),
    "compile_program": lambda p: compile_program(p, vocab=[1, 2], max_seq_len=3),
    "trace": tracing.trace,
    "analyze": analysis.analyze,
    "attention_cost": costs.attention_cost,
    "dependency_order": rasp.dependency_order,
}


@pytest.mark.parametrize("call", list(CALLS), ids=list(CALLS))
@pytest.mark.parametrize("make", CYCLES, ids=[f.__name__.strip("_") for f in CYCLES])
def test_cycle_is_refused_at_once(make, call):
    program, on_cycle = make()
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"^the program's graph has a cycle: ") as info:
        CALLS[call](program)
    assert time.perf_counter() - start < 0.5
    message = str(info.value)
    # the cycle, in reading order, back to where it started
    path = message.split(": ", 1)[1].split(", each reading the next")[0]
    assert [p.split(" (")[0] for p in path.split(" -> ")] == on_cycle + on_cycle[:1]
    assert "build a new expression instead" in message


def test_a_shared_child_is_not_a_cycle():
    # a diamond (one node read twice) is a DAG: it runs, in the order trace always used
    x = rasp.Map(lambda t: t + 1, rasp.tokens).named("x")
    y = rasp.SequenceMap(lambda a, b: a * b, x, x).named("y")
    z = rasp.SequenceMap(lambda a, b: a - b, y, x).named("z")
    assert [e.label for e in rasp.dependency_order(z)] == ["tokens", "x", "y", "z"]
    model = compile_program(z, vocab=[1, 2, 3], max_seq_len=3)
    assert model.run([1, 3, 2]) == rasp.evaluate(z, [1, 3, 2]) == [2, 12, 6]


def test_known_nodes_are_left_out():
    x = rasp.Map(lambda t: t + 1, rasp.tokens).named("x")
    y = rasp.Map(lambda t: t * 2, x).named("y")
    order = rasp.dependency_order(y, {x.uid: None})
    assert [e.label for e in order] == ["y"]
    assert rasp.dependency_order(y, {y.uid}) == []


def test_a_deep_program_needs_no_recursion():
    p = rasp.tokens
    for i in range(3000):
        p = rasp.Map(lambda t: t + 1, p, simplify=False).named(f"m{i}")
    order = rasp.dependency_order(p)
    assert len(order) == 3001 and order[0].label == "tokens" and order[-1].label == "m2999"
    assert rasp.evaluate(p, [1, 2]) == [3001, 3002]
