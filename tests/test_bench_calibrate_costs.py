"""benchmarks/calibrate_costs.py: its break-even reading on sweeps with a known answer, a
quick run (both ways of each choice give the same values; the JSON as the docs read it)
and its docs section."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import calibrate_costs as cc  # noqa: E402
import render_docs  # noqa: E402

from attnsim.model import costs, fused  # noqa: E402


def _points(pairs):
    return [{"x": x, "below_s": a, "above_s": b} for x, (a, b) in pairs]


@pytest.mark.parametrize(
    ("pairs", "low", "high"),
    [
        ([(1, (1, 2)), (2, (1, 2)), (4, (3, 1)), (8, (5, 1))], 2, 4),  # a clean crossing
        ([(1, (1, 2)), (2, (3, 1)), (4, (1, 2)), (8, (5, 1))], 4, 8),  # noise: last win counts
        ([(1, (1, 2)), (2, (1, 2))], 2, None),  # the above way never wins
        ([(1, (2, 1)), (2, (2, 1))], None, 1),  # the above way always wins
    ],
)
def test_break_even_reads_where_each_way_wins(pairs, low, high):
    found = cc.break_even(_points(pairs))
    assert found == {"low_wins_to": low, "high_wins_from": high}


def test_a_value_is_consistent_only_between_the_measured_ways():
    found = {"low_wins_to": 12, "high_wins_from": 24}
    assert cc.consistent(12, found) and cc.consistent(16, found)
    assert not cc.consistent(8, found) and not cc.consistent(24, found)
    assert cc.consistent(1000, {"low_wins_to": 12, "high_wins_from": None})


def test_a_quick_run_writes_every_constant_and_the_rule(tmp_path):
    out = tmp_path / "calibrate.json"
    saved = fused.ONE_HOT_MIN_WIDTH, fused.ONE_HOT_VOCAB
    assert cc.main(["--quick", "--out", str(out), "--programs", "hist,shift_by"]) == 0
    assert (fused.ONE_HOT_MIN_WIDTH, fused.ONE_HOT_VOCAB) == saved  # restored
    data = json.loads(out.read_text())
    assert [c["constant"] for c in data["constants"]] == list(cc.SWEEPS)
    for c in data["constants"]:
        assert c["value"] == getattr(costs, c["constant"])
        assert len(c["points"]) == 2 and all(p["below_s"] > 0 < p["above_s"] for p in c["points"])
        assert c["consistent"] == cc.consistent(c["value"], c)
    assert {(r["program"], r["max_seq_len"]) for r in data["rule"]} == {
        ("hist", 5),
        ("shift_by", 5),
    }
    assert all(r["fused_s"] > 0 < r["plan_s"] for r in data["rule"])
    text = render_docs.calibrate_costs(data)
    assert "## The cost table on this machine" in text
    assert all(f"`{name}`" in text for name in cc.SWEEPS)
    assert "of 2 library settings" in text


def test_the_section_names_the_rule_misses():
    data = {
        "batch": 256,
        "positions": 6,
        "constants": [],
        "rule": [
            {"program": "a", "max_seq_len": 5, "fused_s": 1.0, "plan_s": 2.0, "rule_fused": True},
            {"program": "b", "max_seq_len": 5, "fused_s": 3.0, "plan_s": 1.0, "rule_fused": True},
        ],
    }
    text = render_docs.calibrate_costs(data)
    assert "on 1 of 2 library settings" in text and "at most 3 (b at 5)" in text
