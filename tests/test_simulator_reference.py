"""The oracle against torch modules (within 1e-12 in float64) and its algebraic properties."""

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn import functional as F

from attnsim.simulator import reference as ref
from attnsim.simulator import spec

TOL = {"rtol": 1e-12, "atol": 1e-12}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny float64 matrices: intra-op threads only add overhead (restored afterwards)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


HEADS_AND_WIDTHS = [(h, d) for h in range(1, 5) for d in range(1, 9) if d % h == 0]
SETTINGS = settings(max_examples=30, deadline=None)


def _x(n: int, d: int, seed: int, std: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, dtype=torch.float64, generator=g) * std


def _blocked(n: int) -> torch.Tensor:
    """torch's boolean causal attn_mask: True where a key is blocked."""
    return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)


def _mha(d: int, h: int, *, bias: bool, batch_first: bool, seed: int) -> nn.MultiheadAttention:
    torch.manual_seed(seed)
    m = nn.MultiheadAttention(d, h, bias=bias, batch_first=batch_first, dropout=0.25)
    if bias:  # torch initialises the biases to zero; make them count
        with torch.no_grad():
            m.in_proj_bias.normal_()
            m.out_proj.bias.normal_()
    return m.double().eval()


def _run_mha(m: nn.MultiheadAttention, X: torch.Tensor, mode: str) -> torch.Tensor:
    """Call ``m`` on one batched sequence; mode: "none", "attn_mask" or "is_causal"."""
    Xb = X[None] if m.batch_first else X[:, None]  # [1, n, d] or [n, 1, d]
    kwargs = {}
    if mode != "none":
        kwargs["attn_mask"] = _blocked(X.shape[0])
    if mode == "is_causal":
        kwargs["is_causal"] = True
    Y = m(Xb, Xb, Xb, need_weights=False, **kwargs)[0]
    return Y[0] if m.batch_first else Y[:, 0]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize(("h", "d"), HEADS_AND_WIDTHS)
def test_multihead_attention_matches_torch(h, d, batch_first, bias):
    m = _mha(d, h, bias=bias, batch_first=batch_first, seed=100 * h + d)
    plain, causal = spec.from_torch(m), spec.from_torch(m, causal=True)
    for n in (1, 2, 3, 5, 8):
        X = _x(n, d, seed=n)
        torch.testing.assert_close(ref.reference(plain, X), _run_mha(m, X, "none"), **TOL)
        for mode in ("attn_mask", "is_causal"):
            torch.testing.assert_close(ref.reference(causal, X), _run_mha(m, X, mode), **TOL)
        # the same causal layer through an explicit mask (selector convention: ~attn_mask)
        torch.testing.assert_close(
            ref.reference(plain, X, mask=~_blocked(n)), _run_mha(m, X, "attn_mask"), **TOL
        )


def test_unbatched_multihead_attention_matches_torch():
    m = _mha(6, 3, bias=True, batch_first=False, seed=0)
    X = _x(7, 6, seed=1)
    torch.testing.assert_close(ref.reference(spec.from_torch(m), X), m(X, X, X)[0], **TOL)


