"""U's softmax is shift-invariant: rows of scores shifted anywhere within the score bound.

U subtracts each row's maximum score (one SelectMax head) before exp, so a row whose scores
all sit near -695 (where exp underflows against any fixed offset) or near +9,000 is simulated
as exactly as a row near 0. The oracle is plain-torch attention (``simulator.reference``, a
max-subtracting softmax in float64) and ``torch.nn.MultiheadAttention``.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch

from attnsim.simulator import spec, universal, verify
from attnsim.simulator.reference import layer_norm, reference, scores

F64 = torch.float64
SHIFT = 1.0e4  # float64: rows shifted anywhere in [-1e4, 1e4]
TOL_F64 = 1e-9
RELU_TOL = 1e-5


@functools.cache
def build(n, d, h, **kw):
    # shifted rows are given merged (MergedAttention): the scalar layout reads those
    return universal.build(n, d, h, layout="scalar", **kw)


def repro(key_bias: float, *, d: int = 4, n: int = 3, causal: bool = False, seed: int = 0):
    """The issue's target: zero W_Q/W_K, query bias e_0, key bias key_bias e_0: every score
    is key_bias / 2 (scale 1/sqrt(4))."""
    g = torch.Generator().manual_seed(seed)
    bq, bk = torch.zeros(1, d, dtype=F64), torch.zeros(1, d, dtype=F64)
    bq[0, 0], bk[0, 0] = 1.0, key_bias
    target = spec.AttentionSpec(
        W_Q=torch.zeros(1, d, d, dtype=F64),
        W_K=torch.zeros(1, d, d, dtype=F64),
        W_V=torch.randn(1, d, d, generator=g, dtype=F64),
        b_Q=bq,
        b_K=bk,
        b_V=torch.randn(1, d, generator=g, dtype=F64),
        causal=causal,
    )
    return target, torch.randn(n, d, generator=g, dtype=F64)


def shifted(rng: np.random.Generator, n: int, d: int, h: int, *, causal: bool, bound: float):
    """A random target (scores up to 20 before the shift) whose every row of scores is
    shifted by its own amount, all within ``bound`` (``verify.shift_rows``)."""
    seed = int(rng.integers(1 << 31))
    base = spec.random_attention(h, d, seed=seed, causal=causal, bias=True)
    X = torch.tensor(np.random.default_rng(seed).standard_normal((n, d)), dtype=F64)
    base = spec.with_logit_scale(base, X, float(rng.uniform(0.5, 20.0))).merged()
    target = verify.shift_rows(rng, base, X, bound)
    S = scores(target, X)
    assert float(S.abs().max()) <= bound
    return target, X


# -- the repro -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"attention": "softmax"},
        {"maps": "relu", "logit_bound": 12.0, "map_tolerance": RELU_TOL},
        {"dtype": torch.float32},
    ],
    ids=["native", "softmax", "relu", "float32"],
)
@pytest.mark.parametrize("key_bias", [-1390.0, -1300.0, 1390.0])
def test_rows_of_large_scores_are_exact(kw, key_bias):
    U = build(3, 4, 1, **kw)
    for causal in (False, True):
        target, X = repro(key_bias, causal=causal)
        got, want = U.simulate(target, X), reference(target, X)
        err = verify.relative_error(got, want)
        if kw.get("maps") == "relu":  # every score equal: each exp is e^0 = 1, certified
            assert bool(((got - want).abs() <= U.error_bound(target, X)).all())
            assert err <= 10 * RELU_TOL
        elif kw.get("dtype") == torch.float32:
            assert err <= 1e-6
        else:
            assert err <= 1e-14


def test_the_repro_matches_torch_multihead_attention():
    """The same -695 rows as a torch module (the bias of the key projection)."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(4, 1, batch_first=True, dtype=F64).eval()
    with torch.no_grad():
        mha.in_proj_weight[:8].zero_()  # W_Q and W_K
        mha.in_proj_bias[:8].zero_()
        mha.in_proj_bias[0] = 1.0  # query bias e_0
        mha.in_proj_bias[4] = -1390.0  # key bias -1390 e_0: scores -695
    X = torch.randn(3, 4, dtype=F64)
    with torch.no_grad():
        want = mha(X[None], X[None], X[None], need_weights=False)[0][0]
    for kw in ({}, {"attention": "softmax"}):
        got = build(3, 4, 1, **kw).simulate(mha, X)
        assert verify.relative_error(got, want) <= 1e-14


# -- random per-row shifts -----------------------------------------------------------------------


