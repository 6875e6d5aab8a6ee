"""The RASP expression tree: S-ops, selectors, encodings and operator sugar.

The names and signatures follow tracr's ``rasp`` module, so that a tracr program ports by
changing its import (``from attnsim import rasp``). Expressions are immutable: ``named`` and
the encoding annotations return annotated copies that share their children.

Glossary: an *S-op* maps an input sequence to a sequence of the same length; a *selector*
maps it to a boolean matrix ``[query, key]``; a selector's predicate is applied as
``predicate(key, query)``, as in tracr and the original RASP.

>>> from attnsim import rasp
>>> double = rasp.numerical(rasp.tokens * 2).named("double")
>>> double.label, rasp.get_encoding(double).value
('double', 'numerical')
>>> rasp.evaluate(double, [1, 2, 3])
[2.0, 4.0, 6.0]
"""

from __future__ import annotations

import copy
import enum
import itertools
import math
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, List, Protocol, TypeVar, Union  # noqa: UP035

import numpy as np

from attnsim.values import is_number

__all__ = [
    "Value",
    "NumericValue",
    "SelectorValue",
    "VT",
    "RASPExprT",
    "SOpT",
    "T",
    "Annotator",
    "Predicate",
    "DEFAULT_ANNOTATORS",
    "default_name",
    "default_encoding",
    "selector_and",
    "selector_or",
    "selector_not",
    "sop_not",
    "RASPExpr",
    "SOp",
    "Selector",
    "Comparison",
    "Encoding",
    "TokensType",
    "IndicesType",
    "LengthType",
    "TokenChannel",
    "token_channel",
    "reads_channels",
    "dependency_order",
    "tokens",
    "indices",
    "length",
    "Map",
    "SequenceMap",
    "LinearSequenceMap",
    "Full",
    "ConstantSOp",
    "Select",
    "ConstantSelector",
    "SelectorAnd",
    "SelectorOr",
    "SelectorNot",
    "SelectMax",
    "Aggregate",
    "SumAggregate",
    "SelectorWidth",
    "numerical",
    "categorical",
    "annotate",
    "get_encoding",
    "is_numerical",
    "is_categorical",
    "value_range",
    "ElementwiseOp",
    "exp",
    "log",
    "sqrt",
    "reciprocal",
    "relu",
    "rsqrt",
    "gelu",
    "gelu_tanh",
]

_ids = itertools.count(1)

# how ``expr(xs)`` evaluates: attnsim.rasp.evaluators, which reads this module, passes its
# evaluate_one in through set_evaluator when it loads (the package loads it first)
_evaluate_one: Callable[[RASPExpr, Sequence[Value]], list] | None = None


def set_evaluator(evaluate_one: Callable[[RASPExpr, Sequence[Value]], list]) -> None:
    """Sets the function ``expr(xs)`` calls (the interpreter's one-sequence evaluator)."""
    global _evaluate_one
    _evaluate_one = evaluate_one


# tracr's type names: what a position of an S-op holds, and what a selector evaluates to
SelectorValue = List[List[bool]]  # noqa: UP006  (a runtime alias, as in tracr)
NumericValue = Union[int, float]  # noqa: UP007  (a runtime alias, as in tracr)
Value = Union[None, int, float, str, bool]  # noqa: UP007
VT = TypeVar("VT", bound=Value)
RASPExprT = TypeVar("RASPExprT", bound="RASPExpr")
SOpT = TypeVar("SOpT", bound="SOp")
T = TypeVar("T")


class Annotator(Protocol):
    """A function giving the default value of one annotation of an expression."""

    def __call__(self, expr: RASPExpr) -> Any:
        """The annotation's value for ``expr``."""


class Predicate(Protocol):
    """What ``Select`` accepts as its predicate: ``(key, query) -> bool``."""

    def __call__(self, key: Value, query: Value) -> bool:
        """Whether ``key`` is selected for ``query``."""


# The default of each annotation an expression was not given, computed when it is read:
# ``expr.annotations[key]`` calls ``DEFAULT_ANNOTATORS[key](expr)``, as in tracr (add an
# entry for a custom annotation). "name" and "encoding" are filled below the classes.
DEFAULT_ANNOTATORS: dict[str, Annotator] = {}


class Encoding(enum.Enum):
    """How an S-op is represented in a compiled residual stream."""

    CATEGORICAL = "categorical"  # one direction per value (one-hot)
    NUMERICAL = "numerical"  # one direction holding the value itself


def _check_expr(obj: Any, what: str, kind: type) -> None:
    if not isinstance(obj, kind):
        shown = repr(obj)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        hint = " (wrap a constant with rasp.Full(value))" if kind is SOp else ""
        raise TypeError(
            f"{what} expects a RASP {kind.__name__}, got {type(obj).__name__} {shown}{hint}"
        )


def _check_function(f: Any, what: str) -> None:
    if not callable(f) or isinstance(f, RASPExpr):
        raise TypeError(f"{what} expects a callable, got {type(f).__name__} {f!r}")


