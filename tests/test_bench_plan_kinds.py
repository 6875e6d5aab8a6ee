"""benchmarks/plan_kinds.py: which settings a kind pays on, a measured setting (every
runtime gives the definition's outputs; the JSON as the docs read it) and its docs
section."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import plan_kinds as pk  # noqa: E402
import render_docs  # noqa: E402

from attnsim import library  # noqa: E402
from attnsim.compiler import compile_program  # noqa: E402


def _row(setting, **ratios):
    return {
        "setting": setting,
        "ms": 2.0,
        "without": {k: {"ms": 2.0 * r, "ratio": r} for k, r in ratios.items()},
        "max_relative_error": 1e-16,
        "control_ratio": 1.01,
    }


def test_a_kind_pays_where_leaving_it_out_costs_at_least_the_factor():
    rows = [_row("a", x=pk.PAYS, y=1.0), _row("b", x=3.0, y=pk.PAYS * 0.99)]
    got = pk.summary(rows, ("x", "y"))
    assert got["x"] == {"pays_on": ["a", "b"], "most": 3.0, "most_on": "b"}
    assert got["y"]["pays_on"] == [] and got["y"]["most_on"] == "b"


def test_one_setting_is_measured_against_the_definition(monkeypatch):
    def make():
        m = compile_program(library.make_hist(), vocab="ab", max_seq_len=6)
        ids, vals = m.encode(["abab", "bbaa"])
        return m.model, ids, vals

    monkeypatch.setattr(pk, "SECONDS", 0.01)
    row = pk.measure("hist", make, ("table", "steps"), rounds=1)
    assert set(row["without"]) == {"table", "steps"}
    assert row["ms"] > 0 and all(v["ratio"] > 0 for v in row["without"].values())
    assert row["control_ratio"] > 0
    assert row["max_relative_error"] <= 1e-6  # float32: one rounding of the sums


def test_the_docs_section_reads_the_json():
    rows = [_row("hist at 40", table=2.0, side=1.0), _row("U(8, 8, 1) scalar", table=1.0, side=1.1)]
    data = {
        "kinds": ["table", "side"],
        "rows": rows,
        "pays": pk.PAYS,
        "rounds": 3,
        "summary": pk.summary(rows, ("table", "side")),
        "machine": {},
    }
    text = render_docs.plan_kinds(data)
    assert "| hist at 40 | 2 | 2.00x | 1.00x | 1.01x |" in text
    assert "between 1.01x and 1.01x" in text
    assert "`table`: at least 1.2x slower without it on 1 of 2 settings (hist at 40)" in text
    assert "Kinds that paid on no setting here: side." in text