@pytest.mark.parametrize("sizes", [(2, 2, 1), (3, 4, 2), (4, 4, 2)])
@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_random_shifts_within_the_score_bound(sizes, attention):
    U = build(*sizes, attention=attention)
    rng = np.random.default_rng(sum(sizes) + len(attention))
    worst = 0.0
    for k in range(6):
        n = int(rng.integers(1, sizes[0] + 1))
        h = int(rng.integers(1, sizes[2] + 1))
        d = h * int(rng.integers(1, sizes[1] // h + 1))
        target, X = shifted(rng, n, d, h, causal=bool(k % 2), bound=SHIFT)
        got, want = U.simulate(target, X), reference(target, X)
        worst = max(worst, verify.relative_error(got, want))
        # the entrywise bound counts the rounding of large scores too
        assert bool(((got - want).abs() <= U.error_bound(target, X)).all())
    assert worst <= TOL_F64


@pytest.mark.parametrize("sizes", [(2, 2, 1), (3, 4, 2)])
def test_random_shifts_with_relu_maps_stay_within_the_certified_bound(sizes):
    U = build(*sizes, maps="relu", logit_bound=12.0, map_tolerance=RELU_TOL)
    rng = np.random.default_rng(7)
    for k in range(6):
        n, h = int(rng.integers(1, sizes[0] + 1)), sizes[2]
        target, X = shifted(rng, n, sizes[1], h, causal=bool(k % 2), bound=SHIFT)
        got, want = U.simulate(target, X), reference(target, X)
        assert bool(((got - want).abs() <= U.error_bound(target, X)).all())
        assert verify.relative_error(got, want) <= 10 * RELU_TOL


def test_float32_shifts_up_to_its_score_bound():
    """float32 U takes scores within +-1,000: a score's own rounding (|s| 2^-24) is then the
    error of its exponential, about 1e-4 relative at the bound."""
    U = build(3, 4, 2, dtype=torch.float32)
    assert U.score_bound == 1e3
    rng = np.random.default_rng(3)
    worst = 0.0
    for k in range(6):
        target, X = shifted(rng, 3, 4, 2, causal=bool(k % 2), bound=U.score_bound)
        got, want = U.simulate(target, X), reference(target, X)
        worst = max(worst, verify.relative_error(got, want))
    assert worst <= 1e-3


@pytest.mark.parametrize("dtype, bound", [(F64, 1e4), (torch.float32, 1e3)])
def test_scores_beyond_the_score_bound_are_refused(dtype, bound):
    U = build(3, 4, 1, dtype=dtype)
    target, X = repro(-2.0 * bound * 1.5)  # every score -1.5 * bound
    with pytest.raises(
        ValueError,
        match=rf"score of query row 0 and key row 0 in head 0 is {-1.5 * bound:g}, beyond "
        rf"\+-{bound:g}, the score bound this U was built for .* larger score_bound",
    ):
        U.simulate(target, X)
    # a larger build bound takes it
    wide = universal.build(3, 4, 1, dtype=dtype, score_bound=2 * bound, layout="scalar")
    got, want = wide.simulate(target, X), reference(target, X)
    assert verify.relative_error(got, want) <= (1e-12 if dtype == F64 else 1e-5)


def test_encoder_u_with_shifted_attention_rows():
    U = build(3, 4, 2, layer="encoder")
    rng = np.random.default_rng(11)
    for k, norm_first in enumerate((False, True)):
        layer = spec.random_encoder_layer(2, 4, 6, seed=k, norm_first=norm_first)
        X = torch.tensor(rng.standard_normal((3, 4)), dtype=F64)
        # the attention reads LN(X) in pre-norm layers: shift the rows of that input
        a = X if not norm_first else layer_norm(layer.norm1, X)
        attn = verify.shift_rows(rng, layer.attention.merged(), a, SHIFT)
        target = dataclasses.replace(layer, attention=attn)
        got, want = U.simulate(target, X), reference(target, X)
        assert verify.relative_error(got, want) <= TOL_F64


@pytest.mark.slow
@pytest.mark.parametrize(
    "kw",
    [{}, {"attention": "softmax"}, {"dtype": torch.float32}],
    ids=["hard", "softmax", "float32"],
)
def test_shift_sweep_at_8_8_4(kw):
    U = build(8, 8, 4, **kw)
    rng = np.random.default_rng(2024)
    bound = U.score_bound
    worst = 0.0
    for k in range(100):
        n = int(rng.integers(1, 9))
        h = int(rng.integers(1, 5))
        d = h * int(rng.integers(1, 8 // h + 1))
        target, X = shifted(rng, n, d, h, causal=bool(k % 2), bound=bound)
        got, want = U.simulate(target, X), reference(target, X)
        worst = max(worst, verify.relative_error(got, want))
    assert worst <= (TOL_F64 if kw.get("dtype") is None else 1e-3)


@pytest.mark.slow
def test_shift_sweep_with_relu_maps_at_4_4_2():
    U = build(4, 4, 2, maps="relu", logit_bound=12.0, map_tolerance=RELU_TOL)
    rng = np.random.default_rng(5)
    for k in range(100):
        n = int(rng.integers(1, 5))
        target, X = shifted(rng, n, 4, 2, causal=bool(k % 2), bound=SHIFT)
        got, want = U.simulate(target, X), reference(target, X)
        assert bool(((got - want).abs() <= U.error_bound(target, X)).all())
