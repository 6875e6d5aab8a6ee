"""Run the matrix programs on numpy arrays: lay operands out, evaluate, read results back.

These wrappers evaluate the RASP programs of :mod:`attnsim.matrix.programs`, with the exact
reference interpreter (``backend="interpreter"``, the default) or with the compiled
transformer (``backend="compiled"``: the program compiled to real weights for its input
length, then run). Each takes one matrix or a batch (a leading batch axis) and returns numpy
arrays of the same kind. Programs and compiled models are built once per shape and cached.

>>> import numpy as np
>>> matmul(np.array([[1.0, 2.0]]), np.array([[3.0], [4.0]])).tolist()
[[11.0]]
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from attnsim import rasp, values
from attnsim.matrix import layout, programs

__all__ = [
    "SingularMatrixError",
    "run",
    "transpose",
    "matmul",
    "softmax",
    "relu",
    "maxmin",
    "bias_add",
    "det",
    "inverse",
]


class SingularMatrixError(ValueError):
    """The matrix is singular, or too ill-conditioned for a certified inverse."""


_build = functools.lru_cache(maxsize=None)


@_build
def _program(name: str, *args: object) -> rasp.SOp:
    return getattr(programs, name)(*args)


BACKENDS = ("interpreter", "compiled")


@_build
def _compiled(program: rasp.SOp, length: int):
    from attnsim.compiler import pipeline  # torch is imported only for this backend

    return pipeline.compile_program(program, vocab=None, max_seq_len=length, fixed_length=True)


def compiled_model(program: rasp.SOp, length: int):
    """The compiled transformer that ``backend="compiled"`` runs (cached per program, length).

    >>> model = compiled_model(programs.scale(2.0), 2)
    >>> model.run([[1.0, 2.0]])
    [[2.0, 4.0]]
    """
    return _compiled(program, int(length))


def run(
    program: rasp.SOp, seqs: np.ndarray, backend: str = "interpreter", check: bool = True
) -> np.ndarray:
    """Evaluates a numerical program on a batch of sequences.

    Args:
        program: a RASP S-op.
        seqs: a float array ``[batch, n]``, or one sequence ``[n]``.
        backend: ``"interpreter"`` (the exact RASP interpreter) or ``"compiled"`` (the
            program compiled to transformer weights for length ``n``, then run).
        check: with ``backend="compiled"``, the model's run-time checks (a non-finite value,
            say, raises); with the interpreter, an output that is not finite raises.

    Returns:
        A float64 array of the same shape.

    Raises:
        TypeError: ``seqs`` holds complex numbers (every runner here refuses them: the
            programs compute over the reals, and a float copy would drop imaginary parts).
        ValueError: ``seqs`` is not 1-D or 2-D, or an unknown backend.

    >>> run(programs.scale(2.0), np.array([1.0, 2.0])).tolist()
    [2.0, 4.0]
    >>> run(programs.scale(2.0), np.array([1.0, 2.0]), backend="compiled").tolist()
    [2.0, 4.0]
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    check = values.check_bool(check, "check")
    arr = as_real_array(seqs, "seqs")
    if arr.ndim not in (1, 2):
        raise ValueError(f"expected a sequence [n] or a batch [batch, n], got shape {arr.shape}")
    batch = arr[None] if arr.ndim == 1 else arr
    if batch.shape[0] == 0:
        return np.zeros_like(arr)
    if backend == "compiled":
        model = compiled_model(program, batch.shape[1])
        out = np.asarray(model.run(batch.tolist(), check=check), dtype=np.float64)
    else:
        out = np.asarray(rasp.evaluate_batch(program, batch), dtype=np.float64)
        if check and not np.isfinite(out).all():
            # an infinite input, or float64 overflowing inside the program (a row maximum of
            # -1e20 and 750 is 0 there, and exp(750) is inf): no answer, rather than a NaN
            b, i = (int(v) for v in np.argwhere(~np.isfinite(out))[0])
            why = (
                "the inputs hold inf or NaN, which these programs do not compute with (a mask "
                "is a finite value a few hundred below the row's others)"
                if not np.isfinite(batch).all()
                else "the program's float64 arithmetic overflowed on these inputs; keep the "
                "inputs' values closer in size"
            )
            raise ValueError(f"the output at position {i} (row {b}) is {out[b, i]}: {why}")
    return out[0] if arr.ndim == 1 else out


