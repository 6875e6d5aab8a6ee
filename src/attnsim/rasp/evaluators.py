"""tracr's evaluator interface over the reference interpreter: one sequence at a time.

tracr evaluates ``program(xs)`` or ``DefaultRASPEvaluator().evaluate(program, xs)`` on one
sequence; :func:`attnsim.rasp.evaluate` also takes a batch (a list of lists), which would read
a sequence of tuple tokens as a batch. These read ``xs`` as one sequence, always.

>>> from attnsim import rasp
>>> rasp.DefaultRASPEvaluator().evaluate(rasp.tokens, [(1, 2), (3, 4)])
[(1, 2), (3, 4)]
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import numpy as np

from attnsim.rasp import expr as E
from attnsim.rasp.interpret import evaluate, evaluate_batch

__all__ = ["evaluate_one", "RASPEvaluator", "DefaultRASPEvaluator"]


def evaluate_one(program: E.RASPExpr, xs: Sequence[Any], *, causal: bool = False) -> list:
    """Evaluates ``program`` on exactly one sequence ``xs``, as tracr's evaluator does: a
    sequence of tuples (or lists) is one sequence of compound tokens, never a batch.

    Args:
        program: an S-op or a selector.
        xs: the tokens, one per position.
        causal: each query sees only keys at positions <= its own.

    Returns:
        One value per position (a selector: one boolean row per query).

    Raises:
        TypeError: ``program`` is not a RASP expression, or ``xs`` is not a sequence.

    >>> from attnsim import rasp
    >>> evaluate_one(rasp.Map(lambda t: t[0] + t[1], rasp.tokens), [(1, 2), (3, 4)])
    [3, 7]
    """
    if isinstance(xs, (str, bytes)):
        xs = list(xs)
    if isinstance(xs, np.ndarray) and xs.ndim == 1:
        xs = xs.tolist()
    if E.reads_channels(program) if isinstance(program, E.RASPExpr) else False:
        return evaluate(program, xs, causal=causal)
    if not isinstance(xs, Sequence):
        raise TypeError(
            f"evaluate expects a sequence of tokens, got {type(xs).__name__} {xs!r}; wrap one "
            "token as [token]"
        )
    return evaluate_batch(program, [list(xs)], causal=causal)[0]


class RASPEvaluator(abc.ABC):
    """What an evaluator of RASP provides (tracr's name): ``evaluate(expr, xs)``."""

    @abc.abstractmethod
    def evaluate(self, expr: E.RASPExpr, xs: Sequence[Any]) -> list:
        """Evaluates ``expr`` on the sequence ``xs``."""


class DefaultRASPEvaluator(RASPEvaluator):
    """tracr's default evaluator, answered by this interpreter: ``evaluate(expr, xs)`` on
    one sequence (see :func:`evaluate_one`).

    >>> from attnsim import rasp
    >>> DefaultRASPEvaluator().evaluate(rasp.indices + 1, ["a", "b"])
    [1, 2]
    """

    def evaluate(self, expr: E.RASPExpr, xs: Sequence[Any]) -> list:
        """Evaluates ``expr`` on the sequence ``xs``; see :func:`evaluate_one`."""
        return evaluate_one(expr, xs)


E.set_evaluator(evaluate_one)  # what expr(xs) calls
