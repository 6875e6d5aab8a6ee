"""U's checks are its own: ``simulate`` never calls the Python reference.

What U needs of a target (scores within its score bound; with maps="relu", the values its
ReLU maps read within their ranges) is watched by the run-time checks the compiler placed in
U's own transformer. The reference (``attnsim.simulator.reference``) is the oracle of these
tests, computed before it is made to raise.
"""

from __future__ import annotations

import functools

import pytest
import torch

from attnsim.simulator import reference as R
from attnsim.simulator import spec, universal, verify

F64 = torch.float64
ORACLE_FUNCTIONS = (
    "scores",
    "pattern",
    "values",
    "attention",
    "layer_norm",
    "activation",
    "feed_forward",
    "encoder_layer",
    "reference",
)


@functools.cache
def build(n, d, h, **kw):
    return universal.build(n, d, h, **kw)


@pytest.fixture
def no_reference(monkeypatch):
    """Every function of the reference module raises from here on."""

    def refuse(*args, **kwargs):
        raise AssertionError("simulate called the Python reference")

    for name in ORACLE_FUNCTIONS:
        monkeypatch.setattr(R, name, refuse)


def _attention_case():
    target = spec.random_attention(2, 4, seed=3, causal=True, bias=True)
    X = torch.randn(3, 4, generator=torch.Generator().manual_seed(3), dtype=F64)
    return target, X


def _encoder_case(activation="gelu"):
    target = spec.random_encoder_layer(2, 4, 6, seed=4, activation=activation, norm_first=True)
    X = torch.randn(3, 4, generator=torch.Generator().manual_seed(4), dtype=F64)
    return target, X


CASES = [
    ("attention", {}, 1e-12),
    ("attention", {"maps": "relu", "logit_bound": 12.0, "map_tolerance": 1e-5}, 1e-4),
    ("encoder", {}, 1e-12),
    ("encoder", {"maps": "relu", "logit_bound": 12.0, "value_bound": 10.0,
                 "map_tolerance": 1e-5}, 1e-3),
]  # fmt: skip


@pytest.mark.parametrize("layer, kw, tol", CASES, ids=["native", "relu", "enc", "enc-relu"])
def test_simulate_runs_without_the_reference(layer, kw, tol, request):
    target, X = _encoder_case() if layer == "encoder" else _attention_case()
    want = R.reference(target, X)
    U = build(3, 4, 2, layer=layer, **kw)
    request.getfixturevalue("no_reference")
    got = U.simulate(target, X)
    assert verify.relative_error(got, want) <= tol


def test_range_errors_come_from_u_itself(no_reference):
    U = build(3, 4, 2, maps="relu", logit_bound=12.0, map_tolerance=1e-5)
    target, X = _attention_case()
    with pytest.raises(ValueError, match=r"score of query row \d and key row \d in head \d is"):
        U.simulate(target, X * 1e3)
    E = build(3, 4, 2, layer="encoder", maps="relu", value_bound=10.0, map_tolerance=1e-5)
    layer, X = _encoder_case()
    with pytest.raises(
        ValueError,
        match=r"LayerNorm 'ln_input' \(before the attention: norm1 of a pre-norm layer\): the "
        r"variance plus eps .* is [\d.]+ for row 0, outside \[1e-06, 102\].* larger value_bound",
    ):
        E.simulate(layer, X * 100.0)


def test_u_has_run_time_checks_on_what_it_relies_on():
    """The guards U's transformer carries: the scores' range (for the max head), and with
    maps="relu" the input range of every ReLU map."""
    native = {g.label for g in build(3, 4, 2).model.guards}
    assert universal.SCORE in native
    relu = build(3, 4, 2, layer="encoder", maps="relu", value_bound=10.0, map_tolerance=1e-5)
    ranges = {g.label: g.value_range for g in relu.model.guards if g.value_range is not None}
    assert ranges[universal.SCORE] == (-1e4, 1e4)
    assert ranges[universal.INV_Z] == pytest.approx((0.5, 2 * 3 * 2.718281828459045))
    assert ranges[universal.EXP][1] == universal.EXP_HI
    for slot in ("ln_input", "ln_middle", "ln_output"):
        assert ranges[f"{slot}_rsqrt"] == (1e-6, 102.0)
    ffn = [r for label, r in ranges.items() if label.startswith("ffn_gelu")]
    assert ffn and all(r == (-10.0, 10.0) for r in ffn)


def test_u_refuses_a_guarded_value_whose_terms_cancel():
    # U reads a guarded sum and the size of its terms: terms of 1e16 that cancel to 2 leave
    # float rounding to decide it; terms of its own size pass
    from attnsim.model.checks import GuardSpec
    from attnsim.simulator import checks as simulator_checks
    from attnsim.simulator.config import SimulatorConfig

    config = SimulatorConfig(2, 2, layout_kind="scalar")
    g = GuardSpec("e", (("a", 1.0), ("b", -1.0)), 0, cancellation=2.0**26)
    vals = torch.tensor([[2.0, -3.0]], dtype=torch.float64)
    simulator_checks.check_guard(config, g, vals, torch.tensor([[4.0, 5.0]]))
    with pytest.raises(
        ValueError, match=r"U's 'e' at position 1 is -3, a sum of terms up to 2e\+16"
    ):
        simulator_checks.check_guard(config, g, vals, torch.tensor([[4.0, 2e16]]))


@pytest.mark.parametrize("size", [1e160, 1e200])
def test_the_scalar_layout_refuses_merged_weights_that_underflow(size):
    """Tiny query and key weights for huge inputs: the scores are ordinary numbers, but the
    scalar layout's merged ``scale W_Q W_K^T`` falls to subnormals (1e-320) or 0, and U gave
    up to 0.7 relative error without a word. It is refused; the vector layout, which keeps
    the factors apart, gives the reference."""
    from attnsim.simulator import sampling

    t = sampling.random_attention(1, 4, seed=0, bias=False)
    tiny = spec.AttentionSpec(W_Q=t.W_Q / size, W_K=t.W_K / size, W_V=t.W_V, W_O=t.W_O)
    X = torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(0)) * size
    with pytest.raises(ValueError, match="merged scale W_Q W_K\\^T has entries below 1e-292"):
        build(4, 4, 2, layout="scalar", storage="dense").simulate(tiny, X)
    want = R.reference(tiny, X)
    got = build(4, 4, 2, layout="vector", storage="dense").simulate(tiny, X)
    assert float((got - want).abs().max() / want.abs().max()) < 1e-12


def test_an_overflow_inside_u_is_named_as_one():
    """Feed-forward outputs near 1e154 (the reference: finite, 2e154) overflow where U squares
    them for LayerNorm: refused, saying so, not called a defect of U."""
    import dataclasses

    from attnsim.simulator import sampling

    t = sampling.random_encoder_layer(2, 4, 16, seed=0)
    big = dataclasses.replace(t, ffn=dataclasses.replace(t.ffn, W2=t.ffn.W2 * 1e154))
    big = dataclasses.replace(big, norm_first=True)
    X = torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(0))
    assert bool(torch.isfinite(R.reference(big, X)).all())
    U = build(4, 4, 2, layer="encoder", max_ff=16, layout="vector", storage="dense")
    with pytest.raises(ValueError, match="a value inside U overflowed float64"):
        U.simulate(big, X)
