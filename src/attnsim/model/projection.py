"""Products of the residual stream with sparse weights, rounded as the dense forward rounds
them.

A column of ``W`` with at most two non-zero weights is a sum whose order does not matter, so
it can read only its rows; a column with more terms keeps the full sum over d_model (a matrix
product's columns do not depend on which other columns it computes). Both executors then
give the same bits.
"""

from __future__ import annotations

import torch

__all__ = ["Projection"]


class Projection:
    """``x @ W`` rounded as the dense forward rounds it (see :func:`_project`), with the
    split of ``W``'s columns into few-term and full sums made once.

    >>> W = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    >>> x = torch.tensor([[[2.0, 3.0, 4.0]]], dtype=torch.float64)
    >>> Projection(W)(x).tolist()
    [[[2.0, 9.0]]]
    """

    def __init__(self, W: torch.Tensor) -> None:
        nonzero = W != 0
        few = nonzero.sum(dim=0) <= 2
        self.width = W.shape[1]
        self.f = torch.nonzero(few).flatten()
        self.m = torch.nonzero(~few).flatten()
        self.rows = torch.nonzero(nonzero[:, self.f].any(dim=1)).flatten()
        self.W_f = W[self.rows][:, self.f]
        self.W_m = W[:, self.m]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not len(self.m):
            return x[..., self.rows] @ self.W_f
        if not len(self.f):
            return x @ self.W_m
        out = torch.empty(*x.shape[:-1], self.width, dtype=x.dtype)
        out[..., self.f] = x[..., self.rows] @ self.W_f
        out[..., self.m] = x @ self.W_m
        return out


def _project(x: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """``x @ W`` (``[batch, pos, d_model] @ [d_model, width]``), rounded as the dense forward
    rounds it. A column with at most two non-zero weights is a sum whose order does not
    matter, so it reads only its rows; the others keep the full sum over d_model (a matrix
    product's columns do not depend on which other columns it computes)."""
    nonzero = W != 0
    terms = nonzero.sum(dim=0)  # [width]
    if bool((terms == 1).all()):  # one term per column: a gather, scaled (the same product)
        rows = nonzero.to(torch.int8).argmax(dim=0)
        scale = W[rows, torch.arange(W.shape[1])]
        picked = x[..., rows]
        return picked if bool((scale == 1).all()) else picked * scale
    few = terms <= 2
    if bool(few.all()):
        rows = torch.nonzero(nonzero.any(dim=1)).flatten()
        return x[..., rows] @ W[rows]
    if not bool(few.any()):
        return x @ W
    out = torch.empty(*x.shape[:-1], W.shape[1], dtype=x.dtype)
    f, m = torch.nonzero(few).flatten(), torch.nonzero(~few).flatten()
    rows = torch.nonzero(nonzero[:, f].any(dim=1)).flatten()
    out[..., f] = x[..., rows] @ W[rows][:, f]
    out[..., m] = x @ W[:, m]
    return out
