"""A sparse model's position embedding: the columns of the static S-ops of the position.

:class:`~attnsim.model.sparse.SparseTransformer` keeps each position column as a default
value and its listed entries (``embed["pos_at"]``: position, column; ``embed["pos_at_w"]``:
the value). :class:`PositionTable` builds any set of columns over the first ``n`` positions
from them, finding a column's entries by slicing (the compiler lists them column by column;
other orders are sorted once).

>>> import torch
>>> embed = {"pos_dirs": torch.tensor([7, 9]), "pos_default": torch.tensor([0.0, -1.0]),
...          "pos_at": torch.tensor([[2, 0], [1, 1]]), "pos_at_w": torch.tensor([5.0, 3.0])}
>>> PositionTable(embed).rows(torch.tensor([1, 0]), 3).tolist()  # BOS (position 0) holds 0
[[0.0, 3.0, -1.0], [0.0, 0.0, 5.0]]
>>> PositionTable(embed).index[9]
1
"""

from __future__ import annotations

import torch

__all__ = ["PositionTable"]


class PositionTable:
    """The position columns of ``embed`` (see the module docstring).

    Attributes:
        index: direction -> its column (index into ``embed["pos_dirs"]``).
    """

    def __init__(self, embed: dict[str, torch.Tensor]) -> None:
        self.embed = embed
        self.index = {c: j for j, c in enumerate(embed["pos_dirs"].tolist())}
        col = embed["pos_at"][:, 1]
        sorted_ = len(col) < 2 or bool((col[1:] >= col[:-1]).all())
        self._order = None if sorted_ else torch.argsort(col, stable=True)
        ends = torch.bincount(col, minlength=len(embed["pos_dirs"])).cumsum(0)
        self._starts = [0, *ends.tolist()]

    def groups(self, first: dict[int, int]) -> dict[int, list[int]]:
        """Stage -> the columns (indices into ``embed["pos_dirs"]``) whose directions are
        first read there (``first``: direction -> stage), in column order."""
        out: dict[int, list[int]] = {}
        for c, j in self.index.items():
            if c in first:
                out.setdefault(first[c], []).append(j)
        return out

    def entries(self, js: torch.Tensor) -> torch.Tensor:
        """The rows of ``embed["pos_at"]`` that list entries of the columns ``js``."""
        st = self._starts
        parts = [torch.arange(st[j], st[j + 1]) for j in js.tolist()]
        sel = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
        return sel if self._order is None else self._order[sel]

    def rows(self, js: torch.Tensor, n: int) -> torch.Tensor:
        """Columns ``js`` on the first ``n`` positions, ``[len(js), n]`` float64: each
        column's default, its listed entries, 0 at BOS (position 0)."""
        e = self.embed
        out = e["pos_default"][js][:, None].expand(len(js), n).clone()
        out[:, 0] = 0.0
        where = torch.full((len(e["pos_dirs"]),), -1, dtype=torch.long)
        where[js] = torch.arange(len(js))
        at, w = e["pos_at"], e["pos_at_w"]
        sel = self.entries(js)
        sel = sel[at[sel, 0] < n]
        out[where[at[sel, 1]], at[sel, 0]] = w[sel]
        return out