@pytest.mark.parametrize("magnitude", [1.0, 10.0, 50.0])
@pytest.mark.parametrize(("h", "d"), [(1, 3), (2, 4), (4, 8)])
def test_large_logits_match_torch(h, d, magnitude):
    """Scale the torch module's query weights so that each head's largest score is 50."""
    m = _mha(d, h, bias=True, batch_first=True, seed=7)
    X = _x(8, d, seed=3)
    for causal in (False, True):
        peak = ref.scores(spec.from_torch(m), X)
        peak = (peak.tril() if causal else peak).abs().amax(dim=(1, 2))  # [h]
        factor = (magnitude / peak).repeat_interleave(d // h)  # one factor per query row
        with torch.no_grad():
            m.in_proj_weight[:d] *= factor[:, None]
            m.in_proj_bias[:d] *= factor
        target = spec.from_torch(m, causal=causal)
        S = ref.scores(target, X)
        S = S.tril() if causal else S
        torch.testing.assert_close(
            S.abs().amax(dim=(1, 2)), torch.full((h,), magnitude, dtype=torch.float64), **TOL
        )
        expected = _run_mha(m, X, "attn_mask" if causal else "none")
        torch.testing.assert_close(ref.reference(target, X), expected, **TOL)


def _run_layer(layer: nn.TransformerEncoderLayer, X: torch.Tensor, **kwargs) -> torch.Tensor:
    batch_first = layer.self_attn.batch_first
    Y = layer(X[None] if batch_first else X[:, None], **kwargs)  # [1, n, d] or [n, 1, d]
    return Y[0] if batch_first else Y[:, 0]


ACTIVATIONS = ["relu", "gelu", F.relu, F.gelu, nn.ReLU(), nn.GELU(), nn.GELU(approximate="tanh")]


@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: getattr(a, "__name__", repr(a)))
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize(("h", "d"), [(1, 1), (1, 3), (2, 2), (2, 6), (3, 6), (4, 8)])
def test_encoder_layer_matches_torch(h, d, norm_first, activation):
    torch.manual_seed(10 * h + d)
    layer = nn.TransformerEncoderLayer(
        d, h, dim_feedforward=2 * d + 1, dropout=0.1, activation=activation,
        norm_first=norm_first, batch_first=bool(d % 2),
    )  # fmt: skip
    with torch.no_grad():  # move the parameters away from torch's init (zero biases, unit gains)
        for p in layer.parameters():
            p.add_(0.3 * torch.randn_like(p))
    layer = layer.double().eval()
    plain, causal = spec.from_torch(layer), spec.from_torch(layer, causal=True)
    for n in (1, 2, 4, 7):
        X = _x(n, d, seed=n, std=2.0)
        torch.testing.assert_close(ref.reference(plain, X), _run_layer(layer, X), **TOL)
        expected = _run_layer(layer, X, src_mask=_blocked(n), is_causal=True)
        torch.testing.assert_close(ref.reference(causal, X), expected, **TOL)
        torch.testing.assert_close(ref.reference(causal.merged(), X), expected, **TOL)


def test_encoder_layer_without_bias_matches_torch():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, bias=False).double().eval()
    X = _x(5, 4, seed=0)
    torch.testing.assert_close(ref.reference(spec.from_torch(layer), X), layer(X), **TOL)


# ------------------------------------------------------------------------------------------
# pieces, against literal values


def test_pieces_on_a_literal_example():
    head = spec.AttentionSpec(
        W_Q=[[[1.0], [0.0]]], W_K=[[[1.0], [1.0]]], W_V=[[[1.0], [2.0]]], W_O=[[[1.0, -1.0]]],
        b_Q=[[1.0]], b_K=[[0.0]], b_V=[[1.0]], b_O=[0.5, 0.0], scale=1.0,
    )  # fmt: skip
    X = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    # q = x0 + 1 = [2, 1], k = x0 + x1 = [1, 1]: S = q k^T
    assert ref.scores(head, X).tolist() == [[[2.0, 2.0], [1.0, 1.0]]]
    assert ref.pattern(head, X).tolist() == [[[0.5, 0.5], [0.5, 0.5]]]
    # v = x0 + 2 x1 + 1 = [2, 3]; mapped by W_O = [1, -1]
    assert ref.values(head, X).tolist() == [[[2.0, -2.0], [3.0, -3.0]]]
    assert ref.reference(head, X).tolist() == [[3.0, -2.5], [3.0, -2.5]]
    causal = dataclasses.replace(head, causal=True)
    assert ref.reference(causal, X).tolist() == [[2.5, -2.0], [3.0, -2.5]]


def test_activations_on_literal_values():
    H = torch.tensor([[-1.0, 0.0, 2.0, 1.0]], dtype=torch.float64)
    assert ref.activation(spec.Activation.RELU, H).tolist() == [[0.0, 0.0, 2.0, 1.0]]
    assert ref.activation(spec.Activation.MAXMIN, H).tolist() == [[0.0, -1.0, 2.0, 1.0]]
    for kind, approximate in [(spec.Activation.GELU, "none"), (spec.Activation.GELU_TANH, "tanh")]:
        torch.testing.assert_close(
            ref.activation(kind, H), F.gelu(H, approximate=approximate), **TOL
        )


def test_layer_norm_matches_torch():
    norm = nn.LayerNorm(5, eps=1e-3).double()
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    got = ref.layer_norm(spec.LayerNormSpec(norm.weight, norm.bias, eps=1e-3), _x(4, 5, seed=0))
    torch.testing.assert_close(got, norm(_x(4, 5, seed=0)), **TOL)
    assert ref.layer_norm(None, _x(2, 3, seed=0)).equal(_x(2, 3, seed=0))


