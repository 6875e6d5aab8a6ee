"""The runtime (attnsim.model.runtime) against the definition (Transformer.forward): it keeps
its state to itself, its embedding is the definition's bit for bit, hooked models and caches
run the definition, and a compiled model's runtime follows its model."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim import library, rasp, simulator
from attnsim.compiler import compile_program
from attnsim.model.runtime import EXECUTORS, Runtime
from attnsim.model.stream import Columns
from attnsim.simulator import spec
from tests.test_plans import assert_close


def _module_state(net) -> dict[str, set[str]]:
    return {name: set(vars(m)) for name, m in net.named_modules()}


@pytest.mark.parametrize("name", ["make_hist", "make_sort", "make_reverse", "make_length"])
def test_the_runtime_leaves_no_state_on_the_modules(name):
    entry = library.PROGRAMS[name]
    model = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)
    net = model.model
    rng = random.Random(0)
    xs = [[rng.choice(entry.vocab) for _ in range(entry.max_seq_len)] for _ in range(6)]
    ids, vals = model.encode(xs)
    with torch.no_grad():
        want = net(ids, vals)  # the definition (its own weight-derived caches included)
    before = _module_state(net)
    # executor "jit" compiles (seconds): on one program, whose compiled pass it keeps
    for executor in [e for e in EXECUTORS if e != "jit" or name == "make_hist"]:
        rt = Runtime(net, executor)
        with torch.no_grad():
            got = rt(ids, vals)
        scale = 1.0 + float(want.abs().max())
        assert float((got - want).abs().max()) <= 1e-12 * scale, executor
    assert _module_state(net) == before  # every executor's state is the runtime's


def test_the_embedding_is_the_definitions_bit_for_bit():
    U = simulator.build(3, 3, 1, layout="vector", storage="dense")  # vector tokens
    X = torch.tensor(np.random.default_rng(1).standard_normal((3, 3)))
    target = spec.random_attention(1, 3, seed=1)
    ids, vals = U.model_inputs(U.encode(target, X)[None])
    net, rt = U.model.model, U.model.runtime
    n = ids.shape[1]
    assert torch.equal(rt._embed(ids, vals, n), net.embed(ids, vals, n))
    S = simulator.build(2, 2, 1, layout="scalar", storage="dense")  # numerical tokens
    T = spec.random_attention(1, 2, seed=2)
    ids, vals = S.model_inputs(S.encode(T, torch.eye(2, dtype=torch.float64))[None])
    net, rt = S.model.model, S.model.runtime
    n = ids.shape[1]
    assert torch.equal(rt._embed(ids, vals, n), net.embed(ids, vals, n))
    # a non-finite value reaches every column as 0 * inf: the runtime runs the definition
    bad = vals.clone()
    bad[0, 1] = float("inf")
    with torch.no_grad():
        got, want = rt(ids, bad), net(ids, bad)
    assert torch.equal(got.isnan(), want.isnan()) and bool(got.isnan().any())
    assert torch.equal(got.nan_to_num(0.0), want.nan_to_num(0.0))


def test_hooks_and_caches_see_the_definition():
    program = library.make_sort_unique(rasp.tokens, rasp.tokens)
    m = compile_program(program, vocab="abc", max_seq_len=5)
    ids, vals = m.encode(["cab", "bca"])
    rt = Runtime(m.model, "plan")
    assert not rt.hooked()
    seen = []
    handle = m.model.blocks[1].attn.register_forward_hook(lambda mod, a, out: seen.append(out))
    try:
        assert rt.hooked()
        with torch.no_grad():
            out = rt(ids, vals)
    finally:
        handle.remove()
    assert len(seen) == 1 and seen[0].shape == out.shape  # the full sublayer output
    cache: dict = {}
    with torch.no_grad():
        rt(ids, vals, cache=cache)
    assert "blocks.0.attn.hook_pattern" in cache  # every hook, from the definition


def test_the_planned_pass_times_its_sublayers():
    m = compile_program(library.make_hist(), vocab="ab", max_seq_len=40)
    rt = Runtime(m.model, "plan")
    ids, vals = m.encode(["ab" * 20])
    rt.profile = {}
    with torch.no_grad():
        rt(ids, vals)
    n_layers = m.config.n_layers
    assert sorted(rt.profile) == sorted(
        f"blocks.{i}.{part}" for i in range(n_layers) for part in ("attn", "mlp")
    )
    assert all(v >= 0 for v in rt.profile.values())


def test_plans_are_kept_and_dropped_with_the_weights():
    m = compile_program(library.make_reverse(rasp.tokens), vocab="ab", max_seq_len=4)
    rt = Runtime(m.model)
    first = rt.plans(5)
    assert rt.plans(5) is first
    rt.layers[0].misses[0] = 2
    rt.forget()
    assert rt.plans(5) is not first and rt.layers[0].misses == {}
    again = rt.plans(5)
    with torch.no_grad():
        m.model.W_pos.mul_(1.0)  # changed in place: a new version
    assert rt.plans(5) is not again


@pytest.mark.parametrize("name", ["make_hist", "make_sort_unique"])
def test_projections_kept_for_planned_heads_follow_edited_weights(name):
    """The value and output projections the plan executor keeps per head (LayerState.cache)
    are made again when a weight is edited in place: the planned pass matches the
    definition before and after the edit."""
    entry = library.PROGRAMS[name]
    m = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)
    rt = Runtime(m.model, executor="plan")
    rng = random.Random(0)
    rows = [[rng.choice(list(entry.vocab)) for _ in range(entry.max_seq_len)] for _ in range(8)]
    ids, _ = m.encode(rows)
    with torch.no_grad():
        assert torch.equal(rt(ids), m.model(ids))
        assert any(
            k[0] in ("out", "values") for s in rt.layers for k in s.cache if isinstance(k, tuple)
        )
        before = rt(ids)
        for name in ("W_O", "W_V"):  # each edit alone changes the output
            for block in m.model.blocks:
                getattr(block.attn, name).mul_(2.0)
            after = rt(ids)
            assert torch.equal(after, m.model(ids)) and not torch.equal(after, before)
            before = after


@pytest.mark.parametrize("executor", ["auto", "plan", "fused"])
def test_replaced_parameters_and_submodules_are_followed(executor):
    """A parameter or a block replaced (assigned, not edited in place) is seen on the next
    call: the runtime's output is the definition's after each replacement (to rounding:
    the feature-major products add in another order, which float32 may round differently
    on another CPU's BLAS)."""
    m = compile_program(library.make_hist(), vocab="abc", max_seq_len=5)
    net = m.model
    rt = Runtime(net, executor=executor)
    ids, _ = m.encode(["abcab", "aabbc", "cccab"])
    with torch.no_grad():
        before = rt(ids)
        assert_close(before, net(ids))
        attn = net.blocks[0].attn
        attn.W_O = torch.nn.Parameter(attn.W_O.detach() * 2.0, requires_grad=False)
        after = rt(ids)
        assert_close(after, net(ids))
        assert float((after - before).abs().max()) > 0.5  # W_O doubled: far from before
        block = copy.deepcopy(net.blocks[0])
        block.mlp.W_out.mul_(3.0)
        net.blocks[0] = block  # a new submodule
        again = rt(ids)
        assert_close(again, net(ids))
        assert float((again - after).abs().max()) > 0.5


def test_a_compiled_models_runtime_follows_its_model():
    m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    rt = m.runtime
    assert m.runtime is rt and rt.net is m.model
    m.executor = "plan"
    m.model = copy.deepcopy(m.model)  # a new model object: a new runtime, the same executor
    assert m.runtime is not rt and m.runtime.net is m.model and m.executor == "plan"
    ids, _ = m.encode(["abba"])
    with torch.no_grad():
        assert torch.equal(m(ids), m.model(ids))
        kept = m.runtime(ids, keep=Columns(torch.tensor([1, 0])))
    assert torch.equal(kept, m.model(ids)[..., [1, 0]])


def test_bad_executors_are_refused():
    m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    for bad in ("fast", None, 1, "Dense"):
        with pytest.raises(ValueError, match="executor must be one of"):
            Runtime(m.model, bad)
        with pytest.raises(ValueError, match="executor must be one of"):
            m.executor = bad
    assert m.executor == "auto"
    with pytest.raises(AttributeError, match="no executor"):
        m.model.executor = "plan"
    sparse = compile_program(library.make_hist(), vocab="ab", max_seq_len=4, storage="sparse")
    assert type(sparse.runtime) is Runtime and sparse.runtime.net is sparse.model
    with pytest.raises(AttributeError, match="no executor"):
        sparse.model.executor = "plan"
    with pytest.raises(TypeError, match="Runtime runs an attnsim Transformer"):
        Runtime(m)  # the compiled model, not its network


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(0, 6), min_size=1, max_size=12),
    batch=st.integers(1, 3),
    width=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_segment_sums_are_index_adds_to_the_bit(counts, batch, width, seed):
    """The planned heads' sums over each query's keys: the same bits as adding the terms
    one by one in order (index_add_), on values whose sums round (empty runs give 0)."""
    from attnsim.model.plan_core import segment_sum

    counts_t = torch.tensor(counts)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), counts_t.cumsum(0)])
    nnz = int(offsets[-1])
    g = torch.Generator().manual_seed(seed)
    terms = torch.randn(batch, nnz, width, dtype=torch.float64, generator=g) * 10.0 ** (
        torch.randint(-8, 9, (batch, nnz, 1), generator=g).double()
    )
    rows = torch.repeat_interleave(torch.arange(len(counts)), counts_t)
    want = torch.zeros(batch, len(counts), width, dtype=torch.float64)
    want.index_add_(1, rows, terms)
    assert torch.equal(segment_sum(terms, offsets), want)


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("name", ["make_hist", "make_frac_prevs"])
def test_inputs_in_any_memory_layout(executor, name):
    """Token ids and values that are views with other strides (a transposed copy, every
    other column) give what their contiguous copies give, under every executor (hist: a
    token-table head; frac_prevs: float64 means over several keys)."""
    entry = library.PROGRAMS[name]
    m = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=6)
    rng = random.Random(3)
    ids, vals = m.encode([[rng.choice(entry.vocab) for _ in range(6)] for _ in range(5)])
    want = m.model(ids, vals)
    rt = Runtime(m.model, executor)
    wide_ids = torch.stack([ids, ids], dim=2).reshape(ids.shape[0], -1)[:, ::2]
    for got_ids, got_vals in ((ids.T.contiguous().T, vals.T.contiguous().T), (wide_ids, vals)):
        assert not got_ids.is_contiguous()
        with torch.no_grad():
            assert_close(rt(got_ids, got_vals), want)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_token_ids_of_the_wrong_kind_are_refused_and_an_empty_batch_runs(executor):
    """Float, bool and one-dimensional ids end in a clear error under every executor (and
    the definition); a batch of no sequences gives an empty stream of the right shape."""
    m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    ids, _ = m.encode(["abba", "abab"])
    rt = Runtime(m.model, executor)
    for bad in (ids.float(), ids.bool(), ids[0]):
        for run in (rt, m.model):
            with pytest.raises(ValueError, match="token ids must be"):
                run(bad)
    empty = ids[:0]
    with torch.no_grad():
        got = rt(empty)
    assert got.shape == (0, ids.shape[1], m.model.cfg.d_model)
    assert torch.equal(got, m.model(empty))
