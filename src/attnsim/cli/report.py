"""``attnsim report KIND``: resource reports; ``matrix`` compiles the matrix programs.

``report`` is one command with a subcommand per report. To add a report, write a function
``_add_NAME(reports)`` that adds its parser (with ``func``) and list it in ``REPORTS``.

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
from collections.abc import Callable

import rich.console
import rich.progress
import rich.table

from attnsim.cli import UserError

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
        f"paper's counts. Writes {DEFAULT_MATRIX_DOC} unless --output - is given.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--output",
        default=DEFAULT_MATRIX_DOC,
        metavar="PATH",
        help=f"the Markdown file to write (default {DEFAULT_MATRIX_DOC}; '-' writes none)",
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


REPORTS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (
    _add_matrix,
    _add_simulator_and_all,
)


def _run_matrix(args: argparse.Namespace) -> int:
    from attnsim.report import matrix_table as mt  # compiles models: import only when asked

    cases = list(mt.DEFAULT_CASES)
    if args.op:
        known = sorted({c.op for c in cases})
        unknown = [op for op in args.op if op not in known]
        if unknown:
            raise UserError(f"unknown operation(s) {unknown}; choose from {', '.join(known)}")
        cases = [c for c in cases if c.op in args.op]
    if args.samples < 1:
        raise UserError(f"--samples must be at least 1, got {args.samples}")
    console = rich.console.Console(stderr=True, quiet=args.quiet or args.json)
    with rich.progress.Progress(console=console, transient=True) as bar:
        task = bar.add_task("compiling", total=len(cases))

        def progress(case: mt.Case) -> None:
            bar.update(task, advance=1, description=f"{case.label} {case.shape_text}")

        rows = mt.matrix_rows(cases, samples=args.samples, progress=progress)
    if args.output != "-":
        mt.write_doc(rows, args.output, samples=args.samples)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    titles, cells = mt.table_cells(rows)
    table = rich.table.Table(title="matrix programs, compiled vs the paper")
    for title in titles:
        table.add_column(title, justify="left" if title in ("operation", "shape") else "right")
    for row in cells:
        table.add_row(*row)
    out = rich.console.Console(quiet=args.quiet)
    out.print(table)
    if args.output != "-":
        out.print(f"wrote {args.output}")
    return 0
