"""The runtime of textual RASP: environments, statements, the REPL commands, ``load``.

The evaluator walks the parse tree (user text is never handed to Python's ``eval`` or
``exec``), building attnsim expressions for S-ops and selectors and plain Python values for
atoms, lists and dicts. Printing follows the original REPL. Every public call runs within
the :class:`limits.Limits` of the runtime: a step budget and a digit limit on integers, so
an untrusted file cannot run forever or fill the memory.

>>> rt = Runtime()
>>> rt.run("set example [3, 1, 2]; s = sort(tokens_int, tokens_int);")
>>> rt.values("s")
[1, 2, 3]
"""

from __future__ import annotations

import contextlib
import difflib
import functools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from lark import Token, Tree

from attnsim import rasp
from attnsim.rasp import interpret
from attnsim.rasp.text import limits as L
from attnsim.rasp.text import ops
from attnsim.rasp.text import parser as P
from attnsim.rasp.text import values as V
from attnsim.rasp.text.errors import OpError, RASPTextError

__all__ = ["Runtime", "Env", "Source"]

_KEYWORDS = frozenset(
    "DRAW LOAD DEF RETURN FOR IN IF ELSE SELECT AGGREGATE RANGE ZIP LEN ROUND INDICATOR".split()
)
_CONSTANT_NAMES = (
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
_RESERVED = frozenset(
    ["if", "else", "not", "and", "or", "out", "def", "return", "range", "for", "in", "zip"]
    + ["len", "get", *_CONSTANT_NAMES]
)


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


class _Exit(Exception):
    """``exit`` / ``quit``: stop running."""


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
    ) -> None:
        if limits is not None and not isinstance(limits, L.Limits):
            raise TypeError(f"limits must be a Limits, got {type(limits).__name__}")
        self.limits = limits or L.Limits()
        self._budget = L.Budget(self.limits)
        self._depth = 0
        self.echo = echo
        self.out = out or print
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
                _Frame(self, self.base_env, src, top=False).run(tree.children)
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
        problem = _example_problem(example)
        if problem:
            raise RASPTextError(problem, hint=_EXAMPLE_HINT)
        self.seq_example = self.sel_example = example

    def run(self, source: str, filename: str = "<string>", directory: Path | None = None) -> None:
        """Runs a program text in the console scope.

        Raises:
            RASPTextError: a syntax error or a failing statement (file:line:col and why).
        """
        tree = P.parse(source, filename)
        src = Source(filename, source, directory or Path.cwd())
        try:
            with self.budget():
                _Frame(self, self.env, src, top=True).run(tree.children)
        except _Exit:
            pass

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
        frame = _Frame(self, self.env, Source(filename, source, Path.cwd()), top=False)
        node = stmts[0].children[0]
        with self.budget():
            try:
                return frame.expr(node)
            except RecursionError:
                raise frame.fail(node, _DEEP, _DEEP_HINT) from None

    def get(self, name: str) -> Any:
        """The value of a variable (an S-op comes back as a :class:`values.SeqVal`)."""
        try:
            return self.env.lookup(name)
        except KeyError:
            raise RASPTextError(
                f"unknown name {name!r}", hint=_suggest(name, self.env.visible())
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
        problem = _example_problem(xs_list)
        if problem:
            raise OpError(problem.replace("the example", "an s-op's input"), _EXAMPLE_HINT)
        n = len(xs_list)
        with self.budget():
            try:
                self._budget.charge(n * n, f"applying an s-op to an input of length {n}")
                trace = V.Trace(xs_list)
                if isinstance(value, V.SelVal):
                    return V.AppliedSelector(trace.selector(value.expr).tolist(), xs)
                return V.Applied(trace.typed(value), xs)
            except L.LimitError as exc:
                raise OpError(str(exc)) from None
            except RecursionError:
                raise OpError(_DEEP, _DEEP_HINT) from None
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
            if flat:
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


_DEEP = "the program nests too deeply (recursion, or an s-op built from very many steps)"
_DEEP_HINT = "give recursive functions a base case, or build the s-op from fewer operations"
_EXAMPLE_HINT = 'for example: set example [1, 2, 3] or set example "hello"'


def _example_problem(example: Any) -> str | None:
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


def _range_length(r: range) -> int:
    if r.step > 0:
        return max(0, (r.stop - r.start + r.step - 1) // r.step)
    return max(0, (r.start - r.stop - r.step - 1) // -r.step)


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


def _suggest(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=3)
    if close:
        return "did you mean " + " or ".join(repr(c) for c in close) + "?"
    return 'define it first (x = ...;) or load the file that defines it (load "file";)'


def _kids(tree: Tree) -> list[Any]:
    return [c for c in tree.children if not (isinstance(c, Token) and c.type in _KEYWORDS)]


class _Frame:
    """Runs statements of one source in one scope."""

    def __init__(self, rt: Runtime, env: Env, source: Source, top: bool) -> None:
        self.rt = rt
        self.env = env
        self.source = source
        self.top = top  # print results (the console, running the main file)

    # -- errors ----------------------------------------------------------------------------
    def fail(self, node: Any, message: str, hint: str | None = None) -> RASPTextError:
        line = col = None
        if isinstance(node, Token):
            line, col = node.line, node.column
        elif isinstance(node, Tree) and not node.meta.empty:
            line, col = node.meta.line, node.meta.column
        return RASPTextError(
            message,
            filename=self.source.name,
            line=line,
            column=col,
            source_line=self.source.line(line) if line else None,
            hint=hint,
        )

    # -- statements ------------------------------------------------------------------------
    def run(self, stmts: list[Tree]) -> None:
        for s in stmts:
            self.stmt(s)

    def step(self, node: Any, steps: int = 1, what: str | None = None) -> None:
        """Charges the run's step budget; the error points at ``node``."""
        try:
            self.rt._budget.charge(steps, what)
        except L.LimitError as exc:
            raise self.fail(node, str(exc)) from None

    def stmt(self, node: Tree) -> None:
        self.step(node)
        handler = getattr(self, "_s_" + node.data)
        try:
            handler(node)
        except OpError as exc:
            raise self.fail(node, exc.message, exc.hint) from None
        except RecursionError:
            raise self.fail(node, _DEEP, _DEEP_HINT) from None

    def _display(self, name: str | None, value: Any, node: Tree) -> None:
        if not (self.top and self.rt.echo):
            return
        try:
            self.rt.print_named(name, value)
        except OpError as exc:
            raise self.fail(
                node,
                f"{name} cannot be shown on the running example: {exc.message}",
                "set an example this program accepts (set example [...]) or turn examples "
                "off (examples off)",
            ) from None

    def _s_expr_stmt(self, node: Tree) -> None:
        e = node.children[0]
        value = self.expr(e)
        if isinstance(value, (V.Applied, V.AppliedSelector)):
            self._display(None, value, node)
            return
        self.env.vars["out"] = value
        self._display("out", value, node)

    def _name(self, value: Any, name: str) -> Any:
        if isinstance(value, V.SeqVal):
            return V.SeqVal(value.expr.named(self.rt.label(name)), value.vtype, value.rule)
        if isinstance(value, V.SelVal):
            return V.SelVal(value.expr.named(self.rt.label(name)))
        return value

    def _define(self, tok: Token, value: Any) -> None:
        name = str(tok)
        if name in _RESERVED:
            raise self.fail(
                tok,
                f"cannot assign to the reserved name {name!r}",
                "choose another name (reserved: the base s-ops, True, False, and keywords)",
            )
        self.env.define(name, value)

    def _s_assign(self, node: Tree) -> None:
        names_node, exprs_node = node.children
        names = list(names_node.children)
        vals = [self.expr(e) for e in exprs_node.children]
        value: Any = vals[0] if len(vals) == 1 else vals
        if len(names) == 1:
            pairs = [(names[0], value)]
        else:
            if not isinstance(value, list) or len(value) != len(names):
                got = len(value) if isinstance(value, list) else 1
                raise self.fail(
                    exprs_node,
                    f"expected {len(names)} values to assign to {', '.join(names)}, got {got}",
                    "give one value per name: a, b = x, y;",
                )
            pairs = list(zip(names, value))
        named = []
        for tok, v in pairs:
            v = self._name(v, str(tok))
            self._define(tok, v)
            named.append((str(tok), v))
        for name, v in named:
            self._display(name, v, node)

    def _s_funcdef(self, node: Tree) -> None:
        name_tok, params_node, body, returns = _kids(node)
        params = [str(t) for t in params_node.children] if params_node is not None else []
        for p in params_node.children if params_node is not None else []:
            if str(p) in _RESERVED:
                raise self.fail(p, f"cannot use the reserved name {str(p)!r} as a parameter")
        if len(set(params)) != len(params):
            raise self.fail(node, f"function {name_tok!s} repeats a parameter name")
        fn = V.Function(
            str(name_tok),
            params,
            list(body.children),
            returns,
            self.env,
            self.env.name,
            self.source,
        )
        self._define(name_tok, fn)
        self._display(str(name_tok), fn, node)

    def _bind(self, env: Env, names: list[Token], value: Any, node: Tree) -> None:
        if len(names) == 1:
            self._check_bindable(names[0])
            env.vars[str(names[0])] = value
            return
        if not isinstance(value, list) or len(value) != len(names):
            raise self.fail(
                node,
                f"iterating with {len(names)} names needs items of {len(names)} values, "
                f"got {V.describe(value)}",
            )
        for n, v in zip(names, value):
            self._check_bindable(n)
            env.vars[str(n)] = v

    def _check_bindable(self, tok: Token) -> None:
        if str(tok) in _RESERVED:
            raise self.fail(tok, f"cannot bind the reserved name {str(tok)!r}")

    def _iterable(self, node: Any, what: str) -> list:
        value = self.expr(node)
        if isinstance(value, dict):
            return list(value)
        if not isinstance(value, list):
            raise self.fail(
                node,
                f"{what} iterates over a list or dict, got {V.describe(value)}",
                "use a list, range(...), zip(...) or a dict",
            )
        return value

    def _s_forloop(self, node: Tree) -> None:
        names_node, iterable, body = _kids(node)
        items = self._iterable(iterable, "a for loop")
        names = list(names_node.children)
        for item in items:
            self._bind(self.env, names, item, node)
            for s in body.children:
                self.stmt(s)

    def _s_load(self, node: Tree) -> None:
        tok = _kids(node)[0]
        libname = str(tok)[1:-1]
        path = (self.source.directory / (libname + ".rasp")).resolve()
        if not path.is_file():
            raise self.fail(
                tok,
                f"cannot find the file {str(path)!r} to load",
                "load takes the file name without '.rasp', relative to the loading file",
            )
        if path in self.rt._loading:
            raise self.fail(tok, f"{libname!r} loads itself (a circular load)")
        try:
            text = read_source(path)
        except RASPTextError as exc:
            raise self.fail(tok, exc.message, exc.hint) from None
        tree = P.parse(text, str(path))
        env = Env(libname, parent=self.rt.base_env, export_to=self.env)
        self.rt._loading.append(path)
        try:
            _Frame(self.rt, env, Source(str(path), text, path.parent), top=False).run(tree.children)
        finally:
            self.rt._loading.pop()
        if self.top and self.rt.echo:
            for name, value in env.vars.items():
                if not name.startswith("_") and name != "out":
                    show = self.rt.show_seq_examples, self.rt.show_sel_examples
                    self.rt.show_seq_examples = self.rt.show_sel_examples = False
                    try:
                        self.rt.print_named(name, value)
                    finally:
                        self.rt.show_seq_examples, self.rt.show_sel_examples = show

    def _s_draw(self, node: Tree) -> None:
        kids = _kids(node)
        value = self.expr(kids[0])
        xs = self.expr(kids[1]) if len(kids) > 1 else self.rt.seq_example
        if not isinstance(value, V.SeqVal):
            raise self.fail(kids[0], f"draw expects an s-op, got {V.describe(value)}")
        applied = self.rt.apply(value, xs)
        if self.rt.echo or self.top:
            from attnsim.rasp.text import draw as D

            for line in D.render(value.expr, xs):
                self.rt.out(line)
            self.rt.out("\t =  " + str(applied))

    def _example(self, node: Tree) -> Any:
        value = self.expr(_kids(node)[1])
        problem = _example_problem(value)
        if problem:
            if not isinstance(value, (str, list)):
                problem = f"set example expects a list or a string, got {V.describe(value)}"
            raise self.fail(node, problem, _EXAMPLE_HINT)
        return value

    @staticmethod
    def _subset(text: str) -> str:
        if "s-op" in text:
            return "s-op"
        if "selector" in text:
            return "selector"
        return "both"

    def _s_set_example(self, node: Tree) -> None:
        ex = self._example(node)
        subset = self._subset(str(node.children[0]))
        if subset in ("both", "s-op"):
            self.rt.seq_example = ex
        if subset in ("both", "selector"):
            self.rt.sel_example = ex

    def _s_show_example(self, node: Tree) -> None:
        subset = self._subset(str(node.children[0]))
        if not (self.top and self.rt.echo):
            return
        if subset in ("both", "s-op"):
            self.rt.out("\ts-op example: " + V.format_example(self.rt.seq_example))
        if subset in ("both", "selector"):
            self.rt.out("\tselector example: " + V.format_example(self.rt.sel_example))

    def _s_toggle_examples(self, node: Tree) -> None:
        text = str(node.children[0])
        on = text.split()[-1] == "on"
        subset = self._subset(text.rsplit("examples", 1)[0])
        if subset in ("both", "s-op"):
            self.rt.show_seq_examples = on
        if subset in ("both", "selector"):
            self.rt.show_sel_examples = on

    def _s_toggle_full_seq(self, node: Tree) -> None:
        self.rt.full_seq_display = str(node.children[0]).split()[-1] == "on"

    def _s_exit(self, node: Tree) -> None:
        raise _Exit()

    # -- expressions -----------------------------------------------------------------------
    def expr(self, node: Any) -> Any:
        self.step(node)
        if isinstance(node, Token):  # only bare names can reach here
            return self._lookup(node)
        handler = getattr(self, "_e_" + node.data, None)
        if handler is None:  # pragma: no cover - the grammar and the handlers match
            raise self.fail(node, f"internal error: no rule for {node.data!r}")
        try:
            return handler(node)
        except OpError as exc:
            raise self.fail(node, exc.message, exc.hint) from None

    def _lookup(self, tok: Token) -> Any:
        try:
            return self.env.lookup(str(tok))
        except KeyError:
            raise self.fail(
                tok, f"unknown name {str(tok)!r}", _suggest(str(tok), self.env.visible())
            ) from None

    def _e_var(self, node: Tree) -> Any:
        return self._lookup(node.children[0])

    def _e_int(self, node: Tree) -> int:
        text = str(node.children[0])
        limit = self.rt.limits.max_value_digits
        if len(text.lstrip("0")) > limit:
            raise self.fail(
                node,
                f"the number literal has {len(text)} digits, more than the limit of {limit}",
                "raise it with --max-value-digits (Limits(max_value_digits=...))",
            )
        return int(text)

    def _e_float(self, node: Tree) -> float:
        return float(node.children[0])

    def _e_string(self, node: Tree) -> str:
        return str(node.children[0])[1:-1]

    def _e_list(self, node: Tree) -> list:
        exprs = node.children[0]
        return [] if exprs is None else [self.expr(e) for e in exprs.children]

    def _e_dict(self, node: Tree) -> dict:
        out = {}
        for pair in node.children:
            if pair is None:
                continue
            k = self.expr(pair.children[0])
            if not V.is_atom(k):
                raise self.fail(pair, f"dict keys must be atoms, got {V.describe(k)}")
            out[k] = self.expr(pair.children[1])
        return out

    def _comprehension(self, names_node: Tree, iterable: Any, node: Tree, each: Callable) -> None:
        items = self._iterable(iterable, "a comprehension")
        names = list(names_node.children)
        outer = self.env
        try:
            for item in items:
                self.env = Env(outer.name, parent=outer)
                self._bind(self.env, names, item, node)
                each()
        finally:
            self.env = outer

    def _e_listcomp(self, node: Tree) -> list:
        val, names_node, iterable = _kids(node)
        out: list = []
        self._comprehension(names_node, iterable, node, lambda: out.append(self.expr(val)))
        return out

    def _e_dictcomp(self, node: Tree) -> dict:
        key, val, names_node, iterable = _kids(node)
        out: dict = {}

        def each() -> None:
            k = self.expr(key)
            if not V.is_atom(k):
                raise self.fail(key, f"dict keys must be atoms, got {V.describe(k)}")
            out[k] = self.expr(val)

        self._comprehension(names_node, iterable, node, each)
        return out

    def _e_binop(self, node: Tree) -> Any:
        left, op, right = node.children
        return ops.binop(str(op), self.expr(left), self.expr(right))

    def _e_unop(self, node: Tree) -> Any:
        op, operand = node.children
        return ops.unop(str(op), self.expr(operand))

    def _e_logic(self, node: Tree) -> Any:
        left, op, right = node.children
        return ops.logic(str(op), self.expr(left), self.expr(right))

    def _e_ifelse(self, node: Tree) -> Any:
        res1, cond_node, res2 = _kids(node)
        cond = self.expr(cond_node)
        if isinstance(cond, V.SeqVal):
            return ops.ifelse(cond, self.expr(res1), self.expr(res2))
        if isinstance(cond, (V.SelVal, V.Function, V.Builtin)):
            raise self.fail(cond_node, f"cannot use {V.describe(cond)} as a condition")
        return self.expr(res1) if cond else self.expr(res2)  # lazy, as in the original

    def _e_contains(self, node: Tree) -> Any:
        item, container = _kids(node)
        return ops.contains(self.expr(item), self.expr(container), self.env.lookup("full_s"))

    def _e_select(self, node: Tree) -> Any:
        keys, queries, op = _kids(node)
        return ops.select(self.expr(keys), self.expr(queries), str(op))

    def _e_aggregate(self, node: Tree) -> Any:
        args = [self.expr(a) for a in _kids(node)]
        return ops.aggregate(*args)

    def _e_round(self, node: Tree) -> Any:
        return ops.round_(self.expr(_kids(node)[0]))

    def _e_indicator(self, node: Tree) -> Any:
        return ops.indicator(self.expr(_kids(node)[0]))

    def _e_range(self, node: Tree) -> list:
        args = [self.expr(a) for a in _kids(node)[0].children]
        if not 1 <= len(args) <= 3:
            raise self.fail(node, f"range takes 1, 2 or 3 integers, got {len(args)} arguments")
        if not all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            raise self.fail(node, f"range takes integers, got {V.format_value(args)}")
        try:
            items = range(*args)
        except ValueError as exc:  # a step of 0
            raise self.fail(node, f"range{tuple(args)} is invalid: {exc}") from None
        count = _range_length(items)  # len() fails beyond sys.maxsize
        self.step(node, count, f"range with {count} items")
        return list(items)

    def _e_zip(self, node: Tree) -> list:
        lists = [self.expr(a) for a in _kids(node)[0].children]
        for i, lst in enumerate(lists):
            if not isinstance(lst, list):
                raise self.fail(node, f"zip argument {i + 1} is {V.describe(lst)}, not a list")
        if len({len(lst) for lst in lists}) > 1:
            raise self.fail(
                node, f"zip needs lists of equal length, got lengths {[len(x) for x in lists]}"
            )
        total = sum(len(x) for x in lists)
        self.step(node, total, f"zip of {total} items")
        return [list(t) for t in zip(*lists)]

    def _e_len(self, node: Tree) -> int:
        value = self.expr(_kids(node)[0])
        if not isinstance(value, (list, dict)):
            raise self.fail(node, f"len expects a list, got {V.describe(value)}")
        return len(value)

    def _e_index(self, node: Tree) -> Any:
        container, i = node.children
        c = self.expr(container)
        return ops.index(c, self.expr(i), self.env.lookup("indices"), self.env.lookup("length"))

    def _e_call(self, node: Tree) -> Any:
        callee_node, args_node = node.children
        callee = self.expr(callee_node)
        args = [] if args_node is None else [self.expr(a) for a in args_node.children]
        if isinstance(callee, (V.SeqVal, V.SelVal)):
            if len(args) != 1:
                raise self.fail(
                    node,
                    f"applying an s-op or selector takes one input, got {len(args)} arguments",
                    "for example: f([1, 2, 3])",
                )
            return self.rt.apply(callee, args[0])
        if isinstance(callee, V.Builtin):
            self._arity(node, callee.name, callee.params, args)
            return callee.fn(*args)
        if isinstance(callee, V.Function):
            self._arity(node, callee.name, callee.params, args)
            return self._call_function(callee, args, node)
        raise self.fail(
            callee_node,
            f"{V.describe(callee)} is not a function",
            "only functions (def), s-ops and selectors can be called",
        )

    def _arity(self, node: Tree, name: str, params: list[str], args: list) -> None:
        if len(args) != len(params):
            raise self.fail(
                node,
                f"wrong number of arguments for {name}: expected {len(params)} "
                f"({', '.join(params) or 'none'}), got {len(args)}",
            )

    def _call_function(self, fn: V.Function, args: list, node: Tree) -> Any:
        env = Env(fn.env.name + "'", parent=fn.env)
        for p, a in zip(fn.params, args):
            env.vars[p] = a
        frame = _Frame(self.rt, env, fn.source, top=False)
        frame.run(fn.body)
        results = [frame.expr(e) for e in fn.returns.children]
        return results[0] if len(results) == 1 else results
