"""The interactive RASP prompt: multi-line input, history, errors without tracebacks.

>>> lines = iter(["x = tokens_int + 1;", "set example [1, 2]", "x;", "exit"])
>>> out = []
>>> run_repl(Runtime(echo=True, out=out.append), read=lambda prompt: next(lines), banner=False)
0
>>> out[-1]
' \\t Example: out([1, 2]) = [2, 3] (ints)'
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from attnsim.rasp.text import parser as P
from attnsim.rasp.text.errors import RASPTextError
from attnsim.rasp.text.runtime import Runtime

__all__ = ["run_repl", "Runtime"]


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
) -> int:
    """Reads statements and runs them until ``exit``, ``quit`` or end of input.

    Args:
        rt: the session (create it with ``echo=True`` to see results).
        read: reads one line given a prompt (default: ``input`` with readline history).
        banner: print the welcome lines first.

    Returns:
        The exit status (0).
    """
    save = lambda: None  # noqa: E731
    if read is None:
        save = _setup_readline()
        read = input
    if banner:
        rt.out("RASP (attnsim)")
        rt.out(f"running example is: {rt.seq_example}")
    try:
        while True:
            buf = ""
            prompt = ">> "
            while True:
                try:
                    line = read(prompt)
                except (EOFError, StopIteration):
                    rt.out("")
                    return 0
                except KeyboardInterrupt:
                    rt.out("")
                    buf = ""
                    break
                buf += line + "\n"
                if not buf.strip() or not P.is_incomplete(buf):
                    break
                prompt = ".. "
            if not buf.strip():
                continue
            stripped = buf.strip().rstrip(";").strip()
            if stripped in ("exit", "quit", "exit()", "quit()"):
                return 0
            try:
                rt.run(buf, "<stdin>")
            except RASPTextError as exc:
                rt.out(str(exc))
    finally:
        save()
