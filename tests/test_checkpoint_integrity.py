"""Checkpoints and saved simulators know their own weights and tables.

``model.json`` records a digest of every table it holds and of every tensor of
``model.safetensors``; ``simulator.json`` one of its own tables and of the ``model.json``
beside it. Each test edits one tensor or one table of a saved directory (or mixes the files
of two saves) and expects a :class:`DamagedCheckpointError` that names what changed; the
oracle of the unedited round trip is the interpreter and the original model.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from collections.abc import Callable

import pytest
import torch
from safetensors.torch import load_file, save_file

from attnsim import rasp
from attnsim.compiler import compile_program
from attnsim.model import onnx_export
from attnsim.model.checkpoint import DamagedCheckpointError
from attnsim.model.compiled import CompiledModel
from attnsim.simulator import reference, saving, universal
from attnsim.simulator.universal import UniversalSimulator

F64 = torch.float64
VOCAB = ["a", "b", "c"]


def _swap_map(table: dict) -> rasp.SOp:
    return rasp.Map(lambda x: table[x], rasp.tokens).named("swap")


def _guarded() -> rasp.SOp:
    tokens = rasp.numerical(rasp.tokens)
    return rasp.numerical(rasp.Aggregate(rasp.Select(tokens, tokens, rasp.Comparison.EQ), tokens))


def _edited(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor with one entry changed, finite and of the same dtype and shape."""
    out = tensor.clone()
    flat = out.view(-1)
    if out.dtype == torch.int64:  # a sparse coordinate: another coordinate, within range
        flat[0] = 1 if int(flat[0]) == 0 else 0
    elif bool((flat != 0).any()):
        i = int(flat.abs().argmax())
        flat[i] = flat[i] * (1 + 2.0**-10)
    else:
        flat[0] = 0.5
    assert not torch.equal(out, tensor)
    return out


def _tensor_cases(path) -> list[str]:
    """Every tensor of the weights file that has an entry to edit (an empty one has only its
    shape, which the config decides and loading checks)."""
    return sorted(k for k, t in load_file(str(path / "model.safetensors")).items() if t.numel())


def _edit_tensor(path, name: str) -> None:
    state = load_file(str(path / "model.safetensors"))
    state[name] = _edited(state[name])
    save_file(state, str(path / "model.safetensors"))


def _flip(key: str) -> Callable[[dict], None]:
    def change(meta: dict) -> None:
        meta[key] = not meta[key]

    return change


def _reverse(*keys: str) -> Callable[[dict], None]:
    def change(meta: dict) -> None:
        d = meta
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = d[keys[-1]][::-1]

    return change


def _vocab(meta: dict) -> None:
    meta["vocab"] = ["x"] if meta["vocab"] is None else meta["vocab"][::-1]


def _output(meta: dict) -> None:
    out = meta["output"]
    if len(out["values"]) > 1:
        out["values"] = out["values"][::-1]  # the edit: wrong tokens decoded
    else:
        out["form"] = [[d, 2 * w] for d, w in out["form"]]


def _config(meta: dict) -> None:
    meta["config"]["causal"] = not meta["config"]["causal"]


def _guards(meta: dict) -> None:
    if meta["guards"]:
        meta["guards"][0]["label"] += "!"
    else:  # a model without run-time checks gets one
        meta["guards"].append(
            {"label": "x", "form": [], "stage": 0, "allowed": None, "integer": True}
        )


def _report(meta: dict) -> None:
    meta["report"]["name"] = "another program"


def _plan(meta: dict) -> None:
    static = meta["plan"]["static_heads"]
    meta["plan"]["static_heads"] = [[] if heads else [0] for heads in static]


def _digest(meta: dict) -> None:
    old = meta["digest"]["tables"]["vocab"]
    meta["digest"]["tables"]["vocab"] = ("0" if old[0] != "0" else "1") + old[1:]


def _max_seq_len(meta: dict) -> None:
    meta["max_seq_len"] += 1


def _storage(meta: dict) -> None:
    layer = meta["storage"]["layers"][0]
    layer["n_heads"] = 1 - min(layer["n_heads"], 1)