class _Annotations(Mapping):
    """An expression's annotations, read-only; a key it was not given reads its default
    from ``DEFAULT_ANNOTATORS`` (iteration lists the given keys only, as in tracr)."""

    __slots__ = ("_expr", "_given")

    def __init__(self, expr: RASPExpr, given: dict[str, Any]) -> None:
        self._expr = expr
        self._given = given

    def __getitem__(self, key: str) -> Any:
        if key in self._given:
            return self._given[key]
        if key in DEFAULT_ANNOTATORS:
            return DEFAULT_ANNOTATORS[key](self._expr)
        known = sorted(set(self._given) | set(DEFAULT_ANNOTATORS))
        raise KeyError(f"no annotation {key!r}; the annotations here are {known}")

    def __iter__(self) -> Iterator[str]:
        return iter(dict(self._given))

    def __len__(self) -> int:
        return len(self._given)

    def __repr__(self) -> str:
        return repr(dict(self._given))


class RASPExpr:
    """Base class of every RASP expression.

    Calling an expression on a sequence evaluates it with the reference interpreter
    (``program(["a", "b"])``, as in tracr).

    Attributes:
        annotations: read-only mapping (``name``, ``encoding``, ``value_range``, ...); a key
            that was not given reads its default from ``DEFAULT_ANNOTATORS``.
    """

    _default_prefix = "expr"

    def __init__(self) -> None:
        self._uid = next(_ids)
        self._annotations: dict[str, Any] = {}

    # -- identity and naming ---------------------------------------------------------------
    @property
    def uid(self) -> int:
        """A number unique to this expression object (copies get new ones)."""
        return self._uid

    @property
    def unique_id(self) -> int:
        """tracr's name for :attr:`uid`."""
        return self._uid

    @property
    def annotations(self) -> Mapping[str, Any]:
        return _Annotations(self, self._annotations)

    @annotations.setter
    def annotations(self, annotations: Mapping[str, Any]) -> None:
        self._annotations = dict(annotations)

    @property
    def label(self) -> str:
        """The expression's name: given with ``named`` or made from its kind and uid."""
        return self._annotations.get("name") or f"{self._default_prefix}_{self._uid}"

    @property
    def name(self) -> str:
        """The ``name`` annotation: given with ``named``, else the kind (``"map"``)."""
        return self.annotations["name"]

    def named(self: RASPExprT, name: str) -> RASPExprT:
        """Returns a copy of this expression called ``name``."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"named() expects a non-empty string, got {name!r}")
        return annotate(self, name=name)

    def annotated(self: RASPExprT, **annotations: Any) -> RASPExprT:
        """Returns a copy of this expression with ``annotations`` added."""
        return annotate(self, **annotations)

    def copy(self: RASPExprT) -> RASPExprT:
        """Returns a shallow copy of this expression with a new uid."""
        return annotate(self)

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return ()

    def __call__(self, xs: Sequence[Value]) -> list:
        """Evaluates this expression on one sequence ``xs`` (as tracr's ``expr(xs)``)."""
        if _evaluate_one is None:  # attnsim.rasp sets it as it loads, before any expression
            raise RuntimeError("expr(xs) needs the interpreter: import attnsim.rasp")
        return _evaluate_one(self, xs)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.label}>"

    __hash__ = object.__hash__


# --------------------------------------------------------------------------------------
# Elementwise operations with known vectorised forms (operator sugar and named maps)
# --------------------------------------------------------------------------------------


class ElementwiseOp:
    """A named elementwise function with a numpy form; lets the compiler pick a realisation.

    Args:
        kind: "affine", "exp", "log", "sqrt", "reciprocal", "relu", "pow", "abs", "mod",
            "floordiv", "cmp", "not", "add", "sub", "mul", "div", "and", "or", ...
        params: the constants of the operation (for "affine": (scale, shift)).
        numpy_fn: a vectorised implementation on float or object arrays.
    """

    __slots__ = ("kind", "params", "numpy_fn")

    def __init__(self, kind: str, params: tuple = (), numpy_fn: Callable | None = None) -> None:
        self.kind = kind
        self.params = tuple(params)
        self.numpy_fn = numpy_fn

    def __repr__(self) -> str:
        return f"ElementwiseOp({self.kind!r}, {self.params!r})"


