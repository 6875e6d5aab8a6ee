"""How the compiler calls a program's own functions: as the interpreter calls them.

Value inference, lowering and the run-time guards all call a map's function on values from
its inputs' value sets; :func:`call_function` is that one call, and it refuses a result that
cannot be a RASP value (a list, a dict) with the map's name and the input, as the
interpreter does.

>>> from attnsim import rasp
>>> call_function(rasp.Map(lambda x: x + 1, rasp.numerical(rasp.tokens)), (2.0,))
3
>>> safe_map(rasp.Map(lambda x: 1 // x, rasp.tokens), [(0,), (1,)])  # 1 // 0 cannot occur
[1]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from attnsim.rasp import expr as E
from attnsim.rasp import interpret as I
from attnsim.values import brief, is_hashable, is_number

__all__ = ["UnhashableResultError", "as_read", "call_function", "is_number_or_bool", "safe_map"]


def is_number_or_bool(v: Any) -> bool:
    """A Python or numpy int or float, bools included (the interpreter reads True as 1.0)."""
    return is_number(v) or isinstance(v, bool)


def as_read(v: Any) -> Any:
    """A numerical S-op's value as the interpreter hands it to a function: integer-valued
    floats become ints (``1.0`` -> ``1``), as when it views a numerical array categorically."""
    return I._as_python_number(v) if is_number_or_bool(v) and not isinstance(v, bool) else v


def call_function(e: E.Map | E.SequenceMap, args: Sequence[Any]) -> Any:
    """``e``'s function on one combination of input values, as the interpreter computes it.

    ``args`` are values from the inputs' value sets (numerical inputs as floats). The
    interpreter runs a named op vectorised when every input is numerical (a categorical result
    is then read back from floats: integer-valued ones as ints, a test as bools); otherwise it
    calls the function on the inputs' categorical values, where a numerical input's
    integer-valued floats are ints. Raises what the function raises, and
    :class:`UnhashableResultError` (a TypeError) for a result that cannot be a RASP value.
    """
    out = _call_function(e, args)
    if not is_hashable(out):  # the interpreter refuses it too: say which map and where
        raise UnhashableResultError(
            f"map {e.label!r} returns the {type(out).__name__} {brief(out)} for the input "
            f"{_args_text(args)}; RASP values must be hashable (they are looked up in "
            "tables): return a tuple instead of a list (or another hashable value)"
        )
    return out


class UnhashableResultError(TypeError):
    """A map returned a value that cannot be a RASP value (a list, a dict, an array)."""


def _args_text(args: Sequence[Any]) -> str:
    if len(args) == 1:
        return f"value {brief(args[0])}"
    return "values (" + ", ".join(brief(a) for a in args) + ")"


def _call_function(e: E.Map | E.SequenceMap, args: Sequence[Any]) -> Any:
    inputs = [e.inner] if isinstance(e, E.Map) else list(e.sops)
    numerical = [E.is_numerical(s) for s in inputs]
    op = e._op
    if all(numerical) and op is not None and op.numpy_fn is not None and not E.is_numerical(e):
        with np.errstate(all="ignore"):
            out = np.asarray(op.numpy_fn(*(np.asarray([float(a)]) for a in args)))
        if out.dtype == bool:
            return bool(out.reshape(-1)[0])
        if out.dtype != object:
            return I._as_python_number(float(out.reshape(-1)[0]))
        return out.reshape(-1)[0]
    return e.f(*(as_read(a) if n else a for a, n in zip(args, numerical)))


def safe_map(e: E.Map | E.SequenceMap, arg_tuples) -> list:
    out = []
    for args in arg_tuples:
        if any(a is None for a in args):
            continue
        try:
            out.append(call_function(e, args))
        except UnhashableResultError:
            raise
        except Exception:  # a value the function rejects cannot occur at run time
            continue
    return out
