"""The growth laws of U in docs/simulator.md, from benchmarks/results/simulator_layouts.json.

:func:`section` turns the results of ``simulator_layouts.py`` into the text between the
markers ``BEGIN`` and ``END`` of docs/simulator.md: how each cost grows with n = d (over
every size built, and between the two largest), with the input length at the MiniLM width,
and the memory a long input takes (resident and address space), beside what the paper
states. ``render_docs.py`` writes it; tests/test_generated_docs.py checks it.

Run: ``python benchmarks/growth_laws.py [--results FILE] [--docs FILE]``.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from _common import fit_exponent

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "simulator_layouts.json"
DOC = ROOT / "docs" / "simulator.md"
BEGIN = "<!-- growth laws: written by benchmarks/growth_laws.py from simulator_layouts.json -->"
END = "<!-- end of the growth laws -->"

# (results key, what it is, what the paper says of it; paper-notes.md, section 5)
QUANTITIES = [
    ("sequence_length", "sequence length", "n d + 2 d^2 scalars for the input (k = 2)"),
    ("d_model", "residual width (d_model)", "not stated (grows with the s-ops alive at once)"),
    ("layers", "depth (layers)", "O(1): about 8 to 13 layers"),
    ("nonzero_parameters", "non-zero weights", "not stated"),
    ("build_seconds", "build time", "not stated (no weights were built)"),
    ("simulate_seconds", "simulate time", "not stated"),
    ("peak_extra_mb", "memory while simulating", "not stated"),
]


def _slope(xs: list[float], ys: list[float]) -> float:
    """:func:`_common.fit_exponent` with non-positive values floored (a zero figure)."""
    return fit_exponent(xs, [max(y, 1e-12) for y in ys])


def _k(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.2f}"


def _law_rows(rows: list[dict]) -> tuple[list[str], str]:
    by = {
        lay: sorted((r for r in rows if r["layout"] == lay), key=lambda r: r["d"])
        for lay in ("scalar", "vector")
    }
    sizes = {lay: [r["d"] for r in sel] for lay, sel in by.items() if len(sel) >= 2}
    out = [
        "| quantity | scalar: all sizes | scalar: two largest | vector: all sizes | "
        "vector: two largest | the paper |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for key, name, paper in QUANTITIES:
        cells = []
        for lay in ("scalar", "vector"):
            sel = by[lay]
            if len(sel) < 2:
                cells += ["-", "-"]
                continue
            ds, ys = [r["d"] for r in sel], [r[key] for r in sel]
            if key == "layers" and len(set(ys)) == 1:
                cells += [f"{ys[0]} at every size", "0"]
                continue
            cells += [_k(_slope(ds, ys)), _k(_slope(ds[-2:], ys[-2:]))]
        out.append(f"| {name} | " + " | ".join(cells) + f" | {paper} |")
    span = "; ".join(f"{lay}: n = d = {', '.join(str(d) for d in ds)}" for lay, ds in sizes.items())
    return out, span


def _tokens(data: dict) -> list[str]:
    """The MiniLM width (d = 384, 12 heads, feed-forward 1,536) on 12 and on more tokens."""
    short = data.get("minilm") or {}
    longs = [r for r in data.get("minilm_tokens", []) if r.get("built")]
    if not short.get("built") or not longs:
        return []
    out = [
        "",
        "With the input length alone growing, at the all-MiniLM-L6-v2 width (vector layout; "
        "k between 12 tokens and the longest built, y ~ tokens^k):",
        "",
        "| tokens | positions | non-zero weights | build s | simulate s | peak resident GiB "
        "| peak address space GiB |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {short['n']} | {short['sequence_length']:,} | {short['nonzero_parameters']:,} | "
        f"{short['build_seconds']:.1f} | {short['simulate_seconds']:.1f} | "
        f"{short['peak_rss_mb'] / 1024:.1f} | - |",
    ]
    for r in longs:
        virt = r.get("peak_virtual_mb")
        out.append(
            f"| {r['tokens']} | {r['sequence_length']:,} | {r['nonzero_parameters']:,} | "
            f"{r['build_seconds']:.1f} | {r['simulate_seconds']:.1f} | "
            f"{r['peak_rss_mb'] / 1024:.1f} | {'-' if virt is None else f'{virt / 1024:.1f}'} |"
        )
    last = longs[-1]
    ratio = [short["n"], last["tokens"]]
    ks = {
        name: _slope(ratio, [short[a], last[b]])
        for name, a, b in [
            ("positions", "sequence_length", "sequence_length"),
            ("non-zero weights", "nonzero_parameters", "nonzero_parameters"),
            ("build time", "build_seconds", "build_seconds"),
            ("simulate time", "simulate_seconds", "simulate_seconds"),
            ("peak resident memory", "peak_rss_mb", "peak_rss_mb"),
        ]
    }
    out += ["", "k: " + ", ".join(f"{name} {_k(k)}" for name, k in ks.items()) + "."]
    for r in longs:
        if "under_address_limit" in r:
            verdict = (
                "ran" if r["under_address_limit"] else f"failed ({r['under_address_limit_error']})"
            )
            out.append(
                f"On {r['tokens']} tokens, in a process whose address space was limited to "
                f"twice that run's resident peak ({r['address_limit_mb'] / 1024:.1f} GiB), "
                f"the same build and simulation {verdict}."
            )
    refused = [r for r in data.get("minilm_tokens", []) if not r.get("built")]
    for r in refused:
        out.append(f"On {r['tokens']} tokens the build was refused: {r['refusal']}")
    return out


def section(data: dict) -> str:
    """The text between the markers (without them)."""
    rows = data.get("results", [])
    table, span = _law_rows(rows)
    out = [
        "Measured by `benchmarks/simulator_layouts.py --full` (one thread; "
        f"{data['machine']['cpus']} CPUs), n = d with F = 4d ({span}): the exponent k of "
        "y ~ n^k by least squares over every size built, and between the two largest "
        "(the growth where it matters). The paper's column is what it states or implies "
        "(docs/paper-notes in the shared folder, section 5); it built no weights, so it "
        "gives no times or memory.",
        "",
        *table,
        *_tokens(data),
    ]
    return "\n".join(out)


def write(doc: Path = DOC, results: Path = RESULTS) -> bool:
    """Replaces the text between the markers in ``doc``; False when ``results`` is missing."""
    if not results.exists():
        return False
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{doc} has no growth-law markers ({BEGIN!r} ... {END!r})")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    body = section(json.loads(results.read_text()))
    doc.write_text(f"{head}{BEGIN}\n{body}\n{END}{tail}")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--docs", type=Path, default=DOC)
    args = parser.parse_args(argv)
    if not write(args.docs, args.results):
        print(f"no results at {args.results}: nothing written")
        return 1
    print(f"wrote the growth laws into {args.docs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
