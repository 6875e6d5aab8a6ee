"""The encoder U with MaxMin feed-forward blocks (GroupSort-2: hidden pairs (2k, 2k+1) become
(max, min)), against plain torch: ``simulator.reference`` and torch.nn.TransformerEncoderLayer
with a MaxMin activation written here in torch."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch

from attnsim.rasp import interpret
from attnsim.simulator import adapters, codec, programs, sampling, spec, universal
from attnsim.simulator import reference as R
from attnsim.simulator.layout import Layout
from attnsim.simulator.reference import reference
from attnsim.simulator.verify import relative_error, verify

F64 = torch.float64
LOGITS, TOL = 12.0, 1e-5  # maps="relu": as tests/test_simulator_relu.py


@functools.cache
def encoder_U(n=3, d=4, h=2, ff=6, dtype=F64, maps="native", layout="scalar"):
    """The scalar layout by default (its codec is tested here); the vector layout where a
    test says so."""
    if maps == "relu":
        return universal.build(
            n, d, h, layer="encoder", max_ff=ff, maps="relu", logit_bound=LOGITS,
            value_bound=10.0, map_tolerance=TOL, dtype=dtype, layout=layout,
        )  # fmt: skip
    return universal.build(n, d, h, layer="encoder", max_ff=ff, dtype=dtype, layout=layout)


def torch_maxmin(H: torch.Tensor) -> torch.Tensor:
    """GroupSort-2 in torch, independently of ``reference.activation``."""
    a, b = H[..., 0::2], H[..., 1::2]
    return torch.stack([torch.maximum(a, b), torch.minimum(a, b)], dim=-1).flatten(-2)


def torch_layer(d, h, dm, *, norm_first, seed):
    """A torch TransformerEncoderLayer with a MaxMin activation and its spec."""
    torch.manual_seed(seed)

    def make(activation):
        return torch.nn.TransformerEncoderLayer(
            d, h, dim_feedforward=dm, dropout=0.0, norm_first=norm_first, batch_first=True,
            activation=activation, dtype=F64,
        ).eval()  # fmt: skip

    # torch applies a callable activation to the whole [.., d_mlp] hidden row (and takes
    # its slow path, not the fused relu/gelu kernel); from_torch reads relu and gelu only,
    # so the weights are read from a relu twin
    twin = make("relu")
    layer = make(torch_maxmin)
    layer.load_state_dict(twin.state_dict())
    return layer, _with_ffn(adapters.from_torch(twin), activation=spec.Activation.MAXMIN)


def _with_ffn(layer: spec.EncoderLayerSpec, **changes) -> spec.EncoderLayerSpec:
    return dataclasses.replace(layer, ffn=dataclasses.replace(layer.ffn, **changes))


def _x(n, d, seed):
    return torch.randn(n, d, dtype=F64, generator=torch.Generator().manual_seed(seed))


# (n, d, heads, d_mlp) within the build (3, 4, 2, F=6): the smallest, padded widths, full ones
SIZES = [(1, 1, 1, 2), (2, 2, 2, 4), (3, 4, 2, 6), (3, 4, 1, 2), (2, 3, 1, 6), (3, 4, 2, 4)]


LAYOUTS = pytest.mark.parametrize("layout", ["scalar", "vector"])


@LAYOUTS
@pytest.mark.parametrize("n, d, h, dm", SIZES)
@pytest.mark.parametrize("norm_first, causal", [(False, False), (True, True), (False, True)])
def test_random_maxmin_layers_match_the_reference(n, d, h, dm, norm_first, causal, layout):
    U = encoder_U(layout=layout)
    target = sampling.random_encoder_layer(
        h, d, dm, seed=7 * n + d + dm, activation="maxmin", norm_first=norm_first, causal=causal
    )
    X = _x(n, d, seed=n + dm)
    assert relative_error(U.simulate(target, X), reference(target, X)) <= 1e-9


@LAYOUTS
@pytest.mark.parametrize("norm_first", [False, True])
def test_matches_torch_transformer_encoder_layer_with_maxmin(norm_first, layout):
    U = encoder_U(layout=layout)
    layer, target = torch_layer(4, 2, 6, norm_first=norm_first, seed=int(norm_first))
    X = _x(3, 4, seed=2)
    with torch.no_grad():
        want = layer(X[None])[0]
        causal_want = layer(X[None], src_mask=torch.ones(3, 3, dtype=torch.bool).triu(1))[0]
    assert relative_error(reference(target, X), want) <= 1e-13  # the two oracles agree
    assert relative_error(U.simulate(target, X), want) <= 1e-9
    assert relative_error(U.simulate(target, X, causal=True), causal_want) <= 1e-9


@LAYOUTS
def test_negative_values_and_ties(layout):
    """Pre-activations all negative, of mixed signs and equal within a pair: each pair's
    max and min, never a ReLU's 0 and never a swapped pair (W2's rows differ)."""
    U = encoder_U(layout=layout)
    base = sampling.random_encoder_layer(2, 4, 6, seed=3, activation="maxmin")
    W1 = torch.zeros(4, 6, dtype=F64)
    W1[:, 2] = W1[:, 3] = torch.tensor([0.5, -1.0, 0.25, 2.0], dtype=F64)  # a tie: any input
    cases = {
        "negative": torch.tensor([-3.0, -1.0, -2.0, -5.0, -4.0, -4.0], dtype=F64),
        "mixed": torch.tensor([-3.0, 2.0, 2.0, -3.0, 0.0, -0.5], dtype=F64),
        "ties": torch.tensor([1.5, 1.5, -0.75, -0.75, 0.0, 0.0], dtype=F64),
    }
    X = _x(3, 4, seed=4)
    for name, b1 in cases.items():
        for norm_first in (False, True):
            target = dataclasses.replace(_with_ffn(base, W1=W1, b1=b1), norm_first=norm_first)
            want = reference(target, X)
            ffn = target.ffn
            if name != "ties":  # a ReLU, or the pairs swapped, would be visibly wrong
                relu = _with_ffn(target, activation="relu")
                swapped = _with_ffn(target, W2=ffn.W2.reshape(3, 2, 4).flip(1).reshape(6, 4))
                assert relative_error(R.encoder_layer(relu, X), want) > 1e-3, name
                assert relative_error(R.encoder_layer(swapped, X), want) > 1e-3, name
            assert relative_error(U.simulate(target, X), want) <= 1e-9, (name, norm_first)
    # random pre-activations, shifted far negative: every unit below 0
    neg = _with_ffn(base, b1=base.ffn.b1 - 20.0)
    assert bool((X @ neg.ffn.W1 + neg.ffn.b1 < 0).all())
    assert relative_error(U.simulate(neg, X), reference(neg, X)) <= 1e-9


def _hidden_activations(U, target, X):
    """The interpreter's ffn_act at every HID(i, m) of U's program: [N, F]."""
    seq = U.encode(target, X).numpy()[None]  # [1, length] or [1, length, width]
    act = next(e for e in _walk(U.program) if e.label == "ffn_act")
    out = np.asarray(interpret.evaluate(act, seq)[0], dtype=np.float64)
    lay = U.layout
    return torch.tensor(
        [[out[lay.hidpos(i, m)] for m in range(lay.F)] for i in range(lay.N)], dtype=F64
    )


def _walk(expr):
    """Every expression of a program, each once."""
    todo, seen = [expr], set()
    while todo:
        e = todo.pop()
        if id(e) not in seen:
            seen.add(id(e))
            yield e
            todo.extend(e.children)


@LAYOUTS
@pytest.mark.parametrize("dm", [2, 4])
def test_padding_hidden_units_stay_zero(dm, layout):
    """Units m >= d_mlp pair among themselves (d_mlp is even): their activation is exactly
    0, and the real units are the reference's MaxMin of their pre-activations."""
    U = encoder_U(layout=layout)
    target = sampling.random_encoder_layer(2, 4, dm, seed=dm, activation="maxmin")
    X = _x(3, 4, seed=dm)
    hid = _hidden_activations(U, target, X)
    assert not hid[:, dm:].any()
    # the real units: MaxMin of the pre-activations (u = LN1(X + attention(X)), post-norm)
    u = R.layer_norm(target.norm1, X + R.attention(target.attention, X))
    want = R.activation(spec.Activation.MAXMIN, u @ target.ffn.W1 + target.ffn.b1)
    assert torch.allclose(hid[:, :dm], want, rtol=1e-12, atol=1e-12)
    assert relative_error(U.simulate(target, X), reference(target, X)) <= 1e-9


