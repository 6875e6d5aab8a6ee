"""Checkpoints: safetensors weights + JSON metadata, a bitwise round trip, no code on load."""

from __future__ import annotations

import json
import pickletools
import random

import pytest
import torch
from safetensors.torch import load_file

from attnsim import library, rasp
from attnsim.compiler import compile_program
from attnsim.model.compiled import CompiledModel

LETTERS = ["a", "b", "c", "d"]


def _programs():
    tokens = rasp.numerical(rasp.tokens)
    prevs = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ)
    return {
        "hist": (
            library.make_hist(),
            LETTERS,
            lambda rng, n: [rng.choice(LETTERS) for _ in range(n)],
        ),
        "shuffle_dyck": (
            library.make_shuffle_dyck(["()", "{}"]),
            ["(", ")", "{", "}"],
            lambda rng, n: [rng.choice("(){}") for _ in range(n)],
        ),
        "real": (
            rasp.exp(tokens) / rasp.SumAggregate(prevs, rasp.exp(tokens)),
            None,
            lambda rng, n: [rng.uniform(-2, 2) for _ in range(n)],
        ),
        "guarded": (
            rasp.numerical(rasp.Aggregate(rasp.Select(tokens, tokens, rasp.Comparison.EQ), tokens)),
            None,
            lambda rng, n: [float(rng.randint(0, 3)) for _ in range(n)],
        ),
    }


PROGRAMS = _programs()


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_save_load_is_a_bitwise_round_trip(name, tmp_path):
    program, vocab, draw = PROGRAMS[name]
    model = compile_program(program, vocab=vocab, max_seq_len=6, attention="softmax")
    model.save(tmp_path)
    loaded = CompiledModel.load(tmp_path)

    before, after = model.model.state_dict(), loaded.model.state_dict()
    assert list(before) == list(after)
    for key in before:
        assert before[key].dtype == after[key].dtype, key
        assert torch.equal(before[key], after[key]), key
    assert loaded.config == model.config
    assert loaded.residual == model.residual
    assert loaded.output == model.output
    assert loaded.guards == model.guards
    assert loaded.report().to_dict() == model.report().to_dict()

    rng = random.Random(0)
    batch = [draw(rng, 6) for _ in range(5)]
    out_before, out_after = model.run(batch), loaded.run(batch)
    assert out_before == out_after  # bitwise: same floats, same categories
    expected = rasp.evaluate(program, batch)
    for got_row, exp_row in zip(out_after, expected):
        for g, e in zip(got_row, exp_row):
            assert g == e if not isinstance(e, float) else abs(g - e) <= 1e-9 * max(1, abs(e))

    ids, vals = model.encode(batch)
    assert torch.equal(model(ids, vals), loaded(ids, vals))


def test_guards_still_fire_after_loading(tmp_path):
    program, vocab, _ = PROGRAMS["guarded"]
    compile_program(program, vocab=vocab, max_seq_len=4).save(tmp_path)
    loaded = CompiledModel.load(tmp_path)
    with pytest.raises(ValueError, match="run-time check failed"):
        loaded.run([0.5, 1.0])


def test_files_are_json_and_safetensors_without_pickle(tmp_path):
    program, vocab, _ = PROGRAMS["shuffle_dyck"]
    model = compile_program(program, vocab=vocab, max_seq_len=6)
    model.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.json", "model.safetensors"]

    meta = json.loads((tmp_path / "model.json").read_text())
    assert meta["format"] == "attnsim-compiled-model/1"
    assert meta["vocab"] == vocab
    assert meta["residual"] == list(model.residual)

    # safetensors: an 8-byte little-endian header length, a JSON header, then raw bytes
    raw = (tmp_path / "model.safetensors").read_bytes()
    header_len = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + header_len])
    patterns = {k for k in header if k.startswith("head_patterns.")}  # model.pattern_store
    assert patterns and len(meta["head_patterns"]) == model.config.n_layers
    assert set(header) - {"__metadata__"} - patterns == set(model.model.state_dict())
    weights = load_file(str(tmp_path / "model.safetensors"))
    for key, tensor in model.model.state_dict().items():
        assert torch.equal(weights[key], tensor)

    # no pickle anywhere: pickle streams start with the PROTO opcode (0x80) and parse as
    # opcodes; neither file does
    for path in tmp_path.iterdir():
        data = path.read_bytes()
        assert not data.startswith(b"\x80"), path
        with pytest.raises(Exception):  # noqa: B017 - any parse failure means "not pickle"
            list(pickletools.genops(data))


