"""Parity and k-PARITY (sparse parity) as one-layer, one-head hard-attention programs.

k-PARITY over a subset ``S`` of positions (``|S| = k``) outputs ``xor_{i in S} x_i``. The
subset is an input channel: every token is a pair ``(bit, in_S)``, for example ``(1, True)``
for a 1 inside S (use :func:`encode_subset` to build them). One head selects every key
and sums ``bit * in_S`` (a lookup on the four token values); the MLP takes the count mod 2.
Plain parity sums the bare bits themselves, and :func:`fixed_subset_parity` hard-codes S in
the selector instead. Every program writes the answer at every position.

Compiled with a fixed input length (``fixed_length=True``) the sums are means times a known
count: :func:`parity` and :func:`fixed_subset_parity` are one layer (the head, then the MLP
for ``mod 2``), :func:`k_parity` two (an MLP turns the pair tokens into ``bit * in_S``
before the head). With a variable length the head's count is a second head (the selector
width) and a product.

``rasp.evaluate`` reads a list whose first element is a tuple as a batch, so evaluate pair
tokens as a batch (a list of sequences):

>>> from attnsim import rasp
>>> rasp.evaluate(k_parity(), [encode_subset([1, 1, 0, 1], {0, 3})])
[[0, 0, 0, 0]]
>>> rasp.evaluate(parity(), [1, 1, 0, 1])
[1, 1, 1, 1]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from attnsim import rasp
from attnsim.rasp import gathers
from attnsim.values import is_int

__all__ = [
    "parity",
    "k_parity",
    "fixed_subset_parity",
    "encode_subset",
    "parity_reference",
]


def _is_one(bit: object) -> bool:
    return bit is True or (not isinstance(bit, bool) and bit == 1)


def _count_mod2(selector: rasp.Selector, ones: rasp.SOp, name: str) -> rasp.SOp:
    count = rasp.SumAggregate(selector, ones)
    return rasp.categorical(rasp.Map(lambda v: int(round(v)) % 2, count)).named(name)


def parity() -> rasp.SOp:
    """The parity of all bits: tokens are 0/1 (ints or bools). Cost: 1 layer, 1 head.

    The head sums the tokens themselves (a 0/1 token is its own count), so a compiled model
    needs no MLP before the head; with a fixed input length the sum is the mean times that
    length and the model is one layer (attention, then the MLP for ``mod 2``).

    Returns:
        A categorical S-op: the parity (0 or 1) at every position.

    >>> from attnsim import rasp
    >>> rasp.evaluate(parity(), [1, 0, 1, 1])
    [1, 1, 1, 1]
    """
    return _count_mod2(gathers.select_all(), rasp.tokens, "parity")


def k_parity() -> rasp.SOp:
    """Parity of the bits marked by the input channel: tokens are pairs ``(bit, in_S)``.

    Cost: 1 layer, 1 head (the selector does not depend on the tokens).

    Returns:
        A categorical S-op: ``xor`` of the bits with ``in_S`` true, at every position.

    >>> from attnsim import rasp
    >>> rasp.evaluate(k_parity(), [[(1, True), (1, False), (0, True)]])  # a batch of one
    [[1, 1, 1]]
    """
    ones = rasp.numerical(
        rasp.Map(lambda t: 1.0 if _is_one(t[0]) and bool(t[1]) else 0.0, rasp.tokens)
    )
    return _count_mod2(gathers.select_all(), ones, "k_parity")


def fixed_subset_parity(subset: Iterable[int]) -> rasp.SOp:
    """Parity of the bits at the positions in ``subset``, fixed when the program is built.

    The selector keeps only keys in the subset (an index-only predicate): 1 layer, 1 head.

    Args:
        subset: non-negative positions (positions past the input's end are ignored).

    Returns:
        A categorical S-op: the parity at every position.

    Raises:
        TypeError, ValueError: a position is not a non-negative int.

    >>> from attnsim import rasp
    >>> rasp.evaluate(fixed_subset_parity([0, 2]), [1, 1, 1, 0])
    [0, 0, 0, 0]
    """
    members = frozenset(_positions(subset))
    chosen = gathers.select_keys(lambda key: key in members)
    return _count_mod2(chosen, rasp.tokens, f"parity_of_{sorted(members)}")


def _positions(subset: Iterable[int]) -> list[int]:
    out = []
    for p in subset:
        if not is_int(p):
            raise TypeError(f"subset positions must be ints, got {type(p).__name__} {p!r}")
        if p < 0:
            raise ValueError(f"subset positions must be >= 0, got {p}")
        out.append(int(p))
    return out


def encode_subset(bits: Sequence[int], subset: Iterable[int]) -> list[tuple[int, bool]]:
    """The k-PARITY tokens: ``(bit, i in subset)`` for every position i.

    Args:
        bits: 0/1 values.
        subset: positions of S.

    Returns:
        One ``(int, bool)`` pair per bit.

    Raises:
        ValueError: a bit is not 0/1 or a position is outside the sequence.
        TypeError: a position is not an int.

    >>> encode_subset([1, 0], [1])
    [(1, False), (0, True)]
    """
    members = set(_positions(subset))
    if any(p >= len(bits) for p in members):
        raise ValueError(f"subset {sorted(members)} has positions past the {len(bits)} bits")
    if any(b not in (0, 1) for b in bits):
        raise ValueError(f"bits must be 0 or 1, got {list(bits)}")
    return [(int(b), i in members) for i, b in enumerate(bits)]


def parity_reference(bits: Sequence[int], subset: Iterable[int] | None = None) -> int:
    """Plain-Python (sparse) parity: the xor of ``bits`` over ``subset`` (default: all).

    Args:
        bits: 0/1 values.
        subset: positions, or None for every position.

    Returns:
        0 or 1.

    >>> parity_reference([1, 1, 0, 1], [0, 3]), parity_reference([1, 1, 0, 1])
    (0, 1)
    """
    chosen = range(len(bits)) if subset is None else subset
    return sum(int(bits[i]) for i in chosen) % 2
