"""When a sparse model's residual directions are read, and how many are alive at once.

A direction of :class:`~attnsim.model.sparse.SparseTransformer`'s stream takes a row of the
store from the stage that writes it to the stage after its last reader. Which sublayers read
a direction depends on how the run executes: a head whose execution plan is a gather (a
static pattern, no run-time certificate) reads only its value directions, so the query and
key directions that gave it its pattern are read by nobody in a planned run. In the
universal simulator these are the position tables of every gather (``src_*``: which key each
position reads, and its square), one or two dense rows per head; dropping them from planned
runs is most of the difference between the static pass's stream and the run's.

Stages: layer ``l``'s attention reads before stage ``2l + 1``, its MLP before ``2l + 2``
(as :meth:`SparseTransformer._run` counts them).

>>> import torch
>>> from attnsim.model.sparse_ops import HeadMaps
>>> from attnsim.model.sparse import SparseHeads
>>> hs = SparseHeads(1, torch.tensor([[0, 0, 1]]), torch.ones(1),
...                  torch.tensor([[0, 2, 3]]), torch.ones(1))
>>> sublayer_reads([HeadMaps(hs)], [[]])  # head 0 reads 0 (query), 1 (key), 2 (value)
({0: 0, 1: 0, 2: 0}, {0: 0, 1: 0, 2: 0})
>>> class Gather: kind = "head"
>>> sublayer_reads([HeadMaps(hs)], [[]], plans=[{0: Gather()}])  # planned: values only
({2: 0}, {2: 0})
"""

from __future__ import annotations

__all__ = ["sublayer_reads", "rows_needed", "deferred_rows", "static_work"]


def sublayer_reads(heads, units, plans: list | None = None) -> tuple[dict, dict]:
    """``(first, last)``: direction -> the first and the last stage whose sublayer reads it.

    Args:
        heads: per layer, its :class:`~attnsim.model.sparse_ops.HeadMaps`.
        units: per layer, its list of :class:`~attnsim.model.sparse_ops.UnitMaps`.
        plans: per layer, head -> plan of a planned run (``None``: every head reads its
            query, key and value directions, as the static pass and dense runs do).
    """
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for li, (hm, ums) in enumerate(zip(heads, units)):
        planned = {} if plans is None else plans[li]
        reads = []
        for h in hm.active:
            p = planned.get(h)
            gather = p is not None and p.kind == "head"  # runs without its scores
            reads.append((2 * li, hm.reads_v[h] if gather else hm.reads_qk[h] | hm.reads_v[h]))
        reads += [(2 * li + 1, um.reads) for um in ums]
        for stage, cols in reads:
            for c in cols:
                first.setdefault(c, stage)
                last[c] = stage
    return first, last


def rows_needed(embed: dict, heads, units, last: dict, first: dict) -> int:
    """The most directions alive at once in a run whose directions live until ``last``
    (written by the embedding or a sublayer, freed after their last reader), position rows
    entering at the stages ``first`` gives (stage -> indices into ``embed["pos_dirs"]``):
    the store is allocated once at that size.

    >>> import torch
    >>> from attnsim.model.sparse_ops import HeadMaps
    >>> from attnsim.model.sparse import SparseHeads
    >>> hs = SparseHeads(1, torch.tensor([[0, 0, 1]]), torch.ones(1),
    ...                  torch.tensor([[0, 1, 2]]), torch.ones(1))  # reads 0, 1; writes 2
    >>> embed = {"E": torch.tensor([[1, 0], [1, 1]]), "num": torch.zeros(0, dtype=torch.long),
    ...          "vec": torch.zeros(0, 2, dtype=torch.long), "pos_dirs": torch.tensor([])}
    >>> rows_needed(embed, [HeadMaps(hs)], [[]], last={0: 0, 1: 0, 2: 3}, first={})
    3
    """
    born = {c: 0 for c in embed["E"][:, 1].tolist() + embed["num"].tolist() if c in last}
    born.update((c, 0) for c in embed["vec"][:, 1].tolist() if c in last)
    dirs = embed["pos_dirs"].tolist()
    for s, js in first.items():
        for j in js:
            born.setdefault(dirs[j], s)
    for li, (hm, ums) in enumerate(zip(heads, units)):
        for c in hm.written.tolist():
            born.setdefault(c, 2 * li + 1)
        for um in ums:
            for c in um.written.tolist():
                born.setdefault(c, 2 * li + 2)
    # a direction occupies a row from the stage that writes it through the stage after
    # its last reader (Store.release frees it at the end of that stage)
    delta = [0] * (2 * len(heads) + 5)
    for c, s in born.items():
        if c in last:
            delta[s] += 1
            delta[min(max(last[c], s - 1) + 2, len(delta) - 1)] -= 1
    peak = live = 0
    for x in delta:
        live += x
        peak = max(peak, live)
    return peak


