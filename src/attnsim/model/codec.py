"""Input encoding and output decoding of a compiled model: tokens in, values out.

A model reads each position as an embedding row (0 is BOS, then one row per vocabulary
token, or row 1 for any real number) and, for numerical tokens, the token's value; it
writes its output into the residual directions an :class:`OutputSpec` names. Tokens are
matched by :func:`attnsim.values.value_key`, as the interpreter matches them (``1``, ``1.0``
and ``True`` are different tokens, so are ``0.0`` and ``-0.0``; a numpy scalar is the Python
value it holds): a token that Python calls equal to a vocabulary token but that is another
value (``2.0`` for the token 2) is refused, naming both.
Re-exported by :mod:`attnsim.model.compiled`.

Shapes: ``ids`` and ``values`` are ``[batch, 1 + n]``; ``resid`` is ``[batch, 1 + n, d_model]``.

>>> as_batch("ab"), as_batch([[1, 2], [3, 4]])
(([['a', 'b']], True), ([[1, 2], [3, 4]], False))
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnsim.model import checks
from attnsim.values import as_token, is_hashable, is_number, not_in_vocab_message, value_key

__all__ = [
    "OutputSpec",
    "as_batch",
    "decode",
    "encode",
    "numeric_rows",
    "token_rows",
    "vector_batch",
    "encode_vectors",
]


@dataclass(frozen=True)
class OutputSpec:
    """How to read the program's output from the final residual stream.

    Attributes:
        kind: "cat" (argmax over ``dims``; None where all are ~0) or "num" (``form``).
        values: the categorical values, one per direction in ``dims``.
        dims: categorical direction labels.
        form: numerical linear form (direction -> coefficient).
    """

    kind: str
    values: tuple = ()
    dims: tuple = ()
    form: tuple[tuple[str, float], ...] = ()


def token_rows(vocab: Sequence[Any] | None) -> dict[tuple, int]:
    """The embedding row of each vocabulary token, by :func:`~attnsim.values.value_key`.

    >>> rows = token_rows(["a", 1, 0.0, -0.0])
    >>> [rows[value_key(t)] for t in ("a", 1, 0.0, -0.0)], value_key(1.0) in rows
    ([1, 2, 3, 4], False)
    """
    return {} if vocab is None else {value_key(v): i + 1 for i, v in enumerate(vocab)}


def as_batch(xs: Any, is_token: Any = None) -> tuple[list, bool]:
    """``(rows, single)``: one sequence becomes a batch of one; refuses what is neither.

    ``is_token(x)`` tells a tuple token (a vocabulary of pairs) from a row of a batch.
    """
    if isinstance(xs, (np.ndarray, torch.Tensor)):
        if xs.ndim not in (1, 2):
            raise ValueError(
                f"expected a sequence of tokens (1-D) or a batch of them (2-D), got a "
                f"{xs.ndim}-D array of shape {tuple(xs.shape)}"
            )
        return (xs.tolist(), False) if xs.ndim == 2 else ([xs.tolist()], True)
    if isinstance(xs, (bytes, bytearray)) or not isinstance(xs, Iterable):
        raise TypeError(
            "expected a sequence of tokens (a list, or a string of characters) or a list of "
            f"equal-length sequences, got {type(xs).__name__} {xs!r}"
            + ("; wrap one token in a list: [token]" if is_hashable(xs) else "")
        )
    if isinstance(xs, Mapping) or isinstance(xs, (set, frozenset)):
        raise TypeError(
            f"expected a sequence of tokens in order, got a {type(xs).__name__}; pass a list"
        )
    xs = list(xs)
    rows = [isinstance(r, (list, tuple, np.ndarray, torch.Tensor)) for r in xs]
    if xs and rows[0] and isinstance(xs[0], tuple) and is_token is not None and is_token(xs[0]):
        return [xs], True  # tuple tokens (pairs, say) in one sequence
    if xs and rows[0]:
        out = []
        for r, row in enumerate(xs):
            if not isinstance(row, (list, tuple, np.ndarray, torch.Tensor)):
                raise TypeError(
                    f"a batch is a list of sequences, but row {r} is the "
                    f"{type(row).__name__} {row!r} while row 0 is a sequence; pass one "
                    "sequence (a list of tokens) or a list of lists"
                )
            out.append(row.tolist() if isinstance(row, (np.ndarray, torch.Tensor)) else list(row))
        return out, False
    return [xs], True


def numeric_rows(rows: list[list[Any]]) -> np.ndarray | None:
    """The rows as a float64 array when every token is a finite real number, else None
    (the element-by-element path then names the offending token)."""
    if not all(is_number(t) for row in rows for t in row):
        return None
    arr = np.asarray(rows, dtype=np.float64)
    return arr if np.isfinite(arr).all() else None


def encode(
    xs: Sequence[Sequence[Any]],
    *,
    vocab: Sequence[Any] | None,
    token_row: Mapping[tuple, int],
    numerical_tokens: bool,
    max_seq_len: int,
    fixed_length: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows and values ``[batch, 1 + n]`` (BOS first) for equal-length inputs.

    Args:
        xs: equal-length token rows.
        vocab: the categorical vocabulary, or None (real-valued tokens only).
        token_row: :func:`token_rows` of ``vocab``.
        numerical_tokens: tokens also enter as numbers (``values``).
        max_seq_len: the longest input (BOS not counted).
        fixed_length: inputs must have exactly ``max_seq_len`` tokens.

    Returns:
        ``(ids, values)``: the embedding row of each token (0 is BOS) and its value.

    Raises:
        TypeError: a token is not hashable. ValueError: a token outside the vocabulary (or
            equal in Python to a vocabulary token but another value: ``3.0`` for 3), a
            non-number or non-finite number for numerical tokens, or a bad length.

    >>> ids, vals = encode([["b", "a"]], vocab=("a", "b"), token_row=token_rows(("a", "b")),
    ...                    numerical_tokens=False, max_seq_len=4, fixed_length=False)
    >>> ids.tolist()
    [[0, 2, 1]]
    """
    rows = [list(r) for r in xs]
    n = len(rows[0]) if rows else 0
    for r, row in enumerate(rows):
        if len(row) != n:
            raise ValueError(
                f"a batch needs sequences of equal length: row 0 has {n}, row {r} has "
                f"{len(row)}; run them separately"
            )
    if n > max_seq_len:
        raise ValueError(
            f"input length {n} exceeds the model's max_seq_len={max_seq_len}; "
            "compile with a larger max_seq_len"
        )
    if fixed_length and n != max_seq_len:
        raise ValueError(
            f"this model takes inputs of exactly {max_seq_len} tokens (it was "
            "compiled with fixed_length=True, or its program holds a ConstantSOp or a "
            f"ConstantSelector of that length), got {n}"
        )
    ids = torch.zeros(len(rows), n + 1, dtype=torch.long)
    vals = torch.zeros(len(rows), n + 1, dtype=torch.float64)
    if vocab is None and numerical_tokens and n:
        fast = numeric_rows(rows)
        if fast is not None:  # all real numbers: one vectorised copy
            ids[:, 1:] = 1
            vals[:, 1:] = torch.from_numpy(fast)
            return ids, vals
    for b, row in enumerate(rows):
        for i, t in enumerate(row):
            t = as_token(t)  # np.int64(3) is the token 3
            if not is_hashable(t):
                raise TypeError(
                    f"token {t!r} at position {i} (row {b}) is a {type(t).__name__}, not a "
                    "token; a sequence is a flat list of tokens, a batch a list of "
                    "equal-length sequences"
                )
            if vocab is not None:
                k = token_row.get(value_key(t))
                if k is None:
                    raise ValueError(
                        not_in_vocab_message(
                            t,
                            f"position {i}",
                            list(vocab),
                            "use only the tokens the model was compiled for",
                        )
                    )
                ids[b, i + 1] = k
            else:
                ids[b, i + 1] = 1
            if numerical_tokens:
                # a bool reads as 0 or 1, as in the interpreter (and the compiler's vocab check)
                if not (is_number(t) or isinstance(t, (bool, np.bool_))):
                    raise ValueError(
                        f"token {t!r} at position {i} is not a number; this model reads "
                        "real-valued tokens"
                    )
                if not math.isfinite(float(t)):
                    raise ValueError(
                        f"token {t!r} at position {i} is not finite; this model computes "
                        "on finite real numbers"
                    )
                vals[b, i + 1] = float(t)
    return ids, vals


