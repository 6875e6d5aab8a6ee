"""The operations of textual RASP, translated into attnsim expressions.

Each function takes runtime values (S-ops, selectors, atoms) and returns one, with the
original interpreter's semantics: ``select(keys, queries, op)`` tests ``key op query``,
``aggregate`` is the mean over the selected keys (the value itself when one key is
selected, the default, 0 unless given, when none is), and elementwise operators are
Python's (``/`` is true division, ``^`` is ``pow``).

>>> from attnsim.rasp.text import values as V
>>> toks = V.SeqVal(rasp.tokens, "num", V.const_rule(False))
>>> doubled = binop("*", toks, 2)
>>> V.Trace([1, 2, 3]).typed(doubled)
[2, 4, 6]
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from attnsim import rasp
from attnsim.rasp.text import limits
from attnsim.rasp.text import values as V
from attnsim.rasp.text.errors import OpError

__all__ = [
    "to_seq",
    "binop",
    "unop",
    "logic",
    "ifelse",
    "contains",
    "select",
    "aggregate",
    "selector_width",
    "round_",
    "indicator",
    "abs_",
    "index",
    "check_positions",
]

# the annotation that marks ``sop[i]``: the one position it reads (checked on each input)
_INDEX = "text_index"

_CMP = {
    "==": rasp.Comparison.EQ,
    "!=": rasp.Comparison.NEQ,
    "<": rasp.Comparison.LT,
    ">": rasp.Comparison.GT,
    "<=": rasp.Comparison.LEQ,
    ">=": rasp.Comparison.GEQ,
}
_COMPARISONS = frozenset(_CMP)


def _pow(a: Any, b: Any) -> Any:
    limits.pow_digits(a, b)  # refused before it is computed
    out = pow(a, b)
    if isinstance(out, complex):
        raise ValueError(f"{a}^{b} has no real value (a negative number to a fractional power)")
    return out


def _sized(what: str, n: int) -> None:
    limits.charge(n, f"{what} of {n} items")


def _mul(a: Any, b: Any) -> Any:
    limits.mul_digits(a, b)
    for seq, k in ((a, b), (b, a)):  # "ab" * 3, [0] * 3: charged before they are built
        if isinstance(seq, (str, list)) and isinstance(k, int) and not isinstance(k, bool):
            _sized("repeating a string or list", len(seq) * max(k, 0))
    out = a * b
    limits.check_int(out)
    return out


def _add(a: Any, b: Any) -> Any:
    if isinstance(a, (str, list)) and isinstance(b, type(a)):
        _sized("joining strings or lists", len(a) + len(b))
    out = a + b
    limits.check_int(out)
    return out


def _sub(a: Any, b: Any) -> Any:
    out = a - b
    limits.check_int(out)
    return out


def _mod(a: Any, b: Any) -> Any:
    if isinstance(a, str):  # Python's printf-style formatting: not part of RASP
        raise TypeError("'%' takes numbers; a string on the left would be string formatting")
    return a % b


_PY: dict[str, Callable[[Any, Any], Any]] = {
    "+": _add,
    "-": _sub,
    "*": _mul,
    "/": operator.truediv,
    "%": _mod,
    "^": _pow,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
    "<=": operator.le,
    ">=": operator.ge,
}


def _vt(v: Any) -> str:
    return v.vtype if isinstance(v, V.SeqVal) else V.atom_vtype(v)


def _no_selector(op: str, *args: Any) -> None:
    for a in args:
        if isinstance(a, V.SelVal):
            raise OpError(
                f"cannot apply {op} to a selector",
                "selectors combine only with 'and', 'or' and 'not'; use aggregate or "
                "selector_width to turn a selector into an s-op",
            )
        if isinstance(a, (V.Function, V.Builtin)):
            raise OpError(
                f"cannot apply {op} to {V.describe(a)}", "call the function first: f(...)"
            )


def _sop(expr: rasp.SOp, vtype: str, rule: V.Rule | None, *parents: Any) -> V.SeqVal:
    if vtype == "num" and any(
        isinstance(p, V.SeqVal) and rasp.is_numerical(p.expr) for p in parents
    ):
        expr = rasp.numerical(expr)
    return V.SeqVal(expr, vtype, rule)


def _float64_exact(f: Callable[..., Any]) -> Callable[..., Any]:
    """``f`` for a numerical S-op, whose values are float64: an int result that float64
    cannot hold (past 2^53) raises rather than round silently. The original keeps Python's
    exact int there (``a ^ 34 % 10`` of an aggregated 3 is 9 in the original: ``3 ^ 34`` is
    16677181699666569, which float64 holds as 16677181699666568, so 8 would follow).

    >>> _float64_exact(lambda x: x**2 % 5)(3), _float64_exact(lambda x: x**2)(2.5)
    (4, 6.25)
    >>> _float64_exact(lambda x: x**53)(2)  # a power of two: float64 holds it
    9007199254740992
    >>> try:
    ...     _float64_exact(lambda x: x**34)(3)
    ... except ValueError as exc:
    ...     print(str(exc)[:64])
    gives the int 16677181699666569 on (3,), which float64 rounds to
    """

    def exact(*xs: Any) -> Any:
        out = f(*xs)
        if isinstance(out, int) and not isinstance(out, bool) and abs(out) > 2**53:
            try:
                near = float(out)
            except OverflowError:
                near = math.inf if out > 0 else -math.inf
            if near != out:
                raise ValueError(
                    f"gives the int {out} on {xs}, which float64 rounds to {near:.17g}: a "
                    "numerical s-op (an aggregate, or arithmetic on one) holds float64 "
                    "numbers, where the original keeps the exact int; keep its arithmetic "
                    "within 2^53, or do it before the aggregate"
                )
        return out

    return exact


def _map(f: Callable[..., Any], *args: Any) -> rasp.SOp:
    """An elementwise map over the S-op arguments, with the atoms fixed."""
    if any(isinstance(a, V.SeqVal) and rasp.is_numerical(a.expr) for a in args):
        f = _float64_exact(f)
    seqs = [a.expr for a in args if isinstance(a, V.SeqVal)]
    if len(args) == 1:
        return rasp.Map(f, seqs[0], simplify=False)
    slots = [isinstance(a, V.SeqVal) for a in args]
    consts = list(args)
    if len(seqs) == 1:

        def one(x: Any) -> Any:
            return f(*[x if s else c for s, c in zip(slots, consts)])

        return rasp.Map(one, seqs[0], simplify=False)

    def many(*xs: Any) -> Any:
        it = iter(xs)
        return f(*[next(it) if s else c for s, c in zip(slots, consts)])

    return rasp.SequenceMap(many, *seqs)


def to_seq(v: Any) -> V.SeqVal:
    """An S-op from an S-op or an atom (an atom becomes a constant S-op).

    >>> V.Trace("abc").typed(to_seq(7))
    [7, 7, 7]
    """
    if isinstance(v, V.SeqVal):
        return v
    if V.is_atom(v):
        return V.SeqVal(rasp.Full(v), V.atom_vtype(v), V.const_rule(isinstance(v, float)))
    raise OpError(
        f"expected an s-op or an atom (number, string, bool), got {V.describe(v)}",
        "only s-ops and atoms can be used here",
    )


def _python(op: str, f: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    for x in (a, b):
        if not (V.is_atom(x) or isinstance(x, (list, dict))):
            raise OpError(f"cannot apply {op} to {V.describe(x)}")
    try:
        return f(a, b)
    except limits.LimitError as exc:
        raise OpError(str(exc)) from None
    except (TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
        raise OpError(f"{V.describe(a)} {op} {V.describe(b)} failed: {exc}") from None


def _binop_vtype(op: str, ta: str, tb: str) -> str:
    if op in _COMPARISONS:
        return "bool"
    numeric = ("num", "bool")
    if ta in numeric and tb in numeric:
        return "num"
    if op == "+" and ta == tb == "str":
        return "str"
    if op == "*" and {ta, tb} == {"str", "num"}:
        return "str"
    return "any"


def binop(op: str, a: Any, b: Any) -> Any:
    """``a op b`` for an arithmetic or comparison operator (elementwise on S-ops).

    >>> V.Trace([1, 2]).typed(binop("/", to_seq(3), 2))
    [1.5, 1.5]
    """
    _no_selector(op, a, b)
    f = _PY[op]
    if not isinstance(a, V.SeqVal) and not isinstance(b, V.SeqVal):
        return _python(op, f, a, b)
    for x in (a, b):
        if not isinstance(x, V.SeqVal) and not V.is_atom(x):
            raise OpError(
                f"cannot apply {op} to an s-op and {V.describe(x)}",
                "an s-op combines with another s-op or with an atom",
            )
    vtype = _binop_vtype(op, _vt(a), _vt(b))
    if op in _COMPARISONS:
        rule = V.const_rule(False)
    elif op == "/":
        rule = V.const_rule(True)
    elif op == "^":
        rule = lambda t: t.isfloat(a) | t.isfloat(b) | (t.numbers(b) < 0)  # noqa: E731
    else:
        rule = lambda t: t.isfloat(a) | t.isfloat(b)  # noqa: E731
    return _sop(_map(f, a, b), vtype, rule, a, b)


def unop(op: str, a: Any) -> Any:
    """``not a``, ``-a`` or ``+a``.

    >>> V.Trace("ab").typed(unop("not", binop("==", to_seq(1), 1)))
    [False, False]
    """
    if op == "not":
        if isinstance(a, V.SelVal):
            return V.SelVal(rasp.SelectorNot(a.expr))
        if isinstance(a, V.SeqVal):
            return V.SeqVal(_map(lambda x: not x, a), "bool", V.const_rule(False))
        if isinstance(a, (V.Function, V.Builtin)):
            raise OpError(f"cannot apply not to {V.describe(a)}")
        return not a
    _no_selector(op, a)
    f = operator.neg if op == "-" else operator.pos
    if isinstance(a, V.SeqVal):
        vtype = "num" if a.vtype in ("num", "bool") else "any"
        return _sop(_map(f, a), vtype, lambda t: t.isfloat(a), a)
    try:
        return f(a)
    except TypeError as exc:
        raise OpError(f"cannot apply unary {op} to {V.describe(a)}: {exc}") from None


def logic(op: str, a: Any, b: Any) -> Any:
    """``a and b`` / ``a or b``: on selectors, on S-ops (booleans), or on atoms.

    >>> V.Trace("ab").typed(logic("or", to_seq(0), to_seq(3)))
    [True, True]
    """
    sa, sb = isinstance(a, V.SelVal), isinstance(b, V.SelVal)
    if sa and sb:
        cls = rasp.SelectorAnd if op == "and" else rasp.SelectorOr
        return V.SelVal(cls(a.expr, b.expr))
    if sa or sb:
        raise OpError(
            f"cannot apply {op} between a selector and {V.describe(b if sa else a)}",
            "combine selectors with selectors, and s-ops with s-ops or atoms",
        )
    for x in (a, b):
        if isinstance(x, (V.Function, V.Builtin)):
            raise OpError(f"cannot apply {op} to {V.describe(x)}")
    if isinstance(a, V.SeqVal) or isinstance(b, V.SeqVal):
        if op == "and":
            f = lambda x, y: bool(x) and bool(y)  # noqa: E731
        else:
            f = lambda x, y: bool(x) or bool(y)  # noqa: E731
        return V.SeqVal(_map(f, a, b), "bool", V.const_rule(False))
    return (a and b) if op == "and" else (a or b)


def ifelse(cond: V.SeqVal, a: Any, b: Any) -> V.SeqVal:
    """``a if cond else b`` elementwise, for an S-op condition.

    >>> V.Trace([0, 1]).typed(ifelse(binop("==", V.SeqVal(rasp.indices, "num"), 0), "x", "y"))
    ['x', 'y']
    """
    for x in (cond, a, b):
        _no_selector("if/else", x)
        if not isinstance(x, V.SeqVal) and not V.is_atom(x):
            raise OpError(
                f"cannot use {V.describe(x)} in an elementwise if/else",
                "the branches of an if/else on an s-op must be s-ops or atoms",
            )
    ta, tb = _vt(a), _vt(b)
    if ta == tb:
        vtype = ta
    elif {ta, tb} <= {"num"}:
        vtype = "num"
    else:
        vtype = "any"
    rule = lambda t: np.where(t.truthy(cond), t.isfloat(a), t.isfloat(b))  # noqa: E731
    return _sop(_map(lambda c, x, y: x if c else y, cond, a, b), vtype, rule, a, b)


def contains(item: Any, container: Any) -> Any:
    """``item in container``: an S-op in a list of atoms, or an atom in a list or S-op (over
    the always-true selector of the original's library, whatever a program binds to the
    name ``full_s``)."""
    if isinstance(item, V.SeqVal):
        if not isinstance(container, list) or not all(V.is_atom(v) for v in container):
            raise OpError(
                f"'s-op in X' expects X to be a list of atoms, got {V.describe(container)}"
            )
        allowed = list(container)
        return V.SeqVal(_map(lambda x: x in allowed, item), "bool", V.const_rule(False))
    if V.is_atom(item):
        if isinstance(container, list):
            return item in container
        if isinstance(container, V.SeqVal):
            hits = V.SeqVal(_map(lambda v: int(v == item), container), "num", V.const_rule(False))
            return binop(">", aggregate(select(1, 1, "=="), hits), 0)
        raise OpError(f"'atom in X' expects X to be a list or an s-op, got {V.describe(container)}")
    raise OpError(
        f"'A in X' expects A to be an s-op or an atom, got {V.describe(item)}",
        "selectors and functions cannot be compared for membership",
    )


def select(keys: Any, queries: Any, op: str) -> V.SelVal:
    """``select(keys, queries, op)``: key k is selected for query q when ``keys[k] op queries[q]``.

    >>> idx = V.SeqVal(rasp.indices, "num", V.const_rule(False))
    >>> V.Trace("abc").selector(select(idx, 1, "<").expr).astype(int).tolist()
    [[1, 0, 0], [1, 0, 0], [1, 0, 0]]
    """
    for x, what in ((keys, "keys"), (queries, "queries")):
        if isinstance(x, (V.SelVal, V.Function, V.Builtin)) or not (
            isinstance(x, V.SeqVal) or V.is_atom(x)
        ):
            raise OpError(f"select expects an s-op or an atom as its {what}, got {V.describe(x)}")
    return V.SelVal(rasp.Select(to_seq(keys).expr, to_seq(queries).expr, _CMP[op]))


def aggregate(sel: Any, vals: Any, default: Any = None) -> V.SeqVal:
    """``aggregate(sel, vals[, default])``: the mean of the selected values.

    Numbers are aggregated numerically (the mean); strings and bools categorically (the
    single selected value). An empty selection gives ``default``, 0 when not given.

    >>> idx = V.SeqVal(rasp.indices, "num", V.const_rule(False))
    >>> prevs = select(idx, idx, "<=")
    >>> V.Trace("abc").typed(aggregate(prevs, idx))
    [0, 0.5, 1.0]
    """
    if not isinstance(sel, V.SelVal):
        raise OpError(
            f"aggregate expects a selector as its first argument, got {V.describe(sel)}",
            "build one with select(keys, queries, op)",
        )
    if isinstance(vals, V.SelVal) or not (isinstance(vals, V.SeqVal) or V.is_atom(vals)):
        raise OpError(f"aggregate expects an s-op or an atom as its values, got {V.describe(vals)}")
    if default is not None and not V.is_atom(default):
        raise OpError(
            f"aggregate expects an atom as its default, got {V.describe(default)}",
            "the default is the value of a query that selects nothing",
        )
    vals = to_seq(vals)
    d = 0 if default is None else default
    numeric_default = isinstance(d, (int, float)) and not isinstance(d, bool)
    if vals.vtype == "num" and numeric_default:
        values_expr = vals.expr if rasp.is_numerical(vals.expr) else rasp.numerical(vals.expr)
        expr = rasp.numerical(rasp.Aggregate(sel.expr, values_expr, default=d))
        vtype = "num"
    else:
        expr = rasp.Aggregate(sel.expr, vals.expr, default=d)
        vtype = vals.vtype if vals.vtype == V.atom_vtype(d) else "any"
    default_float = isinstance(d, float)

    def rule(t: V.Trace) -> np.ndarray:
        m = t.selector(sel.expr)
        count = m.sum(axis=1)
        single = (m & t.isfloat(vals)[None, :]).any(axis=1)
        return np.where(count == 0, default_float, np.where(count == 1, single, True))

    return V.SeqVal(expr, vtype, rule)


def selector_width(sel: Any) -> V.SeqVal:
    """``selector_width(sel)``: the number of keys each query selects.

    >>> idx = V.SeqVal(rasp.indices, "num", V.const_rule(False))
    >>> V.Trace("abc").typed(selector_width(select(idx, idx, "<=")))
    [1, 2, 3]
    """
    if not isinstance(sel, V.SelVal):
        raise OpError(f"selector_width expects a selector, got {V.describe(sel)}")
    return V.SeqVal(rasp.SelectorWidth(sel.expr), "num", V.const_rule(False))


def round_(a: Any) -> Any:
    """``round(a)``: Python's round (to an int, halves to even), elementwise on S-ops.

    >>> V.Trace("ab").typed(round_(to_seq(2.5)))
    [2, 2]
    """
    _no_selector("round", a)
    if isinstance(a, V.SeqVal):
        return _sop(_map(round, a), "num", V.const_rule(False), a)
    try:
        return round(a)
    except (TypeError, ValueError, OverflowError) as exc:
        raise OpError(f"cannot round {V.describe(a)}: {exc}") from None


def indicator(a: Any) -> V.SeqVal:
    """``indicator(s)``: 1 where ``s`` is true, else 0.

    >>> V.Trace("ab").typed(indicator(to_seq(True)))
    [1, 1]
    """
    if not isinstance(a, V.SeqVal):
        raise OpError(
            f"indicator expects an s-op, got {V.describe(a)}",
            "for an atom use a conditional: 1 if x else 0",
        )
    return V.SeqVal(_map(lambda x: 1 if x else 0, a), "num", V.const_rule(False))


def abs_(a: Any) -> Any:
    """``abs(a)``, elementwise on S-ops.

    >>> V.Trace("ab").typed(abs_(to_seq(-3)))
    [3, 3]
    """
    _no_selector("abs", a)
    if isinstance(a, V.SeqVal):
        return _sop(_map(abs, a), a.vtype if a.vtype == "num" else "any", a.rule, a)
    try:
        return abs(a)
    except TypeError as exc:
        raise OpError(f"cannot take abs of {V.describe(a)}: {exc}") from None


def index(container: Any, i: Any, indices: V.SeqVal, length: V.SeqVal) -> Any:
    """``container[i]`` for a list, string, dict, or S-op (the S-op's value at position i)."""
    if isinstance(container, (list, str)):
        what = "list" if isinstance(container, list) else "string"
        if not isinstance(i, int) or isinstance(i, bool):
            raise OpError(f"an index into a {what} must be an integer, got {V.describe(i)}")
        if i >= len(container) or -i > len(container):
            raise OpError(
                f"index {V.short(i)} is out of range for a {what} of length {len(container)}"
            )
        return container[i]
    if isinstance(container, dict):
        if not V.is_atom(i):
            raise OpError(f"a dict key must be an atom, got {V.describe(i)}")
        if i not in container:
            raise OpError(f"the key {V.format_value(i)} is not in the dict")
        return container[i]
    if isinstance(container, V.SeqVal):
        if not isinstance(i, int) or isinstance(i, bool):
            raise OpError(f"an index into an s-op must be an integer, got {V.describe(i)}")
        where: Any = i if i >= 0 else binop("+", length, i)
        out = aggregate(select(indices, where, "=="), container)
        # as for a list, a position outside the input is an error (checked where the s-op
        # is applied: check_positions), not the empty selection's default 0
        return V.SeqVal(
            rasp.annotate(out.expr, **{_INDEX: (i, container.expr.label)}), out.vtype, out.rule
        )
    raise OpError(f"can only index into a list, dict, string or s-op, got {V.describe(container)}")


def check_positions(expr: Any, n: int) -> None:
    """Raises OpError when ``expr`` reads ``sop[i]`` at a position an input of length ``n``
    lacks (``i >= n`` or ``i < -n``), as indexing a list of ``n`` items would.

    >>> toks = V.SeqVal(rasp.tokens, "any")
    >>> last = index(toks, 4, V.SeqVal(rasp.indices, "num"), V.SeqVal(rasp.length, "num"))
    >>> check_positions(last.expr, 5)
    >>> check_positions(last.expr, 3)
    Traceback (most recent call last):
    ...
    attnsim.rasp.text.errors.OpError: tokens[4]: index 4 is out of range for an input of length 3
    """
    seen: set[int] = set()
    stack = [expr]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        mark = e.annotations.get(_INDEX) if hasattr(e, "annotations") else None
        if mark is not None:
            i, name = mark
            if i >= n or -i > n:
                raise OpError(
                    f"{name}[{V.short(i)}]: index {V.short(i)} is out of range for an input "
                    f"of length {n}",
                    f"an s-op's index reads one position: 0 to {n - 1} (or -{n} to -1) here",
                )
        stack.extend(getattr(e, "children", ()))
