"""The textual front end of the original RASP language (Weiss, Goldberg and Yahav, 2021).

Programs are parsed with lark, evaluated over the parse tree, and their S-ops and
selectors become the same attnsim expressions as the embedded language, so they run on
the reference interpreter and go to the compiler unchanged.

>>> from attnsim import rasp
>>> from attnsim.rasp import text
>>> hist = text.translate("hist = selector_width(select(tokens, tokens, ==));", "hist")
>>> rasp.evaluate(hist, list("abca"))
[2, 1, 1, 2]
>>> text.evaluate_text("set example [4, 1, 3]; s = sort(tokens_int, tokens_int);", "s")
[1, 3, 4]
"""

from __future__ import annotations

from typing import Any

from attnsim import rasp
from attnsim.rasp.text.errors import RASPTextError
from attnsim.rasp.text.parser import is_incomplete, parse
from attnsim.rasp.text.repl import run_repl
from attnsim.rasp.text.runtime import Runtime

__all__ = [
    "RASPTextError",
    "Runtime",
    "parse",
    "is_incomplete",
    "run_repl",
    "translate",
    "evaluate_text",
]


def translate(source: str, name: str, filename: str = "<string>") -> rasp.SOp:
    """Runs ``source`` and returns the attnsim expression of its S-op ``name``.

    Args:
        source: a RASP program.
        name: the variable holding the S-op.
        filename: shown in error messages.

    Raises:
        RASPTextError: the program is invalid, or ``name`` is not an S-op.

    >>> from attnsim import rasp
    >>> rasp.evaluate(translate("y = tokens_int * 2;", "y"), [1, 2])
    [2, 4]
    """
    rt = Runtime()
    rt.run(source, filename)
    return rt.sop(name)


def evaluate_text(source: str, name: str, xs: Any = None) -> Any:
    """Runs ``source`` and evaluates the variable ``name`` on ``xs`` (default: the example).

    Values keep the original interpreter's types (a mean is a float, a count an int).

    >>> evaluate_text("m = aggregate(select(indices, indices, <=), tokens_int);", "m", [2, 4])
    [2, 3.0]
    """
    rt = Runtime()
    rt.run(source)
    return rt.values(name, xs)
