"""The sparse model's store keeps each row's span (the positions outside which it is 0) and
reads, computes and writes on spans: against a plain numpy stream under random writes on
windows, releases and drops, in one tensor and in blocks; and a planned gather on a span
against the whole-row gather."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim.model import store as store_mod
from attnsim.model.plans import head_plan
from attnsim.model.sparse_plans import run_plan
from attnsim.model.store import Store

N, D = 37, 6


def _apply(ops, blocked: bool, monkeypatch) -> None:
    if blocked:  # every store in blocks (of 8 positions: a row spans several)
        monkeypatch.setattr(store_mod, "BLOCKED_ROW_VALUES", 1)
        monkeypatch.setattr(store_mod, "BLOCKED_STORE_BYTES", 1)
        monkeypatch.setattr("attnsim.model.block_rows.BLOCK", 8)
    last = {d: 10**6 for d in range(D)}
    st_ = Store(2, N, d=D, dtype=torch.float64, last=last, size=3)
    assert st_.blocked == blocked
    want = np.zeros((D, 2, N))
    for kind, dirs, at, vals in ops:
        if kind == "write":
            w = vals.shape[2]
            st_.write(torch.tensor(dirs), torch.from_numpy(vals), at)
            want[dirs, :, at : at + w] += vals
        else:  # drop: the rows go back (zeroed); a later write takes a row again
            st_.drop(dirs)
            want[dirs] = 0.0
        got = st_.read(torch.arange(D)).numpy()
        assert np.array_equal(got, want)
        for d in range(D):  # every row is 0 outside its span, and its span is its own
            lo, hi = st_.span(torch.tensor([d]))
            assert not want[d, :, :lo].any() and not want[d, :, hi:].any()
            if want[d].any():
                nz = np.nonzero(want[d].any(0))[0]
                assert lo <= nz[0] and nz[-1] < hi
        lo, hi = st_.span(torch.arange(D))
        if hi > lo:  # a view of the span reads what the whole rows hold there
            part = st_.view(lo, hi)[st_.slot[torch.arange(D)]]
            assert np.array_equal(np.asarray(part), want[:, :, lo:hi])


@st.composite
def _ops(draw):
    ops = []
    for _ in range(draw(st.integers(1, 8))):
        dirs = draw(st.lists(st.integers(0, D - 1), min_size=1, max_size=D, unique=True))
        if draw(st.integers(0, 4)) == 0:
            ops.append(("drop", dirs, 0, None))
            continue
        at = draw(st.integers(0, N - 1))
        w = draw(st.integers(1, N - at))
        seed = draw(st.integers(0, 2**31))
        rng = np.random.default_rng(seed)
        vals = rng.integers(-3, 4, size=(len(dirs), 2, w)).astype(np.float64)
        vals *= rng.random((len(dirs), 1, w)) < draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]))
        ops.append(("write", dirs, at, vals))
    return ops


@pytest.mark.parametrize("blocked", [False, True])
@settings(max_examples=40, deadline=None)
@given(ops=_ops())
def test_writes_on_windows_reads_and_spans_match_a_plain_stream(blocked, ops):
    with pytest.MonkeyPatch.context() as mp:
        _apply(ops, blocked, mp)


def test_a_write_of_zeros_takes_no_row_and_adds_nothing():
    st_ = Store(1, 8, d=2, dtype=torch.float64, last={0: 1, 1: 1})
    st_.write(torch.tensor([0]), torch.zeros(1, 1, 8, dtype=torch.float64))
    assert int(st_.slot[0]) == 0 and st_.span(torch.tensor([0])) == (0, 0)
    nan = torch.zeros(1, 1, 3, dtype=torch.float64)
    nan[0, 0, 1] = float("nan")  # a NaN is written (it is not 0)
    st_.write(torch.tensor([1]), nan, at=4)
    assert st_.span(torch.tensor([1])) == (5, 6)
    assert torch.isnan(st_.read(torch.tensor([1]))[0, 0, 5])


@pytest.mark.parametrize("fill", [0, 3])
def test_a_gather_on_a_span_equals_the_whole_row_gather(fill):
    n = 12
    rng = np.random.default_rng(fill)
    keys = torch.from_numpy(rng.integers(0, n, size=n))
    keys[torch.from_numpy(rng.random(n) < 0.4)] = fill
    p = head_plan(0, torch.arange(n + 1), keys, None, True, listed=True)
    whole = torch.zeros(2, 1, n, dtype=torch.float64)
    whole[:, :, 2:7] = torch.from_numpy(rng.standard_normal((2, 1, 5)))
    want, at = run_plan(None, p, whole, n)
    assert at == 0
    for lo, hi in [(2, 7), (1, 9), (0, n)]:
        got = run_plan(None, p, whole[:, :, lo:hi], n, lo)
        full = torch.zeros_like(whole)
        if got is not None:
            z, z_at = got
            full[:, :, z_at : z_at + z.shape[2]] = z
        assert torch.equal(full, want)


@pytest.mark.parametrize(
    "shape, at",
    [((1, 1, 5), 4), ((1, 1, 3), -1), ((1, 2, 3), 0), ((2, 1, 3), 0), ((3,), 0)],
)
@pytest.mark.parametrize("blocked", [False, True])
def test_a_write_outside_the_stream_is_refused(shape, at, blocked, monkeypatch):
    """Values past the positions, before position 0, of another batch or another number
    of rows than directions: refused, naming both shapes, and nothing is written."""
    if blocked:
        monkeypatch.setattr(store_mod, "BLOCKED_ROW_VALUES", 1)
        monkeypatch.setattr(store_mod, "BLOCKED_STORE_BYTES", 1)
    st_ = Store(1, 8, d=2, dtype=torch.float64, last={0: 1, 1: 1})
    assert st_.blocked == blocked
    with pytest.raises(ValueError, match=r"values must be \[len\(dirs\), batch, w\].*got"):
        st_.write(torch.tensor([0]), torch.ones(shape, dtype=torch.float64), at)
    assert int(st_.slot[0]) == 0 and float(st_.read(torch.arange(2)).abs().sum()) == 0.0