class SOp(RASPExpr):
    """A sequence operation. Arithmetic and comparisons build Maps and SequenceMaps."""

    _default_prefix = "sop"

    # -- operator sugar --------------------------------------------------------------------
    def _binary(self, other: Any, kind: str, py: Callable, reverse: bool = False) -> SOp:
        if isinstance(other, SOp):
            a, b = (other, self) if reverse else (self, other)
            if kind in ("add", "sub"):
                out: SOp = LinearSequenceMap(a, b, 1, 1 if kind == "add" else -1)
            else:
                out = SequenceMap(py, a, b)
                out._op = ElementwiseOp(kind, (), _numpy_binary(kind))
            return _propagate_encoding(out, a, b)
        if isinstance(other, RASPExpr):
            raise TypeError(f"cannot combine an S-op with a {type(other).__name__}")
        c = other
        if kind in ("add", "sub", "mul", "div") and is_number(c):
            # affine forms x*a + b keep their coefficients for the compiler
            if kind == "add":
                a_, b_ = 1, c
            elif kind == "sub":
                a_, b_ = (-1, c) if reverse else (1, -c)
            elif kind == "mul":
                a_, b_ = c, 0
            elif not reverse:
                if c == 0:
                    raise ZeroDivisionError("division of an S-op by the constant 0")
                a_, b_ = 1 / c, 0
            else:
                out = Map(lambda x, c=c: c / x, self, simplify=False)
                out._op = ElementwiseOp("scaled_reciprocal", (c,), lambda x, c=c: c / x)
                return _propagate_encoding(out, self)
            out = Map(_affine_fn(a_, b_), self, simplify=False)
            out._op = ElementwiseOp("affine", (a_, b_), _affine_fn(a_, b_))
            return _propagate_encoding(out, self)
        if reverse:
            fn = lambda x, c=c: py(c, x)
        else:
            fn = lambda x, c=c: py(x, c)
        out = Map(fn, self, simplify=False)
        out._op = ElementwiseOp(kind, (c, reverse), _numpy_const(kind, c, reverse))
        return _propagate_encoding(out, self)

    def __add__(self, other):
        return self._binary(other, "add", operator.add)

    def __radd__(self, other):
        return self._binary(other, "add", operator.add, reverse=True)

    def __sub__(self, other):
        return self._binary(other, "sub", operator.sub)

    def __rsub__(self, other):
        return self._binary(other, "sub", operator.sub, reverse=True)

    def __mul__(self, other):
        return self._binary(other, "mul", operator.mul)

    def __rmul__(self, other):
        return self._binary(other, "mul", operator.mul, reverse=True)

    def __truediv__(self, other):
        return self._binary(other, "div", operator.truediv)

    def __rtruediv__(self, other):
        return self._binary(other, "div", operator.truediv, reverse=True)

    def __floordiv__(self, other):
        return self._binary(other, "floordiv", operator.floordiv)

    def __rfloordiv__(self, other):
        return self._binary(other, "floordiv", operator.floordiv, reverse=True)

    def __mod__(self, other):
        return self._binary(other, "mod", operator.mod)

    def __rmod__(self, other):
        return self._binary(other, "mod", operator.mod, reverse=True)

    def __pow__(self, other):
        return self._binary(other, "pow", operator.pow)

    def __rpow__(self, other):
        return self._binary(other, "pow", operator.pow, reverse=True)

    def __neg__(self):
        return self * -1

    def __abs__(self):
        out = Map(abs, self, simplify=False)
        out._op = ElementwiseOp("abs", (), np.abs)
        return _propagate_encoding(out, self)

    def __eq__(self, other):  # type: ignore[override]
        return self._binary(other, "eq", operator.eq)

    def __ne__(self, other):  # type: ignore[override]
        return self._binary(other, "ne", operator.ne)

    def __lt__(self, other):
        return self._binary(other, "lt", operator.lt)

    def __le__(self, other):
        return self._binary(other, "le", operator.le)

    def __gt__(self, other):
        return self._binary(other, "gt", operator.gt)

    def __ge__(self, other):
        return self._binary(other, "ge", operator.ge)

    # Python's `and` / `or` on the values, as in tracr (``2 & 3`` is 3, ``0 | "a"`` is "a");
    # a constant on the left of `|` is still the right operand of `or`, as in tracr
    def __and__(self, other):
        return self._binary(other, "and", _and)

    def __rand__(self, other):
        return self._binary(other, "and", _and, reverse=True)

    def __or__(self, other):
        return self._binary(other, "or", _or)

    def __ror__(self, other):
        return self._binary(other, "or", _or, reverse=isinstance(other, SOp))

    def __invert__(self):
        out = Map(lambda x: not x, self, simplify=False)
        out._op = ElementwiseOp("not", (), np.logical_not)
        return out

    def __bool__(self) -> bool:
        raise TypeError(
            "an S-op has no truth value; use & | ~ for logic on S-ops, or compare with "
            "`a is b` for identity"
        )

    __hash__ = object.__hash__


def _and(x: Any, y: Any) -> Any:
    return x and y


def _or(x: Any, y: Any) -> Any:
    return x or y


def _affine_fn(a: float, b: float) -> Callable:
    def fn(x):
        return x * a + b

    return fn


def _numpy_binary(kind: str) -> Callable | None:
    return {
        "mul": np.multiply,
        "div": np.divide,
        "floordiv": np.floor_divide,
        "mod": np.mod,
        "pow": np.power,
        "eq": np.equal,
        "ne": np.not_equal,
        "lt": np.less,
        "le": np.less_equal,
        "gt": np.greater,
        "ge": np.greater_equal,
    }.get(kind)


def _numpy_const(kind: str, c: Any, reverse: bool) -> Callable | None:
    f = _numpy_binary(kind)
    if f is None or not is_number(c):
        return None
    return (lambda x: f(c, x)) if reverse else (lambda x: f(x, c))


def _propagate_encoding(out: SOp, *parents: SOp) -> SOp:
    if any(is_numerical(p) for p in parents):
        out._annotations["encoding"] = Encoding.NUMERICAL
    return out


# --------------------------------------------------------------------------------------
# Primitive S-ops
# --------------------------------------------------------------------------------------


class TokensType(SOp):
    """The input tokens."""

    def __init__(self) -> None:
        super().__init__()
        self._annotations["name"] = "tokens"


class IndicesType(SOp):
    """The positions 0, 1, ..., n-1."""

    def __init__(self) -> None:
        super().__init__()
        self._annotations["name"] = "indices"


class LengthType(SOp):
    """The sequence length n at every position (in causal mode: the prefix length i+1)."""

    def __init__(self) -> None:
        super().__init__()
        self._annotations["name"] = "length"


