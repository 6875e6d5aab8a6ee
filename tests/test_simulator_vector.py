"""U in the vector layout: one vector per position, the target's raw parameters.

Oracles: the plain-torch reference (:mod:`attnsim.simulator.reference`), the torch modules
themselves, and the RASP interpreter on U's program.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnsim.simulator import sampling, stack, universal, verify
from attnsim.simulator import spec as S
from attnsim.simulator.config import LayoutKind, SimulatorConfig
from attnsim.simulator.layout import Layout
from attnsim.simulator.reference import reference
from attnsim.simulator.vector_layout import VectorLayout

F64 = torch.float64


@pytest.fixture(scope="module")
def attn_U():
    return universal.build(3, 4, 2, layout="vector")


@pytest.fixture(scope="module")
def enc_U():
    return universal.build(3, 4, 2, layout="vector", layer="encoder", max_ff=6)


def _err(got, want):
    return float((got - want).abs().max() / want.abs().max())


def test_attention_targets_match_the_reference(attn_U):
    result = verify.verify(attn_U, targets=40, seed=5, progress=False)
    assert result.failures == [] and result.max_error <= 1e-9


def test_encoder_targets_match_the_reference(enc_U):
    result = verify.verify(enc_U, targets=40, seed=6, progress=False)
    assert result.failures == [] and result.max_error <= 1e-9
    # every activation and both norm placements were drawn
    rng = np.random.default_rng(6)
    drawn = [sampling.random_target(rng, 3, 4, 2, 50.0, 6)[0] for _ in range(40)]
    assert {t.ffn.activation.value for t in drawn} == {"relu", "gelu", "gelu_tanh", "maxmin"}
    assert {t.norm_first for t in drawn} == {True, False}


def test_torch_modules(attn_U, enc_U):
    torch.manual_seed(0)
    X = torch.randn(3, 4, dtype=F64)
    mha = torch.nn.MultiheadAttention(4, 2, batch_first=True, dtype=F64).eval()
    mask = torch.triu(torch.ones(3, 3, dtype=torch.bool), 1)
    with torch.no_grad():
        want = mha(X[None], X[None], X[None], need_weights=False)[0][0]
        want_causal = mha(X[None], X[None], X[None], attn_mask=mask, need_weights=False)[0][0]
    assert _err(attn_U.simulate(mha, X), want) <= 1e-12
    assert _err(attn_U.simulate(mha, X, causal=True), want_causal) <= 1e-12
    for activation, norm_first in (("relu", False), ("gelu", True)):
        layer = torch.nn.TransformerEncoderLayer(
            4, 2, 6, dropout=0.0, activation=activation, norm_first=norm_first,
            batch_first=True, dtype=F64,
        ).eval()  # fmt: skip
        with torch.no_grad():
            want = layer(X[None])[0]
        assert _err(enc_U.simulate(layer, X), want) <= 1e-12


def test_encoding_copies_torch_parameters(attn_U, enc_U):
    """Every value U reads is an entry of X or of one of T's parameters, or a 0/1 flag; the
    weight rows sit as torch stores them, each bias beside its row."""
    torch.manual_seed(1)
    X = torch.randn(2, 4, dtype=F64)
    mha = torch.nn.MultiheadAttention(4, 2, batch_first=True, dtype=F64)
    tok = attn_U.encode(mha, X)
    lay = attn_U.layout
    allowed = {0.0, 1.0}  # flags
    for t in (X, mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias):
        allowed |= set(t.detach().flatten().tolist())
    assert set(tok.flatten().tolist()) <= allowed
    W, b = mha.in_proj_weight.detach(), mha.in_proj_bias.detach()
    for t in range(3):
        for r in range(4):
            row = tok[lay.wpos(t, r)]
            assert torch.equal(row[:4], W[4 * t + r]) and row[lay.B] == b[4 * t + r]
    for k in range(4):
        row = tok[lay.opos(k)]
        assert torch.equal(row[:4], mha.out_proj.weight.detach()[k])
        assert row[lay.B] == mha.out_proj.bias.detach()[k]
    assert torch.equal(tok[lay.xpos(0) : lay.xpos(2), :4], X)

    layer = torch.nn.TransformerEncoderLayer(4, 2, 6, dropout=0.0, batch_first=True, dtype=F64)
    tok = enc_U.encode(layer, X)
    lay = enc_U.layout
    params = {0.0, 1.0, layer.norm1.eps}
    for p in layer.parameters():
        params |= set(p.detach().flatten().tolist())
    params |= set(X.flatten().tolist())
    assert set(tok.flatten().tolist()) <= params
    for m in range(6):
        assert torch.equal(tok[lay.w1pos(m), :4], layer.linear1.weight.detach()[m])
    for k in range(4):
        assert torch.equal(tok[lay.w2pos(k), :6], layer.linear2.weight.detach()[k])


def test_interpreter_plan_and_dense_agree(attn_U, enc_U):
    for U, kind in ((attn_U, "attention"), (enc_U, "encoder")):
        rng = np.random.default_rng(2)
        T, X, _ = sampling.random_target(rng, 3, 4, 2, 20.0, U.layout.F)
        got = U.simulate(T, X)
        assert _err(U.interpret(T, X), got) <= 1e-12, kind
        U.model.executor = "dense"
        try:
            assert _err(U.simulate(T, X), got) <= 1e-12, kind
        finally:
            U.model.executor = "plan"


def test_relu_maps_within_certified_bounds():
    U = universal.build(3, 4, 2, layout="vector", maps="relu", map_tolerance=1e-5)
    result = verify.verify(U, targets=12, seed=3, progress=False)
    assert result.failures == [] and result.max_bound_ratio <= 1.0


def test_float32():
    U = universal.build(3, 4, 2, layout="vector", dtype=torch.float32)
    result = verify.verify(U, targets=12, seed=4, progress=False)
    assert result.failures == [] and result.max_error <= 1e-4


def test_save_and_load(attn_U, tmp_path):
    V = universal.UniversalSimulator.load(attn_U.save(tmp_path / "u"))
    assert V.config == attn_U.config and V.config.layout_kind is LayoutKind.VECTOR
    T = sampling.random_attention(2, 4, seed=0)
    X = torch.randn(3, 4, dtype=F64)
    assert torch.equal(V.simulate(T, X), attn_U.simulate(T, X))
    meta = json.loads((tmp_path / "u" / "simulator.json").read_text())
    assert meta["layout"]["width"] == attn_U.layout.width


def test_old_config_without_layout_reads_as_scalar():
    data = SimulatorConfig(2, 2).to_json()
    del data["layout_kind"]
    assert SimulatorConfig.from_json(data).layout_kind is LayoutKind.SCALAR


def test_bad_inputs(attn_U, enc_U):
    X = torch.zeros(3, 4, dtype=F64)
    T = sampling.random_attention(2, 4, seed=0)
    with pytest.raises(ValueError, match="reads the attention's factors"):
        attn_U.simulate(T.merged(), X)
    with pytest.raises(ValueError, match="at most 2 heads"):
        attn_U.simulate(sampling.random_attention(4, 4, seed=0), X)
    with pytest.raises(ValueError, match="d <= 4"):
        attn_U.simulate(sampling.random_attention(1, 6, seed=0), torch.zeros(3, 6, dtype=F64))
    wide = S.AttentionSpec(
        W_Q=torch.ones(2, 4, 3), W_K=torch.ones(2, 4, 3), W_V=torch.ones(2, 4, 3),
        W_O=torch.ones(2, 3, 4),
    )  # fmt: skip
    with pytest.raises(ValueError, match="heads together at most 4 wide"):
        attn_U.simulate(wide, X)
    with pytest.raises(ValueError):
        attn_U.simulate(T, torch.zeros(4, 4, dtype=F64))  # n > N
    with pytest.raises(ValueError):
        attn_U.simulate(T, torch.full((3, 4), float("nan"), dtype=F64))
    with pytest.raises(ValueError, match="build one with layer='encoder'"):
        attn_U.simulate(sampling.random_encoder_layer(1, 4, 4, seed=0), X)
    with pytest.raises(ValueError, match="this U simulates encoder layers"):
        enc_U.simulate(T, X)
    with pytest.raises(TypeError, match="simulate expects"):
        attn_U.simulate("attention", X)
    with pytest.raises(ValueError, match="layout must be 'scalar' or 'vector'"):
        universal.build(2, 2, layout="diagonal")
    with pytest.raises(TypeError, match="not both"):
        universal.build(2, 2, layout="vector", layout_kind="vector")


def test_scores_beyond_the_bound_are_refused():
    U = universal.build(2, 2, 1, layout="vector", score_bound=10.0)
    T = S.AttentionSpec(W_Q=10 * torch.eye(2)[None], W_K=10 * torch.eye(2)[None],
                        W_V=torch.eye(2)[None])  # fmt: skip
    with pytest.raises(ValueError, match="score bound"):
        U.simulate(T, torch.ones(2, 2, dtype=F64))


@pytest.mark.parametrize(
    "N, D, H, F", [(2, 2, 1, 0), (4, 8, 2, 0), (3, 4, 2, 6), (12, 384, 12, 1536)]
)
def test_layout_growth_law(N, D, H, F):
    lay = VectorLayout(N, D, H, F)
    inputs = 1 + N + (1 + 4 * D + 2 * H + (6 + F + D if F else 0))  # one layer's block
    assert lay.length == max(inputs, 3 * N * D, N * N * H, N * F)
    assert lay.width == max(D, F, 10) + 1
    # every scratch role's positions are distinct and inside the sequence
    for role, c in lay.coords.items():
        rows = c[c[:, 0] >= 0]
        assert len({tuple(r) for r in rows.tolist()}) == len(rows), role
    if F:  # the scalar layout holds every parameter in a position of its own
        assert lay.length < Layout(N, D, H, F).length or D < 8


# -- stacks of encoder layers (n_layers) ------------------------------------------------------


@pytest.fixture(scope="module")
def stack_U():
    return universal.build(3, 4, 2, layer="encoder", max_ff=6, n_layers=3)


def test_random_stacks_match_the_reference(stack_U):
    result = verify.verify(stack_U, targets=12, seed=8, progress=False)
    assert result.failures == [] and result.max_error <= 1e-9


def test_torch_transformer_encoder(stack_U):
    torch.manual_seed(3)
    layer = torch.nn.TransformerEncoderLayer(4, 2, 6, dropout=0.0, batch_first=True, dtype=F64)
    for n_layers in (3, 2):  # a shorter stack: the layers it lacks are identity layers
        enc = torch.nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False).eval()
        X = torch.randn(3, 4, dtype=F64)
        mask = torch.nn.Transformer.generate_square_subsequent_mask(3, dtype=F64)
        with torch.no_grad():
            want = enc(X[None])[0]
            want_causal = enc(X[None], mask=mask, is_causal=True)[0]
        assert _err(stack_U.simulate(enc, X), want) <= 1e-12
        assert _err(stack_U.simulate(enc, X, causal=True), want_causal) <= 1e-12
    with torch.no_grad():  # one layer alone
        assert _err(stack_U.simulate(layer, X), layer.eval()(X[None])[0]) <= 1e-12


def test_stack_errors(stack_U):
    X = torch.zeros(3, 4, dtype=F64)
    layer = sampling.random_encoder_layer(2, 4, 6, seed=0)
    with pytest.raises(ValueError, match="at most 3; build U with n_layers=4"):
        stack_U.simulate(stack.EncoderStackSpec((layer,) * 4), X)
    with pytest.raises(ValueError, match="share one model width"):
        stack.EncoderStackSpec((layer, sampling.random_encoder_layer(1, 2, 4, seed=0)))
    with pytest.raises(TypeError, match="non-empty list of EncoderLayerSpec"):
        stack.EncoderStackSpec(())
    normed = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(4, 2, 6, dropout=0.0, batch_first=True),
        2,
        norm=torch.nn.LayerNorm(4),
        enable_nested_tensor=False,
    )
    with pytest.raises(NotImplementedError, match="final norm"):
        stack_U.simulate(normed, X)
    for one in (universal.build(3, 4, 2, layer="encoder", max_ff=6, layout="scalar"), None):
        one = one or universal.build(3, 4, 2)  # a scalar encoder U, a vector attention U
        with pytest.raises(ValueError, match="n_layers"):
            one.simulate(stack.EncoderStackSpec((layer, layer)), X)
        with pytest.raises((ValueError, NotImplementedError), match="n_layers|final norm"):
            one.simulate(normed, X)
    with pytest.raises(ValueError, match="needs layer='encoder' and layout='vector'"):
        universal.build(2, 2, 1, n_layers=2)
    with pytest.raises(ValueError, match="needs layer='encoder' and layout='vector'"):
        universal.build(2, 2, 1, layer="encoder", layout="scalar", n_layers=2)
    with pytest.raises(ValueError, match="n_layers must be a positive int"):
        universal.build(2, 2, 1, layer="encoder", n_layers=0)


def test_stack_save_load_and_sizes(stack_U, tmp_path):
    V = universal.UniversalSimulator.load(stack_U.save(tmp_path / "s"))
    assert V.config.n_layers == 3 and V.layout.layers == 3
    rng = np.random.default_rng(1)
    S_, X, _ = stack.random_stack(rng, 3, 4, 2, 10.0, 6, layers=3)
    assert torch.equal(V.simulate(S_, X), stack_U.simulate(S_, X))
    one = universal.build(3, 4, 2, layer="encoder", max_ff=6)
    # the depth grows with the layers, the sequence by one block of parameters per layer
    assert stack_U.report().layers > 2 * one.report().layers
    assert stack_U.layout.length - one.layout.length == 2 * one.layout.block
    # each layer stores only its own heads and bilinear units
    cfg = stack_U.model.config
    assert cfg.head_shapes is not None and cfg.bilinear_widths is not None
    stored = sum(b.attn.W_Q.numel() for b in stack_U.model.model.blocks)
    assert stored < cfg.n_layers * cfg.n_heads * cfg.d_model * cfg.d_head / 5


@pytest.mark.parametrize("layout", ["scalar", "vector"])
def test_a_wide_feed_forward_sets_the_sequence_length(layout):
    """N F (the hidden units' scratch) can be the longest role: the sequence holds it."""
    U = universal.build(10, 1, 1, layer="encoder", max_ff=100, layout=layout)
    assert U.layout.length >= 10 * 100
    T = sampling.random_encoder_layer(1, 1, 100, seed=0)
    X = torch.randn(10, 1, dtype=F64, generator=torch.Generator().manual_seed(0))
    assert _err(U.simulate(T, X), reference(T, X)) <= 1e-9


def test_column_streams_are_the_full_streams_columns(attn_U):
    """U's checks keep only the directions they read: the same values as the whole stream."""
    from attnsim.model.transformer import Columns

    T = sampling.random_attention(2, 4, seed=3)
    X = torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(3))
    ids, vals = attn_U.model_inputs(attn_U.encode(T, X)[None])
    stages = sorted({g.stage for g in attn_U.model.guards})
    cols = torch.tensor([0, 3, 5])
    full = {s: None for s in stages}
    part = {s: Columns(cols) for s in stages}
    with torch.no_grad():
        attn_U.model.model(ids, vals, streams=full)
        attn_U.model.model(ids, vals, streams=part)
    assert stages and all(torch.equal(full[s][..., cols], part[s]) for s in stages)


def test_own_scales_and_narrow_heads(attn_U):
    """A spec's own score scale (an entry of the sequence) and heads narrower than d (their
    concatenation shorter than d) give the reference's output."""
    g = torch.Generator().manual_seed(9)
    X = torch.randn(3, 4, dtype=F64, generator=g)
    for h, dh, scale in ((2, 1, 0.7), (1, 3, None), (2, 2, 2.5)):
        T = S.AttentionSpec(
            W_Q=torch.randn(h, 4, dh, generator=g, dtype=F64),
            W_K=torch.randn(h, 4, dh, generator=g, dtype=F64),
            W_V=torch.randn(h, 4, dh, generator=g, dtype=F64),
            W_O=torch.randn(h, dh, 4, generator=g, dtype=F64),
            b_Q=torch.randn(h, dh, generator=g, dtype=F64),
            b_O=torch.randn(4, generator=g, dtype=F64),
            scale=scale,
        )
        assert _err(attn_U.simulate(T, X), reference(T, X)) <= 1e-12, (h, dh, scale)
