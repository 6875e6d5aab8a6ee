"""The static pass that finds a sparse model's plans: it stops after the last layer whose
plans need the stream's static values, and a candidate head's best other key is found once
per distinct query vector; both against the full computation as the oracle."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnsim import compile_program, rasp
from attnsim.model import plan_core
from attnsim.model.config import ModelConfig
from attnsim.model.sparse import SparseTransformer
from attnsim.rasp import library
from attnsim.simulator import universal


def _fields(plan) -> dict:
    return {k: getattr(plan, k) for k in plan.__dataclass_fields__}


def _same_plans(a: list, b: list) -> None:
    assert len(a) == len(b)
    for la, lb in zip(a, b):
        assert sorted(la) == sorted(lb)
        for h in la:
            fa, fb = _fields(la[h]), _fields(lb[h])
            assert fa.keys() == fb.keys()
            for key in fa:
                x, y = fa[key], fb[key]
                if torch.is_tensor(x):
                    assert torch.is_tensor(y) and torch.equal(x, y), (h, key)
                else:
                    assert x == y, (h, key)


def _full_pass(net: SparseTransformer, n: int, monkeypatch) -> list:
    """The plans of a static pass over every layer (the oracle)."""
    monkeypatch.setattr(SparseTransformer, "_static_layers", lambda self: len(self.layers))
    net._plans.clear()
    try:
        return net.plans(n)
    finally:
        monkeypatch.undo()
        net._plans.clear()


@pytest.mark.parametrize("layout", ["vector", "scalar"])
def test_the_static_pass_stops_where_no_later_plan_needs_it(layout, monkeypatch):
    U = universal.build(4, 4, 2, layer="encoder", max_ff=4, layout=layout, storage="sparse")
    net = U.model.model
    n = net.cfg.n_ctx
    assert 0 < net._static_layers() < len(net.layers)  # U: one partial head, early
    want = _full_pass(net, n, monkeypatch)
    net._plans.clear()
    _same_plans(net.plans(n), want)


def test_without_written_patterns_every_layer_with_static_heads_runs(monkeypatch):
    program = library.make_sort_unique(rasp.tokens, rasp.tokens)
    m = compile_program(program, vocab=[1, 2, 3], max_seq_len=5, storage="sparse")
    net = m.model
    a = net._analysis()
    last_static = max((i + 1 for i, hs in enumerate(a["heads"]) if hs), default=0)
    net.head_patterns = ()  # weights alone: every static head is found from scores
    assert net._static_layers() >= last_static
    want = _full_pass(net, 6, monkeypatch)
    _same_plans(net.plans(6), want)


def _oracle(cfg: ModelConfig, q: np.ndarray, k: np.ndarray):
    """Query by query: the candidates (within the tolerance of the best score), the best
    score outside them, their gap; None where a query has no gap above the tolerance."""
    n = q.shape[0]
    s = q @ k.T
    if cfg.causal:
        s = np.where(np.arange(n)[None, :] > np.arange(n)[:, None], -np.inf, s)
    keys, gaps = [], []
    for i in range(n):
        best = s[i].max()
        chosen = s[i] >= best - cfg.hard_tolerance
        keys.append(np.flatnonzero(chosen))
        rest = s[i][~chosen]
        gaps.append(best - (rest.max() if len(rest) else -np.inf))
    return keys, np.array(gaps)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_candidate_keys_against_every_query_scored_alone(causal, seed, monkeypatch):
    monkeypatch.setattr(plan_core, "ROWS_PER_CHUNK", 37)  # many chunks
    rng = np.random.default_rng(seed)
    n, w, distinct = 40, 3, 5
    rows = rng.integers(-3, 4, size=(distinct, w)).astype(np.float64)
    q = rows[rng.integers(0, distinct, size=n)]  # queries repeat: few distinct vectors
    k = rng.integers(-3, 4, size=(n, w)).astype(np.float64) * 2.0
    cfg = ModelConfig(
        n_layers=1,
        d_model=w,
        n_heads=1,
        d_head=w,
        d_mlp=0,
        d_bilinear=0,
        n_ctx=n,
        d_vocab=2,
        causal=causal,
    )
    got = plan_core.candidate_keys(cfg, torch.from_numpy(q), torch.from_numpy(k))
    keys, gaps = _oracle(cfg, q, k)
    # (these draws all have a gap above the tolerance and few candidates: a plan exists)
    assert (gaps > cfg.hard_tolerance).all() and sum(map(len, keys)) * 4 <= n * n
    assert got is not None
    offsets, found, gap, bound = got
    assert [found[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == [
        x.tolist() for x in keys
    ]
    np.testing.assert_allclose(gap.numpy(), gaps, rtol=1e-12)
    np.testing.assert_array_equal(bound.numpy(), np.abs(k).max(axis=0))
