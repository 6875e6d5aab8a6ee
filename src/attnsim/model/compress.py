"""Compressed models: the residual stream squeezed into ``d`` dimensions by a learned map.

A compiled model gives every value of every expression a direction of its own. A model in
superposition shares them: one projection ``P`` (``[d_model, d]``) maps the stream into
``d < d_model`` dimensions; every sublayer writes through ``P`` (``W_O P``, ``W_out P``, the
embeddings ``W_E P``) and reads through ``P^T`` (``P^T W_Q``, ``P^T W_in`` ...), and the
readout decodes ``stream P^T``. Heads and units are the compiled ones, so the component table
and the circuit keep their labels; a residual direction's label now names a vector of the
small space (:meth:`CompressedModel.direction`), not an axis.

Training has two stages, both with torch (Adam) on the compiled model's behaviour over the
training inputs. First the read loss: over the residual streams ``x`` of the compiled model,
``|x P P^T W - x W|^2 / |x W|^2`` summed over every read map ``W`` (query, key, value, MLP
inputs, the readout's directions), from the top-``d`` principal directions of the streams.
Where that is not exact, the second stage trains end to end through the nonlinearities: the
compressed model runs on its own (each sublayer reads what the earlier compressed sublayers
wrote), hard attention with the compiled model's selections so that the values mix
differentiably, and a hinge loss asks for what the thresholds downstream need with a margin:
every key the compiled model selects within ``hard_tolerance - margin`` of the best of them,
every other key at least ``hard_tolerance + margin`` below it, and at the readout the right
value's score above 1/2 and above every other by ``margin`` (numerical outputs: their squared
error). With ``per_layer_reads`` each sublayer (and the readout) reads the small stream
through a map of its own, ``R_l`` (``[d, d_model]``, starting at ``P^T``), instead of
``P^T``; the compressed model stays a plain :class:`Transformer` of width ``d`` whose weights
are the folded products (``R_l W_Q``, ``W_O P`` ...). Whether it worked is checked end to end:
the compressed model runs on its own with real hard attention (errors compound) and its
decoded outputs are compared with the interpreter's (:func:`smallest_width`).

Shapes (glossary): batch, pos (BOS included), d_model, d (the compressed width).

>>> from attnsim import compile_program, library
>>> m = compile_program(library.make_hist(), vocab="abcd", max_seq_len=8)
>>> small = compress(m, d=11)  # the rank of its streams: exact
>>> m.config.d_model, small.config.d_model, small.run("abcaddab")
(16, 11, [3, 2, 1, 3, 2, 2, 3, 2])
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Any

import torch

from attnsim.model import export, path_patching
from attnsim.model.circuit import Circuit
from attnsim.model.compiled import CompiledModel
from attnsim.model.config import AttentionMode, ModelConfig
from attnsim.model.report import ComponentTable
from attnsim.model.transformer import Transformer

__all__ = ["CompressedModel", "compress", "default_inputs", "smallest_width"]

PATIENCE = 200  # end-to-end steps without fewer violations after which training stops
VIOLATION_EPS = 1e-6  # a decision this close to its threshold counts as missed


class CompressedModel:
    """A compiled model whose residual stream lives in ``d`` dimensions (see the module).

    Attributes:
        model: the :class:`Transformer` of width ``d``.
        projection: ``P`` ``[d_model, d]``: row ``i`` is where direction ``i`` now points
            (every write goes through it).
        reads: per stage (each layer's attention, its MLP, then the readout) the read map
            ``[d, d_model]`` that stage sees the stream through (all ``P^T`` unless trained
            with ``per_layer_reads``).
        base: the compiled model it was made from.
        loss: the read loss at the end (``|x P R W - x W|^2 / |x W|^2`` summed over the read
            maps ``W``, on the compiled model's streams).
        violations: after end-to-end training, how many of the compiled model's hard
            decisions (attention selections, readout values) the compressed model's own run
            misses on the training inputs; None where that stage did not run.
    """

    def __init__(
        self,
        model: Transformer,
        projection: torch.Tensor,
        base: CompiledModel,
        loss: float,
        reads: list[torch.Tensor] | None = None,
        violations: int | None = None,
    ) -> None:
        self.model = model
        self.projection = projection
        self.base = base
        self.loss = loss
        stages = 2 * base.config.n_layers + 1
        self.reads = [projection.T] * stages if reads is None else list(reads)
        self.violations = violations

    @property
    def readout(self) -> torch.Tensor:
        """The map ``[d, d_model]`` the output is decoded through."""
        return self.reads[-1]

    @property
    def config(self) -> ModelConfig:
        return self.model.cfg

    def run(self, xs: Sequence[Any], decode: str = "argmax") -> list:
        """Runs on one sequence (or a batch) and decodes the output (no run-time checks: the
        intermediate values are approximate by design).

        Args:
            xs: a token list, or a batch of equal-length token lists.
            decode: "argmax" (a categorical position is the value with the largest score,
                None when no score reaches 1/2: how a model in superposition is read) or
                "strict" (as :meth:`CompiledModel.run`: one-hot within its tolerance).

        Raises:
            ValueError: an unknown ``decode``.
            RunTimeCheckError: ``decode="strict"`` and an output is a mixture of values.
        """
        if decode not in ("argmax", "strict"):
            raise ValueError(f"decode must be 'argmax' or 'strict', got {decode!r}")
        batch, single = self.base._batch(xs)
        ids, vals = self.base.encode(batch)
        with torch.no_grad():
            resid = self.model(ids, vals) @ self.readout  # [batch, pos, d_model]
        out = self._decode(resid, decode)
        return out[0] if single else out

    def to_transformer_lens(self):
        """A ``transformer_lens.HookedTransformer`` of width ``d`` with this model's weights
        and its readout map as ``W_U`` (``export.compressed_to_transformer_lens``); decode
        its logits with :meth:`run_lens`."""
        return export.compressed_to_transformer_lens(self)

    def run_lens(self, lens, xs: Sequence[Any], decode: str = "argmax") -> list:
        """Runs the HookedTransformer of :meth:`to_transformer_lens` on inputs and decodes
        its logits as :meth:`run` decodes the stream (ValueError: an unknown ``decode``)."""
        if decode not in ("argmax", "strict"):
            raise ValueError(f"decode must be 'argmax' or 'strict', got {decode!r}")
        batch, single = self.base._batch(xs)
        ids, _ = self.base.encode(batch)
        with torch.no_grad():
            resid = lens(ids, return_type="logits").to(self.projection.dtype)
        out = self._decode(resid, decode)
        return out[0] if single else out

    def _decode(self, resid: torch.Tensor, decode: str) -> list:
        """Decodes the stream read back into the compiled model's directions."""
        spec = self.base.output
        if decode == "strict" or spec.kind != "cat" or not spec.dims:
            out = self.base._decode(resid)
        else:
            cols = torch.tensor([self.base._index[d] for d in spec.dims])
            scores = resid[:, 1:][..., cols]  # [batch, pos, values]: BOS dropped
            best, where = scores.max(dim=-1)
            out = [
                [spec.values[int(i)] if float(v) >= 0.5 else None for v, i in zip(bv, bi)]
                for bv, bi in zip(best, where)
            ]
        return out

    def direction(self, label: str) -> torch.Tensor:
        """The vector ``[d]`` that the residual direction ``label`` became.

        Raises:
            KeyError: no such direction.
        """
        if label not in self.base._index:
            raise KeyError(f"no residual direction {label!r} in this model")
        return self.projection[self.base._index[label]]

    def components(self) -> ComponentTable:
        """The compiled model's component table: heads and units are unchanged."""
        return self.base.components()

    def circuit(self, granularity: str = "component") -> Circuit:
        """The compiled model's circuit: the same nodes and edges, now in superposition."""
        return self.base.circuit(granularity)


def default_inputs(model: CompiledModel, per_length: int = 16, seed: int = 0) -> list[list]:
    """Random token sequences of every length the model takes (``per_length`` each).

    Raises:
        ValueError: the model reads real-valued tokens (pass inputs instead).

    >>> from attnsim import compile_program, library
    >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=2)
    >>> len(default_inputs(m, per_length=2))
    4
    """
    if model.vocab is None or model.numerical_tokens or model.config.token_width:
        raise ValueError(
            "this model reads real-valued tokens: pass compress(..., inputs=[...]) with the "
            "inputs to keep its behaviour on"
        )
    rng = random.Random(seed)
    lengths = [model.max_seq_len] if model.fixed_length else range(1, model.max_seq_len + 1)
    return [[rng.choice(model.vocab) for _ in range(n)] for n in lengths for _ in range(per_length)]


def _streams(model: CompiledModel, inputs: Sequence[Sequence[Any]]) -> list[list[torch.Tensor]]:
    """Per stage (each layer's attention input, MLP input, the final stream): the streams
    ``[rows, d_model]`` of the compiled model on the inputs."""
    by_len: dict[int, list] = {}
    for x in inputs:
        by_len.setdefault(len(x), []).append(list(x))
    n = model.config.n_layers
    stages: list[list[torch.Tensor]] = [[] for _ in range(2 * n + 1)]
    for batch in by_len.values():
        ids, vals = model.encode(batch)
        cache: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            final = model.model(ids, vals, cache=cache)
        for li in range(n):
            stages[2 * li].append(cache[f"blocks.{li}.hook_resid_pre"].flatten(0, 1))
            stages[2 * li + 1].append(cache[f"blocks.{li}.hook_resid_mid"].flatten(0, 1))
        stages[2 * n].append(final.flatten(0, 1))
    return [torch.cat(s) for s in stages]


def _reads(model: CompiledModel) -> list[list[torch.Tensor]]:
    """Per stage, the read maps ``[d_model, width]`` (zero columns dropped)."""
    net = model.model
    out: list[list[torch.Tensor]] = []
    for block in net.blocks:
        a, m = block.attn, block.mlp
        heads = [w[h] for h in a.active_heads().tolist() for w in (a.W_Q, a.W_K, a.W_V)]
        mlp = [m.W_in, m.W_bil_a, m.W_bil_b]
        mlp += [getattr(m, f"W_{k}_{p}") for k in m.native_kinds for p in ("in", "gate")]
        out.append(heads)
        out.append(mlp)
    spec = model.output
    dirs = spec.dims if spec.kind == "cat" else [d for d, _ in spec.form]
    sel = torch.zeros(net.cfg.d_model, max(1, len(dirs)), dtype=net.dtype)
    for j, d in enumerate(dirs):
        sel[model._index[d], j] = 1.0
    out.append([sel])

    def used(w: torch.Tensor) -> torch.Tensor:
        return w[:, w.abs().sum(dim=0) > 0]

    return [[used(w) for w in ws if w.numel() and bool(w.any())] for ws in out]


def _compressed_net(
    model: CompiledModel, P: torch.Tensor, reads: list[torch.Tensor] | None = None
) -> Transformer:
    """The Transformer of width ``d``: writes through ``P``, stage ``s``'s reads through
    ``reads[s]`` (default ``P^T``)."""
    net = model.model
    cfg = dataclasses.replace(net.cfg, d_model=P.shape[1])
    small = Transformer(cfg)
    src = dict(net.state_dict())
    state = {}
    for name, w in src.items():
        leaf = name.rsplit(".", 1)[-1]
        if name.startswith("blocks."):
            li = int(name.split(".")[1])
            stage = 2 * li + (0 if ".attn." in name else 1)
            R = P.T if reads is None else reads[stage]
        else:
            R = P.T
        if leaf in ("W_E", "W_pos", "W_E_vec", "W_out", "W_bil_out") or leaf.endswith("_out"):
            state[name] = w @ P  # writes: [..., d_model] -> [..., d]
        elif leaf == "W_E_num":
            state[name] = w @ P
        elif leaf == "W_O":
            state[name] = w @ P  # [head, d_head, d_model] -> [head, d_head, d]
        elif leaf in ("W_Q", "W_K", "W_V"):
            state[name] = R @ w  # [head, d_model, d_head] -> [head, d, d_head]
        else:  # reads: W_in, W_bil_a, W_bil_b, W_{kind}_in, W_{kind}_gate [d_model, units]
            state[name] = R @ w
    small.load_state_dict(state)
    return small


class _Run:
    """The compiled model's behaviour on the training inputs, and the compressed model's own
    run (differentiable in ``P`` and the read maps) scored against it.

    Per input length: the embedding ``[batch, pos, d_model]``, each layer's hard-attention
    selections ``[batch, active heads, query, key]`` and the readout's targets.
    """

    def __init__(self, model: CompiledModel, inputs: list[list], margin: float) -> None:
        net = model.model
        f64 = torch.float64
        self.margin = margin
        self.hard = net.cfg.attention is AttentionMode.HARD
        self.tol = net.cfg.hard_tolerance
        self.beta = net.cfg.beta
        self.causal = net.cfg.causal
        self.layers = []
        for block in net.blocks:
            a, m = block.attn, block.mlp
            hs = a.active_heads()
            att = tuple(w[hs].to(f64) for w in (a.W_Q, a.W_K, a.W_V, a.W_O)) if len(hs) else None
            mlp = tuple(w.to(f64) for w in (m.W_in, m.W_out, m.W_bil_a, m.W_bil_b, m.W_bil_out))
            self.layers.append((hs, att, mlp))
        spec = model.output
        self.cat = spec.kind == "cat"
        dirs = spec.dims if self.cat else [d for d, _ in spec.form]
        self.cols = torch.tensor([model._index[d] for d in dirs], dtype=torch.long)
        by_len: dict[int, list] = {}
        for x in inputs:
            by_len.setdefault(len(x), []).append(list(x))
        self.groups = []
        for batch in by_len.values():
            ids, vals = model.encode(batch)
            cache: dict[str, torch.Tensor] = {}
            with torch.no_grad():
                final = net(ids, vals, cache=cache)
            chosen = [
                None if att is None else cache[f"blocks.{li}.attn.hook_pattern"][:, hs] > 0
                for li, (hs, att, _) in enumerate(self.layers)
            ]
            out = final[:, 1:][..., self.cols].to(f64)  # [batch, pos, outputs]: BOS dropped
            best, where = out.max(dim=-1) if out.shape[-1] else (None, None)
            target = (where, best >= 0.5) if self.cat and out.shape[-1] else out
            self.groups.append((cache["hook_embed"].to(f64), chosen, target))

    def __call__(self, P: torch.Tensor, reads: list[torch.Tensor]) -> tuple[torch.Tensor, int]:
        """``(loss, violations)``: the hinge loss of the compressed model's own run, and how
        many of the compiled model's hard decisions it misses (margin 0)."""
        tol, mg, eps = self.tol, self.margin, VIOLATION_EPS
        loss = torch.zeros((), dtype=P.dtype)
        bad = 0

        def hinge(h: torch.Tensor) -> torch.Tensor:
            return (h + h * h).sum()  # linear far out (a steady pull), quadratic near 0

        for emb, chosen, target in self.groups:
            s = emb @ P  # [batch, pos, d]
            n = s.shape[1]
            for li, ((_, att, mlp), sel) in enumerate(zip(self.layers, chosen)):
                if att is not None:
                    W_Q, W_K, W_V, W_O = att
                    r = s @ reads[2 * li]  # [batch, pos, d_model]
                    q = torch.einsum("bpm,hme->bhpe", r, W_Q)
                    k = torch.einsum("bpm,hme->bhpe", r, W_K)
                    v = torch.einsum("bpm,hme->bhpe", r, W_V)
                    scores = q @ k.transpose(-1, -2)  # [batch, head, query, key]
                    valid = torch.ones(n, n, dtype=torch.bool)
                    if self.causal:
                        valid = valid.tril()
                    if self.hard:  # the compiled model's selection, scored by margins
                        top = scores.masked_fill(~sel, float("-inf")).amax(-1, keepdim=True)
                        near = (top - scores - (tol - mg)).masked_fill(~sel, 0).clamp_min(0)
                        other = ~sel & valid
                        far = (scores - (top - tol - mg)).masked_fill(~other, 0).clamp_min(0)
                        loss = loss + hinge(near) + hinge(far)
                        bad += int((near > mg - eps).sum() + (far > mg - eps).sum())
                        w = sel.to(P.dtype)
                        z = (w @ v) / w.sum(-1, keepdim=True)
                    else:
                        scores = scores.masked_fill(~valid, float("-inf"))
                        z = torch.softmax(self.beta * scores, dim=-1) @ v
                    s = s + torch.einsum("bhpe,hem->bpm", z, W_O) @ P
                W_in, W_out, W_a, W_b, W_bo = mlp
                r = s @ reads[2 * li + 1]
                o = torch.relu(r @ W_in) @ W_out
                if W_a.shape[1]:
                    o = o + ((r @ W_a) * (r @ W_b)) @ W_bo
                s = s + o @ P
            out = (s @ reads[-1])[:, 1:][..., self.cols]  # [batch, pos, outputs]
            if not out.shape[-1]:
                continue
            if self.cat:
                where, has = target
                right = out.gather(-1, where[..., None])  # [batch, pos, 1]
                others = torch.ones_like(out, dtype=torch.bool).scatter(-1, where[..., None], False)
                low = (0.5 + mg - right[..., 0]).masked_fill(~has, 0).clamp_min(0)
                beat = (out - right + mg).masked_fill(~others | ~has[..., None], 0).clamp_min(0)
                none = (out - 0.5 + mg).masked_fill(has[..., None], 0).clamp_min(0)
                loss = loss + hinge(low) + hinge(beat) + hinge(none)
                bad += int(
                    (low > mg - eps).sum() + (beat > mg - eps).sum() + (none > mg - eps).sum()
                )
            else:
                err = out - target
                loss = loss + err.pow(2).sum() / target.pow(2).sum().clamp_min(1.0)
                bad += int((err.abs() > 1e-7).sum())
        return loss, bad


def _read_loss(streams, reads_by_stage, targets, norms, P, maps) -> torch.Tensor:
    loss = torch.zeros((), dtype=P.dtype)
    for x, ws, ts, ns, R in zip(streams, reads_by_stage, targets, norms, maps):
        if ws:
            back = (x @ P) @ R  # [rows, d_model]: the stream through the small space
            for w, t, nrm in zip(ws, ts, ns):
                loss = loss + (back @ w - t).pow(2).sum() / nrm
    return loss


def compress(
    model: CompiledModel,
    d: int,
    *,
    inputs: Sequence[Sequence[Any]] | None = None,
    steps: int = 2000,
    lr: float = 0.01,
    seed: int = 0,
    end_to_end_steps: int = 800,
    end_to_end_lr: float = 0.003,
    margin: float = 0.1,
    per_layer_reads: bool = True,
) -> CompressedModel:
    """Learns a projection of the residual stream into ``d`` dimensions (see the module).

    Args:
        model: a dense compiled model.
        d: the compressed width, 1 to ``d_model``.
        inputs: the inputs whose behaviour the projection is fitted on (default:
            :func:`default_inputs`).
        steps: Adam steps on the read loss.
        lr: their learning rate.
        seed: the seed of the small random perturbation of the principal-direction start.
        end_to_end_steps: Adam steps of end-to-end training with margins afterwards (0: none;
            skipped where the read loss is already exact, and stopped early once the
            compressed model's own run makes every hard decision as the compiled model does).
        end_to_end_lr: their learning rate.
        margin: the margin the hinge loss asks for, in units of attention score and output
            score (below ``hard_tolerance``, which is 0.25 by default).
        per_layer_reads: end-to-end training also learns a read map per sublayer and for the
            readout (each starting at ``P^T``); False: every stage reads through ``P^T``.

    Returns:
        A :class:`CompressedModel`.

    Raises:
        ValueError: ``d``, a step count, a learning rate or ``margin`` out of range, a model
            with declared elementwise units and end-to-end steps (not supported), or a model
            in sparse storage.
        TypeError: ``model`` is not a CompiledModel.
    """
    if not isinstance(model, CompiledModel):
        raise TypeError(f"compress expects a CompiledModel, got {type(model).__name__}")
    model.dense_only("compress")
    full = model.config.d_model
    if isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= full:
        raise ValueError(f"d must be an integer from 1 to d_model={full}, got {d!r}")
    for name, v in (("steps", steps), ("end_to_end_steps", end_to_end_steps)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
    for name, v in (("lr", lr), ("end_to_end_lr", end_to_end_lr)):
        if not isinstance(v, (int, float)) or not v > 0 or v != v or v == float("inf"):
            raise ValueError(f"{name} must be a positive finite number, got {v!r}")
    tol = model.config.hard_tolerance
    if not isinstance(margin, (int, float)) or not 0 <= margin < tol:
        raise ValueError(
            f"margin must be a number from 0 to below hard_tolerance={tol}, got {margin!r}"
        )
    xs = default_inputs(model) if inputs is None else [list(x) for x in inputs]
    if not xs:
        raise ValueError("compress needs at least one input")
    streams = _streams(model, xs)
    reads = _reads(model)
    f64 = torch.float64
    streams = [x.to(f64) for x in streams]
    reads = [[w.to(f64) for w in ws] for ws in reads]
    # the start: the top-d principal directions of the streams (each stage scaled alike);
    # exact when d covers their rank, since then P P^T x = x
    gram = torch.zeros(full, full, dtype=f64)
    for x in streams:
        gram += x.T @ x / x.pow(2).sum().clamp_min(1e-12)
    _, vecs = torch.linalg.eigh(gram)  # ascending eigenvalues
    P = vecs[:, -d:].flip(1).clone()
    targets = [[x @ w for w in ws] for x, ws in zip(streams, reads)]
    norms = [[t.pow(2).sum().clamp_min(1e-12) for t in ts] for ts in targets]
    n_stages = len(streams)

    def objective(P: torch.Tensor, maps: list[torch.Tensor] | None = None) -> torch.Tensor:
        return _read_loss(streams, reads, targets, norms, P, maps or [P.T] * n_stages)

    with torch.no_grad():
        exact = float(objective(P)) <= 1e-9  # d covers what the reads see: nothing to learn
    if not exact:
        gen = torch.Generator().manual_seed(seed)
        P += 1e-3 * torch.randn(full, d, generator=gen, dtype=f64)
    P.requires_grad_(True)
    with torch.enable_grad():
        if not exact and steps:
            opt = torch.optim.Adam([P], lr=lr)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(1, steps))
            for _ in range(steps):
                opt.zero_grad()
                loss = objective(P)
                loss.backward()
                opt.step()
                sched.step()
        P = P.detach()
        maps = [P.T.clone() for _ in range(n_stages)]
        violations = None
        if not exact and end_to_end_steps:
            if model.config.d_native and any(model.config.d_native.values()):
                raise ValueError(
                    "end-to-end training does not support declared elementwise units: "
                    "pass end_to_end_steps=0"
                )
            P, maps, violations = _end_to_end(
                _Run(model, xs, float(margin)),
                P,
                maps,
                end_to_end_steps,
                end_to_end_lr,
                per_layer_reads,
            )
        with torch.no_grad():
            loss_value = float(objective(P, maps))
    dt = model.model.dtype
    P, maps = P.to(dt), [m.to(dt) for m in maps]
    net = _compressed_net(model, P, maps)
    return CompressedModel(net, P, model, loss_value, maps, violations)


def _end_to_end(
    run: _Run, P: torch.Tensor, maps: list[torch.Tensor], steps: int, lr: float, per_layer: bool
) -> tuple[torch.Tensor, list[torch.Tensor], int]:
    """Adam on the hinge loss of the compressed model's own run; returns the weights with the
    fewest violations seen. The first with none ends the training, and so does a run of
    ``PATIENCE`` steps without fewer violations."""
    P = P.clone().requires_grad_(True)
    params = [P]
    if per_layer:
        maps = [m.clone().requires_grad_(True) for m in maps]
        params += maps
    opt = torch.optim.Adam(params, lr=lr)
    best: tuple[int, torch.Tensor, list[torch.Tensor]] | None = None
    since = 0  # steps since the fewest violations last went down
    for step in range(steps + 1):
        opt.zero_grad()
        cur = maps if per_layer else [P.T] * len(maps)
        loss, bad = run(P, cur)
        since += 1
        if best is None or bad < best[0]:
            best, since = (bad, P.detach().clone(), [m.detach().clone() for m in cur]), 0
        if bad == 0 or step == steps or since >= PATIENCE:
            break
        loss.backward()
        opt.step()
    assert best is not None
    return best[1], best[2], best[0]


def smallest_width(
    model: CompiledModel,
    inputs: Sequence[Sequence[Any]],
    want: Sequence[Sequence[Any]] | None = None,
    widths: Sequence[int] | None = None,
    decode: str = "argmax",
    **kwargs: Any,
) -> tuple[int | None, list[tuple[int, float, float]]]:
    """The smallest ``d`` whose compressed model decodes every input as ``want`` (default:
    the compiled model's outputs), and per width tried the fraction of inputs decoded
    exactly (numbers within 1e-6) and the largest error of a numerical output.

    Args:
        model: a compiled model.
        inputs: the test inputs.
        want: the expected outputs (the interpreter's).
        widths: the widths to try, ascending (default: 1/8, 2/8, ... of d_model).
        decode: how categorical outputs are read (:meth:`CompressedModel.run`).
        kwargs: passed to :func:`compress`.

    Returns:
        ``(d or None, [(width, accuracy, numerical error), ...])``.

    >>> from attnsim import compile_program, library, rasp
    >>> m = compile_program(library.make_frac_prevs(rasp.tokens == "a"),
    ...                     vocab="ab", max_seq_len=3)
    >>> xs = [list("ab"), list("aab"), list("bab"), list("b")]
    >>> best, curve = smallest_width(m, xs, widths=[2, m.config.d_model], steps=20,
    ...                              end_to_end_steps=20)
    >>> best == m.config.d_model, curve[-1][1:]
    (True, (1.0, 0.0))
    """
    full = model.config.d_model
    if widths is None:
        widths = sorted({max(1, (full * i) // 8) for i in range(1, 9)})
    want = [model.run(x, check=False) for x in inputs] if want is None else want
    curve = []
    best = None
    for k in widths:
        small = compress(model, k, inputs=inputs, **kwargs)
        exact, err = 0, 0.0
        for x, y in zip(inputs, want):
            try:
                got = small.run(x, decode)
            except ValueError:  # a mixture (strict decoding): not exact
                continue
            exact += path_patching.same_output(got, list(y))
            for a, b in zip(got, y):
                if isinstance(a, float) and isinstance(b, (int, float)):
                    err = max(err, abs(a - b))
        acc = exact / max(1, len(inputs))
        curve.append((k, acc, round(err, 12)))
        if acc == 1.0 and best is None:
            best = k
    return best, curve
