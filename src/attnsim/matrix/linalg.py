"""Determinant and inverse of a square matrix as RASP programs over numerical tokens.

The builders here are re-exported by :mod:`attnsim.matrix.programs` (and :mod:`attnsim.matrix`);
inputs and outputs are row-major sequences of length ``n*n`` (see :mod:`attnsim.matrix.layout`)
and every selector is a position-only gather (:mod:`attnsim.rasp.gathers`). Costs (attention
layers, heads per layer):

==============================  ========================================
program                         cost
==============================  ========================================
det 3x3 (cofactors)             2 layers: (4, 1)
inverse 3x3 (cofactors)         2 layers: (8, 1) (the paper: 5 layers)
det n x n (Faddeev-LeVerrier)   n layers: (2n+1, n+1, ..., n+1, 1)
inverse n x n (Gram sweep)      n layers: (4n, 3, ..., 3, 2n)
inverse_residual, singular_flag two layers after the inverse: (2n, 1)
==============================  ========================================

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
>>> rasp.evaluate(det(2), [1.0, 2.0, 3.0, 4.0])
[-2.0, -2.0, -2.0, -2.0]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from attnsim import rasp
from attnsim.matrix import layout
from attnsim.rasp import gathers
from attnsim.values import is_real

__all__ = ["det", "inverse", "inverse_residual", "singular_flag"]

_dim = layout.dimension


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

    pp, qq = gathers.gather(at(2, 2), x), gathers.gather(at(1, 1), x)
    rr, ss = gathers.gather(at(2, 1), x), gathers.gather(at(1, 2), x)
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
    x = rasp.numerical(rasp.tokens)
    if method == "cofactor":
        return _det3(x, _cofactors3(x)).named("det_3x3")
    if n == 1:
        return x.named("det_1x1")
    # Q_l = A M_l: Q_1 = A, Q_{l+1} = A Q_l + c_{n-l} A, c_{n-l} = -tr(Q_l) / l. Each layer
    # gathers the columns of Q_l and sums its diagonal, so every product is one MLP stage.
    size = n * n
    diagonal = gathers.select_keys(lambda key: key < size and key % (n + 1) == 0)
    a_row = [
        gathers.gather(lambda p, t=t: (p // n) * n + t if p < size else -1, x) for t in range(n)
    ]
    q_col = [gathers.reader(lambda p, t=t: t * n + p % n if p < size else -1) for t in range(n)]
    q = x  # Q_1 = A
    for step in range(1, n + 1):
        trace = rasp.SumAggregate(diagonal, q)  # c_{n-step} = -trace / step
        if step < n:  # the constant -1/step goes on the tokens, so each product is one stage
            q = gathers.sum_of(
                [a * gathers.read(sel, q) for a, sel in zip(a_row, q_col)]
            ) + trace * (x * (-1 / step))
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
    on_row = gathers.index_constant(lambda p: p < size and row_of(p) == k)
    on_col = gathers.index_constant(lambda p: p < size and col_of(p) == k)

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

        return gathers.gather(source, values)

    def dot(u: Sequence[rasp.SOp], v: Sequence[rasp.SOp]) -> rasp.SOp:
        return gathers.sum_of([a * b for a, b in zip(u, v)])

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
        off_pivot = gathers.index_constant(lambda p, k=k: p < size and p // n != k and p % n != k)
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
    on_row = gathers.index_constant(lambda p: p < size and p // n == k)
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
    x = rasp.numerical(rasp.tokens)
    if method == "cofactor":
        # C and C^T both from the tokens (8 heads), so that the determinant (Laplace on
        # column 0: sum_i A[i, 0] C[i, 0]) and the output need one more layer between them
        cof, cof_t = _cofactors3(x), _cofactors3(x, transposed=True)
        column0 = gathers.select_keys(lambda key: key < 9 and key % 3 == 0)
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
    x, size = rasp.numerical(rasp.tokens), n * n
    a_row = [
        gathers.gather(lambda p, t=t: (p // n) * n + t if p < size else -1, x) for t in range(n)
    ]
    x_col = [
        gathers.gather(lambda p, t=t: t * n + p % n if p < size else -1, inverse_sop)
        for t in range(n)
    ]
    eye = gathers.index_constant(lambda p: p < size and p % (n + 1) == 0)
    resid = gathers.sum_of([a * b for a, b in zip(a_row, x_col)]) - eye
    inside = gathers.select_keys(lambda key: key < size)
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
    if not is_real(rtol) or not rtol > 0:
        raise ValueError(f"rtol must be a positive number, got {rtol!r}")
    excess = inverse_residual(n, inverse_sop) * (1.0 / float(rtol)) - 1.0
    return (rasp.relu(excess) - rasp.relu(excess - 1.0)).named(f"singular_flag_{n}")
