"""``attnsim demo``: the universal simulator; ``--library``: the RASP library programs.

>>> import io, rich.console
>>> buffer = io.StringIO()
>>> library_demo(rich.console.Console(file=buffer, width=200))
0
>>> row = next(line for line in buffer.getvalue().splitlines() if " make_hist " in line)
>>> [cell.strip() for cell in row.split("│")[1:-1]]
['make_hist', '1', '1', '0', 'a b b c a b', '2 3 3 1 2 3']
"""

from __future__ import annotations

import argparse
from typing import Any

import rich.console
import rich.table
import rich.text

from attnsim.rasp import analysis, interpret
from attnsim.rasp import library as lib


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
    console = rich.console.Console()
    if args.library:
        return library_demo(console)
    from attnsim.simulator.verify import demo

    return demo(console)


def _show(values: list[Any]) -> str:
    def one(v: Any) -> str:
        return format(v, ".4g") if isinstance(v, float) else str(v)

    return " ".join(one(v) for v in values)


def library_demo(console: rich.console.Console) -> int:
    """Prints a table of the library programs: layers, heads per layer, MLPs, example run.

    Args:
        console: where to print.

    Returns:
        0 (the exit status).
    """
    table = rich.table.Table(title="RASP library programs (reference interpreter)")
    table.add_column("program", style="bold")
    table.add_column("layers", justify="right")
    table.add_column("heads/layer")
    table.add_column("MLPs", justify="right")
    table.add_column("input")
    table.add_column("output")
    for name, entry in lib.PROGRAMS.items():
        program = entry.factory()
        stats = analysis.analyze(program)
        out = interpret.evaluate(
            program, entry.example, vocab=entry.vocab, max_seq_len=entry.max_seq_len
        )
        table.add_row(
            name,
            str(stats.n_layers),
            "/".join(map(str, stats.heads_per_layer)) or "-",
            str(stats.n_mlps),
            rich.text.Text(_show(entry.example)),  # Text: brackets are not markup
            rich.text.Text(_show(out)),
        )
    console.print(table)
    console.print("Details of one program: attnsim info PROGRAM (attnsim info --list)")
    return 0
