"""Wide heads, MLPs, position rows and vector tokens written to the sparse stream in parts
(attnsim.model.head_parts): the same function as the whole-width pass, against torch's
layer, the dense storage and the whole-width run of the same model."""

import numpy as np
import pytest
import torch

from attnsim.model import head_parts
from attnsim.model.sparse import SparseHeads, SparseUnits
from attnsim.model.sparse_ops import HeadMaps, Store, UnitMaps
from attnsim.simulator import sampling, universal
from attnsim.simulator.to_torch import to_torch


def _count(monkeypatch, name: str) -> list:
    ran: list = []
    real = getattr(head_parts, name)

    def counted(*a, **k):
        got = real(*a, **k)
        ran.append(got)
        return got

    monkeypatch.setattr(head_parts, name, counted)
    return ran


@pytest.mark.parametrize("layout", ["vector", "scalar"])
def test_u_in_parts_of_one_column_matches_torch_and_the_whole_pass(monkeypatch, layout):
    """Parts of 8 bytes (one column each): every wide head, MLP, position group and vector
    token goes part by part; the output matches torch's layer and the dense storage."""
    kw = {"layer": "encoder", "layout": layout, "max_ff": 8}
    dense = universal.build(4, 4, 2, storage="dense", **kw)
    U = universal.build(4, 4, 2, storage="sparse", **kw)
    targets = [sampling.random_encoder_layer(2, 4, 8, seed=s, activation="gelu") for s in (0, 1)]
    X = torch.tensor(np.random.default_rng(0).standard_normal((3, 4)))
    whole = [U.simulate(t, X) for t in targets]
    monkeypatch.setattr(head_parts, "PART_BYTES", 8)
    units = _count(monkeypatch, "run_units")
    heads = []
    real_parts = head_parts.parts
    monkeypatch.setattr(head_parts, "parts", lambda *a: heads.append(a) or real_parts(*a))
    U.model.runtime.forget()  # the static pass runs in parts too
    for t, w in zip(targets, whole):
        got = U.simulate(t, X)
        with torch.no_grad():
            want = to_torch(t)(X[None])[0]
        assert float((got - want).abs().max()) <= 1e-9 * max(1.0, float(want.abs().max()))
        assert torch.allclose(got, dense.simulate(t, X), rtol=1e-12, atol=1e-12)
        assert torch.allclose(got, w, rtol=1e-12, atol=1e-12)
    assert True in units  # some MLP ran in parts
    assert heads  # some planned head ran in parts


def test_a_batch_keeps_the_whole_width_pass(monkeypatch):
    """A batch of several sequences looks for repeated rows (unit_output): no unit parts."""
    U = universal.build(3, 3, 1, layer="encoder", max_ff=6, layout="vector", storage="sparse")
    targets = [sampling.random_encoder_layer(1, 3, 6, seed=s, activation="relu") for s in (0, 1)]
    X = torch.tensor(np.random.default_rng(1).standard_normal((3, 3)))
    monkeypatch.setattr(head_parts, "PART_BYTES", 8)
    units = _count(monkeypatch, "run_units")
    got = U.simulate_batch([(t, X) for t in targets])
    for t, g in zip(targets, got):
        with torch.no_grad():
            want = to_torch(t)(X[None])[0]
        assert float((g - want).abs().max()) <= 1e-9 * max(1.0, float(want.abs().max()))
    assert units and True not in units


def test_a_layer_whose_head_reads_what_another_writes_is_buffered():
    """Head 1 reads direction 2, which head 0 writes: writing head 0 to the stream before
    head 1 runs would change what head 1 reads, so the layer is not written apart."""
    w = torch.ones(2, dtype=torch.float64)
    qk = torch.tensor([[0, 0, 0], [1, 0, 0]])
    apart = HeadMaps(SparseHeads(2, qk, w, torch.tensor([[0, 1, 2], [1, 1, 3]]), w))
    reads = HeadMaps(SparseHeads(2, qk, w, torch.tensor([[0, 1, 2], [1, 2, 3]]), w))
    assert head_parts.writes_apart(apart) is True
    assert head_parts.writes_apart(reads) is False


