"""The command-line interface: ``attnsim COMMAND ...``.

Each module in this package defines one command group with ``register(subparsers)``, which
adds its parser and sets ``func(args) -> int``. ``main`` discovers them, so commands live
beside each other without a central list.

A mistake in what was asked for (a bad flag, a missing or unreadable file, a value out of
range, an option that would be ignored) ends in one line ``attnsim COMMAND: error: ...`` on
stderr and exit status 2, never in a traceback; Ctrl-C ends in one line and status 130. An
unexpected failure (a bug) prints one line and a hint: ``attnsim --debug COMMAND ...`` shows
its traceback.

>>> main(["--version"])
attnsim 0.1.0
0
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import re
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import attnsim

EXIT_USER_ERROR = 2  # a mistake in the command line or its files (argparse's status too)
EXIT_INTERNAL_ERROR = 1  # an unexpected failure: a bug
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT
EXIT_BROKEN_PIPE = 141  # the output's reader left, as shells report SIGPIPE


class UserError(Exception):
    """A mistake in what the user asked for: printed without a traceback, exit status 2."""


class LibraryError(UserError):
    """A library call refused the user's input: its advice is put in the command's flags.

    ``main`` passes the message through :func:`cli_words`, so "build U with a larger
    score_bound" reaches the user as "pass a larger --score-bound". Use it where a library
    message is wrapped, not for messages about the user's own names (RASP programs).
    """


class _UsageError(Exception):
    """argparse found a bad command line; ``prog`` is the (sub)command's name."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog


