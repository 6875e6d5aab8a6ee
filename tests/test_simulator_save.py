"""UniversalSimulator.save / load: bit-identical outputs, and clear errors for bad directories."""

from __future__ import annotations

import functools
import json
import shutil

import pytest
import torch

from attnsim.simulator import sampling, saving, universal
from attnsim.simulator.universal import UniversalSimulator

F64 = torch.float64


@functools.cache
def _u(layer: str, maps: str = "native") -> UniversalSimulator:
    extra = {"logit_bound": 8.0, "map_tolerance": 1e-3} if maps == "relu" else {}
    return universal.build(3, 2, 2, layer=layer, maps=maps, **extra)


def _cases(layer: str):
    X = torch.randn(3, 2, dtype=F64, generator=torch.Generator().manual_seed(0))
    if layer == "encoder":
        targets = [
            sampling.random_encoder_layer(h, 2, 3, seed=h, norm_first=h == 2) for h in (1, 2)
        ]
    else:
        targets = [sampling.random_attention(h, 2, seed=h, causal=h == 2) for h in (1, 2)]
    return [(t, X[: 1 + k]) for k, t in enumerate(targets)]


@pytest.mark.parametrize("layer, maps", [("attention", "native"), ("encoder", "native"),
                                         ("attention", "relu")])  # fmt: skip
def test_load_gives_bit_identical_outputs(tmp_path, layer, maps):
    U = _u(layer, maps)
    path = U.save(tmp_path / "U")
    assert sorted(p.name for p in path.iterdir()) == [
        "model.json",
        "model.safetensors",
        "simulator.json",
    ]
    V = UniversalSimulator.load(path)
    assert V.config == U.config and V.layout == U.layout
    assert (V.maps, V.logit_bound, V.value_bound, V.score_bound) == (
        U.maps,
        U.logit_bound,
        U.value_bound,
        U.score_bound,
    )
    for (target, X), got in zip(_cases(layer), V.simulate_batch(_cases(layer))):
        assert torch.equal(got, U.simulate(target, X))
        assert torch.equal(V.encode(target, X), U.encode(target, X))
    assert V.map_bounds == U.map_bounds
    assert V.report().__dict__ == U.report().__dict__
    target, X = _cases(layer)[0]
    assert torch.equal(V.interpret(target, X), U.interpret(target, X))  # the program again
    if layer == "attention":
        assert torch.equal(V.error_bound(target, X), U.error_bound(target, X))


def test_loaded_u_keeps_its_run_time_checks(tmp_path):
    V = UniversalSimulator.load(_u("attention").save(tmp_path))
    target = sampling.random_attention(1, 2, seed=0)
    with pytest.raises(ValueError, match=r"score of query row \d and key row \d in head \d is"):
        V.simulate(target, torch.full((2, 2), 1e4, dtype=F64))


@pytest.fixture
def saved(tmp_path):
    return _u("attention").save(tmp_path / "U")


def _edit_meta(path, **changes):
    meta = json.loads((path / saving.SAVE_FILE).read_text())
    meta.update(changes)
    (path / saving.SAVE_FILE).write_text(json.dumps(meta))


def test_missing_directory_and_files(tmp_path, saved):
    with pytest.raises(FileNotFoundError, match="is not a directory; pass the directory"):
        UniversalSimulator.load(tmp_path / "nowhere")
    (saved / "simulator.json").unlink()
    with pytest.raises(FileNotFoundError, match="simulator.json is missing, so .* holds no saved"):
        UniversalSimulator.load(saved)


def test_missing_model_files(tmp_path):
    path = _u("attention").save(tmp_path / "U")
    (path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError):
        UniversalSimulator.load(path)


def test_damaged_simulator_json(saved):
    meta = saved / saving.SAVE_FILE
    meta.write_text("{not json")
    with pytest.raises(ValueError, match="simulator.json is not valid JSON .* save the simulator"):
        UniversalSimulator.load(saved)
    meta.write_text("[1, 2]")
    with pytest.raises(ValueError, match="holds a JSON list, not an object"):
        UniversalSimulator.load(saved)


def test_wrong_format_keys_config_and_layout(tmp_path):
    def fresh(name):
        return _u("attention").save(tmp_path / name)

    path = fresh("format")
    _edit_meta(path, format="attnsim-simulator/0")
    with pytest.raises(ValueError, match="has format 'attnsim-simulator/0', expected"):
        UniversalSimulator.load(path)
    path = fresh("keys")
    _edit_meta(path, extra=1)
    with pytest.raises(ValueError, match="has the keys .*'extra'.*, expected"):
        UniversalSimulator.load(path)
    path = fresh("config")
    cfg = _u("attention").config.to_json()
    _edit_meta(path, config={**cfg, "maps": "tanh"})
    with pytest.raises(ValueError, match=r"invalid 'config' \(maps must be 'native' or 'relu'"):
        UniversalSimulator.load(path)
    path = fresh("layout")
    _edit_meta(path, layout={"N": 9})
    with pytest.raises(ValueError, match="has the layout .* but its config gives"):
        UniversalSimulator.load(path)
    path = fresh("seconds")
    _edit_meta(path, build_seconds=-1)
    with pytest.raises(ValueError, match="has build_seconds -1, expected a number >= 0"):
        UniversalSimulator.load(path)


def test_mixed_saves_are_refused(tmp_path):
    """simulator.json of one build beside the model of another."""
    path = _u("attention").save(tmp_path / "a")
    other = universal.build(2, 2, 1).save(tmp_path / "b")
    for name in ("model.json", "model.safetensors"):
        shutil.copy(other / name, path / name)
    with pytest.raises(ValueError, match="does not fit simulator.json .* mixes files of two"):
        UniversalSimulator.load(path)


def test_save_onto_a_file_is_refused(tmp_path):
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file; UniversalSimulator.save writes"):
        _u("attention").save(file)