def test_paper_form_is_one_merged_head():
    """The paper's T(X) = softmax(X A X^T) X V (no scale, no W_O, no bias)."""
    A, V, X = _x(3, 3, seed=1), _x(3, 3, seed=2), _x(3, 3, seed=3)
    expected = torch.softmax(X @ A @ X.T, dim=-1) @ (X @ V)
    head = spec.MergedAttention(A=A[None], W_OV=V[None])
    torch.testing.assert_close(ref.reference(head, X), expected, **TOL)
    factored = spec.AttentionSpec(W_Q=A[None], W_K=torch.eye(3)[None], W_V=V[None], scale=1.0)
    torch.testing.assert_close(ref.reference(factored, X), expected, **TOL)


# ------------------------------------------------------------------------------------------
# properties


@st.composite
def targets(draw, causal=None, bias=None):
    h = draw(st.integers(1, 4))
    d = h * draw(st.integers(1, 8 // h))
    n = draw(st.integers(1, 8))
    target = spec.random_attention(
        h, d, seed=draw(st.integers(0, 2**31)),
        bias=draw(st.booleans()) if bias is None else bias,
        causal=draw(st.booleans()) if causal is None else causal,
    )  # fmt: skip
    X = _x(n, d, seed=draw(st.integers(0, 2**31)), std=draw(st.sampled_from([0.5, 1.0, 3.0])))
    if draw(st.booleans()):
        target = spec.with_logit_scale(target, X, draw(st.floats(0.1, 50.0)))
    return target, X


@SETTINGS
@given(targets())
def test_factored_merged_and_augmented_forms_agree(case):
    target, X = case
    merged = target.merged()
    torch.testing.assert_close(ref.scores(merged, X), ref.scores(target, X), **TOL)
    expected = ref.reference(target, X)
    torch.testing.assert_close(ref.reference(merged, X), expected, **TOL)
    A_aug, W_aug = merged.augmented()
    X_aug = torch.cat([X, torch.ones(X.shape[0], 1, dtype=torch.float64)], dim=1)  # [n, d+1]
    S = X_aug @ A_aug @ X_aug.T  # [h, n, n]
    torch.testing.assert_close(S, ref.scores(target, X), **TOL)
    if target.causal:
        S = S.masked_fill(~ref.check_mask(None, X.shape[0], True), float("-inf"))
    Y = (torch.softmax(S, dim=-1) @ (X_aug @ W_aug)).sum(0) + merged.b_O
    torch.testing.assert_close(Y, expected, **TOL)


@SETTINGS
@given(targets(causal=False), st.randoms(use_true_random=False))
def test_non_causal_attention_is_permutation_equivariant(case, rnd):
    target, X = case
    perm = list(range(X.shape[0]))
    rnd.shuffle(perm)
    torch.testing.assert_close(
        ref.reference(target, X[perm]), ref.reference(target, X)[perm], **TOL
    )


@SETTINGS
@given(targets(causal=True), st.data())
def test_causal_attention_only_reads_the_prefix(case, data):
    target, X = case
    k = data.draw(st.integers(1, X.shape[0]))
    torch.testing.assert_close(ref.reference(target, X[:k]), ref.reference(target, X)[:k], **TOL)
    plain = dataclasses.replace(target, causal=False)
    torch.testing.assert_close(
        ref.reference(plain, X, mask=ref.check_mask(None, X.shape[0], True)),
        ref.reference(target, X),
        **TOL,
    )


@SETTINGS
@given(targets())
def test_pattern_rows_are_distributions(case):
    target, X = case
    P = ref.pattern(target, X)
    assert bool((P >= 0).all())
    torch.testing.assert_close(P.sum(-1), torch.ones(P.shape[:2], dtype=torch.float64), **TOL)
    if target.causal:
        assert bool((P.triu(diagonal=1) == 0).all())


@SETTINGS
@given(targets())
def test_heads_add_up(case):
    target, X = case
    total = -(target.n_heads - 1) * target.b_O  # each one-head layer adds b_O once
    for i in range(target.n_heads):
        names = ["W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V"]
        head = dataclasses.replace(target, **{k: getattr(target, k)[i : i + 1] for k in names})
        total = total + ref.reference(head, X)
    torch.testing.assert_close(total, ref.reference(target, X), **TOL)


@SETTINGS
@given(targets(), st.floats(0.01, 50.0))
def test_with_logit_scale_reaches_the_magnitude(case, magnitude):
    target, X = case
    S = ref.scores(spec.with_logit_scale(target, X, magnitude), X)
    S = S.tril() if target.causal else S
    torch.testing.assert_close(
        S.abs().amax(dim=(1, 2)),
        torch.full((target.n_heads,), magnitude, dtype=torch.float64),
        **TOL,
    )
    merged = spec.with_logit_scale(target.merged(), X, magnitude)
    factored = spec.with_logit_scale(target, X, magnitude)
    torch.testing.assert_close(ref.scores(merged, X), ref.scores(factored, X), **TOL)


@SETTINGS
@given(
    st.integers(1, 4), st.integers(1, 2), st.integers(1, 8), st.integers(0, 2**31),
    st.booleans(), st.booleans(),
)  # fmt: skip
def test_random_torch_attention_matches(h, k, n, seed, bias, causal):
    d = h * k
    m = _mha(d, h, bias=bias, batch_first=True, seed=seed)
    X = _x(n, d, seed=seed, std=2.0)
    expected = _run_mha(m, X, "attn_mask" if causal else "none")
    torch.testing.assert_close(ref.reference(spec.from_torch(m, causal=causal), X), expected, **TOL)


@SETTINGS
@given(
    st.integers(1, 3), st.integers(1, 3), st.integers(1, 8), st.integers(0, 2**31),
    st.sampled_from(list(spec.Activation)), st.booleans(), st.booleans(), st.booleans(),
)  # fmt: skip
def test_encoder_layer_merged_agrees_and_norms_are_optional(
    h, k, n, seed, activation, norm_first, layer_norm, causal
):
    d = h * k
    layer = spec.random_encoder_layer(
        h, d, 2 * d, seed=seed, activation=activation, norm_first=norm_first,
        layer_norm=layer_norm, causal=causal,
    )  # fmt: skip
    X = _x(n, d, seed=seed)
    Y = ref.reference(layer, X)
    torch.testing.assert_close(ref.reference(layer.merged(), X), Y, **TOL)
    if not layer_norm:  # then the layer is X + attn(X), then + ffn
        Z = X + ref.attention(layer.attention, X)
        torch.testing.assert_close(Z + ref.feed_forward(layer.ffn, Z), Y, **TOL)


@SETTINGS
@given(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=16).filter(lambda v: len(v) % 2 == 0))
def test_maxmin_sorts_each_pair(hidden):
    H = torch.tensor([hidden], dtype=torch.float64)
    out = ref.activation(spec.Activation.MAXMIN, H)[0].reshape(-1, 2)
    pairs = H[0].reshape(-1, 2)
    assert out[:, 0].tolist() == pairs.max(-1).values.tolist()
    assert out[:, 1].tolist() == pairs.min(-1).values.tolist()


# ------------------------------------------------------------------------------------------
# errors


def _head():
    return spec.random_attention(1, 2, seed=0)


def test_reference_rejects_a_non_spec():
    with pytest.raises(TypeError, match=r"reference needs an AttentionSpec.*got Linear"):
        ref.reference(nn.Linear(2, 2), torch.ones(1, 2))


@pytest.mark.parametrize("shape", [(3,), (3, 3), (0, 2), (1, 2, 2)])
def test_reference_rejects_a_badly_shaped_input(shape):
    with pytest.raises(
        ValueError, match=r"X must have shape \[n, d_model\] = \[n, 2\] with n >= 1"
    ):
        ref.reference(_head(), torch.ones(shape))


def test_reference_rejects_non_finite_input():
    X = torch.ones(2, 2)
    X[1, 0] = float("inf")
    with pytest.raises(
        ValueError, match=r"X has 1 non-finite entry \(first: inf at index \(1, 0\)\)"
    ):
        ref.reference(_head(), X)


def test_reference_rejects_bad_masks():
    X = torch.ones(2, 2)
    with pytest.raises(TypeError, match=r"mask must be boolean .* pass ~attn_mask"):
        ref.reference(_head(), X, mask=torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"mask must have shape \[n, n\] = \(2, 2\), got \(3, 3\)"):
        ref.reference(_head(), X, mask=torch.ones(3, 3, dtype=torch.bool))
    empty_row = torch.tensor([[True, True], [False, False]])
    with pytest.raises(ValueError, match=r"query 1 may attend to no key .* allow at least one key"):
        ref.reference(_head(), X, mask=empty_row)
    upper = torch.tensor([[False, True], [True, True]])  # with causal, query 0 sees nothing
    with pytest.raises(
        ValueError, match=r"query 0 may attend to no key \(mask combined with causal=True\)"
    ):
        ref.reference(dataclasses.replace(_head(), causal=True), X, mask=upper)
