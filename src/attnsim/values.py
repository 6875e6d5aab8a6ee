"""Value identity: when two token or S-op values are the same, and what counts as a number.

The one leaf every layer may import (stdlib and numpy only). RASP compares values by type
and value (``1``, ``1.0`` and ``True`` are three different categorical values, as in the
interpreter), while arithmetic reads bools as 0 and 1.

>>> value_key(1) == value_key(1.0), value_key("a") == value_key("a")
(False, True)
>>> is_number(True), is_number(2.5), is_numeric(True), is_numeric("2")
(False, True, True, False)
>>> as_number(3.0), as_number(2.5)
(3, 2.5)
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

__all__ = [
    "as_number",
    "as_truth",
    "brief",
    "fits_float",
    "is_hashable",
    "is_int",
    "is_number",
    "is_numeric",
    "is_real",
    "value_key",
    "value_text",
]


def value_key(v: Any) -> tuple:
    """The identity of a categorical value: its type name and the value (``v`` hashable)."""
    return (type(v).__name__, v)


def value_text(v: Any) -> str:
    """A value as labels and messages show it (strings quoted, so ``'1'`` differs from 1).

    >>> value_text("1"), value_text(1)
    ("'1'", '1')
    """
    return repr(v) if isinstance(v, str) else str(v)


def is_hashable(v: Any) -> bool:
    """Whether ``v`` can be a token or a table key (a dict key, a set member).

    >>> is_hashable("a"), is_hashable((1, 2)), is_hashable([1])
    (True, True, False)
    """
    try:
        hash(v)
    except TypeError:
        return False
    return True


def is_number(v: Any) -> bool:
    """A Python or numpy int or float, bools excluded (a numeric token or table value).

    >>> is_number(np.float32(0.5)), is_number(True), is_number("1")
    (True, False, False)
    """
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def is_numeric(v: Any) -> bool:
    """A value a numerical S-op can hold: anything ``float`` accepts except text and None
    (bools count as 0 and 1, as in the interpreter)."""
    if v is None or isinstance(v, (str, bytes)):
        return False
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return True


def is_int(x: Any) -> bool:
    """An integral number that is not a bool (a size, a count, a JSON integer).

    >>> is_int(3), is_int(np.int64(3)), is_int(3.0), is_int(True)
    (True, True, False, False)
    """
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def is_real(x: Any) -> bool:
    """A real number that is not a bool (a JSON number, a tolerance).

    >>> is_real(1e-6), is_real(2), is_real(False), is_real("0.1")
    (True, True, False, False)
    """
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def as_number(x: float) -> Any:
    """``x`` as an int when it is integral (3.0 -> 3), else unchanged."""
    return int(x) if float(x).is_integer() else x


def brief(v: Any, limit: int = 60) -> str:
    """``repr(v)`` shortened for a message: a long int by its digit count, other long
    texts cut in the middle.

    >>> brief(10**400), brief("a" * 100, limit=20)
    ('an int of 401 digits (1000...0000)', "'aaaaaaa...aaaaaaa'")
    """
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10**limit:
        digits = str(abs(v))
        sign = "-" if v < 0 else ""
        return f"an int of {len(digits)} digits ({sign}{digits[:4]}...{digits[-4:]})"
    text = repr(v)
    if len(text) <= limit:
        return text
    half = (limit - 3) // 2
    return text[:half] + "..." + text[len(text) - half :]


def fits_float(v: Any) -> bool:
    """Whether a number converts to a float without overflowing (``float(10**400)`` does
    not); True for anything that is not an int (those are checked elsewhere).

    >>> fits_float(10**300), fits_float(-(10**400)), fits_float(1e308), fits_float("x")
    (True, False, True, True)
    """
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        try:
            float(v)
        except OverflowError:
            return False
    return True


def as_truth(v: Any) -> bool:
    """A predicate's result as a bool (True/False, numpy bools, numbers, anything with one
    truth value).

    Raises:
        TypeError: ``v`` has no single truth value (a numpy array of several entries).

    >>> as_truth(np.bool_(True)), as_truth(0)
    (True, False)
    >>> try:
    ...     as_truth(np.array([1, 2]))
    ... except TypeError as exc:
    ...     print(str(exc)[:66])
    a predicate must return True or False, got the ndarray array([1, 2
    """
    try:
        return bool(v)
    except Exception:
        raise TypeError(
            f"a predicate must return True or False, got the {type(v).__name__} {brief(v)}, "
            "which has no single truth value; reduce an array to one bool with .all() or "
            ".any()"
        ) from None
