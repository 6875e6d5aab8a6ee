"""Reference-interpreter throughput: sequences per second for three programs.

Programs: ``hist`` (one categorical head), ``sort`` (the RASP paper's stable sort: a composite
selector, two layers) and a three-layer numerical program (prefix mean, global mean of
squares, prefix mean of the centred values). Each runs on a batch of 256 random sequences at
lengths 16, 64 and 256; the best of several repeats counts.

Run: ``python benchmarks/interpreter.py`` (writes benchmarks/results/interpreter.json).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import Run, write_json

from attnsim import library, rasp

RESULTS = Path(__file__).resolve().parent / "results" / "interpreter.json"


def numerical_3_layer() -> rasp.SOp:
    """Three attention layers over numerical values (all on the interpreter's numpy path)."""
    c = rasp.Comparison
    x = rasp.numerical(rasp.tokens)
    prefix = rasp.Select(rasp.indices, rasp.indices, c.LEQ)
    everything = rasp.Select(rasp.indices, rasp.indices, c.TRUE)
    mean = rasp.numerical(rasp.Aggregate(prefix, x))  # layer 1
    power = rasp.numerical(rasp.Aggregate(everything, mean * mean))  # layer 2
    return rasp.numerical(rasp.Aggregate(prefix, x - power))  # layer 3


PROGRAMS: dict[str, tuple[Callable[[], rasp.SOp], Callable]] = {
    # name -> (program factory, input maker (rng, batch, n) -> batch of sequences)
    "hist": (library.make_hist, lambda rng, b, n: rng.integers(0, 16, size=(b, n))),
    "sort": (
        lambda: library.sort(rasp.tokens, rasp.tokens),
        lambda rng, b, n: rng.integers(0, 64, size=(b, n)),
    ),
    "numerical_3_layer": (numerical_3_layer, lambda rng, b, n: rng.normal(size=(b, n))),
}


def measure(program: rasp.SOp, xs: np.ndarray, repeats: int) -> float:
    """The best wall time of ``repeats`` batch evaluations, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        rasp.evaluate_batch(program, xs)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256, help="sequences per batch")
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs; the best counts")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args(argv)
    run = Run()

    rng = np.random.default_rng(0)
    rows = []
    for name, (factory, make_input) in PROGRAMS.items():
        program = factory()
        for n in args.lengths:
            xs = make_input(rng, args.batch, n)
            rasp.evaluate_batch(program, xs[:2])  # warm-up (imports, first-call costs)
            seconds = measure(program, xs, args.repeats)
            rows.append(
                {
                    "program": name,
                    "length": n,
                    "batch": args.batch,
                    "seconds": seconds,
                    "sequences_per_second": args.batch / seconds,
                }
            )
            print(
                f"{name:<18} n={n:<4} batch={args.batch:<4} {seconds * 1e3:9.1f} ms "
                f"{args.batch / seconds:12,.0f} seq/s",
                flush=True,
            )

    print()
    print("| program | length | batch | seconds | sequences/s |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['program']} | {r['length']} | {r['batch']} | {r['seconds']:.4f} | "
            f"{r['sequences_per_second']:,.0f} |"
        )
    write_json(args.out, {"machine": run.machine(), "results": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
