"""Rows held in blocks of positions (attnsim.model.block_rows) and the blocked sparse
stream (attnsim.model.store): the same values as one dense tensor (the oracle), memory
taken only for the blocks written, and the same model outputs either way."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim import compile_program, library, rasp
from attnsim.model import block_rows, sparse_ops
from attnsim.model import store as store_mod
from attnsim.model.block_rows import BLOCK, BlockRows
from attnsim.model.store import Store
from attnsim.simulator import sampling, universal
from attnsim.simulator.to_torch import to_torch


@pytest.fixture
def blocked(monkeypatch):
    """Every store holds its rows in blocks, whatever its size."""
    monkeypatch.setattr(store_mod, "BLOCKED_STORE_BYTES", 0)
    monkeypatch.setattr(store_mod, "BLOCKED_ROW_VALUES", 1)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal entry by entry, NaN where the other is NaN."""
    return torch.equal(a.nan_to_num(123.5), b.nan_to_num(123.5)) and torch.equal(
        a.isnan(), b.isnan()
    )


@settings(max_examples=60, deadline=None)
@given(
    n=st.sampled_from([1, 7, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 5]),
    batch=st.integers(1, 3),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["add", "clear"]),
            st.lists(st.integers(1, 7), min_size=1, max_size=4, unique=True),
            st.integers(0, 10_000),
            st.floats(0, 1),
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_block_rows_read_as_a_dense_tensor(n, batch, ops):
    """Adds over random spans (a few with NaN or only zeros) and clears: every read of
    BlockRows equals the same adds and clears on a dense zero tensor."""
    rows = BlockRows(8, batch, n, torch.float64, chunk=3)  # chunks of 3 blocks: many
    ref = torch.zeros(8, batch, n, dtype=torch.float64)
    rng = np.random.default_rng(len(ops) * 1000 + n)
    for kind, which, seed, frac in ops:
        idx = torch.tensor(which)
        if kind == "clear":
            rows.clear(which)
            ref[idx] = 0.0
        else:
            lo = seed % n
            hi = min(n, lo + 1 + int(frac * n))
            v = torch.zeros(len(which), batch, n, dtype=torch.float64)
            if frac < 0.9:  # (otherwise: an add of zeros only)
                v[:, :, lo:hi] = torch.tensor(rng.standard_normal((len(which), batch, hi - lo)))
            if frac < 0.1:
                v[0, 0, lo] = float("nan")  # a NaN is written, not skipped as zero
            rows.add(idx, v)
            ref[idx] += v
        got = rows[torch.arange(8)]
        assert got.shape == ref.shape
        assert _same(got, ref)
    assert float(rows[torch.tensor([0, 0])].abs().sum()) == 0.0  # row 0 is never written
    assert rows[torch.tensor([], dtype=torch.long)].shape == (0, batch, n)  # no rows read
    assert rows.held <= len(rows.chunks) * rows.chunk - 1


def test_blocks_are_taken_only_where_written():
    """512 MiB of rows: writing a few positions of every row takes one block per row, in
    resident memory and in the pool's size (its address space), not the rows' size."""
    n = 1 << 16  # 512 KiB per row
    st_ = BlockRows(1025, 1, n, torch.float64, chunk=256)
    for a in range(1, 1025, 64):
        vals = torch.zeros(64, 1, n, dtype=torch.float64)
        vals[:, 0, 1:100] = 1.0
        st_.add(torch.arange(a, a + 64), vals)
    assert st_.held == 1024
    assert st_.resident_mb() == 1024 * BLOCK * 8 / 2**20  # 4 MiB, not 512
    assert st_.reserved_mb() <= (1024 + 256) * BLOCK * 8 / 2**20  # at most a chunk unused
    assert float(st_[torch.arange(1, 4)][:, 0, :101].sum()) == 3 * 99
    st_.clear(list(range(1, 513)))
    assert st_.held == 512
    assert float(st_[torch.arange(1, 513)].abs().sum()) == 0.0
    more = torch.zeros(512, 1, n, dtype=torch.float64)
    more[:, 0, -3:] = 2.0  # reuses the freed blocks: the pool does not grow
    size = len(st_.chunks)
    st_.add(torch.arange(1, 513), more)
    assert len(st_.chunks) == size and st_.held == 1024
    assert float(st_[torch.arange(1, 1025)].sum()) == 512 * 99 + 512 * 6


def test_a_blocked_store_runs_as_the_dense_store(blocked, monkeypatch):
    """The Store's writes, drops, releases and growth give the same reads blocked as
    dense (rows of several blocks and a partial one, a batch of 2)."""
    n, d = 2 * BLOCK + 3, 40
    last = {c: 1 + c % 4 for c in range(d)}
    got = {}
    for blocked_ in (True, False):
        if not blocked_:
            monkeypatch.setattr(store_mod, "BLOCKED_STORE_BYTES", 1 << 62)
        s = Store(2, n, d, torch.float64, last, size=2)  # grows
        assert s.blocked == blocked_
        reads = []
        rng = np.random.default_rng(0)
        for stage in range(6):
            dirs = rng.choice(d, size=8, replace=False)
            v = torch.zeros(8, 2, n, dtype=torch.float64)
            lo = int(rng.integers(0, n))
            hi = min(n, lo + 40)
            v[:, :, lo:hi] = torch.tensor(rng.standard_normal((8, 2, hi - lo)))
            s.write(torch.tensor(dirs), v)
            if stage == 2:
                s.drop([int(c) for c in dirs[:3]])
            s.release(stage)
            reads.append(s.read(torch.arange(d)))
        got[blocked_] = reads
    assert all(torch.equal(a, b) for a, b in zip(got[True], got[False]))