def deferred_rows(heads, units, static_heads: list, pos_dirs: list[int]) -> list[set[int]]:
    """Per layer, the position rows (their directions) that nothing but static heads read,
    as queries or keys: each such row is listed at every layer whose static heads read it.
    The static pass writes them a few heads at a time while it finds those heads' plans, and
    drops them after, not all at once at their first reader's stage and kept to the last
    (the simulator's gathers have one or two dense position rows per head, thousands per
    layer, and a stack's layers read the same rows).

    >>> import torch
    >>> from attnsim.model.sparse_ops import HeadMaps
    >>> from attnsim.model.sparse import SparseHeads
    >>> hs = SparseHeads(2, torch.tensor([[0, 0, 1], [1, 4, 1]]), torch.ones(2),
    ...                  torch.tensor([[0, 2, 3], [1, 2, 3]]), torch.ones(2))
    >>> deferred_rows([HeadMaps(hs)], [[]], [[0]], [0, 1, 4])  # 1: head 1 (not static) too
    [{0}]
    >>> deferred_rows([HeadMaps(hs)] * 2, [[], []], [[0], [0]], [0, 1, 4])  # in both layers
    [{0}, {0}]
    """
    owners: dict[int, set[int]] = {}
    shared: set[int] = set()
    for li, (hm, ums) in enumerate(zip(heads, units)):
        static = set(static_heads[li])
        for h in hm.active:
            shared.update(hm.reads_v[h])
            if h not in static:
                shared.update(hm.reads_qk[h])
            else:
                for c in hm.reads_qk[h]:
                    owners.setdefault(c, set()).add(li)
        for um in ums:
            shared.update(um.reads)
    out: list[set[int]] = [set() for _ in heads]
    for c in set(pos_dirs) & set(owners) - shared:
        for li in owners[c]:
            out[li].add(c)
    return out


def static_work(
    heads, units, found: list, static: list | None = None
) -> tuple[int, list[set[int]], list[set[int]]]:
    """What the static pass that finds a sparse model's plans runs: ``(layers, heads,
    units)``. ``found``: per layer, the heads whose plans are found from the stream's static
    values (a static head whose keys the compiler did not write down, a partial head); they
    read their query and key directions. The pass stops after the last layer with such a
    head; before that it runs, per layer, only the heads and the unit groups (indices into
    the layer's units) that write a direction such a plan reads, directly or through other
    heads and units run for it: every writer of a direction that is read runs, so that the
    direction holds the full pass's value. Nothing, where no plan is found from the stream.
    ``static``: per stage, which directions are static there (``[d_model]`` bool masks, as
    ``SparseTransformer._analysis`` gives them); the pass reads those only (a plan reads the
    static part of its scores, a head or unit that it runs reads static directions), so only
    they are followed; without it every direction read is.

    >>> import torch
    >>> from attnsim.model.sparse_ops import HeadMaps
    >>> from attnsim.model.sparse import SparseHeads
    >>> one = torch.ones(1)
    >>> writer = SparseHeads(1, torch.tensor([[0, 0, 1]]), one, torch.tensor([[0, 2, 3]]), one)
    >>> reader = SparseHeads(1, torch.tensor([[0, 3, 1]]), one, torch.tensor([[0, 2, 4]]), one)
    >>> hm = [HeadMaps(writer), HeadMaps(reader)]  # layer 1's scores read what layer 0 writes
    >>> static_work(hm, [[], []], [[], [0]]), static_work(hm, [[], []], [[], []])
    ((2, [{0}, set()], [set(), set()]), (0, [set(), set()], [set(), set()]))
    """
    n_layers = len(heads)
    heads_run: list[set[int]] = [set() for _ in range(n_layers)]
    units_run: list[set[int]] = [set() for _ in range(n_layers)]
    need: set[int] = set()
    layers = 0

    def read(dirs, stage: int) -> set[int]:  # the static ones among what a stage reads
        if static is None:
            return set(dirs)
        mask = static[stage]
        return {d for d in dirs if mask[d]}

    for li in range(n_layers - 1, -1, -1):  # backwards: what a later read needs
        hm = heads[li]
        for i, um in enumerate(units[li]):
            if um.n and not need.isdisjoint(um.written.tolist()):
                units_run[li].add(i)
                need |= read(um.reads, 2 * li + 1)
        for h in hm.active:
            if not need.isdisjoint(hm.writes[h]):
                heads_run[li].add(h)
                need |= read(hm.reads_v[h] | hm.reads_qk[h], 2 * li)
        for h in found[li]:  # plans found here read their heads' scores
            need |= read(hm.reads_qk[h], 2 * li)
            layers = max(layers, li + 1)
    return layers, heads_run, units_run
