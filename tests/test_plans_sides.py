"""One-sided heads, heads over the classes of their rows, MLPs over distinct rows and the
planned forward pass in parts, against the dense executor and the interpreter.

A head whose keys read static directions only (``Select(indices, target, ==)``: the value
at a computed position) runs once per distinct query row; one whose queries do (sort's
``Select(target_pos, indices, ==)``) over the classes of its keys; a head with neither side
static over the classes its rows take in the batch (sort's comparison of computed keys).
ReLU units whose input rows repeat run once per distinct row. A large batch runs in parts
whose stream is a slice of the output. Each is compared with the dense executor (the
definition) and the decoded outputs with the interpreter.
"""

from __future__ import annotations

import random

import pytest
import torch

from attnsim import rasp
from attnsim.compiler import compile_program
from attnsim.model import plan_core, plan_costs
from attnsim.model import plans as P
from attnsim.model import stream as residual
from attnsim.rasp import library
from tests.test_plans import assert_close, run_both, streams_both_ways


def gather_at_computed(n: int):
    """out[i] = tokens[(tokens[i] + 1) % n]: keys are positions (static), queries computed."""
    target = rasp.Map(lambda x: (x + 1) % n, rasp.tokens).named("target")
    sel = rasp.Select(rasp.indices, target, rasp.Comparison.EQ).named("at")
    return rasp.Aggregate(sel, rasp.tokens).named("gathered")


def plan_types(model, n):
    """The plans' class names; a one-sided head's as "SidePlan:keys" or "SidePlan:queries"."""
    return {
        type(p).__name__ + (f":{p.side}" if p.kind == "side" else "")
        for layer in model.runtime.plans(n + 1)
        for p in layer
    }


def random_inputs(vocab, n, k, seed, distinct=False):
    rng = random.Random(seed)
    if distinct:
        return [rng.sample(vocab, n) for _ in range(k)]
    return [[rng.choice(vocab) for _ in range(n)] for _ in range(k)]


@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_static_keys_run_per_distinct_query(attention):
    n = 12
    vocab = list(range(n))
    program = gather_at_computed(n)
    model = compile_program(program, vocab=vocab, max_seq_len=n, attention=attention)
    assert "SidePlan:keys" in plan_types(model, n)
    for length in (1, 5, n):
        xs = random_inputs(vocab, length, 40, length)
        a, b = run_both(model, xs)
        assert a == b
        ids, vals = model.encode(xs)
        assert_close(*streams_both_ways(model, ids, vals))
    xs = random_inputs(vocab, n, 40, 7)
    assert model.run(xs) == rasp.evaluate(program, xs)


@pytest.mark.parametrize("attention", ["hard", "softmax"])
@pytest.mark.parametrize("name", ["make_sort_unique", "make_sort"])
def test_sorts_run_one_sided_and_row_class_heads(name, attention):
    entry = library.PROGRAMS[name]
    n = 24
    vocab = list(range(1, n + 1)) if name == "make_sort_unique" else entry.vocab
    if name == "make_sort":  # its keys made distinct for this length
        program = library.make_sort(rasp.tokens, rasp.tokens, max_seq_len=n, min_key=1)
    else:
        program = entry.factory()
    model = compile_program(program, vocab=vocab, max_seq_len=n, attention=attention)
    types = plan_types(model, n)
    assert "SidePlan:queries" in types
    if name == "make_sort":  # its comparison of computed keys
        assert "RowTablePlan" in types
    for length in (1, 2, 9, n):
        xs = random_inputs(vocab, length, 48, length, distinct=name == "make_sort_unique")
        a, b = run_both(model, xs)
        assert a == b
        assert a == rasp.evaluate(program, xs)
        ids, vals = model.encode(xs)
        assert_close(*streams_both_ways(model, ids, vals))


def test_the_sorts_at_length_80_decode_as_the_interpreter():
    # every new plan on, the batch in parts
    program = library.make_sort_unique(rasp.tokens, rasp.tokens)
    vocab = list(range(1, 81))
    model = compile_program(program, vocab=vocab, max_seq_len=80)
    assert model.model.dtype == torch.float64  # its selector width's steps need float64
    xs = random_inputs(vocab, 80, 64, 0, distinct=True)
    assert model.run(xs) == rasp.evaluate(program, xs)
    ids, vals = model.encode(xs)
    assert_close(*streams_both_ways(model, ids, vals))


