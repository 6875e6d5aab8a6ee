"""U for today's layers (layer="decoder"): RMSNorm or no norm, gated feed-forwards (GLU,
SwiGLU), rotary embeddings, causal attention; a LLaMA-shaped decoder layer.

Oracles: a plain-torch LLaMA layer written here from the standard definition (independent of
attnsim.simulator.reference), the reference module on random layers of every kind, torch's
TransformerEncoderLayer, and transformers' LlamaDecoderLayer where it is installed.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from attnsim import simulator
from attnsim.simulator import reference, sampling_decoder, stack, vector_codec
from attnsim.simulator import spec as S
from attnsim.simulator.llama import llama_forward, llama_layer, random_weights
from attnsim.simulator.spec_modern import RMSNormSpec, RotarySpec

TOL = 1e-9  # float64, relative to the output's scale


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max()) / max(1.0, float(want.abs().max()))


def llama_weights(d: int, f: int, seed: int) -> dict:
    return random_weights(d, f, torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def U():
    return simulator.build(4, 4, 2, layer="decoder", max_ff=6)


def test_a_llama_layer_matches_its_definition(U):
    w = llama_weights(4, 6, seed=1)
    X = torch.randn(4, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    layer = llama_layer(4, 2, 6, weights=w, base=50.0, eps=1e-5)
    want = llama_forward(w, X, 2, base=50.0, eps=1e-5)
    assert rel(reference.reference(layer, X), want) <= 1e-12  # the reference agrees
    assert rel(U.simulate(layer, X), want) <= TOL


def test_random_layers_of_every_kind(U):
    rng = np.random.default_rng(7)
    cases = [sampling_decoder.random_decoder_target(rng, 4, 4, 2, 20.0, 6) for _ in range(24)]
    outs = U.simulate_batch([(t, X) for t, X, _ in cases])
    for (t, X, seed), got in zip(cases, outs):
        assert rel(got, reference.reference(t, X)) <= TOL, seed
    kinds = {
        (type(t.norm1).__name__, t.ffn.gated, t.attention.rotary is not None) for t, _, _ in cases
    }
    assert len(kinds) >= 6  # the draw covers many combinations


def linear_attention_by_hand(layer, X: torch.Tensor) -> torch.Tensor:
    """A pre-norm layer with no norms and a zero feed-forward: X + linear attention, written
    as Katharopoulos et al. compute it, phi(Q) (phi(K)^T V) / (phi(Q) phi(K)^T 1 + eps),
    causal by prefix sums."""
    a = layer.attention
    Q = X @ a.W_Q + a.b_Q[:, None, :]
    K = X @ a.W_K + a.b_K[:, None, :]
    V = X @ a.W_V + a.b_V[:, None, :]
    phi = (lambda t: torch.nn.functional.elu(t) + 1) if a.linear == "elu" else torch.relu
    fq, fk = phi(Q), phi(K)  # [h, n, dh]
    if a.causal:
        kv = torch.cumsum(fk[..., :, None] * V[..., None, :], dim=1)  # [h, n, dh, dh]
        num = (fq[..., None, :] @ kv)[..., 0, :]
        den = (fq * torch.cumsum(fk, dim=1)).sum(-1, keepdim=True)
    else:
        num = fq @ (fk.transpose(1, 2) @ V)
        den = fq @ fk.sum(dim=1)[:, :, None]
    heads = num / (den + a.linear_eps)  # [h, n, dh]
    return X + (heads @ a.W_O).sum(0) + a.b_O


@pytest.mark.parametrize("phi", ["elu", "relu"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [4, 2])  # 2: padded keys, which are also future keys
def test_linear_attention(U, phi, causal, n):
    X = torch.randn(n, 4, generator=torch.Generator().manual_seed(13), dtype=torch.float64)
    layer = sampling_decoder.random_decoder_layer(
        2,
        4,
        6,
        seed=14,
        norm="none",
        gated=False,
        rotary=False,
        causal=causal,
        linear=phi,
        bias=True,
    )
    zero = S.FeedForwardSpec(W1=torch.zeros(4, 6), W2=torch.zeros(6, 4))
    layer = S.EncoderLayerSpec(layer.attention, zero, None, None, norm_first=True)
    want = linear_attention_by_hand(layer, X)
    assert rel(reference.reference(layer, X), want) <= 1e-12
    assert rel(U.simulate(layer, X), want) <= TOL


@pytest.mark.parametrize("k, n", [(2, 4), (4, 3), (1, 1)])
def test_linformer(U, k, n):
    """Keys and values projected along the sequence, against torch's scaled dot-product
    attention on the projected keys and values."""
    X = torch.randn(n, 4, generator=torch.Generator().manual_seed(15), dtype=torch.float64)
    layer = sampling_decoder.random_decoder_layer(
        2,
        4,
        6,
        seed=16,
        norm="rms",
        gated=True,
        rotary=False,
        causal=False,
        linformer=(k, 4),
        bias=True,
        logit_scale=10.0,
        X=X,
    )
    a = layer.attention
    E, F = a.linformer.E[:, :n], a.linformer.F[:, :n]
    h = reference.layer_norm(layer.norm1, X)
    Q = h @ a.W_Q + a.b_Q[:, None, :]
    K = E @ (h @ a.W_K + a.b_K[:, None, :])
    V = F @ (h @ a.W_V + a.b_V[:, None, :])
    heads = torch.nn.functional.scaled_dot_product_attention(Q, K, V, scale=a.scale)
    Y = X + (heads @ a.W_O).sum(0) + a.b_O
    want = Y + reference.feed_forward(layer.ffn, reference.layer_norm(layer.norm2, Y))
    assert rel(reference.reference(layer, X), want) <= 1e-12
    assert rel(U.simulate(layer, X), want) <= TOL


@pytest.mark.parametrize("options", [{"attention": "softmax"}, {"dtype": "float32"}])
def test_decoder_U_variants_and_save_load(options, tmp_path):
    """U's own softmax attention and float32, and a saved decoder U read back."""
    rng = np.random.default_rng(3)
    cases = [sampling_decoder.random_decoder_target(rng, 3, 4, 2, 10.0, 6)[:2] for _ in range(6)]
    V = simulator.build(3, 4, 2, layer="decoder", max_ff=6, **options)
    tol = 1e-4 if "dtype" in options else TOL
    for (t, X), got in zip(cases, V.simulate_batch(cases)):
        assert rel(got, reference.reference(t, X)) <= tol
    V.save(tmp_path / "u")
    back = simulator.UniversalSimulator.load(tmp_path / "u")
    assert back.config == V.config and back.layout.modern
    assert torch.equal(back.simulate(*cases[0]), V.simulate(*cases[0]))


