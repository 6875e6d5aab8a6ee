"""Sparse storage (attnsim.model.sparse): the same model as the dense weights, run column by
column. Oracles: the dense Transformer assembly builds (weights compared entry by entry),
its forward pass, the RASP interpreter, and torch's own modules for U."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from attnsim import compile_program, rasp
from attnsim.model.checkpoint import DamagedCheckpointError
from attnsim.model.compiled import CompiledModel
from attnsim.model.sparse import Linear, SparseTransformer
from attnsim.rasp import library
from attnsim.simulator import sampling, universal
from attnsim.simulator.reference import reference
from attnsim.simulator.to_torch import to_torch

PROGRAMS = {
    "reverse": (lambda: library.make_reverse(rasp.tokens), "abc"),
    "hist": (library.make_hist, "abc"),
    "sort_unique": (lambda: library.make_sort_unique(rasp.tokens, rasp.tokens), [1, 2, 3, 4]),
    "frac_prevs": (lambda: library.make_frac_prevs(rasp.tokens == "a"), "ab"),
    "length": (lambda: library.make_length(), "ab"),
    "shuffle_dyck": (lambda: library.make_shuffle_dyck(["()"]), ["(", ")", "x"]),
}


def _inputs(vocab, n, count=12, seed=0):
    rng = np.random.default_rng(seed)
    vocab = list(vocab)
    return [
        [vocab[i] for i in rng.integers(0, len(vocab), size=int(rng.integers(1, n + 1)))]
        for _ in range(count)
    ]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_library_programs_match_the_dense_model(name):
    make, vocab = PROGRAMS[name]
    program = make()
    dense = compile_program(program, vocab=vocab, max_seq_len=6, storage="dense")
    sparse = compile_program(program, vocab=vocab, max_seq_len=6, storage="sparse")
    assert dense.storage == "dense" and sparse.storage == "sparse"
    # the sparse form's dense weights (its own layers, each block placed as late as the
    # depth allows) compute what the sparse form computes
    rebuilt = sparse.model.to_dense()
    assert rebuilt.cfg.n_layers == dense.config.n_layers
    xs = _inputs(vocab, 6)
    tol = 1e-12 if sparse.config.dtype == "float64" else 1e-5  # sums in another order
    for x in xs[:4]:
        ids, vals = sparse.encode([x])
        assert torch.allclose(rebuilt(ids, vals), sparse.model(ids, vals), rtol=tol, atol=tol)
    for executor in ("plan", "dense"):
        sparse.executor = executor
        got = [sparse.run(x) for x in xs]
        assert got == [dense.run(x) for x in xs]
        assert got == [rasp.evaluate(program, x) for x in xs]  # the interpreter
    total, nonzero = (sparse.report().parameters, sparse.report().nonzero_parameters)
    weights = [p for p in rebuilt.parameters()]
    assert total == sum(p.numel() for p in weights)
    assert nonzero == sum(int((p != 0).sum()) for p in weights)


def test_sparse_weights_are_the_dense_assembly_of_the_same_layers():
    # entry by entry: the assembly of one schedule's layers, dense and sparse
    from attnsim.compiler import assembly, lowering, scheduling, tracing, value_inference
    from attnsim.compiler.options import resolve

    program = library.make_sort_unique(rasp.tokens, rasp.tokens)
    options = resolve(None, {"dtype": "float64"})
    graph = tracing.trace(program)
    vi = value_inference.infer(graph, [1, 2, 3, 4], 6, options)
    lowered = lowering.lower(graph, vi, options)
    for late in (False, True):
        layers = scheduling.schedule(lowered, late=late).layers
        dense = assembly.assemble(layers, lowered, options).state_dict()
        rebuilt = assembly.assemble_sparse(layers, lowered, options).to_dense().state_dict()
        for key, want in dense.items():
            assert torch.equal(rebuilt[key], want), key


@pytest.mark.parametrize(
    "layout,layer", [("vector", "encoder"), ("vector", "attention"), ("scalar", "encoder")]
)
def test_universal_simulator_in_sparse_storage(layout, layer):
    kw = {"layer": layer, "layout": layout}
    if layer == "encoder":
        kw["max_ff"] = 8
    dense = universal.build(4, 4, 2, storage="dense", **kw)
    sparse = universal.build(4, 4, 2, storage="sparse", **kw)
    assert sparse.model.storage == "sparse"
    for seed in range(3):
        if layer == "encoder":
            target = sampling.random_encoder_layer(2, 4, 8, seed=seed, activation="gelu")
            X = torch.tensor(np.random.default_rng(seed).standard_normal((3, 4)))
            with torch.no_grad():
                want = to_torch(target)(X[None])[0]
        else:
            target = sampling.random_attention(2, 4, seed=seed)
            X = torch.tensor(np.random.default_rng(seed).standard_normal((3, 4)))
            want = reference(target, X)
        got = sparse.simulate(target, X)
        assert torch.allclose(got, dense.simulate(target, X), rtol=1e-12, atol=1e-12)
        assert float((got - want).abs().max()) <= 1e-9 * max(1.0, float(want.abs().max()))


def test_stream_keeps_only_live_columns():
    U = universal.build(4, 4, 2, layer="encoder", max_ff=8, storage="sparse")
    target = sampling.random_encoder_layer(2, 4, 8, seed=0)
    U.simulate(target, torch.zeros(2, 4, dtype=torch.float64))
    # each direction holds a row from its write to its last read only
    assert 0 < U.model.runtime.peak_columns < U.model.model.cfg.d_model / 2


def test_save_and_load_give_the_same_outputs(tmp_path):
    U = universal.build(2, 2, 1, layer="encoder", storage="sparse")
    target = sampling.random_encoder_layer(1, 2, 4, seed=1, activation="relu")
    X = torch.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=torch.float64)
    V = universal.UniversalSimulator.load(U.save(tmp_path / "u"))
    assert V.model.storage == "sparse"
    assert torch.equal(V.simulate(target, X), U.simulate(target, X))
    meta = json.loads((tmp_path / "u" / "model.json").read_text())
    assert meta["storage"]["storage"] == "sparse"


def _saved(tmp_path):
    m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4, storage="sparse")
    return m.save(tmp_path / "m")


def test_damaged_sparse_checkpoints_are_refused(tmp_path):
    path = _saved(tmp_path)
    weights = path / "model.safetensors"
    state = load_file(str(weights))
    good = dict(state)
    # a coordinate past d_model
    bad = dict(good)
    bad["blocks.0.attn.qk"] = bad["blocks.0.attn.qk"].clone()
    bad["blocks.0.attn.qk"][0, 1] = 10**6
    save_file(bad, str(weights))
    with pytest.raises(DamagedCheckpointError, match="coordinate outside"):
        CompiledModel.load(path)
    # a missing tensor
    bad = {k: v for k, v in good.items() if k != "embed.pos_default"}
    save_file(bad, str(weights))
    with pytest.raises(DamagedCheckpointError, match="lacks 'embed.pos_default'"):
        CompiledModel.load(path)
    # a NaN weight
    bad = dict(good)
    bad["blocks.0.attn.qk_w"] = bad["blocks.0.attn.qk_w"].clone()
    bad["blocks.0.attn.qk_w"][0] = float("nan")
    save_file(bad, str(weights))
    with pytest.raises(DamagedCheckpointError, match="NaN"):
        CompiledModel.load(path)
    # coordinates stored as floats, a weight list of the wrong length
    bad = dict(good)
    bad["blocks.0.attn.ov"] = bad["blocks.0.attn.ov"].double()
    save_file(bad, str(weights))
    with pytest.raises(DamagedCheckpointError, match="not int64 coordinates"):
        CompiledModel.load(path)
    bad = dict(good)
    bad["blocks.0.attn.ov_w"] = torch.cat([bad["blocks.0.attn.ov_w"], bad["blocks.0.attn.ov_w"]])
    save_file(bad, str(weights))
    with pytest.raises(DamagedCheckpointError, match="of the wrong length"):
        CompiledModel.load(path)
    # a damaged layer list
    save_file(good, str(weights))
    meta = json.loads((path / "model.json").read_text())
    for storage in (5, {"storage": "sparse", "layers": "all"}, {"storage": "dense", "layers": []}):
        (path / "model.json").write_text(json.dumps({**meta, "storage": storage}))
        with pytest.raises(DamagedCheckpointError, match="'storage"):
            CompiledModel.load(path)
    meta["storage"]["layers"][0]["units"] = [["tanh", 3]]
    (path / "model.json").write_text(json.dumps(meta))
    with pytest.raises(DamagedCheckpointError, match="unit entry"):
        CompiledModel.load(path)


def test_bad_inputs_get_clear_errors():
    m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4, storage="sparse")
    with pytest.raises(ValueError, match="sparse storage"):
        m.run_with_cache(["a", "b"])
    with pytest.raises(ValueError, match="sparse storage"):
        m.component_output(["a", "b"], m.components().heads()[0])
    with pytest.raises(ValueError, match="storage must be one of"):
        compile_program(library.make_hist(), vocab="ab", max_seq_len=4, storage="compressed")
    with pytest.raises(ValueError, match="storage must be one of"):
        universal.build(2, 2, 1, storage="compressed")
    with pytest.raises(ValueError, match="executor must be one of"):
        m.executor = "fast"
    m.runtime._executor = "fast"  # set behind the setter's back: refused when it runs
    with pytest.raises(ValueError, match="executor must be one of"):
        m.run(["a"])
    m.executor = "plan"
    ids, vals = m.encode([["a", "b"]])
    with pytest.raises(ValueError, match="positions"):
        m.model(torch.zeros(1, 9, dtype=torch.long), None)
    assert m.to_dense().run(["a", "b", "a"]) == m.run(["a", "b", "a"]) == [2, 1, 2]


def test_vector_tokens_of_the_wrong_width_are_refused():
    U = universal.build(2, 2, 1, storage="sparse")
    model = U.model.model
    ids = torch.ones(1, model.cfg.n_ctx, dtype=torch.long)
    with pytest.raises(ValueError, match="vector tokens of width"):
        model(ids, torch.zeros(1, model.cfg.n_ctx, model.cfg.token_width + 1))


def test_linear_sums_its_terms():
    dirs = torch.tensor([3, 0, 3, 1])
    cols = torch.tensor([1, 0, 0, 1])
    w = torch.tensor([2.0, -1.0, 0.5, 4.0], dtype=torch.float64)
    x = torch.randn(4, 2, 5, dtype=torch.float64)  # [dirs, batch, pos]
    got = Linear(dirs, cols, w, 2)(x, torch.arange(4))
    want = torch.stack([-x[0] + 0.5 * x[3], 2.0 * x[3] + 4.0 * x[1]])
    assert torch.allclose(got, want, rtol=0, atol=1e-15)
    # an identity factor is a copy
    ident = Linear(
        torch.tensor([2, 0]), torch.tensor([1, 0]), torch.ones(2, dtype=torch.float64), 2
    )
    assert ident.copy is not None
    assert torch.equal(ident(x, torch.arange(4)), torch.stack([x[0], x[2]]))


def test_auto_storage_keeps_small_models_dense():
    m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    assert m.storage == "dense" and isinstance(m.to_dense().model, type(m.model))
    s = compile_program(library.make_hist(), vocab="ab", max_seq_len=4, storage="sparse")
    assert isinstance(s.model, SparseTransformer)


def test_static_counts_equal_the_selection_matrix():
    # value inference counts an equality selector's keys by value (no [query, key] matrix)
    from attnsim.compiler import options, tracing, value_inference
    from attnsim.rasp import expr as E

    config = universal._config(3, 4, 2, None, {"layer": "encoder", "max_ff": 8})
    graph = tracing.trace(universal._program(config))
    vi = value_inference.infer(
        graph, None, config.layout.length, options.resolve(None, {"fixed_length": True})
    )
    checked = 0
    for node in graph.nodes.values():
        e = getattr(node, "expr", node)
        if isinstance(e, E.Selector) and vi.is_static(e):
            assert np.array_equal(vi.static_counts(e), vi.static_matrix(e).sum(axis=-1))
            checked += 1
    assert checked > 20


@pytest.mark.slow
@pytest.mark.parametrize("layer", ["attention", "encoder"])
def test_sparse_u_passes_the_accuracy_sweep(layer):
    # the same random targets as the accuracy sweeps, with U in sparse storage
    from attnsim.simulator.verify import verify

    kw = {"max_ff": 16} if layer == "encoder" else {}
    U = universal.build(8, 8, 4, layer=layer, storage="sparse", **kw)
    result = verify(U, targets=60, seed=3, progress=False)
    assert result.count == 60 and not result.failures
    assert result.max_error <= 1e-9


@pytest.mark.parametrize(
    "options",
    [
        {"attention": "softmax"},
        {"maps": "relu"},
        {"layer": "encoder", "max_ff": 8, "attention": "softmax"},
    ],
    ids=["softmax", "relu-maps", "encoder-softmax"],
)
def test_sparse_u_in_other_modes(options):
    dense = universal.build(3, 4, 2, storage="dense", **options)
    sparse = universal.build(3, 4, 2, storage="sparse", **options)
    for seed in range(2):
        if "layer" in options:
            target = sampling.random_encoder_layer(2, 4, 8, seed=seed)
        else:
            target = sampling.random_attention(2, 4, seed=seed, causal=bool(seed))
        X = torch.tensor(np.random.default_rng(seed).standard_normal((3, 4)))
        got = sparse.simulate(target, X)
        assert torch.allclose(got, dense.simulate(target, X), rtol=1e-12, atol=1e-12)
        bound = 1e-4 if options.get("maps") == "relu" else 1e-12
        assert float((got - reference(target, X)).abs().max()) <= bound


def test_causal_programs_in_sparse_storage():
    program = library.make_frac_prevs(rasp.tokens == "a")
    kw = {"vocab": "ab", "max_seq_len": 6, "causal": True}
    dense = compile_program(program, storage="dense", **kw)
    sparse = compile_program(program, storage="sparse", **kw)
    for x in ["abba", "aab", "b", "ababab"]:
        assert sparse.run(x) == dense.run(x)


def test_memory_bound_of_a_sparse_build_is_not_the_dense_scores():
    # a sequence of 65,536 positions: one dense score matrix is 32 GiB, sparse storage
    # needs the input, its channels and the position tables, or its weights while building
    from attnsim.simulator.config import (
        SimulatorConfig,
        build_weight_bytes,
        memory_needed,
        vector_stream_bytes,
    )

    config = SimulatorConfig(128, 128, 4, layer="encoder", max_ff=512)
    positions = config.layout.length + 1
    assert memory_needed(config, "dense") >= 8 * positions * positions
    sparse = memory_needed(config, "sparse")
    stream = 3 * 129 * 128 * 512 * 8  # three groups of max_d + 1 rows over n max_ff positions
    assert vector_stream_bytes(config) == stream
    assert sparse == memory_needed(config) == max(stream, build_weight_bytes(config))
    assert sparse < 2**30
    # (the estimate against the measured peaks: test_bad_inputs_round2_api, from the results)


def _count_one_sided(monkeypatch):
    """Counts the sparse path's one-sided heads by the side that is static, and whether
    each ran over distinct rows (True) or gave way to the dense head (False)."""
    from attnsim.model import plan_keys

    ran: list[tuple[str, bool]] = []
    real = plan_keys.run_projected

    def counted(cfg, static, q, k, v):
        z = real(cfg, static, q, k, v)
        ran.append((static, z is not None))
        return z

    monkeypatch.setattr(plan_keys, "run_projected", counted)
    return ran


def test_sparse_u_runs_its_one_sided_heads_over_distinct_rows(monkeypatch):
    """The scalar encoder U's LayerNorm heads (static queries, keys that read the target's
    flags) fail their candidate certificate: in sparse storage they run over the distinct
    rows of their keys, not over [query, key]; against torch's layer and the dense storage."""
    ran = _count_one_sided(monkeypatch)
    check_encoder_u("scalar", rows=4)
    assert ("queries", True) in ran


