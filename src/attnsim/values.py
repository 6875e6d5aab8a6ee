"""Value identity: when two token or S-op values are the same, and what counts as a number.

The one leaf every layer may import (stdlib and numpy only). The rule of identity, used by
the interpreter, value inference, the compiler's tables and a compiled model's encoding:

- two values are the same RASP value when they have the same type and the same value:
  ``1``, ``1.0`` and ``True`` are three values (Python calls them equal and hashes them
  alike, but a function can tell them apart);
- floats by value and sign: ``0.0`` and ``-0.0`` are two values (``math.copysign`` and
  ``math.atan2`` tell them apart), and all NaNs of one type are one value;
- tuples (and frozensets) element by element by the same rule: ``(1, 2)`` is not ``(True, 2)``;
- a numpy scalar enters as the Python value it holds (``np.int64(3)`` is the token ``3``, as
  the elements of a numpy array of tokens are): :func:`as_token` at every entry point.

A token that Python calls equal to a vocabulary value but that is another value by this
rule (``3.0`` for a vocabulary ``[1, 3]``) is refused, naming both (:func:`lookalike`).
Arithmetic reads bools as 0 and 1.

>>> value_key(1) == value_key(1.0), value_key("a") == value_key("a")
(False, True)
>>> value_key(0.0) == value_key(-0.0), value_key(float("nan")) == value_key(float("nan"))
(False, True)
>>> is_number(True), is_number(2.5), is_numeric(True), is_numeric("2")
(False, True, True, False)
>>> as_number(3.0), as_number(2.5)
(3, 2.5)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "as_number",
    "as_token",
    "as_truth",
    "brief",
    "check_bool",
    "check_real",
    "distinct",
    "distinct_floats",
    "distinct_numbers",
    "fits_float",
    "is_hashable",
    "is_int",
    "is_number",
    "is_numeric",
    "is_real",
    "lookalike",
    "not_in_vocab_message",
    "one_orderable_kind",
    "value_key",
    "value_text",
]

_FLOATS = (float, np.floating)
_COMPLEX = (complex, np.complexfloating)


def value_key(v: Any) -> tuple:
    """The identity of a value (``v`` hashable): equal keys exactly for the same RASP value.

    The type and the value; a float's sign and NaN-ness too, and tuples element by element
    (see the module's rule).

    >>> value_key(True) == value_key(1), value_key((0.0, 1)) == value_key((-0.0, 1))
    (False, False)
    """
    t = type(v)
    if t is str or t is int or t is bool:  # the common cases first: one tuple, no test
        return (t, v)
    if isinstance(v, _FLOATS):
        if v != v:
            return (t, "nan")  # every NaN of a type is one value (NaN != NaN in Python)
        if v == 0:
            return (t, v, math.copysign(1.0, v))  # 0.0 and -0.0 are two values
        return (t, v)
    if isinstance(v, _COMPLEX):
        return (t, value_key(v.real), value_key(v.imag))
    if isinstance(v, tuple):
        return (t, tuple(value_key(x) for x in v))
    if isinstance(v, frozenset):
        return (t, frozenset(value_key(x) for x in v))
    return (t, v)


def as_token(v: Any) -> Any:
    """A token as RASP reads it: a numpy scalar becomes the Python value it holds (inside a
    tuple too); any other value is returned unchanged.

    >>> as_token(np.int64(3)), as_token((np.float32(0.5), "a")), as_token("b")
    (3, (0.5, 'a'), 'b')
    """
    if isinstance(v, np.generic):
        return v.item()
    if type(v) is tuple and any(isinstance(x, (np.generic, tuple)) for x in v):
        return tuple(as_token(x) for x in v)
    return v


def distinct(values: Iterable[Any]) -> list:
    """The distinct values (hashable), first-seen order, by :func:`value_key`.

    >>> distinct([1, 1.0, True, 1, 0.0, -0.0, "a"])
    [1, 1.0, True, 0.0, -0.0, 'a']
    """
    seen: set[tuple] = set()
    out = []
    for v in values:
        k = value_key(v)
        if k not in seen:
            seen.add(k)
            out.append(v)
    return out


def distinct_numbers(values: Iterable[Any]) -> tuple[float, ...]:
    """The distinct numbers among ``values`` as floats, first-seen order: the value set of a
    numerical S-op. Its values are real numbers (held as float64, and both zeros read as the
    int 0 by a function), so ``1``, ``1.0`` and ``True`` are one number, ``-0.0`` is ``0.0``.

    >>> distinct_numbers([1, True, 1.0, -0.0, 0.0, 2.5])
    (1.0, 0.0, 2.5)
    """
    seen: set[Any] = set()
    out = []
    for v in values:
        x = float(v) + 0.0  # -0.0 + 0.0 is 0.0
        k = "nan" if x != x else x  # one NaN
        if k not in seen:
            seen.add(k)
            out.append(x)
    return tuple(out)


def distinct_floats(arr: np.ndarray) -> tuple[float, ...]:
    """:func:`distinct_numbers` of a float64 array, vectorised (one sort): the same numbers
    in the same first-seen order.

    >>> distinct_floats(np.array([2.0, -0.0, 2.0, 0.0, np.nan, 1.5, np.nan]))
    (2.0, 0.0, nan, 1.5)
    """
    x = np.asarray(arr, dtype=np.float64).reshape(-1) + 0.0  # -0.0 + 0.0 is 0.0
    _, first = np.unique(x, return_index=True, equal_nan=True)  # one NaN
    return tuple(x[np.sort(first)].tolist())


def one_orderable_kind(values: list) -> bool:
    """All numbers (none NaN) or all strings.

    >>> one_orderable_kind([1, 2.5]), one_orderable_kind(["a", 1]), one_orderable_kind([np.nan])
    (True, False, False)
    """
    kinds = set(map(type, values))
    if all(issubclass(k, (int, float, np.integer, np.floating)) for k in kinds):
        return not bool(np.isnan(np.asarray(values, dtype=np.float64)).any())
    return all(issubclass(k, str) for k in kinds)


def lookalike(v: Any, values: Iterable[Any]) -> Any:
    """The first of ``values`` that Python calls equal to ``v`` but that is another value by
    :func:`value_key` (``3`` for ``3.0``), or None when there is none.

    What an error shows for a token that is not in a vocabulary but looks as if it were.

    >>> lookalike(3.0, [1, 3]), lookalike(-0.0, [0.0]), lookalike(2, [1, 3])
    (3, 0.0, None)
    """
    key = value_key(v)
    for x in values:
        try:
            same = bool(x == v)
        except Exception:  # a value whose == fails or is not a truth value: not equal
            continue
        if same and value_key(x) != key:
            return x
    return None


def value_text(v: Any) -> str:
    """A value as labels and messages show it (strings quoted, so ``'1'`` differs from 1, and
    numpy scalars by their repr, so ``np.float64(1.0)`` differs from 1.0).

    >>> value_text("1"), value_text(1), value_text(-0.0)
    ("'1'", '1', '-0.0')
    """
    return repr(v) if isinstance(v, (str, np.generic)) else str(v)


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


def not_in_vocab_message(token: Any, where: str, vocab: Sequence[Any], advice: str) -> str:
    """The error for a token outside ``vocab``: it names the vocabulary value that the token
    looks like (equal in Python, another value by :func:`value_key`), if there is one.

    Args:
        token: the token (already :func:`as_token`).
        where: where it stands ("position 2 (row 0)").
        vocab: the vocabulary, in the order to show it.
        advice: what to do when no vocabulary value looks like the token.

    Returns:
        The message.

    >>> print(not_in_vocab_message(3.0, "position 0", [1, 3], "use declared tokens"))
    ... # doctest: +NORMALIZE_WHITESPACE
    token 3.0 (float) at position 0 is not the vocabulary token 3 (int), though Python calls
    them equal: RASP tells values apart by type and value (and a float by its sign), since
    a function can answer differently for them; pass 3, or add 3.0 to the vocabulary
    """
    like = lookalike(token, vocab)
    if like is None:
        return f"token {token!r} at {where} is not in the vocabulary {list(vocab)}; {advice}"
    return (
        f"token {token!r} ({type(token).__name__}) at {where} is not the vocabulary token "
        f"{like!r} ({type(like).__name__}), though Python calls them equal: RASP tells values "
        "apart by type and value (and a float by its sign), since a function can answer "
        f"differently for them; pass {like!r}, or add {token!r} to the vocabulary"
    )


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
