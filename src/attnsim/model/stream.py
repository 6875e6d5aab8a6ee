"""The residual stream between sublayers: updates added in place (a planned sublayer
returns only the columns it writes), and the stages a caller asks to keep."""

from __future__ import annotations

import ctypes
import functools
import sys

import torch

from attnsim.model.checks import sum_terms
from attnsim.model.costs import HUGE_FROM
from attnsim.model.projection import _block, add_columns

__all__ = [
    "Columns",
    "Forms",
    "expand_update",
    "check_positions",
    "plans_hold",
    "new_stream",
    "stamp",
]

_HUGE = 1 << 21


@functools.cache
def _libc():
    """The C library with ``madvise`` (loaded once per process), or None where there is none."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


def stamp(tensors) -> tuple:
    """What tells whether weights are the same as when something was derived from them:
    each tensor's data pointer and version counter (both change when a weight is replaced
    or edited in place, a resize included). An inference tensor (made inside
    ``torch.inference_mode()``) has no version counter: it gets a stamp equal to no other,
    so that nothing is reused for it (correct, only rebuilt each call).

    >>> w = torch.zeros(2)
    >>> a = stamp([w]); _ = w.add_(1); a == stamp([w])
    False
    >>> with torch.inference_mode():
    ...     v = torch.zeros(2)
    >>> stamp([v]) == stamp([v])
    False
    """
    ts = tuple(tensors)
    try:
        return tuple((t.data_ptr(), t._version) for t in ts)
    except RuntimeError:  # an inference tensor among them
        return tuple((t.data_ptr(), object() if t.is_inference() else t._version) for t in ts)


def new_stream(
    shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """``torch.empty(shape)`` for a large stream that is written once: on Linux its memory is
    marked for transparent huge pages first (``madvise``), so that writing it takes one
    page fault per 2 MiB instead of one per 4 KiB (measured: 53 MB in 3-9 ms instead of
    21 ms). Where that is not available the tensor is the same, only slower to fill.

    >>> new_stream((2, 3, 4), torch.float64).shape
    torch.Size([2, 3, 4])
    """
    out = torch.empty(shape, dtype=dtype, device=device)
    size = out.numel() * out.element_size()
    if size < HUGE_FROM or not sys.platform.startswith("linux") or out.device.type != "cpu":
        return out
    libc = _libc()
    if libc is not None:
        start = (out.data_ptr() + _HUGE - 1) & ~(_HUGE - 1)
        end = (out.data_ptr() + size) & ~(_HUGE - 1)
        if end > start:
            libc.madvise(start, end - start, 14)  # MADV_HUGEPAGE; a refusal changes nothing
    return out


class Columns:
    """A request in ``streams``: keep only these residual columns of that stage (a copy
    ``[batch, pos, len(cols)]``), not the whole stream."""

    def __init__(self, cols: torch.Tensor) -> None:
        self.cols = cols


class Forms(Columns):
    """A request in ``streams``: linear forms of that stage's residual columns, ``[batch,
    pos, len(forms)]``, not the columns they read (a run keeps one row per form, where
    :class:`Columns` would keep every column: U's run-time checks read forms of hundreds of
    columns). Each form is ``(cols, weights)``, summed term by term in its order from 0
    (``acc + w * x[c]``), as a reader of the columns would sum it; a form named in
    ``sizes`` gives the size of its terms instead, ``sum |w| |x[c]|`` (what its rounding is
    measured against).

    >>> x = torch.arange(6, dtype=torch.float64).reshape(1, 2, 3)  # [batch, pos, d]
    >>> req = Forms([(torch.tensor([0, 2]), torch.tensor([1.0, 10.0]))])
    >>> streams = {0: req}; _capture(streams, 0, x); streams[0][..., 0].tolist()
    [[20.0, 53.0]]
    """

    def __init__(self, forms: list[tuple[torch.Tensor, torch.Tensor]], sizes=()) -> None:
        self.sizes = frozenset(sizes)  # (the indices of the forms summed as sizes)
        for cols, weights in forms:
            if cols.shape != weights.shape or cols.dim() != 1 or not len(cols):
                raise ValueError(
                    f"a form is (cols, weights), both 1-D, of one length, not empty: got "
                    f"{tuple(cols.shape)} and {tuple(weights.shape)}"
                )
        self.forms = [(c.tolist(), w.tolist()) for c, w in forms]
        every = sorted({c for cols, _ in self.forms for c in cols})
        super().__init__(torch.tensor(every, dtype=torch.long, device="cpu"))

    @classmethod
    def named(cls, forms, index: dict, sizes=()) -> Forms:
        """Forms given as ``[(name, weight), ...]`` each, ``index``: name -> column.

        >>> Forms.named([[("a", 2.0), ("b", -1.0)]], {"a": 0, "b": 3}).forms
        [([0, 3], [2.0, -1.0])]
        """
        unknown = sorted({d for form in forms for d, _ in form if d not in index})
        if unknown:
            raise ValueError(
                f"forms read directions the index does not have: {unknown[:5]}; name "
                "residual directions of the model the request is for"
            )
        return cls(
            [
                (
                    torch.tensor([index[d] for d, _ in form], dtype=torch.long, device="cpu"),
                    torch.tensor([float(w) for _, w in form], dtype=torch.float64, device="cpu"),
                )
                for form in forms
            ],
            sizes,
        )

    def evaluate(self, column) -> torch.Tensor:
        """The forms from ``column(c)`` (column c, ``[batch, pos]``): ``[batch, pos, k]``.

        >>> req = Forms([(torch.tensor([0, 1]), torch.tensor([1.0, -1.0]))] * 2, sizes=[1])
        >>> req.evaluate(lambda c: torch.tensor([[3.0, 2.0][c]])).tolist()  # 3 - 2, |3| + |2|
        [[1.0, 5.0]]
        """
        size = lambda c: column(c).abs()  # noqa: E731
        return torch.stack(
            [
                sum_terms(size, [(k, abs(x)) for k, x in zip(c, w)])
                if i in self.sizes
                else sum_terms(column, zip(c, w))
                for i, (c, w) in enumerate(self.forms)
            ],
            dim=-1,
        )


def _capture(streams: dict | None, stage: int, x: torch.Tensor) -> None:
    """Fills ``streams[stage]`` (when asked for) with a copy of the stream, of the columns
    a :class:`Columns` request names, or the sums a :class:`Forms` request names."""
    if streams is not None and stage in streams:
        req = streams[stage]
        if isinstance(req, Forms):
            streams[stage] = req.evaluate(lambda c: x[..., c])
        elif isinstance(req, Columns):
            streams[stage] = x[..., req.cols.to(x.device)].clone()
        else:
            streams[stage] = x.clone()


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
    full.index_copy_(
        -1, cols.to(like.device), vals.to(like.dtype).expand(*like.shape[:-1], len(cols))
    )
    return full


def _add(x: torch.Tensor, update: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> None:
    """Adds a sublayer's output to the stream in place: a full ``[batch, pos, d_model]``
    tensor, or ``(cols, values)`` that is 0 outside ``cols`` (each entry gets the same sum,
    x + value, as the full addition gives it)."""
    if isinstance(update, tuple):
        cols, vals = update
        if _block(cols) is None and 2 * len(cols) > x.shape[-1]:  # most columns, scattered:
            x += expand_update(update, x)  # one full addition is cheaper
        else:  # a block of columns into a view, a few by index
            add_columns(x, cols, vals)
    else:
        x += update


def check_length(n, n_ctx: int) -> int:
    """``n``, a number of positions (BOS included) that plans can be built for: an integer
    from 1 to ``n_ctx``.

    >>> check_length(5, 5)
    5
    >>> try:
    ...     check_length(9, 5)
    ... except ValueError as exc:
    ...     print(str(exc)[:48])
    a length must be a number of positions from 1 to
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= n_ctx:
        raise ValueError(
            f"a length must be a number of positions from 1 to this model's n_ctx ({n_ctx}, "
            f"BOS included), got {n!r}; pass token_ids.shape[1]"
        )
    return n


