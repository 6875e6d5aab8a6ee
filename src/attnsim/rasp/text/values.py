"""Values of the textual RASP runtime and how the original REPL shows them.

An S-op of the text language is a :class:`SeqVal`: the attnsim expression plus its value
type (``num``, ``bool``, ``str`` or ``any``) and a rule that recovers, position by position,
whether the original interpreter would hold an ``int`` or a ``float`` there (the original
keeps Python's types: a mean of several ints is a float, a single selected int stays an
int). The attnsim interpreter computes the values; :class:`Trace` adds the types back.

>>> from attnsim import rasp
>>> seq = SeqVal(rasp.indices, "num", const_rule(False))
>>> Trace([7, 8, 9]).typed(seq)
[0, 1, 2]
>>> format_sequence([0, 1.5, 2], type_name([0, 1.5, 2]))
'[0, 1.5, 2] (floats)'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnsim import rasp
from attnsim.rasp import interpret

__all__ = [
    "SeqVal",
    "SelVal",
    "Function",
    "Builtin",
    "Applied",
    "AppliedSelector",
    "Trace",
    "const_rule",
    "is_atom",
    "atom_vtype",
    "type_name",
    "small_str",
    "format_sequence",
    "format_example",
    "describe",
]

Rule = Callable[["Trace"], np.ndarray]


@dataclass(eq=False)
class SeqVal:
    """An S-op: the attnsim expression, its value type, and its int/float typing rule."""

    expr: rasp.SOp
    vtype: str  # "num" | "bool" | "str" | "any"
    rule: Rule | None = None  # -> bool [n]: True where the original holds a float


@dataclass(eq=False)
class SelVal:
    """A selector."""

    expr: rasp.Selector


@dataclass(eq=False)
class Function:
    """A function defined with ``def``: parameters, body statements, return expressions."""

    name: str
    params: list[str]
    body: list[Any]
    returns: Any
    env: Any
    creator: str
    source: Any

    def __str__(self) -> str:
        return f"{self.creator} function: {self.name}({', '.join(self.params)})"


@dataclass(eq=False)
class Builtin:
    """A function implemented by the runtime (e.g. ``selector_width``, ``abs``)."""

    name: str
    params: list[str]
    fn: Callable[..., Any]

    def __str__(self) -> str:
        return f"built-in function: {self.name}({', '.join(self.params)})"


@dataclass(eq=False)
class Applied:
    """A concrete sequence: an S-op applied to an input."""

    values: list
    input: Any
    type: str = field(default="")

    def __post_init__(self) -> None:
        if not self.type:
            self.type = type_name(self.values)

    def __str__(self) -> str:
        return format_sequence(self.values, self.type)


@dataclass(eq=False)
class AppliedSelector:
    """A concrete selector: ``matrix[query][key]`` on an input."""

    matrix: list[list[bool]]
    input: Any

    def __str__(self) -> str:
        return "\n".join(selector_lines(self.input, self.matrix))


def const_rule(is_float: bool) -> Rule:
    """A typing rule: every position holds an int (False) or a float (True)."""
    return lambda t: np.full(t.n, is_float, dtype=bool)


def is_atom(v: Any) -> bool:
    """True for the atoms of RASP: int, float, str, bool."""
    return isinstance(v, (int, float, str, bool)) and not isinstance(v, (np.ndarray,))


def atom_vtype(v: Any) -> str:
    """The value type of an atom: bool, num or str."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "num"
    if isinstance(v, str):
        return "str"
    return "any"


# a number with more digits than this is shown shortened, its digit count said
SHORT_DIGITS = 40


def short(v: Any, digits: int = SHORT_DIGITS) -> str:
    """An int (or its text) for a message: in full up to ``digits`` digits, else its first
    and last digits and how many there are, so a cut number never reads as another one.

    >>> short(12345)
    '12345'
    >>> short(10**400)
    '10000000000000000...00000 (401 digits)'
    """
    text = str(v)
    sign = "-" if text.startswith("-") else ""
    body = text[len(sign) :]
    if not body.isdigit() or len(body) <= digits:
        return text
    return f"{sign}{body[:17]}...{body[-5:]} ({len(body)} digits)"


