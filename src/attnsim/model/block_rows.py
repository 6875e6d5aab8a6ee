"""Rows of a long stream held as blocks of positions: memory, resident and reserved, only
where something non-zero was written.

The sparse model's stream (:class:`~attnsim.model.store.Store`) keeps each live direction
as one row over every position. In the universal simulator most rows are zero at most
positions: a direction of the row-wise work is non-zero at a few positions of a few hundred
thousand, a token channel only where the input region is. :class:`BlockRows` cuts the
positions into blocks of :data:`BLOCK` and gives a row a block of memory only where a write
to it is non-zero; every other block of every row reads the one shared zero block. The
blocks live in chunks of :data:`CHUNK_BYTES` (ordinary tensors, ``[blocks, batch,
BLOCK]``): reading rows is a gather from each chunk, adding to them an indexed add into
each; a released row's blocks go back to a free list, and a new chunk is added when it
runs out (nothing is copied). So the memory a pass takes, in resident pages and in address
space alike, follows the blocks it holds (not rows times positions, as pages of an
anonymous mapping would), on any system.

>>> import torch
>>> r = BlockRows(rows=3, batch=1, n=1000, dtype=torch.float64)
>>> v = torch.zeros(1, 1, 1000, dtype=torch.float64); v[0, 0, 700] = 2.0
>>> r.add(torch.tensor([1]), v)
>>> r[torch.tensor([0, 1, 1])][:, 0, 700].tolist(), r.held
([0.0, 2.0, 2.0], 1)
>>> r.clear([1]); r[torch.tensor([1])].abs().sum().item(), r.held
(0.0, 0)
"""

from __future__ import annotations

import torch

from attnsim.model.costs import BLOCK, CHUNK_BYTES

__all__ = ["BLOCK", "CHUNK_BYTES", "BlockRows"]


