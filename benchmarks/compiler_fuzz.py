"""Differential fuzzing of the compiler at scale, on programs of the whole RASP language.

Draws random programs (``tests.fuzz_programs``: every S-op and selector kind, numerical and
categorical, causal and not, vocabularies of ints, strings, floats, bools, None and real
numbers), including programs the compiler may refuse. Each one is compiled; a compile error
counts as a refusal only when it is clear (``fuzz_programs.is_clear_error``), otherwise as an
unclear error. A compiled program runs on random inputs against ``rasp.evaluate``: equal
outputs (numbers within 1e-9), or both raise (agreed by error); a run-time refusal where the
interpreter has an answer is a refusal; anything else is a disagreement.

Prints, per attention mode: drawn, compiled (and ran), agreed, agreed by error, refused (by
reason), disagreements, unclear errors; writes benchmarks/results/compiler_fuzz.json. The exit
status is 1 if there is any disagreement or unclear error.

By default 5,000 programs per attention mode (10,000 in all, about a minute on one core);
``--quick`` draws 1,000 per mode, ``--full`` 25,000.

The differential test against tracr (``tests/fuzz_tracr.py``, needs tracr-pypi; skipped with
a line saying so without it): ``--tracr N`` (default 2,000; 0 skips it) programs built with
tracr's own classes, evaluated by tracr's evaluator and, after ``attnsim.rasp.from_tracr``,
by attnsim's interpreter and compiled model (hard attention); the counts by status (agreed,
refused, tracr raised, stricter, the documented differences, disagreements) go under
``"tracr"`` in the results. Its disagreements and unclear errors count in the exit status.

Usage: python benchmarks/compiler_fuzz.py [--programs N | --quick | --full] [--seed 12345]
    [--attention hard|softmax|both] [--tracr N]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

# isort: off
import attnsim  # noqa: F401  (before torch: its huge-page setting takes effect)

# isort: on
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _common import Run, write_json  # noqa: E402
from tests import fuzz_programs as fp  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "compiler_fuzz.json"
QUICK_PROGRAMS, DEFAULT_PROGRAMS, FULL_PROGRAMS = 1000, 5000, 25000  # per attention mode
DEFAULT_TRACR_PROGRAMS = 2000  # the differential test against tracr (hard attention)


def run_mode(n_programs: int, seed: int, attention: str) -> dict:
    """Fuzzes one attention mode; returns its counts, reasons, coverage and examples."""
    start = time.perf_counter()
    t = fp.fuzz(n_programs, seed, attention)
    compile_refusals = {
        k.removeprefix("compile: "): v for k, v in t.refusals.items() if k.startswith("compile: ")
    }
    run_refusals = {
        k.removeprefix("run: "): v for k, v in t.refusals.items() if k.startswith("run: ")
    }
    return {
        "attention": attention,
        "seed": seed,
        "drawn": t.drawn,
        "compiled": t.compiled,  # compiled, then ran on its inputs
        "agreed": t.statuses["agreed"],
        "agreed_by_error": t.statuses["agreed_by_error"],
        "refused": t.statuses["refused"],
        "not_compiled": sum(compile_refusals.values()),
        "refused_at_run_time": sum(run_refusals.values()),
        "disagreements": t.disagreements,
        "unclear_errors": t.unclear_errors,
        "not_evaluable": t.not_evaluable,  # the interpreter raised on every input
        "compile_seconds": round(t.compile_seconds, 2),
        "run_seconds": round(t.run_seconds, 2),
        "seconds": round(time.perf_counter() - start, 1),
        "not_compiled_reasons": _sorted(compile_refusals),
        "run_time_refusal_reasons": _sorted(run_refusals),
        "failure_reasons": _sorted(t.bad_reasons),
        "coverage": _sorted(t.features),  # programs using each construct
        "examples": t.examples,
    }


def run_tracr(n_programs: int, seed: int) -> dict:
    """The differential test against tracr on ``n_programs`` tracr-class programs; returns
    its counts, reasons and examples, or ``{"skipped": why}`` without tracr-pypi."""
    try:
        from tests import fuzz_tracr as ft
    except ImportError as exc:
        return {"skipped": f"tracr-pypi is not installed ({exc})"}
    t = ft.fuzz(n_programs, seed, "hard")
    return {
        "attention": "hard",
        "seed": seed,
        "drawn": t.drawn,
        "compiled": t.compiled,
        **{status: t.count(status) for status in ft.STATUSES},
        "seconds": round(t.seconds, 1),
        "reasons": _sorted(t.reasons),
        "coverage": _sorted(t.features),
        "examples": t.examples,
    }


def print_tracr(res: dict) -> None:
    """One line of counts for the differential test against tracr, then its reasons."""
    if "skipped" in res:
        print(f"tracr    skipped: {res['skipped']}", flush=True)
        return
    print(
        f"tracr    drawn {res['drawn']}: compiled {res['compiled']}, agreed {res['agreed']}, "
        f"agreed by error {res['agreed_by_error']}, tracr raised (attnsim answered) "
        f"{res['tracr_raised']}, refused {res['refused']}, stricter {res['stricter']}, "
        f"documented differences: numerical default {res['numerical_default']}, "
        f"categorical mean {res['tracr_mean']}; disagreements {res['disagreement']}, "
        f"unclear errors {res['unclear_error']} ({res['seconds']} s)",
        flush=True,
    )
    for reason, count in list(res["reasons"].items())[:12]:
        print(f"    {count:5d}  {reason}")


def _sorted(counts: dict) -> dict:
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--programs", type=int, default=DEFAULT_PROGRAMS, help="programs to draw per mode"
    )
    size.add_argument("--quick", action="store_true", help=f"{QUICK_PROGRAMS} programs per mode")
    size.add_argument("--full", action="store_true", help=f"{FULL_PROGRAMS} programs per mode")
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--attention", choices=["hard", "softmax", "both"], default="both")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--tracr",
        type=int,
        default=DEFAULT_TRACR_PROGRAMS,
        metavar="N",
        help="programs built with tracr's classes, checked against tracr's evaluator (0: skip)",
    )
    args = parser.parse_args(argv)
    run = Run()
    # the compiled models are small: one thread avoids thread start-up costs per matmul
    torch.set_num_threads(1)
    modes = ["hard", "softmax"] if args.attention == "both" else [args.attention]
    n = FULL_PROGRAMS if args.full else QUICK_PROGRAMS if args.quick else args.programs
    runs = []
    for i, mode in enumerate(modes):
        res = run_mode(n, args.seed + i, mode)
        runs.append(res)
        print(
            f"{mode:8s} drawn {res['drawn']}: compiled and ran {res['compiled']}, agreed "
            f"{res['agreed']}, agreed by error {res['agreed_by_error']}, refused "
            f"{res['refused']} ({res['not_compiled']} at compile, {res['refused_at_run_time']} "
            f"at run time), disagreements {res['disagreements']}, unclear errors "
            f"{res['unclear_errors']} ({res['seconds']} s)",
            flush=True,
        )
        for reason, count in list(res["not_compiled_reasons"].items())[:12]:
            print(f"    refused {count:5d}  {reason}")
        for reason, count in list(res["run_time_refusal_reasons"].items())[:5]:
            print(f"    refused {count:5d}  run: {reason}")
        for reason, count in res["failure_reasons"].items():
            print(f"    FAILED  {count:5d}  {reason}")
    tracr = run_tracr(args.tracr, args.seed + 100) if args.tracr > 0 else {"skipped": "--tracr 0"}
    print_tracr(tracr)
    totals = {
        k: sum(r[k] for r in runs)
        for k in ("drawn", "compiled", "agreed", "agreed_by_error", "refused")
    }
    summary = {
        "programs_per_mode": n,
        **totals,
        "disagreements": sum(r["disagreements"] for r in runs),
        "unclear_errors": sum(r["unclear_errors"] for r in runs),
        "seconds": round(time.perf_counter() - run.started, 1),
        "machine": f"{platform.machine()}, {platform.python_version()}, torch {torch.__version__}",
        "environment": run.machine(),
        "runs": runs,
        "tracr": tracr,
    }
    print(
        f"total: {summary['drawn']} drawn, {summary['compiled']} compiled and ran, "
        f"{summary['refused']} refused, {summary['disagreements']} disagreements, "
        f"{summary['unclear_errors']} unclear errors in {summary['seconds']} s"
    )
    write_json(args.out, summary)
    tracr_bad = tracr.get("disagreement", 0) + tracr.get("unclear_error", 0)
    return 1 if summary["disagreements"] or summary["unclear_errors"] or tracr_bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