def test_decoder_U_with_relu_maps():
    """ReLU maps (silu's exp and 1/(1 + e), the norms' 1/sqrt, exp and 1/Z, linear
    attention's exp in phi): random layers of every kind, within a thousand times the
    per-map bound (no composite certificate: a norm divides by its row's spread)."""
    from attnsim.simulator import verify

    R = simulator.build(3, 4, 2, layer="decoder", max_ff=6, maps="relu", logit_bound=20.0)
    assert {"ffn_exp", "ffn_sig_inv", "phi_exp0", "inv_Z"} <= set(R.map_bounds)
    sanity = 1e3 * max(R.map_bounds.values())
    got = verify.verify(R, targets=24, progress=False)
    assert got.failures == [] and got.max_error <= sanity
    # linear attention, both feature maps, causal or not, against the reference
    got = verify.verify(R, targets=12, kind="linear", progress=False, seed=5)
    assert got.failures == [] and got.max_error <= sanity and got.refused == 0
    for phi, causal in (("elu", False), ("relu", True)):
        layer = sampling_decoder.random_decoder_layer(2, 4, 6, seed=17, linear=phi, causal=causal)
        X = torch.randn(3, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        assert rel(R.simulate(layer, X), reference.reference(layer, X)) <= sanity


def test_relu_maps_refuse_a_linear_normaliser_beyond_their_range():
    """With phi = relu, a query that meets no key has Z = eps: below 1e-6, the low end of
    the ReLU 1/x, U refuses with a message naming the row sum; natively it is simulated."""
    R = simulator.build(2, 2, 1, layer="decoder", max_ff=2, maps="relu", logit_bound=10.0)
    W = torch.eye(2, dtype=torch.float64)
    att = S.AttentionSpec(W_Q=W[None], W_K=W[None], W_V=W[None], linear="relu", linear_eps=1e-9)
    base = sampling_decoder.random_decoder_layer(1, 2, 2, seed=1, norm="none", linear="relu")
    layer = dataclasses.replace(base, attention=att)
    X = torch.tensor([[-1.0, -2.0], [1.0, 0.5]], dtype=torch.float64)  # q_0 has no features
    with pytest.raises(ValueError, match="row sum Z for query row 0 in head 0 is 1e-09"):
        R.simulate(layer, X)
    big = dataclasses.replace(layer, attention=dataclasses.replace(att, linear_eps=1e-3))
    assert rel(R.simulate(big, X), reference.reference(big, X)) <= 1e-3


def test_a_torch_encoder_layer_on_the_decoder_U(U):
    torch.manual_seed(3)
    layer = torch.nn.TransformerEncoderLayer(4, 2, 6, dropout=0.0, batch_first=True)
    layer = layer.double().eval()
    X = torch.randn(3, 4, dtype=torch.float64)
    with torch.no_grad():
        want = layer(X[None])[0]
    assert rel(U.simulate(layer, X), want) <= TOL


def test_a_stack_of_decoder_layers():
    V = simulator.build(3, 4, 2, layer="decoder", max_ff=4, n_layers=2)
    layers = tuple(
        llama_layer(4, 2, 4, weights=llama_weights(4, 4, seed=s), base=10.0) for s in (4, 5)
    )
    X = torch.randn(3, 4, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    target = stack.EncoderStackSpec(layers)
    assert rel(V.simulate(target, X), stack.reference_stack(target, X)) <= TOL
    # one layer on the same U: the second is padded with an identity layer
    assert rel(V.simulate(layers[0], X), reference.reference(layers[0], X)) <= TOL


def test_encoded_values_are_entries_of_the_target_or_flags(U):
    layer = llama_layer(4, 2, 6, weights=llama_weights(4, 6, seed=8), base=30.0)
    X = torch.randn(3, 4, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    case = vector_codec.prepare(U.config, U.layout, layer, X, None)
    tokens = vector_codec.pack(U.layout, case)
    cos, sin = layer.attention.rotary.tables(3, 2)
    a, f = layer.attention, layer.ffn
    parts = [X, a.W_Q, a.W_K, a.W_V, a.W_O, a.b_Q, a.b_K, a.b_V, a.b_O, f.W1, f.W2, f.W3]
    parts += [f.b1, f.b2, f.b3, layer.norm1.weight, layer.norm2.weight, cos, sin]
    flags_and_eps = torch.tensor([0.0, 1.0, layer.norm1.eps, layer.norm2.eps], dtype=torch.float64)
    allowed = torch.cat([p.flatten() for p in parts] + [flags_and_eps])
    values = torch.unique(tokens)
    assert bool(torch.isin(values, allowed).all())


@pytest.mark.parametrize("kv_heads", [2, 1])  # 1: grouped keys and values (GQA)
def test_transformers_llama_layer(kv_heads):
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama import modeling_llama as ml

    cfg = transformers.LlamaConfig(
        hidden_size=4,
        num_attention_heads=2,
        num_key_value_heads=kv_heads,
        intermediate_size=6,
        rms_norm_eps=1e-5,
        rope_theta=100.0,
        attn_implementation="sdpa",
    )
    torch.manual_seed(10)
    hf = ml.LlamaDecoderLayer(cfg, 0).double().eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.5)
    X = torch.randn(1, 4, 4, dtype=torch.float64)
    rot = ml.LlamaRotaryEmbedding(cfg)
    cos, sin = rot(X, torch.arange(4)[None])
    mask = torch.full((4, 4), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    with torch.no_grad():
        want = hf(X, attention_mask=mask, position_embeddings=(cos, sin))
    want = want[0] if isinstance(want, tuple) else want
    target = simulator.from_torch(hf, rotary=RotarySpec(cos=cos[0], sin=sin[0]))
    U = simulator.build(4, 4, 2, layer="decoder", max_ff=6)
    got = U.simulate(target, X[0])
    # transformers' RMSNorm computes in float32 even in a float64 model: agreement to that
    assert rel(got, want[0]) <= 1e-5
    assert rel(got, reference.reference(target, X[0])) <= TOL


# -- bad inputs ---------------------------------------------------------------------------


def test_an_encoder_U_refuses_todays_parts():
    E = simulator.build(3, 4, 2, layer="encoder", max_ff=6)
    X = torch.randn(3, 4, dtype=torch.float64)
    layer = llama_layer(4, 2, 6, weights=llama_weights(4, 6, seed=11))
    with pytest.raises(ValueError, match="layer='decoder'"):
        E.simulate(layer, X)
    A = simulator.build(3, 4, 2)
    with pytest.raises(ValueError, match="rotary"):
        A.simulate(layer.attention, X)


def test_bad_decoder_builds_and_specs():
    with pytest.raises(ValueError, match="vector layout"):
        simulator.build(2, 2, 1, layer="decoder", layout="scalar")
    with pytest.raises(ValueError, match="d_head must be even"):
        S.AttentionSpec(
            W_Q=torch.ones(1, 3, 3),
            W_K=torch.ones(1, 3, 3),
            W_V=torch.ones(1, 3, 3),
            rotary=RotarySpec(),
        )
    with pytest.raises(ValueError, match="both tables"):
        RotarySpec(cos=torch.ones(2, 2))
    with pytest.raises(ValueError, match="base must be more than 1"):
        RotarySpec(base=1.0)
    with pytest.raises(ValueError, match="cover 2 positions"):
        RotarySpec(cos=torch.ones(2, 2), sin=torch.zeros(2, 2)).tables(3, 2)
    with pytest.raises(ValueError, match="give W3 too"):
        S.FeedForwardSpec(W1=torch.ones(2, 3), W2=torch.ones(3, 2), b3=torch.ones(3))
    with pytest.raises(ValueError, match="eps must be positive"):
        RMSNormSpec(torch.ones(2), eps=0.0)
    W = torch.ones(1, 2, 2)
    with pytest.raises(ValueError, match="'elu' or 'relu'"):
        S.AttentionSpec(W_Q=W, W_K=W, W_V=W, linear="tanh")
    with pytest.raises(ValueError, match="linear_eps must be >= 0"):
        S.AttentionSpec(W_Q=W, W_K=W, W_V=W, linear="elu", linear_eps=-1.0)
    with pytest.raises(ValueError, match="no merged form"):
        S.AttentionSpec(W_Q=W, W_K=W, W_V=W, linear="elu").merged()
    lin = S.LinformerSpec(E=torch.ones(3, 2), F=torch.ones(3, 2))
    with pytest.raises(ValueError, match="has no causal"):
        S.AttentionSpec(W_Q=W, W_K=W, W_V=W, linformer=lin, causal=True)
    with pytest.raises(ValueError, match="shape"):
        S.LinformerSpec(E=torch.ones(3, 2), F=torch.ones(2, 2))
    wide = S.AttentionSpec(W_Q=W, W_K=W, W_V=W, linformer=lin)
    with pytest.raises(ValueError, match="cover 2 positions"):
        reference.attention(wide, torch.ones(3, 2, dtype=torch.float64))
    zero2 = S.FeedForwardSpec(W1=torch.zeros(2, 2), W2=torch.zeros(2, 2))
    small = simulator.build(2, 2, 1, layer="decoder", max_ff=2)
    with pytest.raises(ValueError, match="max_n >= 3"):
        small.simulate(
            S.EncoderLayerSpec(wide, zero2, None, None, norm_first=True), torch.ones(2, 2)
        )
    flat = S.AttentionSpec(W_Q=W, W_K=W, W_V=W, linear="relu", linear_eps=0.0)
    with pytest.raises(ValueError, match="0/0"):
        reference.attention(flat, -torch.ones(2, 2, dtype=torch.float64))
    zero = S.FeedForwardSpec(W1=torch.zeros(2, 2), W2=torch.zeros(2, 2))
    with pytest.raises(ValueError, match="linear_eps > 0"):
        simulator.build(2, 2, 1, layer="decoder", max_ff=2).simulate(
            S.EncoderLayerSpec(flat, zero, None, None, norm_first=True), torch.ones(2, 2)
        )
    layer = llama_layer(4, 2, 6, weights=llama_weights(4, 6, seed=12))
    with pytest.raises(ValueError, match="no merged form"):
        layer.attention.merged()


# -- the command line ----------------------------------------------------------------------


def test_cli_verify_and_simulate_decoder_layers(capsys):
    import json

    from attnsim.cli import main

    argv = ["--layer", "decoder", "--max-n", "3", "--max-d", "4", "--max-heads", "2"]
    assert main(["verify", *argv, "--max-ff", "6", "--targets", "12", "--json"]) == 0
    out, err = capsys.readouterr()
    got = json.loads(out)
    assert got["failures"] == [] and got["max_error"] <= TOL
    assert "for decoder layers" in err
    assert main(["simulate", *argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["relative_error"] <= TOL
    # refused with a message, never a traceback
    assert main(["simulate", *argv, "--layout", "scalar"]) != 0
    err = capsys.readouterr().err
    assert "vector layout" in err and "Traceback" not in err
    assert main(["simulate", "--layer", "encoder", "--activation", "silu"]) != 0
    err = capsys.readouterr().err
    assert "--layer decoder" in err and "Traceback" not in err


@pytest.mark.parametrize("kind", sampling_decoder.DECODER_KINDS)
def test_verify_draws_each_kind(U, kind):
    """``verify(kind=...)`` (``attnsim verify --layer KIND``): targets of that kind only,
    against the reference."""
    from attnsim.simulator import verify

    got = verify.verify(U, targets=8, seed=1, kind=kind, progress=False)
    assert got.count == 8 and got.failures == [] and got.max_error <= TOL
    rng = np.random.default_rng(2)
    layer, X, _ = sampling_decoder.random_kind_target(rng, kind, 4, 4, 2, 6)
    assert rel(U.simulate(layer, X), reference.reference(layer, X)) <= TOL
    if kind == "linformer":
        assert layer.attention.linformer is not None
    if kind == "linear":
        assert layer.attention.linear is not None


def test_kinds_refused_where_they_do_not_apply(capsys):
    from attnsim.cli import main
    from attnsim.simulator import verify

    E = simulator.build(2, 2, 1, layer="encoder", max_ff=2)
    with pytest.raises(ValueError, match="layer='decoder'"):
        verify.verify(E, targets=1, kind="llama", progress=False)
    with pytest.raises(ValueError, match="kind must be one of"):
        sampling_decoder.random_kind_target(np.random.default_rng(0), "mixer", 2, 2, 1, 2)
    argv = ["--max-n", "3", "--max-d", "4", "--max-heads", "2", "--max-ff", "6"]
    assert main(["verify", "--layer", "rotary", *argv, "--targets", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["failures"] == []
    relu = ["--maps", "relu", "--logit-bound", "10"]
    assert main(["verify", "--layer", "linear", *argv, *relu, "--targets", "3", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["failures"] == [] and got["count"] == 3
    assert main(["simulate", "--layer", "glu"]) != 0
    err = capsys.readouterr().err
    assert "invalid choice: 'glu'" in err and "Traceback" not in err
    assert main(["simulate", "--help"]) == 0  # simulate's help says where the kinds are
    assert "attnsim verify --layer KIND" in " ".join(capsys.readouterr().out.split())
