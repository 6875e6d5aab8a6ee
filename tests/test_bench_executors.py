"""benchmarks/executors.py: the ratios it summarises, one measured setting (every path,
the compiled definition too, gives the definition's outputs) and its docs section."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import executors as ex  # noqa: E402
import render_docs  # noqa: E402

from attnsim import library  # noqa: E402
from attnsim.compiler import compile_program  # noqa: E402

# torch's compiler writes C++ for the CPU: without a C++ compiler there is nothing to time
needs_cc = pytest.mark.skipif(
    not any(shutil.which(c) for c in ("g++", "c++", "clang++")), reason="no C++ compiler"
)


def _row(setting, plan, fused, jit, compiled):
    us = {"plan": plan, "fused": fused, "auto": fused, "jit": jit, "compiled definition": compiled}
    return {
        "setting": setting,
        "positions": 6,
        "us": us,
        "jit_kept": "feature-major",
        "first_call_s": {"jit": 2.0, "compiled definition": 3.0},
        "max_relative_error": dict.fromkeys(us, 1e-16),
    }


def test_the_summary_gives_each_ratio_least_median_and_most():
    rows = [_row("a", 4.0, 2.0, 1.0, 3.0), _row("b", 3.0, 3.0, 1.0, 9.0), _row("c", 5, 1, 2, 4)]
    got = ex.summary(rows)
    assert got["plan / fused"] == {"least": 1.0, "median": 2.0, "most": 5.0, "least_on": "b"}
    assert got["compiled definition / jit"]["least"] == 2.0
    assert got["compiled definition / jit"]["least_on"] == "c"
    assert got["compiled definition / jit"]["most"] == 9.0


def _length():
    m = compile_program(library.make_length(), vocab="ab", max_seq_len=3)
    ids, vals = m.encode(["aba", "bba"])
    return m.model, ids, vals


@pytest.mark.slow  # torch.compile's first graphs in a process: about 30 s
@needs_cc
def test_one_setting_is_measured_against_the_definition(monkeypatch):
    monkeypatch.setattr(ex, "SECONDS", 0.01)
    row = ex.measure("length at 3", _length, rounds=1)
    assert set(row["us"]) == set(ex.PATHS) and all(v > 0 for v in row["us"].values())
    assert row["jit_kept"] in ("feature-major", "plans")
    # every path, the compiled definition too, gives the definition's outputs (float32:
    # one rounding of the sums)
    assert set(row["max_relative_error"]) == set(ex.PATHS)
    assert max(row["max_relative_error"].values()) <= 1e-6


def test_the_docs_section_reads_the_json():
    rows = [_row("hist at 5", 400.0, 200.0, 100.0, 600.0), _row("sort at 20", 300, 900, 250, 2500)]
    data = {"paths": list(ex.PATHS), "rows": rows, "summary": ex.summary(rows), "torch": "2.x"}
    text = render_docs.executors(data)
    assert "| hist at 5 | 400 | 200 | 200 | 100 | 600 | feature-major | 2.00x | 6.00x |" in text
    assert "| sort at 20 | 300 | 900 | 900 | 250 | 2,500 | feature-major | 0.33x | 10.00x |" in text
    assert "- `compiled definition / jit`: 6.00x to 10.00x" in text
    assert "compiled once per setting: 3 to 3 s" in text