def as_real_array(m: Any, what: str) -> np.ndarray:
    """``m`` as a float64 array, refusing what no float array holds with a clear message.

    Args:
        m: an array, or nested lists of numbers.
        what: its name in messages.

    Returns:
        The float64 array.

    Raises:
        ValueError: ``m`` is ragged (rows of different lengths).
        TypeError: ``m`` holds complex numbers, text or other non-numbers.

    >>> try:
    ...     as_real_array([[1, 2], [3]], "m")
    ... except ValueError as exc:
    ...     print(str(exc)[:50])
    m is ragged: m[0] has 2 entries but m[1] has 1 ent
    """
    try:
        arr = np.asarray(m)
    except ValueError:  # numpy refuses nested lists of unequal lengths
        arr = None
    if arr is None or arr.dtype == object:
        where = _ragged(m, what)
        if where is not None:
            raise ValueError(
                f"{what} is ragged: {where}; a matrix needs rows of one length (pad the short "
                "rows, or pass a numpy array)"
            )
    values.check_real(m, what)  # the one check: a conversion would keep the real parts only
    try:
        return np.asarray(arr if arr is not None else m, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{what} must hold real numbers (a numpy array or nested lists of numbers), got "
            f"{type(m).__name__}: {exc}"
        ) from None


def _ragged(m: Any, what: str) -> str | None:
    """Where nested lists ``m`` first have two sibling rows of different lengths."""
    if isinstance(m, (str, bytes)) or not isinstance(m, (list, tuple, np.ndarray)):
        return None
    sized = [len(x) if isinstance(x, (list, tuple, np.ndarray)) else None for x in m]
    for i in range(1, len(sized)):
        if sized[i] != sized[0]:
            first, other = (
                "a number" if k is None else f"{k} {'entry' if k == 1 else 'entries'}"
                for k in (sized[0], sized[i])
            )
            return f"{what}[0] has {first} but {what}[{i}] has {other}"
    for i, x in enumerate(m):
        found = _ragged(x, f"{what}[{i}]")
        if found is not None:
            return found
    return None


def _batched(m: np.ndarray | list, ndim: int, what: str) -> tuple[np.ndarray, bool]:
    arr = as_real_array(m, what)
    if arr.ndim == ndim:
        return arr[None], False
    if arr.ndim == ndim + 1:
        return arr, True
    raise ValueError(
        f"{what} must have {ndim} axes (or {ndim + 1} with a batch axis), got {arr.shape}"
    )


def _single(out: np.ndarray, batched: bool) -> np.ndarray:
    return out if batched else out[0]


def transpose(m: np.ndarray | list, backend: str = "interpreter") -> np.ndarray:
    """``m.T`` computed by :func:`attnsim.matrix.programs.transpose`.

    Args:
        m: a matrix ``[r, c]`` or a batch ``[batch, r, c]``.
        backend: ``"interpreter"`` or ``"compiled"``, as in :func:`run` (every runner here
            takes it).

    Returns:
        ``[c, r]`` (or ``[batch, c, r]``).

    Raises:
        ValueError: wrong number of axes.

    >>> transpose([[1.0, 2.0]]).tolist()
    [[1.0], [2.0]]
    >>> transpose([[1.0, 2.0]], backend="compiled").tolist()
    [[1.0], [2.0]]
    """
    arr, batched = _batched(m, 2, "m")
    _, r, c = arr.shape
    out = run(_program("transpose", r, c), layout.pack_batch(arr), backend=backend)
    return _single(layout.unflatten(out, (c, r)), batched)


