"""Sparse storage: a compiled transformer held as its non-zero weights, run column by column.

A compiled model's weights are mostly zeros: every head reads and writes a few residual
directions, every MLP unit a few more. The dense :class:`~attnsim.model.transformer.Transformer`
stores ``[n_heads, d_model, d_head]`` per layer all the same, and its residual stream holds
every direction at every position. That is fine for programs of a few hundred directions;
the universal simulator at real sizes has tens of thousands of directions, thousands of
heads and ~20,000 positions, where the dense form needs over 100 GB.

:class:`SparseTransformer` holds the same model as coordinate lists (COO): per layer, the
score terms ``(head, query direction, key direction, weight)``, the value terms ``(head,
source, destination, weight)``, and each MLP unit's input and output forms; the embedding
as its non-zero rows. Its forward pass computes the same function:

- **one primitive**, :class:`Linear`: a sparse map from stream directions to columns
  (query, key and value factors of each head, the units' inputs, their outputs): a gather
  of the rows it reads and one indexed sum over its terms;
- **a stream of live columns**: a direction takes a row when it is first written (a
  position row of the embedding: at the stage that first reads it) and gives it back after
  the last sublayer that reads it (or the last stage a caller asked for), so the memory
  follows the directions alive at once, not d_model (the compiler places a sparse model's
  blocks as late as its depth allows to keep those stretches short);
- **execution plans**: heads whose pattern only the length decides run as gathers and
  sparse sums (found once per length on the static part of the stream, with the dense
  forward's arithmetic); hard heads whose scores are partly static run on the candidate
  keys their static part selects when a run-time certificate shows the rest cannot reach
  past them (as in :mod:`attnsim.model.plans`); the other heads run dense, in row chunks.

:meth:`SparseTransformer.to_dense` gives the dense Transformer with exactly these weights
(the same factorisation as assembly), which the tests compare it with: both compute the same
sums of the same terms, possibly in another order (differences of the order of one rounding).

>>> from attnsim import compile_program, library, rasp
>>> m = compile_program(library.make_reverse(rasp.tokens), vocab="ab", max_seq_len=4,
...                     storage="sparse")
>>> type(m.model).__name__, m.run(["a", "b", "b"])
('SparseTransformer', ['b', 'b', 'a'])
"""

from __future__ import annotations

import torch

from attnsim.model import gather_batch, head_parts, liveness, plan_static
from attnsim.model.config import AttentionMode, ModelConfig
from attnsim.model.costs import PART_BYTES, READS_KEPT
from attnsim.model.plans import candidate_plan, keys_plan, pattern_plan
from attnsim.model.positions import PositionTable
from attnsim.model.sparse_layers import OnTheCpu, SparseHeads, SparseLayer, SparseUnits
from attnsim.model.sparse_ops import (
    HeadMaps,
    Linear,
    Store,
    UnitMaps,
    check_groups_apart,
    dense_of,
    distinct_nonzero,
    long_tensor,
    split_qk,
    static_reads,
    unit_output,
    writes_of,
)
from attnsim.model.sparse_plans import mixed, run_plan, whole_head
from attnsim.model.stream import Columns, Forms, check_length, check_positions, plans_hold

__all__ = ["Linear", "SparseTransformer", "SparseLayer", "SparseHeads", "SparseUnits"]


