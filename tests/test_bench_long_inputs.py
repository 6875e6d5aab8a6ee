"""The long-input rows of benchmarks/simulator_layouts.py: a run in a child process reports
its answer, its error or its death (never hangs), an address-space limit is applied in the
child only, and the rows render into docs/benchmarks.md."""

from __future__ import annotations

import os
import resource
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import render_docs  # noqa: E402
import simulator_layouts as S  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork, /proc")


def _answer(x):
    return {"x": x, "pid": os.getpid()}


def _raises():
    raise RuntimeError("can't allocate memory")


def _dies():
    os._exit(3)


def _limited(limit):
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        bytearray(4 * limit)  # more than the limit allows
    except MemoryError:
        return {"ok": False, "error": "MemoryError"}
    return {"ok": True}


def test_a_child_reports_its_answer_its_error_or_its_death():
    got = S._in_child(_answer, 5)
    assert got["x"] == 5 and got["pid"] != os.getpid()
    err = S._in_child(_raises)
    assert err["ok"] is False and "RuntimeError: can't allocate memory" in err["error"]
    dead = S._in_child(_dies)
    assert dead["ok"] is False and dead["error"].startswith("the child process ended with code 3")
    killed = S._in_child(_killed)
    assert killed["ok"] is False
    assert killed["error"].startswith("the child process was killed by signal 9")


def _killed():
    os.kill(os.getpid(), signal.SIGKILL)


def test_the_address_limit_is_the_childs_only():
    before = resource.getrlimit(resource.RLIMIT_AS)
    assert S._in_child(_limited, 1 << 30) == {"ok": False, "error": "MemoryError"}
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    assert S._peak_virtual_mb() > 0


def _row(**extra):
    row = {
        "built": True,
        "tokens": 128,
        "sequence_length": 196608,
        "build_seconds": 150.0,
        "simulate_seconds": 80.0,
        "wall_ratio": 4.0e4,
        "error_vs_torch": 1.5e-15,
        "peak_rss_mb": 7000.0,
        "peak_virtual_mb": 19000.0,
        "saved_mb": 900.0,
        "load_seconds": 4.0,
    }
    return {**row, **extra}


def test_the_rows_render_with_the_address_check_result():
    base = {"results": [], "laws": {}, "machine": {}}
    ran = render_docs.simulator_layouts(
        {**base, "minilm_tokens": [_row(under_address_limit=True, address_limit_mb=14000.0)]}
    )
    assert "longer inputs" in ran and "196,608" in ran and "| ran |" in ran
    failed = render_docs.simulator_layouts(
        {
            **base,
            "minilm_tokens": [
                _row(
                    under_address_limit=False,
                    address_limit_mb=14000.0,
                    under_address_limit_error="OSError: [Errno 12] Cannot allocate memory",
                )
            ],
        }
    )
    assert "| failed |" in failed and "Cannot allocate memory" in failed
    refused = render_docs.simulator_layouts(
        {**base, "minilm_tokens": [{"built": False, "tokens": 512, "refusal": "too large"}]}
    )
    assert "On 512 tokens: not built (too large)." in refused


def test_a_size_whose_child_dies_raises_with_the_reason(monkeypatch):
    monkeypatch.setattr(S, "measure", lambda *a, **k: os._exit(3))  # (the forked child)
    with pytest.raises(S.ChildFailed, match="ended with code 3"):
        S.measure_apart("vector", 2, 2, 1, 8)


def test_add_merges_a_size_and_records_one_that_failed(monkeypatch, tmp_path):
    import json

    results = {
        "results": [
            {
                "layout": "vector",
                "d": d,
                "peak_rss_mb": 100.0 * d,
                "sequence_length": d,
                "d_model": d,
                "parameters": d,
                "nonzero_parameters": d,
                "build_seconds": 1.0,
                "simulate_seconds": 1.0,
                "peak_extra_mb": 1.0,
                "error_vs_torch": 0.0,
            }
            for d in (2, 4)
        ],
        "not_built": [
            {"layout": "vector", "d": 8, "reason": "old"},
            {"layout": "vector", "d": 16, "reason": "old"},
        ],
    }
    path = tmp_path / "layouts.json"
    path.write_text(json.dumps(results))

    def fake(layout, n, d, h, f, **options):
        if d == 16:
            raise S.ChildFailed("the child process was killed by signal 9")
        return {**results["results"][0], "d": d, "peak_rss_mb": 100.0 * d}

    monkeypatch.setattr(S, "measure_apart", fake)
    assert S.main(["--add", "vector:8", "--add", "vector:16", "--out", str(path)]) == 0
    out = json.loads(path.read_text())
    assert [r["d"] for r in out["results"]] == [2, 4, 8]
    (left,) = out["not_built"]
    assert left["d"] == 16 and left["reason"].startswith("tried: the child process was killed")
    for bad in (
        ["--add", "vector:5"],
        ["--add", "matrix:8"],
        ["--add", "vector:8", "--out", str(tmp_path / "none.json")],
    ):
        with pytest.raises(SystemExit):
            S.main(bad)
