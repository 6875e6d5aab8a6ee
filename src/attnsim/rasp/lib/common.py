"""Helpers shared by the library modules: argument checks and numerical-aware aggregates.

>>> from attnsim.rasp import expr as rasp
>>> rasp.is_numerical(aggregate(rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.EQ),
...                             rasp.numerical(rasp.tokens)))
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# the language, under the module name tracr programs use for it
from attnsim.rasp import expr as rasp

__all__ = ["aggregate", "check_pairs", "check_sop", "indicator"]


def aggregate(selector: rasp.Selector, sop: rasp.SOp, default: Any = None) -> rasp.SOp:
    """An Aggregate that is numerical when the values are (a mean of one selected number)."""
    out = rasp.Aggregate(selector, sop, default=default)
    return rasp.numerical(out) if rasp.is_numerical(sop) else out


def indicator(sop: rasp.SOp, test: Callable[[Any], bool], name: str) -> rasp.SOp:
    """A numerical 0/1 S-op: 1 where ``test`` holds."""
    return rasp.numerical(rasp.Map(lambda x: 1 if test(x) else 0, sop)).named(name)


def check_sop(obj: Any, what: str) -> None:
    if not isinstance(obj, rasp.SOp):
        raise TypeError(
            f"{what} expects a RASP S-op (rasp.tokens, rasp.indices, a Map, ...), got "
            f"{type(obj).__name__} {obj!r}; wrap a constant with rasp.Full(value)"
        )


def check_pairs(pairs: Sequence[str], what: str) -> None:
    if isinstance(pairs, str) or len(pairs) == 0:
        raise ValueError(
            f"{what} expects a list of bracket pairs such as ['()', '{{}}'], got {pairs!r}"
        )
    for pair in pairs:
        if not isinstance(pair, str) or len(pair) != 2 or pair[0] == pair[1]:
            raise ValueError(
                f"{what}: each bracket pair must be a string of two different characters "
                f"(opener, closer) such as '()', got {pair!r}"
            )
    tokens = [c for pair in pairs for c in pair]
    if len(set(tokens)) != len(tokens):
        raise ValueError(f"{what}: a bracket character appears in two pairs: {list(pairs)!r}")
