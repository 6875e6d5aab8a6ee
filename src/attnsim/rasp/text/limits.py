"""Resource limits of the textual RASP runtime: a step budget and a size limit on integers.

RASP files may come from anyone, so a run is bounded. A *step* is one statement or one
expression evaluated, one item of a list, dict or string the program builds, and ``n * n``
for applying an S-op or selector to an input of length ``n``; a run that needs more than
``max_steps`` steps stops with :class:`LimitError`. Building anything costs steps in
proportion to its size, so the memory a run can use is bounded by its budget too. Integers
are exact in RASP: one with more than ``max_value_digits`` decimal digits is refused before
it is computed (``9 ^ 99999999`` would take minutes and hundreds of megabytes).

The defaults run every program of the test corpus and the examples with a wide margin;
``attnsim rasp --max-steps N --max-value-digits D`` (or ``Runtime(limits=Limits(...))``)
raises them.

>>> budget = Budget(Limits(max_steps=10))
>>> budget.charge(8, "building a list")
>>> try:
...     budget.charge(5, "building a list of 5 items")
... except LimitError as exc:
...     print(exc)
building a list of 5 items takes more steps than the 2 left of the budget (10); raise it \
with --max-steps (Limits(max_steps=...)) or make the program do less work
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Limits", "Budget", "LimitError", "active", "current", "check_int", "pow_digits"]

_LOG10_2 = math.log10(2)


class LimitError(ValueError):
    """A run went over its step budget or built an integer over the digit limit."""


@dataclass(frozen=True)
class Limits:
    """How much work and how large integers one run may use.

    Args:
        max_steps: the step budget of one run (statements, expressions, items built).
        max_value_digits: the most decimal digits of an integer (Python's own limit for
            printing integers is 4300 digits).
        max_output_chars: the most characters one top-level statement may print (a ``for``
            loop is one statement, its body's prints included); the output is cut there
            and the run stops with an error.
    """

    max_steps: int = 10_000_000  # seconds of work; the test corpus needs ~1,000 per file
    max_value_digits: int = 4300  # Python prints integers up to 4300 digits by default
    max_output_chars: int = 200_000  # what one statement may print (a loop is one statement)

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_value_digits", "max_output_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"{name} must be a positive integer, got {value!r}; "
                    f"pass e.g. {name}={getattr(Limits, name)}"
                )


class Budget:
    """The steps one run has used, against its :class:`Limits`."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.used = 0

    def charge(self, steps: int, what: str | None = None) -> None:
        """Counts ``steps`` more steps; raises LimitError when the budget would be exceeded.

        Args:
            steps: how many.
            what: the work they pay for, named in the error (None: one ordinary step).
        """
        if self.used + steps > self.limits.max_steps:
            total = self.limits.max_steps
            if what is None:
                head = f"the run used up its budget of {total} steps (statements and "
                head += "expressions evaluated, items built)"
            else:
                left = max(0, total - self.used)
                head = f"{what} takes more steps than the {left} left of the budget ({total})"
            raise LimitError(
                f"{head}; raise it with --max-steps (Limits(max_steps=...)) or make the "
                f"program do less work"
            )
        self.used += steps


_CURRENT: contextvars.ContextVar[Budget | None] = contextvars.ContextVar(
    "attnsim_rasp_budget", default=None
)


def current() -> Limits:
    """The limits of the run in progress (the defaults outside a run)."""
    budget = _CURRENT.get()
    return Limits() if budget is None else budget.limits


def charge(steps: int, what: str | None = None) -> None:
    """Charges the run in progress (nothing outside a run)."""
    budget = _CURRENT.get()
    if budget is not None:
        budget.charge(steps, what)


@contextlib.contextmanager
def active(budget: Budget) -> Iterator[Budget]:
    """Makes ``budget`` the one operations charge while the block runs."""
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


def _too_many_digits(digits: float, what: str) -> LimitError:
    limit = current().max_value_digits
    return LimitError(
        f"{what} would have about {digits:.0f} digits, more than the limit of {limit}; "
        f"raise it with --max-value-digits (Limits(max_value_digits=...)) if you need it"
    )


def check_int(value: object, what: str = "the result") -> None:
    """Raises LimitError when ``value`` is an int with more digits than the limit allows.

    >>> check_int(10**100)
    >>> check_int(10**5000)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    attnsim.rasp.text.limits.LimitError: the result would have about 5001 digits, ...
    """
    if isinstance(value, int) and not isinstance(value, bool):
        digits = value.bit_length() * _LOG10_2
        if digits > current().max_value_digits:
            raise _too_many_digits(digits + 1, what)


def pow_digits(base: object, exponent: object) -> None:
    """Refuses ``base ^ exponent`` of integers before computing it when it would be too long."""
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (base, exponent)):
        return
    if exponent <= 1 or abs(base) <= 1:  # type: ignore[operator]
        return
    digits = exponent * math.log10(abs(base))  # type: ignore[operator, arg-type]
    if digits > current().max_value_digits:
        raise _too_many_digits(digits, f"{base} ^ {exponent}")


def mul_digits(a: object, b: object) -> None:
    """Refuses ``a * b`` of integers before computing it when it would be too long."""
    if all(isinstance(x, int) and not isinstance(x, bool) for x in (a, b)):
        digits = (a.bit_length() + b.bit_length() - 1) * _LOG10_2  # type: ignore[union-attr]
        if digits > current().max_value_digits:
            raise _too_many_digits(digits, "the product")
