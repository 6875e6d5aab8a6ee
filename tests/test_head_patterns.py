"""The keys the compiler writes down for static heads (attnsim.model.patterns) against the keys
the plans find from the weights: the same keys for every head, every library program and U,
dense and sparse storage, plain and causal; and the metadata is dropped once the weights
change, or where attention is softmax."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnsim import compile_program, library, rasp, simulator
from attnsim.model import plans as P
from attnsim.model.patterns import KeyIndex, StaticPattern, head_keys
from attnsim.model.plan_static import known_patterns

PROGRAMS = {
    "reverse": lambda: library.make_reverse(rasp.tokens),
    "length": lambda: rasp.numerical(library.make_length()),
    "hist": library.make_hist,
    "sort_unique": lambda: library.make_sort_unique(rasp.tokens, -rasp.indices),
    "shift": lambda: library.shift_by(2, rasp.tokens),
    "frac_prevs": lambda: rasp.numerical(library.make_frac_prevs(rasp.tokens == "a")),
    "pair_balance": lambda: library.make_pair_balance(rasp.tokens, "a", "b"),
    "shuffle_dyck": lambda: library.make_shuffle_dyck(["ab"]),
}


def _dense_both(net, n):
    """The dense model's plans with the compiler's keys and from the weights alone."""
    with_meta = P.build_plans(net, n)
    saved = net._patterns_key
    net._patterns_key = None  # as for weights the compiler did not make
    try:
        assert net.head_patterns == ()
        from_weights = P.build_plans(net, n)
    finally:
        net._patterns_key = saved
    return with_meta, from_weights


def _same_plans(a, b) -> int:
    """Asserts two plan lists agree; returns how many head plans they hold."""
    heads = 0
    assert len(a) == len(b)
    for la, lb in zip(a, b):
        assert [type(p) for p in la] == [type(p) for p in lb]
        for pa, pb in zip(la, lb):
            if isinstance(pa, P.HeadPlan) and pa.gap is None:
                assert pa.head == pb.head and pa.gather == pb.gather
                assert torch.equal(pa.offsets, pb.offsets), pa.head
                assert torch.equal(pa.keys, pb.keys), pa.head
                heads += 1
            elif isinstance(pa, P.ConstPlan):
                assert pa.heads == pb.heads and torch.equal(pa.values, pb.values)
    return heads


@pytest.mark.parametrize("fixed", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_library_heads_take_the_keys_the_weights_give(name, causal, fixed):
    m = compile_program(
        PROGRAMS[name](), vocab="abc", max_seq_len=6, causal=causal, fixed_length=fixed
    )
    net = m.model
    patterns = known_patterns(net)
    assert len(patterns) == len(net.blocks)
    for n in (7,) if fixed else (2, 4, 7):
        _same_plans(*_dense_both(net, n))


def test_some_library_heads_carry_patterns_of_both_kinds():
    kinds = set()
    for make in PROGRAMS.values():
        m = compile_program(make(), vocab="abc", max_seq_len=6, fixed_length=True)
        kinds |= {p.kind for layer in m.model.head_patterns for p in layer if p is not None}
    assert kinds == {"equality", "table"}


def test_universal_simulator_plans_from_patterns_match_the_weights():
    u = simulator.build(3, 2, 1)
    net = u.model.model
    n = u.config.layout.length + 1
    assert sum(p is not None for layer in net.head_patterns for p in layer) > 10
    assert _same_plans(*_dense_both(net, n)) > 10


def test_sparse_storage_plans_from_patterns_match_the_weights():
    m = compile_program(
        library.make_reverse(rasp.tokens),
        vocab="abc",
        max_seq_len=6,
        storage="sparse",
        fixed_length=True,
    )
    net = m.model
    assert any(p is not None for layer in net.head_patterns for p in layer)
    for n in (7,):
        with_meta = net.build_plans(n)
        saved, net.head_patterns = net.head_patterns, ()
        try:
            from_weights = net.build_plans(n)
        finally:
            net.head_patterns = saved
        assert len(with_meta) == len(from_weights)
        for la, lb in zip(with_meta, from_weights):
            assert la.keys() == lb.keys()
            for h in la:
                a, b = la[h], lb[h]
                for field in ("offsets", "keys", "queries"):
                    x, y = getattr(a, field), getattr(b, field)
                    assert (x is None) == (y is None)
                    assert x is None or torch.equal(x, y), (h, field)
                assert a.gather == b.gather and a.fill == b.fill


def test_changed_weights_drop_the_patterns():
    m = compile_program(library.make_reverse(rasp.tokens), vocab="abc", max_seq_len=6)
    net = m.model
    assert net.head_patterns
    with torch.no_grad():
        net.blocks[0].attn.W_O.mul_(1.0)  # any in-place change bumps the version
    assert net.head_patterns == ()


def test_softmax_models_do_not_use_patterns():
    m = compile_program(
        library.make_reverse(rasp.tokens), vocab="abc", max_seq_len=6, attention="softmax"
    )
    assert m.model.head_patterns and known_patterns(m.model) == ()


def _brute_keys(q, k, n, mode, causal):
    """Every query's keys by the hard rule over explicit scores (the oracle)."""
    scores = np.full((n, n), -np.inf)
    scores[0, 0] = 1e6
    for i in range(1, n):
        for j in range(n):
            if causal and j > i:
                continue
            if j == 0:
                scores[i, j] = 1.0 if mode == "width" else 0.5
            else:
                scores[i, j] = 1.0 if q[i - 1] == k[j - 1] else 0.0
    keys, offsets = [], [0]
    for i in range(n):
        row = np.flatnonzero(scores[i] >= scores[i].max() - 0.25)
        keys += row.tolist()
        offsets.append(len(keys))
    return offsets, keys


