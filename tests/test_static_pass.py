"""The static pass that finds a sparse model's plans: it stops after the last layer whose
plans need the stream's static values, a candidate head's best other key is found once per
distinct query vector, and a gather is made from its pattern's listed queries; each against
the full computation as the oracle."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnsim import compile_program, rasp
from attnsim.model import plan_core
from attnsim.model.config import ModelConfig
from attnsim.model.patterns import StaticPattern, gather_keys, head_keys
from attnsim.model.plan_static import pattern_keys
from attnsim.model.plans import head_plan, pattern_plan
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

    def everything(self):
        heads = [set(hm.active) for hm in self._heads]
        units = [set(range(len(ums))) for ums in self._units]
        return len(self.layers), heads, units

    monkeypatch.setattr(SparseTransformer, "_static_work", everything)
    try:
        return net.build_plans(n)
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("layout", ["vector", "scalar"])
def test_the_static_pass_stops_where_no_later_plan_needs_it(layout, monkeypatch):
    U = universal.build(4, 4, 2, layer="encoder", max_ff=4, layout=layout, storage="sparse")
    net = U.model.model
    n = net.cfg.n_ctx
    layers, heads, units = net._static_work()
    assert 0 < layers < len(net.layers)  # U: one partial head, early
    # and before it, only what that head's static scores read: position rows, which no
    # sublayer writes, so the pass runs none
    assert not any(heads) and not any(units)
    want = _full_pass(net, n, monkeypatch)
    _same_plans(net.build_plans(n), want)


def test_without_written_patterns_every_layer_with_static_heads_runs(monkeypatch):
    program = library.make_sort_unique(rasp.tokens, rasp.tokens)
    m = compile_program(program, vocab=[1, 2, 3], max_seq_len=5, storage="sparse")
    net = m.model
    a = net._analysis()
    last_static = max((i + 1 for i, hs in enumerate(a["heads"]) if hs), default=0)
    net.head_patterns = ()  # weights alone: every static head is found from scores
    assert net._static_work()[0] >= last_static
    want = _full_pass(net, 6, monkeypatch)
    _same_plans(net.build_plans(6), want)
    for xs in ([3, 1, 2, 2, 1], [2, 2, 2, 2, 2], [1, 3, 2, 3, 1]):  # and the interpreter's
        assert m.run(xs) == rasp.evaluate(program, xs)


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


def _generic(pattern: StaticPattern, n: int, causal: bool):
    """The gather plan from every query's keys (the oracle): ``(fill, queries, keys)``, or
    None where some query reads more than one key."""
    offsets, keys = head_keys(pattern, n, causal)
    if not (np.diff(offsets) == 1).all():
        return None
    plan = head_plan(0, torch.from_numpy(offsets), torch.from_numpy(keys), None, True, True)
    return plan.fill, plan.queries.numpy(), plan.keys.numpy()


def _same_gather(pattern: StaticPattern, n: int, causal: bool = False) -> bool:
    """Whether gather_keys gives the oracle's plan; True where it gave one."""
    got = gather_keys(pattern, n, causal)
    if got is None:
        return False
    want = _generic(pattern, n, causal)
    assert want is not None
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])
    assert got[1].dtype == got[2].dtype == np.int64
    return True


def test_gather_keys_of_the_simulator_are_its_keys():
    U = universal.build(4, 4, 2, layer="encoder", max_ff=4, layout="vector")
    net = U.model.model
    patterns = [p for layer in net.head_patterns for p in layer if p is not None]
    made = sum(_same_gather(p, net.cfg.n_ctx) for p in patterns)
    assert made >= len(patterns) // 2  # most of U's heads are such gathers


@pytest.mark.parametrize("seed", range(30))
def test_gather_keys_against_every_query(seed):
    rng = np.random.default_rng(seed)
    L = int(rng.integers(3, 40))
    keys = rng.permutation(L).astype(np.float64)  # distinct: one key per value
    if seed % 3 == 0:
        keys[rng.integers(0, L)] = keys[rng.integers(0, L)]  # a repeated value: two keys
    default = float(rng.choice([-1.0, 0.0, float(rng.integers(0, L))]))  # -1: selects none
    at = np.sort(rng.choice(L, size=int(rng.integers(0, L // 2 + 1)), replace=False))
    vals = rng.integers(-2, L + 2, size=len(at)).astype(np.float64)
    vals[vals == default] = L + 5  # (listed entries differ from the default)
    p = StaticPattern.sparse_equality(default, at, vals, keys)
    made = _same_gather(p, L + 1)
    if not made:  # then it must be one of the cases it declines
        want = _generic(p, L + 1, False)
        assert want is None or 2 * (len(at) + 1) >= L + 1


def test_gather_keys_declines_what_it_does_not_cover():
    keys = np.arange(6, dtype=np.float64)
    p = StaticPattern.sparse_equality(2.0, [4], [5.0], keys)
    assert _same_gather(p, 7)
    assert gather_keys(p, 7, causal=True) is None  # causal: keys past the query
    assert gather_keys(p, 5, causal=False) is None  # fewer positions than it covers
    with pytest.raises(ValueError, match="covers 6 positions, not 8: ask for at most 6"):
        pattern_plan(p, 0, 9, False, listed=True)  # more than it covers: the pattern's own error
    assert gather_keys(p.with_mode("width"), 7, causal=False) is None  # BOS beside
    assert gather_keys(StaticPattern.table(np.eye(6, dtype=bool)), 7, False) is None
    dense = StaticPattern.equality(np.arange(6.0)[::-1].copy(), keys)  # held dense
    assert dense.query_at is None and gather_keys(dense, 7, False) is None
    twice = StaticPattern.sparse_equality(2.0, [4], [5.0], np.array([0, 2, 2, 3, 4, 5.0]))
    assert gather_keys(twice, 7, False) is None  # two keys for the default


def test_pattern_plans_are_the_plans_of_every_querys_keys():
    U = universal.build(4, 4, 2, layer="encoder", max_ff=4, layout="vector")
    net = U.model.model
    n = net.cfg.n_ctx
    patterns = [p for layer in net.head_patterns for p in layer if p is not None]
    gathers = 0
    for p in patterns:
        offsets, keys = pattern_keys(p, n, False)
        want = head_plan(0, offsets, keys, None, bool((offsets.diff() == 1).all()), True)
        got = pattern_plan(p, 0, n, False, listed=True)
        gathers += got.gather
        fa, fb = _fields(got), _fields(want)
        for key in fa:
            x, y = fa[key], fb[key]
            assert torch.equal(x, y) if torch.is_tensor(x) else x == y, key
    assert gathers >= len(patterns) // 2
