"""The sparse storage's shortcuts against plain oracles: a planned gather copied run by run
(``sparse_plans.runs``) against numpy's indexed gather, heads' outputs added together
(``HeldWrites``) against one write per head, the span on which a unit group can be non-zero
(``UnitMaps.span``) against the dense product of its factors (NaN kept where a factor is not
finite), and a copy of consecutive long rows read as a view."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim.model import sparse_plans
from attnsim.model.head_parts import HeldWrites
from attnsim.model.plans import HeadPlan
from attnsim.model.sparse import SparseUnits
from attnsim.model.sparse_ops import Linear, UnitMaps
from attnsim.model.sparse_plans import run_plan, runs
from attnsim.model.store import Store

F64 = torch.float64


@st.composite
def gathers(draw):
    """A gather over n positions whose keys come in runs (one key, consecutive keys) and
    single keys, and a span of values."""
    n = draw(st.integers(2, 200))
    keys = []
    while len(keys) < n:
        kind = draw(st.sampled_from(["one", "up", "any"]))
        length = draw(st.integers(1, 40))
        start = draw(st.integers(0, n - 1))
        if kind == "one":
            keys += [start] * length
        elif kind == "up":
            keys += [min(start + i, n - 1) for i in range(length)]
        else:
            keys += [draw(st.integers(0, n - 1))]
    keys = np.array(keys[:n])
    fill = int(np.bincount(keys).argmax())
    at = draw(st.integers(0, n - 1))
    w = draw(st.integers(1, n - at))
    return n, keys, fill, at, w


def _plan(keys: np.ndarray, fill: int) -> HeadPlan:
    """The gather plan of ``keys`` (query q reads key ``keys[q]``): the others than fill listed."""
    listed = np.flatnonzero(keys != fill)
    queries, keys = torch.from_numpy(listed), torch.from_numpy(keys[listed])
    return HeadPlan(0, None, keys, None, True, queries=queries, fill=fill)


def _dense(z_at, n: int) -> torch.Tensor:
    out = torch.zeros(2, 1, n, dtype=F64)
    if z_at is not None:
        z, at = z_at
        out[:, :, at : at + z.shape[2]] = z
    return out


@settings(max_examples=150, deadline=None)
@given(gathers(), st.booleans())
def test_a_gather_run_by_run_is_the_indexed_gather(case, runs_first):
    n, keys, fill, at, w = case
    p = _plan(keys, fill)
    p.__dict__["_runs"] = {}
    rng = np.random.default_rng(n * 1000 + at)
    v = torch.from_numpy(rng.standard_normal((2, 1, w)))
    full = np.zeros((2, 1, n))
    full[:, :, at : at + w] = v.numpy()
    want = full[:, :, keys]  # numpy's gather: query q reads key keys[q]
    saved = sparse_plans.RUN_POSITIONS
    try:
        for every in [0, 10**9] if runs_first else [10**9, 0]:  # runs always, then never
            sparse_plans.RUN_POSITIONS = every
            p.__dict__["_runs"] = {}
            got = _dense(run_plan(None, p, v, n, at), n)
            np.testing.assert_array_equal(got.numpy(), want)
    finally:
        sparse_plans.RUN_POSITIONS = saved


@settings(max_examples=100, deadline=None)
@given(gathers())
def test_runs_cover_the_keys(case):
    n, keys, fill, _, _ = case
    p = _plan(keys, fill)
    runs = sparse_plans._runs(p, n)
    seen = np.full(n, -1)
    for start, end, key, step in runs:
        got = key + step * np.arange(end - start)
        covered = seen[start:end]
        assert ((covered == -1) | (covered == got)).all()  # runs agree where they overlap
        seen[start:end] = got
    np.testing.assert_array_equal(seen, keys)
    assert (np.diff(runs[:, 0]) >= 0).all()


def test_runs_are_kept_only_when_long_enough():
    q = torch.arange(0, 1000, 2)  # every other query reads a key of its own: 1,000 runs
    assert runs(HeadPlan(0, None, q + 1, None, True, queries=q), 1000) is None
    q = torch.arange(0, 1000)
    p = HeadPlan(0, None, torch.full((1000,), 7), None, True, queries=q, fill=3)
    assert runs(p, 1000).tolist() == [[0, 1000, 7, 0]]


def _store(n: int, dirs: int) -> Store:
    return Store(1, n, d=dirs, dtype=F64, last={d: 9 for d in range(dirs)})


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.sampled_from([None, 1, 200]))
def test_held_writes_add_what_one_write_per_head_adds(seed, limit):
    rng = np.random.default_rng(seed)
    n, dirs = 30, 6
    written = torch.tensor([0, 2, 3, 5])
    heads = []
    for _ in range(rng.integers(1, 6)):
        k = int(rng.integers(1, 5))
        rows = torch.from_numpy(np.sort(rng.choice(4, size=k, replace=False)))
        at = int(rng.integers(0, n))
        w = int(rng.integers(1, n - at + 1))
        z = torch.from_numpy(rng.integers(-4, 5, size=(k, 1, w)).astype(np.float64))
        heads.append((rows, z, at))
    one, held = _store(n, dirs), _store(n, dirs)
    want = np.zeros((dirs, n))
    buf = HeldWrites(held, written, limit)
    for rows, z, at in heads:
        one.write(written[rows], z, at)
        want[written[rows].numpy(), at : at + z.shape[2]] += z[:, 0].numpy()
        buf.add(rows, z, at)
    buf.flush()
    all_dirs = torch.arange(dirs)
    np.testing.assert_array_equal(held.read(all_dirs)[:, 0].numpy(), want)
    np.testing.assert_array_equal(one.read(all_dirs)[:, 0].numpy(), want)


def test_held_writes_keep_the_static_directions_only():
    st_ = _store(4, 3)
    buf = HeldWrites(st_, torch.tensor([0, 1, 2]), keep=torch.tensor([True, False, True]))
    buf.add(torch.tensor([0, 1]), torch.ones(2, 1, 2, dtype=F64), 1)
    buf.add(torch.tensor([2]), torch.ones(1, 1, 1, dtype=F64), 0)
    buf.flush()
    assert st_.read(torch.arange(3))[:, 0].tolist() == [
        [0.0, 1.0, 1.0, 0.0],
        [0.0, 0.0, 0.0, 0.0],
        [1.0, 0.0, 0.0, 0.0],
    ]


def _units(kind: str) -> UnitMaps:
    """Two units: unit j reads direction j (its input) and direction 2 + j (its gate or
    second factor), and writes direction 4 + j."""
    idx = torch.tensor([[0, 0], [1, 1]])
    w = torch.ones(2, dtype=F64)
    return UnitMaps(SparseUnits(kind, 2, idx, w, idx + torch.tensor([0, 2]), w, idx + 4, w))


def _dense_units(kind: str, x: np.ndarray) -> np.ndarray:
    a, b = x[0:2], x[2:4]
    if kind == "bilinear":
        with np.errstate(invalid="ignore"):
            return a * b
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(b != 0, np.exp(a), 0.0) * b


@pytest.mark.parametrize("kind", ["bilinear", "exp"])
@pytest.mark.parametrize("poison", [None, np.inf, np.nan])
def test_units_are_zero_outside_their_span(kind, poison):
    n = 12
    x = np.zeros((6, n))
    x[0, 1:5] = [1.0, -2.0, 3.0, 0.5]  # first factors on 1 .. 4
    x[1, 2:4] = [4.0, 5.0]
    x[2, 3:9] = np.arange(1.0, 7.0)  # second factors (gates) on 3 .. 8
    x[3, 6:8] = [2.0, -1.0]
    if poison is not None:
        x[2, 10] = poison  # a second factor, outside the first factors' span
    store = _store(n, 6)
    store.write(torch.arange(4), torch.from_numpy(x[:4, None, :]))
    um = _units(kind)
    lo, hi = um.span(store)
    want = _dense_units(kind, x)  # [2 units, n]
    outside = np.ones(n, dtype=bool)
    outside[lo:hi] = False
    # outside the span every unit is 0 in the dense definition too (or the span covers it)
    assert (want[:, outside] == 0).all(), (lo, hi, want)
    if kind == "bilinear" and poison is None:
        assert (lo, hi) == (3, 5)  # the overlap of the factors' spans
    if kind == "bilinear" and poison is not None:
        assert not store.finite and np.isnan(want[0, 10]) and lo <= 10 < hi
    if kind == "exp":
        assert (lo, hi) == (3, 11 if poison is not None else 9)  # the gates' span
    got = um.activation(store.view(lo, hi), store.slot)[:, 0].numpy()
    np.testing.assert_array_equal(got, want[:, lo:hi])


def test_a_copy_of_consecutive_long_rows_is_a_view():
    x = torch.arange(6 * 5000, dtype=F64).view(6, 1, 5000)
    slot = torch.arange(6)
    lin = Linear(torch.tensor([2, 3, 4]), torch.tensor([0, 1, 2]), torch.ones(3, dtype=F64), 3)
    got = lin(x, slot)
    assert torch.equal(got, x[2:5]) and got.data_ptr() == x[2].data_ptr()
    apart = Linear(torch.tensor([1, 3]), torch.tensor([0, 1]), torch.ones(2, dtype=F64), 2)
    got = apart(x, slot)
    assert torch.equal(got, x[[1, 3]]) and got.data_ptr() != x[1].data_ptr()
    short = x[:, :, :10].contiguous()  # short rows: a copy
    assert lin(short, slot).data_ptr() != short[2].data_ptr()


def _gather_layer(seed: int, heads: int = 12, n: int = 40, dirs: int = 8):
    """A layer of gather heads (every other one reads a value map another head reads too)
    over a stream of ``dirs`` directions (0 .. 3 read, 4 .. 7 written), their plans, a store
    whose values are 0 at every head's fill key, and the heads' (head, read, write) terms."""
    from attnsim.model.sparse import SparseHeads
    from attnsim.model.sparse_ops import HeadMaps

    rng = np.random.default_rng(seed)
    ov, ov_w, plans = [], [], {}
    shared = [(int(rng.integers(0, 4)), float(rng.integers(1, 4))) for _ in range(3)]
    for h in range(heads):
        own = rng.choice(4, size=2, replace=False)
        reads = [shared[h % 3]] if h % 2 else [(int(d), float(rng.integers(1, 4))) for d in own]
        for d, w in reads:
            for o in rng.choice(np.arange(4, dirs), size=int(rng.integers(1, 3)), replace=False):
                ov.append([h, d, int(o)])
                ov_w.append(w * float(rng.integers(1, 3)))
        m = int(rng.integers(1, 10))
        queries = torch.from_numpy(np.sort(rng.choice(np.arange(1, n), size=m, replace=False)))
        keys = torch.from_numpy(rng.integers(1, n, size=m))
        plans[h] = HeadPlan(h, None, keys, None, True, queries=queries, fill=0)
    qk = torch.tensor([[h, 0, 0] for h in range(heads)])
    ov_t, w_t = torch.tensor(ov), torch.tensor(ov_w, dtype=F64)
    hm = HeadMaps(SparseHeads(heads, qk, torch.ones(heads, dtype=F64), ov_t, w_t))
    x = rng.integers(-5, 6, size=(4, 1, n)).astype(np.float64)
    x[:, :, 0] = 0.0  # the fill key
    store = Store(1, n, d=dirs, dtype=F64, last={d: 9 for d in range(dirs)})
    store.write(torch.arange(4), torch.from_numpy(x))
    return hm, plans, store, n, list(zip(ov, ov_w))


def _layer(hm, plans, store, n, batch=None):
    """The heads' outputs added to ``store``: those of ``batch`` at once, the others one at
    a time (as the sparse model's attention runs them)."""
    from attnsim.model import gather_batch

    held = HeldWrites(store, hm.written)
    if batch is not None:
        held.add(*gather_batch.run(batch, store))
    for h in hm.active:
        if batch is not None and h in batch.heads:
            continue
        lo, hi = store.span(hm.V[h].dirs)
        got = run_plan(None, plans[h], hm.V[h](store.view(lo, hi), store.slot), n, lo)
        if got is not None:
            z, at = got
            held.add(hm.O_at[h], hm.O[h](z, torch.arange(z.shape[0])), at)
    held.flush()


@pytest.mark.parametrize("cells", [1 << 14, 12])  # 12: some heads, value maps on their span
@pytest.mark.parametrize("seed", range(6))
def test_a_batch_of_gathers_adds_what_the_heads_add_one_at_a_time(seed, cells, monkeypatch):
    from attnsim.model import gather_batch

    monkeypatch.setattr(gather_batch, "BATCH_CELLS", cells)
    hm, plans, one, n, terms = _gather_layer(seed)
    _layer(hm, plans, one, n)
    hm, plans, batched, n, _ = _gather_layer(seed)
    g = gather_batch.build(hm, plans)
    if cells > 12:
        assert g.heads == frozenset(hm.active) and not g.wide
    _layer(hm, plans, batched, n, g)
    every = torch.arange(8)
    assert torch.equal(batched.read(every), one.read(every))  # the same bits
    # the oracle: each written direction sums each head's weight times the value at its key
    x = one.read(every)[:4, 0].numpy()
    want = np.zeros((8, n))
    want[:4] = x
    for (h, d, o), w in terms:
        p = plans[h]
        want[o, p.queries.numpy()] += w * x[d, p.keys.numpy()]
    np.testing.assert_allclose(batched.read(every)[:, 0].numpy(), want, rtol=0, atol=1e-12)


def test_a_batch_with_value_maps_on_their_span(monkeypatch):
    from attnsim.model import gather_batch

    tried = 0
    for seed, cells in [(s, c) for s in range(10) for c in (6, 8, 10)]:
        monkeypatch.setattr(gather_batch, "BATCH_CELLS", cells)  # more cells: on their span
        hm, plans, batched, n, _ = _gather_layer(seed)
        g = gather_batch.build(hm, plans)
        if g is None or not g.wide:
            continue
        tried += 1
        hm, plans, one, n, _ = _gather_layer(seed)
        _layer(hm, plans, one, n)
        _layer(hm, plans, batched, n, g)
        assert torch.equal(batched.read(torch.arange(8)), one.read(torch.arange(8)))
    assert tried >= 3


def test_a_batch_runs_only_where_the_fill_key_reads_zeros():
    from attnsim.model import gather_batch

    hm, plans, store, n, _ = _gather_layer(0)
    store.write(torch.arange(4), torch.ones(4, 1, 1, dtype=F64), 0)  # values at the fill key
    g = gather_batch.build(hm, plans)
    assert gather_batch.run(g, store) is None  # each head then runs on its own
    assert gather_batch.build(hm, {0: plans[0]}) is None  # one head: nothing to batch


@st.composite
def listed_gathers(draw):
    """A listed gather over n positions: ascending queries (in clusters and alone) and their
    keys (runs of consecutive keys, repeats, the fill itself), and the fill."""
    n = draw(st.integers(1, 120))
    fill = draw(st.integers(0, n - 1))
    queries: list[int] = []
    q = draw(st.integers(0, 3))
    while q < n:
        queries.append(q)
        q += draw(st.sampled_from([1, 1, 1, 2, 3, 5, 17]))
    start = draw(st.integers(0, n - 1))
    keys = []
    for i in range(len(queries)):
        kind = draw(st.sampled_from(["up", "same", "any", "fill"]))
        step = {"up": i, "same": 0}.get(kind, 0)
        keys.append(
            fill
            if kind == "fill"
            else draw(st.integers(0, n - 1))
            if kind == "any"
            else start + step
        )
    keys = [min(k, n - 1) for k in keys]
    return n, HeadPlan(
        0, None, torch.tensor(keys, dtype=torch.long), None, True,
        queries=torch.tensor(queries, dtype=torch.long), fill=fill,
    )  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(listed_gathers())
def test_listed_runs_are_those_of_every_position(case):
    # the runs found near the listed queries (and none where the query groups alone make too
    # many) are those a pass over every position finds, less the fill's
    n, p = case
    every = sparse_plans._runs(p, n)
    every = every[(every[:, 2] != p.fill) | (every[:, 3] != 0)]
    want = every if len(every) * sparse_plans.RUN_POSITIONS <= len(p.queries) else None
    got = runs(p, n, listed=True)
    assert (got is None) == (want is None)
    if want is not None:
        assert got.tolist() == want.tolist()
    assert sparse_plans._fewest_runs(p, n) <= len(every)
    assert sparse_plans._listed_runs(p, n).tolist() == every.tolist()  # whatever their number