class HelpFormatter(argparse.HelpFormatter):
    """Help that shows each option's default, and keeps pre-formatted text as written.

    An option's help gets ``(default: X)`` unless it already names its default, or has
    none to name (None, False, a flag). A description or epilog that holds line breaks is
    printed as it is (its author laid it out); one long line is wrapped to the terminal.

    >>> p = Parser(prog="x")
    >>> _ = p.add_argument("--samples", type=int, default=8, help="inputs per case")
    >>> _ = p.add_argument("--seed", type=int, default=0, help="the seed (default 0)")
    >>> text = p.format_help()
    >>> "inputs per case (default: 8)" in text, "(default 0) (default" in text
    (True, False)
    """

    def __init__(self, prog: str, **kwargs) -> None:
        kwargs.setdefault("max_help_position", 30)
        super().__init__(prog, **kwargs)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            text
            and "default" not in text.lower()
            and not any(default is v for v in (None, False, True, argparse.SUPPRESS))
            and (action.option_strings or action.nargs in ("?", "*"))
        ):
            shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else default
            text += f" (default: {shown})"
        return text

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text.strip():
            return "".join(indent + line for line in text.splitlines(keepends=True))
        text = " ".join(text.split())
        return textwrap.fill(
            text,
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,  # a flag such as --no-norm-first stays whole
            break_long_words=False,
        )

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(
            " ".join(text.split()), width, break_on_hyphens=False, break_long_words=False
        )


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors end in one line (no usage block) and do not exit.

    ``main`` prints them, so ``main(argv)`` returns a status instead of raising SystemExit.
    Its help shows every option's default (:class:`HelpFormatter`); subcommands' parsers are
    Parsers too.
    """

    def __init__(self, *args, **kwargs) -> None:
        if kwargs.get("formatter_class") in (None, argparse.RawDescriptionHelpFormatter):
            kwargs["formatter_class"] = HelpFormatter
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(self.prog, f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every command module's subcommands registered."""
    parser = Parser(
        prog="attnsim",
        description="Programming transformers exactly: RASP, compiler, universal simulator.",
        epilog="--debug (anywhere on the line) shows the traceback of an unexpected error.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    _name_commands(parser)
    return parser


def _name_commands(parser: argparse.ArgumentParser) -> None:
    """Each (sub)command's parser records its name (``_prog``): an argument it does not
    know is reported against it, not against ``attnsim``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sp in action.choices.values():
                sp.set_defaults(_prog=sp.prog)
                _name_commands(sp)


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, where a command that takes a list of names after its
    options (``set_defaults(_more=dest)``) also takes names given after them (``suite build
    DIR --per-length 2 make_hist``); any other argument left over is refused by the
    command that was given it."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        more = getattr(args, "_more", None)
        if more is not None and not any(a.startswith("-") for a in extra):
            getattr(args, more).extend(extra)
        else:
            prog = getattr(args, "_prog", parser.prog)
            raise _UsageError(
                prog, f"unrecognized arguments: {' '.join(extra)} (see '{prog} --help')"
            )
    return args


def _split_debug(argv: list[str]) -> tuple[list[str], bool]:
    """Removes ``--debug`` from anywhere before a ``--`` separator."""
    end = argv.index("--") if "--" in argv else len(argv)
    debug = "--debug" in argv[:end]
    return [a for a in argv[:end] if a != "--debug"] + argv[end:], debug


def describe_error(exc: BaseException) -> str:
    """One line for an error a library call raised on the user's input.

    >>> describe_error(FileNotFoundError(2, "No such file or directory", "x.pt"))
    "cannot open 'x.pt': No such file or directory"
    >>> describe_error(MemoryError())
    'out of memory; ask for smaller sizes (--max-n, --max-d, --max-seq-len, ...)'
    """
    if isinstance(exc, OSError) and exc.strerror:
        where = f" {str(exc.filename)!r}" if exc.filename is not None else ""
        return f"cannot open{where}: {exc.strerror}"
    if isinstance(exc, MemoryError):
        return "out of memory; ask for smaller sizes (--max-n, --max-d, --max-seq-len, ...)"
    if isinstance(exc, RecursionError):
        return "the input nests too deeply to process"
    text = str(exc).strip() or type(exc).__name__
    return text


# advice in library messages written for Python callers, and what a shell user does instead;
# a rule applies only where the command has every flag it names
_CALL_ADVICE: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        r"build a larger U with simulator\.build\(max_n, max_d, max_heads\)",
        "pass a larger --max-d or --max-heads",
        ("--max-d", "--max-heads"),
    ),
    (r"build a larger U\b", "pass a larger --max-n", ("--max-n",)),
    (r"build (?:a )?U with a larger (\w+)", r"pass a larger \1", ()),
    (r"use dtype=torch\.float64", "leave --float32 out (float64)", ("--float32",)),
    (r"in torch\.float32\b", "in float32 (--float32)", ("--float32",)),
    (r"pass vocab=\[\.\.\.\]", "pass --vocab V1,V2,...", ("--vocab",)),
)


def cli_words(message: str, flags: set[str] | frozenset[str]) -> str:
    """``message`` with the Python names of options the command has turned into its flags.

    Library errors speak to Python callers ("build U with a larger score_bound",
    "max_seq_len=8"); through the command line the same advice must name the flag the user
    can set. Only names the command has a flag for are changed (a name with an underscore,
    or ``name=value``), so the message never points to a flag that does not exist.

    Args:
        message: the library's message.
        flags: the command's option strings, e.g. ``{"--max-n", "--score-bound"}``.

    >>> flags = {"--max-n", "--max-d", "--max-heads", "--score-bound", "--maps"}
    >>> cli_words("build U with a larger score_bound (at most 8191)", flags)
    'pass a larger --score-bound (at most 8191)'
    >>> cli_words("build a larger U with simulator.build(max_n, max_d, max_heads)", flags)
    'pass a larger --max-d or --max-heads'
    >>> cli_words("this U (maps='relu') was built with max_n=4", flags)
    'this U (--maps relu) was built with --max-n 4'
    >>> cli_words("exceeds max_seq_len=8", flags)  # no --max-seq-len here: unchanged
    'exceeds max_seq_len=8'
    >>> cli_words("built with norm_first=False", {"--norm-first", "--no-norm-first"})
    'built with --no-norm-first'
    """
    for pattern, advice, needs in _CALL_ADVICE:
        if all(f in flags for f in needs):
            message = re.sub(pattern, advice, message)

    def flag(name: str) -> str | None:
        f = "--" + name.replace("_", "-")
        return f if f in flags else None

    def assignment(m: re.Match) -> str:
        f = flag(m.group(1))
        if f is None:
            return m.group(0)
        if m.group(3) in ("True", "False"):  # a boolean option: its flag takes no value
            off = "--no-" + f[2:]
            return f if m.group(3) == "True" else (off if off in flags else m.group(0))
        return f"{f} {m.group(3)}"

    # name=value, name='value', name="value" (not inside a longer word or a flag)
    message = re.sub(r"(?<![\w.-])([a-z][a-z0-9_]*)=(['\"]?)([^\s,;)'\"]+)\2", assignment, message)

    def bare(m: re.Match) -> str:
        return flag(m.group(1)) or m.group(0)

    # a bare option name: only names with an underscore (plain words stay words)
    return re.sub(r"(?<![\w.-])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b(?![(.])", bare, message)


# "--max-steps (Limits(max_steps=...))": the Python spelling beside a flag, for API callers
_PYTHON_ASIDE = re.compile(r" \((?:Limits|Runtime)\([a-z_]+=\.\.\.\)\)")


def without_python_asides(message: str) -> str:
    """``message`` without the Python spellings library errors add beside a flag.

    >>> without_python_asides("raise it with --max-steps (Limits(max_steps=...)) or stop")
    'raise it with --max-steps or stop'
    """
    return _PYTHON_ASIDE.sub("", message)


def _command_flags(parser: argparse.ArgumentParser, args_list: list[str]) -> frozenset[str]:
    """The option strings of the (sub)command that ``args_list`` runs."""
    flags: set[str] = set()
    words = [a for a in args_list if not a.startswith("-")]
    while True:
        flags.update(s for a in parser._actions for s in a.option_strings)
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None:
            return frozenset(flags)
        name = next((w for w in words if w in sub.choices), None)
        if name is None:
            return frozenset(flags)
        parser = sub.choices[name]
        words = words[words.index(name) + 1 :]


# errors that library calls raise for bad input (the house style's error types)
_USER_ERRORS = (ValueError, TypeError, OSError, NotImplementedError, MemoryError, RecursionError)


def _rasp_text_errors() -> tuple[type[Exception], ...]:
    """RASPTextError when the RASP front end is loaded (else none can have been raised).

    Looked up when an error is being handled, so commands that never load the front end
    (``info --list``, ``simulate``) do not import its parser.
    """
    errors = sys.modules.get("attnsim.rasp.text.errors")
    return (errors.RASPTextError,) if errors is not None else ()


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI with ``argv`` (default: sys.argv[1:]) and returns the exit status."""
    args_list, debug = _split_debug(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    try:
        args = _parse(parser, args_list)
    except _UsageError as exc:
        print(f"{exc.prog}: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except SystemExit as exc:  # --help, --version of a subcommand
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if args.version:
        print(f"attnsim {attnsim.__version__}")
        return 0
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_USER_ERROR
    prefix = f"attnsim {args.command}"
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        print(f"{prefix}: interrupted (Ctrl-C)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader left (`attnsim info --list | head`): stop quietly
        try:  # Python flushes stdout at exit: point it at /dev/null first
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass
        return EXIT_BROKEN_PIPE
    except (UserError, *_rasp_text_errors()) as exc:
        text = without_python_asides(str(exc))
        if isinstance(exc, LibraryError):
            text = cli_words(text, _command_flags(parser, args_list))
        print(f"{prefix}: error: {text}", file=sys.stderr)
        return EXIT_USER_ERROR
    except _USER_ERRORS as exc:
        if debug:
            raise
        text = cli_words(
            without_python_asides(describe_error(exc)), _command_flags(parser, args_list)
        )
        print(f"{prefix}: error: {text}", file=sys.stderr)
        return EXIT_USER_ERROR
    except Exception as exc:  # a bug: say so in one line, --debug shows where
        if debug:
            raise
        print(
            f"{prefix}: internal error: {type(exc).__name__}: {exc}\n"
            f"  this is a bug in attnsim; rerun with --debug to see the traceback",
            file=sys.stderr,
        )
        return EXIT_INTERNAL_ERROR


# -- checks shared by the commands ---------------------------------------------------------


def at_least(value: int | float | None, flag: str, low: int | float) -> None:
    """Raises UserError unless ``value`` (when given) is at least ``low``.

    >>> at_least(0, "--max-n", 1)
    Traceback (most recent call last):
    ...
    attnsim.cli.UserError: --max-n must be >= 1, got 0
    """
    if value is not None and value < low:
        raise UserError(f"{flag} must be >= {low}, got {value}")


def only_with(given: dict[str, bool], needs: str) -> None:
    """Refuses options that would be ignored: each flag set in ``given`` lacks ``needs``.

    Args:
        given: flag -> whether the user set it.
        needs: what those flags need, e.g. "--eval EXPR".

    >>> only_with({"--json": True, "--vocab": False}, "--eval EXPR")
    Traceback (most recent call last):
    ...
    attnsim.cli.UserError: --json applies only with --eval EXPR; add --eval EXPR or leave --json out
    """
    bad = [flag for flag, on in given.items() if on]
    if bad:
        what = " and ".join(bad)
        verb = "applies" if len(bad) == 1 else "apply"
        raise UserError(f"{what} {verb} only with {needs}; add {needs} or leave {what} out")


def writable_file(path: str | os.PathLike, flag: str) -> Path:
    """Checks before any work is done that ``path`` can be written; returns it as a Path.

    >>> writable_file("/no/such/folder/out.md", "--output")
    Traceback (most recent call last):
    ...
    attnsim.cli.UserError: --output /no/such/folder/out.md: the folder /no/such/folder does \
not exist; create it or choose another path
    """
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise UserError(f"{flag} {p}: is a folder; give a file path")
    if not parent.is_dir():
        raise UserError(
            f"{flag} {p}: the folder {parent} does not exist; create it or choose another path"
        )
    if (p.exists() and not os.access(p, os.W_OK)) or (
        not p.exists() and not os.access(parent, os.W_OK)
    ):
        raise UserError(f"{flag} {p}: permission denied; choose a path you can write")
    why = _write_refused(p if p.exists() else parent)
    if why:
        raise UserError(f"{flag} {p}: cannot be written ({why}); choose another path")
    return p


def _write_refused(p: Path) -> str | None:
    """Why writing to ``p`` would fail (None: nothing found), found without changing it.

    An existing file or device is opened for appending and given a write of zero bytes
    (``/dev/full`` refuses even that: "No space left on device"); a folder that a new file
    would go into must have free space. A FIFO is not opened (that would wait for a reader).

    >>> _write_refused(Path("/dev/full"))
    'No space left on device'
    """
    import stat

    try:
        mode = p.stat().st_mode
        if stat.S_ISDIR(mode):
            statvfs = getattr(os, "statvfs", None)  # not on Windows
            full = statvfs is not None and statvfs(p).f_bavail == 0
            return "No space left on device" if full else None
        if stat.S_ISFIFO(mode):
            return None
        fd = os.open(p, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NONBLOCK", 0))
        try:
            os.write(fd, b"")
        finally:
            os.close(fd)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def fits_in_memory(need: float, what: str, fix: str) -> None:
    """Refuses work whose estimated memory ``need`` (bytes) exceeds what is available.

    What is available, and the unit of the message (GiB), come from
    :mod:`attnsim.model.memory`, imported here rather than at start-up because it needs torch.
    """
    from attnsim.model import memory

    have = memory.available_memory()
    if have is not None and need > have:
        raise UserError(
            f"{what} needs at least {memory.gib(need)} of memory, more than the "
            f"{memory.gib(have)} available; {fix}"
        )