def test_blocked_and_dense_stores_run_the_same_model(monkeypatch):
    """A compiled program and U in sparse storage give bit for bit the same outputs with
    every store blocked as with none (and U's against torch)."""
    m = compile_program(
        library.make_sort_unique(rasp.tokens, rasp.tokens),
        vocab="abcd",
        max_seq_len=8,
        storage="sparse",
    )
    U = universal.build(3, 3, 1, layer="encoder", max_ff=6, layout="vector", storage="sparse")
    t = sampling.random_encoder_layer(1, 3, 6, seed=2, activation="gelu")
    X = torch.tensor(np.random.default_rng(2).standard_normal((3, 3)))
    words = ["dcba", "badc", "ab"]
    got = {}
    monkeypatch.setattr(store_mod, "BLOCKED_STORE_BYTES", 0)
    monkeypatch.setattr(block_rows, "BLOCK", 4)  # several blocks per row at these lengths
    for by_term in (1, 1 << 62):  # sparse products term by term (on any row), in slices
        monkeypatch.setattr(sparse_ops, "ROW_BY_TERM", by_term)
        for limit in (1 << 62, 1):
            monkeypatch.setattr(store_mod, "BLOCKED_ROW_VALUES", limit)
            U.model.runtime.forget()
            m.runtime.forget()
            got[limit, by_term] = ([m.run(w) for w in words], U.simulate(t, X))
    assert all(g[0] == [sorted(w) for w in words] for g in got.values())
    assert all(torch.equal(g[1], got[1, 1][1]) for g in got.values())
    got[1] = got[1, 1]
    with torch.no_grad():
        want = to_torch(t)(X[None])[0]
    assert float((got[1][1] - want).abs().max()) <= 1e-9 * max(1.0, float(want.abs().max()))


def test_only_a_large_store_is_blocked():
    """Long rows alone do not block a store: its rows must also total BLOCKED_STORE_BYTES."""
    n = store_mod.BLOCKED_ROW_VALUES
    small = Store(1, n, d=4, dtype=torch.float64, last={0: 1}, size=4)
    rows = store_mod.BLOCKED_STORE_BYTES // (8 * n) + 1
    large = Store(1, n, d=4, dtype=torch.float64, last={0: 1}, size=rows)
    assert not small.blocked
    assert large.blocked  # on any system: no pages involved
    assert large.data.reserved_mb() <= block_rows.CHUNK_BYTES / 2**20  # one chunk, not rows
    short = Store(1, n - 1, d=4, dtype=torch.float64, last={0: 1}, size=rows * 2)
    assert not short.blocked


@pytest.mark.parametrize(
    "shape, at",
    [
        ((1, 1, 1001), 0),
        ((1, 1, 999), 2),
        ((1, 1, 5), -1),
        ((1, 2, 1000), 0),
        ((2, 1, 1000), 0),
        ((1000,), 0),
    ],
)
def test_an_add_of_the_wrong_shape_is_refused(shape, at):
    """Values past the positions, over another batch or number of rows would land in the
    wrong blocks: refused, naming both shapes, and nothing is written."""
    rows = BlockRows(3, 1, 1000, torch.float64)
    with pytest.raises(ValueError, match=r"at \+ w <= 1000 .*got"):
        rows.add(torch.tensor([1]), torch.ones(shape, dtype=torch.float64), at)
    assert rows.held == 0 and float(rows[torch.arange(3)].abs().sum()) == 0.0


def test_adds_and_reads_on_windows_are_those_of_whole_rows():
    """A write on positions at .. at + w - 1 (across block edges, into the partial last
    block) and a read of any window give what whole rows of numpy give."""
    rng = np.random.default_rng(3)
    n = 3 * BLOCK + 17
    rows = BlockRows(4, 2, n, torch.float64)
    want = np.zeros((4, 2, n))
    for at, w in [(0, n), (5, 9), (BLOCK - 3, 7), (2 * BLOCK, BLOCK), (n - 20, 20), (7, 3)]:
        v = rng.standard_normal((2, 2, w)) * (rng.random((2, 2, w)) < 0.5)
        idx = rng.choice(4, size=2, replace=False)
        rows.add(torch.from_numpy(idx), torch.from_numpy(v), at)
        want[idx, :, at : at + w] += v
    for lo, hi in [(0, n), (3, 700), (BLOCK, 2 * BLOCK), (n - 1, n), (10, 10)]:
        got = rows.window(torch.arange(4), lo, hi).numpy()
        assert np.array_equal(got, want[:, :, lo:hi])