def matmul(a: np.ndarray | list, b: np.ndarray | list, backend: str = "interpreter") -> np.ndarray:
    """``a @ b`` computed by :func:`attnsim.matrix.programs.matmul`.

    Args:
        a: ``[r, k]`` (or ``[batch, r, k]``).
        b: ``[k, c]`` (or ``[batch, k, c]``).

    Returns:
        ``[r, c]`` (or ``[batch, r, c]``).

    Raises:
        ValueError: the shapes do not match.

    >>> matmul([[1.0, 0.0], [0.0, 2.0]], [[3.0], [4.0]]).tolist()
    [[3.0], [8.0]]
    """
    aa, batched = _batched(a, 2, "a")
    bb, batched_b = _batched(b, 2, "b")
    if batched != batched_b or aa.shape[0] != bb.shape[0] or aa.shape[2] != bb.shape[1]:
        raise ValueError(f"cannot multiply shapes {np.shape(a)} and {np.shape(b)}")
    _, r, k = aa.shape
    c = bb.shape[2]
    length = programs.matmul_input_length(r, k, c)
    out = run(
        _program("matmul", r, k, c), layout.pack_batch(aa, bb, length=length), backend=backend
    )
    return _single(layout.unflatten(out, (r, c)), batched)


def softmax(s: np.ndarray | list, backend: str = "interpreter") -> np.ndarray:
    """Row-wise softmax computed by :func:`attnsim.matrix.programs.softmax`.

    Args:
        s: ``[r, c]`` (or ``[batch, r, c]``).

    Returns:
        The same shape.

    Raises:
        ValueError: wrong number of axes.

    >>> softmax([[0.0, 0.0]]).tolist()
    [[0.5, 0.5]]
    """
    arr, batched = _batched(s, 2, "s")
    _, r, c = arr.shape
    out = run(_program("softmax", r, c), layout.pack_batch(arr), backend=backend)
    return _single(layout.unflatten(out, (r, c)), batched)


def relu(x: np.ndarray | list, backend: str = "interpreter") -> np.ndarray:
    """``max(x, 0)`` computed by :func:`attnsim.matrix.programs.relu` (a sequence or a batch).

    >>> relu([-1.0, 1.0]).tolist()
    [0.0, 1.0]
    """
    return run(_program("relu"), as_real_array(x, "x"), backend=backend)


def maxmin(x: np.ndarray | list, backend: str = "interpreter") -> np.ndarray:
    """GroupSort-2 computed by :func:`attnsim.matrix.programs.maxmin` (a sequence or a batch).

    >>> maxmin([1.0, 2.0, 3.0]).tolist()
    [2.0, 1.0, 3.0]
    """
    return run(_program("maxmin"), as_real_array(x, "x"), backend=backend)


def bias_add(
    m: np.ndarray | list, bias: np.ndarray | list, backend: str = "interpreter"
) -> np.ndarray:
    """``m + bias`` (bias broadcast over rows) computed by :func:`programs.bias_add`.

    Args:
        m: ``[r, c]`` (or ``[batch, r, c]``).
        bias: ``[c]`` (or ``[batch, c]``).

    Returns:
        ``[r, c]`` (or ``[batch, r, c]``).

    Raises:
        ValueError: the shapes do not match.

    >>> bias_add([[1.0, 2.0]], [10.0, 20.0]).tolist()
    [[11.0, 22.0]]
    """
    mm, batched = _batched(m, 2, "m")
    bb, batched_b = _batched(bias, 1, "bias")
    if batched != batched_b or mm.shape[0] != bb.shape[0] or mm.shape[2] != bb.shape[1]:
        raise ValueError(f"cannot add a bias of shape {np.shape(bias)} to {np.shape(m)}")
    _, r, c = mm.shape
    out = run(_program("bias_add", r, c), layout.pack_batch(mm, bb), backend=backend)
    return _single(layout.unflatten(out, (r, c)), batched)


def _square(m: np.ndarray | list) -> tuple[np.ndarray, bool, int]:
    arr, batched = _batched(m, 2, "m")
    if arr.shape[1] != arr.shape[2]:
        raise ValueError(f"expected a square matrix, got shape {np.shape(m)}")
    return arr, batched, arr.shape[1]


def det(
    m: np.ndarray | list, method: str | None = None, backend: str = "interpreter"
) -> np.ndarray | float:
    """The determinant computed by :func:`attnsim.matrix.programs.det`.

    Args:
        m: ``[n, n]`` (or ``[batch, n, n]``).
        method: see :func:`attnsim.matrix.programs.det`.

    Returns:
        A float (or an array ``[batch]``).

    Raises:
        ValueError: the matrix is not square.

    >>> det([[2.0, 1.0], [1.0, 3.0]])
    5.0
    """
    arr, batched, n = _square(m)
    out = run(_program("det", n, method), layout.pack_batch(arr), backend=backend)[:, 0]
    return out if batched else float(out[0])


