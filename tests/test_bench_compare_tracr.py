"""The pure helpers of benchmarks/compare_tracr.py and its docs section (no tracr needed)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import compare_tracr as ct  # noqa: E402
import render_docs  # noqa: E402


def test_default_lengths_cover_every_program_and_long_ones_for_a_subset():
    for name in ct.PROGRAMS:
        lengths = [n for _, n in ct.settings(name, quick=False)]
        assert set(ct.LENGTHS) <= set(lengths)
        assert (80 in lengths) == (name in ct.LONG_DEFAULT)
        assert [n for _, n in ct.settings(name, quick=False, full=True)][-2:] == list(ct.LONG)
        assert len(ct.settings(name, quick=True)) == 2
    assert set(ct.LONG_DEFAULT) <= set(ct.PROGRAMS)


def test_distinct_inputs_get_a_vocabulary_as_long_as_the_sequence():
    vocab, n = ct.settings("sort_unique", quick=False)[-1]
    assert n == 160 and vocab == list(range(1, 161))
    assert all(sorted(row) == vocab for row in ct.inputs("sort_unique", vocab, n)[:3])


def test_correct_is_exact_for_categorical_and_within_tolerance_for_numerical():
    assert ct.correct(0.0, False) and not ct.correct(1 / 256, False)
    assert ct.correct(ct.NUMERICAL_TOL, True) and not ct.correct(2 * ct.NUMERICAL_TOL, True)
    assert ct.LADDER[0] == ct.DEFAULT_EXACTNESS and list(ct.LADDER) == sorted(ct.LADDER)


def _args(**kw):
    return argparse.Namespace(quick=kw.get("quick", True), full=False)


def _attnsim_line(name, n):
    return {
        "program": name,
        "max_seq_len": n,
        "attnsim": {
            "compile_cold_s": None,
            "compile_warm_s": 0.01,
            "d_model": 10,
            "layers": 2,
            "parameters": 100,
            "throughput_seq_s": 1000.0,
            "error": 0.0,
        },
    }


def _tracr(err, ex=100):
    return {
        "mlp_exactness": ex,
        "compile_cold_s": None,
        "compile_warm_s": 0.1,
        "d_model": 20,
        "layers": 2,
        "parameters": 200,
        "throughput_seq_s": 2000.0,
        "error": err,
    }


def test_merge_records_an_interrupted_search_with_the_rungs_it_tried():
    lines = [
        {"program": "length", "max_seq_len": 5, "tracr": _tracr(0.0)},
        {"program": "length", "max_seq_len": 5, "tracr_exact": {**_tracr(0.0), "tried": []}},
        {"program": "length", "max_seq_len": 10, "tracr": _tracr(1.0)},
        {"program": "length", "max_seq_len": 10, "tracr_exact_try": [200, 0.5, 0.1]},
    ]
    attnsim = ([_attnsim_line("length", 5), _attnsim_line("length", 10)], "")
    rows = ct.merge(["length"], _args(), attnsim, {"length": (lines, "CPU limit")})
    assert [r["max_seq_len"] for r in rows] == [5, 10]
    assert ct.exactness_label(rows[0]["tracr_exact"]) == "100"
    unfinished = rows[1]["tracr_exact"]
    assert unfinished["unfinished"] == "CPU limit"
    assert unfinished["tried"] == [[100, 1.0, 0.1], [200, 0.5, 0.1]]
    assert ct.exactness_label(unfinished) == "unfinished: wrong up to 200"


def test_merge_without_tracr_says_so():
    attnsim = ([_attnsim_line("hist", 5), _attnsim_line("hist", 10)], "")
    rows = ct.merge(["hist"], _args(), attnsim, {})
    assert all(r["tracr"] == {"skipped": ct.NO_TRACR} for r in rows)
    assert all(r["tracr_exact"] == {"skipped": ct.NO_TRACR} for r in rows)
    assert "hist" in ct.markdown(rows, "no tracr")


def _data():
    rows = []
    for n, err, exact in [
        (5, 0.0, {**_tracr(0.0), "tried": [[100, 0.0, 0.1]]}),
        (10, 1.0, {**_tracr(0.0, 500), "tried": [[100, 1.0, 0.1], [200, 1.0, 0.1]]}),
        (20, 1.0, {"none_correct_up_to": 100000, "why": "every rung", "tried": []}),
        (40, 1.0, {"unfinished": "CPU limit", "tried": [[100, 1.0, 0.1]]}),
    ]:
        rows.append(
            {
                **_attnsim_line("length", n),
                "setting": "conformance" if n == 5 else "sweep",
                "tracr": _tracr(err),
                "tracr_exact": exact,
            }
        )
    return {
        "tracr": True,
        "seconds": 10.0,
        "cpus": 2,
        "jobs": 2,
        "batch": 256,
        "cpu_limit_s": 120.0,
        "default_exactness": 100,
        "exactness_ladder": list(ct.LADDER),
        "numerical_tolerance": ct.NUMERICAL_TOL,
        "long_lengths": [80, 160],
        "long_programs": ["length"],
        "rows": rows,
    }


def test_docs_section_says_default_is_wrong_and_what_fixing_it_costs():
    text = render_docs.compare_tracr(_data())
    assert "is wrong at long lengths" in text
    assert "fixes 1 of them" in text and "length: 500 at 10" in text
    assert "none correct up to 100,000" in text
    assert "unfinished (wrong up to 100)" in text
    assert "Compared fairly" in text
    # one table row per setting, each with attnsim / default / fair values
    assert "| length | 10 | 0 | 1 | 500 | 0 | 0.01 / 0.1 / 0.1 |" in text


def test_docs_section_renders_a_run_without_tracr():
    data = _data()
    data["tracr"] = False
    for r in data["rows"]:
        r["tracr"] = {"skipped": ct.NO_TRACR}
        r["tracr_exact"] = {"skipped": ct.NO_TRACR}
    text = render_docs.compare_tracr(data)
    assert "tracr was not installed" in text and "is wrong at long lengths" not in text


def test_the_attnsim_worker_times_each_setting_twice_and_merge_keeps_the_faster(
    capsys, monkeypatch, tmp_path, uncompiled_jit
):
    import json

    monkeypatch.setattr(ct, "THROUGHPUT_S", 0.01)
    monkeypatch.setattr(ct, "PROBE_WAIT_S", 0.0)  # (a loaded test machine: no waiting)
    monkeypatch.setattr(ct, "TIMING_LOCK", tmp_path / ".lock")
    monkeypatch.setattr(ct, "RETIME", [])
    ct.attnsim_worker(["count"], True, False)
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    firsts = [x for x in lines if "attnsim" in x]
    again = [x for x in lines if "retime" in x and x["retime"][0] == "attnsim"]
    eager = [x for x in lines if "retime" in x and x["retime"][0] == "attnsim_eager"]
    assert [x["max_seq_len"] for x in again] == [x["max_seq_len"] for x in firsts] == [5, 10]
    assert all(x["retime"][1] > 0 for x in again + eager)
    # count at 5 and 10 runs feature-major: compiled (executor "jit"), the uncompiled
    # "auto" timed beside it, both timed again at the end
    assert all(x["attnsim"]["executor"] == "jit" and "eager_seq_s" in x["attnsim"] for x in firsts)
    assert [x["max_seq_len"] for x in eager] == [5, 10]
    timed = [x["attnsim"]["throughput_seq_s"] for x in firsts]  # (merge updates rows in place)
    timed_eager = [x["attnsim"]["eager_seq_s"] for x in firsts]
    args = argparse.Namespace(quick=True, full=False)
    rows = ct.merge(["count"], args, (lines, ""), {})
    for row, first, second, first_eager, second_eager in zip(
        rows, timed, again, timed_eager, eager
    ):
        rounds = row["attnsim"]["throughput_rounds"]
        assert rounds == [first, second["retime"][1]]
        assert row["attnsim"]["throughput_seq_s"] == max(rounds)
        assert row["attnsim"]["eager_rounds"] == [first_eager, second_eager["retime"][1]]
        assert row["attnsim"]["eager_seq_s"] == max(row["attnsim"]["eager_rounds"])
        assert row["attnsim"]["error"] == 0 and row["attnsim"]["jit_first_call_s"] > 0
        assert row["attnsim"]["jit_kept"] in ("feature-major", "plans")
