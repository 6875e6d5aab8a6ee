"""Token-table heads: attention over classes of positions instead of over keys.

Many data-dependent heads (a histogram's ``Select(tokens, tokens, ==)``, a sort's comparison
of tokens) read, in their queries and keys, only directions that the token rows of the
embedding write. A position's query and key are then those of its token id (BOS's at
position 0), its scores against any key a table ``[class, class]``, and the head's output at
a query a sum over the classes of the keys it sees (see :class:`TablePlan`): ``O(batch pos
classes width)`` work instead of ``O(batch pos^2 width)``. :mod:`attnsim.model.plans` runs
these heads where the class sums cost less than the dense head.

>>> import torch
>>> from attnsim.model.config import ModelConfig
>>> from attnsim.model.transformer import Transformer
>>> t = Transformer(ModelConfig(n_layers=1, d_model=3, n_heads=1, d_head=1, d_mlp=0,
...                             d_bilinear=0, n_ctx=4, d_vocab=3))
>>> a = t.blocks[0].attn
>>> with torch.no_grad():  # score = a * b for the token ids a and b
...     t.W_E[1, 0], t.W_E[2, 0] = 1.0, 2.0
...     a.W_Q[0, 0, 0] = a.W_K[0, 0, 0] = a.W_V[0, 1, 0] = a.W_O[0, 0, 2] = 1.0
>>> table_heads(t)
((0,),)
>>> table_plans(t, ((),))[0][0].scores.tolist()
[[0.0, 0.0, 0.0], [0.0, 1.0, 2.0], [0.0, 2.0, 4.0]]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from attnsim.model import plan_core, plan_static
from attnsim.model.config import AttentionMode
from attnsim.model.costs import DIRECT_LOOKUP, PAIRS_PER_CHUNK, UNIQUE_MIN_LENGTH
from attnsim.model.hard import hard_selection
from attnsim.model.projection import columns, head_values

__all__ = [
    "TablePlan",
    "token_directions",
    "table_heads",
    "table_plans",
    "pays",
    "classes_of",
    "run",
    "flops",
    "RowTablePlan",
    "row_table_plans",
    "run_rows",
]


@dataclass(frozen=True)
class TablePlan:
    """A token-table head: its queries and keys read only directions that the token rows of
    the embedding write, so a position's query and key are those of its class (the values
    it holds in those directions, one per token id, and BOS's at position 0).

    Its scores are then a table ``[class, class]``, and a query of class a attends over
    classes: with ``G[c] [width]`` the sum of the values of the keys of class c that it sees
    and ``C[c]`` their count, hard attention selects the classes b present with ``T[a, b] >=
    max over present b' of T[a, b'] - tolerance`` and gives ``sum G[b] / sum C[b]`` over
    them; softmax gives ``sum w_b G[b] / sum w_b C[b]`` with ``w_b = exp(beta T[a, b] - max)``
    (the same sum as the dense one, grouped by class). With a causal mask ``G`` and ``C`` are
    prefix sums over positions. The work is ``O(batch pos classes width)``, not ``O(batch
    pos^2 width)``. At run time every position's class is looked up by exact comparison of
    the directions read; a position of no known class makes the head run dense.

    Attributes:
        head: the head's index in its layer.
        rows: ``[m]`` int64 residual directions its queries and keys read.
        classes: ``[classes, m]`` the distinct values those directions can hold.
        scores: ``[classes, classes]`` the score of a query of class a for a key of class b.
        value_width: the used width of its values.
        of_id: ``[2, d_vocab]`` int64 or None: the class of each token id at position 0 (row
            0) and past it (row 1), -1 where that row is no class. Set where the stream's
            token directions are the embedding's rows exactly (no numerical or vector token
            channels, whose non-finite values would reach them); the classes are then read
            from the token ids, with no comparison of rows.
        tops: ``[classes, classes]`` bool or None: where each row of ``scores`` takes its
            best value (:func:`fixed_parts`).
        fixed: ``[classes, classes]`` or None: the weights each query class gives where its
            best class is present (:func:`fixed_parts`; None where a row's best is not
            finite).
    """

    kind: ClassVar[str] = "table"  # what runs it (attnsim.model.plans.KINDS)

    head: int
    rows: torch.Tensor
    classes: torch.Tensor
    scores: torch.Tensor
    value_width: int
    of_id: torch.Tensor | None = None
    tops: torch.Tensor | None = None
    fixed: torch.Tensor | None = None

    @property
    def n_classes(self) -> int:
        return int(self.classes.shape[0])


def token_directions(transformer) -> list[torch.Tensor]:
    """The token directions before each layer's attention: ``[n_layers]`` masks ``[d_model]``.

    A direction is a token direction when only the token rows of the embedding set it apart:
    the numerical token direction leaves it 0, the position rows past 0 all write the same
    to it (position 0 is BOS's), and no sublayer before the layer writes it. Its value at a
    position is then ``W_E[id] + W_pos[1]`` (``W_E[0] + W_pos[0]`` at BOS) for the token id
    there, for every input."""
    with torch.no_grad():
        W_pos = transformer.W_pos
        token = transformer.W_E_num == 0
        if transformer.cfg.token_width:  # real-valued vector channels: not table lookups
            token = token & (transformer.W_E_vec == 0).all(dim=0)
        if W_pos.shape[0] > 1:
            token = token & (W_pos[1:] == W_pos[1:2]).all(dim=0)
        out = []
        for block in transformer.blocks:
            out.append(token)
            a = block.attn
            for h in a.active_heads().tolist():
                token = token & ~plan_static._writes(a.W_O[h])
            for _, w_out, *_ in plan_static._mlp_units(block.mlp):
                token = token & ~plan_static._writes(w_out)
        return out


def table_heads(transformer, heads=None) -> tuple[tuple[int, ...], ...]:
    """Per layer, the active heads that are not static and whose queries and keys read
    token directions only (see :class:`TablePlan`)."""
    heads = plan_static.static_heads(transformer) if heads is None else heads
    return tuple(tuple(p.head for p in layer) for layer in table_plans(transformer, heads))


def table_plans(transformer, heads) -> tuple[tuple[TablePlan, ...], ...]:
    """The :class:`TablePlan` of every token-table head, per layer."""
    masks = token_directions(transformer)
    W_E, W_pos = transformer.W_E, transformer.W_pos
    out = []
    with torch.no_grad():
        for layer, block in enumerate(transformer.blocks):
            a, token = block.attn, masks[layer]
            _, qk_width, ov_width = a._plan()
            found = []
            for h in a.active_heads().tolist():
                if h in heads[layer]:
                    continue
                wq = max(1, int(qk_width[h]))
                W_Q, W_K = a.W_Q[h, :, :wq], a.W_K[h, :, :wq]
                reads = plan_static._reads(W_Q) | plan_static._reads(W_K)
                if not bool((token | ~reads).all()):
                    continue
                rows = torch.nonzero(reads).flatten()
                # what the directions hold at a position past 0 (any token id) and at BOS's,
                # added as the embedding adds them
                later = W_E[:, rows] + W_pos[min(1, W_pos.shape[0] - 1), rows]
                bos = W_E[0, rows] + W_pos[0, rows]
                classes = torch.unique(torch.cat([later, bos[None]]), dim=0)
                x = W_E.new_zeros(classes.shape[0], W_E.shape[1])
                x[:, rows] = classes
                scores = (x @ W_Q) @ (x @ W_K).T  # [class, class], as the dense scores
                first = W_E[:, rows] + W_pos[0, rows]  # any token id at position 0
                of_id = torch.stack([_class_index(first, classes), _class_index(later, classes)])
                plain = not transformer.cfg.numerical_tokens and not transformer.cfg.token_width
                wv = max(1, int(ov_width[h]))
                of_id = of_id if plain else None
                found.append(
                    TablePlan(h, rows, classes, scores, wv, of_id, *fixed_parts(a.cfg, scores))
                )
            out.append(tuple(found))
    return tuple(out)


def _class_index(rows: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
    """``[len(rows)]`` int64: the class equal to each row, -1 where none is."""
    same = (rows[:, None, :] == classes[None]).all(dim=-1)  # [rows, class]
    return torch.where(same.any(dim=-1), same.to(torch.int8).argmax(dim=-1), -1)


def pays(p: TablePlan, n: int, attn) -> bool:
    """Whether a token-table head is cheaper on ``n`` positions than its dense form: per
    query, the class look-up and the sums over classes against the scores and sums over
    keys."""
    wq = int(attn._plan()[1][p.head])
    m, c, wv = int(p.rows.numel()), p.n_classes, p.value_width
    sums, dense = c * (2 * wv + 2), n * (max(1, wq) + wv + 2)
    if p.of_id is not None:  # the classes are read from the token ids
        return sums < dense
    if c * m <= DIRECT_LOOKUP:  # compared directly: c m per position
        return c * m + sums < dense
    # sorted first: its fixed cost pays from about 40 positions (measured on sort_unique)
    return n >= UNIQUE_MIN_LENGTH and sums < dense


def classes_of(p: TablePlan, x: torch.Tensor) -> torch.Tensor | None:
    """Each position's class ``[batch, pos]`` (by exact comparison of the directions the
    head reads), or None when some position holds no known class. The distinct rows are
    found first (a sort), then each is compared with the classes: ``O(batch pos m log)``
    work, not ``O(batch pos classes m)``.

    >>> p = TablePlan(0, torch.tensor([0, 1]), torch.tensor([[0.0, 1.0], [1.0, 0.0]]),
    ...               torch.zeros(2, 2), 1)
    >>> classes_of(p, torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]])).tolist()
    [[1, 0, 1]]
    >>> classes_of(p, torch.tensor([[[1.0, 1.0]]])) is None
    True
    """
    b, n, _ = x.shape
    xs = columns(x, p.rows)
    if p.n_classes * p.rows.numel() <= DIRECT_LOOKUP:  # few small classes: compare directly
        member = (xs[:, :, None, :] == p.classes.to(x.dtype)).all(dim=-1)  # [b, pos, class]
        if not bool(member.any(dim=-1).all()):
            return None
        return member.to(torch.int8).argmax(dim=-1)
    rows, inverse = plan_core.distinct_rows(xs.reshape(b * n, -1))  # hashed, then checked
    classes = p.classes.to(x.dtype)
    # each row's class by a dot product with fixed weights (sorted, then searched), checked
    # exactly; where that finds no equal class, every class is compared
    gen = torch.Generator().manual_seed(1)  # (drawn on the CPU: the same on every device)
    w = torch.rand(classes.shape[1], 1, generator=gen, device="cpu") + 1.0
    w = w.to(x)
    key_c, order = (classes @ w).flatten().sort()
    at = torch.searchsorted(key_c, (rows @ w).flatten()).clamp_(max=len(key_c) - 1)
    found = order[at]
    if bool((classes[found] == rows).all()):
        return found[inverse].reshape(b, n)
    member = (rows[:, None, :] == classes[None]).all(dim=-1)  # [rows, class]
    if not bool(member.any(dim=-1).all()):
        return None
    return member.to(torch.int8).argmax(dim=-1)[inverse].reshape(b, n)


def classes_of_ids(p: TablePlan, ids: torch.Tensor) -> torch.Tensor | None:
    """Each position's class ``[batch, pos]`` read from the token ids ``[batch, pos]`` (see
    ``TablePlan.of_id``), or None where some id's row is no class.

    >>> p = TablePlan(0, torch.tensor([0]), torch.tensor([[0.0], [1.0]]), torch.zeros(2, 2),
    ...               1, torch.tensor([[0, -1, 1], [1, 0, 1]]))
    >>> classes_of_ids(p, torch.tensor([[0, 1, 2, 1]])).tolist()
    [[0, 0, 1, 0]]
    >>> classes_of_ids(p, torch.tensor([[1, 2]])) is None  # id 1 at position 0: no class
    True
    """
    cls = p.of_id[1][ids]
    if ids.shape[1]:
        cls[:, 0] = p.of_id[0][ids[:, 0]]
    return None if bool((cls < 0).any()) else cls


def run(
    attn, p: TablePlan, x: torch.Tensor, ids: torch.Tensor | None = None, cache=None
) -> torch.Tensor | None:
    """A token-table head's mixed values ``[batch, pos, width]`` from sums over classes, or
    None when some position holds no known class in the directions the head reads. With the
    token ids ``ids [batch, pos]`` of ``x`` (and a plan whose ``of_id`` is set) the classes
    are read from them."""
    cls = None
    if ids is not None and p.of_id is not None:
        cls = classes_of_ids(p, ids)
    if cls is None:
        cls = classes_of(p, x)
    if cls is None:
        return None
    return _mix(attn, p, x, cls, cache)


@dataclass(frozen=True)
class RowTablePlan:
    """A head whose queries and keys read only categorical directions that some sublayer
    computes (a sort's comparison of computed keys): its classes are the distinct rows the
    directions it reads take in a batch, found at run time, and it runs as a
    :class:`TablePlan` over them where that costs less than the dense head.

    Attributes:
        head: the head's index in its layer.
        rows: ``[m]`` int64 residual directions its queries and keys read.
    """

    kind: ClassVar[str] = "rows"  # what runs it (attnsim.model.plans.KINDS)

    head: int
    rows: torch.Tensor


def row_table_plans(transformer, skip) -> tuple[tuple[RowTablePlan, ...], ...]:
    """Per layer, a :class:`RowTablePlan` for every active head not in ``skip[layer]``.

    >>> from attnsim import compile_program, library, rasp
    >>> m = compile_program(library.make_sort(rasp.tokens, rasp.tokens, max_seq_len=4,
    ...                                       min_key=1), vocab=[1, 2], max_seq_len=4)
    >>> [[p.head for p in layer] for layer in row_table_plans(m.model, [()] * 3)]
    [[], [0], [0]]
    """
    out = []
    with torch.no_grad():
        for layer, block in enumerate(transformer.blocks):
            a = block.attn
            qk_width = a._plan()[1]
            found = []
            for h in a.active_heads().tolist():
                if h in skip[layer]:
                    continue
                wq = max(1, int(qk_width[h]))
                reads = plan_static._reads(a.W_Q[h, :, :wq]) | plan_static._reads(a.W_K[h, :, :wq])
                found.append(RowTablePlan(h, torch.nonzero(reads).flatten()))
            out.append(tuple(found))
    return tuple(out)


def run_rows(
    attn, p: RowTablePlan, x: torch.Tensor, misses: dict | None = None, cache=None
) -> torch.Tensor | None:
    """A head's mixed values over the classes of its rows in this batch, or None where the
    batch's rows take so many distinct values that the dense head costs less (then it
    counts a miss in ``misses``, the layer's counts: after two, the head runs dense without
    looking).

    >>> import torch
    >>> from attnsim import compile_program, library, rasp
    >>> m = compile_program(library.make_sort(rasp.tokens, rasp.tokens, max_seq_len=4,
    ...                                       min_key=1), vocab=[1, 2], max_seq_len=4)
    >>> net, ids = m.model, m.encode([[2, 1, 2, 1], [1, 1, 2, 2]])[0]
    >>> streams = {2: None}
    >>> _ = net(ids, streams=streams)
    >>> attn, x = net.blocks[1].attn, streams[2]
    >>> reads = (attn.W_Q[0] != 0).any(1) | (attn.W_K[0] != 0).any(1)
    >>> p = RowTablePlan(0, torch.nonzero(reads).flatten())
    >>> z = run_rows(attn, p, x)
    >>> W_O = attn.W_O[0, : z.shape[-1]]
    >>> bool(torch.allclose(z @ W_O, attn.dense_heads(x, torch.tensor([0]))))
    True
    """

    b, n, _ = x.shape
    h = p.head
    _, qk_width, ov_width = attn._plan()
    wq, wv, m = max(1, int(qk_width[h])), max(1, int(ov_width[h])), int(p.rows.numel())
    classes, inverse = plan_core.distinct_rows(columns(x, p.rows).reshape(b * n, m))
    c = int(classes.shape[0])
    table = b * c * (min(c, n) + n) * (wv + 1) + 2 * c * m * wq + c * c * wq
    dense = b * n * (4 * m * wq + n * (wq + wv + 1))
    if table >= dense:
        if misses is not None:
            misses[("rows", h)] = misses.get(("rows", h), 0) + 1
        return None
    scores = (classes @ attn.W_Q[h, p.rows, :wq]) @ (classes @ attn.W_K[h, p.rows, :wq]).T
    plan = TablePlan(h, p.rows, classes, scores, wv, None, *fixed_parts(attn.cfg, scores))
    return _mix(attn, plan, x, inverse.view(b, n), cache)


def _mix(attn, p: TablePlan, x: torch.Tensor, cls: torch.Tensor, cache=None) -> torch.Tensor:
    """The head's output from each position's class ``cls [batch, pos]`` (``cache``: the
    runtime's layer cache, where the head's value projection is kept)."""
    cfg = attn.cfg
    b, n, _ = x.shape
    c, wv = p.n_classes, p.value_width
    v = head_values(attn, p.head, cache)(x)  # [batch, pos, wv]
    hard = cfg.attention is AttentionMode.HARD
    table = p.scores.to(x.dtype) if hard else cfg.beta * p.scores.to(x.dtype)
    inf = float("-inf")

    def weights(s: torch.Tensor) -> torch.Tensor:  # s: scores of the visible classes
        top = s.amax(dim=-1, keepdim=True)
        if hard:
            return hard_selection(s, cfg.hard_tolerance, best=top).to(x.dtype)
        return torch.exp(s - top)  # softmax's terms; an absent class (-inf) weighs 0

    if not cfg.causal:  # per sequence, each class's sum of values and count of keys
        at = (cls * b + torch.arange(b, device=x.device)[:, None]).view(-1)  # (class, seq.)
        ones = x.new_ones(b, n, 1)
        rows = torch.cat([v, ones], -1).view(b * n, wv + 1)
        both = x.new_zeros(c * b, wv + 1).index_add_(0, at, rows)
        fixed = _fixed_selection(p, both[:, wv].view(c, b))
        if fixed is not None:  # each query class selects the same classes in every sequence
            num = (fixed.to(x.dtype) @ both.view(c, b * (wv + 1))).view(c * b, wv + 1)
            return (num[:, :wv] / num[:, wv:]).index_select(0, at).view(b, n, wv)
        both = both.view(c, b, wv + 1).transpose(0, 1)  # [batch, class, wv + 1]
        count = both[..., wv]
        if c >= n and bool(torch.isfinite(table).all()):
            # more classes than positions: per query, over the key classes; an absent
            # class gets -inf added (its sums are 0: it only must not be the best)
            absent = x.new_zeros(b, 1, c).masked_fill_(count[:, None] == 0, inf)
            s = table.index_select(0, cls.view(-1)).view(b, n, c).add_(absent)
            if hard:  # the selection, 1.0 or 0.0, written over the scores
                w = hard_selection(s, cfg.hard_tolerance, inplace=True)
            else:
                w = weights(s)
            num = w @ both  # the sums and the counts of the classes each query selects
            return num[..., :wv] / num[..., wv:]
        s = table.expand(b, c, c).masked_fill((count == 0)[:, None, :], inf)
        num = weights(s) @ both  # [batch, query class, wv + 1]
        z = num[..., :wv] / num[..., wv:]  # [batch, query class, wv]
        return z.gather(1, cls[..., None].expand(b, n, wv))
    onehot = torch.nn.functional.one_hot(cls, c).to(x.dtype)  # [batch, pos, class]
    z = x.new_empty(b, n, wv)
    step = max(1, PAIRS_PER_CHUNK // max(1, n * c * wv))  # batch rows per pass
    for start in range(0, b, step):
        part = slice(start, start + step)
        oh = onehot[part]  # [rows, pos, class]
        count = oh.cumsum(dim=1)  # keys of each class up to each query
        sums = (oh[..., None] * v[part, :, None, :]).cumsum(dim=1)  # [rows, pos, class, wv]
        w = weights(table[cls[part]].masked_fill(count == 0, inf))  # [rows, pos, class]
        num = (w[..., None, :] @ sums).squeeze(-2)  # [rows, pos, wv]
        z[part] = num / (w * count).sum(dim=-1, keepdim=True)
    return z


def fixed_parts(cfg, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(tops, fixed)`` for a table head's ``scores [query class, key class]``: where each
    row takes its best value, and the weights every sequence gives where each query class's
    best class is present in it: then the best score present is the row's best, and the
    selection (hard attention: within the tolerance of it) or softmax's terms ``exp(beta
    (s - best))`` are the same for every sequence, an absent class adding 0 to the sums and
    the counts (:func:`_fixed_selection`). ``fixed`` is None where a row's best is not
    finite.

    >>> from attnsim.model.config import ModelConfig
    >>> cfg = ModelConfig(n_layers=1, d_model=1, n_heads=1, d_head=1, d_mlp=0, d_bilinear=0,
    ...                   n_ctx=3, d_vocab=2)
    >>> table = torch.tensor([[1.0, 0.0, 1.0], [0.0, 2.0, 1.0]], dtype=torch.float64)
    >>> tops, fixed = fixed_parts(cfg, table)
    >>> tops.tolist(), fixed.tolist()
    ([[True, False, True], [False, True, False]], [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    """
    table = scores if cfg.attention is AttentionMode.HARD else cfg.beta * scores
    top = table.amax(dim=1, keepdim=True)  # [query class, 1]
    tops = table == top
    if not bool(top.isfinite().all()):
        return tops, None
    if cfg.attention is AttentionMode.HARD:
        return tops, hard_selection(table, cfg.hard_tolerance, best=top).to(table.dtype)
    return tops, torch.exp(table - top)