def test_a_row_class_head_with_many_distinct_rows_runs_dense():
    # rows all distinct in a large batch: each sequence would attend over every class of
    # the batch, which costs more than the dense head; after two such batches the head
    # stops looking
    program = library.make_sort(rasp.tokens, rasp.tokens, max_seq_len=10, min_key=1)
    model = compile_program(program, vocab=[1, 2, 3, 4, 5], max_seq_len=10)
    net = model.model
    layer, plan = next(
        (i, p)
        for i, ps in enumerate(model.runtime.plans(11))
        for p in ps
        if isinstance(p, P.RowTablePlan)
    )
    attn = net.blocks[layer].attn
    x = torch.randn(512, 11, net.cfg.d_model, dtype=net.dtype)  # every row distinct
    from attnsim.model import plan_tables

    misses: dict = {}
    assert plan_tables.run_rows(attn, plan, x, misses) is None
    assert misses == {("rows", plan.head): 1}
    xs = random_inputs([1, 2, 3, 4, 5], 10, 8, 1)
    assert model.run(xs) == rasp.evaluate(program, xs)


def test_an_mlp_over_distinct_rows_matches_every_row():
    # sort's key map reads (token, position) pairs: 5 x 21 distinct rows in a batch of 256
    program = library.make_sort(rasp.tokens, rasp.tokens, max_seq_len=20, min_key=1)
    model = compile_program(program, vocab=[1, 2, 3, 4, 5], max_seq_len=20)
    xs = random_inputs([1, 2, 3, 4, 5], 20, 256, 2)
    calls = []
    real = plan_core.distinct_rows

    def spy(q):
        out = real(q)
        calls.append((q.shape[0], out[0].shape[0]))
        return out

    ids, vals = model.encode(xs)
    plan_core.distinct_rows = spy
    try:
        planned, dense = streams_both_ways(model, ids, vals)
    finally:
        plan_core.distinct_rows = real
    assert any(rows <= n // 4 for n, rows in calls)  # some rows ran once per class
    assert_close(planned, dense)
    assert model.run(xs) == rasp.evaluate(program, xs)


def test_on_distinct_rows_counts_its_misses():
    class Owner:
        pass

    owner = Owner()
    x = torch.randn(512, 3, dtype=torch.float64)  # all distinct
    seen = []

    def fn(u):
        seen.append(u.shape[0])
        return u * 2

    for _ in range(3):
        assert torch.equal(plan_core.on_distinct_rows(x, fn, owner, 4096), x * 2)
    assert owner._distinct_misses == 2 and seen == [512, 512, 512]
    rep = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64).repeat(300, 1)
    seen.clear()
    assert torch.equal(plan_core.on_distinct_rows(rep, fn, Owner(), 4096), rep * 2)
    assert seen == [2]


def test_distinct_rows_on_awkward_rows():
    # NaN rows (never equal to themselves) fall back to the bits; duplicates group
    # together, near-duplicates stay apart
    q = torch.tensor(
        [
            [1.0, float("nan")],
            [1.0, float("nan")],
            [0.0, 1.0],
            [-0.0, 1.0],
            [1e-300, 1.0],
            [1.0, 1.0 + 2**-52],
            [1.0, 1.0],
            [float("inf"), 0.0],
        ],
        dtype=torch.float64,
    )
    rows, inverse = plan_core.distinct_rows(q)
    got = rows[inverse]
    same = (got == q) | (torch.isnan(got) & torch.isnan(q))
    assert bool(same.all())
    assert int(inverse[0]) == int(inverse[1])
    assert len({int(inverse[i]) for i in (2, 4, 5, 6, 7)}) == 5
    rows, inverse = plan_core.distinct_rows(q[2:])  # no NaN: the dot product groups them
    assert bool((rows[inverse] == q[2:]).all()) and len({int(i) for i in inverse}) <= 6