tokens = TokensType()
indices = IndicesType()
length = LengthType()


class TokenChannel(TokensType):
    """Channel ``k`` of vector tokens: a program that reads channels takes a sequence of
    vectors (one real vector per position, ``[n, width]``; a batch is ``[batch, n, width]``),
    and ``TokenChannel(k)`` is the real number in column ``k`` of each. It is numerical;
    make one with :func:`token_channel`. A program reads either ``tokens`` or channels.
    """

    def __init__(self, channel: int) -> None:
        super().__init__()
        if isinstance(channel, bool) or not isinstance(channel, (int, np.integer)) or channel < 0:
            raise ValueError(f"a token channel is a non-negative integer, got {channel!r}")
        self.channel = int(channel)
        self._annotations["name"] = f"tokens[{self.channel}]"
        self._annotations["encoding"] = Encoding.NUMERICAL


def token_channel(channel: int) -> SOp:
    """Channel ``channel`` of vector tokens (numerical).

    >>> from attnsim import rasp
    >>> prog = rasp.token_channel(0) * rasp.token_channel(1)
    >>> rasp.evaluate(prog, [[1.0, 2.0], [3.0, 4.0]])  # one sequence of two 2-vectors
    [2.0, 12.0]
    """
    return TokenChannel(channel)


def reads_channels(expr: RASPExpr) -> int:
    """The token width a program reads: 1 + its largest token channel, or 0 when it reads
    no channel (it reads scalar ``tokens``, if anything).

    >>> reads_channels(token_channel(3) + token_channel(1)), reads_channels(tokens + 1)
    (4, 0)
    """
    width = 0
    for e in dependency_order(expr):
        if isinstance(e, TokenChannel):
            width = max(width, e.channel + 1)
    return width


def dependency_order(expr: RASPExpr, known: Any = ()) -> list[RASPExpr]:
    """The expressions ``expr`` reads (itself included), each after its children: the one
    walk of a program's graph, which refuses a cycle.

    Children are visited last to first (a node's last child comes first in the order), an
    expression reached twice is listed once, and one whose uid is in ``known`` (an
    evaluator's memo, say) is left out with everything only it reads. Iterative: a deep
    program does not reach the recursion limit.

    Args:
        expr: the program (an S-op or a selector).
        known: uids to leave out (a set or a dict).

    Returns:
        The expressions in dependency order.

    Raises:
        ValueError: the graph has a cycle (an expression whose child was changed to one
            that reads it); the message names the expressions on the cycle.

    >>> from attnsim import rasp
    >>> [e.label for e in dependency_order((rasp.tokens + 1).named("inc"))]
    ['tokens', 'inc']
    """
    if expr.uid in known:
        return []
    order: list[RASPExpr] = []
    done: set[int] = set()
    path: list[RASPExpr] = [expr]  # the open expressions, outermost first
    on_path = {expr.uid}
    stack = [iter(expr.children[::-1])]
    while stack:
        for child in stack[-1]:
            uid = child.uid
            if uid in done or uid in known:
                continue
            if uid in on_path:
                raise ValueError(_cycle_message(path, child))
            path.append(child)
            on_path.add(uid)
            stack.append(iter(child.children[::-1]))
            break
        else:  # every child is done: the expression is
            stack.pop()
            node = path.pop()
            on_path.discard(node.uid)
            done.add(node.uid)
            order.append(node)
    return order


def _cycle_message(path: list[RASPExpr], child: RASPExpr) -> str:
    start = next(i for i, e in enumerate(path) if e.uid == child.uid)
    cycle = path[start:] + [child]  # each reads the next one
    shown = " -> ".join(f"{e.label} ({type(e).__name__})" for e in cycle)
    if len(shown) > 400:
        shown = shown[:397] + "..."
    return (
        f"the program's graph has a cycle: {shown}, each reading the next, so "
        f"{child.label!r} would need its own value to compute it. RASP expressions form an "
        "acyclic graph; a child changed after construction (setattr on an expression) makes "
        "one: build a new expression instead"
    )


class Map(SOp):
    """Applies ``f`` to every element of ``inner``.

    Args:
        f: a function of one value.
        inner: the S-op to map.
        simplify: when ``inner`` is an unnamed Map, fuse the two functions (as tracr does).

    >>> from attnsim import rasp
    >>> rasp.evaluate(rasp.Map(lambda x: x + 1, rasp.indices), [7, 7, 7])
    [1, 2, 3]
    """

    _default_prefix = "map"

    def __init__(self, f: Callable[[Any], Any], inner: SOp, simplify: bool = True) -> None:
        super().__init__()
        _check_expr(inner, "Map", SOp)
        _check_function(f, "Map")
        if (
            simplify
            and isinstance(inner, Map)
            and "name" not in inner._annotations
            and inner._op is None
        ):
            g = inner.f
            self.f = lambda x, f=f, g=g: f(g(x))
            self.inner = inner.inner
        else:
            self.f = f
            self.inner = inner
        self._op: ElementwiseOp | None = None

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return (self.inner,)


