"""Which directions a sparse run keeps (attnsim.model.liveness): a planned run does not
keep the query and key directions of heads that run as gathers, and the static pass writes
the position rows only static heads read a few heads at a time. Both against the run that
keeps everything: same outputs, same plans, fewer rows."""

import numpy as np
import pytest
import torch

from attnsim.model import liveness
from attnsim.model.store import Store
from attnsim.simulator import sampling, universal
from attnsim.simulator.to_torch import to_torch


def _u(n_layers=1):
    extra = {"n_layers": n_layers} if n_layers > 1 else {}
    return universal.build(
        4, 4, 2, layer="encoder", max_ff=8, layout="vector", storage="sparse", **extra
    )


def _case(seed=0):
    t = sampling.random_encoder_layer(2, 4, 8, seed=seed, activation="gelu")
    X = torch.tensor(np.random.default_rng(seed).standard_normal((3, 4)))
    with torch.no_grad():
        want = to_torch(t)(X[None])[0]
    return t, X, want


def test_a_planned_run_keeps_fewer_rows_and_gives_the_same_output():
    U = _u()
    t, X, want = _case()
    got = U.simulate(t, X)
    planned = U.model.runtime.peak_columns
    U.model.executor = "dense"  # every head over its scores: reads every query and key
    dense = U.simulate(t, X)
    assert planned < U.model.runtime.peak_columns, (planned, U.model.runtime.peak_columns)
    assert torch.allclose(got, dense, rtol=1e-12, atol=1e-12)
    assert float((got - want).abs().max()) <= 1e-9 * max(1.0, float(want.abs().max()))


def test_gather_heads_read_only_their_values_in_a_planned_run():
    net = _u().model.model
    plans = net.build_plans(net.cfg.n_ctx)
    everything = liveness.sublayer_reads(net._heads, net._units)[1]
    planned = liveness.sublayer_reads(net._heads, net._units, plans)[1]
    assert set(planned) < set(everything)
    gathers = 0
    for hm, p in zip(net._heads, plans):
        for h, plan in p.items():
            if plan.gap is None:
                gathers += 1
                for c in hm.reads_v[h]:
                    assert c in planned
    assert gathers > 0
    for c in set(everything) - set(planned):  # what is dropped: only gathers' query/key
        assert any(
            c in hm.reads_qk[h] and p.get(h) is not None and p[h].gap is None
            for hm, p in zip(net._heads, plans)
            for h in hm.active
        )


@pytest.mark.parametrize("n_layers", [1, 2])
def test_deferred_position_rows_give_the_same_plans(monkeypatch, n_layers):
    """The static pass with the position rows of static heads written group by group
    finds exactly the plans it finds with all of them written at the layer's start. In a
    stack, the simulated layers read the same position rows: they are deferred in each
    layer that reads them (not kept from the first layer to the last)."""
    net = _u(n_layers).model.model
    n = net.cfg.n_ctx
    deferred = net._deferred()
    assert sum(len(s) for s in deferred) > 0
    if n_layers > 1:
        seen = [c for s in deferred for c in s]
        assert len(seen) > len(set(seen))  # some row deferred in two layers
    with_groups = net.build_plans(n)
    net._deferred_rows = [set() for _ in deferred]  # nothing deferred
    monkeypatch.setattr("attnsim.model.head_parts.PART_BYTES", 8)  # (groups of one row)
    plain = net.build_plans(n)
    assert [sorted(p) for p in with_groups] == [sorted(p) for p in plain]
    for a, b in zip(with_groups, plain):
        for h in a:
            for k, v in vars(a[h]).items():
                w = vars(b[h])[k]
                assert torch.equal(v, w) if isinstance(v, torch.Tensor) else v == w


def test_deferred_rows_in_groups_of_one(monkeypatch):
    """Position rows one at a time (parts of 8 bytes) in the static pass: same output."""
    U = _u()
    t, X, want = _case(1)
    whole = U.simulate(t, X)
    monkeypatch.setattr("attnsim.model.head_parts.PART_BYTES", 8)
    U.model.runtime.forget()
    assert torch.allclose(U.simulate(t, X), whole, rtol=1e-12, atol=1e-12)


def test_store_drop_frees_rows_for_reuse():
    st = Store(1, 3, d=4, dtype=torch.float64, last={0: 2, 1: 2, 2: 2}, size=3)
    st.write(torch.tensor([0, 1]), torch.ones(2, 1, 3, dtype=torch.float64))
    st.drop([0])
    assert float(st.read(torch.tensor([0])).abs().sum()) == 0.0
    st.write(torch.tensor([2]), 2 * torch.ones(1, 1, 3, dtype=torch.float64))  # reuses 0's row
    assert st.data.shape[0] == 3
    assert st.read(torch.tensor([0, 1, 2]))[:, 0, 0].tolist() == [0.0, 1.0, 2.0]
    st.release(3)  # the dropped direction is no longer waiting for its stage
    assert st.read(torch.tensor([1, 2])).abs().sum() == 0.0
