"""Compressed models: the residual stream squeezed into ``d`` dimensions by a learned map.

A compiled model gives every value of every expression a direction of its own. A model in
superposition shares them: one projection ``P`` (``[d_model, d]``) maps the stream into
``d < d_model`` dimensions; every sublayer writes through ``P`` (``W_O P``, ``W_out P``, the
embeddings ``W_E P``) and reads through ``P^T`` (``P^T W_Q``, ``P^T W_in`` ...), and the
readout decodes ``stream P^T``. Heads and units are the compiled ones, so the component table
and the circuit keep their labels; a residual direction's label now names a vector of the
small space (:meth:`CompressedModel.direction`), not an axis.

``P`` is learned with torch (Adam) so that every read the compiled model makes stays what it
was: over the residual streams ``x`` of the compiled model on the training inputs, the loss
is ``|x P P^T W - x W|^2 / |x W|^2`` summed over every read map ``W`` (query, key, value,
MLP inputs, the readout's directions). Whether it worked is checked end to end: the
compressed model runs on its own (errors compound) and its decoded outputs are compared with
the compiled model's.

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

from attnsim.model import path_patching
from attnsim.model.circuit import Circuit
from attnsim.model.compiled import CompiledModel
from attnsim.model.config import ModelConfig
from attnsim.model.report import ComponentTable
from attnsim.model.transformer import Transformer

__all__ = ["CompressedModel", "compress", "default_inputs", "smallest_width"]


class CompressedModel:
    """A compiled model whose residual stream lives in ``d`` dimensions (see the module).

    Attributes:
        model: the :class:`Transformer` of width ``d``.
        projection: ``P`` ``[d_model, d]``: row ``i`` is where direction ``i`` now points.
        base: the compiled model it was made from.
        loss: the training loss at the end.
    """

    def __init__(
        self, model: Transformer, projection: torch.Tensor, base: CompiledModel, loss: float
    ) -> None:
        self.model = model
        self.projection = projection
        self.base = base
        self.loss = loss

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
            resid = self.model(ids, vals) @ self.projection.T  # [batch, pos, d_model]
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
        return out[0] if single else out

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


def _compressed_net(model: CompiledModel, P: torch.Tensor) -> Transformer:
    net = model.model
    cfg = dataclasses.replace(net.cfg, d_model=P.shape[1])
    small = Transformer(cfg)
    small.executor = "dense"
    src = dict(net.state_dict())
    state = {}
    for name, w in src.items():
        leaf = name.rsplit(".", 1)[-1]
        if leaf in ("W_E", "W_pos", "W_E_vec", "W_out", "W_bil_out") or leaf.endswith("_out"):
            state[name] = w @ P  # writes: [..., d_model] -> [..., d]
        elif leaf == "W_E_num":
            state[name] = w @ P
        elif leaf == "W_O":
            state[name] = w @ P  # [head, d_head, d_model] -> [head, d_head, d]
        elif leaf in ("W_Q", "W_K", "W_V"):
            state[name] = P.T @ w  # [head, d_model, d_head] -> [head, d, d_head]
        else:  # reads: W_in, W_bil_a, W_bil_b, W_{kind}_in, W_{kind}_gate [d_model, units]
            state[name] = P.T @ w
    small.load_state_dict(state)
    return small


def compress(
    model: CompiledModel,
    d: int,
    *,
    inputs: Sequence[Sequence[Any]] | None = None,
    steps: int = 2000,
    lr: float = 0.01,
    seed: int = 0,
) -> CompressedModel:
    """Learns a projection of the residual stream into ``d`` dimensions (see the module).

    Args:
        model: a dense compiled model.
        d: the compressed width, 1 to ``d_model``.
        inputs: the inputs whose streams the projection is fitted on (default:
            :func:`default_inputs`).
        steps: Adam steps.
        lr: Adam's learning rate.
        seed: the initial projection's seed (a random orthonormal ``P``).

    Returns:
        A :class:`CompressedModel`.

    Raises:
        ValueError: ``d`` out of range, or a model in sparse storage.
        TypeError: ``model`` is not a CompiledModel.
    """
    if not isinstance(model, CompiledModel):
        raise TypeError(f"compress expects a CompiledModel, got {type(model).__name__}")
    model.dense_only("compress")
    full = model.config.d_model
    if isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= full:
        raise ValueError(f"d must be an integer from 1 to d_model={full}, got {d!r}")
    xs = default_inputs(model) if inputs is None else [list(x) for x in inputs]
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

    def objective() -> torch.Tensor:
        loss = torch.zeros((), dtype=f64)
        for x, ws, ts, ns in zip(streams, reads, targets, norms):
            if ws:
                back = (x @ P) @ P.T  # [rows, d_model]: the stream through the small space
                for w, t, nrm in zip(ws, ts, ns):
                    loss = loss + (back @ w - t).pow(2).sum() / nrm
        return loss

    with torch.no_grad():
        exact = float(objective()) <= 1e-9  # d covers what the reads see: nothing to learn
    if not exact:
        gen = torch.Generator().manual_seed(seed)
        P += 1e-3 * torch.randn(full, d, generator=gen, dtype=f64)
    P.requires_grad_(True)
    with torch.enable_grad():
        if not exact:
            opt = torch.optim.Adam([P], lr=lr)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(1, steps))
            for _ in range(steps):
                opt.zero_grad()
                loss = objective()
                loss.backward()
                opt.step()
                sched.step()
        loss_value = float(objective().detach())
    P = P.detach().to(model.model.dtype)
    return CompressedModel(_compressed_net(model, P), P, model, loss_value)


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
    >>> best, curve = smallest_width(m, xs, widths=[2, m.config.d_model], steps=20)
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
