"""``attnsim rasp FILE`` and ``attnsim repl``: run textual RASP programs.

``attnsim rasp FILE`` prints each statement's result on the running example, as the
original RASP REPL does; ``--eval EXPR`` evaluates one expression after running the file
(``--json``: its value as one JSON list on the last line); ``--compile NAME`` compiles an
S-op and checks the compiled model against the interpreter on the example.

RASP files may come from anyone: a run stops with a clear error after ``--max-steps`` steps
or at an integer of more than ``--max-value-digits`` digits (see
:mod:`attnsim.rasp.text.limits`), and Ctrl-C ends it with one line (status 130).

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "p.rasp").write_text("set example [3, 1, 2]\\ns = sort(tokens_int, tokens_int);\\n")
>>> from attnsim.cli import main
>>> main(["rasp", str(d / "p.rasp"), "--eval", "s", "--json"])
s([3, 1, 2]) = [1, 2, 3] (ints)
[1, 2, 3]
0
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import numbers
import re
import sys
from collections.abc import Iterator
from typing import Any

from attnsim import values
from attnsim.cli import LibraryError, UserError, at_least, fits_in_memory, only_with

# the defaults of attnsim.rasp.text.limits.Limits (a test keeps them equal), written out so
# that building the parser does not import the RASP front end (its parser, lark)
DEFAULT_MAX_STEPS = 10_000_000
DEFAULT_MAX_VALUE_DIGITS = 4300
DEFAULT_MAX_OUTPUT_CHARS = 200_000

__all__ = ["register", "run_rasp", "run_repl_command"]


def register(subparsers: Any) -> None:
    """Adds the ``rasp`` and ``repl`` commands."""
    p = subparsers.add_parser(
        "rasp",
        help="run a textual RASP program (.rasp); without a file: the interactive prompt",
        description="Run a RASP program and print each S-op on the running example. Without "
        "a FILE, at a terminal: the interactive prompt (as `attnsim repl`).",
    )
    p.add_argument("file", nargs="?", help="the .rasp file to run (none: the interactive prompt)")
    p.add_argument("--eval", metavar="EXPR", help="evaluate EXPR after running the file")
    p.add_argument(
        "--json",
        action="store_true",
        help="with --eval: end with one JSON list (a dict whose keys read alike as text: a "
        "list of [key, value] pairs)",
    )
    p.add_argument(
        "--example", metavar="LIST", help='run with this example, e.g. "[1, 2, 3]" or \'"abc"\''
    )
    p.add_argument("--compile", metavar="NAME", help="compile the S-op NAME and check it")
    p.add_argument(
        "--vocab",
        metavar="V1,V2,...",
        help="with --compile: the input vocabulary, in this order (default: the example's "
        "tokens, in order of appearance); a string token that looks like a number in quotes: "
        '\'"1","2"\'',
    )
    p.add_argument(
        "--max-seq-len", type=int, help="with --compile: the longest input (default: the example's)"
    )
    _limit_args(p)
    p.set_defaults(func=run_rasp)
    r = subparsers.add_parser(
        "repl", help="an interactive RASP prompt", description="An interactive RASP prompt."
    )
    r.add_argument("files", nargs="*", help=".rasp files to run first")
    _limit_args(r)
    r.set_defaults(func=run_repl_command)


def _limit_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-steps",
        type=int,
        default=DEFAULT_MAX_STEPS,
        metavar="N",
        help="stop a run after N steps: statements, expressions, items built "
        f"(default {DEFAULT_MAX_STEPS:,}, a few seconds)",
    )
    p.add_argument(
        "--max-value-digits",
        type=int,
        default=DEFAULT_MAX_VALUE_DIGITS,
        metavar="D",
        help=f"refuse integers of more than D digits (default {DEFAULT_MAX_VALUE_DIGITS})",
    )
    p.add_argument(
        "--max-output-chars",
        type=int,
        default=DEFAULT_MAX_OUTPUT_CHARS,
        metavar="C",
        help="stop a statement that prints more than C characters (a loop is one statement; "
        f"default {DEFAULT_MAX_OUTPUT_CHARS:,})",
    )
    p.add_argument(
        "--allow-load-outside",
        action="store_true",
        help="let `load` read files outside the program's folder (by default an absolute "
        "or ../ path that leaves it is refused)",
    )


def _runtime(args: argparse.Namespace, echo: bool) -> Any:
    from attnsim.rasp.text import Runtime
    from attnsim.rasp.text import limits as L

    at_least(args.max_steps, "--max-steps", 1)
    at_least(args.max_value_digits, "--max-value-digits", 1)
    at_least(args.max_output_chars, "--max-output-chars", 1)
    limits = L.Limits(
        max_steps=args.max_steps,
        max_value_digits=args.max_value_digits,
        max_output_chars=args.max_output_chars,
    )
    return Runtime(echo=echo, limits=limits, allow_load_outside=args.allow_load_outside)


@contextlib.contextmanager
def _int_digits(digits: int) -> Iterator[None]:
    """Lets Python print integers of up to ``digits`` digits while the block runs."""
    get = getattr(sys, "get_int_max_str_digits", None)
    old = get() if get is not None else 0
    if get is None or old == 0 or digits <= old:
        yield
        return
    sys.set_int_max_str_digits(digits)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(old)


def _jsonable(v: Any) -> Any:
    """``v`` as JSON can hold it: a non-finite float as its text; a dict as an object, its
    keys as text, unless two keys read alike as text (``1`` and ``"1"``): then as a list of
    ``[key, value]`` pairs, so that no entry is lost.

    >>> _jsonable({1: 2, "1": 3}), _jsonable({1: float("inf")})
    ([[1, 2], ['1', 3]], {'1': 'inf'})
    """
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        keys = [str(k) for k in v]
        if len(set(keys)) < len(keys):
            return [[_jsonable(k), _jsonable(x)] for k, x in v.items()]
        return {k: _jsonable(x) for k, x in zip(keys, v.values())}
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return str(v)


def _parse_token(s: str) -> Any:
    s = s.strip()
    for conv in (int, float):
        try:
            return conv(s)
        except ValueError:
            pass
    return s


def _vocab_tokens(text: str) -> list:
    """The tokens of ``--vocab V1,V2,...`` in their order, each once.

    A token is read as an int, else a float, else the text itself (spaces around it
    dropped); an item in quotes (``"1"`` or ``'1'``) is the text inside, so ``""`` is the
    empty string and ``"1"`` the string token 1. An empty item (``a,,b``) is refused: it is
    a typo more often than an empty token.

    >>> _vocab_tokens('a,1,2.5,"",a')
    ['a', 1, 2.5, '']
    >>> _vocab_tokens('"1", "2",3')
    ['1', '2', 3]
    """
    items = text.split(",")
    empty = [k + 1 for k, t in enumerate(items) if not t.strip()]
    if len(empty) == len(items):
        raise UserError(
            f"--vocab {text!r} holds no tokens; give them separated by commas, e.g. --vocab a,b,c"
        )
    if empty:
        which = ", ".join(map(str, empty))
        raise UserError(
            f"--vocab {text!r}: item{'s' if len(empty) > 1 else ''} {which} "
            f"{'are' if len(empty) > 1 else 'is'} empty (two commas in a row, or one at an "
            f'end); remove the extra comma, or write "" for the empty string as a token'
        )
    # tokens told apart as the model tells them (1 and 1.0 are two, so are 0.0 and -0.0)
    return values.distinct(_vocab_item(t) for t in items)


def _vocab_item(text: str) -> Any:
    """One item of ``--vocab``: the text inside quotes, else as :func:`_vocab_tokens` says."""
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "\"'":
        return t[1:-1]
    return _parse_token(text)


def _check_options(args: argparse.Namespace) -> None:
    """Refuses options that would be ignored, and bad sizes."""
    for flag, value, example in (
        ("--eval", args.eval, "--eval 'sort(tokens_int, tokens_int)'"),
        ("--compile", args.compile, "--compile NAME (an s-op the file defines)"),
        ("--example", args.example, "--example '[1, 2, 3]'"),
    ):
        if value is not None and not value.strip():
            raise UserError(f"{flag} {value!r} is empty; give one, e.g. {example}")
    if args.eval is None:
        only_with({"--json": args.json}, "--eval EXPR")
    if not args.compile:
        only_with(
            {"--vocab": args.vocab is not None, "--max-seq-len": args.max_seq_len is not None},
            "--compile NAME",
        )
    if args.eval is not None and args.compile:
        raise UserError(
            "--eval and --compile are separate runs: --compile checks the compiled model on "
            "the example, --eval prints an expression; give one of them"
        )
    at_least(args.max_seq_len, "--max-seq-len", 1)


def run_rasp(args: argparse.Namespace) -> int:
    """Runs ``attnsim rasp`` (see the module docstring); without a file, the prompt."""
    if args.file is None:
        return _prompt_instead(args)
    _check_options(args)
    rt = _runtime(args, echo=not (args.eval or args.compile))
    with _int_digits(args.max_value_digits):
        return _run_rasp(rt, args)


def _prompt_instead(args: argparse.Namespace) -> int:
    """``attnsim rasp`` without a file: the prompt at a terminal, else how to give input."""
    given = [
        flag
        for flag, on in (
            ("--eval", args.eval is not None),
            ("--json", args.json),
            ("--example", args.example is not None),
            ("--compile", args.compile is not None),
            ("--vocab", args.vocab is not None),
            ("--max-seq-len", args.max_seq_len is not None),
        )
        if on
    ]
    if given:
        raise UserError(
            f"{' and '.join(given)} need{'s' if len(given) == 1 else ''} a program: give the "
            f".rasp file, e.g. attnsim rasp prog.rasp {given[0]} ..."
        )
    if not _stdin_is_terminal():
        raise UserError(
            "no FILE given, and the input is not a terminal, so there is no prompt to "
            "start; give the program as a file (attnsim rasp prog.rasp), or run "
            "`attnsim repl` to read statements from this input"
        )
    args.files = []
    return run_repl_command(args)


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):  # a closed stdin
        return False


def _file_error(exc: Any, path: str) -> str:
    """A syntax error from running ``path``, at the line that lacks its ';' if one does."""
    from attnsim.rasp.text.repl import missing_semicolon

    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except (OSError, UnicodeDecodeError):
        return str(exc)
    if exc.filename is not None and exc.filename != path:
        return str(exc)  # the error is in a file the program loads
    return str(missing_semicolon(exc, source))


def _run_rasp(rt: Any, args: argparse.Namespace) -> int:
    from attnsim.rasp.text import RASPTextError
    from attnsim.rasp.text import values as V
    from attnsim.rasp.text.errors import OpError

    try:
        if args.example is not None:
            ex = rt.eval(args.example, "<--example>")
            try:
                rt.set_example(ex)
            except RASPTextError as exc:
                raise UserError(f"--example {args.example}: {exc.message}") from None
        rt.run_file(args.file)
        if args.example is not None:
            rt.set_example(ex)
        if args.compile:
            return _compile(rt, args)
        if args.eval:
            value = rt.eval(args.eval)
            if isinstance(value, (V.SeqVal, V.SelVal)):
                shown = f"{args.eval}({V.format_example(rt.seq_example)}) ="
                value = rt.apply(
                    value, rt.seq_example if isinstance(value, V.SeqVal) else (rt.sel_example)
                )
            else:
                shown = f"{args.eval} ="
            if isinstance(value, V.Applied):
                print(shown, str(value))
                result: Any = value.values
            elif isinstance(value, V.AppliedSelector):
                print(shown)
                print(str(value))
                result = value.matrix
            else:
                print(shown, V.format_value(value))
                result = value if isinstance(value, list) else [value]
            if args.json:
                print(json.dumps(_jsonable(result)))
    except RASPTextError as exc:
        raise UserError(_file_error(exc, args.file)) from None
    except OpError as exc:  # outside a statement (e.g. applying the --eval value)
        raise UserError(exc.message + (f"\n  {exc.hint}" if exc.hint else "")) from None
    return 0


def _compile(rt: Any, args: argparse.Namespace) -> int:
    import numpy as np

    from attnsim import rasp
    from attnsim.model.checks import RunTimeCheckError
    from attnsim.rasp.text import values as V

    try:
        from attnsim import compiler
    except ImportError as exc:
        raise UserError(
            f"--compile needs attnsim.compiler, which is not available in this installation "
            f"({exc}); run without --compile to interpret the program"
        ) from None
    compile_program = getattr(compiler, "compile_program", None)
    if compile_program is None:
        raise UserError(
            "--compile needs attnsim.compiler.compile_program, which this installation lacks"
        )
    program = rt.sop(args.compile)
    example = list(rt.seq_example)
    if args.vocab is not None:
        # the user's order (a set would lose it): it is the order of the model's token
        # directions and of the vocabulary the model reports
        vocab = _vocab_tokens(args.vocab)
        declared = {values.value_key(v) for v in vocab}
        outside = [t for t in values.distinct(example) if values.value_key(t) not in declared]
        if outside:
            shown = ", ".join(repr(t) for t in outside)
            alike = [
                f"{t!r} is not the token {v!r}"
                for t in outside
                if (v := values.lookalike(t, vocab)) is not None
            ]
            spelled = [
                f"{t!r} is not the token {v!r}"
                for t in outside
                if isinstance(t, str) and (v := _spelled(t, vocab)) is not None
            ]
            why = (
                f" ({', '.join(alike)}: tokens differ by type and value, and a float by its sign)"
                if alike
                else ""
            ) + (
                f' ({", ".join(spelled)}: a string token is given in quotes, --vocab \'"1","2"\')'
                if spelled
                else ""
            )
            raise UserError(
                f"the example {example} has token(s) {shown} outside --vocab {args.vocab}"
                f"{why}; add them to --vocab or set an example that uses only its tokens"
            )
    else:
        vocab = values.distinct(example)  # in order of first appearance
    max_len = args.max_seq_len or len(example)
    if len(example) > max_len:
        raise UserError(
            f"the example has {len(example)} tokens, more than --max-seq-len {max_len}; pass "
            f"--max-seq-len {len(example)} or more"
        )
    _check_compile_memory(program, vocab, max_len, args.max_seq_len is not None)
    try:
        model = compile_program(program, vocab=vocab, max_seq_len=max_len)
    except (ValueError, NotImplementedError, TypeError) as exc:
        raise LibraryError(f"cannot compile {args.compile}: {exc}") from None
    try:
        compiled = model.run(example)
    except RunTimeCheckError as exc:  # the check's advice for Python callers does not apply
        raise UserError(_PYTHON_ONLY.sub("", str(exc))) from None
    if compiled and isinstance(compiled[0], (list, tuple, np.ndarray)) and len(compiled) == 1:
        compiled = list(compiled[0])
    with rt.budget():
        interpreted = rasp.evaluate(program, example)
    # one formatter for both lines, and the one a file run uses: the original's types (an
    # int where the original holds an int), every value in full
    typed = rt.apply(rt.get(args.compile), example).values
    print(f"vocab:       {list(model.vocab) if model.vocab is not None else None}")
    print(f"example:     {V.format_value(example)}")
    print(f"interpreted: {V.format_value(typed)}")
    print(f"compiled:    {V.format_value(_typed_like(list(compiled), typed))}")
    same = len(compiled) == len(interpreted) and all(
        _close(a, b) for a, b in zip(compiled, interpreted)
    )
    print("compiled == interpreted:", "yes" if same else "NO")
    return 0 if same else 1


def _typed_like(values: list, typed: list) -> list:
    """``values`` (a compiled model's) with an int where ``typed`` (the interpreter's) has
    one and the value is that integer exactly; anything else as it is.

    >>> _typed_like([0.0, 1.5, 2.0000001], [0, 1.5, 2])
    [0, 1.5, 2.0000001]
    """
    out = []
    for v, t in zip(values, typed):
        if isinstance(t, int) and not isinstance(t, bool) and _is_whole(v):
            v = int(v)
        out.append(v)
    return out + list(values[len(typed) :])


def _is_whole(v: Any) -> bool:
    """Whether ``v`` is a float (Python's or numpy's) holding a whole number."""
    if isinstance(v, (bool, int, str)) or not isinstance(v, numbers.Real):
        return False
    return math.isfinite(float(v)) and float(v).is_integer()


def _uses_positions(program: Any) -> bool:
    """Whether the program reads ``indices`` or ``length`` (one direction per position)."""
    from attnsim import rasp

    seen: set[int] = set()
    stack = [program]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, (rasp.IndicesType, rasp.LengthType)):
            return True
        stack.extend(e.children)
    return False


def _check_compile_memory(program: Any, vocab: list, max_len: int, given: bool) -> None:
    """Refuses a --max-seq-len whose positional embedding alone would not fit in memory."""
    # W_pos is [max_len + 1, d_model] float64; d_model counts the vocabulary, and one
    # direction per position when the program reads indices or length
    width = len(vocab) + 2 + (max_len if _uses_positions(program) else 0)
    if given:
        fits_in_memory(
            8.0 * (max_len + 1) * width,
            f"compiling with --max-seq-len {max_len:,} (a positional embedding of "
            f"{max_len + 1:,} x {width:,} float64 values)",
            "pass a smaller --max-seq-len",
        )


def _spelled(token: str, vocab: list) -> Any:
    """The number of ``vocab`` that the string ``token`` spells (``1`` for ``"1"``), or None."""
    v = _parse_token(token)
    if isinstance(v, str):
        return None
    return next((x for x in vocab if values.value_key(x) == values.value_key(v)), None)


# advice in a run-time check's message that only a Python caller can follow
_PYTHON_ONLY = re.compile(r",? or pass check=False for the raw output")


def _close(a: Any, b: Any) -> bool:
    """Equal values; numbers up to float rounding (1e-9 relative, 1e-12 near 0): a compiled
    model gives the interpreter's value, computed in another order.

    >>> _close(2.0, 2.0000000000000004), _close(1000.0004, 1000.0), _close("a", "a")
    (True, False, True)
    """
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def run_repl_command(args: argparse.Namespace) -> int:
    """Runs ``attnsim repl``: the given files, then an interactive prompt."""
    from attnsim.rasp.text import RASPTextError, run_repl

    rt = _runtime(args, echo=True)
    with _int_digits(args.max_value_digits):
        for f in args.files:
            try:
                rt.run_file(f)
            except RASPTextError as exc:
                raise UserError(str(exc)) from None
        return run_repl(rt, interactive=_stdin_is_terminal())