def _fixed_selection(p: TablePlan, count: torch.Tensor) -> torch.Tensor | None:
    """``p.fixed`` where every query class's best class is present in every sequence
    (``count [class, batch]``: the keys of each class), else None (a selector width's head
    attends to BOS, which every sequence holds, with its row's best score).

    >>> from attnsim.model.config import ModelConfig
    >>> cfg = ModelConfig(n_layers=1, d_model=1, n_heads=1, d_head=1, d_mlp=0, d_bilinear=0,
    ...                   n_ctx=3, d_vocab=2)
    >>> table = torch.tensor([[1.0, 0.0, 1.0], [0.0, 2.0, 1.0]], dtype=torch.float64)
    >>> p = TablePlan(0, torch.tensor([0]), torch.zeros(3, 1), table, 1, None,
    ...               *fixed_parts(cfg, table))
    >>> _fixed_selection(p, torch.tensor([[1, 0], [1, 1], [1, 1]])) is p.fixed
    True
    >>> _fixed_selection(p, torch.tensor([[1, 1], [0, 1], [1, 1]])) is None  # class 1
    True
    """
    if p.fixed is None:
        return None
    always = (count > 0).all(dim=1)  # [key class]: present in every sequence
    return p.fixed if bool((p.tops & always).any(dim=1).all()) else None


def flops(attn, p: TablePlan, n: int) -> int:
    """FLOPs of one token-table head on ``n`` positions, batch 1: the class look-up, its
    values, the class sums (prefix sums when causal), the weights of the classes and the
    sums over them, its outputs."""
    m, c, wv = int(p.rows.numel()), p.n_classes, p.value_width
    rows_v = int(plan_static._reads(attn.W_V[p.head, :, :wv]).sum())
    cols_o = int(plan_static._writes(attn.W_O[p.head, :wv]).sum())
    sums = n * c * wv * (2 if attn.cfg.causal else 1)
    mix = 2 * (n if attn.cfg.causal else c) * c * (wv + 1)
    # the class look-up: every class compared, or the rows sorted first (see classes_of)
    lookup = n * c * m if c * m <= DIRECT_LOOKUP else n * m * max(1, n.bit_length())
    return lookup + 2 * n * rows_v * wv + sums + mix + 2 * n * wv * cols_o