def check_encoder_u(layout: str, rows: int) -> None:
    """The encoder U (4, 4, 2) in sparse storage against torch's layer and the dense storage,
    on three random layers with ``rows`` rows of X."""
    kw = {"layer": "encoder", "layout": layout, "max_ff": 8}
    dense = universal.build(4, 4, 2, storage="dense", **kw)
    sparse = universal.build(4, 4, 2, storage="sparse", **kw)
    for seed in range(3):
        target = sampling.random_encoder_layer(2, 4, 8, seed=seed, activation="gelu")
        X = torch.tensor(np.random.default_rng(seed).standard_normal((rows, 4)))
        with torch.no_grad():
            want = to_torch(target)(X[None])[0]
        got = sparse.simulate(target, X)
        assert torch.allclose(got, dense.simulate(target, X), rtol=1e-12, atol=1e-12)
        assert float((got - want).abs().max()) <= 1e-9 * max(1.0, float(want.abs().max()))


def test_sparse_heads_with_static_keys_gather_at_computed_positions(monkeypatch):
    """``Select(indices, target, ==)``: static keys; in sparse storage the head runs once per
    distinct query row. Against the dense storage and the interpreter."""
    ran = _count_one_sided(monkeypatch)
    n = 6
    target = rasp.Map(lambda x: (x + 1) % n, rasp.tokens).named("target")
    sel = rasp.Select(rasp.indices, target, rasp.Comparison.EQ).named("at")
    program = rasp.Aggregate(sel, rasp.tokens).named("gathered")
    kw = {"vocab": list(range(n)), "max_seq_len": n}
    dense = compile_program(program, storage="dense", **kw)
    sparse = compile_program(program, storage="sparse", **kw)
    rng = np.random.default_rng(2)
    xs = [[int(t) for t in rng.integers(0, n, size=n)] for _ in range(10)]
    for _ in range(2):  # the second pass after any candidate certificate gave up
        assert [sparse.run(x) for x in xs] == [dense.run(x) for x in xs]
    assert [sparse.run(x) for x in xs] == [rasp.evaluate(program, [x])[0] for x in xs]
    assert ("keys", True) in ran


