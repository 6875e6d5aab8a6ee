"""How the commands print: whole tables, unbroken lines, and progress on long work.

- :func:`print_table`: a rich table on a terminal wide enough for every cell on one line;
  otherwise (a pipe, a file, a narrow terminal) a Markdown table padded into columns. Either
  way every header and cell appears in full: nothing is cut to an ellipsis or folded, so a
  program name can be copied into ``attnsim info`` and a list reads in one piece.
- :func:`print_lines`: text printed as it is, never re-wrapped at the console's width.
- :class:`Progress`: a rich progress bar on a terminal; through a pipe, one plain line per
  stage on stderr (``attnsim report: [2/9] matmul 3x3x3... done in 0.4 s``).

rich is imported only inside these functions, so ``attnsim --help`` does not pay for it.

>>> print_table("sizes", ["program", "heads per layer"], [["make_sort_unique", "(1, 1)"]])
sizes
| program          | heads per layer |
|------------------|-----------------|
| make_sort_unique | (1, 1)          |
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import IO, Any

__all__ = [
    "print_table",
    "markdown_table",
    "print_lines",
    "Progress",
    "is_terminal",
    "width",
    "wrap",
]


def width() -> int:
    """The columns to fit text in: the terminal's, or ``$COLUMNS``, else 80 (a pipe);
    never fewer than 40."""
    import shutil

    return max(40, shutil.get_terminal_size((80, 24)).columns)


def _breaks(text: str) -> tuple[list[int], list[int]]:
    """Where ``text`` may break, outside brackets: after a clause (a space after ``,``
    ``;`` or ``:``) and between words (not before a bracket: a label keeps its list).
    Leading spaces are not breaks."""
    clauses, words, depth = [], [], 0
    start = len(text) - len(text.lstrip(" "))
    for k, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}" and depth:
            depth -= 1
        elif c == " " and k > start and depth == 0:
            if text[k - 1] in ",;:":
                clauses.append(k)
            elif k + 1 < len(text) and text[k + 1] not in "([{ ":
                words.append(k)
    # a clause that holds a list keeps its words together: "heads per layer [1, 0]"
    ends = [*clauses, len(text)]
    return clauses, [k for k in words if "[" not in text[k : min(e for e in ends if e > k)]]


def wrap(text: str, columns: int | None = None, indent: str = "  ") -> str:
    """Each line of ``text`` broken at spaces to fit ``columns`` (default :func:`width`),
    continuation lines indented by ``indent`` after the line's own indentation.

    A line breaks after a clause (``,``, ``;``, ``:``) where one fills most of the line,
    else between words. A bracketed group is never broken, and a clause with a list keeps
    its words together (``heads per layer [1, 0, 1]``): a list longer than the line stays
    whole on its line. Nothing is cut, and the spacing within a line is kept.

    >>> print(wrap("compiled: 2 layers (2 with attention), heads per layer [1, 1]", 40))
    compiled: 2 layers (2 with attention),
      heads per layer [1, 1]
    >>> print(wrap("some numbers, a list of tens [" + ", ".join(["10"] * 9) + "]", 24))
    some numbers,
      a list of tens [10, 10, 10, 10, 10, 10, 10, 10, 10]
    """
    columns = width() if columns is None else columns
    out: list[str] = []
    for line in text.splitlines() or [""]:
        lead = line[: len(line) - len(line.lstrip(" "))]
        hang, prefix, rest = lead + indent, "", line
        while len(prefix) + len(rest) > columns:
            room = columns - len(prefix)
            clauses, words = _breaks(rest)
            fit_c = [k for k in clauses if k <= room]
            fit_w = [k for k in words if k <= room]
            if fit_c and (not fit_w or max(fit_c) >= min(0.6 * room, max(fit_w))):
                k = max(fit_c)
            elif fit_w:
                k = max(fit_w)
            elif clauses or words:  # nothing fits: break as soon as possible
                k = min(clauses + words)
            else:
                break
            out.append(prefix + rest[:k].rstrip())
            rest, prefix = rest[k:].lstrip(" "), hang
        out.append(prefix + rest)
    return "\n".join(out)


def is_terminal(stream: IO[str] | None = None) -> bool:
    """Whether ``stream`` (default: stdout) is an interactive terminal."""
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed stream
        return False


def markdown_table(
    titles: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[str] = ()
) -> str:
    """A Markdown table whose columns are padded to a common width (nothing is cut).

    Args:
        titles: the column headers.
        rows: the cells, as text.
        right: titles of the columns to align right.

    >>> print(markdown_table(["a", "n"], [["x", "10"]], right=["n"]))
    | a |  n |
    |---|---:|
    | x | 10 |
    """
    widths = [max([len(t), *(len(r[i]) for r in rows)]) for i, t in enumerate(titles)]

    def line(cells: Sequence[str]) -> str:
        return (
            "| "
            + " | ".join(
                c.rjust(w) if t in right else c.ljust(w) for c, w, t in zip(cells, widths, titles)
            )
            + " |"
        )

    rule = (
        "|"
        + "|".join("-" * (w + 1) + (":" if t in right else "-") for w, t in zip(widths, titles))
        + "|"
    )
    return "\n".join([line(titles), rule, *(line(r) for r in rows)])


def print_table(
    title: str | None,
    titles: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: Sequence[str] = (),
    wrap: Sequence[str] = (),
    console: Any = None,
    file: IO[str] | None = None,
) -> None:
    """Prints a table with every header and cell in full.

    On a terminal (``console``, or stdout when it is a terminal) wide enough for the table:
    a rich table, where only the ``wrap`` columns may break a cell between words (never
    inside one) and every other cell, and every header, stays on one line. Otherwise a padded
    Markdown table (:func:`markdown_table`), which a pipe, a file or a narrow terminal shows
    whole (the terminal wraps long lines instead of cutting cells).

    Args:
        title: a line above the table (None: none).
        titles: the column headers.
        rows: the cells, as text.
        right: titles of the columns to align right (numbers).
        wrap: titles of the columns of free text or example values, which may wrap between
            words on a terminal too narrow for them.
        console: a ``rich.console.Console`` to print to (default: stdout).
        file: where the Markdown form goes when no console is given (default: stdout).
    """
    if console is None and is_terminal(file):
        import rich.console

        console = rich.console.Console(file=file)
    if console is not None and console.is_terminal:
        import rich.table
        import rich.text

        table = rich.table.Table(title=title)
        for t in titles:
            table.add_column(
                rich.text.Text(t),  # Text: brackets are not markup
                justify="right" if t in right else "left",
                no_wrap=t not in wrap,
                overflow="fold",
                min_width=len(t),  # the header on one line
            )
        for row in rows:
            table.add_row(*(rich.text.Text(c) for c in row))
        natural = console.measure(table, options=console.options.update_width(1 << 20))
        if natural.minimum <= console.width:
            console.print(table)
            return
    text = markdown_table(titles, rows, right)
    if title:
        text = f"{title}\n{text}"
    if console is not None:
        print_lines(text, console=console)
    else:
        print(text, file=file if file is not None else sys.stdout)


def print_lines(text: str, *, console: Any = None) -> None:
    """Prints ``text`` as it is: long lines stay whole (the terminal may wrap them).

    ``rich.console.Console.print`` breaks lines at the console's width (80 columns through
    a pipe), which splits lists such as ``heads per layer: [1, 1, ...]`` mid-way.
    """
    if console is None:
        print(text)
    else:
        console.print(text, soft_wrap=True, markup=False, highlight=False)


class Progress:
    """Progress of a long command, on stderr: a rich bar on a terminal, plain lines elsewhere.

    Use it as a context manager; call :meth:`step` when each stage starts (the previous one
    is then done). Through a pipe each stage prints one line, ``PREFIX: [i/N] LABEL... done
    in 1.2 s``; with ``total=None`` the ``[i/N]`` is left out.

    >>> import io
    >>> err = io.StringIO()
    >>> with Progress("attnsim x", total=2, file=err, clock=iter(range(9)).__next__) as p:
    ...     p.step("first")
    ...     p.step("second")
    >>> print(err.getvalue(), end="")
    attnsim x: [1/2] first... done in 1.0 s
    attnsim x: [2/2] second... done in 1.0 s
    """

    def __init__(
        self,
        prefix: str,
        total: int | None = None,
        *,
        quiet: bool = False,
        file: IO[str] | None = None,
        terminal: bool | None = None,
        clock: Any = time.perf_counter,
    ) -> None:
        self.prefix = prefix
        self.total = total
        self.quiet = quiet
        self.file = file
        self.terminal = is_terminal(self._file) if terminal is None else terminal
        self.clock = clock
        self._bar: Any = None
        self._task: Any = None
        self._count = 0
        self._started: float | None = None

    @property
    def _file(self) -> IO[str]:
        return sys.stderr if self.file is None else self.file

    def __enter__(self) -> Progress:
        if not self.quiet and self.terminal:
            import rich.console
            import rich.progress

            console = rich.console.Console(file=self._file)
            self._bar = rich.progress.Progress(
                rich.progress.SpinnerColumn(),
                rich.progress.TextColumn("{task.description}"),
                rich.progress.BarColumn(),
                rich.progress.MofNCompleteColumn(),
                rich.progress.TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.prefix, total=self.total)
        return self

    def step(self, label: str) -> None:
        """Marks the start of the next stage, called ``label`` (the previous one is done)."""
        self._finish()
        self._count += 1
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=self._count - 1, description=label)
            return
        where = f"[{self._count}/{self.total}] " if self.total else ""
        print(f"{self.prefix}: {where}{label}... ", end="", file=self._file, flush=True)
        self._started = self.clock()

    def _finish(self, failed: bool = False) -> None:
        if self._started is not None:
            took = self.clock() - self._started
            word = "failed after" if failed else "done in"
            print(f"{word} {took:.1f} s", file=self._file, flush=True)
            self._started = None

    def __exit__(self, *exc: Any) -> None:
        self._finish(failed=exc[0] is not None)
        if self._bar is not None:
            self._bar.update(self._task, completed=self._count)
            self._bar.__exit__(*exc)
