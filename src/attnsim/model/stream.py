"""The residual stream between sublayers: updates added in place (a planned sublayer
returns only the columns it writes), and the stages a caller asks to keep."""

from __future__ import annotations

import torch

__all__ = ["Columns", "expand_update"]


class Columns:
    """A request in ``streams``: keep only these residual columns of that stage (a copy
    ``[batch, pos, len(cols)]``), not the whole stream."""

    def __init__(self, cols: torch.Tensor) -> None:
        self.cols = cols


def _capture(streams: dict | None, stage: int, x: torch.Tensor) -> None:
    """Fills ``streams[stage]`` (when asked for) with a copy of the stream, or of the
    columns a :class:`Columns` request names."""
    if streams is not None and stage in streams:
        req = streams[stage]
        streams[stage] = x[..., req.cols].clone() if isinstance(req, Columns) else x.clone()


def expand_update(
    update: torch.Tensor | tuple[torch.Tensor, torch.Tensor], like: torch.Tensor
) -> torch.Tensor:
    """A sublayer's output as a full ``[batch, pos, d_model]`` tensor (a planned sublayer
    returns ``(cols, values)``, zero outside ``cols``).

    >>> x = torch.zeros(1, 2, 3)
    >>> expand_update((torch.tensor([2]), torch.ones(1, 2, 1)), x)[0].tolist()
    [[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]
    """
    if not isinstance(update, tuple):
        return update
    cols, vals = update
    full = torch.zeros_like(like)
    full[..., cols] = vals
    return full


def _add(x: torch.Tensor, update: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> None:
    """Adds a sublayer's output to the stream in place: a full ``[batch, pos, d_model]``
    tensor, or ``(cols, values)`` that is 0 outside ``cols`` (each entry gets the same sum,
    x + value, as the full addition gives it)."""
    if isinstance(update, tuple):
        cols, vals = update
        if len(cols) and int(cols[-1] - cols[0]) == len(cols) - 1:  # a block: a view
            x[..., int(cols[0]) : int(cols[-1]) + 1] += vals
        elif 2 * len(cols) > x.shape[-1]:  # most columns: one full addition is cheaper
            x += expand_update(update, x)
        else:
            x[..., cols] += vals
    else:
        x += update
