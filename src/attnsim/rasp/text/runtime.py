"""The runtime of textual RASP: a session (:class:`Runtime`) with its scopes, examples and
display settings, and the calls the REPL and the CLI make (``run``, ``run_file``, ``eval``,
``values``, ``apply``, printing as the original REPL does).

The statements and expressions themselves are evaluated by
:class:`attnsim.rasp.text.evaluator.Frame`, which walks the parse tree (user text is never
handed to Python's ``eval`` or ``exec``); scopes and sources are in
:mod:`attnsim.rasp.text.scope`. Every public call runs within the :class:`limits.Limits` of
the runtime: a step budget and a digit limit on integers, so an untrusted file cannot run
forever or fill the memory.

>>> rt = Runtime()
>>> rt.run("set example [3, 1, 2]; s = sort(tokens_int, tokens_int);")
>>> rt.values("s")
[1, 2, 3]
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from lark import Tree

from attnsim import rasp
from attnsim.rasp import interpret
from attnsim.rasp.text import limits as L
from attnsim.rasp.text import ops, scope
from attnsim.rasp.text import parser as P
from attnsim.rasp.text import values as V
from attnsim.rasp.text.errors import OpError, OutputLimitError, RASPTextError
from attnsim.rasp.text.evaluator import Frame
from attnsim.rasp.text.scope import Env, Source, read_source

__all__ = ["Runtime", "Env", "Source"]


def _base_constants() -> dict[str, Any]:
    toks = rasp.tokens
    int_rule = V.const_rule(False)
    return {
        "tokens_asis": V.SeqVal(toks, "any"),
        "tokens_str": V.SeqVal(rasp.Map(str, toks, simplify=False).named("tokens_str"), "str"),
        "tokens_int": V.SeqVal(
            rasp.Map(int, toks, simplify=False).named("tokens_int"), "num", int_rule
        ),
        "tokens_float": V.SeqVal(
            rasp.Map(float, toks, simplify=False).named("tokens_float"), "num", V.const_rule(True)
        ),
        "tokens_bool": V.SeqVal(rasp.Map(bool, toks, simplify=False).named("tokens_bool"), "bool"),
        "indices": V.SeqVal(rasp.indices, "num", int_rule),
        "length": V.SeqVal(rasp.length, "num", int_rule),
        "True": True,
        "False": False,
    }


@functools.lru_cache(maxsize=1)
def _library_tree() -> tuple[str, Tree]:
    text = resources.files("attnsim.rasp.text").joinpath("library.rasp").read_text()
    return text, P.parse(text, "<library>")


class Runtime:
    """A RASP session: the console scope, the running examples and the display settings.

    Args:
        echo: print each statement's result as the original REPL does.
        out: where printed lines go (default: ``print``).
        library: start with the original library (``sort``, ``count``, ``shift``, ...).
        limits: the step budget and integer size limit of each call (``run``, ``run_file``,
            ``eval``, ``values``, ``apply``); default :class:`limits.Limits`.
        allow_load_outside: let ``load`` read files outside the folder of the program being
            run (the file given to ``run_file``; the ``directory`` of ``run``, else the
            current folder). By default a ``load`` of an absolute path, or of a ``../`` path
            that leaves that folder, is refused: a program from elsewhere reads only files
            beside it.

    >>> rt = Runtime()
    >>> rt.run("hist = selector_width(select(tokens, tokens, ==));")
    >>> rt.values("hist", "abca")
    [2, 1, 1, 2]
    """

    def __init__(
        self,
        *,
        echo: bool = False,
        out: Callable[[str], None] | None = None,
        library: bool = True,
        limits: L.Limits | None = None,
        allow_load_outside: bool = False,
    ) -> None:
        if not isinstance(allow_load_outside, bool):
            raise TypeError(f"allow_load_outside must be True or False, got {allow_load_outside!r}")
        self.allow_load_outside = allow_load_outside
        self.load_root: Path | None = None  # the folder loads stay in (set while a run runs)
        if limits is not None and not isinstance(limits, L.Limits):
            raise TypeError(f"limits must be a Limits, got {type(limits).__name__}")
        self.limits = limits or L.Limits()
        self._budget = L.Budget(self.limits)
        self._depth = 0
        self.echo = echo
        self._write = out or print
        self._statement_output: int | None = None  # characters the statement running printed
        self.seq_example: Any = "hello"
        self.sel_example: Any = "hello"
        self.show_seq_examples = True
        self.show_sel_examples = True
        self.full_seq_display = False
        self._labels: Counter[str] = Counter()
        self._loading: list[Path] = []
        root = Env("constants")
        for name, value in _base_constants().items():
            root.vars[name] = value
        root.vars["selector_width"] = V.Builtin("selector_width", ["sel"], ops.selector_width)
        root.vars["abs"] = V.Builtin("abs", ["x"], ops.abs_)
        self.base_env = Env("rasplib", parent=root)
        if library:
            text, tree = _library_tree()
            src = Source("<library>", text, Path.cwd())
            with self.budget():
                Frame(self, self.base_env, src, top=False).run(tree.children)
        self.env = Env("console", parent=self.base_env)

    @contextlib.contextmanager
    def budget(self) -> Iterator[L.Budget]:
        """Runs the block within this runtime's limits: a fresh step budget at the outermost
        call, shared by nested ones (a ``load``, an ``eval`` inside ``run``)."""
        if self._depth == 0:
            self._budget = L.Budget(self.limits)
        self._depth += 1
        try:
            with L.active(self._budget):
                yield self._budget
        finally:
            self._depth -= 1

    # -- public API ---------------------------------------------------------------------------
    @property
    def example(self) -> Any:
        """The running example S-ops are shown on (``set example ...``)."""
        return self.seq_example

    def set_example(self, example: Any) -> None:
        """Sets both running examples (like ``set example``).

        Raises:
            RASPTextError: ``example`` is not a non-empty list of atoms or a string.
        """
        problem = scope.example_problem(example)
        if problem:
            raise RASPTextError(problem, hint=scope.EXAMPLE_HINT)
        self.seq_example = self.sel_example = example

    def run(self, source: str, filename: str = "<string>", directory: Path | None = None) -> None:
        """Runs a program text in the console scope.

        Raises:
            RASPTextError: a syntax error or a failing statement (file:line:col and why).
        """
        tree = P.parse(source, filename)
        src = Source(filename, source, directory or Path.cwd())
        outermost = self.load_root is None
        if outermost:
            self.load_root = Path(src.directory).resolve()
        try:
            with self.budget():
                Frame(self, self.env, src, top=True).run(tree.children)
        except scope.Exit:
            pass
        finally:
            if outermost:
                self.load_root = None

    def run_file(self, path: str | Path) -> None:
        """Runs a ``.rasp`` file; ``load`` inside it resolves beside the file."""
        p = Path(path)
        text = read_source(p)
        self._loading.append(p.resolve())
        try:
            self.run(text, str(path), p.resolve().parent)
        finally:
            self._loading.pop()

    def eval(self, text: str, filename: str = "<eval>") -> Any:
        """Evaluates one expression in the console scope and returns its value.

        >>> Runtime().eval("[x * 2 for x in range(3)]")
        [0, 2, 4]
        """
        source = text.strip()
        if not source.endswith(";"):
            source += ";"
        tree = P.parse(source, filename)
        stmts = tree.children
        if len(stmts) != 1 or stmts[0].data != "expr_stmt":
            raise RASPTextError(
                f"expected one expression, got {text!r}",
                filename=filename,
                hint="give an expression such as sort(tokens_int, tokens_int)",
            )
        frame = Frame(self, self.env, Source(filename, source, Path.cwd()), top=False)
        node = stmts[0].children[0]
        with self.budget():
            try:
                return frame.expr(node)
            except RecursionError:
                raise frame.fail(node, scope.DEEP, scope.DEEP_HINT) from None

    def get(self, name: str) -> Any:
        """The value of a variable (an S-op comes back as a :class:`values.SeqVal`)."""
        try:
            return self.env.lookup(name)
        except KeyError:
            raise RASPTextError(
                f"unknown name {name!r}", hint=scope.suggest(name, self.env.visible())
            ) from None

    def sop(self, name: str) -> rasp.SOp:
        """The attnsim expression of the S-op variable ``name``.

        >>> from attnsim import rasp
        >>> rt = Runtime()
        >>> rt.run("rev = aggregate(select(indices, length - indices - 1, ==), tokens);")
        >>> rasp.evaluate(rt.sop("rev"), "abc")
        ['c', 'b', 'a']
        """
        v = self.get(name)
        if not isinstance(v, V.SeqVal):
            raise RASPTextError(f"{name!r} is {V.describe(v)}, not an s-op")
        return v.expr

    def values(self, value: Any, xs: Any = None) -> Any:
        """Evaluates an S-op (or a variable's name) on ``xs`` (default: the running example).

        Returns the values with the Python types the original interpreter gives them; a
        selector gives its matrix ``[query][key]``; other values come back as they are.
        """
        if isinstance(value, str):
            value = self.get(value)
        if isinstance(value, V.Applied):
            return value.values
        if isinstance(value, (V.SeqVal, V.SelVal)):
            ex = self.seq_example if xs is None else xs
            return (
                self.apply(value, ex).values
                if isinstance(value, V.SeqVal)
                else (self.apply(value, ex).matrix)
            )
        return value

    def apply(self, value: V.SeqVal | V.SelVal, xs: Any) -> Any:
        """Applies an S-op or selector to an input; raises OpError when that fails."""
        if isinstance(xs, str):
            xs_list: list = list(xs)
        elif isinstance(xs, list):
            xs_list = xs
        else:
            raise OpError(
                f"an s-op is applied to a list or a string, got {V.describe(xs)}",
                'for example: f([1, 2, 3]) or f("hello")',
            )
        if not xs_list:
            raise OpError("an s-op is applied to a non-empty input, got an empty one")
        problem = scope.example_problem(xs_list)
        if problem:
            raise OpError(problem.replace("the example", "an s-op's input"), scope.EXAMPLE_HINT)
        n = len(xs_list)
        with self.budget():
            try:
                self._budget.charge(n * n, f"applying an s-op to an input of length {n}")
                ops.check_positions(value.expr, n)
                trace = V.Trace(xs_list)
                if isinstance(value, V.SelVal):
                    return V.AppliedSelector(trace.selector(value.expr).tolist(), xs)
                return V.Applied(trace.typed(value), xs)
            except L.LimitError as exc:
                raise OpError(str(exc)) from None
            except RecursionError:
                raise OpError(scope.DEEP, scope.DEEP_HINT) from None
            except (
                interpret.RASPEvaluationError,
                ValueError,
                TypeError,
                ArithmeticError,
            ) as exc:
                if isinstance(exc.__cause__, L.LimitError):  # from an elementwise operation
                    msg = f"evaluating on {V.format_example(xs)}: {exc.__cause__}"
                    raise OpError(msg) from None
                raise OpError(
                    f"evaluating on {V.format_example(xs)} failed: {exc}",
                    "check the program's operations against this input's values",
                ) from None

    def out(self, line: str) -> None:
        """Prints one line (to ``out``); a top-level statement prints at most
        ``limits.max_output_chars`` characters, then its output is cut and it fails."""
        used = self._statement_output
        if used is None:  # outside a statement (an error message, the prompt's lines)
            self._write(line)
            return
        limit = self.limits.max_output_chars
        if used + len(line) + 1 > limit:
            room = max(0, limit - used)
            if room:
                self._write(line[:room])
            self._statement_output = limit
            raise OutputLimitError(
                f"this statement printed more than {limit:,} characters, so its output is cut "
                f"there",
                "print less (assign without printing inside loops, turn examples off), or "
                "raise the limit with --max-output-chars (Limits(max_output_chars=...))",
            )
        self._statement_output = used + len(line) + 1
        self._write(line)

    # -- helpers used by frames -------------------------------------------------------------
    def label(self, name: str) -> str:
        """A unique label for a named expression (``x``, then ``x_2``, ...)."""
        self._labels[name] += 1
        k = self._labels[name]
        return name if k == 1 else f"{name}_{k}"

    def print_named(self, name: str | None, val: Any, pref: str = "", first: str = "") -> None:
        out = self.out
        if name is None and isinstance(val, (V.SeqVal, V.SelVal)):
            name = val.expr.label
        if isinstance(val, V.SeqVal):
            out(" ".join([pref, first, "   s-op:", str(name)]))
            if self.show_seq_examples:
                ex = self.seq_example
                applied = self.apply(val, ex)
                call = f"{name}({V.format_example(ex)}) ="
                if self.full_seq_display:
                    lines = V.sequence_lines(ex, applied.values, applied.type, pref)
                    out(" ".join([pref, "\t Example:", call, lines[0]]).rstrip())
                    for line in lines[1:]:
                        out(line)
                else:
                    out(" ".join([pref, "\t Example:", call, str(applied)]))
        elif isinstance(val, V.SelVal):
            out(" ".join([pref, first, "   selector:", str(name)]))
            if self.show_sel_examples:
                out(" ".join([pref, "\t Example:"]))
                applied = self.apply(val, self.sel_example)
                for line in V.selector_lines(self.sel_example, applied.matrix, pref):
                    out(line)
        elif isinstance(val, (V.Function, V.Builtin)):
            out(" ".join([pref, first, "   " + str(val)]))
        elif isinstance(val, (list, dict)):
            kind = "list" if isinstance(val, list) else "dict"
            named = f"   {kind}: " + (f"{name} = " if name is not None else "")
            items = val if isinstance(val, list) else list(val.values())
            flat = not any(
                isinstance(v, (list, dict, V.SeqVal, V.SelVal, V.Function)) for v in items
            )
            cap = self.limits.max_output_chars // 2 + 1  # items that surely overflow a line
            if flat and isinstance(val, list) and len(val) > cap:
                out(" ".join([pref, first, named]) + V.format_value(val[:cap]))  # cut by out
            elif flat:
                out(" ".join([pref, first, named]) + V.format_value(val))
            else:
                out(" ".join([pref, first, named]) + ("[" if kind == "list" else "{"))
                inner = "\t" * (len(pref) + 2)
                if isinstance(val, list):
                    for v in val:
                        self.print_named(None, v, inner)
                else:
                    for k, v in val.items():
                        self.print_named(None, v, inner, first=V.format_example(k) + " :")
                out(" ".join([pref, " " * len(named), "]" if kind == "list" else "}"]))
        elif isinstance(val, V.Applied):
            out("\t =  " + str(val))
        elif isinstance(val, V.AppliedSelector):
            out("\t = ")
            for line in V.selector_lines(val.input, val.matrix):
                out(line)
        else:
            shown = V.format_example(val) if isinstance(val, str) else str(val)
            out(" ".join([pref, first, "   value:", f"{name} = " if name else "", shown]))
