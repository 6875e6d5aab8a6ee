"""SimulatorConfig: one validated build configuration, and ``build`` taking it."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from attnsim import simulator
from attnsim.simulator import config as C
from attnsim.simulator import universal


def test_defaults_are_resolved_and_enums_accept_strings():
    cfg = C.SimulatorConfig(3, 4)
    assert (cfg.max_heads, cfg.layer, cfg.attention, cfg.maps) == (
        1,
        C.LayerKind.ATTENTION,
        C.AttentionKind.HARD,
        C.Maps.NATIVE,
    )
    assert (cfg.max_ff, cfg.score_bound, cfg.dtype) == (0, 1e4, torch.float64)
    enc = C.SimulatorConfig(3, 4, 2, layer="encoder", attention="softmax", maps="relu")
    assert enc.layer is C.LayerKind.ENCODER and enc.max_ff == 8
    assert enc.attention is C.AttentionKind.SOFTMAX and enc.maps is C.Maps.RELU
    assert C.SimulatorConfig(3, 4, dtype="float32").dtype == torch.float32
    assert C.SimulatorConfig(3, 4, dtype=torch.float32).score_bound == 1e3
    assert cfg.layout_kind is C.LayoutKind.VECTOR  # the default: one vector per position
    assert enc.layout == simulator.vector_layout.VectorLayout(3, 4, 2, 8)
    scalar = C.SimulatorConfig(3, 4, 2, layer="encoder", layout_kind="scalar")
    assert scalar.layout == simulator.layout.Layout(3, 4, 2, 8) and not scalar.is_vector
    assert (enc.relu_logit_bound, enc.relu_value_bound) == (50.0, 20.0)
    assert (cfg.relu_logit_bound, cfg.relu_value_bound) == (None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.max_n = 5  # type: ignore[misc]


BAD = [
    (
        {"layer": "mixer"},
        ValueError,
        "layer must be 'attention' or 'encoder' or 'decoder', got 'mixer'",
    ),
    ({"maps": "tanh"}, ValueError, "maps must be 'native' or 'relu', got 'tanh'"),
    ({"attention": "sparse"}, ValueError, "attention must be 'hard' or 'softmax', got 'sparse'"),
    ({"dtype": torch.float16}, ValueError, "dtype must be torch.float64 or torch.float32, got"),
    ({"max_ff": 4}, ValueError, "max_ff applies to layer='encoder' or 'decoder' only"),
    ({"layer": "encoder", "max_ff": 0}, ValueError, r"max_ff must be a positive int"),
    ({"max_heads": 0}, ValueError, r"max_heads must be a positive int \(the most attention"),
    ({"score_bound": 1e10}, ValueError, r"score_bound must be in \(0, 1e\+09\] for this build"),
    ({"score_bound": -1.0}, ValueError, r"score_bound must be in \(0, 1e\+09\]"),
    (
        {"score_bound": 1e5, "dtype": torch.float32},
        ValueError,
        r"score_bound must be in \(0, \d+\] .* float32 .*; use dtype=torch.float64",
    ),
    ({"maps": "relu", "logit_bound": 400.0}, ValueError, r"logit_bound must be in \(0, 350\]"),
    (
        {"maps": "relu", "value_bound": float("nan")},
        ValueError,
        "value_bound must be positive and finite, got nan",
    ),
    ({"map_tolerance": 0.0}, ValueError, "map_tolerance must be a positive finite number"),
]


@pytest.mark.parametrize("options, error, message", BAD)
def test_bad_options_are_refused_with_the_build_messages(options, error, message):
    with pytest.raises(error, match=message):
        C.SimulatorConfig(2, 2, **options)
    with pytest.raises(error, match=message):  # build gives the same error
        universal.build(2, 2, **options)


def test_sizes_must_be_positive_ints():
    with pytest.raises(ValueError, match=r"max_n must be a positive int \(the most rows of X\)"):
        C.SimulatorConfig(0, 2)
    with pytest.raises(ValueError, match="max_d must be a positive int"):
        C.SimulatorConfig(2, 2.5)
    with pytest.raises(ValueError, match="max_n must be a positive int"):
        C.SimulatorConfig(True, 2)


def test_relu_bounds_are_checked_only_for_relu_maps():
    assert C.SimulatorConfig(2, 2, logit_bound=1e9).logit_bound == 1e9  # native: unused


def test_json_round_trip():
    for cfg in (
        C.SimulatorConfig(2, 3),
        C.SimulatorConfig(4, 4, 2, layer="encoder", maps="relu", dtype=torch.float32),
    ):
        data = json.loads(json.dumps(cfg.to_json()))
        assert data["dtype"] in ("float64", "float32") and isinstance(data["layer"], str)
        assert C.SimulatorConfig.from_json(data) == cfg
    with pytest.raises(ValueError, match="missing max_d"):
        C.SimulatorConfig.from_json({"max_n": 2})
    good = C.SimulatorConfig(2, 2).to_json()
    with pytest.raises(ValueError, match="unexpected colour"):
        C.SimulatorConfig.from_json({**good, "colour": 1})
    with pytest.raises(ValueError, match="dtype must be 'float64' or 'float32', got 'f64'"):
        C.SimulatorConfig.from_json({**good, "dtype": "f64"})
    with pytest.raises(ValueError, match="must be a JSON object, got list"):
        C.SimulatorConfig.from_json([])


def test_build_takes_a_config_or_keywords():
    cfg = C.SimulatorConfig(2, 2, 1, layer="encoder", max_ff=3)
    U = universal.build(config=cfg)
    V = simulator.build(2, 2, layer="encoder", max_ff=3)
    assert U.config == V.config == cfg
    a, b = U.model.model.state_dict(), V.model.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(TypeError, match="either config=SimulatorConfig"):
        universal.build(2, 2, config=cfg)
    with pytest.raises(TypeError, match="either config=SimulatorConfig"):
        universal.build(config=cfg, maps="relu")
    with pytest.raises(TypeError, match="config must be a SimulatorConfig, got dict"):
        universal.build(config={"max_n": 2})
    with pytest.raises(TypeError, match="build needs max_n and max_d"):
        universal.build()
    with pytest.raises(TypeError, match="unknown options colour; it takes layer, max_ff"):
        universal.build(2, 2, colour="red")


def test_public_names():
    assert simulator.SimulatorConfig is C.SimulatorConfig
    assert simulator.LayerKind is C.LayerKind and simulator.Maps is C.Maps
    assert simulator.from_torch is simulator.adapters.from_torch
    assert simulator.spec.from_torch is simulator.adapters.from_torch
    assert simulator.spec.random_attention is simulator.sampling.random_attention
    assert simulator.verify.random_target is simulator.sampling.random_target
    with pytest.raises(AttributeError, match="has no attribute 'random_thing'"):
        simulator.spec.random_thing  # noqa: B018


def test_cli_help_defaults_are_the_configs():
    from attnsim.cli import build_flags

    fields = {f.name: f.default for f in dataclasses.fields(C.SimulatorConfig)}
    assert build_flags.DEFAULT_LOGIT_BOUND == fields["logit_bound"]
    assert build_flags.DEFAULT_MAP_TOLERANCE == fields["map_tolerance"]
    assert build_flags.DEFAULT_VALUE_BOUND == fields["value_bound"]