class SequenceMap(SOp):
    """Applies ``f`` position by position to two (or more) S-ops.

    >>> from attnsim import rasp
    >>> rasp.evaluate(rasp.SequenceMap(lambda x, i: x * i, rasp.tokens, rasp.indices), [5, 5, 5])
    [0, 5, 10]
    """

    _default_prefix = "sequence_map"

    def __init__(
        self, f: Callable[..., Any], *sops: SOp, fst: SOp | None = None, snd: SOp | None = None
    ) -> None:
        super().__init__()
        if fst is not None or snd is not None:  # tracr's keywords: SequenceMap(f, fst=, snd=)
            if sops or fst is None or snd is None:
                raise TypeError("SequenceMap takes its S-ops either by position or as fst= snd=")
            sops = (fst, snd)
        if len(sops) < 2:
            raise TypeError(f"SequenceMap expects at least two S-ops, got {len(sops)}")
        for s in sops:
            _check_expr(s, "SequenceMap", SOp)
        _check_function(f, "SequenceMap")
        self.f = f
        self.sops = tuple(sops)
        self._op: ElementwiseOp | None = None

    @property
    def fst(self) -> SOp:
        return self.sops[0]

    @property
    def snd(self) -> SOp:
        return self.sops[1]

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return self.sops


class LinearSequenceMap(SequenceMap):
    """``fst * fst_fac + snd * snd_fac``, position by position."""

    _default_prefix = "linear_sequence_map"

    def __init__(self, fst: SOp, snd: SOp, fst_fac: float, snd_fac: float) -> None:
        super().__init__(lambda x, y: fst_fac * x + snd_fac * y, fst, snd)
        self.fst_fac = fst_fac
        self.snd_fac = snd_fac
        self._op = ElementwiseOp(
            "linear", (fst_fac, snd_fac), lambda x, y: fst_fac * x + snd_fac * y
        )


class Full(SOp):
    """The same value ``fill`` at every position."""

    _default_prefix = "full"

    def __init__(self, fill: Any) -> None:
        super().__init__()
        if isinstance(fill, RASPExpr):
            raise TypeError("Full expects a constant value, got a RASP expression")
        self.fill = fill


class ConstantSOp(SOp):
    """A fixed sequence of values; its length must match the input's when ``check_length``."""

    _default_prefix = "constant_sop"
    __class_getitem__ = classmethod(lambda cls, item: cls)  # ConstantSOp[str], as in tracr

    def __init__(self, value: Sequence[Any], check_length: bool = True) -> None:
        super().__init__()
        if isinstance(value, RASPExpr) or isinstance(value, (str, bytes)):
            raise TypeError(f"ConstantSOp expects a list of values, got {value!r}")
        self.value = list(value)
        self.check_length = check_length


# --------------------------------------------------------------------------------------
# Selectors
# --------------------------------------------------------------------------------------


class Comparison(enum.Enum):
    """The predicates of ``Select``, applied as ``predicate(key, query)``.

    The members and their values are tracr's. As in tracr, a comparison of None (the value
    of an empty categorical aggregate) raises ``ValueError``; the interpreter and the
    compiled models never call ``TRUE`` and ``FALSE``, so those select on None too.

    >>> Comparison.LEQ(1, 2), Comparison.EQ.value
    (True, '==')
    """

    EQ = "=="
    LT = "<"
    LEQ = "<="
    GT = ">"
    GEQ = ">="
    NEQ = "!="
    TRUE = "True"
    FALSE = "False"

    def __call__(self, key: Any, query: Any) -> bool:
        if key is None or query is None:
            side = "key" if key is None else "query"
            raise ValueError(
                f"{side} is None! (None is what an empty categorical Aggregate gives; a "
                "comparison needs a value: give that Aggregate a default)"
            )
        if self is Comparison.TRUE:
            return True
        if self is Comparison.FALSE:
            return False
        return bool(_COMPARISON_FN[self](key, query))

    @property
    def numpy_fn(self) -> Callable:
        """The vectorised form ``fn(keys, queries) -> bool array``."""
        return _COMPARISON_NP[self]


_COMPARISON_FN = {
    Comparison.EQ: operator.eq,
    Comparison.LT: operator.lt,
    Comparison.LEQ: operator.le,
    Comparison.GT: operator.gt,
    Comparison.GEQ: operator.ge,
    Comparison.NEQ: operator.ne,
}
_COMPARISON_NP = {
    Comparison.EQ: np.equal,
    Comparison.LT: np.less,
    Comparison.LEQ: np.less_equal,
    Comparison.GT: np.greater,
    Comparison.GEQ: np.greater_equal,
    Comparison.NEQ: np.not_equal,
    Comparison.TRUE: lambda k, q: np.ones(np.broadcast(k, q).shape, bool),
    Comparison.FALSE: lambda k, q: np.zeros(np.broadcast(k, q).shape, bool),
}


class Selector(RASPExpr):
    """A boolean attention pattern ``[query, key]``; combine with & | ~."""

    _default_prefix = "selector"

    def __and__(self, other: Selector) -> Selector:
        return SelectorAnd(self, other)

    def __or__(self, other: Selector) -> Selector:
        return SelectorOr(self, other)

    def __invert__(self) -> Selector:
        return SelectorNot(self)

    __hash__ = object.__hash__


