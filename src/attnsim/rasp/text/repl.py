"""The interactive RASP prompt: multi-line input, history, errors without tracebacks.

Ctrl-C at the prompt clears the line; during a statement it stops the statement.

A statement ends with ``;``. When a line would be a whole statement with a ``;`` at its
end, the prompt says so as it asks for the next line, and an error caused by the missing
``;`` points at the end of the line where it is missing (:func:`missing_semicolon`), not at
the next statement where the parser noticed it.

>>> lines = iter(["x = tokens_int + 1;", "set example [1, 2]", "x;", "exit"])
>>> out = []
>>> run_repl(Runtime(echo=True, out=out.append), read=lambda prompt: next(lines), banner=False)
0
>>> out[-1]
' \\t Example: out([1, 2]) = [2, 3] (ints)'
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from attnsim.rasp.text import parser as P
from attnsim.rasp.text.errors import RASPTextError
from attnsim.rasp.text.runtime import Runtime

__all__ = ["run_repl", "Runtime", "missing_semicolon", "lacks_semicolon"]

_SEMICOLON_HINT = "did you forget a ';'"  # the parser's hint (attnsim.rasp.text.parser)
# "--max-steps (Limits(max_steps=...))": at the prompt, the flag is what the user can set
_PYTHON_ASIDE = re.compile(r" \((?:Limits|Runtime)\([a-z_]+=\.\.\.\)\)")
_GOES_ON = "   (no ';' at the end of this line, so the statement goes on; end it with ';')"


def lacks_semicolon(source: str) -> bool:
    """Whether ``source`` needs only a final ``;`` to be complete statements.

    >>> lacks_semicolon("x = tokens_int + 1"), lacks_semicolon("x = select(tokens,")
    (True, False)
    >>> lacks_semicolon("x = 1;"), lacks_semicolon("def f(a) {")
    (False, False)
    """
    text = source.rstrip()
    if not text or text.endswith((";", "{", "}")):
        return False
    try:
        P.parse(text + "\n;\n")  # on its own line: after a comment too
    except RASPTextError:
        return False
    return True


def _statement_line(lines: list[str], before: int) -> int | None:
    """The 1-based number of the last line with code before line ``before``."""
    for n in range(before - 1, 0, -1):
        code = lines[n - 1].split("#", 1)[0].strip()
        if code:
            return n
    return None


def missing_semicolon(exc: RASPTextError, source: str) -> RASPTextError:
    """``exc`` moved to the line whose ``;`` is missing, when a missing ``;`` caused it.

    The parser notices a missing ``;`` only at the next statement's first token; this points
    at the end of the line before it instead, where the ``;`` belongs.

    Args:
        exc: a syntax error from running ``source``.
        source: the text that was run (a REPL entry, or a file's contents).

    Returns:
        A new error at the end of the line that lacks its ``;``, or ``exc`` itself.

    >>> from attnsim.rasp.text import parser
    >>> src = "x = tokens_int + 1\\ny = x;\\n"
    >>> try:
    ...     parser.parse(src, "<stdin>")
    ... except RASPTextError as exc:
    ...     print(missing_semicolon(exc, src))
    <stdin>:1:19: missing ';' at the end of this line
        x = tokens_int + 1
                          ^
      every statement ends with ';' (the next line was read as this statement's continuation)
    """
    if not (exc.hint or "").startswith(_SEMICOLON_HINT) or exc.line is None:
        return exc
    lines = source.splitlines()
    n = _statement_line(lines, exc.line) if exc.column == _first_column(lines, exc.line) else None
    if n is None:
        return exc
    code = lines[n - 1].split("#", 1)[0].rstrip()
    return RASPTextError(
        "missing ';' at the end of this line",
        filename=exc.filename,
        line=n,
        column=len(code) + 1,
        source_line=lines[n - 1],
        hint="every statement ends with ';' (the next line was read as this statement's "
        "continuation)",
    )


def _first_column(lines: list[str], line: int) -> int | None:
    """The 1-based column of the first non-blank character of ``line``."""
    if not 1 <= line <= len(lines):
        return None
    text = lines[line - 1]
    return len(text) - len(text.lstrip()) + 1


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):  # a closed stdin
        return False


def history_path() -> Path:
    """Where the prompt keeps its history (``$ATTNSIM_RASP_HISTORY`` overrides it)."""
    return Path(os.environ.get("ATTNSIM_RASP_HISTORY", Path.home() / ".attnsim_rasp_history"))


def _setup_readline() -> Callable[[], None]:
    try:
        import readline
    except ImportError:  # pragma: no cover - platform without readline
        return lambda: None
    path = history_path()
    try:
        readline.read_history_file(path)
    except OSError:
        pass
    readline.set_history_length(2000)

    def save() -> None:
        try:
            readline.write_history_file(path)
        except OSError:
            pass

    return save


def run_repl(
    rt: Runtime,
    read: Callable[[str], str] | None = None,
    banner: bool = True,
    interactive: bool | None = None,
) -> int:
    """Reads statements and runs them until ``exit``, ``quit`` or end of input.

    Input that is not a terminal (a pipe, a file) gets no prompts, no welcome lines and
    no blank line at its end: the output holds only what the statements print.

    Args:
        rt: the session (create it with ``echo=True`` to see results).
        read: reads one line given a prompt (default: ``input`` with readline history; at
            an input that is not a terminal, ``input`` without a prompt).
        banner: print the welcome lines first (at a terminal, or with ``read`` given).
        interactive: whether a person types the input (prompts, welcome lines); None:
            when ``read`` is given or stdin is a terminal.

    Returns:
        The exit status: 0; at input that is not a terminal, 1 when a statement failed and
        2 when the input ends in the middle of a statement (its error printed), as
        ``attnsim rasp`` on the same text. Errors there name the line of the input.
    """
    save = lambda: None  # noqa: E731
    if interactive is None:
        interactive = read is not None or _stdin_is_terminal()
    if read is None and interactive:
        save = _setup_readline()
        read = input
    elif read is None:
        read = lambda prompt: input("")  # noqa: E731 - no prompt in the output
    if not interactive:
        banner = False
    if banner:
        rt.out("RASP (attnsim)")
        rt.out(f"running example is: {rt.seq_example}")
    status, lines = 0, 0  # (the lines read before the statement: where its errors are)
    try:
        while True:
            buf = ""
            prompt = ">> "
            start = lines
            while True:
                try:
                    line = read(prompt)
                except (EOFError, StopIteration):
                    if interactive:
                        rt.out("")  # end the prompt's line
                        return status
                    if buf.strip():  # an unfinished statement: the parser says what lacks
                        try:
                            rt.run("\n" * start + buf, "<stdin>")
                        except RASPTextError as exc:
                            rt.out(_PYTHON_ASIDE.sub("", str(exc)))
                            return 2
                    return status
                except KeyboardInterrupt:
                    rt.out("")
                    buf = ""
                    break
                lines += 1
                buf += line + "\n"
                if not buf.strip() or not P.is_incomplete(buf):
                    break
                if lacks_semicolon(buf):  # the hint goes where the ';' is missing
                    rt.out(_GOES_ON)
                prompt = ".. "
            if not buf.strip():
                continue
            stripped = buf.strip().rstrip(";").strip()
            if stripped in ("exit", "quit", "exit()", "quit()"):
                return status
            # at a terminal each statement is its own text, from line 1
            text = buf if interactive else "\n" * start + buf
            try:
                rt.run(text, "<stdin>")
            except RASPTextError as exc:
                rt.out(_PYTHON_ASIDE.sub("", str(missing_semicolon(exc, text))))
                status = status if interactive else 1
            except KeyboardInterrupt:  # Ctrl-C stops the statement, not the session
                rt.out("interrupted")
    finally:
        save()
