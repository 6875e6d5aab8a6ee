"""``attnsim info PROGRAM``: a library program's layers, heads, MLPs and a sample evaluation.

Two counts of the transformer a program needs, each labelled: ``analysis`` (every RASP
operation as early as possible: attention layers, heads per layer, Map/SequenceMap nodes
per layer, as the RASP paper counts) and ``compiled`` (the model ``attnsim.compiler``
builds, from its own report: blocks, heads per block, widths). In ``--json`` every
per-layer list has one entry per layer of its section. Text lines fit the terminal (80
columns through a pipe): a longer one goes on in indented lines.

>>> from attnsim.cli import main
>>> main(["info", "make_hist", "--input", "a b a"])  # doctest: +ELLIPSIS
make_hist: How often each position's token occurs in the whole input.
program hist: 1 attention layer(s), 1 head(s) (at most 1 per layer), 0 MLP(s)
...
compiled: 1 layer (1 with attention), heads per layer [1], d_model 16, d_mlp 17,
...
input:  ['a', 'b', 'a']
output: [2, 1, 2]
0
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
from typing import Any

from attnsim.cli import UserError, _output
from attnsim.rasp import analysis, interpret
from attnsim.rasp import library as lib


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the ``info`` command."""
    parser = subparsers.add_parser(
        "info",
        help="show a library program's layers, heads, MLPs and a sample evaluation",
        description="Analyse a RASP library program (attention layers, heads per layer, MLPs, "
        "scheduled as early as possible) and evaluate it on an example input.",
    )
    parser.add_argument("program", nargs="?", help="a program name (see --list)")
    parser.add_argument("--list", action="store_true", help="list the library programs")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument(
        "--input",
        metavar="TOKENS",
        help="tokens separated by spaces (default: the program's example input)",
    )
    parser.add_argument("--causal", action="store_true", help="evaluate in causal mode")
    parser.set_defaults(func=run)


def summary(name: str) -> str:
    """The first line of the library function's docstring."""
    doc = (getattr(lib, name).__doc__ or "").strip()
    first = doc.splitlines()[0] if doc else ""
    # plain text: ``code`` -> code, :func:`name` -> name
    return re.sub(r":\w+:`([^`]*)`", r"\1", first).replace("``", "")


