"""The vocabulary a model is compiled for: checked once, before value inference."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from attnsim.values import as_token, distinct

__all__ = ["check_vocab"]


def check_vocab(vocab: Any) -> tuple | None:
    """The vocabulary as a tuple of distinct tokens, refusing what no model can encode.

    Tokens must be hashable (they are looked up), finite where they are numbers (a NaN never
    equals itself) and not None (RASP's "no value": the result of an empty categorical
    Aggregate). A string stands for its characters; numpy scalars become Python values.
    Tokens are told apart by :func:`attnsim.values.value_key`: ``[0.0, -0.0]`` and
    ``[1, True, 1.0]`` are vocabularies of two and three tokens.

    >>> check_vocab("aba")
    ('a', 'b')
    >>> check_vocab([1, 2.5, (0, True), True, 1])
    (1, 2.5, (0, True), True)

    Raises:
        TypeError: ``vocab`` is not a collection of tokens, or a token is unhashable.
        ValueError: ``vocab`` is empty, or holds None or a non-finite number.
    """
    if vocab is None:
        return None
    if isinstance(vocab, (bytes, bytearray)) or not isinstance(vocab, Iterable):
        raise TypeError(
            f"vocab must be a collection of tokens (a list, a tuple, a set or a string of "
            f"characters), or None for real-valued tokens; got {type(vocab).__name__} {vocab!r}"
        )
    tokens = [as_token(v) for v in vocab]
    if not tokens:
        raise ValueError(
            "vocab is empty; list the tokens the model must accept, or pass vocab=None for "
            "real-valued tokens (with rasp.numerical(rasp.tokens))"
        )
    for i, v in enumerate(tokens):
        try:
            hash(v)
        except TypeError:
            raise TypeError(
                f"vocab tokens must be hashable (str, int, float, bool or a tuple of those); "
                f"token {i} is the {type(v).__name__} {v!r}: use a tuple instead"
            ) from None
        if v is None:
            raise ValueError(
                "vocab contains None, which RASP reserves for 'no value' (what an empty "
                "categorical Aggregate gives), so a None token could not be told apart from "
                "it; use another token for it, such as '<none>'"
            )
        if not _finite_value(v):
            raise ValueError(
                f"vocab token {i} is {v!r}, which is not a finite value; tokens that are "
                "numbers must be finite (use a large number or a string in its place)"
            )
    return tuple(distinct(tokens))


def _finite_value(v: Any) -> bool:
    """Whether a value holds no NaN or infinity (inside tuples too)."""
    if isinstance(v, (float, np.floating)):
        return math.isfinite(v)
    if isinstance(v, tuple):
        return all(_finite_value(x) for x in v)
    return True
