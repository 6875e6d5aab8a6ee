"""The feature-major executor (``executor="fused"``, and "auto" on short inputs) against the
dense forward: every library program (hard and softmax attention), causal models, matrix
programs (numerical tokens, declared units), tasks, a small U (vector tokens, bilinear and
native units) and fuzzed programs give the dense outputs to rounding; the stages a caller
asks for, hooks and the rule that chooses between the executors."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from attnsim import library, rasp, simulator
from attnsim.compiler import compile_program
from attnsim.matrix import apply, programs
from attnsim.model import fused
from attnsim.model.runtime import Runtime
from attnsim.model.stream import Columns
from attnsim.simulator import spec
from attnsim.tasks import parity
from tests import fuzz_programs as fp
from tests.test_plans import (
    assert_close,
    compare_fuzzed,
    run_both,
    simulate_both,
    streams_both_ways,
)


@pytest.mark.parametrize("name", sorted(library.PROGRAMS))
@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_library_programs_fused(name, attention):
    entry = library.PROGRAMS[name]
    model = compile_program(
        entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len, attention=attention
    )
    rng = random.Random(hash(name) % 1000 + 1)
    for n in (1, entry.max_seq_len // 2, entry.max_seq_len):
        xs = [[rng.choice(entry.vocab) for _ in range(n)] for _ in range(8)]
        a, b = run_both(model, xs, "fused")
        if isinstance(a, str) or isinstance(b, str):  # a run-time check: both raise it
            assert a == b
        else:  # numerical outputs to rounding (the sums' order differs)
            assert all(fp.same_row(g, w) for g, w in zip(a, b))
            assert all(fp.same_row(g, w) for g, w in zip(a, rasp.evaluate(entry.factory(), xs)))
        ids, vals = model.encode(xs)
        assert_close(*streams_both_ways(model, ids, vals, "fused"))


@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_causal_models_fused(attention):
    """Causal masks: a key after the query is never seen (here, by the running mean)."""
    prefix = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ)
    program = rasp.numerical(rasp.Aggregate(prefix, rasp.numerical(rasp.tokens), default=0))
    model = compile_program(
        program, vocab=[0, 1, 2], max_seq_len=6, causal=True, attention=attention
    )
    rng = random.Random(3)
    xs = [[rng.choice([0, 1, 2]) for _ in range(6)] for _ in range(8)]
    a, b = run_both(model, xs, "fused")
    np.testing.assert_allclose(np.array(a, float), np.array(b, float), rtol=1e-12)
    want = [rasp.evaluate(program, x, causal=True) for x in xs]
    np.testing.assert_allclose(np.array(a, float), np.array(want, float), rtol=1e-6)
    ids, vals = model.encode(xs)
    assert_close(*streams_both_ways(model, ids, vals, "fused"))


@pytest.mark.parametrize("name, args", [("softmax", (3, 3)), ("inverse", (3,)), ("relu", ())])
def test_matrix_programs_fused(name, args):
    rng = np.random.default_rng(0)
    shapes = {"softmax": [(3, 3)], "inverse": [(3, 3)], "relu": [(6,)]}[name]
    from attnsim.matrix import layout

    parts = [rng.normal(size=(6, *s)) + (2 * np.eye(3)[None] if len(s) == 2 else 0) for s in shapes]
    seqs = layout.pack_batch(*parts)
    model = apply.compiled_model(getattr(programs, name)(*args), seqs.shape[-1])
    a, b = run_both(model, seqs.tolist(), "fused")
    np.testing.assert_allclose(np.array(a, dtype=float), np.array(b, dtype=float), rtol=1e-12)
    ids, vals = model.encode(seqs.tolist())
    assert_close(*streams_both_ways(model, ids, vals, "fused"))


def test_tasks_fused():
    rng = random.Random(1)
    model = compile_program(parity.parity(), vocab=[0, 1], max_seq_len=7, fixed_length=True)
    xs = [[rng.choice([0, 1]) for _ in range(7)] for _ in range(16)]
    a, b = run_both(model, xs, "fused")
    assert a == b == [rasp.evaluate(parity.parity(), x) for x in xs]


def test_a_small_universal_simulator_fused():
    """Vector tokens, bilinear units, native exp and 1/x: U(2, 2, 1) run feature-major
    (any length with executor="fused") against the dense executor and the reference."""
    U = simulator.build(2, 2, 1, layer="encoder", max_ff=2, storage="dense")
    target = spec.random_encoder_layer(1, 2, 2, seed=4)
    X = torch.randn(2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    simulate_both(U, target, X, "fused")


@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_fuzzed_programs_fused(attention):
    assert compare_fuzzed(attention, "fused", 17 if attention == "hard" else 18, 120) > 80


def test_stages_and_kept_columns_match_dense():
    entry = library.PROGRAMS["make_sort_unique"]
    model = compile_program(entry.factory(), vocab="abcd", max_seq_len=5)
    rt = model.runtime
    ids, vals = model.encode(["dbca", "abcd"])
    cols = torch.tensor([0, 3, 5])
    got = {}
    for executor in ("fused", "dense"):
        rt.executor = executor
        streams = {0: None, 1: Columns(cols), 2 * model.config.n_layers: None}
        final = rt(ids, vals, streams=streams, keep=Columns(cols))
        got[executor] = (streams, final)
    rt.executor = "auto"
    (s_f, f_f), (s_d, f_d) = got["fused"], got["dense"]
    assert f_f.shape == f_d.shape == (2, 5, 3)
    assert_close(f_f, f_d)
    for stage in s_d:
        assert s_f[stage].shape == s_d[stage].shape
        assert_close(s_f[stage], s_d[stage])


def test_auto_chooses_by_the_rule_and_leaves_hooked_models_to_the_plans():
    hist = compile_program(library.make_hist(), vocab="abc", max_seq_len=5)
    length = compile_program(rasp.numerical(library.make_length()), vocab="ab", max_seq_len=5)
    rt = hist.runtime
    assert fused.applies(rt, 6) and not fused.applies(rt, 40)
    assert not fused.applies(length.runtime, 6)  # one constant head: the plans add it
    assert fused.chosen(rt, 6) and not fused.chosen(Runtime(hist.model, "plan"), 6)
    assert fused.chosen(Runtime(hist.model, "fused"), 40)  # forced: any length
    seen = []
    net = hist.model
    handle = net.blocks[0].attn.register_forward_hook(lambda m, a, o: seen.append(1))
    try:  # a hooked model runs as defined: the hooks see every sublayer's output
        assert rt.hooked()
        assert hist.run("abca") == rasp.evaluate(library.make_hist(), "abca") and seen
    finally:
        handle.remove()
    assert fused.chosen(rt, 6) and not rt.hooked()


@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_layers_of_one_key_gathers_run_as_gathers(attention):
    # shift_by's head and reverse's last head select one key per query on every input of a
    # length: feature-major they are gathers (hard attention), the same stream as dense
    for program, vocab in (
        (library.shift_by(2, rasp.tokens), list("abc")),
        (library.make_reverse(rasp.tokens), list("abcd")),
    ):
        m = compile_program(program, vocab=vocab, max_seq_len=8, attention=attention)
        gathers = fused._patterns(m.runtime, 9)
        assert (gathers[-1] is not None) == (attention == "hard")
        xs = [[random.Random(i).choice(vocab) for _ in range(8)] for i in range(30)]
        ids, vals = m.encode(xs)
        assert_close(*streams_both_ways(m, ids, vals, "fused"))
        m.executor = "fused"
        try:
            assert m.run(xs) == rasp.evaluate(program, xs)
        finally:
            m.executor = "auto"
    # a model of gathers runs feature-major at 21 positions; one with a constant head and
    # gathers while its pass is small
    shift = compile_program(library.shift_by(2, rasp.tokens), vocab=list("abc"), max_seq_len=20)
    assert fused.applies(shift.runtime, 21)
    rev5, rev10 = (
        compile_program(library.make_reverse(rasp.tokens), vocab=list("abcd"), max_seq_len=n)
        for n in (5, 10)
    )
    assert fused.applies(rev5.runtime, 6) and not fused.applies(rev10.runtime, 11)


def test_layers_of_fixed_keys_run_as_their_mean():
    # frac_prevs' head reads the keys up to the query, pair_balance's too: on every input of
    # a length the same keys, so feature-major the layer is the values' product by the 0/1
    # selection over the counts (no scores), the dense stream to rounding
    for program, vocab in (
        (library.make_frac_prevs(rasp.tokens == "x"), list("xyz")),
        (library.make_pair_balance(rasp.tokens, "(", ")"), list("()a")),
    ):
        m = compile_program(program, vocab=vocab, max_seq_len=10)
        patterns = fused._patterns(m.runtime, 11)
        fixed = [p for p in patterns if isinstance(p, tuple)]
        assert fixed, "a layer of fixed keys"
        for select, count in fixed:
            assert set(select.unique().tolist()) <= {0.0, 1.0}
            assert torch.equal(count, select.sum(dim=3, keepdim=True)) and bool((count >= 1).all())
        xs = [[random.Random(i).choice(vocab) for _ in range(10)] for i in range(40)]
        ids, vals = m.encode(xs)
        assert_close(*streams_both_ways(m, ids, vals, "fused"))
        m.executor = "fused"
        try:
            assert all(fp.same_row(g, w) for g, w in zip(m.run(xs), rasp.evaluate(program, xs)))
        finally:
            m.executor = "auto"
    # softmax heads keep their scores (the plans fix hard heads only)
    soft = compile_program(
        library.make_frac_prevs(rasp.tokens == "x"),
        vocab=list("xyz"),
        max_seq_len=10,
        attention="softmax",
    )
    assert all(p is None for p in fused._patterns(soft.runtime, 11))


def test_changed_weights_are_prepared_again():
    model = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    rt = Runtime(model.model, "fused")
    ids, _ = model.encode(["abba"])
    before = rt(ids).clone()
    with torch.no_grad():
        model.model.blocks[0].mlp.W_out.mul_(2.0)
    after = rt(ids)
    assert not torch.equal(before, after)
    assert_close(after, model.model(ids))  # the definition


def test_sparse_storage_refuses_fused():
    model = compile_program(library.make_hist(), vocab="ab", max_seq_len=3, storage="sparse")
    ids, vals = model.encode(["aba"])
    model.executor = "fused"  # refused when it runs: the sparse storage has no feature-major pass
    with pytest.raises(ValueError, match="feature-major 'fused' and 'jit' need dense weights"):
        model.runtime(ids, vals)


@pytest.mark.parametrize("attention", ["hard", "softmax"])
@pytest.mark.parametrize("causal", [False, True])
def test_large_batches_take_batched_products(monkeypatch, attention, causal):
    """Past ``BROADCAST_VALUES`` a head's scores and mixed values are batched products
    (forced here with a limit of 0): the same outputs as dense."""
    monkeypatch.setattr(fused, "BROADCAST_VALUES", 0)
    entry = library.PROGRAMS["make_sort_unique"]
    model = compile_program(
        entry.factory(), vocab="abcd", max_seq_len=5, attention=attention, causal=causal
    )
    rng = random.Random(5)
    xs = [[rng.choice("abcd") for _ in range(5)] for _ in range(7)]  # batch != positions
    ids, vals = model.encode(xs)
    assert_close(*streams_both_ways(model, ids, vals, "fused"))
    a, b = run_both(model, xs, "fused")
    assert a == b


@pytest.mark.parametrize(
    "name, program, vocab",
    [
        ("hist", library.make_hist, "abc"),
        ("sort_unique", lambda: library.make_sort_unique(rasp.tokens, rasp.tokens), "abc"),
        ("frac_prevs", lambda: rasp.numerical(library.make_frac_prevs(rasp.tokens == "a")), "ab"),
    ],
)
def test_gradients_are_the_definitions_on_every_executor(name, program, vocab):
    """A pass that records gradients (weights being trained, or token values that require
    them) runs the definition on every executor: the plans are constants made from the
    weights (the plan executor gave other gradients for hist, and raised on the others)."""
    model = compile_program(program(), vocab=vocab, max_seq_len=6)
    net = model.model
    ids, _ = model.encode([list("abcab".replace("c", vocab[-1]))] * 2)
    net.requires_grad_(True)
    try:
        net.zero_grad()
        net(ids).sum().backward()
        want = [p.grad.clone() for p in net.parameters() if p.grad is not None]
        assert want
        for executor in ("plan", "auto", "fused", "jit"):
            net.zero_grad()
            out = Runtime(net, executor)(ids)
            assert out.requires_grad
            out.sum().backward()
            got = [p.grad.clone() for p in net.parameters() if p.grad is not None]
            assert len(got) == len(want) and all(torch.equal(g, w) for g, w in zip(got, want))
    finally:
        net.requires_grad_(False)
    with torch.no_grad():  # no gradients recorded: feature-major again
        assert fused.chosen(Runtime(net, "auto"), ids.shape[1])


@pytest.mark.parametrize("storage", ["dense", "sparse"])
def test_token_ids_outside_the_embedding_are_refused(storage):
    """A raw forward pass on ids that are not rows of the embedding (a negative one would
    index from the end, a one-hot embedding would give a zero row): a clear error on every
    executor, never an answer."""
    model = compile_program(library.make_hist(), vocab="ab", max_seq_len=4, storage=storage)
    ids, vals = model.encode(["abba"])
    executors = ("auto", "plan", "dense") + (("fused",) if storage == "dense" else ())
    for executor in executors:
        model.executor = executor
        for bad in (-1, model.model.cfg.d_vocab):
            wrong = ids.clone()
            wrong[0, 2] = bad
            with pytest.raises(ValueError, match=f"token id {bad} is not a row"):
                model.runtime(wrong, vals)
    model.executor = "auto"