def lookup(name: str) -> lib.LibraryProgram:
    """The registry entry ``name``, or a UserError that suggests close names."""
    try:
        return lib.PROGRAMS[name]
    except KeyError:
        close = difflib.get_close_matches(name, lib.PROGRAMS, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UserError(
            f"unknown program {name!r}; {hint}run `attnsim info --list` to see the "
            f"{len(lib.PROGRAMS)} library programs"
        ) from None


def parse_tokens(text: str, vocab: tuple) -> list[Any]:
    """Space-separated tokens, each matched to the vocabulary element with that spelling."""
    by_text = {str(v): v for v in vocab}
    tokens = []
    for word in text.split():
        if word not in by_text:
            raise UserError(
                f"token {word!r} is not in this program's vocabulary "
                f"{' '.join(by_text)}; use only those tokens, separated by spaces"
            )
        tokens.append(by_text[word])
    if not tokens:
        raise UserError("--input is empty; give tokens separated by spaces, e.g. --input 'a b a'")
    return tokens


def schedule(program: Any) -> dict[str, Any]:
    """The as-early-as-possible schedule as JSON: per-layer lists of length ``n_layers``.

    ``mlps_per_layer[i]`` counts the Map/SequenceMap nodes in attention layer ``i + 1``'s
    MLP; those that need no attention (on tokens, indices, constants) are
    ``mlps_before_layer_1``.

    >>> from attnsim import library
    >>> s = schedule(library.make_hist())
    >>> s["n_layers"], s["heads_per_layer"], s["mlps_per_layer"], s["mlps_before_layer_1"]
    (1, [1], [0], 0)
    """
    a = analysis.analyze(program).to_dict()
    before, *per_layer = a.pop("mlps_per_layer")
    a["mlps_per_layer"] = per_layer
    a["mlps_before_layer_1"] = before
    assert len(a["heads_per_layer"]) == len(per_layer) == a["n_layers"]
    return a


def compiled_report(entry: lib.LibraryProgram, causal: bool = False) -> dict[str, Any]:
    """What ``attnsim.compiler`` builds for a library program: its model's own report.

    ``layers`` counts every block (attention sublayer + MLP, the attention possibly
    empty); ``heads_per_layer`` has one entry per block. ``{"error": ...}`` when the
    program cannot be compiled.
    """
    from attnsim.compiler import CompileOptions, compile_program  # imports torch: when asked

    try:
        options = CompileOptions(causal=causal)  # every other choice at its default
        model = compile_program(
            entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len, options=options
        )
    except (ValueError, NotImplementedError, TypeError) as exc:
        return {"error": str(exc)}
    r = model.report()
    out = {k: v for k, v in r.resources().items()}
    out["heads_per_layer"] = list(out["heads_per_layer"])
    assert len(out["heads_per_layer"]) == out["layers"]
    out["precision"] = r.precision  # the dtype and why (dtype="auto")
    return out


def _compiled_line(c: dict[str, Any]) -> str:
    if "error" in c:
        return f"compiled: not compilable: {c['error']}"
    return (
        f"compiled: {c['layers']} layer{'s' if c['layers'] != 1 else ''} "
        f"({c['attention_layers']} with attention), heads per layer {c['heads_per_layer']}, "
        f"d_model {c['d_model']}, d_mlp {c['d_mlp']}, {c['parameters']:,} parameters"
        + (f"; {c['precision']}" if c.get("precision") else "")
    )


def describe(name: str, xs: list | None = None, causal: bool = False) -> dict[str, Any]:
    """Analysis and a sample evaluation of the library program ``name`` as a dictionary."""
    entry = lookup(name)
    program = entry.factory()
    xs = list(entry.example) if xs is None else xs
    if len(xs) > entry.max_seq_len:  # (the interpreter's advice names a Python argument)
        raise UserError(
            f"--input has {len(xs)} tokens, more than {name}'s max_seq_len {entry.max_seq_len} "
            f"in the library; give at most {entry.max_seq_len}"
        )
    try:
        out = interpret.evaluate(
            program, xs, causal=causal, vocab=entry.vocab, max_seq_len=entry.max_seq_len
        )
    except ValueError as exc:  # includes RASPEvaluationError
        raise UserError(str(exc)) from None
    return {
        "program": name,
        "summary": summary(name),
        "analysis": schedule(program),
        "compiled": compiled_report(entry, causal=causal),
        "vocab": list(entry.vocab),
        "max_seq_len": entry.max_seq_len,
        "causal": causal,
        "input": xs,
        "output": out,
    }


def run(args: argparse.Namespace) -> int:
    if args.list:
        extra = [
            flag
            for flag, on in (
                (f"the program name {args.program!r}", args.program is not None),
                ("--input", args.input is not None),
                ("--causal", args.causal),
            )
            if on
        ]
        if extra:
            raise UserError(
                f"--list lists every program, so {' and '.join(extra)} would be ignored; "
                f"leave {'it' if len(extra) == 1 else 'them'} out, or run "
                f"`attnsim info PROGRAM` for one program"
            )
        rows = [{"program": name, "summary": summary(name)} for name in lib.PROGRAMS]
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            width = max(len(r["program"]) for r in rows)
            for r in rows:  # a long summary goes on under itself, the names stay in a column
                line = f"{r['program']:<{width}}  {r['summary']}"
                print(_output.wrap(line, indent=" " * (width + 2)))
        return 0
    if args.program is None:
        raise UserError("give a program name, or --list to see the library programs")
    entry = lookup(args.program)
    xs = parse_tokens(args.input, entry.vocab) if args.input is not None else None
    info = describe(args.program, xs, causal=args.causal)
    if args.json:
        print(json.dumps(info, indent=2, ensure_ascii=False))
        return 0
    # every line fits the terminal (80 columns through a pipe): long ones go on indented
    print(_output.wrap(f"{info['program']}: {info['summary']}"))
    print(_analysis_text(str(analysis.analyze(entry.factory()))))
    print(_output.wrap(_compiled_line(info["compiled"])))
    vocab = " ".join(str(v) for v in info["vocab"])
    print(_output.wrap(f"vocab:  {vocab}   max_seq_len: {entry.max_seq_len}", indent="        "))
    print(_output.wrap(f"input:  {info['input']!r}", indent="        "))
    print(_output.wrap(f"output: {info['output']!r}", indent="        "))
    return 0


def _analysis_text(text: str) -> str:
    """The analysis table with long "attention operations" cells continued under their
    column (the other columns stay as they are)."""
    lines = text.splitlines()
    header = next((k for k, line in enumerate(lines) if "attention operations" in line), None)
    if header is None:
        return _output.wrap(text)
    column = lines[header].index("attention operations")
    out = [_output.wrap(line) for line in lines[: header + 1]]
    for line in lines[header + 1 :]:
        lead = len(line) - len(line.lstrip(" "))
        out.append(_output.wrap(line, indent=" " * max(2, column - lead)))
    return "\n".join(out)
