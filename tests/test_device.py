"""Models follow their device: the definition and the executors allocate on the model's
device and dtype (a source scan of the modules they run, and every executor run with torch's
default device set to another), "auto" runs the definition off the CPU, and
benchmarks/device_check.py runs (here on CPU with the device passed explicitly: no GPU is
assumed)."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attnsim import compile_program, library, rasp, simulator
from attnsim.model.runtime import Runtime
from attnsim.simulator import reference, spec

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "attnsim" / "model"
# the modules the definition (Transformer.forward) and the executors of dense storage run
DEFINITION = ("transformer.py", "stream.py", "projection.py", "hard.py", "plan_static.py")
EXECUTORS = (
    "runtime.py",
    "fused.py",
    "plans.py",
    "plan_core.py",
    "plan_keys.py",
    "plan_steps.py",
    "plan_tables.py",
    "plan_costs.py",
)
ALLOCATION = re.compile(r"torch\.(zeros|ones|full|empty|arange|eye|rand|randn|randint|tensor)\(")


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


@pytest.mark.parametrize("name", DEFINITION + EXECUTORS)
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


def _on_another_default_device(fn):
    """``fn()`` with torch's default device set to "meta" (tensors there hold no values):
    an allocation that does not follow the model's device lands there, and mixing it with
    the model's CPU tensors, or reading its values, fails."""

    def run(*args, **kwargs):
        with torch.device("meta"):
            return fn(*args, **kwargs)

    return run


# what the plans run at length 40 (tables, one-sided heads, classes of rows, candidates,
# step tables, constant heads), and numerical tokens, causal and softmax models
PROGRAMS = {
    "hist": (library.make_hist, "abc", {}),
    "sort_unique": (lambda: library.make_sort_unique(rasp.tokens, rasp.tokens), "abc", {}),
    "sort_freq": (lambda: library.make_sort_freq(10), "abc", {}),
    "reverse": (lambda: library.make_reverse(rasp.tokens), "abc", {"causal": True}),
    "frac_prevs": (lambda: rasp.numerical(library.make_frac_prevs(rasp.tokens == "a")), "ab", {}),
    "shuffle_dyck": (lambda: library.make_shuffle_dyck(["()", "{}"]), "(){}", {}),
    "count_less_freq": (lambda: library.make_count_less_freq(2), "abc", {}),
    "softmax_hist": (library.make_hist, "abc", {"attention": "softmax"}),
    "length64": (library.make_length, "abc", {"dtype": "float64"}),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_executor_allocates_on_the_models_device(name):
    """Each executor runs with the default device set elsewhere and gives the
    definition's stream (to rounding): every tensor it builds or allocates follows the
    model's device, the plans' and the feature-major pass's alike."""
    make, vocab, options = PROGRAMS[name]
    short = ("fused", "auto", "plan") + (("jit",) if name == "hist" else ())  # jit: seconds
    for length, executors in ((6, short), (40, ("plan", "auto"))):
        if name == "sort_freq" and length == 40:
            continue  # (its selector table is refused there)
        m = compile_program(make(), vocab=vocab, max_seq_len=length, **options)
        rng = random.Random(0)
        xs = [[rng.choice(vocab) for _ in range(length)] for _ in range(24)]
        ids, vals = m.encode(xs)
        want = m.model(ids, vals)
        tol = 1e-12 if want.dtype == torch.float64 else 1e-5
        for executor in executors:
            rt = Runtime(m.model, executor)
            for _ in range(2):  # (again: what a runtime keeps between calls is reused)
                got = _on_another_default_device(rt)(ids, vals)
            assert got.device == want.device
            torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True)


