"""Throughput of the textual RASP front end: parse + translate, and evaluate.

The program has 10 attention layers (a chain of aggregates, each reading the previous one)
and is evaluated at length 400. Writes benchmarks/results/rasp_text.json.

    python benchmarks/rasp_text.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from pathlib import Path

from attnsim import rasp
from attnsim.rasp import text

LAYERS = 10
LENGTH = 400


def program(layers: int = LAYERS) -> str:
    """A RASP text whose final S-op needs ``layers`` attention layers."""
    lines = [
        "prevs = select(indices, indices, <=);",
        "x0 = tokens_int;",
    ]
    for i in range(1, layers + 1):
        lines.append(f"m{i} = aggregate(prevs, x{i - 1});")
        lines.append(f"x{i} = round(m{i} * 3) % 7 + indicator(tokens_int > {i % 5});")
    lines.append(f"out_s = x{layers};")
    return "\n".join(lines) + "\n"


def _best(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "rasp_text.json"))
    args = ap.parse_args()

    source = program()
    xs = [random.Random(0).randint(0, 9) for _ in range(LENGTH)]
    batch = [[random.Random(s).randint(0, 9) for _ in range(LENGTH)] for s in range(16)]

    front = _best(lambda: text.translate(source, "out_s"), args.repeat)
    sop = text.translate(source, "out_s")
    one = _best(lambda: rasp.evaluate(sop, xs), args.repeat)
    many = _best(lambda: rasp.evaluate(sop, batch), args.repeat)
    rt = text.Runtime()
    rt.run(source)
    typed = _best(lambda: rt.values("out_s", xs), args.repeat)

    result = {
        "program": {"attention_layers": LAYERS, "statements": source.count(";"), "length": LENGTH},
        "parse_translate_s": statistics.median(front),
        "parse_translate_programs_per_s": 1 / statistics.median(front),
        "evaluate_one_s": statistics.median(one),
        "evaluate_tokens_per_s": LENGTH / statistics.median(one),
        "evaluate_batch16_s": statistics.median(many),
        "evaluate_batch16_tokens_per_s": 16 * LENGTH / statistics.median(many),
        "typed_values_one_s": statistics.median(typed),
        "repeat": args.repeat,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print("| stage | median time | throughput |")
    print("|---|---|---|")
    print(
        f"| parse + translate | {result['parse_translate_s'] * 1e3:.1f} ms | "
        f"{result['parse_translate_programs_per_s']:.1f} programs/s |"
    )
    print(
        f"| evaluate (1 x {LENGTH}) | {result['evaluate_one_s'] * 1e3:.1f} ms | "
        f"{result['evaluate_tokens_per_s']:.0f} tokens/s |"
    )
    print(
        f"| evaluate (16 x {LENGTH}) | {result['evaluate_batch16_s'] * 1e3:.1f} ms | "
        f"{result['evaluate_batch16_tokens_per_s']:.0f} tokens/s |"
    )
    print(f"| typed values (1 x {LENGTH}) | {result['typed_values_one_s'] * 1e3:.1f} ms | |")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