def _head_patterns(meta: dict) -> None:
    entry = next(e for layer in meta["head_patterns"] for e in layer if e is not None)
    entry["mode"] = "width" if entry["mode"] == "mean" else "mean"


# every table of model.json -> (an edit, a pattern of the refusal). The edits that pass the
# JSON's own checks must be caught by the digest, which names the table.
TABLE_EDITS: dict[str, tuple[Callable[[dict], None], str]] = {
    "format": (lambda m: m.update(format="attnsim-compiled-model/0"), "not an attnsim compiled"),
    "config": (_config, r"the model config \('config'\): not as saved"),
    "residual": (_reverse("residual"), r"the residual directions \('residual'\): not as saved"),
    "vocab": (_vocab, r"the vocabulary \('vocab'\): not as saved"),
    "numerical_tokens": (_flip("numerical_tokens"), "disagrees with its config"),
    "max_seq_len": (_max_seq_len, "has max_seq_len="),
    "fixed_length": (_flip("fixed_length"), r"the fixed-length flag \('fixed_length'\): not as"),
    "output": (_output, r"the output decoding \('output'\): not as saved"),
    "guards": (_guards, r"the run-time checks \('guards'\): not as saved"),
    "report": (_report, r"the report \('report'\): not as saved"),
    "plan": (_plan, r"the execution plan \('plan'\): not as saved"),
    "storage": (_storage, r"'storage|the sparse storage layout \('storage'\): not as saved"),
    "digest": (_digest, r"the vocabulary \('vocab'\): not as saved"),
    "head_patterns": (_head_patterns, r"the heads' patterns \('head_patterns'\): not as saved"),
}

MODELS = {
    "swap": (lambda: _swap_map({"a": "b", "b": "c", "c": "a"}), VOCAB, ["a", "c", "b", "b"]),
    "guarded": (_guarded, None, [1.0, 2.0, 1.0]),
    "sparse": (lambda: _swap_map({"a": "c", "b": "a", "c": "b"}), VOCAB, ["c", "a", "b"]),
}


@pytest.fixture(scope="module", params=list(MODELS))
def compiled(request):
    factory, vocab, xs = MODELS[request.param]
    storage = "sparse" if request.param == "sparse" else "dense"
    program = factory()
    model = compile_program(program, vocab=vocab, max_seq_len=4, storage=storage)
    return request.param, model, program, xs


def _save(model: CompiledModel, tmp_path, name: str = "m"):
    return model.save(tmp_path / name)


def test_an_unedited_round_trip_gives_the_original_outputs(compiled, tmp_path):
    _, model, program, xs = compiled
    path = _save(model, tmp_path)
    meta = json.loads((path / "model.json").read_text())
    assert set(meta["digest"]) == {"tables", "tensors"}
    assert set(meta["digest"]["tables"]) == set(meta) - {"digest"}
    assert set(meta["digest"]["tensors"]) == set(load_file(str(path / "model.safetensors")))
    loaded = CompiledModel.load(path)
    assert loaded.run(xs) == model.run(xs) == rasp.evaluate(program, xs)
    for name, t in model.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], t)


def test_every_edited_tensor_is_refused(compiled, tmp_path):
    _, model, _, _ = compiled
    path = _save(model, tmp_path)
    names = _tensor_cases(path)
    assert len(names) >= 5
    for name in names:
        backup = (path / "model.safetensors").read_bytes()
        _edit_tensor(path, name)
        with pytest.raises(DamagedCheckpointError) as info:
            CompiledModel.load(path)
        message = str(info.value)
        # a coordinate moved may break the sparse layout's own checks first; a weight is named
        assert (
            repr(name) in message
            and "not as saved" in message
            or ("coordinate" in message or "position columns" in message)
        ), message
        (path / "model.safetensors").write_bytes(backup)
    assert CompiledModel.load(path).run(compiled[3]) == model.run(compiled[3])


