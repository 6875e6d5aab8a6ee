"""Keys on a parabola (attnsim.model.plan_curve): a hard head's selection from a window per
query. Oracles: the dense selection over every key (``plan_core._select_rows``, the scores
``q @ k.T`` as the dense head computes them), torch's own layers and the dense storage for
the universal simulator built with the window path on."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim.model import plan_core, plan_curve, plan_static
from attnsim.model.config import ModelConfig
from tests.test_sparse_storage import check_encoder_u

CFG = ModelConfig(
    n_layers=1, d_model=1, n_heads=1, d_head=1, d_mlp=0, d_bilinear=0, n_ctx=4, d_vocab=2
)


def _gather_keys(ts: torch.Tensor, scale: float = 1.0, bos: bool = True) -> torch.Tensor:
    """Key rows of an equality ``s == t`` as the compiler writes it (score 1 - (s - t)^2),
    a BOS key first (score 0.5 for every query, 1000 for the BOS query)."""
    k = scale * torch.stack([2 * ts, -torch.ones_like(ts), 1 - ts * ts, torch.zeros_like(ts)], 1)
    if bos:
        k[0] = torch.tensor([0.0, 0.0, 0.5, 1000.0])
    return k


def _queries(ss: torch.Tensor) -> torch.Tensor:
    q = torch.stack([ss, ss * ss, torch.ones_like(ss), torch.zeros_like(ss)], 1)
    q[0] = torch.tensor([0.0, 0.0, 0.0, 1.0])
    return q


def _dense(q, k):
    count, keys, _ = plan_core._select_rows(CFG, q, k)
    return count, keys


def _check(q, k):
    """The window path (with the dense rows it leaves) against the dense selection: the
    same keys for every query it certifies (where no key's score lies within rounding of
    the tolerance), and the best other score up to rounding."""
    curve = plan_curve.find_curve(k, plan_core.distinct_rows)
    assert curve is not None
    keys, counts, others, done = plan_curve.select_on_curve(curve, q, CFG.hard_tolerance)
    want_count, want_keys = _dense(q, k)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(want_count, 0)])
    got_at = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)])
    scores = q @ k.T
    for i in torch.nonzero(done).flatten().tolist():
        cut = scores[i].max() - CFG.hard_tolerance
        size = float((q[i].abs() @ k.abs().T).max())
        if bool(((scores[i] - cut).abs() < 1e-12 * size).any()):
            continue  # a key on the edge: either answer is within rounding
        want = want_keys[offsets[i] : offsets[i + 1]]
        assert torch.equal(keys[got_at[i] : got_at[i + 1]], want), i
        rest = torch.ones(len(k), dtype=torch.bool)
        rest[want] = False
        best_other = float(scores[i][rest].max()) if rest.any() else float("-inf")
        assert float(others[i]) == pytest.approx(best_other, rel=1e-12, abs=1e-12 * size)
    assert int(counts[~done].sum()) == 0
    return done


def test_gathers_at_every_position_are_found_by_their_windows():
    n = 3000
    ts = torch.arange(n, dtype=torch.float64) - 1  # key positions after BOS
    k = _gather_keys(ts)
    rng = np.random.default_rng(0)
    ss = torch.tensor(rng.integers(-1, n, size=500), dtype=torch.float64)  # -1: no key
    done = _check(_queries(ss), k)
    assert bool(done[1:].all())  # every query but BOS certified by its window


def test_repeated_values_large_scales_and_queries_between_keys():
    rng = np.random.default_rng(1)
    ts = torch.tensor(np.repeat(np.arange(100), 7)[rng.permutation(700)], dtype=torch.float64)
    k = _gather_keys(ts, scale=65536.0)
    ss = torch.tensor(rng.uniform(-5, 105, size=300).round(1), dtype=torch.float64)
    done = _check(_queries(ss), k)
    assert done.float().mean() > 0.9


def test_queries_without_a_vertex_go_to_the_dense_path():
    ts = torch.arange(50, dtype=torch.float64)
    k = _gather_keys(ts, bos=False)
    q = torch.tensor([[1.0, 0.0, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0], [3.0, 9.0, -1.0, 0.0]])
    done = _check(q.double(), k)  # a linear score and a convex one: no window holds them
    assert not bool(done.any())


def test_keys_off_any_parabola_are_refused():
    k = torch.randn(100, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert plan_curve.find_curve(k, plan_core.distinct_rows) is None
    assert plan_curve.find_curve(k[:, :0], plan_core.distinct_rows) is None
    ts = torch.arange(200, dtype=torch.float64)
    k = _gather_keys(ts)
    k[5:, 2] += 1e-3 * ts[5:] ** 3  # no longer quadratic in 2 t (more odd rows than allowed)
    assert plan_curve.find_curve(k, plan_core.distinct_rows) is None


@settings(max_examples=40, deadline=None)
@given(
    st.integers(20, 300),
    st.integers(1, 4),
    st.floats(0.01, 1e4),
    st.integers(0, 2**31 - 1),
)
def test_random_parabolas_agree_with_the_dense_selection(n, repeat, scale, seed):
    rng = np.random.default_rng(seed)
    ts = torch.tensor(rng.integers(0, max(1, n // repeat), size=n), dtype=torch.float64)
    k = _gather_keys(ts, scale=scale, bos=bool(seed % 2))
    odd = rng.integers(1, n, size=3)
    k[odd] = torch.tensor(rng.standard_normal((3, 4)))  # a few keys off the parabola
    ss = torch.tensor(rng.uniform(-3, n // repeat + 3, size=40), dtype=torch.float64)
    q = _queries(ss)
    curve = plan_curve.find_curve(k, plan_core.distinct_rows)
    if curve is not None:  # (three random rows can happen to fit a parabola: skip then)
        _check(q, k)


@pytest.mark.parametrize("layout", ["scalar", "vector"])
def test_u_with_windows_on_equals_torch_and_the_dense_storage(monkeypatch, layout):
    """U's gathers certified by their windows (the path switched on at every length):
    against torch's layer and U in dense storage."""
    used = []
    real = plan_curve.select_on_curve

    def counted(curve, q, tol):
        got = real(curve, q, tol)
        used.append(int(got[3].sum()))
        return got

    monkeypatch.setattr(plan_curve, "select_on_curve", counted)
    monkeypatch.setattr(plan_core, "CURVE_FROM", 16)
    # the keys from the weights (not the compiler's patterns), where the windows find them
    monkeypatch.setattr(plan_static, "known_patterns", lambda model: ())
    check_encoder_u(layout, rows=3)
    assert sum(used) > 100  # the windows certified most of U's gathers