class Select(Selector):
    """Selects, for each query position, the keys with ``predicate(key, query)`` true.

    Args:
        keys: the S-op read at key positions.
        queries: the S-op read at query positions.
        predicate: a ``Comparison`` or any function ``(key, query) -> bool``.

    >>> from attnsim import rasp
    >>> prevs = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ)
    >>> rasp.evaluate(rasp.SelectorWidth(prevs), ["a", "b", "c"])
    [1, 2, 3]
    """

    _default_prefix = "select"

    def __init__(self, keys: SOp, queries: SOp, predicate: Comparison | Callable) -> None:
        super().__init__()
        _check_expr(keys, "Select (keys)", SOp)
        _check_expr(queries, "Select (queries)", SOp)
        if not isinstance(predicate, Comparison) and (
            not callable(predicate) or isinstance(predicate, RASPExpr)
        ):
            raise TypeError(
                f"Select expects a Comparison or a function (key, query) -> bool, got {predicate!r}"
            )
        self.keys = keys
        self.queries = queries
        self.predicate = predicate

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return (self.keys, self.queries)


class ConstantSelector(Selector):
    """A fixed boolean matrix ``value[query][key]``."""

    _default_prefix = "constant_selector"

    def __init__(self, value: Sequence[Sequence[bool]], check_length: bool = True) -> None:
        super().__init__()
        self.value = np.asarray(value, dtype=bool)
        self.check_length = check_length


class SelectorAnd(Selector):
    """Both selectors hold."""

    _default_prefix = "selector_and"

    def __init__(self, fst: Selector, snd: Selector) -> None:
        super().__init__()
        _check_expr(fst, "SelectorAnd", Selector)
        _check_expr(snd, "SelectorAnd", Selector)
        self.fst, self.snd = fst, snd

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return (self.fst, self.snd)


class SelectorOr(Selector):
    """Either selector holds."""

    _default_prefix = "selector_or"

    def __init__(self, fst: Selector, snd: Selector) -> None:
        super().__init__()
        _check_expr(fst, "SelectorOr", Selector)
        _check_expr(snd, "SelectorOr", Selector)
        self.fst, self.snd = fst, snd

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return (self.fst, self.snd)


class SelectorNot(Selector):
    """The selector does not hold."""

    _default_prefix = "selector_not"

    def __init__(self, inner: Selector) -> None:
        super().__init__()
        _check_expr(inner, "SelectorNot", Selector)
        self.inner = inner

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return (self.inner,)


class SelectMax(Selector):
    """Among the keys ``base`` selects, the ones whose numerical ``score`` is largest.

    For each query, the keys chosen by ``base`` whose ``score`` equals the largest score
    among them (all tied keys stay selected); a query whose ``base`` selects nothing selects
    nothing. Aggregating ``score`` itself over it gives, exactly, the row maximum.

    The compiler realises it as one head whose score is ``G * base + score`` (``G`` a gain
    larger than the score's spread), so it needs a declared bound:
    ``rasp.numerical(score, value_range=(lo, hi))``, checked at run time. A hard-attention
    head averages the keys within its tolerance (0.25) of the maximum. When the score has a
    finite set of values, the compiler stretches it so that they lie at least 1 apart, and the
    head is exact. When the score is real-valued, only the numerical mean of ``score`` itself
    is compiled over it: the row maximum, within that tolerance (``bounded``); any other value
    is refused at compile time, since the head would average it over near-ties the
    interpreter tells apart.

    Args:
        base: the keys to choose among.
        score: a numerical S-op read at key positions.

    >>> from attnsim import rasp
    >>> from attnsim.rasp.expr import SelectMax
    >>> x = rasp.numerical(rasp.tokens, value_range=(-10, 10))
    >>> same_half = rasp.Select(rasp.indices // 2, rasp.indices // 2, rasp.Comparison.EQ)
    >>> row_max = rasp.numerical(rasp.Aggregate(SelectMax(same_half, x), x))
    >>> rasp.evaluate(row_max, [1, 3, -2, -5])
    [3.0, 3.0, -2.0, -2.0]
    """

    _default_prefix = "select_max"

    def __init__(self, base: Selector, score: SOp) -> None:
        super().__init__()
        _check_expr(base, "SelectMax (base)", Selector)
        _check_expr(score, "SelectMax (score)", SOp)
        self.base = base
        self.score = score

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return (self.base, self.score)


# --------------------------------------------------------------------------------------
# Aggregation
# --------------------------------------------------------------------------------------


class Aggregate(SOp):
    """For each query, the mean (or sum) of ``sop`` over the selected keys.

    An empty selection gives ``default``: for a numerical aggregate 0 unless given, for a
    categorical one None unless given. A categorical aggregate must select a single value.

    Args:
        selector: which keys each query reads.
        sop: the values to aggregate.
        default: the value of a query that selects nothing.
        reduction: "mean" (RASP's aggregate) or "sum".

    >>> from attnsim import rasp
    >>> prevs = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ)
    >>> rasp.evaluate(rasp.numerical(rasp.Aggregate(prevs, rasp.numerical(rasp.tokens))), [2, 4, 6])
    [2.0, 3.0, 4.0]
    """

    _default_prefix = "aggregate"
    __class_getitem__ = classmethod(lambda cls, item: cls)  # Aggregate[int], as in tracr

    def __init__(
        self, selector: Selector, sop: SOp, default: Any = None, reduction: str = "mean"
    ) -> None:
        super().__init__()
        _check_expr(selector, "Aggregate (selector)", Selector)
        _check_expr(sop, "Aggregate (values)", SOp)
        if reduction not in ("mean", "sum"):
            raise ValueError(f"Aggregate reduction must be 'mean' or 'sum', got {reduction!r}")
        self.selector = selector
        self.sop = sop
        self.default = default
        self.reduction = reduction

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return (self.selector, self.sop)


