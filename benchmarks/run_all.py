"""Runs every benchmark in this folder, then regenerates docs/benchmarks.md.

Scripts, in order: startup.py, interpreter.py, rasp_text.py, compare_tracr.py,
calibrate_costs.py, plan_kinds.py, executors.py, compiler_fuzz.py, simulator_cost.py,
simulator_layouts.py, simulator_decoder.py, simulator_accuracy.py (a missing one is skipped
with a message), then render_docs.py. Each script writes its JSON under
benchmarks/results/. A failing script is reported and the others still run; the exit status is
1 if any failed.

Run: ``python benchmarks/run_all.py``. At the default sizes ``make bench`` takes about two
hours on two CPU cores (each script records its own seconds); ``--full`` passes
``--full`` to the scripts that accept it (the larger sweeps: ``make bench-full``),
``--quick`` passes ``--quick``, and ``--only NAME ...`` runs a subset.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = (
    "startup.py",
    "interpreter.py",
    "rasp_text.py",
    "compare_tracr.py",
    "calibrate_costs.py",
    "plan_kinds.py",
    "executors.py",
    "compiler_fuzz.py",
    "simulator_cost.py",
    "simulator_layouts.py",
    "simulator_decoder.py",
    "simulator_accuracy.py",
)


def accepts(script: Path, flag: str) -> bool:
    """Whether a script declares the command-line option ``flag`` (read from its source)."""
    return f'"{flag}"' in script.read_text(encoding="utf-8")


def run(script: Path, extra: list[str]) -> tuple[int, float]:
    """Runs one script with this interpreter; returns its exit status and seconds."""
    start = time.perf_counter()
    status = subprocess.call([sys.executable, str(script), *extra], cwd=HERE.parent)
    return status, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smaller sweeps where offered")
    size.add_argument("--full", action="store_true", help="the larger sweeps where offered")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these scripts")
    args = parser.parse_args(argv)

    selected = [s for s in SCRIPTS if not args.only or s in args.only or s[:-3] in args.only]
    summary: list[tuple[str, str, float]] = []
    load_start = os.getloadavg()
    for name in selected:
        path = HERE / name
        if not path.exists():
            print(f"== {name}: not present, skipped", flush=True)
            summary.append((name, "skipped (missing)", 0.0))
            continue
        print(f"== {name}", flush=True)
        flag = "--full" if args.full else "--quick" if args.quick else None
        extra = [flag] if flag and accepts(path, flag) else []
        if extra:
            print(f"   ({extra[0]})", flush=True)
        status, seconds = run(path, extra)
        summary.append((name, "ok" if status == 0 else f"failed ({status})", seconds))
    status, seconds = run(HERE / "render_docs.py", [])
    summary.append(("render_docs.py", "ok" if status == 0 else f"failed ({status})", seconds))

    print("\n| script | result | seconds |")
    print("|---|---|---:|")
    for name, result, seconds in summary:
        print(f"| {name} | {result} | {seconds:.1f} |")
    total = sum(s for _, _, s in summary)
    print(f"total {total:.0f} s ({total / 60:.1f} min)")
    load_end = os.getloadavg()
    print(
        f"load average (1, 5, 15 min) at start {', '.join(f'{x:.2f}' for x in load_start)}; "
        f"at end {', '.join(f'{x:.2f}' for x in load_end)} ({os.cpu_count()} CPUs)"
    )
    return 1 if any(r.startswith("failed") for _, r, _ in summary) else 0


if __name__ == "__main__":
    raise SystemExit(main())
