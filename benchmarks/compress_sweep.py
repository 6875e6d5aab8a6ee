"""Compression sweep: the smallest residual width at which each library program still runs.

For every library program: compile (hard attention), sample its test inputs
(``attnsim.report.suite.sample_inputs``), compress the residual stream to several widths
``d`` (``attnsim.compress``) and count the inputs whose every output still decodes as the
interpreter's. Writes the per-program smallest exact width and the accuracy curves as JSON
(``--output``) and a plot of accuracy against d / d_model (``--plot``).

    python benchmarks/compress_sweep.py --output benchmarks/results/compress_sweep.json \
        --plot docs/img/compress_accuracy.png --docs docs/interpretability.md

``--docs FILE`` writes the table of smallest widths between the markers ``BEGIN`` and ``END``
below in FILE; with ``--results JSON`` it renders that results file without a sweep
(``tests/test_generated_docs.py`` checks docs/interpretability.md against the results).
"""

from __future__ import annotations

import argparse
import json
import time

# isort: off
import attnsim  # (before torch: its huge-page setting takes effect)

# isort: on
import torch

from attnsim.model import compress as C
from attnsim.report import suite

BEGIN = "<!-- compress_sweep table: written by benchmarks/compress_sweep.py --docs -->"
END = "<!-- end of the compress_sweep table -->"
RESULTS = "benchmarks/results/compress_sweep.json"


def table(rows: list[dict]) -> str:
    """The Markdown table of each program's smallest exact width, and the count at half."""
    lines = [
        "| program | d_model | rank of the streams | smallest exact d | d / d_model |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        best = r["smallest_exact_d"]
        share = "none exact" if best is None else f"{best / r['d_model']:.2f}"
        lines.append(
            f"| {r['program']} | {r['d_model']} | {r['stream_rank']} | "
            f"{'-' if best is None else best} | {share} |"
        )
    half = [
        r["program"]
        for r in rows
        if r["smallest_exact_d"] and 2 * r["smallest_exact_d"] <= r["d_model"]
    ]
    lines += [
        "",
        f"{len(half)} of {len(rows)} programs are exact on their test inputs at half their "
        f"d_model or less{': ' + ', '.join(half) if half else ''}.",
    ]
    return "\n".join(lines)


def write_docs(path: str, rows: list[dict]) -> None:
    """Replaces the text between ``BEGIN`` and ``END`` in ``path`` with :func:`table`."""
    with open(path) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path} has no {BEGIN!r} ... {END!r} markers to write the table in")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(path, "w") as f:
        f.write(head + BEGIN + "\n" + table(rows) + "\n" + END + tail)


def widths_for(full: int, rank: int) -> list[int]:
    """1/4, 3/8, ... 7/8 of d_model, all of it, and the rank of the streams."""
    fractions = {max(1, round(full * f)) for f in (0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0)}
    return sorted(fractions | ({rank} if 1 <= rank <= full else set()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=None, help="write the results as JSON here")
    parser.add_argument("--plot", default=None, help="write the accuracy plot (PNG) here")
    parser.add_argument("--steps", type=int, default=200, help="Adam steps on the read loss")
    parser.add_argument(
        "--end-to-end-steps", type=int, default=800, help="end-to-end Adam steps (at most)"
    )
    parser.add_argument(
        "--end-to-end-max-d-model",
        type=int,
        default=64,
        help="train end to end only models up to this d_model (the others: read loss only)",
    )
    parser.add_argument(
        "--decode", choices=["argmax", "strict"], default="argmax", help="output decoding"
    )
    parser.add_argument("--docs", default=None, help="write the table into this Markdown file")
    parser.add_argument("--results", default=None, help="render this results file, no sweep")
    parser.add_argument("programs", nargs="*", help="library programs (default: all)")
    args = parser.parse_args()
    if args.results:
        with open(args.results) as f:
            rows = json.load(f)["rows"]
        if args.docs:
            write_docs(args.docs, rows)
        print(table(rows))
        return
    torch.set_num_threads(1)
    names = args.programs or sorted(n for n, p in suite.PROGRAMS.items() if p.kind == "library")
    rows = []
    for name in names:
        p = suite.PROGRAMS[name]
        model = suite._compile(p, "hard")
        xs, ys = suite.sample_inputs(p, model, per_length=6)
        if not xs:
            print(f"{name}: skipped (the compiled model refuses every input)", flush=True)
            continue
        full = model.config.d_model
        X = torch.cat([x.double() for x in C._streams(model, xs)])
        rank = int(torch.linalg.matrix_rank(X))
        t = time.perf_counter()
        e2e = args.end_to_end_steps if full <= args.end_to_end_max_d_model else 0
        best, curve = C.smallest_width(
            model,
            xs,
            ys,
            widths_for(full, rank),
            args.decode,
            steps=args.steps,
            end_to_end_steps=e2e,
        )
        row = {
            "program": name,
            "d_model": full,
            "stream_rank": rank,
            "smallest_exact_d": best,
            "curve": curve,
            "inputs": len(xs),
            "decode": args.decode,
            "steps": args.steps,
            "end_to_end_steps": e2e,
            "seconds": round(time.perf_counter() - t, 1),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"attnsim": attnsim.__version__, "rows": rows}, f, indent=1)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in rows:
            ks = [k / r["d_model"] for k, _, _ in r["curve"]]
            ax.plot(ks, [a for _, a, _ in r["curve"]], marker=".", alpha=0.6, label=r["program"])
        ax.set_xlabel("compressed width d / d_model")
        ax.set_ylabel("inputs decoded exactly")
        ax.set_title("Library programs compressed by a learned projection")
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
    if args.docs:
        write_docs(args.docs, rows)


if __name__ == "__main__":
    main()