@pytest.mark.parametrize("spread", [4, 3000])  # a tabled and a searched key index
@pytest.mark.parametrize("mode", ["mean", "width"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_head_keys_follow_the_hard_rule(mode, causal, seed, spread):
    rng = np.random.default_rng(seed)
    L = 9
    values = rng.integers(-spread, spread, 4).astype(float)  # a few values, repeated
    q, k = rng.choice(values, L), rng.choice(values, L)
    q[0] = spread * 3  # a query value no key has
    index = KeyIndex.of(k)
    assert (index.start is None) == (spread > 100)
    eq = StaticPattern.equality(q, k, index).with_mode(mode)
    table = StaticPattern.table(q[:, None] == k[None, :]).with_mode(mode)
    for n in (1, 2, 5, L + 1):
        want = _brute_keys(q, k, n, mode, causal)
        for p in (eq, table, StaticPattern.equality(q, k).with_mode(mode)):
            offsets, keys = head_keys(p, n, causal)
            assert (offsets.tolist(), keys.tolist()) == want


def test_a_gather_pattern_becomes_a_sparse_gather_plan():
    p = StaticPattern.equality([2.0, 1.0, 0.0], [0.0, 1.0, 2.0])
    offsets, keys = head_keys(p, 4, False)
    plan = P.head_plan(0, torch.from_numpy(offsets), torch.from_numpy(keys), None, True, True)
    assert plan.gather and plan.fill == 0  # BOS reads BOS: the fill, left out
    assert plan.queries.tolist() == [1, 2, 3] and plan.keys.tolist() == [3, 2, 1]


def test_bad_patterns_are_refused():
    with pytest.raises(ValueError, match="alike"):
        StaticPattern.equality([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="mode"):
        StaticPattern.equality([1.0], [1.0]).with_mode("max")
    with pytest.raises(ValueError, match="covers 1 positions"):
        head_keys(StaticPattern.equality([1.0], [1.0]), 4, False)


# -- checkpoints ------------------------------------------------------------------------------


def _saved(tmp_path, storage="dense"):
    m = compile_program(
        library.make_reverse(rasp.tokens),
        vocab="abc",
        max_seq_len=6,
        fixed_length=True,
        storage=storage,
    )
    m.save(tmp_path)
    return m


@pytest.mark.parametrize("storage", ["dense", "sparse"])
def test_checkpoints_keep_the_patterns(tmp_path, storage):
    from attnsim.model.compiled import CompiledModel

    m = _saved(tmp_path, storage)
    back = CompiledModel.load(tmp_path)
    saved, loaded = m.model.head_patterns, back.model.head_patterns
    assert len(saved) == len(loaded) and any(p is not None for layer in loaded for p in layer)
    for la, lb in zip(saved, loaded):
        for a, b in zip(la, lb):
            assert (a is None) == (b is None)
            if a is not None:
                assert (a.kind, a.mode) == (b.kind, b.mode)
                for n in (7,):
                    got, want = head_keys(a, n, False), head_keys(b, n, False)
                    assert all(np.array_equal(x, y) for x, y in zip(got, want))
    assert back.run(list("abcaab")) == m.run(list("abcaab")) == list("baacba")


def _edit_table(tmp_path, edit):
    import json

    meta = json.loads((tmp_path / "model.json").read_text())
    edit(meta["head_patterns"])
    (tmp_path / "model.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t[0].__setitem__(0, {"kind": "max"}), "is not a head pattern"),
        (lambda t: t[0][0].__setitem__("mode", "first"), "has mode 'first'"),
        (lambda t: t[0][0].__setitem__("key_values", 99), "from a tensor there is not"),
        (lambda t: t.append([]), "is not a list of"),
        (lambda t: t[0].append(None), "heads"),
        (lambda t: t[0].__setitem__(0, None), "belongs to no"),
    ],
)
def test_damaged_pattern_tables_are_refused(tmp_path, edit, message):
    from attnsim.model.checkpoint import DamagedCheckpointError
    from attnsim.model.compiled import CompiledModel

    _saved(tmp_path)
    _edit_table(tmp_path, edit)
    with pytest.raises(DamagedCheckpointError, match="the heads' patterns"):
        CompiledModel.load(tmp_path)  # the digest names the table first
    with pytest.raises(DamagedCheckpointError, match=message):
        CompiledModel.load(tmp_path, check=False)


def test_damaged_pattern_tensors_are_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    from attnsim.model.checkpoint import DamagedCheckpointError
    from attnsim.model.compiled import CompiledModel

    _saved(tmp_path)
    file = str(tmp_path / "model.safetensors")
    state = load_file(file)
    state["head_patterns.1"] = state["head_patterns.1"] + 0.5  # query values, not integers
    save_file(state, file)
    with pytest.raises(DamagedCheckpointError, match="head_patterns.1"):
        CompiledModel.load(tmp_path)
    with pytest.raises(DamagedCheckpointError, match="not all integers"):
        CompiledModel.load(tmp_path, check=False)
    state["head_patterns.1"] = state["head_patterns.1"].float()
    save_file(state, file)
    with pytest.raises(DamagedCheckpointError, match="are not torch.float64"):
        CompiledModel.load(tmp_path, check=False)


def test_table_patterns_are_checked_row_by_row():
    from attnsim.model import pattern_store

    p = StaticPattern.table(np.array([[1, 1, 0], [0, 0, 1], [0, 0, 0]], dtype=bool))
    table, tensors = pattern_store.to_checkpoint(((p,),))
    back = pattern_store.from_checkpoint(table, tensors, [1], 3, "t")
    assert back[0][0].offsets.tolist() == [0, 2, 3, 3] and back[0][0].keys.tolist() == [0, 1, 2]
    bad = dict(tensors, **{"head_patterns.1": torch.tensor([1, 0, 2])})  # row 0: keys 1, 0
    with pytest.raises(pattern_store.PatternTableError, match="not ascending"):
        pattern_store.from_checkpoint(table, bad, [1], 3, "t")
    bad = dict(tensors, **{"head_patterns.1": torch.tensor([0, 1, 5])})
    with pytest.raises(pattern_store.PatternTableError, match="outside"):
        pattern_store.from_checkpoint(table, bad, [1], 3, "t")
    bad = dict(tensors, **{"head_patterns.0": torch.tensor([0, 2, 1, 3])})
    with pytest.raises(pattern_store.PatternTableError, match="offsets"):
        pattern_store.from_checkpoint(table, bad, [1], 3, "t")
    with pytest.raises(pattern_store.PatternTableError, match="without their table"):
        pattern_store.from_checkpoint(None, tensors, [1], 3, "t")


def test_a_pattern_on_a_head_that_is_not_static_is_refused(tmp_path):
    import json

    from attnsim.model.checkpoint import DamagedCheckpointError
    from attnsim.model.compiled import CompiledModel

    # a layer of two heads: hist's (tokens against tokens) and a shift's (positions only)
    hist, shift = library.make_hist(), library.shift_by(1, rasp.tokens)
    m = compile_program(
        rasp.SequenceMap(lambda x, y: f"{x}{y}", shift, hist), vocab="abc", max_seq_len=6
    )
    static = P.summary(m.model)["static_heads"]
    m.save(tmp_path)
    meta = json.loads((tmp_path / "model.json").read_text())
    li = 0
    entry = next(e for e in meta["head_patterns"][li] if e is not None)
    h = next(h for h in range(len(meta["head_patterns"][li])) if h not in static[li])
    meta["head_patterns"][li][h] = entry  # a claim on a head whose weights read the input
    (tmp_path / "model.json").write_text(json.dumps(meta))
    with pytest.raises(DamagedCheckpointError, match=f"head {h} of layer {li}, whose weights"):
        CompiledModel.load(tmp_path, check=False)


def test_equality_patterns_keep_their_queries_sparse_and_exact():
    # the query side as its default and the entries that differ, bit for bit (-0.0 beside
    # a default 0.0 is listed), and the keys it selects those of the dense form
    rng = np.random.default_rng(3)
    for _ in range(50):
        L = int(rng.integers(1, 40))
        q = np.where(rng.random(L) < 0.7, -1.0, rng.integers(0, L, L).astype(np.float64))
        if L > 2:
            q[1] = -0.0
        k = np.arange(L, dtype=np.float64)
        p = StaticPattern.equality(q, k)
        assert np.array_equal(p.query_values.view(np.int64), q.view(np.int64))
        assert p.query_at is None or 2 * len(p.query_at) < L
        for n in range(1, L + 2):
            for causal in (False, True):
                got = head_keys(p, n, causal)
                rows = [
                    [j + 1 for j in range(n - 1) if k[j] == q[i] and (not causal or j <= i)]
                    for i in range(n - 1)
                ]
                want_keys = [0] + [key for r in rows for key in (r or [0])]
                assert got[1].tolist() == want_keys


def test_a_checkpoint_with_dense_query_values_still_loads():
    # the form checkpoints stored before: {"query_values", "key_values"}, both [L]
    from attnsim.model import pattern_store

    q, k = np.array([2.0, -1.0, 0.0]), np.array([0.0, 1.0, 2.0])
    table = [[{"kind": "equality", "mode": "mean", "query_values": 0, "key_values": 1}]]
    tensors = {"head_patterns.0": torch.tensor(q), "head_patterns.1": torch.tensor(k)}
    back = pattern_store.from_checkpoint(table, tensors, [1], 3, "t")[0][0]
    assert back.query_values.tolist() == q.tolist()
    assert [a.tolist() for a in head_keys(back, 4, False)] == [
        a.tolist() for a in head_keys(StaticPattern.equality(q, k), 4, False)
    ]


def test_sparse_query_entries_are_checked():
    from attnsim.model import pattern_store

    p = StaticPattern.equality(
        np.array([-1.0, 0.0, -1.0, -1.0, -1.0, 1.0, -1.0, -1.0]), np.arange(8.0)
    )
    assert p.query_at is not None  # two of eight listed
    table, tensors = pattern_store.to_checkpoint(((p,),))
    names = table[0][0]
    at = f"head_patterns.{names['query_at']}"
    vals = f"head_patterns.{names['query_at_values']}"
    bad = dict(tensors, **{at: torch.tensor([3, 1])})
    with pytest.raises(pattern_store.PatternTableError, match="ascend"):
        pattern_store.from_checkpoint(table, bad, [1], 8, "t")
    bad = dict(tensors, **{at: torch.tensor([1, 19])})
    with pytest.raises(pattern_store.PatternTableError, match="ascend within"):
        pattern_store.from_checkpoint(table, bad, [1], 8, "t")
    bad = dict(tensors, **{vals: torch.tensor([0.0], dtype=torch.float64)})
    with pytest.raises(pattern_store.PatternTableError, match="one value each"):
        pattern_store.from_checkpoint(table, bad, [1], 8, "t")
    with pytest.raises(ValueError, match="one value each"):
        StaticPattern.sparse_equality(0.0, [1, 2], [1.0], np.arange(4.0))
    for edit, message in (
        (lambda e: e.__setitem__("query_default", "x"), "query_default 'x'"),
        (lambda e: e.__setitem__("query_default", float("nan")), "query_default nan"),
        (lambda e: e.pop("query_default"), "is not a head pattern"),
    ):
        bad_table = [[dict(names)]]
        edit(bad_table[0][0])
        with pytest.raises(pattern_store.PatternTableError, match=message):
            pattern_store.from_checkpoint(bad_table, tensors, [1], 8, "t")


def test_queries_that_differ_mostly_are_kept_dense_and_not_copied():
    from attnsim.model import pattern_store

    q = np.array([3.0, 2.0, 1.0, 0.0])  # every value differs from the most common one
    p = StaticPattern.equality(q, np.arange(4.0))
    assert p.query_at is None and p.query_values is not None
    assert np.shares_memory(p.query_values, np.asarray(q)) or np.array_equal(p.query_values, q)
    table, tensors = pattern_store.to_checkpoint(((p,),))
    assert set(table[0][0]) == {"kind", "mode", "query_values", "key_values"}  # dense form
    back = pattern_store.from_checkpoint(table, tensors, [1], 4, "t")[0][0]
    assert back.query_values.tolist() == q.tolist()
    assert [a.tolist() for a in head_keys(back, 5, False)] == [
        a.tolist() for a in head_keys(p, 5, False)
    ]