def inverse(
    m: np.ndarray | list,
    method: str | None = None,
    check: bool = True,
    rtol: float = 1e-8,
    backend: str = "interpreter",
) -> np.ndarray:
    """The inverse computed by :func:`attnsim.matrix.programs.inverse`, certified on request.

    A matrix whose largest entry is beyond ``2^64`` or below ``2^-64`` is first scaled by a
    power of two (exactly) so that its cofactors and determinant stay within float64, and
    its inverse scaled back: ``inverse(1e200 * I)`` is ``1e-200 * I``.

    Args:
        m: ``[n, n]`` (or ``[batch, n, n]``).
        method: see :func:`attnsim.matrix.programs.inverse`.
        check: evaluate :func:`attnsim.matrix.programs.singular_flag` too and raise when any
            matrix of the batch is flagged.
        rtol: the largest accepted residual ``|A X - I|_F``.

    Returns:
        ``[n, n]`` (or ``[batch, n, n]``).

    Raises:
        ValueError: the matrix is not square, or (``check``) its inverse overflows float64.
            SingularMatrixError: ``check`` and a matrix is singular or too ill-conditioned
            for ``rtol``.

    >>> inverse([[0.0, 1.0], [2.0, 0.0]]).tolist()
    [[0.0, 0.5], [1.0, 0.0]]
    """
    values.check_real(rtol, "rtol")
    check = values.check_bool(check, "check")
    arr, batched, n = _square(m)
    arr, shift = _scaled(arr)
    seqs = layout.pack_batch(arr)
    # the compiled model's own finiteness check is off here: a singular matrix's inverse is
    # not finite, and the certified flag below (or check=False) decides what to do with it
    out = run(_program("inverse", n, method), seqs, backend=backend, check=False)
    out = layout.unflatten(out, (n, n))
    if check:
        flag = run(_checker(n, method, float(rtol)), seqs, backend=backend, check=False)[:, 0]
        if not np.all(flag == 0):  # nonzero or nan
            bad = np.flatnonzero(~(flag == 0)).tolist()
            where = f" (batch entries {bad[:10]})" if batched else ""
            raise SingularMatrixError(
                f"the {n}x{n} matrix is singular or too ill-conditioned: the inverse's "
                f"residual |AX - I|_F exceeds rtol={rtol}{where}; pass check=False to get "
                "the raw output"
            )
    with np.errstate(over="ignore"):
        out = np.ldexp(out, -shift[:, None, None])
    if check and not np.isfinite(out).all():  # certified, but beyond float64 once scaled back
        bad = np.flatnonzero(~np.isfinite(out).all(axis=(1, 2))).tolist()
        where = f" (batch entries {bad[:10]})" if batched else ""
        raise ValueError(
            f"the {n}x{n} matrix's inverse has entries beyond float64's range{where}: scale "
            "the matrix up by c and its inverse by c (or pass check=False for the inf entries)"
        )
    return _single(out, batched)


def _scaled(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(arr 2^-e, e)`` per matrix: a matrix whose largest entry lies outside
    ``[2^-SCALE_FROM, 2^SCALE_FROM]`` is scaled by a power of two into ``[1/2, 1)``, where
    its cofactors and determinant cannot overflow or vanish (``inv(2^e B) = 2^-e inv(B)``,
    and the scaling is exact); where an entry would lose bits (a subnormal), it is not.

    >>> _scaled(np.array([[[1e200, 0.0], [0.0, 1e200]]]))[1].tolist()
    [665]
    """
    top = np.abs(arr).max(axis=(1, 2))
    shift = np.where((top > 2.0**SCALE_FROM) | (top < 2.0**-SCALE_FROM), np.frexp(top)[1], 0)
    shift = np.where(np.isfinite(top) & (top > 0), shift, 0)
    out = np.ldexp(arr, -shift[:, None, None])
    exact = (np.ldexp(out, shift[:, None, None]) == arr).all(axis=(1, 2))
    shift = np.where(exact, shift, 0)
    return np.where(exact[:, None, None], out, arr), shift


SCALE_FROM = 64


@_build
def _checker(n: int, method: str | None, rtol: float) -> rasp.SOp:
    return programs.singular_flag(n, rtol, _program("inverse", n, method))
