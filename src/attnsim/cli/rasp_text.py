"""``attnsim rasp FILE`` and ``attnsim repl``: run textual RASP programs.

``attnsim rasp FILE`` prints each statement's result on the running example, as the
original RASP REPL does; ``--eval EXPR`` evaluates one expression after running the file
(``--json``: its value as one JSON list on the last line); ``--compile NAME`` compiles an
S-op and checks the compiled model against the interpreter on the example.

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
import json
import math
from typing import Any

from attnsim.cli import UserError

__all__ = ["register", "run_rasp", "run_repl_command"]


def register(subparsers: Any) -> None:
    """Adds the ``rasp`` and ``repl`` commands."""
    p = subparsers.add_parser(
        "rasp",
        help="run a textual RASP program (.rasp)",
        description="Run a RASP program and print each S-op on the running example.",
    )
    p.add_argument("file", help="the .rasp file to run")
    p.add_argument("--eval", metavar="EXPR", help="evaluate EXPR after running the file")
    p.add_argument("--json", action="store_true", help="with --eval: end with one JSON list")
    p.add_argument(
        "--example", metavar="LIST", help='run with this example, e.g. "[1, 2, 3]" or \'"abc"\''
    )
    p.add_argument("--compile", metavar="NAME", help="compile the S-op NAME and check it")
    p.add_argument("--vocab", metavar="V1,V2,...", help="with --compile: the input vocabulary")
    p.add_argument("--max-seq-len", type=int, help="with --compile: the longest input")
    p.set_defaults(func=run_rasp)
    r = subparsers.add_parser(
        "repl", help="an interactive RASP prompt", description="An interactive RASP prompt."
    )
    r.add_argument("files", nargs="*", help=".rasp files to run first")
    r.set_defaults(func=run_repl_command)


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
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


def run_rasp(args: argparse.Namespace) -> int:
    """Runs ``attnsim rasp`` (see the module docstring)."""
    from attnsim.rasp.text import RASPTextError, Runtime
    from attnsim.rasp.text import values as V

    quiet = bool(args.eval or args.compile)
    rt = Runtime(echo=not quiet)
    try:
        if args.example is not None:
            ex = rt.eval(args.example, "<--example>")
            if not isinstance(ex, (list, str)) or not ex:
                raise UserError(f"--example must be a non-empty list or string, got {args.example}")
            rt.set_example(ex)
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
        raise UserError(str(exc)) from None
    except Exception as exc:  # an OpError outside a statement (e.g. --eval application)
        from attnsim.rasp.text.errors import OpError

        if isinstance(exc, OpError):
            raise UserError(exc.message + (f"\n  {exc.hint}" if exc.hint else "")) from None
        raise
    return 0


def _compile(rt: Any, args: argparse.Namespace) -> int:
    import numpy as np

    from attnsim import rasp

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
    vocab = (
        {_parse_token(t) for t in args.vocab.split(",") if t.strip()}
        if args.vocab
        else set(example)
    )
    max_len = args.max_seq_len or len(example)
    model = compile_program(program, vocab=vocab, max_seq_len=max_len)
    compiled = model.run(example)
    if compiled and isinstance(compiled[0], (list, tuple, np.ndarray)) and len(compiled) == 1:
        compiled = list(compiled[0])
    interpreted = rasp.evaluate(program, example)
    print(f"example:     {example}")
    print(f"interpreted: {interpreted}")
    print(f"compiled:    {list(compiled)}")
    same = len(compiled) == len(interpreted) and all(
        _close(a, b) for a, b in zip(compiled, interpreted)
    )
    print("compiled == interpreted:", "yes" if same else "NO")
    return 0 if same else 1


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-6)
    return a == b


def run_repl_command(args: argparse.Namespace) -> int:
    """Runs ``attnsim repl``: the given files, then an interactive prompt."""
    from attnsim.rasp.text import RASPTextError, Runtime, run_repl

    rt = Runtime(echo=True)
    for f in args.files:
        try:
            rt.run_file(f)
        except RASPTextError as exc:
            raise UserError(str(exc)) from None
    return run_repl(rt)