def check_positions(token_ids: torch.Tensor, n_ctx: int, d_vocab: int) -> int:
    """The number of positions of ``token_ids [batch, pos]`` (BOS included), after checking
    that it fits the model and that every id is a row of its embedding (a negative id would
    otherwise index from the end, and a one-hot embedding would give a zero row).

    >>> check_positions(torch.tensor([[0, 2, 1]]), 4, 3)
    3
    >>> try:
    ...     check_positions(torch.tensor([[0, 3]]), 4, 3)
    ... except ValueError as exc:
    ...     print(str(exc)[:49])
    token id 3 is not a row of this model's embedding
    >>> try:
    ...     check_positions(torch.tensor([0.0, 1.0]), 4, 3)
    ... except ValueError as exc:
    ...     print(str(exc)[:54])
    token ids must be an integer tensor [batch, positions]
    """
    if token_ids.dim() != 2 or token_ids.is_floating_point() or token_ids.is_complex():
        raise ValueError(
            "token ids must be an integer tensor [batch, positions], got "
            f"{token_ids.dtype} of shape {tuple(token_ids.shape)}; encode inputs with the "
            "model's encode()"
        )
    if token_ids.dtype == torch.bool:
        raise ValueError(
            "token ids must be integers, got a bool tensor; encode inputs with the model's encode()"
        )
    n = token_ids.shape[1]
    if n > n_ctx:
        raise ValueError(f"input has {n} positions (BOS included), the model {n_ctx}")
    if token_ids.numel():
        lo, hi = (int(v) for v in torch.aminmax(token_ids))
        if lo < 0 or hi >= d_vocab:
            bad = lo if lo < 0 else hi
            raise ValueError(
                f"token id {bad} is not a row of this model's embedding (0 to {d_vocab - 1}); "
                "encode inputs with the model's encode()"
            )
    return n


def plans_hold(token_ids: torch.Tensor, token_values, reads_values) -> bool:
    """Whether execution plans, made for one input of each length, hold for these inputs:
    BOS (id 0) at position 0 and nowhere else (the static directions are those every other
    token row writes alike), and token values finite where the model reads them (a
    non-finite value reaches every direction as ``0 * inf``, NaN, which the definition
    carries through every score). Other inputs, which ``encode`` never makes, run the
    definition.

    >>> plans_hold(torch.tensor([[0, 2, 1]]), None, False)
    True
    >>> plans_hold(torch.tensor([[0, 2, 0]]), None, False)  # BOS at position 2
    False
    >>> plans_hold(torch.tensor([[0, 1]]), torch.tensor([[0.0, float("inf")]]), True)
    False
    """
    b, n = token_ids.shape
    # BOS at position 0 of every row and nowhere else: b zeros, none of them past position 0
    # (two reductions: this runs on every call, where a short input costs microseconds)
    zeros = b * n - int(torch.count_nonzero(token_ids))
    if n and (zeros != b or int(torch.count_nonzero(token_ids[:, 0]))):
        return False
    # a non-finite value makes the sum non-finite (a finite sum can overflow: then the
    # definition runs, as it would for an infinite value)
    return not (
        reads_values and token_values is not None and not bool(token_values.sum().isfinite())
    )