def test_odd_feed_forward_width_build():
    """F = 5: the last unit has no partner (it reads 0) and is always padding; even widths
    up to 4 are simulated, wider ones refused with the widest this U takes."""
    U = encoder_U(2, 2, 1, 5)
    lay = U.layout
    assert programs.maxmin_partner(lay, 1, 4) == -1
    assert programs.maxmin_partner(lay, 1, 3) == lay.hidpos(1, 2)
    for dm in (2, 4):
        target = sampling.random_encoder_layer(1, 2, dm, seed=dm, activation="maxmin")
        X = _x(2, 2, seed=dm)
        assert relative_error(U.simulate(target, X), reference(target, X)) <= 1e-9
        assert not _hidden_activations(U, target, X)[:, dm:].any()
    # the odd width is still fine for the elementwise activations
    relu = sampling.random_encoder_layer(1, 2, 5, seed=1, activation="relu")
    assert relative_error(U.simulate(relu, _x(2, 2, 1)), reference(relu, _x(2, 2, 1))) <= 1e-9
    wide = sampling.random_encoder_layer(1, 2, 6, seed=0, activation="maxmin")
    with pytest.raises(
        ValueError,
        match=r"feed-forward width is 6, but this U was built for at most 5 \(maxmin sorts "
        r"hidden units in pairs: the widest maxmin block it takes has d_mlp=4\); build a U "
        "with a larger max_ff",
    ):
        U.simulate(wide, _x(2, 2, 0))