class SparseTransformer(OnTheCpu):
    """A compiled transformer stored as its non-zero weights (see the module docstring).

    Called as a model, it runs the definition in this storage: every head over ``[query,
    key]`` in row chunks (one-sided heads over the distinct rows of their dynamic side). A
    :class:`attnsim.model.runtime.Runtime` runs it by its plans (:meth:`run`) and keeps
    them, with everything else an executor keeps between calls; the model keeps only what
    it derives from its weights.

    Attributes:
        cfg: the :class:`ModelConfig` (the same as the dense form's).
        layers: per block, a :class:`SparseLayer`.

    >>> from attnsim import compile_program, library
    >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=3, storage="sparse")
    >>> net = m.model
    >>> again = SparseTransformer.from_state(net.cfg, net.layout(), net.state_dict())
    >>> ids, vals = m.encode(["aba"])
    >>> bool(torch.equal(again(ids, vals), net(ids, vals)))
    True
    >>> bool(torch.allclose(m.runtime(ids, vals), net(ids, vals), rtol=1e-12))  # by its plans
    True
    >>> net.plan_summary(), net.nonzero_weights() == m.report().nonzero_parameters
    ({'static_heads': [[]], 'partial_heads': [[0]]}, True)
    >>> net.position_rows(torch.arange(len(net.embed["pos_dirs"])), 4).shape[1]  # [cols, pos]
    4
    """

    storage = "sparse"

    def __init__(
        self,
        cfg: ModelConfig,
        layers: list[SparseLayer],
        embed: dict[str, torch.Tensor],
    ) -> None:
        self.cfg = cfg
        self.layers = layers
        # embed: "E" [T, 2] (token row, direction) + "E_w"; "num" [T] directions + "num_w";
        # "vec" [T, 2] (channel, direction) + "vec_w"; "pos_dirs" [P] with
        # "pos_default" [P] (each column's value at most positions) and the other entries,
        # "pos_at" [T, 2] (position, column) + "pos_at_w" (see position_rows)
        self.embed = embed
        # per layer and head, what the compiler knew of the head's keys (see
        # attnsim.model.patterns; () when unknown): the plans take them from here
        self.head_patterns: tuple = ()
        self._heads = [HeadMaps(layer.heads) for layer in layers]
        self._units = [[UnitMaps(u) for u in layer.units] for layer in layers]
        for li, ums in enumerate(self._units):
            check_groups_apart(li, ums)

    # -- what it is ----------------------------------------------------------------------
    @property
    def dtype(self) -> torch.dtype:
        return torch.float64 if self.cfg.dtype == "float64" else torch.float32

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Every stored tensor by name (for checkpoints)."""
        out = {f"embed.{k}": v for k, v in self.embed.items()}
        for li, layer in enumerate(self.layers):
            h = layer.heads
            out[f"blocks.{li}.attn.qk"], out[f"blocks.{li}.attn.qk_w"] = h.qk, h.qk_w
            out[f"blocks.{li}.attn.ov"], out[f"blocks.{li}.attn.ov_w"] = h.ov, h.ov_w
            for u in layer.units:
                pre = f"blocks.{li}.mlp.{u.kind}"
                for part in ("inputs", "second", "outputs"):
                    out[f"{pre}.{part}"] = getattr(u, part)
                    out[f"{pre}.{part}_w"] = getattr(u, f"{part}_w")
        return out

    def layout(self) -> dict:
        """What :meth:`from_state` needs besides the tensors (heads and units per layer)."""
        return {
            "storage": "sparse",
            "layers": [
                {
                    "n_heads": layer.heads.n_heads,
                    "units": [[u.kind, u.n_units] for u in layer.units],
                }
                for layer in self.layers
            ],
        }

    @classmethod
    def from_state(cls, cfg: ModelConfig, layout: dict, tensors: dict) -> SparseTransformer:
        """The model :meth:`state_dict` and :meth:`layout` describe."""
        layers = []
        for li, spec in enumerate(layout["layers"]):
            pre = f"blocks.{li}"
            heads = SparseHeads(
                int(spec["n_heads"]),
                tensors[f"{pre}.attn.qk"],
                tensors[f"{pre}.attn.qk_w"],
                tensors[f"{pre}.attn.ov"],
                tensors[f"{pre}.attn.ov_w"],
            )
            units = []
            for kind, n in spec["units"]:
                p = f"{pre}.mlp.{kind}"
                units.append(
                    SparseUnits(
                        kind,
                        int(n),
                        *(
                            tensors[f"{p}.{part}{s}"]
                            for part in ("inputs", "second", "outputs")
                            for s in ("", "_w")
                        ),
                    )
                )
            layers.append(SparseLayer(heads, units))
        embed = {k[len("embed.") :]: v for k, v in tensors.items() if k.startswith("embed.")}
        return cls(cfg, layers, embed)

    def plan_summary(self) -> dict:
        """The heads the plan executor runs without ``[query, key]`` scores, per layer (as
        :func:`attnsim.model.plans.summary`)."""
        a = self._analysis()
        return {
            "static_heads": [list(hs) for hs in a["heads"]],
            "partial_heads": [list(hs) for hs in a["partial"]],
        }

    def nonzero_weights(self) -> int:
        """The non-zero entries of the dense form's weights (counted on the factors)."""
        e = self.embed
        total = int((e["E_w"] != 0).sum() + (e["num_w"] != 0).sum() + (e["vec_w"] != 0).sum())
        # position columns: the default (where non-zero) at every listed-free position but
        # BOS, and the listed entries that are non-zero
        cols = e["pos_at"][:, 1]
        listed = torch.bincount(cols, minlength=len(e["pos_dirs"]))
        free = (self.cfg.n_ctx - 1 - listed) * (e["pos_default"] != 0)
        total += int(free.sum()) + int((e["pos_at_w"] != 0).sum())
        for hm, ums in zip(self._heads, self._units):
            maps = [m[h] for h in hm.active for m in (hm.Q, hm.K, hm.V, hm.O)]
            total += distinct_nonzero(maps + [lin for um in ums for lin in (um.A, um.B, um.O)])
        return total

    # -- static analysis -----------------------------------------------------------------
    def _analysis(self) -> dict:
        """Which directions are static (the same for every input of a length) after each
        stage (0: the embedding, 2l + 1 and 2l + 2: after layer l's sublayers), and per
        layer the static heads (queries and keys read static directions only), the partial
        ones (hard heads whose queries or keys read some static direction) and, per kind of
        unit, which units read static directions only."""
        got = getattr(self, "_analysis_cache", None)
        if got is None:
            e = self.embed
            static = torch.ones(self.cfg.d_model, dtype=torch.bool)
            static[e["num"]] = False
            static[e["vec"][:, 1]] = False
            E = e["E"]
            if len(E):  # a direction the token rows (1, 2, ...) write differently is dynamic
                full = e["E_w"].new_zeros(max(int(E[:, 0].max()) + 1, 2), self.cfg.d_model)
                full[E[:, 0], E[:, 1]] = e["E_w"]
                if full.shape[0] > 2:
                    static &= (full[1:] == full[1:2]).all(dim=0)
            layers = [
                (
                    [(h, hm.reads_qk[h], hm.reads_v[h], hm.writes[h]) for h in hm.active],
                    [(static_reads(um), writes_of(um)) for um in ums],
                )
                for hm, ums in zip(self._heads, self._units)
            ]
            hard = self.cfg.attention is AttentionMode.HARD
            got = self._analysis_cache = plan_static.static_flow(static, layers, hard)
        return got

    # -- the forward pass ----------------------------------------------------------------
    def forward(self, token_ids, token_values=None, cache=None, streams=None, keep=None):
        """As :meth:`Transformer.forward` (no ``cache``: the sparse form has no hooks);
        ``keep``: return only these columns of the final stream ``[batch, pos, len]``
        (otherwise the whole stream ``[batch, pos, d_model]``). A model that reads vector
        tokens takes ``token_values [batch, m, token_width]`` for the first ``m <= pos``
        positions: the tokens after read as 0 (U's long inputs are zero past their first
        few thousand positions). The definition: no plans (:meth:`run` with a runtime runs
        them)."""
        return self.run(token_ids, token_values, cache, streams, keep, None)

    __call__ = forward

    def run(self, token_ids, token_values, cache, streams, keep, runtime) -> torch.Tensor:
        """:meth:`forward` under ``runtime`` (a :class:`attnsim.model.runtime.Runtime` of
        this model: its executor, its plans for the length and what its layers learn
        between calls), or the definition (None).

        >>> from attnsim import compile_program, library
        >>> from attnsim.model.runtime import Runtime
        >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=3, storage="sparse")
        >>> ids, vals = m.encode(["aba"])
        >>> planned = m.model.run(ids, vals, None, None, None, Runtime(m.model, "plan"))
        >>> bool(torch.allclose(planned, m.model(ids, vals), rtol=1e-12))
        True
        """
        if runtime is not None and runtime.net is not self:
            raise ValueError(
                "this runtime runs another model (its plans are that model's): pass "
                "Runtime(model) of this model, or call the model for its definition"
            )
        if cache is not None:
            raise ValueError(
                "a model in sparse storage records no hooks (run_with_cache); compile with "
                "storage='dense' to read every head's scores and patterns"
            )
        executor = "dense" if runtime is None else runtime.executor
        if executor not in ("auto", "plan", "dense"):
            raise ValueError(
                "executor must be one of ('auto', 'plan', 'dense') for sparse storage (the "
                f"feature-major 'fused' and 'jit' need dense weights), got {executor!r}"
            )
        n = check_positions(token_ids, self.cfg.n_ctx, self.cfg.d_vocab)
        if self.cfg.token_width:
            head_parts.check_vector_tokens(self.cfg.token_width, token_ids, token_values)
        reads_values = self.cfg.numerical_tokens or self.cfg.token_width
        if executor == "dense" or not plans_hold(token_ids, token_values, reads_values):
            return self._run(token_ids, token_values, streams, keep, None, None, runtime)
        return self._run(token_ids, token_values, streams, keep, runtime.plans(n), None, runtime)

    def _run(self, ids, vals, streams, keep, plans, found, runtime=None):
        """The forward pass (``runtime``: what it keeps between calls, see :meth:`run`).
        With ``found`` (a list), the static pass: only the static directions on the
        canonical input; each layer's plans are appended to ``found``."""
        d, dtype = self.cfg.d_model, self.dtype
        b, n = ids.shape
        requests = {} if streams is None else dict(streams)
        final = 2 * len(self.layers)
        kept = {} if runtime is None else runtime.kept
        first_read, last = self._read_stages(
            requests, keep, final, plans if found is None else None, kept
        )
        # the position rows (static S-ops) enter the stream at their first reader's stage
        extra = 0
        if found is not None:  # rows only static heads read: written with their heads
            extra = head_parts.columns_per_part(b, n)
            for c in set().union(*self._deferred()):
                first_read.pop(c, None)
        first = self._table().groups(first_read)
        rows = liveness.rows_needed(self.embed, self._heads, self._units, last, first)
        store = Store(b, n, d, dtype, last, rows + extra + 1)
        masks = self._analysis()["masks"] if found is not None else None
        self._embed(store, ids, vals, n, None if masks is None else masks[0])
        self._positions(store, first, 0, b, n)
        self._capture(store, streams, requests, 0)
        # the static pass stops after the last layer whose plans need the stream's static
        # values: the later layers' plans are the keys the compiler wrote down
        work = self._static_work() if found is not None else None
        static_layers = len(self.layers) if work is None else work[0]
        for li in range(len(self.layers)):
            stage = 2 * li + 1
            if li >= static_layers:
                found.append(self._find_plans(store, li))
                continue
            if found is not None:
                plans_l = self._find_plans(store, li)
                found.append(plans_l)
            else:
                plans_l = None if plans is None else plans[li]
            run = None if work is None else (work[1][li], work[2][li])
            state = None if runtime is None else runtime.layers[li]
            mask = None if masks is None else masks[stage]
            self._attention(store, li, n, plans_l, mask, run, state, kept)
            store.release(stage)
            self._positions(store, first, stage, b, n)
            self._capture(store, streams, requests, stage)
            self._mlp(store, li, None if masks is None else masks[stage + 1], run)
            store.release(stage + 1)
            if found is None or li + 1 < static_layers:  # (before a request there reads them)
                self._positions(store, first, stage + 1, b, n)
            self._capture(store, streams, requests, stage + 1)
        if static_layers == len(self.layers):
            self._positions(store, first, final + 1, b, n)
        if runtime is not None and found is None:
            runtime.peak_columns = store.peak  # the most directions alive at once (this run)
        cols = keep.cols if keep is not None else torch.arange(d)
        return store.read(cols).permute(1, 2, 0).contiguous()

    def _read_stages(self, requests: dict, keep, final: int, plans, kept) -> tuple[dict, dict]:
        """``(first, last)``: direction -> the first and the last stage before which it is
        read, by a sublayer (after stage 2l for layer l's attention, 2l + 1 for its MLP), a
        stream request or the final read-out (``final + 1``). A direction nobody reads is in
        neither; in a planned run a gather head's query and key directions are not read
        (:func:`~attnsim.model.liveness.sublayer_reads`; kept per set of plans in
        ``kept``, the runtime's)."""
        cache = kept.setdefault("sublayer_reads", {})
        key = None if plans is None else id(plans)
        got = cache.get(key)
        if got is None or got[0] is not plans:  # the sublayers' part, once per plan set
            if len(cache) > READS_KEPT:
                cache.clear()
            got = cache[key] = (plans, *liveness.sublayer_reads(self._heads, self._units, plans))
        first, last = dict(got[1]), dict(got[2])
        everything = range(self.cfg.d_model)
        for stage, req in [*requests.items(), (final + 1, keep)]:
            for c in req.cols.tolist() if isinstance(req, Columns) else everything:
                first[c] = min(first.get(c, stage), stage)
                last[c] = max(last.get(c, stage), stage)
        return first, last

    def _positions(self, store, first: dict, stage: int, b: int, n: int) -> None:
        """Writes the position rows first read at ``stage``."""
        js, step = first.get(stage, []), head_parts.columns_per_part(b, n)
        for part in [long_tensor(js[a : a + step]) for a in range(0, len(js), step)]:
            rows = self.position_rows(part, n).to(self.dtype)  # [len, pos]
            store.write(self.embed["pos_dirs"][part], rows[:, None, :].expand(len(part), b, n))

    def position_rows(self, js: torch.Tensor, n: int) -> torch.Tensor:
        """Columns ``js`` of the position embedding on the first ``n`` positions, ``[len(js),
        n]`` float64: each column's default, its listed entries, 0 at BOS (position 0)."""
        return self._table().rows(js, n)

    def _table(self) -> PositionTable:
        got = self.__dict__.get("_position_table")
        if got is None:
            got = self._position_table = PositionTable(self.embed)
        return got

    def _deferred(self) -> list[set[int]]:
        """Per layer, the position rows only its static heads read (liveness.deferred_rows)."""
        got = self.__dict__.get("_deferred_rows")
        if got is None:
            heads, dirs = self._analysis()["heads"], self.embed["pos_dirs"].tolist()
            got = liveness.deferred_rows(self._heads, self._units, heads, dirs)
            self._deferred_rows = got
        return got

    def _capture(self, store, streams, requests, stage: int) -> None:
        if stage not in requests:
            return
        req = requests[stage]
        if isinstance(req, Forms):  # one row per form, read a column at a time
            streams[stage] = req.evaluate(lambda c: store.read(long_tensor([c]))[0])
            return
        cols = req.cols if isinstance(req, Columns) else torch.arange(self.cfg.d_model)
        streams[stage] = store.read(cols).permute(1, 2, 0).contiguous()

    def _embed(self, store, ids, vals, n: int, mask) -> None:
        e, dtype = self.embed, self.dtype
        cols: dict[int, torch.Tensor] = {}

        def add(c: int, v: torch.Tensor) -> None:
            cols[c] = cols[c] + v if c in cols else v

        for (row, c), w in zip(e["E"].tolist(), e["E_w"].to(dtype)):
            add(c, (ids == row).to(dtype) * w)
        if mask is None:
            if vals is not None and self.cfg.numerical_tokens:
                v = vals.to(dtype)
                for c, w in zip(e["num"].tolist(), e["num_w"].to(dtype)):
                    add(c, v * w)
            if self.cfg.token_width:  # vector tokens: straight to the stream, in parts
                head_parts.write_channels(store, vals.to(dtype), e["vec"], e["vec_w"].to(dtype))
        else:
            cols = {c: v for c, v in cols.items() if bool(mask[c])}
        if cols:
            keys = sorted(cols)
            store.write(long_tensor(keys), torch.stack([cols[c] for c in keys]))

    def _static_work(self) -> tuple[int, list[set[int]], list[set[int]]]:
        """What the static pass runs (:func:`attnsim.model.liveness.static_work`), kept for
        the patterns it was found with."""
        a, patterns = self._analysis(), plan_static.known_patterns(self)
        got = self.__dict__.get("_static_work_cache")
        if got is None or got[0] is not patterns:  # plans found from the stream: below
            found = [
                [h for h in heads if not patterns or patterns[li][h] is None] + partial
                for li, (heads, partial) in enumerate(zip(a["heads"], a["partial"]))
            ]
            static = [m.tolist() for m in a["masks"]]
            work = liveness.static_work(self._heads, self._units, found, static)
            got = self._static_work_cache = (patterns, work)
        return got[1]

    def _find_plans(self, store, li: int) -> dict:
        """The static pass: layer li's static heads' plans and its candidate heads'."""
        a = self._analysis()
        hm, cfg, defer = self._heads[li], self.cfg, self._deferred()[li]
        found: dict = {}
        b, n = store.data.shape[1:]
        patterns = plan_static.known_patterns(self)
        step, group, need = head_parts.columns_per_part(b, n), [], set()
        for h in [*a["heads"][li], None]:  # a few heads and their position rows at a time
            pattern = patterns[li][h] if patterns and h is not None else None
            if pattern is not None:  # the keys the compiler wrote down: no scores needed
                found[h] = pattern_plan(pattern, h, n, cfg.causal, listed=True)
                continue
            mine = set() if h is None else hm.reads_qk[h] & defer
            if group and (h is None or len(need | mine) > step):
                js = long_tensor(sorted(self._table().index[c] for c in need))
                if need:
                    rows = self.position_rows(js, n).to(self.dtype)[:, None, :]
                    store.write(self.embed["pos_dirs"][js], rows.expand(len(js), b, n))
                x, slot = store.data, store.slot  # [width, 1, pos] -> [pos, width]
                for g in group:
                    q, k = hm.Q[g](x, slot)[:, 0].T, hm.K[g](x, slot)[:, 0].T
                    found[g] = keys_plan(cfg, g, q, k, listed=True)
                store.drop(sorted(need))
                group, need = [], set()
            if h is not None:
                group.append(h)
                need |= mine
        x, slot = store.data, store.slot
        mask = a["masks"][2 * li]
        for h in a["partial"][li]:
            q_s, _, k_s, _ = split_qk(hm, h, x, slot, mask)
            p = candidate_plan(cfg, h, q_s[:, 0].T, k_s[:, 0].T)
            if p is not None:
                found[h] = p
        return found

    def _attention(self, store, li, n, plans, mask, run=None, state=None, kept=None) -> None:
        """Layer li's attention, head by head, added to the stream (``mask``: the static
        pass, where only heads whose pattern and values are static run, and of those the
        ones in ``run[0]``, :meth:`_static_work`). A planned head runs on the span of the
        rows its values read (:meth:`Store.span`) and writes on the span of the queries
        whose keys lie there (:func:`run_plan`). ``state``: the layer's
        :class:`attnsim.model.runtime.LayerState` (its heads' failed tries); ``kept``: the
        runtime's, where the layer's batch of gathers is kept for its plans."""
        hm, cfg = self._heads[li], self.cfg
        if not hm.active:
            return
        slot = store.slot
        static_mask = self._analysis()["masks"][2 * li]
        values: dict[int, tuple | None] = {}
        step = head_parts.columns_per_part(store.data.shape[1], n, store.data.element_size())
        apart = mask is None and head_parts.writes_apart(hm)
        # the heads' writes, together (a layer that writes apart: a part's bytes at a time)
        held = head_parts.HeldWrites(store, hm.written, PART_BYTES if apart else None, mask)
        batch = None if mask is not None or plans is None else self._batch(li, plans, kept)
        batched = None if batch is None else gather_batch.run(batch, store)
        if batched is not None:  # the small gathers at once
            held.add(*batched)
        for h in hm.active:
            if batched is not None and h in batch.heads:
                continue
            p = None if plans is None else plans.get(h)
            if mask is not None and (
                p is None
                or (run is not None and h not in run[0])
                or p.kind == "candidates"
                or not all(bool(static_mask[r]) for r in hm.reads_v[h])
            ):
                continue  # the static pass runs the static heads with static values only
            if apart and p is not None and p.kind == "head" and hm.V[h].width > step:
                for vp, op, dirs in head_parts.parts(hm, h, step):  # a wide planned head
                    got = mixed(cfg, p, store, vp, n)
                    if got is not None:
                        store.write(dirs, op(got[0], torch.arange(got[0].shape[0])), got[1])
                continue
            lin = hm.V[h]  # a value map that serves several heads is computed once
            if p is not None and p.kind == "head":
                if id(lin) in values:
                    v = values[id(lin)]
                else:
                    lo, hi = store.span(lin.dirs)
                    v = (lin(store.view(lo, hi), slot), lo) if hi > lo else None
                    if id(lin) in hm.shared_values:
                        values[id(lin)] = v
                got = None if v is None else run_plan(cfg, p, v[0], n, v[1])
                if got is None:
                    continue  # its values are 0 where its queries read: it adds 0
                z, at = got
            else:  # on whole rows
                misses = {} if state is None else state.misses
                z, at = whole_head(cfg, hm, h, p, store, static_mask, misses), 0
            held.add(hm.O_at[h], hm.O[h](z, torch.arange(z.shape[0])), at)
        held.flush()

    def _batch(self, li: int, plans: dict, kept: dict):
        """Layer li's small gathers as one batch (:mod:`attnsim.model.gather_batch`), found
        once per plan set (kept in ``kept``)."""
        batches = kept.setdefault("batches", {})
        got = batches.get(id(plans))
        if got is None or got[0] is not plans:
            got = batches[id(plans)] = (plans, gather_batch.build(self._heads[li], plans))
        return got[1]

    def _mlp(self, store, li: int, mask, run=None) -> None:
        """Layer li's MLP added to the stream (``mask``: the static pass, where units that
        read static directions only run, in the groups ``run[1]``, :meth:`_static_work`),
        on the span of the rows its units read (a unit of 0 inputs gives 0)."""
        slot = store.slot
        ok_all = self._analysis()["units"][li]
        for i, (um, ok, u) in enumerate(zip(self._units[li], ok_all, self.layers[li].units)):
            if not um.n or (run is not None and i not in run[1]):
                continue
            static = None if mask is None else (ok, mask)  # the static pass: these only
            if head_parts.run_units(store, self._units[li], i, u, static):
                continue  # wide: in parts
            lo, hi = um.span(store)
            if hi <= lo:
                continue
            x = store.view(lo, hi)
            if mask is None:  # once per distinct input row where the rows repeat
                store.write(um.written, unit_output(um, x, slot), lo)
                continue
            act = um.activation(x, slot)  # the static pass: dynamic units add 0
            act = torch.where(ok[:, None, None], act, torch.zeros((), dtype=act.dtype))
            keep = mask[um.written]
            store.write(um.written[keep], um.O(act, torch.arange(um.n))[keep], lo)

    # -- plans ---------------------------------------------------------------------------
    def build_plans(self, n: int) -> list:
        """Per layer, head -> plan, for inputs of ``n`` positions (BOS included), found by
        one static pass (a :class:`attnsim.model.runtime.Runtime` keeps them per length).

        Raises:
            ValueError: ``n`` is not a number of positions from 1 to ``cfg.n_ctx``.

        >>> from attnsim import compile_program, library, rasp
        >>> m = compile_program(library.make_reverse(rasp.tokens), vocab="ab", max_seq_len=3,
        ...                     storage="sparse")
        >>> [sorted(layer) for layer in m.model.build_plans(4)]  # the heads planned, per layer
        [[0], [], [], [0]]
        """
        check_length(n, self.cfg.n_ctx)
        ids = torch.zeros(1, n, dtype=torch.long)
        ids[0, 1:] = 1
        found: list = []
        with torch.no_grad():
            self._run(ids, None, None, Columns(long_tensor([])), None, found)
        return found

    # -- the dense form ------------------------------------------------------------------
    def to_dense(self):
        """The dense :class:`Transformer` with these weights (assembly's factorisation)."""
        return dense_of(self)