def test_non_finite_keys_stay_on_the_dense_path():
    ts = torch.arange(40, dtype=torch.float64)
    for bad in (float("nan"), float("inf")):
        k = _gather_keys(ts)
        k[7, 2] = bad
        assert plan_curve.find_curve(k, plan_core.distinct_rows) is None
        q = _queries(torch.tensor([0.0, 3.0, 7.0, 20.0], dtype=torch.float64))
        offsets, keys, _, _ = plan_core.select_keys(CFG, q, k)
        want_count, want_keys = _dense(q, k)
        assert torch.equal(keys, want_keys)


def test_equal_keys_reuse_their_curve_and_changed_keys_do_not():
    """plan_core._curve keeps the last keys' curves in the dict one build passes: equal
    keys (another tensor) get the same curve, keys changed where the quick mark does not
    look get their own, and the selection with each matches the dense one; without a dict
    (or with another build's) nothing is shared."""
    n = plan_core.CURVE_FROM + 100
    ts = torch.arange(n, dtype=torch.float64)
    k1 = _gather_keys(ts)
    curves: dict = {}
    first = plan_core._curve(CFG, k1, curves)
    assert first is not None
    assert plan_core._curve(CFG, k1.clone(), curves) is first
    assert plan_core._curve(CFG, k1.clone(), {}) is not first
    assert plan_core._curve(CFG, k1.clone(), None) is not first
    k2 = k1.clone()
    k2[3] = _gather_keys(torch.tensor([7.0, 5.0]))[1]  # key 3 now holds t = 5 (not sampled)
    second = plan_core._curve(CFG, k2, curves)
    assert second is not first
    assert len(curves) <= plan_core.CURVES_KEPT
    q = _queries(torch.tensor([0.0, 3.0, 5.0, 40.0], dtype=torch.float64))
    for k in (k1, k2):
        offsets, keys, _, _ = plan_core.select_keys(CFG, q, k)
        count, want = _dense(q, k)
        assert torch.equal(offsets[1:] - offsets[:-1], count) and torch.equal(keys, want)