def test_loading_runs_no_code(tmp_path, monkeypatch):
    import pickle

    compile_program(library.make_hist(), vocab=LETTERS, max_seq_len=4).save(tmp_path)

    def refuse(*args, **kwargs):
        raise AssertionError("CompiledModel.load used pickle")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    loaded = CompiledModel.load(tmp_path)
    assert loaded.run(["a", "b", "a"]) == [2, 1, 2]


def test_missing_directory_or_json(tmp_path):
    with pytest.raises(
        FileNotFoundError, match=r"no model\.json in .*expected a saved CompiledModel"
    ):
        CompiledModel.load(tmp_path / "nowhere")
    compile_program(library.make_hist(), vocab=LETTERS, max_seq_len=4).save(tmp_path)
    (tmp_path / "model.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"no model\.json in"):
        CompiledModel.load(tmp_path)


def test_missing_weights_file(tmp_path):
    compile_program(library.make_hist(), vocab=LETTERS, max_seq_len=4).save(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"model\.safetensors"):
        CompiledModel.load(tmp_path)


def test_wrong_format_tag(tmp_path):
    compile_program(library.make_hist(), vocab=LETTERS, max_seq_len=4).save(tmp_path)
    meta = json.loads((tmp_path / "model.json").read_text())
    meta["format"] = "something-else/9"
    (tmp_path / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"is not an attnsim compiled model"):
        CompiledModel.load(tmp_path)


def test_corrupted_json(tmp_path):
    compile_program(library.make_hist(), vocab=LETTERS, max_seq_len=4).save(tmp_path)
    (tmp_path / "model.json").write_text('{"format": "attnsim-compiled-model/1", "config": ')
    with pytest.raises(ValueError, match=r"model\.json is not valid JSON .* save the model again"):
        CompiledModel.load(tmp_path)


def test_corrupted_weights(tmp_path):
    compile_program(library.make_hist(), vocab=LETTERS, max_seq_len=4).save(tmp_path)
    path = tmp_path / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-16])  # truncated
    with pytest.raises(ValueError, match=r"model\.safetensors cannot be read .* save the model"):
        CompiledModel.load(tmp_path)


def test_weights_of_another_model(tmp_path):
    small = compile_program(library.make_hist(), vocab=LETTERS, max_seq_len=4)
    big = compile_program(library.make_reverse(rasp.tokens), vocab=LETTERS, max_seq_len=6)
    small.save(tmp_path / "small")
    big.save(tmp_path / "big")
    (tmp_path / "small" / "model.safetensors").write_bytes(
        (tmp_path / "big" / "model.safetensors").read_bytes()
    )
    with pytest.raises((ValueError, RuntimeError), match=r"model\.safetensors|size mismatch"):
        CompiledModel.load(tmp_path / "small")


def test_per_layer_head_shapes_round_trip_and_validate(tmp_path):
    """Layers store only their own heads (and bilinear units); a checkpoint keeps the shapes,
    and a config without them (an older save) means the same shape in every layer."""
    from attnsim.model.config import ModelConfig

    m = compile_program(library.make_reverse(rasp.tokens), vocab=list("abc"), max_seq_len=5)
    cfg = m.config
    assert cfg.head_shapes is not None
    shapes = [tuple(b.attn.W_Q.shape[::2]) for b in m.model.blocks]
    assert shapes == [tuple(s) for s in cfg.head_shapes]
    assert all(b.attn.W_O.shape[:2] == s for b, s in zip(m.model.blocks, shapes))
    back = CompiledModel.load(m.save(tmp_path / "rev"))
    assert back.config.head_shapes == cfg.head_shapes
    assert back.run(list("abca")) == m.run(list("abca")) == list("acba")
    base = dict(n_layers=2, d_model=2, n_heads=2, d_head=3, d_mlp=0, d_bilinear=2, n_ctx=3,
                d_vocab=2)  # fmt: skip
    for bad in ({"head_shapes": ((2, 3),)}, {"head_shapes": ((3, 1), (0, 0))},
                {"bilinear_widths": (1, 3)}, {"bilinear_widths": (1,)}):  # fmt: skip
        with pytest.raises(ValueError, match="for each of the 2 layers"):
            ModelConfig(**base, **bad)
    old = ModelConfig(**base).to_json()
    assert "head_shapes" not in old and ModelConfig.from_json(old).head_shape(1) == (2, 3)
    ok = ModelConfig(**base, head_shapes=((2, 1), (0, 0)), bilinear_widths=(2, 0))
    assert ModelConfig.from_json(ok.to_json()) == ok
