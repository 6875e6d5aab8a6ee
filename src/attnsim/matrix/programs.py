"""Matrix arithmetic as RASP programs over numerical tokens (one scalar per position).

Every builder takes the shapes as Python constants and returns a numerical S-op; inputs and
outputs are row-major sequences (see :mod:`attnsim.matrix.layout`). No program reads
``length``: block boundaries come from the shape constants, so every selector compares
``indices`` with index arithmetic fixed at build time. Such selectors cost nothing to build
and give one attention head per distinct selector object; a query whose source position
is set to -1 selects nothing and reads the default 0.

Costs (attention layers, heads per layer), counted by :func:`attnsim.matrix.costs.attention_cost`
with the compiler's rules; the paper's counts include one layer for ``length``:

==============================  ========================  ===============================
program                         here                      paper
==============================  ========================  ===============================
transpose r x c (h heads)       1 layer: (1,)             2 layers: (1, 1) (h=2: 2 heads)
matmul (r x k)(k x c)           2 layers: (2s, 1), or 1   3 layers: (1, r+c, rc)
softmax r x c (h heads)         1 layer: (c,)             2 layers: (1, r)
softmax, ``layers=2``           2 layers: (c, 1)
relu, scale                     0 layers                  0
maxmin (GroupSort-2)            1 layer: (1,)             about 3
bias_add r x c                  1 layer: (1,)             --
det 3x3 (cofactors)             2 layers: (4, 1)          (inside the inverse)
inverse 3x3 (cofactors)         2 layers: (8, 1)          5 layers: (1, 4, 1, 1, 1)
det n x n (Faddeev-LeVerrier)   n layers: (2n+1, n+1, ..., n+1, 1)
inverse n x n (Gram sweep)      n layers: (4n, 3, ..., 3, 2n)
==============================  ========================  ===============================

where ``s = ceil(k / q)`` is the number of inner-index terms each position multiplies and
``q = min(k, floor(L / (h*r*c)))`` the number of positions that share one output entry
(``L`` = :func:`matmul_input_length`); matmul is one layer with ``2s`` heads when ``q = 1``.
For n = 1 det and inverse need no attention, and for n = 2 the counts are (5, 1) and (8, 4).
The determinants and the 3x3 inverse are arranged so that every head reads values at
most one product away from the previous attention layer (the factor -1/l of
Faddeev-LeVerrier sits on the tokens, and the 3x3 inverse gathers ``C`` and ``C^T`` at
once); longer elementwise chains (softmax's max tree, a sweep step's reciprocal and
products) take several MLP stages between the attention layers listed here, without
adding heads.

Inversion for every n (``method="gram"``) runs in-place Gauss-Jordan ("sweep") elimination
on the Gram matrix ``G = A^T A`` and returns ``A^-1 = G^-1 A^T``. Why: a RASP program built
for the compiler may use only continuous operations (products, reciprocals, affine maps;
no comparisons on reals), so it cannot choose pivots, and Gauss-Jordan on ``A`` itself
divides by zero on inputs such as ``[[0, 1], [1, 0]]``. On ``G`` every pivot is a ratio of
leading principal minors of a positive definite matrix, hence positive for every invertible
``A``: the construction is exact in exact arithmetic for every invertible matrix with no
pivot search. Each elimination step is one attention layer with three gather heads (the
pivot, the pivot row entry, the pivot column entry); forming ``G`` is folded into the first
step and the product with ``A^T`` into the last, so n x n takes n layers. The price is
conditioning: the float64 error grows like ``cond(A)^2 * 1e-16`` (about 1e-12 at
cond(A) = 100). The determinant for every n uses the Faddeev-LeVerrier recurrence instead
(division-free apart from 1/k, no pivots, exact in exact arithmetic for every matrix); its
absolute error stays near ``1e-16`` times the Hadamard bound ``prod_i |row_i|``.

Singular input is never reported silently: an exactly singular matrix makes a pivot (or the
determinant) zero and the output non-finite, and :func:`singular_flag` (a companion S-op)
certifies every result with the residual ``|A X - I|_F``, which bounds the relative error
of ``X`` and is large whenever the matrix is singular or too ill-conditioned;
:func:`attnsim.matrix.apply.inverse` raises on it.

>>> from attnsim import rasp
>>> rasp.evaluate(transpose(2, 3), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Sequence

from attnsim import rasp

__all__ = [
    "transpose",
    "matmul",
    "matmul_input_length",
    "softmax",
    "relu",
    "maxmin",
    "bias_add",
    "scale",
    "det",
    "inverse",
    "inverse_residual",
    "singular_flag",
]

_EQ = rasp.Comparison.EQ


# --------------------------------------------------------------------------------------
# Building blocks (all index arithmetic is fixed at build time)
# --------------------------------------------------------------------------------------


def _dim(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def _tokens() -> rasp.SOp:
    return rasp.numerical(rasp.tokens)


def _index_map(fn: Callable[[int], int]) -> rasp.SOp:
    """An index-only (compile-time) S-op: position -> an int."""
    return rasp.Map(fn, rasp.indices)


def _constant(fn: Callable[[int], float]) -> rasp.SOp:
    """An index-only numerical S-op: position -> a float (a per-position coefficient)."""
    return rasp.numerical(rasp.Map(lambda p: float(fn(p)), rasp.indices))


def _reader(source: Callable[[int], int]) -> rasp.Selector:
    """Each query p reads key ``source(p)`` (or nothing when it is -1): one attention head."""
    return rasp.Select(rasp.indices, _index_map(source), _EQ)


def _read(selector: rasp.Selector, values: rasp.SOp) -> rasp.SOp:
    return rasp.numerical(rasp.Aggregate(selector, values, default=0))


def _gather(source: Callable[[int], int], values: rasp.SOp) -> rasp.SOp:
    return _read(_reader(source), values)


def _sum(terms: Sequence[rasp.SOp]) -> rasp.SOp:
    return functools.reduce(lambda a, b: a + b, terms)


def _max(terms: Sequence[rasp.SOp]) -> rasp.SOp:
    """The maximum by a balanced tree of ``max(a, b) = a + relu(b - a)``."""
    level = list(terms)
    while len(level) > 1:
        nxt = [a + rasp.relu(b - a) for a, b in zip(level[0::2], level[1::2])]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


# --------------------------------------------------------------------------------------
# Transpose, matmul, softmax
# --------------------------------------------------------------------------------------


def transpose(r: int, c: int, heads: int = 1) -> rasp.SOp:
    """Row-major ``M`` (r x c) to row-major ``M^T`` (c x r); blocks of several heads side by side.

    Output position ``p = a*r + b`` of a block reads input position ``b*c + a``: one gather.
    Cost: 1 attention layer, 1 head, for any number of heads (one selector serves every
    block).

    Args:
        r: rows of each matrix.
        c: columns of each matrix.
        heads: the number of matrices laid out one after the other (the paper's Lemma 8
            layout ``[M_1 || M_2 || ...]``, output ``[M_1^T || M_2^T || ...]``).

    Returns:
        A numerical S-op over sequences of length ``heads * r * c``.

    Raises:
        TypeError, ValueError: a dimension is not a positive int.

    >>> from attnsim import rasp
    >>> rasp.evaluate(transpose(1, 2, heads=2), [1.0, 2.0, 3.0, 4.0])
    [1.0, 2.0, 3.0, 4.0]
    >>> rasp.evaluate(transpose(2, 1, heads=2), [1.0, 2.0, 3.0, 4.0])
    [1.0, 2.0, 3.0, 4.0]
    >>> rasp.evaluate(transpose(2, 2), [1.0, 2.0, 3.0, 4.0])
    [1.0, 3.0, 2.0, 4.0]
    """
    r, c, h = _dim(r, "r"), _dim(c, "c"), _dim(heads, "heads")
    rc = r * c
    idx = rasp.indices
    within = idx % rc if h > 1 else idx
    source = (within % r) * c + within // r
    if h > 1:
        source = (idx // rc) * rc + source
    return _read(rasp.Select(idx, source, _EQ), _tokens()).named(f"transpose_{r}x{c}")


def matmul_input_length(r: int, k: int, c: int, heads: int = 1) -> int:
    """The sequence length :func:`matmul` needs: ``max(h*(r*k + k*c), h*r*c)``.

    The operands take ``h*(r*k + k*c)`` positions; when the product has more entries than
    that, the caller pads the sequence with zeros.

    Args:
        r, k, c: ``A`` is r x k and ``B`` is k x c.
        heads: the number of products laid side by side.

    Returns:
        The length.

    Raises:
        TypeError, ValueError: a dimension is not a positive int.

    >>> matmul_input_length(2, 3, 4), matmul_input_length(4, 1, 4)
    (18, 16)
    """
    r, k, c, h = _dim(r, "r"), _dim(k, "k"), _dim(c, "c"), _dim(heads, "heads")
    return max(h * (r * k + k * c), h * r * c)


def _matmul_plan(r: int, k: int, c: int, h: int, layers: int) -> tuple[int, int]:
    """(positions per output entry q, inner terms per position s)."""
    if layers == 1:
        return 1, k
    q = min(k, matmul_input_length(r, k, c, h) // (h * r * c))
    s = math.ceil(k / q)
    return math.ceil(k / s), s


def matmul(r: int, k: int, c: int, heads: int = 1, layers: int = 2) -> rasp.SOp:
    """``A @ B`` for ``A`` (r x k) and ``B`` (k x c) laid out as ``flat(A) || flat(B)``.

    The output entry ``m = i*c + j`` is a sum of k products. With ``q`` positions per entry
    (the sequence has ``L`` positions, so ``q = min(k, floor(L / rc))``), position
    ``m + u*rc`` gathers ``A[i, t]`` and ``B[t, j]`` for the ``s = ceil(k/q)`` inner indices
    ``t`` of chunk ``u`` (``2s`` heads, layer 1) and multiplies them in its MLP; one head
    then sums the ``q`` partial sums into position m (layer 2). When ``q = 1`` the sum is
    already complete and the program has one layer. Cost: layers ``(2s, 1)``, or ``(2s,)``
    when ``q = 1``; the paper's construction uses ``(r + c, r*c)`` after a ``length`` layer.
    ``2s <= r + c`` for every shape.

    Args:
        r, k, c: the shapes.
        heads: h products side by side, laid out ``[A_1 || ... || A_h || B_1 || ... || B_h]``
            (the paper's Lemma 8 layout); output ``[A_1 B_1 || ... || A_h B_h]``. The head
            counts above do not grow with h.
        layers: 2 (fewest heads) or 1 (one layer with ``2k`` heads: each output position
            gathers a whole row of A and column of B).

    Returns:
        A numerical S-op: ``flat(AB)`` in positions ``0 .. h*r*c - 1`` and 0 elsewhere. The
        input must have at least :func:`matmul_input_length` positions (pad with zeros);
        longer inputs give the same result.

    Raises:
        TypeError, ValueError: a dimension is not a positive int, or ``layers`` is not 1 or 2.

    >>> from attnsim import rasp
    >>> a, b = [1.0, 2.0, 3.0, 4.0], [5.0, 6.0]  # A = [[1, 2], [3, 4]], B = [[5], [6]]
    >>> rasp.evaluate(matmul(2, 2, 1), a + b)
    [17.0, 39.0, 0.0, 0.0, 0.0, 0.0]
    """
    r, k, c, h = _dim(r, "r"), _dim(k, "k"), _dim(c, "c"), _dim(heads, "heads")
    if layers not in (1, 2):
        raise ValueError(f"matmul layers must be 1 or 2, got {layers!r}")
    x = _tokens()
    rc, out_len = r * c, h * r * c
    q, s = _matmul_plan(r, k, c, h, layers)

    def term(p: int, slot: int) -> tuple[int, int, int, int, int] | None:
        if p >= q * out_len:
            return None
        u, m = divmod(p, out_len)
        b, e = divmod(m, rc)
        i, j = divmod(e, c)
        t = u * s + slot
        return (b, i, j, t, u) if t < k else None

    def a_source(slot: int) -> Callable[[int], int]:
        def source(p: int) -> int:
            got = term(p, slot)
            return -1 if got is None else got[0] * r * k + got[1] * k + got[3]

        return source

    def b_source(slot: int) -> Callable[[int], int]:
        def source(p: int) -> int:
            got = term(p, slot)
            return -1 if got is None else h * r * k + got[0] * k * c + got[3] * c + got[2]

        return source

    partial = _sum([_gather(a_source(t), x) * _gather(b_source(t), x) for t in range(s)])
    if q == 1:
        return partial.named(f"matmul_{r}x{k}x{c}")
    owner = _index_map(lambda p: p % out_len if p < q * out_len else -1)
    target = _index_map(lambda p: p if p < out_len else -2)
    total = rasp.SumAggregate(rasp.Select(owner, target, _EQ), partial)
    return total.named(f"matmul_{r}x{k}x{c}")


def softmax_relu_error_bound(c: int, tolerance: float) -> float:
    """Certified max error of ``softmax(r, c, spread=...)`` compiled with maps="relu".

    With every exp and 1/x within ``tolerance`` (the compiler's ``map_tolerance``) and rows
    within the declared spread: ``|e^ r^ - e/den| <= t (1 + t) + |1/den^ - 1/den| + t`` with
    ``|den^ - den| <= c t`` and ``den >= 1``, which is at most ``(2 + c) t + O(t^2)``.

    >>> softmax_relu_error_bound(3, 1e-6) < 5.1e-6
    True
    """
    t = float(tolerance)
    return t * (1.0 + t) + c * t / (1.0 - c * t) + t


def softmax(
    r: int, c: int, heads: int = 1, layers: int = 1, spread: float | None = None
) -> rasp.SOp:
    """Row-wise softmax of ``S`` (r x c), with the row maximum subtracted.

    Every position gathers the c entries of its row (c heads, one per column) and computes
    the row maximum ``m`` in its MLP with ``max(a, b) = a + relu(b - a)``; every position of
    a row computes the same ``m`` from the same values in the same order. With
    ``layers=1`` the MLP also forms ``sum_t exp(S[row, t] - m)``; with ``layers=2`` one more
    head sums ``exp(x - m)`` over the row instead. The output is ``exp(x - m)`` times
    ``reciprocal`` of the sum. Cost: ``(c,)`` or ``(c, 1)``; none when ``c == 1`` (every
    output is 1). The paper uses ``(1, r)`` and does not subtract the maximum.

    Args:
        r, c: the shape of each matrix.
        heads: h matrices side by side (``[S_1 || S_2 || ...]``); the result is the same as
            ``softmax(h*r, c)`` because the blocks stack row-major.
        layers: 1 (one layer, c exponentials per position) or 2 (one exponential per
            position, one more head).
        spread: if given, the largest ``max(row) - min(row)`` the inputs will have. The
            exponent ``x - max`` is then declared in ``[-spread, 0]`` and the row sum in
            ``[1, c]``, which lets ``compile_program(..., maps="relu")`` realise exp and 1/x
            with ReLU units and a certified error bound (the compiled model refuses rows
            outside the declared spread).

    Returns:
        A numerical S-op over sequences of length ``heads * r * c``.

    Raises:
        TypeError, ValueError: a dimension is not a positive int, or ``layers`` is not 1 or 2.

    >>> from attnsim import rasp
    >>> [round(v, 4) for v in rasp.evaluate(softmax(1, 2), [0.0, 1000.0])]
    [0.0, 1.0]
    """
    r, c, h = _dim(r, "r"), _dim(c, "c"), _dim(heads, "heads")
    if layers not in (1, 2):
        raise ValueError(f"softmax layers must be 1 or 2, got {layers!r}")
    x, size = _tokens(), h * r * c
    if c == 1:
        cols = [x]
    else:
        cols = [_gather(lambda p, t=t: (p // c) * c + t if p < size else -1, x) for t in range(c)]
    m = _max(cols)

    def shifted(v: rasp.SOp) -> rasp.SOp:
        d = v - m
        return d if spread is None else rasp.numerical(d, value_range=(-float(spread), 0.0))

    e = rasp.exp(shifted(x))
    if layers == 1:
        den = _sum([rasp.exp(shifted(g)) for g in cols]) if c > 1 else e
    elif c == 1:
        den = e
    else:
        row = rasp.indices // c
        den = rasp.SumAggregate(rasp.Select(row, row, _EQ), e)
    if spread is not None:
        den = rasp.numerical(den, value_range=(1.0, float(c)))
    return (e * rasp.reciprocal(den)).named(f"softmax_{r}x{c}")


# --------------------------------------------------------------------------------------
# Activations and affine maps
# --------------------------------------------------------------------------------------


def relu() -> rasp.SOp:
    """``max(x, 0)`` at every position; no attention.

    Returns:
        A numerical S-op.

    >>> from attnsim import rasp
    >>> rasp.evaluate(relu(), [-1.5, 0.0, 2.5])
    [0.0, 0.0, 2.5]
    """
    return rasp.relu(_tokens()).named("relu")


def maxmin() -> rasp.SOp:
    """GroupSort with groups of 2: each pair ``(x[2m], x[2m+1])`` becomes ``(max, min)``.

    Each position reads its partner ``p ^ 1`` and, through the same selector (so the same
    head), a constant 1 that tells whether the partner exists. Then
    ``out = x + s * present * relu(s * (y - x))`` with ``s = +1`` at even and ``-1`` at odd
    positions. The flag of the authors' code is computed from the partner at every position,
    which is wrong at odd positions; here an odd position always takes the minimum and an
    even position the maximum, and the last element of an odd-length sequence, which has no
    partner, is left unchanged. Cost: 1 layer, 1 head; no ``length``. Compiled: two blocks
    (the attention layer, then one MLP-only layer for the gated products).

    Returns:
        A numerical S-op over sequences of any length.

    >>> from attnsim import rasp
    >>> rasp.evaluate(maxmin(), [1.0, -2.0, -3.0, -1.0, 5.0])
    [1.0, -2.0, -1.0, -3.0, 5.0]
    """
    x, idx = _tokens(), rasp.indices
    partner = idx + 1 - (idx % 2) * 2
    sel = rasp.Select(idx, partner, _EQ)
    y = _read(sel, x)
    present = _read(sel, rasp.numerical(rasp.Full(1.0)))
    # out = x + present * s * relu(s * (y - x)) with s = +1 (even) or -1 (odd), written so
    # that every product has both factors one stage old: relu(y - x), relu(x - y) and the
    # gates present * [even], present * [odd] in one MLP, their products in the next
    even, odd = _constant(lambda p: p % 2 == 0), _constant(lambda p: p % 2 == 1)
    up, down = rasp.relu(y - x), rasp.relu(x - y)
    return (x + (present * even) * up - (present * odd) * down).named("maxmin")


def bias_add(r: int, c: int) -> rasp.SOp:
    """``M + 1 b`` for ``M`` (r x c) followed by a bias row ``b`` of length c.

    Position ``p < r*c`` reads ``b[p % c]`` from position ``r*c + p % c`` (1 head, 1 layer).

    Args:
        r, c: the shape of M.

    Returns:
        A numerical S-op over sequences of length ``r*c + c``: the sum in positions
        ``0 .. rc-1`` and 0 in the bias positions.

    Raises:
        TypeError, ValueError: a dimension is not a positive int.

    >>> from attnsim import rasp
    >>> rasp.evaluate(bias_add(2, 2), [1.0, 2.0, 3.0, 4.0, 10.0, 20.0])
    [11.0, 22.0, 13.0, 24.0, 0.0, 0.0]
    """
    r, c = _dim(r, "r"), _dim(c, "c")
    rc = r * c
    x = _tokens()
    bias = _gather(lambda p: rc + p % c if p < rc else -1, x)
    keep = _constant(lambda p: p < rc)
    return (x * keep + bias).named(f"bias_add_{r}x{c}")


def scale(s: float) -> rasp.SOp:
    """``s * x`` at every position; no attention.

    Args:
        s: a finite real number.

    Returns:
        A numerical S-op.

    Raises:
        TypeError: ``s`` is not a real number. ValueError: ``s`` is not finite.

    >>> from attnsim import rasp
    >>> rasp.evaluate(scale(0.5), [1.0, -4.0])
    [0.5, -2.0]
    """
    if isinstance(s, bool) or not isinstance(s, numbers.Real):
        raise TypeError(f"scale expects a real number, got {type(s).__name__} {s!r}")
    if not math.isfinite(s):
        raise ValueError(f"scale expects a finite number, got {s!r}")
    return (_tokens() * float(s)).named("scale")


# --------------------------------------------------------------------------------------
# Determinant and inverse
# --------------------------------------------------------------------------------------


def _method(method: str | None, n: int, default: str, allowed: tuple[str, ...]) -> str:
    if method is None:
        return "cofactor" if n == 3 else default
    if method not in allowed:
        raise ValueError(f"method must be one of {allowed}, got {method!r}")
    if method == "cofactor" and n != 3:
        raise ValueError(
            f"the cyclic cofactor construction exists for 3x3 only, got n={n}; use "
            f"method={default!r} (the default for n != 3)"
        )
    return method


def _cofactors3(x: rasp.SOp, transposed: bool = False) -> rasp.SOp:
    """Signed cofactors of a 3x3 matrix (the paper's cyclic trick): ``C[i, j]`` at position
    ``3i + j``, or ``C[j, i]`` there when ``transposed``. Four gather heads."""

    def at(di: int, dj: int) -> Callable[[int], int]:
        def source(p: int) -> int:
            i, j = divmod(p, 3)
            if transposed:
                i, j = j, i
            return 3 * ((i + di) % 3) + (j + dj) % 3 if p < 9 else -1

        return source

    pp, qq = _gather(at(2, 2), x), _gather(at(1, 1), x)
    rr, ss = _gather(at(2, 1), x), _gather(at(1, 2), x)
    return pp * qq - rr * ss


def _det3(x: rasp.SOp, cof: rasp.SOp) -> rasp.SOp:
    """Laplace expansion on row 0, summed into every position (1 head)."""
    return rasp.SumAggregate(rasp.Select(rasp.indices, rasp.Full(3), rasp.Comparison.LT), x * cof)


def det(n: int, method: str | None = None) -> rasp.SOp:
    """The determinant of row-major ``A`` (n x n), at every position.

    ``method="cofactor"`` (n = 3, the default there): the four cyclic gathers give the
    signed cofactors, one summing head the Laplace expansion on row 0: ``(4, 1)``.
    ``method="faddeev_leverrier"`` (every n, the default for n != 3): with
    ``M_1 = I``, ``M_{l+1} = A M_l + c_{n-l} I`` and ``c_{n-l} = -tr(A M_l) / l``,
    ``det A = (-1)^n c_0``. The program carries ``Q_l = A M_l`` (``Q_1 = A``,
    ``Q_{l+1} = A Q_l + c_{n-l} A``): layer 1 gathers the rows and columns of A (2n heads)
    and sums the diagonal (1 head); each later layer gathers the columns of ``Q_l`` (n
    heads) and sums its diagonal (1 head): ``(2n+1, n+1, ..., n+1, 1)``, n layers ((5, 1) for
    n = 2, none for n = 1).

    Args:
        n: the order of the matrix.
        method: None (the default for n), "cofactor" or "faddeev_leverrier".

    Returns:
        A numerical S-op over sequences of length ``n*n``.

    Raises:
        TypeError, ValueError: n is not a positive int, or the method is unknown or does not
            exist for n.

    >>> from attnsim import rasp
    >>> rasp.evaluate(det(2), [1.0, 2.0, 3.0, 4.0])
    [-2.0, -2.0, -2.0, -2.0]
    >>> rasp.evaluate(det(3), [7.0, 8.0, 12.0, 10.0, 11.0, 9.0, 2.0, 4.0, 21.0])[0]
    45.0
    """
    n = _dim(n, "n")
    method = _method(method, n, "faddeev_leverrier", ("cofactor", "faddeev_leverrier"))
    x = _tokens()
    if method == "cofactor":
        return _det3(x, _cofactors3(x)).named("det_3x3")
    if n == 1:
        return x.named("det_1x1")
    # Q_l = A M_l: Q_1 = A, Q_{l+1} = A Q_l + c_{n-l} A, c_{n-l} = -tr(Q_l) / l. Each layer
    # gathers the columns of Q_l and sums its diagonal, so every product is one MLP stage.
    size = n * n
    diagonal = rasp.Select(
        rasp.indices, rasp.indices, lambda key, query: key < size and key % (n + 1) == 0
    )
    a_row = [_gather(lambda p, t=t: (p // n) * n + t if p < size else -1, x) for t in range(n)]
    q_col = [_reader(lambda p, t=t: t * n + p % n if p < size else -1) for t in range(n)]
    q = x  # Q_1 = A
    for step in range(1, n + 1):
        trace = rasp.SumAggregate(diagonal, q)  # c_{n-step} = -trace / step
        if step < n:  # the constant -1/step goes on the tokens, so each product is one stage
            q = _sum([a * _read(sel, q) for a, sel in zip(a_row, q_col)]) + trace * (
                x * (-1 / step)
            )
    return (trace * (-float((-1) ** n) / n)).named(f"det_{n}x{n}")


def _sweep(
    k: int, size: int, row_of: Callable[[int], int], col_of: Callable[[int], int]
) -> Callable[[rasp.SOp, rasp.SOp, rasp.SOp, rasp.SOp], rasp.SOp]:
    """One in-place Gauss-Jordan step on pivot k, for the entry (row_of(p), col_of(p)).

    Every case of the step is one formula, ``new = alpha - beta * gamma / a[k,k]`` with
    ``alpha = a[i,j] [i != k][j != k]``, ``beta = a[i,k] [i != k] - [i == k]`` and
    ``gamma = a[k,j] [j != k] + [j == k]``: off row and column k this is
    ``a[i,j] - a[i,k] a[k,j] / a[k,k]``, on row k ``a[k,j] / a[k,k]``, on column k
    ``-a[i,k] / a[k,k]`` and at the pivot ``1 / a[k,k]``. The caller passes ``a[i,k]`` and
    ``a[k,j]`` already masked (a gather that selects nothing reads 0) and ``alpha`` masked;
    the 0/1 offsets are index-only constants, so ``beta * gamma`` and ``1 / a[k,k]`` are one
    MLP stage and the result one more.
    """
    on_row = _constant(lambda p: p < size and row_of(p) == k)
    on_col = _constant(lambda p: p < size and col_of(p) == k)

    def step(alpha: rasp.SOp, a_ik: rasp.SOp, a_kj: rasp.SOp, a_kk: rasp.SOp) -> rasp.SOp:
        return alpha - ((a_ik - on_row) * (a_kj + on_col)) * rasp.reciprocal(a_kk)

    return step


def _inverse_gram(n: int, x: rasp.SOp) -> rasp.SOp:
    size = n * n

    def gather(values: rasp.SOp, fn: Callable[[int], int | None]) -> rasp.SOp:
        """Position p reads ``values[fn(p)]``; nothing (0) past the matrix or where fn is None."""

        def source(p: int) -> int:
            got = fn(p) if p < size else None
            return -1 if got is None else got

        return _gather(source, values)

    def dot(u: Sequence[rasp.SOp], v: Sequence[rasp.SOp]) -> rasp.SOp:
        return _sum([a * b for a, b in zip(u, v)])

    # layer 1 (4n heads): columns i and j of A masked off pivot 0, column 0, row j of A (for
    # the final product with A^T); pivot 0 runs on G = A^T A directly: every entry of G that
    # the step needs is a dot product of two gathered columns
    col_i = [gather(x, lambda p, t=t: None if p // n == 0 else t * n + p // n) for t in range(n)]
    col_j = [gather(x, lambda p, t=t: None if p % n == 0 else t * n + p % n) for t in range(n)]
    col_0 = [gather(x, lambda p, t=t: t * n) for t in range(n)]
    row_j = [gather(x, lambda p, t=t: (p % n) * n + t) for t in range(n)]
    state = _sweep(0, size, lambda p: p // n, lambda p: p % n)(
        dot(col_i, col_j), dot(col_i, col_0), dot(col_0, col_j), dot(col_0, col_0)
    )
    for k in range(1, n - 1):  # one attention layer per pivot, three heads
        off_pivot = _constant(lambda p, k=k: p < size and p // n != k and p % n != k)
        a_ik = gather(state, lambda p, k=k: None if p // n == k else (p // n) * n + k)
        a_kj = gather(state, lambda p, k=k: None if p % n == k else k * n + p % n)
        a_kk = gather(state, lambda p, k=k: k * n + k)
        state = _sweep(k, size, lambda p: p // n, lambda p: p % n)(
            state * off_pivot, a_ik, a_kj, a_kk
        )
    # last attention layer (2n heads): pivot n-1 for row i of G^-1 and every column t, and
    # X[i, j] = sum_t G^-1[i, t] A[j, t] = sum_{t != k} a[i,t] A[j,t] - beta_i w_j / a[k,k]
    # with w_j = sum_t gamma_t A[j, t]
    k = n - 1
    row_i = [
        gather(state, lambda p, t=t: None if p // n == k else (p // n) * n + t) for t in range(n)
    ]
    row_k = [gather(state, lambda p, t=t: k * n + t) for t in range(n)]
    on_row = _constant(lambda p: p < size and p // n == k)
    beta = row_i[k] - on_row
    w = dot(row_k[:k], row_j[:k]) + row_j[k]
    return dot(row_i[:k], row_j[:k]) - (beta * w) * rasp.reciprocal(row_k[k])


def inverse(n: int, method: str | None = None) -> rasp.SOp:
    """The inverse of row-major ``A`` (n x n), row-major in positions ``0 .. n*n-1``.

    ``method="cofactor"`` (n = 3, the default there): the paper's cyclic cofactors, at each
    position both ``C[i, j]`` and ``C[j, i]`` (8 gather heads), then the determinant by
    Laplace expansion on column 0 (1 summing head) and ``adj(A) / det(A) = C^T / det``:
    2 layers, ``(8, 1)``; the paper's version takes 5 because it computes ``length``, masks
    row 0 in a layer of its own and transposes after the determinant.
    ``method="gram"`` (every n, the default for n != 3): Gauss-Jordan on ``G = A^T A`` then
    ``G^-1 A^T`` (see the module notes): n layers ``(4n, 3, ..., 3, 2n)``; n = 1 needs no
    attention. An exactly singular input gives inf or nan; use :func:`singular_flag` to
    certify a result.

    Args:
        n: the order of the matrix.
        method: None (the default for n), "cofactor" or "gram".

    Returns:
        A numerical S-op over sequences of length ``n*n``.

    Raises:
        TypeError, ValueError: n is not a positive int, or the method is unknown or does not
            exist for n.

    >>> from attnsim import rasp
    >>> rasp.evaluate(inverse(2), [0.0, 2.0, 4.0, 0.0])
    [0.0, 0.25, 0.5, 0.0]
    >>> [round(v, 4) for v in rasp.evaluate(inverse(3), [2.0, 0, 0, 0, 4.0, 0, 0, 0, 8.0])]
    [0.5, 0.0, 0.0, 0.0, 0.25, 0.0, 0.0, 0.0, 0.125]
    """
    n = _dim(n, "n")
    method = _method(method, n, "gram", ("cofactor", "gram"))
    x = _tokens()
    if method == "cofactor":
        # C and C^T both from the tokens (8 heads), so that the determinant (Laplace on
        # column 0: sum_i A[i, 0] C[i, 0]) and the output need one more layer between them
        cof, cof_t = _cofactors3(x), _cofactors3(x, transposed=True)
        column0 = rasp.Select(
            rasp.indices, rasp.indices, lambda key, query: key < 9 and key % 3 == 0
        )
        det3 = rasp.SumAggregate(column0, x * cof)
        return (cof_t * rasp.reciprocal(det3)).named("inverse_3x3")
    if n == 1:
        return rasp.reciprocal(x).named("inverse_1x1")
    return _inverse_gram(n, x).named(f"inverse_{n}x{n}")


def inverse_residual(n: int, inverse_sop: rasp.SOp | None = None) -> rasp.SOp:
    """``|A X - I|_F`` at every position, where ``X`` is the inverse program's output.

    Since ``X - A^-1 = A^-1 (A X - I)``, the residual bounds the relative error
    ``|X - A^-1| / |A^-1|`` (2-norm); it is nan or inf for an exactly singular input and large
    for a nearly singular one. Cost: two layers after the inverse: the columns of ``X`` and
    the rows of ``A`` are gathered (2n heads), then one head sums the squares.

    Args:
        n: the order of the matrix.
        inverse_sop: the inverse S-op to check (share it with the program that outputs it);
            the default builds ``inverse(n)``.

    Returns:
        A numerical S-op over sequences of length ``n*n``.

    Raises:
        TypeError, ValueError: n is not a positive int, or ``inverse_sop`` is not an S-op.

    >>> from attnsim import rasp
    >>> rasp.evaluate(inverse_residual(2), [0.0, 2.0, 4.0, 0.0])[0]
    0.0
    """
    n = _dim(n, "n")
    if inverse_sop is None:
        inverse_sop = inverse(n)
    elif not isinstance(inverse_sop, rasp.SOp):
        raise TypeError(f"inverse_sop must be a RASP S-op, got {type(inverse_sop).__name__}")
    x, size = _tokens(), n * n
    a_row = [_gather(lambda p, t=t: (p // n) * n + t if p < size else -1, x) for t in range(n)]
    x_col = [
        _gather(lambda p, t=t: t * n + p % n if p < size else -1, inverse_sop) for t in range(n)
    ]
    eye = _constant(lambda p: p < size and p % (n + 1) == 0)
    resid = _sum([a * b for a, b in zip(a_row, x_col)]) - eye
    inside = rasp.Select(rasp.indices, rasp.indices, lambda key, query: key < size)
    return rasp.sqrt(rasp.SumAggregate(inside, resid * resid)).named(f"inverse_residual_{n}")


def singular_flag(n: int, rtol: float = 1e-8, inverse_sop: rasp.SOp | None = None) -> rasp.SOp:
    """Nonzero at every position when the inverse cannot be certified to ``rtol``, else 0.0.

    The flag is ``min(1, relu(res / rtol - 1))`` of the residual ``res`` of
    :func:`inverse_residual`: 0.0 when ``res <= rtol``, 1.0 once ``res >= 2 rtol``, and nan
    when the residual is not finite; so it is nonzero (or nan) exactly when the matrix is
    singular or so ill-conditioned that the computed inverse may be off by more than
    ``rtol`` (relative). Being piecewise linear in the residual, it needs no comparison of
    real numbers. Cost: that of :func:`inverse_residual`.

    Args:
        n: the order of the matrix.
        rtol: the largest accepted residual.
        inverse_sop: the inverse S-op to check (default: ``inverse(n)``).

    Returns:
        A numerical S-op over sequences of length ``n*n``.

    Raises:
        TypeError, ValueError: bad n, rtol not a positive number, or a bad ``inverse_sop``.

    >>> from attnsim import rasp
    >>> rasp.evaluate(singular_flag(2), [1.0, 2.0, 2.0, 4.0])
    [nan, nan, nan, nan]
    >>> rasp.evaluate(singular_flag(2), [1.0, 2.0, 3.0, 4.0])
    [0.0, 0.0, 0.0, 0.0]
    """
    if isinstance(rtol, bool) or not isinstance(rtol, numbers.Real) or not rtol > 0:
        raise ValueError(f"rtol must be a positive number, got {rtol!r}")
    excess = inverse_residual(n, inverse_sop) * (1.0 / float(rtol)) - 1.0
    return (rasp.relu(excess) - rasp.relu(excess - 1.0)).named(f"singular_flag_{n}")
