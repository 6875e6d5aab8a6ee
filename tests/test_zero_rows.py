"""Rows of zeros in pages (attnsim.model.zero_rows) and the paged sparse stream
(attnsim.model.store): the same values as ordinary zero-filled tensors, and memory taken
only where something non-zero was written."""

import numpy as np
import pytest
import torch

from attnsim import compile_program, library, rasp
from attnsim.model import store as store_mod
from attnsim.model import zero_rows
from attnsim.model.store import Store
from attnsim.model.zero_rows import ZeroRows, copy_written, zeros
from attnsim.simulator import sampling, universal
from attnsim.simulator.to_torch import to_torch

needs_pages = pytest.mark.skipif(not zero_rows.PAGED, reason="no anonymous pages here")


@pytest.fixture
def any_size(monkeypatch):
    """Stores of any total size live in pages (rows of at least PAGED_ROW_VALUES)."""
    monkeypatch.setattr(store_mod, "PAGED_STORE_BYTES", 0)


@pytest.mark.parametrize("paged", [True, False])
@pytest.mark.parametrize("row", [(3,), (1, 700), (2, 1025), (4096,)])
def test_clear_zeroes_exactly_the_rows_asked(paged, row):
    """Rows shorter than a page, unaligned rows and page-sized rows: clear sets the rows
    asked (including runs of consecutive rows) to 0 and leaves the others as written."""
    z = ZeroRows(9, row, torch.float64, paged=paged)
    ref = torch.zeros(9, *row, dtype=torch.float64)
    vals = torch.randn(9, *row, dtype=torch.float64)
    z.tensor += vals
    ref += vals
    for rows in ([1], [3, 4, 5], [0, 8], [2, 7]):
        z.clear(rows)
        ref[rows] = 0.0
        assert torch.equal(z.tensor, ref)
        z.tensor[rows] += 1.5  # written again after the clear
        ref[rows] += 1.5
        assert torch.equal(z.tensor, ref)


def test_zeros_and_copy_written():
    """zeros is all 0 whatever its size; copy_written copies up to the last non-zero
    position (a NaN counts as written) and leaves the zero tail untouched."""
    for shape in [(3, 4), (2, 70_000, 3)]:
        assert not bool(zeros(shape, torch.float64).ne(0).any())
    src = torch.zeros(2, 50, 3, dtype=torch.float64)
    src[1, 20, 2] = float("nan")
    src[0, 3, 0] = 4.0
    dst = zeros((2, 50, 3), torch.float64)
    copy_written(dst, src, step=7)
    assert torch.equal(dst.nan_to_num(7.0), src.nan_to_num(7.0))
    empty = zeros((1, 5), torch.float64)
    copy_written(empty, torch.zeros(1, 5, dtype=torch.float64), step=2)
    assert not bool(empty.ne(0).any())


@needs_pages
def test_pages_are_taken_only_where_written(any_size):
    """512 MiB of rows: writing the first positions of every row takes about a page per
    row, not the rows' size (the store's saving); dropped rows read 0."""
    n = 1 << 16  # 512 KiB per row
    st = Store(1, n, d=1024, dtype=torch.float64, last={c: 5 for c in range(1024)}, size=1025)
    assert st.paged
    for a in range(0, 1024, 64):
        vals = torch.zeros(64, 1, n, dtype=torch.float64)
        vals[:, 0, 1:100] = 1.0
        st.write(torch.arange(a, a + 64), vals)
        del vals
    taken = zero_rows.resident_mb(st.data)
    assert taken < 16, taken  # a page per row; 512 MiB if every page were taken
    dirs = torch.arange(1024)
    assert float(st.read(dirs[:3])[:, 0, :101].sum()) == 3 * 99
    st.drop(list(range(512)))
    assert float(st.read(dirs[:512]).abs().sum()) == 0.0
    assert float(st.read(dirs[512:]).sum()) == 512 * 99


@needs_pages
def test_a_span_write_adds_where_non_zero_only(any_size):
    """A paged store adds a write over the span of its non-zero positions: values outside
    it are 0 anyway, so the rows equal an ordinary sum."""
    n = store_mod.PAGED_ROW_VALUES * 2
    st = Store(2, n, d=4, dtype=torch.float64, last={0: 3, 1: 3, 2: 3}, size=4)
    assert st.paged
    ref = torch.zeros(3, 2, n, dtype=torch.float64)
    rng = np.random.default_rng(0)
    for lo, hi in [(5, 9), (n - 3, n), (0, n), (100, 101)]:
        v = torch.zeros(3, 2, n, dtype=torch.float64)
        v[:, :, lo:hi] = torch.tensor(rng.standard_normal((3, 2, hi - lo)))
        st.write(torch.tensor([0, 1, 2]), v)
        ref += v
        assert torch.equal(st.read(torch.tensor([0, 1, 2])), ref)
    st.write(torch.tensor([1]), torch.zeros(1, 2, n, dtype=torch.float64))  # all zero: no-op
    assert torch.equal(st.read(torch.tensor([0, 1, 2])), ref)
    v = torch.zeros(3, 2, n, dtype=torch.float64)
    v[2, 1, n - 7] = float("nan")  # a NaN is written, not skipped as zero
    st.write(torch.tensor([0, 1, 2]), v)
    got = st.read(torch.tensor([2]))[0, 1]
    assert bool(got[n - 7].isnan()) and int(got.isnan().sum()) == 1


@needs_pages
def test_a_grown_paged_store_keeps_its_rows(any_size):
    st = Store(1, 1 << 14, d=300, dtype=torch.float64, last={c: 1 for c in range(300)}, size=2)
    v = torch.arange(1, 301, dtype=torch.float64)[:, None, None].expand(300, 1, 1 << 14)
    for c in range(300):  # grows from 2 rows, one direction at a time
        st.write(torch.tensor([c]), v[c : c + 1])
    assert torch.equal(st.read(torch.arange(300)), v)


def test_paged_and_ordinary_stores_run_the_same_model(monkeypatch):
    """A compiled program and U in sparse storage give bit for bit the same outputs with
    every row paged as with none."""
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
    monkeypatch.setattr(store_mod, "PAGED_STORE_BYTES", 0)
    for limit in (1 << 62, 1):
        monkeypatch.setattr(store_mod, "PAGED_ROW_VALUES", limit)
        U.model.model._plans.clear()
        m.model._plans.clear()
        got[limit] = ([m.run(w) for w in words], U.simulate(t, X))
    assert got[1][0] == got[1 << 62][0] == [sorted(w) for w in words]
    assert torch.equal(got[1][1], got[1 << 62][1])
    with torch.no_grad():
        want = to_torch(t)(X[None])[0]
    assert float((got[1][1] - want).abs().max()) <= 1e-9 * max(1.0, float(want.abs().max()))


def test_only_a_large_store_lives_in_pages():
    """Long rows alone do not page a store: its rows must also total PAGED_STORE_BYTES."""
    n = store_mod.PAGED_ROW_VALUES
    small = Store(1, n, d=4, dtype=torch.float64, last={0: 1}, size=4)
    rows = store_mod.PAGED_STORE_BYTES // (8 * n) + 1
    large = Store(1, n, d=4, dtype=torch.float64, last={0: 1}, size=rows)
    assert not small.paged
    assert large.paged == zero_rows.PAGED
    short = Store(1, n - 1, d=4, dtype=torch.float64, last={0: 1}, size=rows * 2)
    assert not short.paged
