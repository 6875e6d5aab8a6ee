"""The command-line interface: ``attnsim COMMAND ...``.

Each module in this package defines one command group with ``register(subparsers)``, which
adds its parser and sets ``func(args) -> int``. ``main`` discovers them, so commands live
beside each other without a central list.

>>> main(["--version"])
attnsim 0.1.0
0
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

import attnsim


class UserError(Exception):
    """A mistake in what the user asked for: printed without a traceback, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every command module's subcommands registered."""
    parser = argparse.ArgumentParser(
        prog="attnsim",
        description="Programming transformers exactly: RASP, compiler, universal simulator.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI with ``argv`` (default: sys.argv[1:]) and returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.version:
        print(f"attnsim {attnsim.__version__}")
        return 0
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except UserError as exc:
        print(f"attnsim {args.command}: error: {exc}", file=sys.stderr)
        return 2
