"""Match2 (Sanford, Hsu and Telgarsky, 2023) as a one-layer, one-head hard-attention program.

For ``X`` in ``[M]^N``: ``Match2(X)_i = 1`` iff some position ``j`` has
``x_i + x_j = 0 (mod M)``. Conventions (the paper's program leaves them open or gets them
wrong, see the notes):

- ``j = i`` counts: a token with ``2 x_i = 0 (mod M)`` (residue 0, or ``M/2`` for even M)
  always matches itself;
- residue 0 is matched by residue 0: the query's wanted residue is ``(M - x % M) % M``,
  not ``M - x % M`` (which is M for residue 0 and never equals a residue);
- the head averages a constant 1, not the tokens, so a match whose token value is 0 is seen;
- tokens may be any integers; only their residues mod M matter (a compiled model needs them
  in its vocabulary);
- the answer is the integer 1 or 0 (categorical), exact in a compiled model too.

>>> from attnsim import rasp
>>> rasp.evaluate(match2(19), [63, 70, 77, 94, 67, 39])
[1, 1, 1, 1, 0, 1]
>>> rasp.evaluate(match2(19), [19, 38, 5])
[1, 1, 0]
"""

from __future__ import annotations

from collections.abc import Sequence

from attnsim import rasp
from attnsim.rasp import gathers
from attnsim.values import is_int

__all__ = ["match2", "match2_reference"]


def _modulus(modulus: object) -> int:
    if not is_int(modulus):
        raise TypeError(f"modulus must be an int, got {type(modulus).__name__} {modulus!r}")
    if modulus < 1:
        raise ValueError(f"modulus must be >= 1, got {modulus}")
    return int(modulus)


def match2(modulus: int) -> rasp.SOp:
    """The Match2 program for modulus M over integer (categorical) tokens.

    ``Select(tokens, tokens, (key + query) % M == 0)`` selects the keys that complete the
    query's residue to 0 mod M; averaging a constant 1 gives 1 when some key matches and the
    default 0 otherwise, and the MLP turns that mean into the exact answer 1 or 0 (an average
    of ones is 1 only up to float rounding in a compiled model). Cost: 1 attention layer, 1
    head, 1 MLP. The predicate is a table over pairs of token values, so the compiled head
    reads the one-hot tokens directly and needs no MLP before it.

    Args:
        modulus: M >= 1.

    Returns:
        A categorical S-op with values 1 (match) and 0.

    Raises:
        TypeError, ValueError: M is not a positive int.

    >>> from attnsim import rasp
    >>> rasp.evaluate(match2(4), [0, 1, 2, 3, 5])
    [1, 1, 1, 1, 1]
    >>> rasp.evaluate(match2(4), [1, 1, 2])
    [0, 0, 1]
    """
    m = _modulus(modulus)
    partner = rasp.Select(rasp.tokens, rasp.tokens, lambda key, query: (key + query) % m == 0)
    found = gathers.any_selected(partner)
    return rasp.categorical(rasp.Map(lambda v: 1 if v > 0 else 0, found)).named(f"match2_mod{m}")


def match2_reference(xs: Sequence[int], modulus: int) -> list[int]:
    """Plain-Python Match2: ``[1 if any((x_i + x_j) % M == 0 for j) else 0 for i]``.

    Args:
        xs: integer tokens.
        modulus: M >= 1.

    Returns:
        One 0/1 int per position.

    Raises:
        TypeError, ValueError: M is not a positive int.

    >>> match2_reference([1, 3, 2], 4)
    [1, 1, 1]
    """
    m = _modulus(modulus)
    return [int(any((a + b) % m == 0 for b in xs)) for a in xs]