def _short_items(v: Any, width: int = 40) -> str:
    """A list for a message: whole items only, as many as fit ``width`` characters."""
    parts: list[str] = []
    used = 1
    for x in v:
        item = short(x) if isinstance(x, int) and not isinstance(x, bool) else format_value(x)
        if len(item) > width:
            item = item[:width] + "..."
        if used + len(item) > width and parts:
            return "[" + ", ".join(parts) + f", ... ({len(v)} items)]"
        parts.append(item)
        used += len(item) + 2
    return "[" + ", ".join(parts) + "]"


def describe(v: Any) -> str:
    """A short description of a runtime value for error messages."""
    if isinstance(v, SeqVal):
        return f"the s-op {v.expr.label!r}"
    if isinstance(v, SelVal):
        return f"the selector {v.expr.label!r}"
    if isinstance(v, (Function, Builtin)):
        return f"the function {v.name!r}"
    if isinstance(v, Applied):
        return "an evaluated sequence"
    if isinstance(v, list):
        return f"the list {_short_items(v)}"
    if isinstance(v, dict):
        return "a dict"
    if isinstance(v, bool):
        return f"the bool {v}"
    if isinstance(v, str):
        shown = v if len(v) <= 60 else f"{v[:40]}...{v[-10:]}"
        return f'the string "{shown}"' + ("" if len(v) <= 60 else f" ({len(v)} characters)")
    if isinstance(v, (int, float)):
        return f"the number {short(v)}"
    return type(v).__name__


class Trace:
    """Evaluates S-ops on one input, sharing work, and recovers the original's value types.

    Args:
        xs: the input sequence (a list of tokens or a string).

    >>> from attnsim import rasp
    >>> t = Trace("ab")
    >>> t.objects(rasp.indices)
    [0, 1]
    """

    def __init__(self, xs: Any) -> None:
        row = list(xs)
        self.input = xs
        self.n = len(row)
        self._ev = interpret._Evaluator([row], causal=False)
        self._tags: dict[int, np.ndarray] = {}

    def raw(self, expr: rasp.RASPExpr) -> Any:
        return self._ev.eval(expr)

    def objects(self, expr: rasp.SOp) -> list:
        """The values of an S-op as Python objects (floats for numerical S-ops)."""
        v = self.raw(expr)
        if isinstance(v, np.ndarray):
            return [float(x) for x in v[0]]
        return [_py(x) for x in v.to_objects()[0]]

    def selector(self, expr: rasp.Selector) -> np.ndarray:
        """The selection matrix ``[query, key]``."""
        return np.asarray(self.raw(expr))[0]

    def numbers(self, v: Any) -> np.ndarray:
        if isinstance(v, SeqVal):
            return np.array([_as_float(x) for x in self.objects(v.expr)], dtype=float)
        return np.full(self.n, _as_float(v))

    def truthy(self, v: Any) -> np.ndarray:
        if isinstance(v, SeqVal):
            return np.array([bool(x) for x in self.objects(v.expr)], dtype=bool)
        return np.full(self.n, bool(v))

    def isfloat(self, v: Any) -> np.ndarray:
        """Where the original interpreter holds a float (bool array ``[n]``)."""
        if not isinstance(v, SeqVal):
            return np.full(self.n, isinstance(v, float))
        got = self._tags.get(id(v))
        if got is None:
            if v.vtype == "num" and v.rule is not None:
                got = np.asarray(v.rule(self), dtype=bool)
            elif v.vtype in ("bool", "str"):
                got = np.zeros(self.n, dtype=bool)
            else:
                got = np.array([isinstance(x, float) for x in self.objects(v.expr)], dtype=bool)
            self._tags[id(v)] = got
        return got

    def typed(self, v: SeqVal) -> list:
        """The values of ``v`` with the Python types the original interpreter gives them."""
        objs = self.objects(v.expr)
        if v.vtype == "num":
            return [_num(x, f) for x, f in zip(objs, self.isfloat(v).tolist())]
        if v.vtype == "bool":
            return [bool(x) for x in objs]
        return objs


