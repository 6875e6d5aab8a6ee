"""What a running textual RASP program sees: sources, scopes and the words it may not rebind.

Shared by the evaluator (:mod:`attnsim.rasp.text.evaluator`) and the session that drives it
(:mod:`attnsim.rasp.text.runtime`, which re-exports :class:`Source`, :class:`Env` and
:func:`read_source`).

>>> root = Env("constants"); root.define("x", 1)
>>> child = Env("console", parent=root)
>>> child.lookup("x"), sorted(child.visible())
(1, ['x'])
>>> suggest("lenght", ["length", "indices"])
"did you mean 'length'?"
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnsim.rasp.text import values as V
from attnsim.rasp.text.errors import RASPTextError

__all__ = [
    "CONSTANT_NAMES",
    "DEEP",
    "DEEP_HINT",
    "EXAMPLE_HINT",
    "KEYWORDS",
    "RESERVED",
    "Env",
    "Exit",
    "Source",
    "example_problem",
    "read_source",
    "suggest",
]

KEYWORDS = frozenset(
    "DRAW LOAD DEF RETURN FOR IN IF ELSE SELECT AGGREGATE RANGE ZIP LEN ROUND INDICATOR".split()
)
CONSTANT_NAMES = (
    "tokens_asis",
    "tokens_str",
    "tokens_int",
    "tokens_float",
    "tokens_bool",
    "indices",
    "length",
    "True",
    "False",
)
RESERVED = frozenset(
    ["if", "else", "not", "and", "or", "out", "def", "return", "range", "for", "in", "zip"]
    + ["len", "get", *CONSTANT_NAMES]
)


DEEP = "the program nests too deeply (recursion, or an s-op built from very many steps)"
DEEP_HINT = "give recursive functions a base case, or build the s-op from fewer operations"
EXAMPLE_HINT = 'for example: set example [1, 2, 3] or set example "hello"'


@dataclass(frozen=True)
class Source:
    """A program text and where it came from (for error messages and ``load``)."""

    name: str
    text: str
    directory: Path

    @functools.cached_property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    def line(self, n: int) -> str:
        return self.lines[n - 1] if 0 < n <= len(self.lines) else ""


class Env:
    """A scope: variables, a parent scope, and (for loaded files) a scope to export to."""

    def __init__(self, name: str, parent: Env | None = None, export_to: Env | None = None):
        self.name = name
        self.parent = parent
        self.export_to = export_to
        self.vars: dict[str, Any] = {}

    def lookup(self, name: str) -> Any:
        env: Env | None = self
        while env is not None:
            if name in env.vars:
                return env.vars[name]
            env = env.parent
        raise KeyError(name)

    def visible(self) -> set[str]:
        out: set[str] = set()
        env: Env | None = self
        while env is not None:
            out |= set(env.vars)
            env = env.parent
        return out

    def define(self, name: str, value: Any) -> None:
        self.vars[name] = value
        if self.export_to is not None and not name.startswith("_") and name != "out":
            self.export_to.define(name, value)


class Exit(Exception):
    """``exit`` / ``quit``: stop running."""


def example_problem(example: Any) -> str | None:
    """Why ``example`` cannot be an input (None when it can): a non-empty string or list of
    atoms (numbers, strings, bools)."""
    if not isinstance(example, (list, str)):
        return f"the example must be a list or a string, got {V.describe(example)}"
    if len(example) == 0:
        return "the example must not be empty"
    if isinstance(example, list):
        for i, item in enumerate(example):
            if not V.is_atom(item):
                return (
                    f"the example must hold atoms (numbers, strings, bools), but item {i} is "
                    f"{V.describe(item)}"
                )
    return None


def read_source(path: Path) -> str:
    """The text of a RASP file, or a RASPTextError that says why it cannot be read.

    A file that is not UTF-8 text (or holds NUL bytes: a binary file) is refused.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise RASPTextError(f"cannot read {str(path)!r}: {reason}", hint="check the path") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RASPTextError(
            f"{str(path)!r} is not UTF-8 text: byte {data[exc.start]:#04x} at offset "
            f"{exc.start} cannot be decoded",
            hint="a RASP program is a UTF-8 text file; check that this is the right file",
        ) from None
    if "\x00" in text:
        raise RASPTextError(
            f"{str(path)!r} holds NUL bytes (offset {text.index(chr(0))}): it is a binary "
            f"file, not a RASP program",
            hint="check that this is the right file",
        )
    return text


def suggest(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=3)
    if close:
        return "did you mean " + " or ".join(repr(c) for c in close) + "?"
    return 'define it first (x = ...;) or load the file that defines it (load "file";)'