class BlockRows:
    """``rows`` rows of ``[batch, n]`` values, zero until written (module docstring).

    Reads like a tensor where the store needs it: ``rows_view[idx]`` for a 1-D index of
    rows gives ``[len(idx), batch, n]`` (a new tensor, or a view of one: it may not be
    contiguous); ``shape``, ``dtype`` and ``element_size()`` as a tensor's. Row 0 is never
    written (the store's zero row).

    Args:
        rows: how many rows.
        batch, n: the shape of one row.
        dtype: a floating dtype.
        device: where the blocks live.
        chunk: blocks per chunk (default: :data:`CHUNK_BYTES` worth, at least 2).
    """

    def __init__(self, rows: int, batch: int, n: int, dtype, device=None, chunk: int = 0):
        self.shape = torch.Size((rows, batch, n))
        self.dtype = dtype
        self.device = device
        self.nb = -(-n // BLOCK)  # blocks per row (the last may be partial)
        self.table = torch.zeros(rows, self.nb, dtype=torch.long, device=device)
        item = torch.empty((), dtype=dtype).element_size()
        self.chunk = max(2, chunk or CHUNK_BYTES // (batch * BLOCK * item))
        self.chunks: list[torch.Tensor] = []
        self.free = torch.zeros(0, dtype=torch.long, device=device)
        self.top = 0  # free[:top] are the free blocks
        self._add_chunk()
        self.free = self.free[:-1]  # block 0: the shared zero block, never handed out
        self.top -= 1
        self.chunks[0][0] = 0.0
        self.peak = 0

    def _add_chunk(self) -> None:
        k, ch = len(self.chunks), self.chunk
        b = self.shape[1]
        self.chunks.append(torch.empty(ch, b, BLOCK, dtype=self.dtype, device=self.device))
        ids = torch.arange((k + 1) * ch - 1, k * ch - 1, -1, device=self.device)  # low first
        self.free = torch.cat([ids, self.free[: self.top]])
        self.top = len(self.free)

    @property
    def held(self) -> int:
        """Blocks in use now."""
        return len(self.chunks) * self.chunk - 1 - self.top

    def element_size(self) -> int:
        return self.chunks[0].element_size()

    def resident_mb(self) -> float:
        """MB of the blocks in use now."""
        return self.held * self.chunks[0][0].numel() * self.element_size() / 2**20

    def reserved_mb(self) -> float:
        """MB of the chunks (the blocks in use, and the free ones)."""
        return sum(c.numel() for c in self.chunks) * self.element_size() / 2**20

    def _split(self, ids: torch.Tensor):
        """Per chunk that ``ids`` (flat block ids) touch: (chunk, where in ``ids``, the
        offsets inside the chunk)."""
        if len(self.chunks) == 1 or not len(ids):
            return [(self.chunks[0], None, ids)]
        which = torch.div(ids, self.chunk, rounding_mode="floor")
        out = []
        for k in torch.unique(which).tolist():
            at = torch.nonzero(which == k).flatten()
            out.append((self.chunks[k], at, ids[at] - k * self.chunk))
        return out

    def __getitem__(self, idx: torch.Tensor) -> torch.Tensor:
        return self.window(idx, 0, self.shape[2])

    def window(self, idx: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        """Rows ``idx`` on positions ``lo .. hi - 1``: ``[len(idx), batch, hi - lo]`` (only
        the blocks there are read).

        >>> r = BlockRows(rows=2, batch=1, n=1000, dtype=torch.float64)
        >>> v = torch.zeros(1, 1, 1000, dtype=torch.float64); v[0, 0, 700] = 2.0
        >>> r.add(torch.tensor([1]), v)
        >>> r.window(torch.tensor([1]), 699, 702).flatten().tolist()
        [0.0, 2.0, 0.0]
        """
        b = self.shape[1]
        j0, j1 = lo // BLOCK, -(-hi // BLOCK)
        ids = self.table[idx, j0:j1].flatten()
        # one gather from chunk 0, the blocks of other chunks (and block 0, the shared
        # zero block) read as its block 0; then the blocks of the other chunks over them
        which = torch.div(ids, self.chunk, rounding_mode="floor")
        other = torch.nonzero(which).flatten() if len(self.chunks) > 1 else ids[:0]
        base = ids if not len(other) else ids.masked_fill(which != 0, 0)
        got = self.chunks[0].index_select(0, base)
        if len(other):
            for chunk, at, off in self._split(ids[other]):
                got.index_copy_(0, other[at], chunk.index_select(0, off))
        out = got.view(len(idx), j1 - j0, b, BLOCK).permute(0, 2, 1, 3)
        out = out.reshape(len(idx), b, (j1 - j0) * BLOCK)
        return out[:, :, lo - j0 * BLOCK : hi - j0 * BLOCK]  # (a view)

    def add(self, rows: torch.Tensor, values: torch.Tensor, at: int = 0, nonzero=None) -> None:
        """Adds ``values [len(rows), batch, w]`` to the distinct ``rows`` on positions ``at
        .. at + w - 1``, block by block where a block of ``values`` is non-zero (a NaN
        counts as non-zero). ``nonzero [len(rows), w]``: where ``values`` is non-zero in
        some sequence, where the caller knows it (else found here)."""
        k, b, w = values.shape if values.dim() == 3 else (-1, -1, -1)
        if k != len(rows) or b != self.shape[1] or at < 0 or at + w > self.shape[2]:
            raise ValueError(
                f"BlockRows.add: values must be [len(rows), batch, w] = [{len(rows)}, "
                f"{self.shape[1]}, w] with at + w <= {self.shape[2]} (at = {at}), got "
                f"{list(values.shape)}: pass one row of values per row, over positions of "
                "these rows"
            )
        j0, j1 = at // BLOCK, -(-(at + w) // BLOCK)
        if nonzero is None:
            nonzero = values.ne(0).any(1)
        if at % BLOCK or w != (j1 - j0) * BLOCK:  # zeros to whole blocks (past n: unread)
            whole = nonzero.new_zeros(k, (j1 - j0) * BLOCK)
            whole[:, at - j0 * BLOCK : at - j0 * BLOCK + w] = nonzero
            nonzero = whole
        nz = nonzero.unflatten(1, (j1 - j0, BLOCK)).any(2).bool()  # [k, blocks]
        if not bool(nz.any()):
            return
        tbl = self.table[rows, j0:j1]
        new = nz & (tbl == 0)
        m = int(new.sum())
        if m:
            tbl[new] = self._take(m)
            self.table[rows, j0:j1] = tbl
        ks, js = torch.nonzero(nz, as_tuple=True)
        fresh = new[ks, js]  # a new block takes its values whole (whatever it held before)
        for chunk, part, off in self._split(tbl[ks, js]):
            kp, jp, fp = (ks, js, fresh) if part is None else (ks[part], js[part], fresh[part])
            for sel, v in _blocks(values, kp, jp, at - j0 * BLOCK):
                o, f = (off, fp) if sel is None else (off[sel], fp[sel])
                if bool(f.all()):
                    chunk.index_copy_(0, o, v)
                elif not bool(f.any()):
                    chunk.index_add_(0, o, v)
                else:
                    chunk.index_copy_(0, o[f], v[f])
                    chunk.index_add_(0, o[~f], v[~f])

    def _take(self, m: int) -> torch.Tensor:
        """``m`` blocks from the free list (new chunks where it is short), their content
        left as it is: :meth:`add` writes them whole."""
        while m > self.top:
            self._add_chunk()
        got = self.free[self.top - m : self.top].clone()
        self.top -= m
        self.peak = max(self.peak, self.held)
        return got

    def clear(self, rows: list[int]) -> None:
        """Sets these rows to 0; their blocks go back to the free list."""
        if not rows:
            return
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.table.device)
        tbl = self.table[idx]
        gone = tbl[tbl > 0]
        if len(gone):
            if self.top + len(gone) > len(self.free):
                self.free = torch.cat([self.free[: self.top], gone])
            else:
                self.free[self.top : self.top + len(gone)] = gone
            self.top += len(gone)
        self.table[idx] = 0

    def grow_rows(self, rows: int) -> None:
        """Room for ``rows`` rows (the new ones zero)."""
        more = rows - self.shape[0]
        if more > 0:
            extra = torch.zeros(more, self.nb, dtype=torch.long, device=self.table.device)
            self.table = torch.cat([self.table, extra])
            self.shape = torch.Size((rows, *self.shape[1:]))


def _blocks(values: torch.Tensor, ks: torch.Tensor, js: torch.Tensor, lead: int) -> list:
    """Blocks ``(ks, js)`` of ``values [k, batch, w]`` placed ``lead`` positions into
    whole blocks (0 around them), without copying ``values`` whole: ``(where in ks, the
    blocks [len, batch, BLOCK])`` per kind (inner blocks, read from a view of ``values``;
    the first and the last block, padded), ``None`` for all of them.

    >>> v = torch.arange(1.0, 9.0, dtype=torch.float64).view(1, 1, 8)
    >>> [(s.tolist(), x[0, 0, :10].tolist()) for s, x in _blocks(v, torch.tensor([0]),
    ...                                                          torch.tensor([0]), 2)]
    [([0], [0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])]
    """
    w = values.shape[2]
    nb = -(-(lead + w) // BLOCK)
    tail = nb * BLOCK - lead - w
    if not lead and not tail:
        return [(None, values.unflatten(2, (nb, BLOCK))[ks, :, js])]
    out = []
    first = (js == 0) & (lead > 0)  # padded blocks: the first after lead zeros, the last
    last = (js == nb - 1) & (tail > 0) & ~first  # before tail zeros (one block: the first)
    inner = ~(first | last)
    for pad, lo in [(first, lead), (last, 0)]:
        sel = torch.nonzero(pad).flatten()
        if len(sel):
            s = 0 if lo else (nb - 1) * BLOCK - lead  # its first value
            c = min(w - s, BLOCK - lo)
            got = values.new_zeros(len(sel), values.shape[1], BLOCK)
            got[:, :, lo : lo + c] = values[ks[sel], :, s : s + c]
            out.append((sel, got))
    sel = torch.nonzero(inner).flatten()
    if len(sel):
        s = BLOCK - lead if lead else 0
        ni = (w - s) // BLOCK  # the whole blocks of values from s
        view = values[:, :, s : s + ni * BLOCK].unflatten(2, (ni, BLOCK))
        out.append((sel, view[ks[sel], :, js[sel] - (1 if lead else 0)]))
    return out
