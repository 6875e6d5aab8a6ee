"""Differential fuzzing of the compiler at scale: compiled model == interpreter.

Draws random well-typed RASP programs (``tests.fuzz_programs``), compiles each one, runs it on
random inputs and compares with ``rasp.evaluate``, in both attention modes (hard and
softmax). Prints the number of programs compiled and the number of disagreements (the goal is
0), and writes benchmarks/results/compiler_fuzz.json.

By default 1,000 programs per mode (about a minute on one core); ``--full`` compiles 5,000 per
mode, 10,000 in all.

Usage: python benchmarks/compiler_fuzz.py [--programs N | --full] [--seed 12345] [--attention hard]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fuzz_programs import random_inputs, random_program  # noqa: E402

from attnsim import rasp  # noqa: E402
from attnsim.compiler import compile_program  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "compiler_fuzz.json"
DEFAULT_PROGRAMS, FULL_PROGRAMS = 1000, 5000  # per attention mode


def same(a, b) -> bool:
    """Equal categorical values; numerical values within 1e-9 (relative or absolute)."""
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return False
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def fuzz(n_programs: int, seed: int, attention: str) -> dict:
    """Compiles ``n_programs`` random programs and counts disagreements with the interpreter."""
    rng = random.Random(seed)
    counts = {"drawn": 0, "not_evaluable": 0, "not_compiled": 0, "compiled": 0}
    counts.update({"refused_at_run_time": 0, "agreed": 0, "disagreements": 0})
    examples, not_compiled_reasons = [], {}
    compile_s = run_s = 0.0
    while counts["compiled"] < n_programs and counts["drawn"] < 20 * n_programs:
        counts["drawn"] += 1
        prog, vocab, max_seq_len = random_program(rng)
        inputs = random_inputs(rng, vocab, max_seq_len)
        try:
            expected = rasp.evaluate(prog, inputs)
        except (rasp.RASPEvaluationError, ValueError, ZeroDivisionError, OverflowError):
            counts["not_evaluable"] += 1
            continue
        start = time.perf_counter()
        try:
            model = compile_program(prog, vocab=vocab, max_seq_len=max_seq_len, attention=attention)
        except NotImplementedError as exc:
            counts["not_compiled"] += 1
            reason = str(exc).splitlines()[1].split(": ", 1)[-1][:60] if "\n" in str(exc) else ""
            not_compiled_reasons[reason] = not_compiled_reasons.get(reason, 0) + 1
            continue
        compile_s += time.perf_counter() - start
        counts["compiled"] += 1
        start = time.perf_counter()
        try:
            got = model.run(inputs)
        except ValueError as exc:
            if "run-time check" not in str(exc):
                raise
            counts["refused_at_run_time"] += 1
            continue
        finally:
            run_s += time.perf_counter() - start
        if all(same(a, b) for ra, rb in zip(got, expected) for a, b in zip(ra, rb)):
            counts["agreed"] += 1
        else:
            counts["disagreements"] += 1
            if len(examples) < 10:
                examples.append(
                    {
                        "program": prog.label,
                        "input": inputs[0],
                        "got": got[0],
                        "expected": expected[0],
                    }
                )
    return {
        "attention": attention,
        "seed": seed,
        **counts,
        "compile_seconds": round(compile_s, 2),
        "run_seconds": round(run_s, 2),
        "not_compiled_reasons": dict(sorted(not_compiled_reasons.items(), key=lambda kv: -kv[1])),
        "examples": examples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--programs", type=int, default=DEFAULT_PROGRAMS, help="programs to compile per mode"
    )
    size.add_argument("--full", action="store_true", help=f"{FULL_PROGRAMS} programs per mode")
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--attention", choices=["hard", "softmax", "both"], default="both")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    # the compiled models are small: one thread avoids thread start-up costs per matmul
    torch.set_num_threads(1)
    modes = ["hard", "softmax"] if args.attention == "both" else [args.attention]
    n_programs = FULL_PROGRAMS if args.full else args.programs
    start = time.perf_counter()
    runs = []
    for i, mode in enumerate(modes):
        res = fuzz(n_programs, args.seed + i, mode)
        runs.append(res)
        print(
            f"{mode:8s} compiled {res['compiled']} programs ({res['drawn']} drawn), "
            f"disagreements {res['disagreements']}, refused by run-time checks "
            f"{res['refused_at_run_time']}; compile {res['compile_seconds']} s, "
            f"run {res['run_seconds']} s"
        )
    summary = {
        "programs_per_mode": n_programs,
        "compiled": sum(r["compiled"] for r in runs),
        "disagreements": sum(r["disagreements"] for r in runs),
        "seconds": round(time.perf_counter() - start, 1),
        "machine": f"{platform.machine()}, {platform.python_version()}, torch {torch.__version__}",
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(
        f"total: {summary['compiled']} compiled, {summary['disagreements']} disagreements "
        f"in {summary['seconds']} s -> {args.out}"
    )
    return 1 if summary["disagreements"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