@pytest.mark.parametrize("program_name", ["make_hist", "make_sort_unique"])
def test_a_batch_in_parts_matches_one_part(program_name, monkeypatch):
    entry = library.PROGRAMS[program_name]
    n = 16
    vocab = list(range(1, n + 1)) if program_name == "make_sort_unique" else entry.vocab
    model = compile_program(entry.factory(), vocab=vocab, max_seq_len=n)
    model.executor = "plan"
    rt = model.runtime
    xs = random_inputs(vocab, n, 50, 3, distinct=program_name == "make_sort_unique")
    ids, vals = model.encode(xs)
    with torch.no_grad():
        whole = rt(ids, vals)
        monkeypatch.setattr(plan_core, "STREAM_BYTES", 1)  # parts of MIN_PART sequences
        assert plan_core.batch_step(50, n + 1, model.model.cfg.d_model, 4) == plan_core.MIN_PART
        parts = rt(ids, vals)
        cols = torch.arange(3)
        kept = rt(ids, vals, keep=residual.Columns(cols))
    assert torch.equal(parts, whole)
    assert torch.equal(kept, whole[..., cols])
    assert model.run(xs) == rasp.evaluate(entry.factory(), xs)


def test_new_stream_is_a_writable_tensor():
    big = residual.new_stream((3, 1 << 20, 4), torch.float64)  # 96 MiB: asks for huge pages
    big.fill_(2.0)
    assert big.shape == (3, 1 << 20, 4) and float(big.sum()) == 2.0 * big.numel()
    assert residual.new_stream((2, 2), torch.float32).dtype == torch.float32


def test_flops_count_the_new_plans():
    # sort at 12: the row-class, one-sided and table heads count less than the dense heads
    program = library.make_sort(rasp.tokens, rasp.tokens, max_seq_len=12, min_key=1)
    model = compile_program(program, vocab=[1, 2, 3], max_seq_len=12)
    rt = model.runtime
    assert {"SidePlan:queries", "RowTablePlan"} <= plan_types(model, 12)
    planned = plan_costs.forward_flops(rt, 13)["attention"]
    rt.plans = lambda n: None  # every head dense
    dense = plan_costs.forward_flops(rt, 13)["attention"]
    assert 0 < planned < dense


def test_weights_that_record_gradients_run_the_batch_in_one_part(monkeypatch):
    model = compile_program(library.make_hist(), vocab=list("abc"), max_seq_len=8)
    net = model.runtime
    net.executor = "plan"
    ids, vals = model.encode(random_inputs(list("abc"), 8, 40, 4))
    monkeypatch.setattr(plan_core, "STREAM_BYTES", 1)
    W = model.model.blocks[0].mlp.W_out
    W.requires_grad_(True)
    try:
        out = net(ids, vals)
        out.sum().backward()
        assert W.grad is not None and out.requires_grad
        with torch.no_grad():
            assert torch.equal(out, net(ids, vals))  # in parts: the same stream
    finally:
        W.requires_grad_(False)
        W.grad = None


def test_parts_carry_numerical_and_vector_token_values(monkeypatch):
    # numerical token values ([batch, pos]) and vector tokens ([batch, pos, width]) are cut
    # into the same parts as the ids; numpy and the interpreter are the oracles
    import numpy as np

    monkeypatch.setattr(plan_core, "STREAM_BYTES", 1)  # parts of MIN_PART sequences
    rng = np.random.default_rng(5)
    prog = rasp.numerical(rasp.token_channel(0) * rasp.token_channel(1) + rasp.token_channel(2))
    m = compile_program(prog, vocab=None, max_seq_len=6)
    X = rng.normal(size=(40, 6, 3))
    for executor in ("plan", "dense"):
        got = np.array(m.run(X, executor=executor))
        np.testing.assert_allclose(got, X[..., 0] * X[..., 1] + X[..., 2], rtol=1e-12)
    frac = library.make_frac_prevs(rasp.tokens == "x")
    m = compile_program(frac, vocab=list("xyz"), max_seq_len=8)
    xs = random_inputs(list("xyz"), 8, 50, 6)
    want = rasp.evaluate(frac, xs)
    got = m.run(xs, executor="plan")
    assert np.allclose(np.array(got, float), np.array(want, float), rtol=1e-12)
