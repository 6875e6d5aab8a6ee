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

The determinant and inverse constructions, and why they need no pivot search, are
described in :mod:`attnsim.matrix.linalg` (their builders are re-exported here).

>>> from attnsim import rasp
>>> rasp.evaluate(transpose(2, 3), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable

from attnsim import rasp
from attnsim.matrix import layout
from attnsim.matrix.linalg import det, inverse, inverse_residual, singular_flag
from attnsim.rasp import gathers
from attnsim.values import is_real

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
_dim = layout.dimension


def _tokens() -> rasp.SOp:
    return rasp.numerical(rasp.tokens)


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
    return gathers.read(gathers.reader(source), _tokens()).named(f"transpose_{r}x{c}")


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

    partial = gathers.sum_of(
        [gathers.gather(a_source(t), x) * gathers.gather(b_source(t), x) for t in range(s)]
    )
    if q == 1:
        return partial.named(f"matmul_{r}x{k}x{c}")
    total = gathers.sum_into(
        lambda p: p % out_len if p < q * out_len else -1,  # the entry key p adds into
        lambda p: p if p < out_len else -2,  # the entry query p collects (none past them)
        partial,
    )
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
            with ReLU units and a certified error bound (:func:`softmax_relu_error_bound`)
            for rows within the spread. A wider row is not refused: its ReLU exp ramps to 0
            below ``-spread`` (as masked scores need), so each entry further below the row
            maximum reads an exponential between 0 and ``exp(-spread)``, which adds up to
            about ``c exp(-spread)`` to the error (the model's report notes it).

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
        cols = [
            gathers.gather(lambda p, t=t: (p // c) * c + t if p < size else -1, x) for t in range(c)
        ]
    m = gathers.max_of(cols)

    def shifted(v: rasp.SOp) -> rasp.SOp:
        d = v - m
        return d if spread is None else rasp.numerical(d, value_range=(-float(spread), 0.0))

    e = rasp.exp(shifted(x))
    if layers == 1:
        den = gathers.sum_of([rasp.exp(shifted(g)) for g in cols]) if c > 1 else e
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
    (the attention layer, then one MLP-only layer for the gated products). Exact up to the
    rounding of the pair's larger magnitude (``x + relu(y - x)`` rounds twice): a value
    more than 2^53 times smaller than its partner may come back as 0 (``[-1e17, 3]`` gives
    ``[0, -1e17]``), as the same arithmetic in numpy would.

    Returns:
        A numerical S-op over sequences of any length.

    >>> from attnsim import rasp
    >>> rasp.evaluate(maxmin(), [1.0, -2.0, -3.0, -1.0, 5.0])
    [1.0, -2.0, -1.0, -3.0, 5.0]
    """
    x, idx = _tokens(), rasp.indices
    partner = idx + 1 - (idx % 2) * 2
    sel = gathers.reader(partner)
    y = gathers.read(sel, x)
    present = gathers.any_selected(sel)
    # out = x + present * s * relu(s * (y - x)) with s = +1 (even) or -1 (odd), written so
    # that every product has both factors one stage old: relu(y - x), relu(x - y) and the
    # gates present * [even], present * [odd] in one MLP, their products in the next
    even, odd = (
        gathers.index_constant(lambda p: p % 2 == 0),
        gathers.index_constant(lambda p: p % 2 == 1),
    )
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
    bias = gathers.gather(lambda p: rc + p % c if p < rc else -1, x)
    keep = gathers.index_constant(lambda p: p < rc)
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
    if not is_real(s):
        raise TypeError(f"scale expects a real number, got {type(s).__name__} {s!r}")
    if not math.isfinite(s):
        raise ValueError(f"scale expects a finite number, got {s!r}")
    return (_tokens() * float(s)).named("scale")
