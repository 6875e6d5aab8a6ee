"""``attnsim suite build DIR [PROGRAMS...]`` and ``attnsim suite check DIR``.

``build`` compiles each program (default: every library and matrix program) and writes a
folder per program with its source, checkpoint, component table, circuits and data set
(the layout is in docs/interpretability.md); ``check`` re-verifies every item: the files
match the checkpoint, the outputs equal the interpreter's, every circuit is faithful and
minimal. Both show a progress bar and end with a summary table; ``check`` exits 1 when an
item fails.

>>> import tempfile
>>> from attnsim.cli import main
>>> d = tempfile.mkdtemp()
>>> main(["suite", "build", d, "make_length", "--quiet"])
0
>>> main(["suite", "check", d, "--quiet"])
0
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from attnsim.cli import UserError, _output

INDEX = "suite.json"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the ``suite`` command with ``build`` and ``check``."""
    parser = subparsers.add_parser(
        "suite",
        help="circuit-discovery suites: compiled models with their ground-truth circuits",
        description="Build or check a folder of compiled programs with their circuits and "
        "data sets (see docs/interpretability.md).",
    )
    sub = parser.add_subparsers(dest="suite", metavar="ACTION")
    build = sub.add_parser(
        "build",
        help="write a suite",
        description="Compile the programs and write, per program: program.py, meta.json, "
        "model/ (the checkpoint), lens.pt (TransformerLens, when it is installed and the "
        "model exports), components.json/.txt, circuit.json, circuit_lens.json, "
        "dataset.json; then check each circuit.",
    )
    build.add_argument("dir", metavar="DIR", help="the suite folder (created)")
    build.add_argument(
        "programs", nargs="*", metavar="PROGRAM", help="program names (default: all)"
    )
    build.set_defaults(_more="programs")  # names after the options too
    build.add_argument(
        "--attention",
        choices=["hard", "softmax"],
        default="softmax",
        help="attention of the compiled models (default softmax, which TransformerLens runs; "
        "hard is the exact definition)",
    )
    build.add_argument(
        "--per-length", type=int, default=8, help="random inputs per length (default 8)"
    )
    build.add_argument("--seed", type=int, default=0, help="the inputs' random seed")
    build.add_argument("--list", action="store_true", help="list the programs and exit")
    build.add_argument("--quiet", action="store_true", help="print nothing")
    build.set_defaults(func=_build)
    check = sub.add_parser(
        "check", help="re-verify a suite", description="Re-verify every item of a suite."
    )
    check.add_argument("dir", metavar="DIR", help="the suite folder")
    check.add_argument("--json", action="store_true", help="print JSON instead of a table")
    check.add_argument("--quiet", action="store_true", help="print nothing")
    check.set_defaults(func=_check)
    parser.set_defaults(func=lambda args: _missing(parser))


def _missing(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _build(args: argparse.Namespace) -> int:
    from attnsim.report import suite

    if args.list:
        print("\n".join(sorted(suite.PROGRAMS)))
        return 0
    names = args.programs or sorted(suite.PROGRAMS)
    unknown = [n for n in names if n not in suite.PROGRAMS]
    if unknown:
        raise UserError(
            f"unknown program(s) {', '.join(unknown)}; 'attnsim suite build --list' "
            "lists the known ones"
        )
    if args.per_length < 2:
        raise UserError(
            f"--per-length must be at least 2 (a clean and a corrupted input of each length), "
            f"got {args.per_length}"
        )
    root = Path(args.dir)
    if root.exists() and not root.is_dir():
        raise UserError(f"{root} exists and is not a folder")
    root.mkdir(parents=True, exist_ok=True)
    rows, built = [], []
    with _output.Progress("attnsim suite build", total=len(names), quiet=args.quiet) as bar:
        for name in names:
            bar.step(name)
            try:
                meta = suite.build_item(
                    name,
                    root / name,
                    attention=args.attention,
                    per_length=args.per_length,
                    seed=args.seed,
                )
            except suite.NoInputsError as exc:  # a program the compiler gets wrong: not held
                rows.append([name, "0", "0", "-", "-", "-", f"skipped: {exc}"])
                continue
            built.append(name)
            rows.append(_row(name, meta["inputs"], meta["pairs"], meta["checks"]))
    index = root / INDEX
    old = json.loads(index.read_text()).get("programs", []) if index.exists() else []
    programs = sorted(set(old) | set(built))
    index.write_text(json.dumps({"format": suite.FORMAT, "programs": programs}, indent=1))
    if not args.quiet:
        _table("suite build", rows)
    return 0 if all(r[-1] == "ok" or r[-1].startswith("skipped") for r in rows) else 1


def _row(name: str, inputs: int, pairs: int, checks: dict) -> list[str]:
    cells = [name, str(inputs), str(pairs)]
    ok = True
    for g in ("component", "qkv"):
        c = checks[g]
        n = len(c["necessary"]) + len(c["redundant"])
        cells.append(f"{n} ({len(c['necessary'])} necessary, {len(c['redundant'])} redundant)")
        ok &= c["ok"]
    cells.append("faithful" if all(checks[g]["faithful"] for g in checks) else "NOT faithful")
    cells.append("ok" if ok else "FAILED")
    return cells


def _table(title: str, rows: list[list[str]]) -> None:
    _output.print_table(
        title,
        ["program", "inputs", "pairs", "edges (component)", "edges (qkv)", "faithful", "status"],
        rows,
        right=["inputs", "pairs"],
    )


def _check(args: argparse.Namespace) -> int:
    from attnsim.report import suite

    root = Path(args.dir)
    index = root / INDEX
    if not index.is_file():
        raise UserError(
            f"{root} is not a suite: it has no {INDEX} ('attnsim suite build' writes one)"
        )
    try:
        meta = json.loads(index.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{index} is not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != suite.FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise UserError(f"{index}: expected format {suite.FORMAT!r}, got {got!r}")
    names = meta.get("programs", [])
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise UserError(f"{index}: 'programs' is not a list of program names")
    results = []
    with _output.Progress("attnsim suite check", total=len(names), quiet=args.quiet) as bar:
        for name in names:
            bar.step(name)
            try:
                results.append(suite.check_item(root / name))
            except (FileNotFoundError, ValueError) as exc:
                results.append(suite.ItemCheck(name, (str(exc),), 0, 0, {}))
    if args.json:
        out = [
            {"name": r.name, "ok": r.ok, "problems": list(r.problems), "edges": r.edges}
            for r in results
        ]
        print(json.dumps(out, indent=1))
    elif not args.quiet:
        rows = []
        for r in results:
            cells = [r.name, str(r.inputs), str(r.pairs)]
            for g in ("component", "qkv"):
                e = r.edges.get(g)
                cells.append("-" if e is None else f"{e[0]} ({e[1]} necessary, {e[2]} redundant)")
            cells.append("faithful" if r.ok else "-")
            cells.append("ok" if r.ok else "FAILED: " + "; ".join(r.problems))
            rows.append(cells)
        _table("suite check", rows)
    for r in results:
        if not r.ok and args.quiet:
            print(f"attnsim suite check: {r.name}: {'; '.join(r.problems)}", file=sys.stderr)
    return 0 if all(r.ok for r in results) else 1