def test_u_and_long_keys_follow_the_models_device():
    """U's plans (dense storage, both layouts) and the keys of a long gather are found and
    run with the default device set elsewhere."""
    from attnsim.model import plan_core

    for layout in ("scalar", "vector"):
        U = simulator.build(8, 8, 1, layout=layout, storage="dense")
        X = torch.tensor(np.random.default_rng(0).standard_normal((8, 8)), dtype=torch.float64)
        target = spec.random_attention(1, 8, seed=0, bias=True)
        want = reference.attention(target, X)
        U.model.executor = "plan"
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(Runtime, "__call__", _on_another_default_device(Runtime.__call__))
            got = U.simulate(target, X)
        assert float((got - want).abs().max()) < 1e-12
    n = 2100
    t = torch.arange(n, dtype=torch.float64)
    k = torch.stack([2 * t, -torch.ones(n, dtype=torch.float64), 1 - t * t], 1)
    s = torch.tensor([3.0, 700.0, 2000.0], dtype=torch.float64)
    q = torch.stack([s, s * s, torch.ones(3, dtype=torch.float64)], 1)
    cfg = U.model.model.cfg
    want = plan_core.select_keys(cfg, q, k)
    got = _on_another_default_device(plan_core.select_keys)(cfg, q, k)
    assert [g.tolist() for g in got[:2]] == [w.tolist() for w in want[:2]]
    assert got[1].tolist() == [3, 700, 2000]


def test_auto_runs_the_definition_off_the_cpu(monkeypatch):
    """Off the CPU, "auto" runs the definition (the cost table that chooses the other
    executors was measured on CPUs); the others run there when asked for."""
    m = compile_program(library.make_reverse(rasp.tokens), vocab="ab", max_seq_len=4)
    ids, vals = m.encode([list("abab")])
    m.model.to("meta")  # another device, without a GPU: its tensors hold no values
    called = []
    monkeypatch.setattr(
        type(m.model), "forward", lambda self, *a, **k: called.append(a) or "definition"
    )
    assert Runtime(m.model, "auto")(ids, vals) == "definition"
    assert called


def test_device_check_runs_on_cpu_and_agrees(tmp_path, capsys, uncompiled_jit):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import device_check
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    out = tmp_path / "device.json"
    assert (
        device_check.main(
            ["--device", "cpu", "--length", "6", "--batch", "8", "--programs", "hist,reverse"]
            + ["--out", str(out)]
        )
        == 0
    )
    assert [r["program"] for r in json.loads(out.read_text())["programs"]] == ["hist", "reverse"]
    got = json.loads(out.read_text())
    assert all(r["outputs_equal_interpreter"] for r in got["programs"])
    assert all(r["max_stream_difference_vs_cpu_plan"] < 1e-9 for r in got["programs"])
    assert got["u"]["max_error_vs_reference"] < 1e-12
    assert "no GPU here" in capsys.readouterr().out
    assert device_check.main(["--device", "nosuchdevice", "--out", str(out)]) == 2
    assert device_check.main(["--device", "cpu", "--programs", "hist,nosuch"]) == 2
    assert "--programs: nosuch; choose from reverse, hist" in capsys.readouterr().out


def test_a_model_moved_back_and_forth_still_runs():
    m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    want = m.run(list("abba"))
    m.model.to("meta").to_empty(device="cpu")  # values are lost on meta: load them again
    m.model.load_state_dict(
        compile_program(library.make_hist(), vocab="ab", max_seq_len=4).model.state_dict()
    )
    assert m.model.W_E.device == torch.device("cpu")
    assert m.run(list("abba")) == want


def test_sparse_storage_stays_on_the_cpu_and_says_so():
    m = compile_program(library.make_hist(), vocab="ab", max_seq_len=3, storage="sparse")
    assert m.model.to("cpu") is m.model and m.run(list("aba")) == [2, 1, 2]
    with pytest.raises(ValueError, match="sparse storage runs on the CPU only, not on cuda"):
        m.model.to("cuda")
    with pytest.raises(ValueError, match="not on meta"):
        m.model.to(torch.device("meta"))
    with pytest.raises(ValueError, match="keeps the dtype it was compiled in"):
        m.model.to(torch.float32)
    with pytest.raises(TypeError, match="takes a device"):
        m.model.to(3)