def test_head_parts_cover_every_output_term_once():
    """A head whose output map mixes value columns (not a copy): the parts' outputs, added
    into a store, equal the whole map's output (an independent dense product)."""
    rng = np.random.default_rng(2)
    T = 40
    ov = torch.tensor(
        [[0, int(rng.integers(0, 6)), 10 + int(rng.integers(0, 5))] for _ in range(T)]
    )
    ow = torch.tensor(rng.standard_normal(T))
    qk = torch.tensor([[0, 0, 0]])
    hm = HeadMaps(SparseHeads(1, qk, ow[:1], ov, ow))
    x = torch.tensor(rng.standard_normal((16, 1, 5)))  # [dirs, batch, pos]
    slot = torch.arange(16)
    dense = torch.zeros(16, 16, dtype=torch.float64)  # value = x, output = dense @ value
    for (_, a, b), c in zip(ov.tolist(), ow.tolist()):
        dense[b, a] += c
    want = torch.einsum("ij,jbp->ibp", dense, x)
    for step in (1, 2, 3, 100):
        store = Store(1, 5, 16, torch.float64, {d: 9 for d in range(16)})
        for vp, op, dirs in head_parts.parts(hm, 0, step):
            z = vp(x, slot)  # the identity pattern: mixed values = values
            store.write(dirs, op(z, torch.arange(z.shape[0])))
        got = store.read(torch.arange(10, 15))
        assert torch.allclose(got, want[10:15], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["relu", "bilinear", "gelu"])
def test_unit_parts_equal_the_whole_units(monkeypatch, kind):
    """Units in parts of 1 and 2 against the whole UnitMaps on the same stream."""
    rng = np.random.default_rng(3)
    n_units, dirs = 5, 6
    inputs = torch.tensor([[u, int(rng.integers(0, 3))] for u in range(n_units) for _ in (0, 1)])
    second = (
        inputs[:0]
        if kind == "relu"
        else torch.tensor([[u, int(rng.integers(0, 3))] for u in range(n_units)])
    )
    outputs = torch.tensor([[u, 3 + int(rng.integers(0, 3))] for u in range(n_units)])
    u = SparseUnits(
        kind,
        n_units,
        inputs,
        torch.tensor(rng.standard_normal(len(inputs))),
        second,
        torch.tensor(rng.standard_normal(len(second))),
        outputs,
        torch.tensor(rng.standard_normal(len(outputs))),
    )
    um = UnitMaps(u)
    x = torch.tensor(rng.standard_normal((3, 1, 7)))
    last = {d: 9 for d in range(dirs)}
    whole = Store(1, 7, dirs, torch.float64, last)
    whole.write(torch.arange(3), x)
    parts = Store(1, 7, dirs, torch.float64, last)
    parts.write(torch.arange(3), x)
    whole.write(um.written, um.O(um.activation(whole.data, whole.slot), torch.arange(um.n)))
    for nbytes in (8, 16):
        monkeypatch.setattr(head_parts, "PART_BYTES", nbytes * 7)
        assert head_parts.run_units(parts, [um], 0, u) is True
    got = parts.read(torch.arange(3, 6))
    assert torch.allclose(got, 2 * whole.read(torch.arange(3, 6)), rtol=1e-12, atol=1e-12)


def test_write_channels_equals_a_dense_sum():
    """Vector tokens into directions, several channels into one direction, in parts."""
    rng = np.random.default_rng(5)
    vals = torch.tensor(rng.standard_normal((1, 4, 6)))
    vec = torch.tensor([[k, int(rng.integers(0, 3))] for k in range(6)])
    w = torch.tensor(rng.standard_normal(6))
    want = torch.zeros(3, 1, 4, dtype=torch.float64)
    for (k, c), wk in zip(vec.tolist(), w.tolist()):
        want[c] += vals[..., k] * wk
    for nbytes in (8, 16, 10**6):
        old = head_parts.PART_BYTES
        try:
            head_parts.PART_BYTES = nbytes * 4
            st = Store(1, 4, 3, torch.float64, {0: 1, 1: 1, 2: 1})
            head_parts.write_channels(st, vals, vec, w)
        finally:
            head_parts.PART_BYTES = old
        assert torch.allclose(st.read(torch.arange(3)), want, rtol=1e-12, atol=1e-12)


def test_columns_per_part_is_at_least_one():
    assert head_parts.columns_per_part(4, 10**9) == 1
    assert head_parts.columns_per_part(1, 1) == head_parts.PART_BYTES // 8
