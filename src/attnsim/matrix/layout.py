"""The row-major bijection between arrays and token sequences (the paper's Proposition 2).

An array ``M`` of shape ``(d_0, ..., d_{k-1})`` is laid out as the sequence
``flat(M) = flat(M[0]) || flat(M[1]) || ...``: element ``(i_0, ..., i_{k-1})`` sits at
position ``sum_a i_a * prod_{b > a} d_b`` (for a matrix ``r x c``: ``M[i, j]`` at ``i*c + j``).
Several operands of one program are laid out one after the other with no separators, and
the sequence may be padded with zeros at the end (the matrix programs read their operands
from fixed positions, so padding never changes a result).

Glossary: ``shape`` is a tuple of positive ints; ``seq`` is a 1-D float64 array (one scalar
per position); ``batch`` is a leading axis of independent examples.

>>> import numpy as np
>>> a = np.array([[1.0, 2.0], [3.0, 4.0]])
>>> seq = pack(a, np.array([[5.0], [6.0]]), length=8)
>>> seq.tolist()
[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0, 0.0]
>>> [m.tolist() for m in unpack(seq, (2, 2), (2, 1))]
[[[1.0, 2.0], [3.0, 4.0]], [[5.0], [6.0]]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from attnsim.values import is_int

__all__ = [
    "dimension",
    "flat_index",
    "unflat_index",
    "flatten",
    "unflatten",
    "offsets",
    "pack",
    "pack_batch",
    "unpack",
]


def dimension(value: object, name: str) -> int:
    """``value`` as one positive dimension of a shape (a program builder's argument).

    Args:
        value: the dimension.
        name: its name in messages (``"r"``, ``"heads"``).

    Returns:
        ``int(value)``.

    Raises:
        TypeError: ``value`` is not an int (bools are refused). ValueError: it is below 1.

    >>> dimension(3, "r")
    3
    >>> dimension(0, "c")
    Traceback (most recent call last):
    ...
    ValueError: c must be >= 1, got 0
    """
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def _shape(shape: Sequence[int], what: str = "shape") -> tuple[int, ...]:
    try:
        out = tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of ints, got {shape!r}") from None
    if any(d < 1 for d in out) or any(int(d) != d for d in shape):
        raise ValueError(f"{what} must hold positive ints, got {tuple(shape)!r}")
    return out


def flat_index(index: Sequence[int], shape: Sequence[int]) -> int:
    """The position of array element ``index`` in the row-major sequence.

    Args:
        index: one int per axis, each in ``range(shape[a])``.
        shape: the array's shape.

    Returns:
        The position ``sum_a index[a] * prod_{b > a} shape[b]``.

    Raises:
        ValueError: the index has the wrong number of axes or is out of range.

    >>> flat_index((1, 2), (3, 4))
    6
    """
    dims = _shape(shape)
    idx = tuple(int(i) for i in index)
    if len(idx) != len(dims) or any(not 0 <= i < d for i, d in zip(idx, dims)):
        raise ValueError(f"index {tuple(index)!r} is not inside an array of shape {dims}")
    pos = 0
    for i, d in zip(idx, dims):
        pos = pos * d + i
    return pos


def unflat_index(pos: int, shape: Sequence[int]) -> tuple[int, ...]:
    """The array index stored at sequence position ``pos`` (inverse of :func:`flat_index`).

    Args:
        pos: a position in ``range(prod(shape))``.
        shape: the array's shape.

    Returns:
        The index tuple.

    Raises:
        ValueError: ``pos`` is out of range.

    >>> unflat_index(6, (3, 4))
    (1, 2)
    """
    dims = _shape(shape)
    size = math.prod(dims)
    if not 0 <= int(pos) < size:
        raise ValueError(f"position {pos} is outside an array of shape {dims} ({size} positions)")
    out = []
    p = int(pos)
    for d in reversed(dims):
        out.append(p % d)
        p //= d
    return tuple(reversed(out))


def flatten(array: np.ndarray | Sequence) -> np.ndarray:
    """Lays an array out as a row-major float64 sequence.

    Args:
        array: an array of any number of axes (a scalar becomes a length-1 sequence).

    Returns:
        A 1-D float64 array of ``array.size`` values.

    Raises:
        ValueError: the array is empty.

    >>> flatten([[1, 2, 3], [4, 5, 6]]).tolist()
    [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    """
    arr = np.asarray(array, dtype=np.float64)
    if arr.size == 0:
        raise ValueError(f"cannot lay out an empty array (shape {arr.shape})")
    return arr.reshape(-1).copy()


def unflatten(seq: np.ndarray | Sequence, shape: Sequence[int], offset: int = 0) -> np.ndarray:
    """Reads an array of ``shape`` from a row-major sequence, starting at ``offset``.

    Args:
        seq: a 1-D sequence, or a 2-D batch ``[batch, n]`` (then the result has a batch axis).
        shape: the array's shape.
        offset: the position of the array's first element.

    Returns:
        A float64 array of ``shape`` (or ``(batch, *shape)``).

    Raises:
        ValueError: the sequence is too short for ``offset + prod(shape)`` values.

    >>> unflatten([9, 1, 2, 3, 4], (2, 2), offset=1).tolist()
    [[1.0, 2.0], [3.0, 4.0]]
    """
    dims = _shape(shape)
    arr = np.asarray(seq, dtype=np.float64)
    size = math.prod(dims)
    if arr.ndim not in (1, 2):
        raise ValueError(f"expected a 1-D sequence or a 2-D batch, got shape {arr.shape}")
    if offset < 0 or offset + size > arr.shape[-1]:
        raise ValueError(
            f"a {dims} array at offset {offset} needs {offset + size} positions, the sequence "
            f"has {arr.shape[-1]}"
        )
    block = arr[..., offset : offset + size]
    return block.reshape(arr.shape[:-1] + dims).copy()


def offsets(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The start position of each array when the arrays are laid out one after the other.

    Args:
        *shapes: the arrays' shapes, in sequence order.

    Returns:
        One start position per shape, then the total length (so ``len(result) == len(shapes)+1``).

    >>> offsets((3, 2), (2, 4))
    (0, 6, 14)
    """
    out = [0]
    for s in shapes:
        out.append(out[-1] + math.prod(_shape(s)))
    return tuple(out)


def pack(*arrays: np.ndarray | Sequence, length: int | None = None) -> np.ndarray:
    """Lays several arrays out one after the other, padded with zeros to ``length``.

    Args:
        *arrays: the operands, in sequence order.
        length: the sequence length; the default is the total number of elements.

    Returns:
        A 1-D float64 sequence.

    Raises:
        ValueError: no arrays, or ``length`` is shorter than the operands.

    >>> pack([[1, 2]], [[3], [4]], length=5).tolist()
    [1.0, 2.0, 3.0, 4.0, 0.0]
    """
    if not arrays:
        raise ValueError("pack needs at least one array")
    return pack_batch(*(np.asarray(a, dtype=np.float64)[None] for a in arrays), length=length)[0]


def pack_batch(*arrays: np.ndarray | Sequence, length: int | None = None) -> np.ndarray:
    """Like :func:`pack` for batches: every array has a leading batch axis of the same size.

    Args:
        *arrays: arrays ``[batch, ...]``, in sequence order.
        length: the sequence length; the default is the total number of elements per example.

    Returns:
        A float64 array ``[batch, length]``.

    Raises:
        ValueError: no arrays, unequal batch sizes, or ``length`` too short.

    >>> pack_batch(np.ones((2, 1, 2)), np.zeros((2, 1)), length=4).tolist()
    [[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]]
    """
    if not arrays:
        raise ValueError("pack_batch needs at least one array")
    mats = [np.asarray(a, dtype=np.float64) for a in arrays]
    if any(m.ndim < 1 for m in mats):
        raise ValueError("pack_batch needs arrays with a leading batch axis")
    batch = mats[0].shape[0]
    if any(m.shape[0] != batch for m in mats):
        sizes = [m.shape[0] for m in mats]
        raise ValueError(f"pack_batch needs equal batch sizes, got {sizes}")
    flat = np.concatenate([m.reshape(batch, -1) for m in mats], axis=1)
    total = flat.shape[1]
    if length is None:
        length = total
    if length < total:
        raise ValueError(f"length={length} is shorter than the {total} values to lay out")
    out = np.zeros((batch, length))
    out[:, :total] = flat
    return out


def unpack(seq: np.ndarray | Sequence, *shapes: Sequence[int], offset: int = 0) -> list:
    """Reads consecutive arrays of the given shapes from a sequence (inverse of :func:`pack`).

    Args:
        seq: a 1-D sequence or a 2-D batch.
        *shapes: the arrays' shapes, in sequence order.
        offset: the position of the first array.

    Returns:
        A list of arrays (with a leading batch axis when ``seq`` is a batch).

    Raises:
        ValueError: the sequence is too short.

    >>> [a.tolist() for a in unpack([1, 2, 3], (1, 1), (2,))]
    [[[1.0]], [2.0, 3.0]]
    """
    starts = offsets(*shapes)
    return [unflatten(seq, s, offset + o) for s, o in zip(shapes, starts)]