def test_sparse_units_run_once_per_distinct_input_row(monkeypatch):
    """reverse at max_seq_len 40 in sparse storage: its map of (length, index) pairs reads
    few distinct one-hot rows in a batch, so its units run once per distinct row; the
    outputs equal the dense storage's and the interpreter's, the streams entry by entry."""
    from attnsim.model import plan_core

    grouped = []
    real = plan_core.repeated_rows

    def counted(n, get_rows, owner, work):
        got = real(n, get_rows, owner, work)
        grouped.append(got is not None)
        return got

    monkeypatch.setattr(plan_core, "repeated_rows", counted)
    program = library.make_reverse(rasp.tokens)
    kw = {"vocab": "abc", "max_seq_len": 40}
    dense = compile_program(program, storage="dense", **kw)
    sparse = compile_program(program, storage="sparse", **kw)
    rng = np.random.default_rng(5)
    xs = [[str(c) for c in rng.choice(list("abc"), size=40)] for _ in range(12)]
    xs += [[str(c) for c in rng.choice(list("abc"), size=int(rng.integers(1, 40)))]]
    grouped.clear()
    got = sparse.run(xs[:12])  # one batch of 12 x 41 positions: the rows repeat
    assert any(grouped), "no unit map ran over distinct rows"
    want = [rasp.evaluate(program, [x])[0] for x in xs]
    assert got == want[:12] == dense.run(xs[:12])
    assert [sparse.run(x) for x in xs] == want