def SumAggregate(selector: Selector, sop: SOp, default: Any = 0) -> Aggregate:  # noqa: N802
    """A numerical aggregate that sums the selected values (0, or ``default``, if none).

    >>> from attnsim import rasp
    >>> everything = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.TRUE)
    >>> rasp.evaluate(rasp.SumAggregate(everything, rasp.numerical(rasp.tokens)), [1.5, 2, 3])
    [6.5, 6.5, 6.5]
    """
    return numerical(Aggregate(selector, sop, default=default, reduction="sum"))


class SelectorWidth(SOp):
    """For each query, the number of selected keys."""

    _default_prefix = "selector_width"

    def __init__(self, selector: Selector) -> None:
        super().__init__()
        _check_expr(selector, "SelectorWidth", Selector)
        self.selector = selector

    @property
    def children(self) -> tuple[RASPExpr, ...]:
        return (self.selector,)


# --------------------------------------------------------------------------------------
# Annotations
# --------------------------------------------------------------------------------------


def annotate(expr: RASPExpr, **kwargs: Any) -> RASPExpr:
    """Returns a copy of ``expr`` with the given annotations added (children are shared)."""
    _check_expr(expr, "annotate", RASPExpr)
    new = copy.copy(expr)
    new._uid = next(_ids)
    new._annotations = {**expr._annotations, **kwargs}
    return new


def numerical(sop: SOp, value_range: tuple[float, float] | None = None) -> SOp:
    """Marks ``sop`` as numerically encoded (one direction holding its value).

    Args:
        sop: the S-op.
        value_range: optional declared range ``(lo, hi)`` of its values; the compiler uses it
            for maps it cannot realise without one and checks it at run time.
    """
    _check_expr(sop, "numerical", SOp)
    kw: dict[str, Any] = {"encoding": Encoding.NUMERICAL}
    if value_range is not None:
        lo, hi = value_range
        if not (lo <= hi):
            raise ValueError(f"value_range must have lo <= hi, got {value_range!r}")
        kw["value_range"] = (float(lo), float(hi))
    return annotate(sop, **kw)  # type: ignore[return-value]


def categorical(sop: SOp) -> SOp:
    """Marks ``sop`` as categorically encoded (one direction per value)."""
    _check_expr(sop, "categorical", SOp)
    return annotate(sop, encoding=Encoding.CATEGORICAL)  # type: ignore[return-value]


def get_encoding(sop: SOp) -> Encoding:
    """The encoding of ``sop`` (categorical unless annotated otherwise)."""
    got = sop._annotations.get("encoding")
    if got is not None:
        return got
    if isinstance(sop, SOp):
        return DEFAULT_ANNOTATORS.get("encoding", default_encoding)(sop)
    return Encoding.CATEGORICAL


def is_numerical(sop: RASPExpr) -> bool:
    return isinstance(sop, SOp) and get_encoding(sop) is Encoding.NUMERICAL


def is_categorical(sop: RASPExpr) -> bool:
    return isinstance(sop, SOp) and get_encoding(sop) is Encoding.CATEGORICAL


def value_range(sop: SOp) -> tuple[float, float] | None:
    """The declared value range of a numerical S-op, or None."""
    return sop._annotations.get("value_range")


def default_encoding(expr: RASPExpr) -> Encoding:
    """The encoding of an S-op that was not annotated: categorical (tracr's default).

    Raises:
        TypeError: ``expr`` is not an S-op.

    >>> default_encoding(tokens).value
    'categorical'
    """
    if not isinstance(expr, SOp):
        raise TypeError(f"only an S-op has an encoding, got {type(expr).__name__} {expr!r}")
    return Encoding.CATEGORICAL


_PRIMITIVE_NAMES = ((TokensType, "tokens"), (IndicesType, "indices"), (LengthType, "length"))


def default_name(expr: RASPExpr) -> str:
    """The name of an expression that was not named: its kind (``"map"``, ``"select"``).

    >>> default_name(Map(lambda x: x, tokens)), default_name(indices)
    ('map', 'indices')
    """
    for cls, name in _PRIMITIVE_NAMES:
        if isinstance(expr, cls):
            return name
    return expr._default_prefix


DEFAULT_ANNOTATORS["encoding"] = default_encoding
DEFAULT_ANNOTATORS["name"] = default_name


def sop_not(sop: SOp) -> SOp:
    """``not x`` at every position (``~sop``).

    >>> from attnsim import rasp
    >>> rasp.evaluate(sop_not(rasp.tokens == "a"), ["a", "b"])
    [False, True]
    """
    _check_expr(sop, "sop_not", SOp)
    return ~sop


def selector_not(inner: Selector, simplify: bool = True) -> Selector:
    """``not`` of a selector: a Select with the negated predicate when ``inner`` is a
    Select and ``simplify``, else a ``SelectorNot``.

    >>> from attnsim import rasp
    >>> before = selector_not(rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.GEQ))
    >>> type(before).__name__, rasp.evaluate(rasp.SelectorWidth(before), "abc")
    ('Select', [0, 1, 2])
    """
    _check_expr(inner, "selector_not", Selector)
    if simplify and isinstance(inner, Select):
        pred = inner.predicate
        return Select(inner.keys, inner.queries, lambda k, q, p=pred: not p(k, q))
    return SelectorNot(inner)