def vector_batch(xs: Any, width: int) -> tuple[np.ndarray, bool]:
    """Vector-token input as ``([batch, n, width] float64, single)``: ``[n, width]`` is one
    sequence, ``[batch, n, width]`` a batch; channels beyond ``width`` (which no S-op of the
    program reads) are dropped, as the interpreter ignores them.

    >>> arr, single = vector_batch([[1, 2], [3, 4]], 2)
    >>> arr.shape, single
    ((1, 2, 2), True)
    """
    try:
        arr = np.asarray(xs, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"this model reads vector tokens of width {width}: pass an array [n, {width}] "
            f"of real numbers (or [batch, n, {width}])"
        ) from None
    if arr.ndim not in (2, 3) or arr.shape[-1] < width:
        raise ValueError(
            f"this model reads vector tokens of width {width}: expected an array [n, {width}] "
            f"or [batch, n, {width}], got shape {list(arr.shape)}"
        )
    arr = arr[..., :width]  # wider tokens: the channels the program does not read go
    if not np.isfinite(arr).all():
        raise ValueError("vector tokens must be finite real numbers (found inf or nan)")
    return (arr[None], True) if arr.ndim == 2 else (arr, False)


def encode_vectors(
    arr: np.ndarray, *, max_seq_len: int, fixed_length: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows ``[batch, 1 + n]`` and vector values ``[batch, 1 + n, width]`` (BOS first,
    its vector 0) for vector tokens ``arr`` ``[batch, n, width]``.

    >>> ids, vals = encode_vectors(np.ones((1, 2, 3)), max_seq_len=4, fixed_length=False)
    >>> ids.tolist(), tuple(vals.shape)
    ([[0, 1, 1]], (1, 3, 3))
    """
    b, n, width = arr.shape
    if n > max_seq_len:
        raise ValueError(
            f"input length {n} exceeds the model's max_seq_len={max_seq_len}; "
            "compile with a larger max_seq_len"
        )
    if fixed_length and n != max_seq_len:
        raise ValueError(f"this model takes inputs of exactly {max_seq_len} vector tokens, got {n}")
    ids = torch.ones(b, n + 1, dtype=torch.long)
    ids[:, 0] = 0
    vals = torch.zeros(b, n + 1, width, dtype=torch.float64)
    vals[:, 1:] = torch.from_numpy(arr)
    return ids, vals


def decode(
    resid: torch.Tensor, spec: OutputSpec, index: Mapping[str, int], tol: float
) -> list[list[Any]]:
    """The output values ``[batch][pos]`` read from the final residual stream (BOS first).

    Args:
        resid: ``[batch, pos, d_model]``.
        spec: where the output lives.
        index: residual direction -> its column.
        tol: how far a one-hot entry may stray from 0 or 1 (see ``checks.block_tolerance``).

    Raises:
        RunTimeCheckError: a categorical output is a mixture of several values.

    >>> spec = OutputSpec("cat", ("x", "y"), ("out:x", "out:y"))
    >>> resid = torch.tensor([[[0.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])
    >>> decode(resid, spec, {"out:x": 0, "out:y": 1}, 1e-3)
    [['y', None]]
    """
    resid = resid[:, 1:]  # drop BOS
    if spec.kind == "num":
        vals = checks.read_form(resid, spec.form, index)
        return vals.tolist()
    if not spec.dims:
        return [[None] * resid.shape[1] for _ in range(resid.shape[0])]
    idx = torch.tensor([index[d] for d in spec.dims])
    scores = resid[..., idx]  # [batch, pos, values]
    # the output is one-hot (a value) or zero (None); anything else cannot be decoded
    mixed = ((scores > tol) & (scores < 1 - tol)).any(dim=-1) | (scores.sum(-1) > 1 + tol)
    if bool(mixed.any()):
        b, i = (int(x) for x in torch.nonzero(mixed)[0])
        shares = ", ".join(
            f"{spec.values[k]!r}: {float(scores[b, i, k]):.3g}"
            for k in range(len(spec.dims))
            if float(scores[b, i, k]) > tol
        )
        raise checks.RunTimeCheckError(
            f"the output at position {i} (row {b}) is not one value but a mixture "
            f"({shares}); a categorical aggregate averaged several distinct values, "
            "which the interpreter refuses too: make its selector select one key"
        )
    best = scores.argmax(dim=-1)
    top = scores.gather(-1, best[..., None])[..., 0]
    out = []
    for b in range(resid.shape[0]):
        row = []
        for i in range(resid.shape[1]):
            row.append(spec.values[best[b, i]] if top[b, i] > 0.5 else None)
        out.append(row)
    return out