def test_every_edited_table_is_refused(compiled, tmp_path):
    kind, model, _, xs = compiled
    path = _save(model, tmp_path)
    text = (path / "model.json").read_text()
    meta = json.loads(text)
    assert set(meta) <= set(TABLE_EDITS), "a table of model.json without an edit case here"
    for key in meta:
        change, pattern = TABLE_EDITS[key]
        edited = copy.deepcopy(meta)
        change(edited)
        assert edited != meta, key
        (path / "model.json").write_text(json.dumps(edited))
        with pytest.raises(DamagedCheckpointError, match=pattern):
            CompiledModel.load(path)
    (path / "model.json").write_text(text)
    assert CompiledModel.load(path).run(xs) == model.run(xs)


def test_weights_of_another_model_of_the_same_shape_are_refused(tmp_path):
    """The issue's case: two maps, one shape; one's weights beside the other's JSON."""
    a = compile_program(_swap_map({"a": "b", "b": "c", "c": "a"}), vocab=VOCAB, max_seq_len=3)
    b = compile_program(_swap_map({"a": "c", "b": "a", "c": "b"}), vocab=VOCAB, max_seq_len=3)
    assert a.config == b.config and a.residual == b.residual
    assert a.run(["a", "b"]) == ["b", "c"] and b.run(["a", "b"]) == ["c", "a"]
    pa, pb = _save(a, tmp_path, "a"), _save(b, tmp_path, "b")
    shutil.copy(pb / "model.safetensors", pa / "model.safetensors")
    with pytest.raises(
        DamagedCheckpointError,
        match=r"model\.safetensors, the tensor 'blocks\.0\.mlp\.W_out': not as saved",
    ) as info:
        CompiledModel.load(pa)
    assert "weights of another model" in str(info.value)
    assert "save the model again" in str(info.value)
    # the check can be skipped on purpose: then the file's weights run, as asked
    mixed = CompiledModel.load(pa, check=False)
    assert mixed.run(["a", "b"]) == ["c", "a"]


def test_a_checkpoint_without_a_digest_is_refused_until_loaded_unchecked(tmp_path):
    program = _swap_map({"a": "b", "b": "c", "c": "a"})
    model = compile_program(program, vocab=VOCAB, max_seq_len=3)
    path = _save(model, tmp_path)
    meta = json.loads((path / "model.json").read_text())
    del meta["digest"]  # as written before checkpoints carried one
    (path / "model.json").write_text(json.dumps(meta))
    with pytest.raises(
        DamagedCheckpointError,
        match=r"records no digest .* CompiledModel\.load\(path, check=False\) and save the model "
        "again",
    ):
        CompiledModel.load(path)
    old = CompiledModel.load(path, check=False)
    xs = ["c", "a", "b"]
    assert old.run(xs) == rasp.evaluate(program, xs)
    again = _save(old, tmp_path, "again")  # saved again: it records a digest and loads checked
    assert CompiledModel.load(again).run(xs) == rasp.evaluate(program, xs)
    for bad in ("no", 0, None):
        with pytest.raises(TypeError, match="check must be True or False, got"):
            CompiledModel.load(again, check=bad)


def test_the_onnx_fingerprint_is_unchanged_by_the_shared_digest():
    """fingerprint() now hashes through digests.digest: same scheme, so files exported
    before still match (recomputed here by hand from its documented parts)."""
    import hashlib

    model = compile_program(_swap_map({"a": "b", "b": "c", "c": "a"}), vocab=VOCAB, max_seq_len=3)
    h = hashlib.sha256(b"attnsim-model-fingerprint-v1")
    for part in (model.config, model.residual, model.vocab, model.numerical_tokens,
                 model.max_seq_len, model.fixed_length, model.output):  # fmt: skip
        h.update(repr(part).encode() + b"\0")
    for name, t in sorted(model.model.state_dict().items()):
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    assert onnx_export.fingerprint(model) == h.hexdigest()


# -- saved simulators ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def simulator():
    return universal.build(2, 2, 1)


def _sim_case():
    from attnsim.simulator import sampling

    X = torch.randn(2, 2, dtype=F64, generator=torch.Generator().manual_seed(1))
    return sampling.random_attention(1, 2, seed=3), X