def test_bad_inputs():
    with pytest.raises(ValueError, match=r"'maxmin' sorts hidden units in pairs, so d_mlp must"):
        sampling.random_encoder_layer(1, 4, 3, seed=0, activation="maxmin")
    U = encoder_U()
    X = _x(2, 4, seed=0)
    with pytest.raises(ValueError, match="feed-forward width is 8, but this U was built for at"):
        U.simulate(sampling.random_encoder_layer(1, 4, 8, seed=0, activation="maxmin"), X)
    # an odd width that slipped past the spec (written over it): refused, never simulated
    odd = sampling.random_encoder_layer(1, 4, 3, seed=0, activation="relu")
    object.__setattr__(odd.ffn, "activation", spec.Activation.MAXMIN)
    with pytest.raises(ValueError, match="maxmin feed-forward block sorts hidden units in pairs"):
        U.simulate(odd, X)
    case = codec.Case(odd.attention.merged(), X, odd)
    with pytest.raises(ValueError, match="so its d_mlp must be even, got 3"):
        codec.pack(U.layout, case)
    tiny = encoder_U(2, 4, 1, 1)
    with pytest.raises(ValueError, match=r"it takes no maxmin block\)"):
        tiny.simulate(sampling.random_encoder_layer(1, 4, 2, seed=0, activation="maxmin"), X)


def test_codec_round_trip():
    lay = Layout(3, 4, 2, 6)
    layer = sampling.random_encoder_layer(2, 4, 4, seed=5, activation="maxmin", norm_first=True)
    case = codec.Case(layer.attention.merged(), _x(2, 4, seed=5), layer)
    seq = codec.pack(lay, case)
    assert seq[lay.flagpos_named("maxmin")] == 1.0
    assert [float(seq[lay.flagpos_named(f)]) for f in ("relu", "gelu", "gelu_tanh")] == [0.0] * 3
    back = codec.unpack(lay, seq, case.shape).layer
    assert back.ffn.activation is spec.Activation.MAXMIN
    assert torch.equal(back.ffn.W1, layer.ffn.W1) and torch.equal(back.ffn.b1, layer.ffn.b1)


def test_random_targets_draw_maxmin_and_verify():
    U = encoder_U()
    rng = np.random.default_rng(3)
    drawn = [sampling.random_target(rng, 3, 4, 2, 50.0, 6)[0] for _ in range(12)]
    kinds = [t.ffn.activation for t in drawn]
    assert spec.Activation.MAXMIN in kinds
    assert all(t.ffn.d_mlp % 2 == 0 for t in drawn if t.ffn.activation == "maxmin")
    result = verify(U, targets=12, seed=3, progress=False)  # the same draws
    assert result.failures == [] and result.max_error <= 1e-9
    # max_ff = 1 has no room for a pair: never maxmin there
    rng = np.random.default_rng(0)
    assert all(
        sampling.random_target(rng, 2, 2, 1, 5.0, 1)[0].ffn.activation != "maxmin"
        for _ in range(20)
    )


def test_float32_maxmin():
    U = encoder_U(dtype=torch.float32)
    for k, (norm_first, causal) in enumerate([(False, False), (True, True), (True, False)]):
        X = _x(3, 4, seed=k)
        target = sampling.random_encoder_layer(
            2, 4, 6, seed=k, activation="maxmin", norm_first=norm_first, causal=causal,
            logit_scale=10.0, X=X,
        )  # fmt: skip
        assert relative_error(U.simulate(target, X), reference(target, X)) <= 1e-4


def test_relu_maps_track_torch_maxmin_layers():
    U = encoder_U(maps="relu", ff=8)
    assert U.model.model.cfg.d_native == {}
    worst = 0.0
    for norm_first in (False, True):
        layer, target = torch_layer(4, 2, 8, norm_first=norm_first, seed=10 + norm_first)
        X = _x(3, 4, seed=int(norm_first))
        with torch.no_grad():
            want = layer(X[None])[0]
        worst = max(worst, relative_error(U.simulate(target, X), want))
        causal = dataclasses.replace(
            target, attention=dataclasses.replace(target.attention, causal=True)
        )
        worst = max(worst, relative_error(U.simulate(causal, X), reference(causal, X)))
    assert 0 < worst <= 100 * TOL  # the bounded maps (exp, rsqrt): a real, small error
