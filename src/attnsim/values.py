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
    "check_bool",
    "check_real",
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


def check_bool(value: Any, name: str) -> bool:
    """``value`` as a bool, when it is one (a Python or numpy bool); else a TypeError.

    The one check of every flag of the API: a string such as ``"False"``, a number or None
    is refused rather than read by its truth value.

    Args:
        value: the flag as given.
        name: the option's name, for the message.

    Returns:
        ``value`` as a Python bool.

    Raises:
        TypeError: ``value`` is not a bool.

    >>> check_bool(np.bool_(True), "causal")
    True
    >>> check_bool("False", "causal")
    Traceback (most recent call last):
    ...
    TypeError: causal must be True or False, got str 'False'
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")


def _complex_entry(x: Any) -> Any:
    """A complex entry of ``x`` (a number, a numpy array, a torch tensor, nested lists),
    or None when it holds none."""
    is_complex = getattr(x, "is_complex", None)  # a torch tensor (duck-typed: no torch here)
    if callable(is_complex) and hasattr(x, "numel"):
        if not is_complex():
            return None
        try:
            return _shown(x.detach().cpu().numpy())
        except (RuntimeError, NotImplementedError, TypeError):  # no data to show (meta)
            return f"dtype {x.dtype}"
    if isinstance(x, (complex, np.complexfloating)):
        return complex(x)
    if isinstance(x, (list, tuple)):
        try:
            x = np.asarray(x)
        except (TypeError, ValueError):  # ragged: look inside, the caller says what else
            return next((c for c in map(_complex_entry, x) if c is not None), None)
    if isinstance(x, np.ndarray):
        if x.dtype.kind == "c":
            return _shown(x)
        if x.dtype == object:
            return next((c for c in map(_complex_entry, x.reshape(-1)) if c is not None), None)
    return None


def _shown(arr: np.ndarray) -> Any:
    """An entry of a complex array to show: one with an imaginary part if there is one."""
    flat = arr.reshape(-1)
    if not flat.size:
        return None  # no value to lose
    nonreal = np.flatnonzero(flat.imag)
    return complex(flat[nonreal[0]] if nonreal.size else flat[0])


def check_real(x: Any, what: str) -> None:
    """Refuses complex input (a number, a numpy array, a torch tensor or nested lists): a
    conversion to float64 would keep only its real part.

    Args:
        x: the input as given.
        what: what it is, for the message (``"X"``, ``"the weight in_proj_weight"``).

    Raises:
        TypeError: ``x`` holds a complex number (the message shows one).

    >>> check_real([[1.0, 2.0]], "m")
    >>> try:
    ...     check_real(np.array([1 + 2j]), "m")
    ... except TypeError as exc:
    ...     print(str(exc)[:40])
    m holds complex numbers (such as (1+2j))
    """
    c = _complex_entry(x)
    if c is not None:
        raise TypeError(
            f"{what} holds complex numbers (such as {c}); attnsim computes over the real "
            "numbers and a conversion would keep only the real parts: pass real values (a "
            "complex quantity as its real and imaginary parts, x.real and x.imag)"
        )


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
