"""The universal simulator U against plain-torch attention (the oracle) and torch modules."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from attnsim.simulator import codec, spec, universal
from attnsim.simulator.layout import Layout
from attnsim.simulator.reference import reference


@functools.cache
def built(n: int, d: int, h: int, attention: str = "hard", dtype=torch.float64):
    # the paper's scalar layout (merged targets); tests/test_simulator_vector.py has the other
    return universal.build(n, d, h, attention=attention, dtype=dtype, layout="scalar")


def rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    scale = want.abs().max().clamp(min=1e-300)
    return float((got - want).abs().max() / scale)


def random_case(rng: np.random.Generator, max_n: int, max_d: int, max_h: int, logits: float):
    h = int(rng.integers(1, max_h + 1))
    d = int(rng.integers(1, max_d // h + 1)) * h
    n = int(rng.integers(1, max_n + 1))
    X = torch.tensor(rng.standard_normal((n, d)), dtype=torch.float64)
    target = spec.random_attention(
        h, d, seed=int(rng.integers(1 << 30)), causal=bool(rng.integers(2)), bias=True
    )
    target = spec.with_logit_scale(target, X, logits)
    return target, X


@pytest.mark.parametrize("sizes", [(2, 2, 1), (3, 4, 2), (4, 4, 4)])
def test_random_targets_match_reference(sizes):
    U = built(*sizes)
    rng = np.random.default_rng(sum(sizes))
    worst = 0.0
    for _ in range(25):
        target, X = random_case(rng, *sizes, logits=float(rng.uniform(0.1, 50)))
        worst = max(worst, rel_error(U.simulate(target, X), reference(target, X)))
    assert worst <= 1e-9


def test_one_build_serves_every_smaller_size():
    U = built(4, 4, 2)
    rng = np.random.default_rng(7)
    for n in range(1, 5):
        for d in range(1, 5):
            for h in (1, 2):
                if d % h:
                    continue
                X = torch.tensor(rng.standard_normal((n, d)), dtype=torch.float64)
                target = spec.random_attention(h, d, seed=n * 100 + d * 10 + h)
                assert rel_error(U.simulate(target, X), reference(target, X)) <= 1e-9, (n, d, h)


def test_simulates_torch_multihead_attention_module():
    U = built(4, 4, 2)
    torch.manual_seed(0)
    for batch_first in (True, False):
        m = torch.nn.MultiheadAttention(4, 2, batch_first=batch_first, dtype=torch.float64).eval()
        X = torch.randn(3, 4, dtype=torch.float64)
        with torch.no_grad():
            xin = X[None] if batch_first else X[:, None]
            want = m(xin, xin, xin, need_weights=False)[0]
        want = want[0] if batch_first else want[:, 0]
        assert rel_error(U.simulate(m, X), want) <= 1e-9
        # causal: torch takes the mask at call time; U takes causal=True
        mask = torch.ones(3, 3, dtype=torch.bool).triu(1)
        with torch.no_grad():
            want = m(xin, xin, xin, attn_mask=mask, need_weights=False)[0]
        want = want[0] if batch_first else want[:, 0]
        assert rel_error(U.simulate(m, X, causal=True), want) <= 1e-9


def test_weights_do_not_depend_on_the_target():
    U = built(3, 4, 2)
    before = {k: v.clone() for k, v in U.model.model.state_dict().items()}
    rng = np.random.default_rng(3)
    for _ in range(3):
        target, X = random_case(rng, 3, 4, 2, logits=5.0)
        U.simulate(target, X)
    after = U.model.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    again = universal.build(3, 4, 2, layout="scalar")
    assert all(torch.equal(before[k], again.model.model.state_dict()[k]) for k in before)


def test_depth_is_constant_in_n_and_d():
    depths = set()
    for sizes in [(2, 2, 1), (3, 5, 1), (4, 4, 2), (6, 3, 3)]:
        r = built(*sizes).report()
        depths.add((r.layers, r.attention_layers))
    assert depths == {(6, 5)}  # layer 3 holds only the row-maximum head


def test_interpreter_runs_the_same_program():
    U = built(3, 4, 2)
    rng = np.random.default_rng(11)
    target, X = random_case(rng, 3, 4, 2, logits=10.0)
    want = reference(target, X)
    assert rel_error(U.interpret(target, X), want) <= 1e-9
    assert rel_error(U.simulate(target, X), U.interpret(target, X)) <= 1e-9


def test_softmax_mode_and_float32():
    rng = np.random.default_rng(5)
    soft = built(3, 4, 2, attention="softmax")
    f32 = built(3, 4, 2, dtype=torch.float32)
    for _ in range(5):
        target, X = random_case(rng, 3, 4, 2, logits=20.0)
        want = reference(target, X)
        assert rel_error(soft.simulate(target, X), want) <= 1e-9
        assert rel_error(f32.simulate(target, X), want) <= 1e-4


def test_batch_equals_single():
    U = built(3, 4, 2)
    rng = np.random.default_rng(9)
    items = [random_case(rng, 3, 4, 2, logits=3.0) for _ in range(3)]
    batch = U.simulate_batch(items)
    for (target, X), got in zip(items, batch):
        assert torch.equal(got, U.simulate(target, X))


def test_bad_targets_get_clear_errors():
    U = built(2, 2, 1)
    good = spec.random_attention(1, 2, seed=0)
    with pytest.raises(ValueError, match="at most 1 heads and d <= 2"):
        U.simulate(spec.random_attention(1, 3, seed=0), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="at most 1 heads"):
        U.simulate(spec.random_attention(2, 2, seed=0), torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"n=3 rows, but this U was built for 1 <= n <= 2"):
        U.simulate(good, torch.zeros(3, 2))
    with pytest.raises(ValueError, match=r"X\[0, 1\] = nan is not finite"):
        U.simulate(good, torch.tensor([[0.0, float("nan")]]))
    with pytest.raises(ValueError, match=r"X must have shape \(n, 2\)"):
        U.simulate(good, torch.zeros(2, 3))
    with pytest.raises(TypeError, match="simulate expects an AttentionSpec"):
        U.simulate("not a target", torch.zeros(2, 2))
    with pytest.raises(ValueError, match="W_Q has 4 non-finite entries"):
        spec.AttentionSpec(
            W_Q=torch.full((1, 2, 2), float("inf")),
            W_K=torch.zeros(1, 2, 2),
            W_V=torch.zeros(1, 2, 2),
        )
    m = torch.nn.MultiheadAttention(2, 1, dropout=0.5)
    m.train()
    with pytest.raises(ValueError, match="dropout"):
        U.simulate(m, torch.zeros(2, 2))


def test_layout_round_trip_and_positions_are_distinct():
    lay = Layout(3, 4, 2)
    seen = set()
    for i in range(3):
        for a in range(4):
            seen.add(lay.xpos(i, a))
    for h in range(2):
        for a in range(5):
            for b in range(5):
                seen.add(lay.apos(h, a, b))
            for c in range(4):
                seen.add(lay.wpos(h, a, c))
    assert len(seen) == 3 * 4 + 2 * 25 + 2 * 20
    assert max(seen) < lay.input_length <= lay.length
    A = torch.arange(2 * 3 * 3, dtype=torch.float64).reshape(2, 3, 3)  # [h, d+1, d+1]
    W = torch.arange(2 * 3 * 2, dtype=torch.float64).reshape(2, 3, 2)  # [h, d+1, d]
    X = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    head = spec.MergedAttention(
        A=A[:, :2, :2],
        W_OV=W[:, :2],
        a_query=A[:, :2, 2],
        a_key=A[:, 2, :2],
        a_const=A[:, 2, 2],
        b_OV=W[:, 2],
        b_O=[7.0, 8.0],
        causal=True,
    )
    seq = codec.pack(lay, codec.Case(head, X))
    assert seq[lay.xpos(1, 1)] == 4.0 and seq[lay.xpos(2, 0)] == 0.0
    assert seq[lay.apos(1, 2, 2)] == 0.0  # real feature 2 does not exist for d = 2
    assert seq[lay.apos(1, 4, 4)] == A[1, 2, 2]  # the constant feature moves to index D
    assert seq[lay.wpos(0, 4, 1)] == W[0, 2, 1]
    assert seq[lay.bpos(1)] == 8.0 and seq[lay.flagpos()] == 1.0
    assert seq[lay.padpos(0) : lay.padpos(0) + 3].tolist() == [0.0, 0.0, 1.0]


def test_cli_simulate_and_verify(capsys):
    import json

    from attnsim.cli import main

    assert main(["simulate", "--max-n", "3", "--max-d", "2", "--seed", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = torch.tensor(out["reference"])
    assert want.shape == (3, 2)
    assert out["relative_error"] <= 1e-9
    assert torch.allclose(torch.tensor(out["simulated"]), want, rtol=1e-9, atol=1e-12)
    assert main(["verify", "--max-n", "2", "--max-d", "2", "--targets", "5", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["count"] == 5 and res["failures"] == [] and res["max_error"] <= 1e-9
    assert main(["simulate", "--max-n", "0"]) == 2
    assert "--max-n must be >= 1" in capsys.readouterr().err


def test_demo_runs_and_agrees(capsys):
    from attnsim.cli import main

    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "max relative error vs torch" in out and "failures 0" in out


@pytest.mark.slow
def test_one_8_8_4_build_serves_every_n_and_d_up_to_8():
    _check_8_8_4(range(1, 9))


def test_one_8_8_4_build_serves_smaller_sizes_sample():
    _check_8_8_4((1, 3, 8))


def _check_8_8_4(sizes):
    U = built(8, 8, 4)
    rng = np.random.default_rng(84)
    items = []
    for n in sizes:
        for d in sizes:
            h = max(k for k in (1, 2, 4) if d % k == 0)  # the most heads this d allows
            X = torch.tensor(rng.standard_normal((n, d)), dtype=torch.float64)
            target = spec.random_attention(h, d, seed=n * 10 + d, causal=bool((n + d) % 2))
            items.append((spec.with_logit_scale(target, X, float(rng.uniform(1, 50))), X))
    worst = 0.0
    for start in range(0, len(items), 8):
        chunk = items[start : start + 8]
        for (target, X), got in zip(chunk, U.simulate_batch(chunk)):
            worst = max(worst, rel_error(got, reference(target, X)))
    assert worst <= 1e-9
