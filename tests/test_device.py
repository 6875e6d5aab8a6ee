"""Models follow their device: the definition allocates on the model's device and dtype
(source scan of the modules it runs), the optimising executors refuse another device
clearly, and benchmarks/device_check.py runs (here on CPU with the device passed
explicitly: no GPU is assumed)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch

from attnsim import compile_program, library, rasp

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "attnsim" / "model"
# the modules the definition (Transformer.forward, executor "dense" or another device) runs
DEFINITION = ("transformer.py", "stream.py", "projection.py", "hard.py", "plan_static.py")
ALLOCATION = re.compile(r"torch\.(zeros|ones|full|empty|arange|eye|rand|randn|randint)\(")


def _calls(text: str):
    """Each allocation call's text (up to its closing parenthesis)."""
    for m in ALLOCATION.finditer(text):
        depth, i = 0, m.end() - 1
        while True:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            if depth == 0:
                break
            i += 1
        line = text.count("\n", 0, m.start()) + 1
        yield line, text[m.start() : i + 1]


@pytest.mark.parametrize("name", DEFINITION)
def test_the_definition_allocates_on_the_models_device(name):
    text = (SRC / name).read_text()
    lines = text.splitlines()
    missing = []
    for line, call in _calls(text):
        source = lines[line - 1].strip()
        if source.startswith((">>>", "...", "#")) or "``torch." in source:
            continue  # examples and prose
        if "def _param" in lines[line - 2]:
            continue  # parameters are made on the default device and move with .to()
        if "device=" not in call:
            missing.append(f"{name}:{line}: {call}")
    assert not missing, "allocations without a device:\n" + "\n".join(missing)


def test_the_optimising_executors_refuse_another_device():
    m = compile_program(library.make_reverse(rasp.tokens), vocab="ab", max_seq_len=4)
    ids, vals = m.encode([list("abab")])
    m.model.to("meta")  # another device, without a GPU: its tensors hold no values
    assert m.model.W_E.device.type == "meta"
    for executor in ("plan", "fused"):
        m.executor = executor
        with pytest.raises(ValueError, match=f"executor='{executor}' runs on CPU only"):
            m.runtime(ids, vals)


def test_device_check_runs_on_cpu_and_agrees(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import device_check
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    out = tmp_path / "device.json"
    assert (
        device_check.main(["--device", "cpu", "--length", "6", "--batch", "8", "--out", str(out)])
        == 0
    )
    got = json.loads(out.read_text())
    assert all(r["outputs_equal_interpreter"] for r in got["programs"])
    assert all(r["max_stream_difference_vs_cpu_plan"] < 1e-9 for r in got["programs"])
    assert got["u"]["max_error_vs_reference"] < 1e-12
    assert "no GPU here" in capsys.readouterr().out
    assert device_check.main(["--device", "nosuchdevice", "--out", str(out)]) == 2


def test_a_model_moved_back_and_forth_still_runs():
    m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    want = m.run(list("abba"))
    m.model.to("meta").to_empty(device="cpu")  # values are lost on meta: load them again
    m.model.load_state_dict(
        compile_program(library.make_hist(), vocab="ab", max_seq_len=4).model.state_dict()
    )
    assert m.model.W_E.device == torch.device("cpu")
    assert m.run(list("abba")) == want
