"""docs/benchmarks.md reports device figures only from a run on a GPU (render_docs's
device_check section), read from the results the script wrote."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _render_docs():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import render_docs
    finally:
        sys.path.pop(0)
    return render_docs


def _result(device: str) -> dict:
    program = {
        "program": "hist",
        "length": 6,
        "batch": 8,
        "device": device,
        "outputs_equal_interpreter": True,
        "cpu_outputs_equal_interpreter": True,
        "max_stream_difference_vs_cpu_plan": 0.0,
        "device_seconds": 0.002,
        "cpu_plan_seconds": 0.004,
    }
    u = {
        "n": 4,
        "d": 4,
        "device": device,
        "max_error_vs_reference": 1e-16,
        "max_difference_vs_cpu": 0.0,
        "device_seconds": 0.01,
        "cpu_plan_seconds": 0.02,
    }
    return {"machine": {"torch": "2.x"}, "programs": [program], "u": u}


def test_a_cpu_smoke_run_reports_no_device_figures():
    text = _render_docs().device_check(_result("cpu"))
    assert "no device figures are reported" in text and "| hist |" not in text


def test_a_gpu_run_reports_its_figures():
    text = _render_docs().device_check(_result("cuda:0"))
    assert "| hist | yes | 0 | 2 | 4 |" in text and "| (4, 4, 1) |" in text


def test_the_committed_device_results_are_a_gpu_run():
    data = json.loads((ROOT / "benchmarks/results/device_check.json").read_text())
    assert all(r["device"].startswith("cuda") for r in data["programs"])
    assert all(r["outputs_equal_interpreter"] for r in data["programs"])
    assert data["u"]["max_error_vs_reference"] < 1e-12
