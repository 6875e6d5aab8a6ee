"""The committed generated documents say what the current code generates.

Each document is generated again here and compared with the committed file, line by line,
except for the parts that are measured rather than computed (timings, and the sampled error
column of the matrix table). Regenerate with ``attnsim report all``, ``attnsim report
matrix`` and ``python benchmarks/render_docs.py`` when a test here fails.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _mask(text: str) -> list[str]:
    return [
        re.sub(r"Generated in [0-9.]+ s\.", "Generated in <time> s.", line)
        for line in text.splitlines()
    ]


def _table_rows(text: str, drop_last: int = 0) -> list[str]:
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = line.strip("|").split("|")
            rows.append("|".join(cells[: len(cells) - drop_last] if drop_last else cells))
    return rows


def test_report_md_matches_the_code(tmp_path):
    from attnsim.report import report_cli

    cost = ROOT / "benchmarks" / "results" / "simulator_cost.json"
    fresh = report_cli.write_report(tmp_path, cost_json=cost).read_text()
    committed = (DOCS / "report.md").read_text()
    assert _mask(committed) == _mask(fresh), (
        "docs/report.md is stale: run `attnsim report all` and commit the result"
    )


def test_matrix_resources_md_matches_the_code():
    from attnsim.report import matrix_table as mt

    fresh = mt.matrix_table(mt.matrix_rows(mt.DEFAULT_CASES, samples=2))
    committed = (DOCS / "matrix-resources.md").read_text()
    # the last column is the error measured on random samples; everything else is computed
    assert _table_rows(committed, drop_last=1) == _table_rows(fresh, drop_last=1), (
        "docs/matrix-resources.md is stale: run `attnsim report matrix` and commit the result"
    )


def test_benchmarks_md_matches_its_results():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import render_docs
    finally:
        sys.path.pop(0)
    assert render_docs.render() == (DOCS / "benchmarks.md").read_text(), (
        "docs/benchmarks.md is not what benchmarks/results/ renders to: run "
        "`python benchmarks/render_docs.py` and commit the result"
    )


def test_the_check_fails_on_an_edited_table():
    committed = (DOCS / "matrix-resources.md").read_text()
    edited = committed.replace("| transpose | 2x2 | 1 |", "| transpose | 2x2 | 2 |", 1)
    assert edited != committed
    assert _table_rows(committed, 1) != _table_rows(edited, 1)


def test_the_compression_table_is_the_results_file():
    import json

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import compress_sweep

    rows = json.loads((ROOT / compress_sweep.RESULTS).read_text())["rows"]
    text = (DOCS / "interpretability.md").read_text()
    written = text.split(compress_sweep.BEGIN, 1)[1].split(compress_sweep.END, 1)[0]
    assert written.strip() == compress_sweep.table(rows), (
        "docs/interpretability.md's compression table is stale: run "
        "`python benchmarks/compress_sweep.py --results benchmarks/results/compress_sweep.json "
        "--docs docs/interpretability.md`"
    )


def test_the_growth_laws_are_the_results_file():
    import json

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import growth_laws
    finally:
        sys.path.pop(0)
    text = (DOCS / "simulator.md").read_text()
    written = text.split(growth_laws.BEGIN, 1)[1].split(growth_laws.END, 1)[0]
    fresh = growth_laws.section(json.loads(growth_laws.RESULTS.read_text()))
    assert written.strip() == fresh.strip(), (
        "docs/simulator.md's growth laws are stale: run `python benchmarks/growth_laws.py`"
    )


def test_the_growth_laws_writer_refuses_a_document_without_markers(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import growth_laws
    finally:
        sys.path.pop(0)
    doc = tmp_path / "doc.md"
    doc.write_text("no markers here\n")
    import pytest

    with pytest.raises(ValueError, match="no growth-law markers"):
        growth_laws.write(doc, growth_laws.RESULTS)
    assert growth_laws.write(doc, tmp_path / "missing.json") is False