def test_a_saved_simulator_round_trips_to_the_original(simulator, tmp_path):
    path = simulator.save(tmp_path / "U")
    meta = json.loads((path / saving.SAVE_FILE).read_text())
    assert set(meta["digest"]) == (set(meta) - {"digest"}) | {"model.json"}
    V = UniversalSimulator.load(path)
    target, X = _sim_case()
    assert torch.equal(V.simulate(target, X), simulator.simulate(target, X))
    assert torch.allclose(V.simulate(target, X), reference.attention(target, X), atol=1e-9)


def test_a_saved_simulator_refuses_every_edited_tensor(simulator, tmp_path):
    path = simulator.save(tmp_path / "U")
    names = _tensor_cases(path)
    backup = (path / "model.safetensors").read_bytes()
    for name in names:
        _edit_tensor(path, name)
        with pytest.raises(DamagedCheckpointError, match=re.escape(repr(name)) + ".*not as saved"):
            UniversalSimulator.load(path)
        (path / "model.safetensors").write_bytes(backup)
    UniversalSimulator.load(path)


SIM_EDITS: dict[str, tuple[Callable[[dict], None], str]] = {
    "format": (lambda m: m.update(format="attnsim-simulator/0"), "has format"),
    "config": (lambda m: m["config"].update(logit_bound=40.0), r"'config': not as saved"),
    "layout": (lambda m: m["layout"].update(N=9), "has the layout"),
    "build_seconds": (lambda m: m.update(build_seconds=m["build_seconds"] + 1), "'build_seconds'"),
    "digest": (lambda m: m["digest"].update(config="0" * 64), r"'config': not as saved"),
}


def test_a_saved_simulator_refuses_every_edited_table(simulator, tmp_path):
    path = simulator.save(tmp_path / "U")
    sim_file = path / saving.SAVE_FILE
    text = sim_file.read_text()
    meta = json.loads(text)
    assert set(meta) <= set(SIM_EDITS)
    for key in meta:
        change, pattern = SIM_EDITS[key]
        edited = copy.deepcopy(meta)
        change(edited)
        sim_file.write_text(json.dumps(edited))
        with pytest.raises(DamagedCheckpointError, match=pattern):
            UniversalSimulator.load(path)
    sim_file.write_text(text)
    # every table of the model.json beside it: refused by the compiled model's digest
    model_file = path / "model.json"
    model_text = model_file.read_text()
    model_meta = json.loads(model_text)
    for key in model_meta:
        change, pattern = TABLE_EDITS[key]
        edited = copy.deepcopy(model_meta)
        change(edited)
        model_file.write_text(json.dumps(edited))
        with pytest.raises(DamagedCheckpointError, match=pattern):
            UniversalSimulator.load(path)
    model_file.write_text(model_text)
    UniversalSimulator.load(path)


def test_a_compiled_model_saved_again_beside_it_is_refused(simulator, tmp_path):
    """model.json and model.safetensors agree with each other, but are not the model that
    was saved with simulator.json (the same layout, another function)."""
    path = simulator.save(tmp_path / "U")
    model = CompiledModel.load(path)
    with torch.no_grad():
        model.model.W_pos.mul_(1 + 2.0**-10)
    model.save(path)
    CompiledModel.load(path)  # a whole, consistent compiled model
    with pytest.raises(
        DamagedCheckpointError,
        match=r"'model\.json': not as saved .*the compiled model is not the one saved with it",
    ):
        UniversalSimulator.load(path)


def test_a_saved_simulator_without_a_digest_loads_only_unchecked(simulator, tmp_path):
    path = simulator.save(tmp_path / "U")
    sim_file = path / saving.SAVE_FILE
    meta = json.loads(sim_file.read_text())
    del meta["digest"]
    sim_file.write_text(json.dumps(meta))
    with pytest.raises(DamagedCheckpointError, match=r"records no digest .*check=False\) and save"):
        UniversalSimulator.load(path)
    V = UniversalSimulator.load(path, check=False)
    target, X = _sim_case()
    assert torch.equal(V.simulate(target, X), simulator.simulate(target, X))
    with pytest.raises(TypeError, match="check must be True or False, got str 'False'"):
        UniversalSimulator.load(path, check="False")
