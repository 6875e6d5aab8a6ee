"""Products of the residual stream with sparse weights, rounded as the dense forward rounds
them, to the bit or within one rounding per term.

A column of ``W`` with at most two non-zero weights is a sum whose order does not matter, so
it reads only its rows (the definition's bits); the columns of more terms are one product
over the rows they read where those are at most ``DENSE_SHARE`` of d_model (the others add
exact zeros), else over all of them. Such a product adds the same terms as the definition's
in another grouping, which the CPU's BLAS picks for the product's width and depth: within
one rounding per term of the definition (tests/test_runtime_exact_shortcuts.py). (U's
projections read a few dozen of hundreds of residual columns: U(32, 32, 1) in the vector
layout simulated in 63-75 ms instead of 83-95 ms, measured one thread, after this change.)
"""

from __future__ import annotations

import torch

from attnsim.model.costs import DENSE_SHARE, RUNS

__all__ = ["Projection", "head_output", "head_values"]


class Projection:
    """``x @ W`` as the dense forward computes it (see the module's note on rounding), with
    the split of ``W``'s columns made once: columns of one weight (a gather, scaled: the
    same product, ``x * w`` plus zeros), of two (a product over the rows they read) and of
    more (a product over the rows they read where those are few, else over d_model).

    >>> W = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 2.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
    >>> x = torch.tensor([[[2.0, 3.0, 4.0]]], dtype=torch.float64)
    >>> Projection(W)(x).tolist()
    [[[2.0, 9.0, 6.0]]]
    """

    def __init__(self, W: torch.Tensor) -> None:
        nonzero = W != 0
        terms = nonzero.sum(dim=0)
        one, few = terms == 1, (terms <= 2) & (terms != 1)  # (no weight: a zero column)
        if int(few.sum()) == 1:  # a product of one column would go through torch's
            # matrix-vector kernel, which rounds otherwise than a column of a wider one:
            # the one-weight columns stay in that product (as a wider W's columns would)
            one, few = torch.zeros_like(one), terms <= 2
        self.width = W.shape[1]
        self.one = torch.nonzero(one).flatten()
        self.f = torch.nonzero(few).flatten()
        self.m = torch.nonzero(terms > 2).flatten()
        self.rows = torch.nonzero(nonzero[:, self.f].any(dim=1)).flatten()
        self.W_f = W[self.rows][:, self.f]
        # a lone column of more terms is computed twice, as a product of two columns: alone
        # it would go through the matrix-vector kernel and round otherwise than the same
        # column of the definition's wider product (measured: 715 of 3,000 random sparse W)
        lone = len(self.m) == 1 and self.width > 1
        W_m = W[:, self.m.repeat(2)] if lone else W[:, self.m]
        # ... over the rows they read where those are few (the others add exact zeros)
        reads = torch.nonzero(nonzero[:, self.m].any(dim=1)).flatten()
        self.m_rows = reads if len(reads) <= DENSE_SHARE * W.shape[0] else None
        self.W_m = W_m if self.m_rows is None else W_m[self.m_rows]
        rows = nonzero[:, self.one].to(torch.int8).argmax(dim=0) if W.shape[0] else self.one
        scale = W[rows, self.one]
        # the one-weight columns: (the row each reads, its weight or None where all are 1)
        self.pick = (rows, None if bool((scale == 1).all()) else scale)

    def _read(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.m_rows is None else columns(x, self.m_rows)

    def _picked(self, x: torch.Tensor) -> torch.Tensor:
        rows, scale = self.pick
        picked = columns(x, rows)
        return picked if scale is None else picked * scale

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        parts = [
            (cols, fn)
            for cols, fn in (
                (self.one, self._picked),
                (self.f, lambda x: columns(x, self.rows) @ self.W_f),
                (self.m, lambda x: (self._read(x) @ self.W_m)[..., : len(self.m)]),
            )
            if len(cols)
        ]
        if len(parts) == 1 and len(parts[0][0]) == self.width:  # one kind, in order
            return parts[0][1](x)
        out = x.new_zeros(*x.shape[:-1], self.width) if not parts else None
        if out is None:  # (index_copy_: measured on [1, 3073, 134] float64, 1.7x faster
            out = x.new_empty(*x.shape[:-1], self.width)  # than assigning through an index)
            for cols, fn in parts:
                out.index_copy_(-1, cols, fn(x))
        return out


def _block(cols: torch.Tensor) -> slice | None:
    """``cols`` as a slice where they are consecutive and increasing, else None.

    A plan's column sets are made once and read on every call, so the answer is kept on
    the tensor itself with its version (an edit in place finds it again; an inference
    tensor, which has no version, is read each time).

    >>> c = torch.tensor([3, 4, 5]); _block(c), _block(torch.tensor([3, 5]))
    (slice(3, 6, None), None)
    >>> c[2] = 9; _block(c) is None  # changed in place: read again
    True
    """
    kept = getattr(cols, "_attnsim_block", None)
    inference = cols.is_inference()
    if kept is not None and not inference and kept[0] == cols._version:
        return kept[1]
    k = cols.numel()
    got = None
    if k and int(cols[-1]) - int(cols[0]) == k - 1 and (k < 3 or bool((cols.diff() == 1).all())):
        got = slice(int(cols[0]), int(cols[0]) + k)
    if not inference:
        cols._attnsim_block = (cols._version, got)
    return got


def columns(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``x[..., rows]``: a view where ``rows`` are consecutive and increasing (read it, do
    not write it), else one gather.

    >>> x = torch.arange(6.0).view(1, 6)
    >>> columns(x, torch.tensor([2, 3, 4])).tolist(), columns(x, torch.tensor([4, 0])).tolist()
    ([[2.0, 3.0, 4.0]], [[4.0, 0.0]])
    >>> columns(x, torch.tensor([5, 0, 1, 3])).tolist()  # runs [5], [0, 1], [3]
    [[5.0, 0.0, 1.0, 3.0]]
    """
    block = _block(rows)
    if block is not None:
        return x[..., block]
    runs = _runs(rows)
    if runs is not None:  # a few runs of consecutive columns: copied run by run
        return torch.cat([x[..., f : f + (b - a)] for f, a, b in runs], dim=-1)
    # one gather along the last axis (measured on [1, 3235, 684] float64, 40 columns:
    # 0.5 ms, against 1.2 ms for index_select there); the same values
    return torch.gather(x, -1, rows.to(x.device).expand(*x.shape[:-1], rows.numel()))


def _runs(cols: torch.Tensor) -> list | None:
    """``cols`` as fewer than ``RUNS`` runs of consecutive columns, ``[(first column, start,
    stop)]`` with ``cols[start:stop]`` the run, else None; kept on the tensor with its
    version, as :func:`_block` keeps its answer.

    >>> _runs(torch.tensor([5, 0, 1, 3]))
    [(5, 0, 1), (0, 1, 3), (3, 3, 4)]
    """
    kept = getattr(cols, "_attnsim_runs", None)
    inference = cols.is_inference()
    if kept is not None and not inference and kept[0] == cols._version:
        return kept[1]
    got = None
    if cols.numel() > 1:
        starts = torch.nonzero(cols.diff() != 1).flatten() + 1
        if starts.numel() < RUNS:
            edges = [0, *starts.tolist(), cols.numel()]
            firsts = cols[edges[:-1]].tolist()
            got = list(zip(firsts, edges[:-1], edges[1:]))
    if not inference:
        cols._attnsim_runs = (cols._version, got)
    return got


def add_columns(x: torch.Tensor, cols: torch.Tensor, vals: torch.Tensor) -> None:
    """``x[..., cols] += vals`` in place for distinct ``cols`` (into a view where they are
    consecutive and increasing, else one indexed add: the same sums either way; measured on
    [1, 3235, 684] float64, 40 columns: 0.7 ms against 4.4 ms for the indexed ``+=``).

    >>> x = torch.zeros(1, 4); add_columns(x, torch.tensor([1, 2]), torch.ones(1, 2))
    >>> add_columns(x, torch.tensor([3, 0]), torch.tensor([[2.0, 3.0]])); x.tolist()
    [[3.0, 1.0, 1.0, 2.0]]
    """
    block = _block(cols)
    if block is not None:
        x[..., block] += vals
        return
    runs = _runs(cols)
    if runs is not None and vals.shape[-1] == cols.numel():  # a few runs: into views
        for f, a, b in runs:
            x[..., f : f + (b - a)] += vals[..., a:b]
        return
    src = vals.to(x.dtype).expand(*x.shape[:-1], cols.numel())
    x.index_add_(-1, cols.to(x.device), src)


def set_columns(x: torch.Tensor, cols: torch.Tensor, vals: torch.Tensor) -> None:
    """``x[..., cols] = vals`` (into a view where ``cols`` are consecutive and increasing).

    >>> x = torch.zeros(1, 3); set_columns(x, torch.tensor([0, 1]), torch.ones(1, 2)); x.tolist()
    [[1.0, 1.0, 0.0]]
    """
    block = _block(cols)
    if block is not None:
        x[..., block] = vals
    else:
        src = vals.to(x.dtype).expand(*x.shape[:-1], cols.numel())
        x.index_copy_(-1, cols.to(x.device), src)


def head_values(attn, h: int, cache: dict | None = None) -> Projection:
    """Head h's value projection (``W_V[h]`` over its value width) as a
    :class:`Projection`, made once per weights where a ``cache`` is given (the runtime's
    layer cache, dropped when the weights change; None: made for this call).

    >>> from attnsim import compile_program, library
    >>> attn = compile_program(library.make_hist(), vocab="ab", max_seq_len=4).model.blocks[0].attn
    >>> cache = {}
    >>> head_values(attn, 0, cache) is head_values(attn, 0, cache)
    True
    """
    return _kept(
        cache, ("values", h), lambda: Projection(attn.W_V[h, :, : _value_width(attn, h)].detach())
    )


def head_output(attn, h: int, where: torch.Tensor, cache: dict | None = None) -> tuple:
    """Head h's output map onto the columns it writes: ``(those columns' places, by
    ``where`` [d_model], their :class:`Projection`)``, kept in ``cache`` as
    :func:`head_values` keeps its projection.

    >>> from attnsim import compile_program, library
    >>> attn = compile_program(library.make_hist(), vocab="ab", max_seq_len=4).model.blocks[0].attn
    >>> written, where = attn.written_columns()
    >>> cols, proj = head_output(attn, 0, where)
    >>> bool((where[written] == torch.arange(len(written))).all()), proj.width == len(cols)
    (True, True)
    """

    def make() -> tuple:
        W_O = attn.W_O[h, : _value_width(attn, h)].detach()
        cols = torch.nonzero(W_O.abs().sum(dim=0) > 0).flatten()
        return where[cols], Projection(W_O[:, cols])

    return _kept(cache, ("out", h), make)


def _value_width(attn, h: int) -> int:
    return max(1, int(attn._plan()[2][h]))


def _kept(cache: dict | None, key, make):
    """``make()``, kept in ``cache`` under ``key`` (None: made for this call)."""
    got = None if cache is None else cache.get(key)
    if got is None:
        got = make()
        if cache is not None:
            cache[key] = got
    return got


def _project(x: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """``x @ W`` (``[batch, pos, d_model] @ [d_model, width]``) as :class:`Projection`
    computes it: a column with at most two non-zero weights is a sum whose order does not
    matter, so it reads only its rows (the definition's bits); the others are one product
    over the rows they read where those are few (within one rounding per term)."""
    return Projection(W)(x)