def test_planned_means_in_parts_add_their_terms_in_the_same_order(monkeypatch):
    """run_plan gathers a head's selected keys in parts of a bounded size (U's sums over
    282,000 positions would gather gigabytes at once): the same sums, bit for bit."""
    from attnsim.model import sparse_plans

    ran = []
    real = sparse_plans.run_plan
    monkeypatch.setattr(
        "attnsim.model.sparse.run_plan", lambda *a: ran.append(a[1].gather) or real(*a)
    )
    program = library.make_frac_prevs(rasp.tokens == "a")  # a mean over each prefix
    m = compile_program(program, vocab="ab", max_seq_len=12, storage="sparse")
    rng = np.random.default_rng(4)
    xs = ["".join(rng.choice(list("ab"), size=12)) for _ in range(16)]
    ids, vals = m.encode(xs)
    whole = m.runtime(ids, vals)
    monkeypatch.setattr(sparse_plans, "TERMS_PER_CHUNK", 7)
    m.runtime.forget()
    parts = m.runtime(ids, vals)
    assert torch.equal(parts, whole)
    assert False in ran  # a mean over several keys ran from its plan
    for x in xs[:4]:
        assert m.run(x) == pytest.approx(rasp.evaluate(program, x), abs=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_sparse_product_sums_its_terms_in_order_on_long_and_short_rows(dtype, monkeypatch):
    """sparse_ops.Linear on rows of both lengths (term by term, and in slices) against numpy
    summing each column's products in the order given: the same bits."""
    from attnsim.model import sparse_ops

    g = torch.Generator().manual_seed(3)
    dirs, cols = torch.randint(0, 40, (300,), generator=g), torch.randint(0, 9, (300,), generator=g)
    weight = torch.randn(300, dtype=torch.float64, generator=g)
    lin = sparse_ops.Linear(dirs, cols, weight, 9)
    slot = torch.randperm(40, generator=g)
    for length in (sparse_ops.ROW_BY_TERM, 7):  # term by term, then in slices
        x = torch.randn(40, 1, length, generator=g).to(dtype)
        want = np.zeros((9, 1, length), dtype=x.numpy().dtype)
        xs, w = x.numpy(), weight.to(dtype).numpy()
        for d, c, wt in zip(slot[dirs].tolist(), cols.tolist(), w):
            want[c] = want[c] + xs[d] * wt
        assert np.array_equal(lin(x, slot).numpy(), want)


def test_the_runtime_keeps_what_the_sparse_storage_runs():
    """One Runtime runs either storage: the sparse storage's plans, failed tries and peak
    columns live in it, not on the model; called as a module, the model runs its definition
    (no plans) to the planned pass's outputs; an executor set on the model is refused."""
    from attnsim.model.runtime import Runtime

    m = compile_program(
        library.make_sort_unique(rasp.tokens, rasp.tokens),
        vocab=[1, 2, 3],
        max_seq_len=5,
        storage="sparse",
    )
    assert type(m.runtime) is Runtime
    ids, vals = m.encode([[3, 1, 2], [2, 3, 1]])
    planned = m.runtime(ids, vals)
    assert m.runtime.plans(ids.shape[1]) is m.runtime.plans(ids.shape[1])  # kept per length
    assert any(m.runtime.plans(ids.shape[1]))
    assert m.runtime.peak_columns > 0
    assert not any(k.startswith("_plans") or k == "_misses" for k in vars(m.model))
    assert torch.allclose(m.model(ids, vals), planned, rtol=1e-12, atol=1e-12)
    other = Runtime(m.model, "plan")  # a second runtime keeps its own
    assert torch.allclose(other(ids, vals), planned, rtol=1e-12, atol=1e-12)
    assert other.plans(ids.shape[1]) is not m.runtime.plans(ids.shape[1])
    with pytest.raises(AttributeError, match="no executor"):
        m.model.executor = "plan"
    with pytest.raises(TypeError, match="sparse storage"):
        Runtime(object())
    twin = compile_program(library.make_hist(), vocab="ab", max_seq_len=5, storage="sparse")
    with pytest.raises(ValueError, match="runs another model"):  # its plans are not these
        m.model.run(ids, vals, None, None, None, twin.runtime)
    for bad in (0, m.config.n_ctx + 1, 2.0, True):
        with pytest.raises(ValueError, match="number of positions from 1 to"):
            m.model.build_plans(bad)
        with pytest.raises(ValueError, match="number of positions from 1 to"):
            m.runtime.plans(bad)


@pytest.mark.parametrize("factor", ["3t", "t+t"])
def test_a_product_whose_factor_overflows_gives_the_dense_nan(factor):
    """A product runs only where both factors can be non-zero while they are finite; a
    factor that overflows (3 * 1e308) where the other is 0 is NaN in the dense forward, and
    so in both sparse paths (before: 0, with no run-time check to catch it)."""
    from attnsim.model.runtime import Runtime

    t = rasp.numerical(rasp.tokens)
    gate = rasp.numerical(rasp.Map(lambda i: 0.0 if i == 0 else 1.0, rasp.indices))
    first = t * 3 if factor == "3t" else t + t
    m = compile_program(rasp.numerical(first * gate), vocab=None, max_seq_len=4, storage="sparse")
    ids, vals = m.encode([[1e308, 1.0, 2.0], [1.0, 2.0, 3.0]])
    want = m.model.to_dense()(ids, vals)
    assert bool(want.isnan().any())
    for got in (Runtime(m.model, "plan")(ids, vals), m.model(ids, vals)):
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got.nan_to_num(), want.nan_to_num())


def test_unit_groups_that_read_each_others_writes_are_refused():
    """Sparse storage runs an MLP's unit kinds one after the other; weights in which one
    kind reads what another writes (the dense MLP reads the stream before it) are refused
    on load, not run to other values."""
    t = rasp.numerical(rasp.tokens)
    gate = rasp.numerical(rasp.Map(lambda i: 0.0 if i == 0 else 1.0, rasp.indices))
    prog = rasp.numerical(rasp.numerical(t * gate) + rasp.numerical(rasp.reciprocal(t)))
    net = compile_program(prog, vocab=None, max_seq_len=4, storage="sparse").model
    state = {k: v.clone() for k, v in net.state_dict().items()}
    state["blocks.0.mlp.reciprocal.inputs"][0, 1] = state["blocks.0.mlp.bilinear.outputs"][0, 1]
    with pytest.raises(ValueError, match="read directions its other units write"):
        SparseTransformer.from_state(net.cfg, net.layout(), state)
