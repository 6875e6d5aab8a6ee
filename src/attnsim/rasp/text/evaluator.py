"""The evaluator of textual RASP: a walk over the parse tree, one :class:`Frame` per scope.

User text is never handed to Python's ``eval`` or ``exec``: each statement and expression
node has a method here (``_s_assign``, ``_e_select``, ...) that builds attnsim expressions
for S-ops and selectors and plain Python values for atoms, lists and dicts. A frame charges
every step to its runtime's budget (:mod:`attnsim.rasp.text.limits`) and reports errors with
file, line and column. The session state (examples, display settings, labels, printing)
belongs to :class:`attnsim.rasp.text.runtime.Runtime`, which a frame reaches as ``rt``.

>>> from attnsim.rasp.text.runtime import Runtime
>>> Runtime().eval("[x * 2 for x in range(3)]")
[0, 2, 4]
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from lark import Token, Tree

from attnsim.rasp.text import limits as L
from attnsim.rasp.text import ops, scope
from attnsim.rasp.text import parser as P
from attnsim.rasp.text import values as V
from attnsim.rasp.text.errors import OpError, OutputLimitError, RASPTextError
from attnsim.rasp.text.scope import Env, Source

__all__ = ["Frame"]


def _range_length(r: range) -> int:
    if r.step > 0:
        return max(0, (r.stop - r.start + r.step - 1) // r.step)
    return max(0, (r.start - r.stop - r.step - 1) // -r.step)


def _kids(tree: Tree) -> list[Any]:
    return [c for c in tree.children if not (isinstance(c, Token) and c.type in scope.KEYWORDS)]


class Frame:
    """Runs statements of one source in one scope."""

    def __init__(self, rt: Any, env: Env, source: Source, top: bool) -> None:
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
        outermost = self.top and self.rt._statement_output is None
        if outermost:  # what one top-level statement prints is counted (Limits.max_output_chars)
            self.rt._statement_output = 0
        try:
            handler(node)
        except OpError as exc:
            raise self.fail(node, exc.message, exc.hint) from None
        except RecursionError:
            raise self.fail(node, scope.DEEP, scope.DEEP_HINT) from None
        finally:
            if outermost:
                self.rt._statement_output = None

    def _display(self, name: str | None, value: Any, node: Tree) -> None:
        if not (self.top and self.rt.echo):
            return
        try:
            self.rt.print_named(name, value)
        except OutputLimitError:
            raise
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
        if name in scope.RESERVED:
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
            if str(p) in scope.RESERVED:
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
        if str(tok) in scope.RESERVED:
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
        # the folder of the program being run; outside a run (a function called by eval),
        # the folder of the file that holds this load
        root = self.rt.load_root or Path(self.source.directory).resolve()
        if not self.rt.allow_load_outside and not path.is_relative_to(root):
            raise self.fail(
                tok,
                f"load {str(tok)} reaches outside the program's folder {str(root)!r} (to "
                f"{str(path)!r})",
                "a program loads only files in its own folder and below; copy the file there, "
                "or allow it with --allow-load-outside (Runtime(allow_load_outside=...))",
            )
        if not path.is_file():
            raise self.fail(
                tok,
                f"cannot find the file {str(path)!r} to load",
                "load takes the file name without '.rasp', relative to the loading file",
            )
        if path in self.rt._loading:
            raise self.fail(tok, f"{libname!r} loads itself (a circular load)")
        try:
            text = scope.read_source(path)
        except RASPTextError as exc:
            raise self.fail(tok, exc.message, exc.hint) from None
        tree = P.parse(text, str(path))
        env = Env(libname, parent=self.rt.base_env, export_to=self.env)
        self.rt._loading.append(path)
        try:
            Frame(self.rt, env, Source(str(path), text, path.parent), top=False).run(tree.children)
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
        problem = scope.example_problem(value)
        if problem:
            if not isinstance(value, (str, list)):
                problem = f"set example expects a list or a string, got {V.describe(value)}"
            raise self.fail(node, problem, scope.EXAMPLE_HINT)
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
        raise scope.Exit()

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
                tok, f"unknown name {str(tok)!r}", scope.suggest(str(tok), self.env.visible())
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
        return ops.contains(self.expr(item), self.expr(container))

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
        frame = Frame(self.rt, env, fn.source, top=False)
        frame.run(fn.body)
        results = [frame.expr(e) for e in fn.returns.children]
        return results[0] if len(results) == 1 else results