def _py(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    return x


def _as_float(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def _num(x: Any, is_float: bool) -> Any:
    if isinstance(x, bool):
        x = int(x)
    if not isinstance(x, (int, float)):
        return x
    if is_float:
        return float(x)
    if isinstance(x, int):
        return x
    return int(x) if float(x).is_integer() and abs(x) < 2**53 else x


def type_name(values: list) -> str:
    """The original's name for a sequence's type: int, float, bool, string (or mixed).

    >>> type_name([1, 2]), type_name([1, 2.5]), type_name([True]), type_name(["a"])
    ('int', 'float', 'bool', 'string')
    """
    for t, name in ((str, "string"), (bool, "bool"), (int, "int"), (float, "float")):
        if all(isinstance(v, t) for v in values):
            return name
    if all(isinstance(v, (int, float)) for v in values):
        return "float"
    return "mixed"


def small_str(v: Any) -> str:
    """One value as the original prints it: floats to 3 places, bools as T/F.

    >>> small_str(1/3), small_str(True), small_str("a")
    ('0.333', 'T', 'a')
    """
    if isinstance(v, bool):
        return "T" if v else "F"
    if isinstance(v, float):
        return str(round(v, 3))
    return str(v)


def format_sequence(values: list, typename: str) -> str:
    """A sequence as the original prints it, e.g. ``[5]*3 (ints)``.

    >>> format_sequence([5, 5, 5], "int")
    '[5]*3 (ints)'
    """
    try:
        same = len(values) > 1 and len(set(values)) == 1
    except TypeError:
        same = False
    if same:
        body = "[" + small_str(values[0]) + "]*" + str(len(values))
    else:
        body = "[" + ", ".join(small_str(v) for v in values) + "]"
    return f"{body} ({typename}s)"


def format_example(example: Any) -> str:
    """An example input as the original prints it (strings in double quotes).

    >>> format_example("hello"), format_example([1, 2])
    ('"hello"', '[1, 2]')
    """
    if isinstance(example, str):
        return '"' + example + '"'
    return format_value(example)


def format_value(v: Any) -> str:
    """A list, dict or atom as Python shows it (S-ops by name)."""
    if isinstance(v, list):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{format_value(k)}: {format_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, SeqVal | SelVal):
        return v.expr.label
    if isinstance(v, Function | Builtin):
        return str(v)
    return str(v)


def selector_lines(example: Any, matrix: list[list[bool]], pref: str = "") -> list[str]:
    """A selection matrix as the original prints it (query rows, key columns)."""
    ex = list(example)
    lines = [" ".join([pref, "\t\t\t    ", " ".join(str(v) for v in ex)])]
    for v, row in zip(ex, matrix):
        cells = " ".join("1" if b else " " for b in row)
        lines.append(" ".join([pref, "\t\t\t", str(v), "|", cells]))
    return lines


def sequence_lines(example: Any, values: list, typename: str, pref: str = "") -> list[str]:
    """The ``full seq display on`` layout: the input above the output, aligned."""
    if len(values) > 0 and len(set(map(repr, values))) == 1:
        return [f"{format_sequence(values, typename)} [skipped full display: identical values]"]

    def clean(seq: list) -> list:
        if seq and isinstance(seq[0], bool):
            t = "T" if seq.count(True) <= seq.count(False) else ""
            f = "F" if seq.count(False) <= seq.count(True) else ""
            return [t if v else f for v in seq]
        return seq

    ex = [str(v) for v in clean(list(example))]
    out = [str(v) for v in clean(list(values))]
    width = max(len(v) for v in ex + out)
    pad = lambda seq: " ".join(" " * (width - len(v)) + v for v in seq)  # noqa: E731
    return [
        "",
        " ".join([pref, "\t\tinput:  ", pad(ex), "\t", f"({type_name(list(example))}s)"]),
        " ".join([pref, "\t\toutput: ", pad(out), "\t", f"({typename}s)"]),
    ]
