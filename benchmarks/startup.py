"""Start-up time of the command line against bare Python with numpy, in the same run.

Each command runs as a fresh process (``python -m attnsim ...``, or ``python -c "import
numpy"`` for the baseline) several times, alternating, and the median wall time counts. The
ratio to the baseline is the figure of merit: ``attnsim --help`` should be within 3x of
importing numpy. ``rasp FILE`` (without ``--compile``) must not import torch, which the
script checks with ``-X importtime``.

Run: ``python benchmarks/startup.py [--repeats 7]`` (writes benchmarks/results/startup.json).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import Run, write_json

RESULTS = Path(__file__).resolve().parent / "results" / "startup.json"
# hist and sort on one sequence of length 400 (the original interpreter's slow case)
RASP_FILE = (
    "set example [" + ", ".join(str((7 * i) % 23) for i in range(400)) + "]\n"
    "hist = selector_width(select(tokens_int, tokens_int, ==));\n"
    "ascending = sort(tokens_int, tokens_int);\n"
)

BASELINE = ("bare python + numpy", ["-c", "import numpy"])


def commands(rasp_file: str) -> list[tuple[str, list[str]]]:
    """The measured commands (label, python arguments), the baseline first."""
    return [
        BASELINE,
        ("import attnsim", ["-c", "import attnsim"]),
        ("attnsim --help", ["-m", "attnsim", "--help"]),
        ("attnsim --version", ["-m", "attnsim", "--version"]),
        ("attnsim info --list", ["-m", "attnsim", "info", "--list"]),
        ("attnsim rasp FILE (hist + sort, n=400)", ["-m", "attnsim", "rasp", rasp_file]),
    ]


def wall(args: list[str]) -> float:
    """Seconds one fresh interpreter takes to run ``python ARGS`` (output discarded)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, capture_output=True)
    return time.perf_counter() - start


def imports_torch(args: list[str]) -> bool:
    """Whether ``python ARGS`` imports torch (read from ``-X importtime``)."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", *args], capture_output=True, text=True
    )
    return any(line.split("|")[-1].strip() == "torch" for line in out.stderr.splitlines())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="runs per command (median)")
    parser.add_argument("--quick", action="store_true", help="3 runs per command")
    parser.add_argument("--out", type=Path, default=RESULTS, help="JSON output path")
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else max(1, args.repeats)
    run = Run()
    with tempfile.TemporaryDirectory() as tmp:
        rasp_file = str(Path(tmp) / "hist.rasp")
        Path(rasp_file).write_text(RASP_FILE)
        cmds = commands(rasp_file)
        for _, a in cmds:  # warm the file cache once
            wall(a)
        times: dict[str, list[float]] = {label: [] for label, _ in cmds}
        for _ in range(repeats):
            for label, a in cmds:
                times[label].append(wall(a))
        torch_loaded = {label: imports_torch(a) for label, a in cmds}
    base = statistics.median(times[BASELINE[0]])
    rows = []
    for label, _ in cmds:
        med = statistics.median(times[label])
        rows.append(
            {
                "command": label,
                "median_s": med,
                "min_s": min(times[label]),
                "ratio_to_baseline": med / base,
                "imports_torch": torch_loaded[label],
            }
        )
        print(f"{label:24s} {med:7.3f} s  x{med / base:5.2f}  torch={torch_loaded[label]}")
    write_json(args.out, {"machine": run.machine(), "repeats": repeats, "results": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