def selector_and(fst: Selector, snd: Selector, simplify: bool = True) -> Selector:
    """Both selectors: one Select with the combined predicate when both are Selects on the
    same keys and queries (a ``Full`` side matches any) and ``simplify``, else a
    ``SelectorAnd``.

    >>> from attnsim import rasp
    >>> i, C = rasp.indices, rasp.Comparison
    >>> band = selector_and(rasp.Select(i, i, C.LEQ), rasp.Select(i, i, C.GEQ))
    >>> type(band).__name__, rasp.evaluate(rasp.SelectorWidth(band), "abc")
    ('Select', [1, 1, 1])
    """
    _check_expr(fst, "selector_and", Selector)
    _check_expr(snd, "selector_and", Selector)
    if simplify and isinstance(fst, Select) and isinstance(snd, Select):
        merged = _merge_selects(fst, snd, lambda a, b: a and b)
        if merged is not None:
            return merged
    return SelectorAnd(fst, snd)


def selector_or(fst: Selector, snd: Selector, simplify: bool = True) -> Selector:
    """Either selector: one Select with the combined predicate when both are Selects on the
    same keys and queries (a ``Full`` side matches any) and ``simplify``, else a
    ``SelectorOr``.

    >>> from attnsim import rasp
    >>> i, C = rasp.indices, rasp.Comparison
    >>> ends = selector_or(rasp.Select(i, i, C.LT), rasp.Select(i, i, C.GT))
    >>> rasp.evaluate(rasp.SelectorWidth(ends), "abc")
    [2, 2, 2]
    """
    _check_expr(fst, "selector_or", Selector)
    _check_expr(snd, "selector_or", Selector)
    if simplify and isinstance(fst, Select) and isinstance(snd, Select):
        merged = _merge_selects(fst, snd, lambda a, b: a or b)
        if merged is not None:
            return merged
    return SelectorOr(fst, snd)


def _merge_selects(fst: Select, snd: Select, combine: Callable) -> Select | None:
    """One Select equal to ``combine(fst, snd)``, or None when their inputs differ.

    A ``Full`` key (or query) side holds one value everywhere: it is folded into that
    side's predicate, so the other Select's S-op serves for both.
    """
    preds = [fst.predicate, snd.predicate]
    keys: SOp | None = None
    queries: SOp | None = None
    for i, (this, other) in enumerate(((fst, snd), (snd, fst))):
        if isinstance(this.keys, Full):
            keys = other.keys
            preds[i] = lambda k, q, p=preds[i], c=this.keys.fill: p(c, q)
        if isinstance(this.queries, Full):
            queries = other.queries
            preds[i] = lambda k, q, p=preds[i], c=this.queries.fill: p(k, c)
    if fst.keys is snd.keys:
        keys = fst.keys
    if fst.queries is snd.queries:
        queries = fst.queries
    if keys is None or queries is None:
        return None
    p0, p1 = preds
    return Select(keys, queries, lambda k, q: combine(p0(k, q), p1(k, q)))


# --------------------------------------------------------------------------------------
# Named elementwise maps (the compiler knows how to realise them)
# --------------------------------------------------------------------------------------


def _named_map(sop: SOp, kind: str, py: Callable, np_fn: Callable) -> SOp:
    _check_expr(sop, kind, SOp)
    out = Map(py, sop, simplify=False)
    out._op = ElementwiseOp(kind, (), np_fn)
    return numerical(out)


def exp(sop: SOp) -> SOp:
    """e**x, elementwise (numerical)."""
    return _named_map(sop, "exp", math.exp, np.exp)


def log(sop: SOp) -> SOp:
    """The natural logarithm, elementwise (numerical)."""
    return _named_map(sop, "log", math.log, np.log)


def sqrt(sop: SOp) -> SOp:
    """The square root, elementwise (numerical)."""
    return _named_map(sop, "sqrt", math.sqrt, np.sqrt)


def reciprocal(sop: SOp) -> SOp:
    """1/x, elementwise (numerical)."""
    return _named_map(sop, "reciprocal", lambda x: 1.0 / x, lambda x: 1.0 / x)


def relu(sop: SOp) -> SOp:
    """max(x, 0), elementwise (numerical)."""
    return _named_map(sop, "relu", lambda x: x if x > 0 else 0.0, lambda x: np.maximum(x, 0.0))


def rsqrt(sop: SOp) -> SOp:
    """1/sqrt(x), elementwise (numerical)."""
    return _named_map(sop, "rsqrt", lambda x: 1.0 / math.sqrt(x), lambda x: 1.0 / np.sqrt(x))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu(x):
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def gelu(sop: SOp) -> SOp:
    """The Gaussian error linear unit x * Phi(x), elementwise (numerical)."""
    return _named_map(sop, "gelu", _gelu, lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))))


def gelu_tanh(sop: SOp) -> SOp:
    """GELU's tanh approximation (torch's approximate="tanh"), elementwise (numerical)."""
    return _named_map(
        sop,
        "gelu_tanh",
        _gelu_tanh,
        lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))),
    )
