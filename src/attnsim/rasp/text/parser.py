"""The parser of textual RASP: source text to a lark parse tree, with readable syntax errors.

>>> tree = parse("x = select(indices, 0, ==);")
>>> tree.children[0].data
'assign'
>>> try:
...     parse("x = ;", filename="t.rasp")
... except RASPTextError as exc:
...     print(str(exc).splitlines()[0])
t.rasp:1:5: unexpected ';'; expected an expression, '+', '-'
"""

from __future__ import annotations

import functools
from importlib import resources

import lark
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from attnsim.rasp.text.errors import RASPTextError

__all__ = ["parse", "is_incomplete"]

_READABLE = {
    "NAME": "a name",
    "INT": "a number",
    "FLOAT": "a number",
    "STRING": 'a string ("...")',
    "SETEX": "'set example'",
    "SHOWEX": "'show example'",
    "TOGGLEEX": "'examples on|off'",
    "FULLSEQ": "'full seq display on|off'",
    "EXIT": "'exit'",
    "$END": "the end of the input",
}


@functools.lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    text = resources.files("attnsim.rasp.text").joinpath("grammar.lark").read_text()
    return lark.Lark(
        text, parser="lalr", propagate_positions=True, maybe_placeholders=True, cache=False
    )


def _describe_terminal(name: str) -> str:
    if name in _READABLE:
        return _READABLE[name]
    try:
        pattern = _parser().get_terminal(name).pattern
    except KeyError:
        return name
    if isinstance(pattern, lark.lexer.PatternStr):
        return repr(pattern.value)
    return name.lower()


def _expected(names: set[str] | frozenset[str]) -> str:
    shown = sorted({_describe_terminal(n) for n in names})
    if any(n in names for n in ("NAME", "INT", "STRING", "LPAR", "LSQB")):
        keep = [s for s in shown if s not in ("a name", "a number", 'a string ("...")')]
        shown = ["an expression"] + [s for s in keep if s not in ("'('", "'['", "'{'")]
    if len(shown) > 10:
        shown = shown[:10] + ["..."]
    return ", ".join(shown)


def _line(source: str, line: int) -> str:
    lines = source.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def parse(source: str, filename: str = "<string>") -> lark.Tree:
    """Parses RASP source text into a lark tree.

    Args:
        source: the program text.
        filename: shown in error messages.

    Returns:
        The parse tree (root ``start``, one child per statement).

    Raises:
        RASPTextError: the text is not valid RASP (with file:line:col and what was expected).

    >>> len(parse("a = 1; b = a + 2;").children)
    2
    """
    try:
        return _parser().parse(source)
    except UnexpectedInput as exc:
        raise _syntax_error(exc, source, filename) from None


def _syntax_error(exc: UnexpectedInput, source: str, filename: str) -> RASPTextError:
    if isinstance(exc, UnexpectedEOF) or (
        isinstance(exc, UnexpectedToken) and exc.token.type == "$END"
    ):
        lines = source.rstrip().splitlines() or [""]
        line = len(lines)
        expected = _expected(exc.expected) if getattr(exc, "expected", None) else "more input"
        return RASPTextError(
            f"the input ends in the middle of a statement; expected {expected}",
            filename=filename,
            line=line,
            column=len(lines[-1]) + 1,
            source_line=lines[-1],
            hint="finish the statement (statements end with ';', blocks with '}')",
        )
    if isinstance(exc, UnexpectedToken):
        tok = exc.token
        expected = _expected(exc.expected)
        hint = None
        if "';'" in expected:
            hint = "did you forget a ';' at the end of the previous statement?"
        return RASPTextError(
            f"unexpected {str(tok)!r}; expected {expected}",
            filename=filename,
            line=tok.line,
            column=tok.column,
            source_line=_line(source, tok.line),
            hint=hint,
        )
    assert isinstance(exc, UnexpectedCharacters)
    char = source[exc.pos_in_stream] if exc.pos_in_stream < len(source) else ""
    allowed = _expected(exc.allowed) if exc.allowed else "a statement"
    return RASPTextError(
        f"unexpected character {char!r}; expected {allowed}",
        filename=filename,
        line=exc.line,
        column=exc.column,
        source_line=_line(source, exc.line),
        hint="strings use double quotes; comments start with '#'",
    )


def is_incomplete(source: str) -> bool:
    """True when ``source`` is a valid start of a program that needs more lines.

    >>> is_incomplete("def f(a) {"), is_incomplete("x = 1;"), is_incomplete("x = ;")
    (True, False, False)
    """
    try:
        _parser().parse(source)
    except UnexpectedEOF:
        return True
    except UnexpectedToken as exc:
        return exc.token.type == "$END"
    except UnexpectedInput:
        return False
    return False
