"""``attnsim demo``: the universal simulator; ``--library``: the RASP library programs.

>>> import contextlib, io
>>> buffer = io.StringIO()
>>> with contextlib.redirect_stdout(buffer):  # not a terminal: a Markdown table
...     status = library_demo()
>>> status
0
>>> row = next(line for line in buffer.getvalue().splitlines() if " make_hist " in line)
>>> [cell.strip() for cell in row.split("|")[1:-1]]
['make_hist', '1', '1', '0', 'a b b c a b', '2 3 3 1 2 3']
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from attnsim.cli import _output
from attnsim.rasp import analysis, interpret
from attnsim.rasp import library as lib

if TYPE_CHECKING:  # rich is imported where it is used: ``attnsim --help`` stays fast
    import rich.console


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the ``demo`` command."""
    parser = subparsers.add_parser(
        "demo",
        help="the universal simulator U on an embedded default (or --library: RASP programs)",
        description="Build the universal simulator U, simulate a torch.nn.MultiheadAttention "
        "and random attention layers with it, and compare with plain torch. With --library: "
        "evaluate every RASP library program and show the transformer it needs.",
    )
    parser.add_argument("--library", action="store_true", help="show the RASP library instead")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.library:
        return library_demo()
    import rich.console

    from attnsim.simulator.verify import demo

    # soft_wrap: report lines stay whole (not broken mid-list at 80 columns through a pipe)
    console = rich.console.Console(soft_wrap=True)
    if not _output.is_terminal(sys.stderr):  # on a terminal the demo shows a spinner
        # a whole line: the demo prints its results while it works
        print(
            "attnsim demo: building U(4,4,2), then simulating a MultiheadAttention and 20 "
            "random targets (a few seconds)...",
            file=sys.stderr,
            flush=True,
        )
    return demo(console)


def _show(values: list[Any]) -> str:
    def one(v: Any) -> str:
        return format(v, ".4g") if isinstance(v, float) else str(v)

    return " ".join(one(v) for v in values)


def library_demo(console: rich.console.Console | None = None) -> int:
    """Prints a table of the library programs: layers, heads per layer, MLPs, example run.

    Every program name appears in full (it is what ``attnsim info`` takes): a rich table on
    a terminal wide enough, else a Markdown table (a pipe, a narrow terminal).

    Args:
        console: where to print (default: stdout).

    Returns:
        0 (the exit status).
    """
    rows = []
    for name, entry in lib.PROGRAMS.items():
        program = entry.factory()
        stats = analysis.analyze(program)
        out = interpret.evaluate(
            program, entry.example, vocab=entry.vocab, max_seq_len=entry.max_seq_len
        )
        rows.append(
            [
                name,
                str(stats.n_layers),
                "/".join(map(str, stats.heads_per_layer)) or "-",
                str(stats.n_mlps),
                _show(entry.example),
                _show(out),
            ]
        )
    _output.print_table(
        "RASP library programs (reference interpreter)",
        ["program", "layers", "heads/layer", "MLPs", "input", "output"],
        rows,
        right=["layers", "MLPs"],
        wrap=["input", "output"],
        console=console,
    )
    _output.print_lines(
        "Details of one program: attnsim info PROGRAM (attnsim info --list)", console=console
    )
    return 0
