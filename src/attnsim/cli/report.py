"""``attnsim report KIND``: resource reports; ``matrix`` compiles the matrix programs.

``report`` is one command with a subcommand per report. To add a report, write a function
``_add_NAME(reports)`` that adds its parser (with ``func``) and list it in ``REPORTS``.

``report matrix`` writes the full table to docs/matrix-resources.md; a partial run (``--op``)
never replaces that document: it writes only to an ``--output`` given for it.

>>> import os, tempfile
>>> from attnsim.cli import main
>>> out = os.path.join(tempfile.mkdtemp(), "m.md")
>>> main(["report", "matrix", "--op", "transpose", "--quiet", "--output", out])
0
>>> open(out).read().count("| transpose |")
6
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from attnsim.cli import UserError, _output, fits_in_memory, writable_file

DEFAULT_MATRIX_DOC = "docs/matrix-resources.md"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the ``report`` command and its subcommands (one per entry of ``REPORTS``)."""
    parser = subparsers.add_parser(
        "report",
        help="resource reports (matrix: the compiled matrix programs vs the paper)",
        description="Build models and report their resources next to the paper's counts.",
    )
    reports = parser.add_subparsers(dest="report", metavar="REPORT")
    for add in REPORTS:
        add(reports)
    parser.set_defaults(func=lambda args: _missing(parser))


def _missing(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _add_matrix(reports: argparse._SubParsersAction) -> None:
    parser = reports.add_parser(
        "matrix",
        help="compile every matrix program at several shapes; compare with the paper",
        description="Compile transpose, matmul, softmax, relu, maxmin, bias_add, scale, det "
        "and inverse at several shapes (hard attention, float64), measure the error against "
        "numpy and print attention layers, heads per layer, widths and parameters next to the "
        f"paper's counts. A full run writes {DEFAULT_MATRIX_DOC} (under the current folder) "
        "unless --output is given; a run of some operations (--op) writes only to --output, "
        "never over the full table.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--output",
        default=None,
        metavar="PATH",
        help=f"the Markdown file to write; '-' writes none (default: {DEFAULT_MATRIX_DOC} for "
        "a full run, none with --op)",
    )
    parser.add_argument(
        "--op",
        action="append",
        metavar="NAME",
        help="only this operation (repeatable), e.g. --op matmul --op inverse",
    )
    parser.add_argument("--samples", type=int, default=8, help="random inputs per case")
    parser.add_argument("--quiet", action="store_true", help="print nothing (write the file)")
    parser.set_defaults(func=_run_matrix)


def _add_simulator_and_all(reports: argparse._SubParsersAction) -> None:
    from attnsim.report import report_cli

    report_cli.add_report_subcommands(reports)
    # check the options before the (long) work starts
    for name, check in (("simulator", _check_builds), ("all", _check_all)):
        parser = reports.choices.get(name)
        func = parser.get_default("func") if parser is not None else None
        if func is not None:
            parser.set_defaults(func=_checked(check, func), progress=_output.Progress)


def _checked(
    check: Callable[[argparse.Namespace], None], func: Callable[[argparse.Namespace], int]
) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        check(args)
        return func(args)

    return run


def _check_builds(args: argparse.Namespace) -> None:
    """Refuses builds whose score matrices alone would not fit in memory."""
    from attnsim.simulator.layout import Layout

    for n, d, h in getattr(args, "builds", None) or ():
        length = Layout(n, d, h).length
        fits_in_memory(
            8.0 * length * length,
            f"the build {n},{d},{h} reads a sequence of {length:,} positions; running it",
            "give smaller builds to --builds",
        )


def _check_all(args: argparse.Namespace) -> None:
    """--out must be a folder that can be created or written; --cost-json must be readable."""
    out = Path(getattr(args, "out", "docs"))
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: is a file; give a folder (it is created if missing)")
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not os.access(existing, os.W_OK):
        raise UserError(
            f"--out {out}: permission denied in {existing}; choose a folder you can write"
        )
    cost = getattr(args, "cost_json", None)
    if cost is not None and not Path(cost).is_file():
        raise UserError(
            f"--cost-json {cost}: no such file; give the simulator_cost.json that "
            f"`make bench` writes, or leave --cost-json out"
        )
    if cost is not None:  # read now, before minutes of work that would end on it
        from attnsim.report.report_cli import read_cost_rows

        try:
            read_cost_rows(cost)
        except (ValueError, OSError) as exc:
            raise UserError(f"--cost-json {exc}; give the one `make bench` writes") from None


REPORTS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    _add_matrix,
    _add_simulator_and_all,
)


def _protected_docs() -> set[Path]:
    """The committed full-table document: under the current folder and in the source tree."""
    here = Path(__file__).resolve().parents[3] / DEFAULT_MATRIX_DOC
    return {Path(DEFAULT_MATRIX_DOC).resolve(), here}


def _matrix_output(args: argparse.Namespace, partial: str | None) -> Path | None:
    """The file ``report matrix`` writes (None: none), checked before any work is done.

    Args:
        args: the parsed options.
        partial: None for a full run, else how the run is partial (e.g. "--op transpose").
    """
    if args.output == "-":
        return None
    if args.output is None:
        if partial is not None:
            return None  # a partial table never goes to the default document
        default = Path(DEFAULT_MATRIX_DOC)
        if not default.parent.is_dir():
            raise UserError(
                f"a full run writes {DEFAULT_MATRIX_DOC} under the current folder, which has no "
                f"{default.parent}/ folder; run from the project root, or pass --output PATH "
                f"(or --output - to write no file)"
            )
        return writable_file(default, "--output").resolve()
    path = writable_file(args.output, "--output").resolve()
    if partial is not None and path in _protected_docs():
        raise UserError(
            f"--output {args.output} is the full table of every case, and {partial} runs only "
            f"some of them, so writing it would drop the others; choose another --output, "
            f"or leave {partial.split()[0]} out to regenerate the whole table"
        )
    return path


def _run_matrix(args: argparse.Namespace) -> int:
    from attnsim.report import matrix_table as mt  # compiles models: import only when asked

    cases = list(mt.DEFAULT_CASES)
    partial = None
    if args.op:
        known = sorted({c.op for c in cases})
        unknown = [op for op in args.op if op not in known]
        if unknown:
            raise UserError(f"unknown operation(s) {unknown}; choose from {', '.join(known)}")
        cases = [c for c in cases if c.op in args.op]
        partial = " ".join(f"--op {op}" for op in dict.fromkeys(args.op))
    if args.samples < 1:
        raise UserError(f"--samples must be at least 1, got {args.samples}")
    path = _matrix_output(args, partial)
    with _output.Progress("attnsim report matrix", total=len(cases), quiet=args.quiet) as bar:

        def progress(case: mt.Case) -> None:
            bar.step(f"compiling {case.label} {case.shape_text}")

        rows = mt.matrix_rows(cases, samples=args.samples, progress=progress)
    if path is not None:
        mt.write_doc(rows, str(path), samples=args.samples)
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not args.quiet:
        titles, cells = mt.table_cells(rows)
        _output.print_table(
            "matrix programs, compiled vs the paper",
            titles,
            cells,
            right=[t for t in titles if t not in mt.TEXT_COLUMNS],
        )
    if path is not None and not args.quiet:
        print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
    elif path is None and args.output is None and not args.quiet:
        print(
            f"attnsim report matrix: {partial} ran {len(cases)} of {len(mt.DEFAULT_CASES)} "
            f"cases, so {DEFAULT_MATRIX_DOC} (the full table) was left as it is; pass "
            f"--output PATH to write this table",
            file=sys.stderr,
        )
    return 0
