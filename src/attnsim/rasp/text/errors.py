"""Errors of the textual RASP front end: where, what arrived, what was expected, what to do.

>>> err = RASPTextError("unknown name 'foo'", filename="a.rasp", line=1, column=5,
...                     source_line="x = foo;", hint="define it first")
>>> print(err)
a.rasp:1:5: unknown name 'foo'
    x = foo;
        ^
  define it first

A number of more than 40 digits in the message is shown by its first and last digits and
its length (``10000000000000000...00000 (401 digits)``).
"""

from __future__ import annotations

import re

# a number this long in a message is shown by its ends and its length (never cut silently)
_LONG_NUMBER = re.compile(r"\d{41,}")


def _shorten(m: re.Match) -> str:
    digits = m.group(0)
    return f"{digits[:17]}...{digits[-5:]} ({len(digits)} digits)"


class RASPTextError(Exception):
    """A mistake in a RASP program (syntax, unknown name, wrong arity, bad value).

    Args:
        message: what went wrong (what was expected and what arrived).
        filename: the file (or ``<string>``) the offending text is in.
        line: 1-based line of the offending text.
        column: 1-based column of the offending text.
        source_line: the text of that line, shown under the message.
        hint: what to do about it.
    """

    def __init__(
        self,
        message: str,
        *,
        filename: str | None = None,
        line: int | None = None,
        column: int | None = None,
        source_line: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.filename = filename
        self.line = line
        self.column = column
        self.source_line = source_line
        self.hint = hint

    def __str__(self) -> str:
        where = ""
        if self.filename is not None:
            where = self.filename
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            where += ": "
        parts = [where + _LONG_NUMBER.sub(_shorten, self.message)]
        if self.source_line is not None:
            parts.append("    " + self.source_line.rstrip("\n").expandtabs(4))
            if self.column is not None:
                prefix = self.source_line[: self.column - 1].expandtabs(4)
                parts.append("    " + " " * len(prefix) + "^")
        if self.hint:
            parts.append("  " + self.hint)
        return "\n".join(parts)


class OpError(Exception):
    """An operation failed; the evaluator adds the location and re-raises a RASPTextError."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class OutputLimitError(OpError):
    """A statement printed more than ``Limits.max_output_chars`` characters."""
