"""A compiled model: the Transformer plus how to encode inputs and decode its output.

Knows no RASP: everything here is plain data (vocabulary, residual labels, the output's
directions), so a model saved with :meth:`CompiledModel.save` loads without the program.
Checkpoints are a safetensors file of weights and a JSON file of metadata; loading runs
no code.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

from attnsim.model import checkpoint
from attnsim.model.config import AttentionMode, ModelConfig
from attnsim.model.transformer import NATIVE_FUNCTIONS, Transformer

FORMAT = checkpoint.FORMAT


@dataclass(frozen=True)
class OutputSpec:
    """How to read the program's output from the final residual stream.

    Attributes:
        kind: "cat" (argmax over ``dims``; None where all are ~0) or "num" (``form``).
        values: the categorical values, one per direction in ``dims``.
        dims: categorical direction labels.
        form: numerical linear form (direction -> coefficient).
    """

    kind: str
    values: tuple = ()
    dims: tuple = ()
    form: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class GuardSpec:
    """A run-time check on an intermediate value.

    Either a linear form read after ``stage`` (``allowed`` values, ``integer`` or
    ``value_range``), or a categorical block: the directions ``dims`` (one per value, named
    by ``names``) read from the final residual stream, where the value's directions are
    complete (each is written only by its own S-op, at or before ``stage``).

    Attributes:
        label: the S-op checked.
        form: numerical linear form (direction -> coefficient).
        stage: the stage after which the value is complete.
        allowed: the form's value must be one of these.
        integer: the form's value must be an integer.
        value_range: the form's value must lie in ``[lo, hi]``.
        dims: categorical directions (a one-hot block: the zero vector is None).
        names: ``repr`` of the value of each of ``dims``.
        one_hot: the block must be one-hot or zero (a mixture is a categorical Aggregate
            that averaged several distinct values, which the interpreter refuses).
        none_ok: the block may be zero (None); when False, ``reason`` says why not.
        sizes: how ``dims`` split into consecutive blocks (one per input of a function);
            empty: one block.
        forbidden: ``(combination, message)``: combinations of values, one per block (an
            index into the block, or -1 for None), that may not occur together at one
            position because the interpreter does something there that the model does not
            (a function raises on them, or gives a value on None), with the error.
        reason: what goes wrong, appended to the error message.
    """

    label: str
    form: tuple[tuple[str, float], ...]
    stage: int
    allowed: tuple[float, ...] | None = None
    integer: bool = False
    value_range: tuple[float, float] | None = None
    dims: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    one_hot: bool = False
    none_ok: bool = True
    sizes: tuple[int, ...] = ()
    forbidden: tuple[tuple[tuple[int, ...], str], ...] = ()
    reason: str = ""

    @property
    def on_block(self) -> bool:
        """Whether this checks a categorical block (read from the final residual stream)."""
        return bool(self.dims or self.sizes or self.forbidden or self.one_hot or not self.none_ok)


# softmax mode: native units singular at 0, and how close to 0 their input may come (a mean
# over no key is a leak of order e^-40 times the values there, far below this)
SINGULAR_AT_ZERO = ("reciprocal", "rsqrt", "log")
LEAK_FLOOR = 1e-12


class RunTimeCheckError(ValueError):
    """A run-time check found a value the compiled model cannot compute with exactly."""


@dataclass(frozen=True)
class Component:
    """One row of the ground-truth table: a part of the model and the RASP operations it computes.

    Plain data (strings and ints): the model package knows no RASP.

    Attributes:
        site: "embed" (token and positional embedding), "attn" (one head), "mlp" (a range of
            units of one kind) or "output" (the readout of the final residual stream).
        layer: the block index (``blocks.{layer}``), -1 for the embedding and the output.
        kind: "tokens" or "static" (embed), "head" (attn), "relu", "bilinear" or a native
            kind such as "exp" (mlp), "readout" (output).
        start: the first head or unit index (within its kind) of the range.
        stop: one past the last.
        labels: the labels of the RASP expressions this component computes.
        ops: one line per expression: what it is (``Aggregate 'sort'``, ``Select(keys=...)``).
        reads: ``(side, directions)`` pairs: "query", "key", "value" for a head, "input"
            for units, "output" for the readout.
        writes: the residual directions it writes.
        hook: the cache/TransformerLens hook whose slice ``[start:stop]`` on the head or unit
            axis holds this component's activation.
    """

    site: str
    layer: int
    kind: str
    start: int
    stop: int
    labels: tuple[str, ...]
    ops: tuple[str, ...] = ()
    reads: tuple[tuple[str, tuple[str, ...]], ...] = ()
    writes: tuple[str, ...] = ()
    hook: str = ""

    @property
    def name(self) -> str:
        """A short name: ``embed``, ``L1H0``, ``L0 MLP relu 3-7``, ``output``."""
        if self.site == "attn":
            return f"L{self.layer}H{self.start}"
        if self.site == "mlp":
            span = (
                f"{self.start}" if self.stop == self.start + 1 else f"{self.start}-{self.stop - 1}"
            )
            return f"L{self.layer} MLP {self.kind} {span}"
        return self.site

    def to_dict(self) -> dict:
        """JSON-ready: tuples become lists."""
        return {
            "site": self.site,
            "layer": self.layer,
            "kind": self.kind,
            "start": self.start,
            "stop": self.stop,
            "labels": list(self.labels),
            "ops": list(self.ops),
            "reads": [[side, list(dirs)] for side, dirs in self.reads],
            "writes": list(self.writes),
            "hook": self.hook,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Component:
        """The inverse of :meth:`to_dict`."""
        return cls(
            site=d["site"],
            layer=int(d["layer"]),
            kind=d["kind"],
            start=int(d["start"]),
            stop=int(d["stop"]),
            labels=tuple(d["labels"]),
            ops=tuple(d.get("ops", ())),
            reads=tuple((side, tuple(dirs)) for side, dirs in d.get("reads", ())),
            writes=tuple(d.get("writes", ())),
            hook=d.get("hook", ""),
        )


class ComponentTable(tuple):
    """The rows of :meth:`CompiledModel.components` (a tuple of :class:`Component`), with
    look-ups by label and by place, printed as a table."""

    def for_label(self, label: str) -> tuple[Component, ...]:
        """The components that compute the expression ``label``."""
        return tuple(c for c in self if label in c.labels)

    def heads(self, label: str | None = None) -> tuple[Component, ...]:
        """The attention heads (that compute ``label``, if given)."""
        return tuple(c for c in self if c.site == "attn" and (label is None or label in c.labels))

    def at(self, site: str, layer: int, index: int, kind: str | None = None) -> Component:
        """The row holding head or unit ``index`` of ``layer`` (a KeyError if none does)."""
        for c in self:
            if (
                c.site == site
                and c.layer == layer
                and c.start <= index < c.stop
                and (kind is None or c.kind == kind)
            ):
                return c
        raise KeyError(f"no {site} component {index} in layer {layer}")

    def labels(self) -> set[str]:
        """Every label that some component computes."""
        return {label for c in self for label in c.labels}

    def to_list(self) -> list[dict]:
        return [c.to_dict() for c in self]

    def __str__(self) -> str:
        rows = [("component", "hook", "computes", "reads -> writes")]
        for c in self:
            reads = "; ".join(f"{side}: {_few(dirs)}" for side, dirs in c.reads)
            ops = " | ".join(c.ops) if c.ops else ", ".join(c.labels)
            ops = ops if len(ops) <= 100 else ops[:97] + "..."
            rows.append((c.name, c.hook, ops, f"{reads} -> {_few(c.writes)}"))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        return "\n".join(
            "  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows
        ).rstrip()


def _few(dirs: Sequence[str], n: int = 4) -> str:
    shown = ", ".join(dirs[:n])
    return shown + (f", ... ({len(dirs)} in all)" if len(dirs) > n else "")


@dataclass
class Resources:
    """A compiled transformer's sizes: depth, heads, widths and parameters."""

    layers: int
    attention_layers: int
    heads_per_layer: list[int]
    d_model: int
    d_head: int
    d_mlp: int
    d_bilinear: int
    d_native: dict[str, int]
    parameters: int
    nonzero_parameters: int

    def resources(self) -> dict:
        """Just the fields of :class:`Resources`, by name.

        >>> r = Resources(1, 1, [1], 4, 1, 0, 0, {}, 10, 3)
        >>> r.resources()["nonzero_parameters"]
        3
        """
        return {f.name: getattr(self, f.name) for f in fields(Resources)}


@dataclass
class Report(Resources):
    """What a compiled model is made of (printed as a table)."""

    name: str = ""
    compile_seconds: float = 0.0
    attention: str = "hard"
    realisations: list[dict] = field(default_factory=list)
    # the ground-truth table (Component.to_dict rows); None in checkpoints written before it
    components: list[dict] | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def __str__(self) -> str:
        lines = [
            f"model {self.name}: {self.layers} layers ({self.attention_layers} with attention), "
            f"attention={self.attention}",
            f"  heads per layer: {self.heads_per_layer}",
            f"  d_model={self.d_model} d_head={self.d_head} d_mlp={self.d_mlp} "
            f"d_bilinear={self.d_bilinear} native={self.d_native}",
            f"  parameters={self.parameters} (nonzero {self.nonzero_parameters}), "
            f"compiled in {self.compile_seconds:.3f} s",
        ]
        if self.realisations:
            lines.append("  maps:")
            for r in self.realisations:
                note = f" ({r['note']})" if r.get("note") else ""
                lines.append(
                    f"    {r['label']}: {r['how']}, {r['level']}, {r['units']} units{note}"
                )
        if self.components:
            lines.append("  components (which part computes which RASP expression):")
            table = ComponentTable(Component.from_dict(c) for c in self.components)
            lines.extend("    " + line for line in str(table).splitlines())
        return "\n".join(lines)


class CompiledModel:
    """A transformer compiled from a RASP program, with input encoding and output decoding.

    Args:
        model: the PyTorch module.
        residual: residual direction labels, in order.
        vocab: the categorical token vocabulary (None: real-valued tokens only).
        numerical_tokens: tokens also enter as numbers.
        max_seq_len: the longest input (BOS not counted).
        fixed_length: inputs must have exactly ``max_seq_len`` tokens.
        output: how to decode the output.
        guards: run-time checks on intermediate values.
        report: the resource report.
    """

    def __init__(
        self,
        model: Transformer,
        *,
        residual: Sequence[str],
        vocab: Sequence[Any] | None,
        numerical_tokens: bool,
        max_seq_len: int,
        fixed_length: bool,
        output: OutputSpec,
        guards: Sequence[GuardSpec] = (),
        report: Report | None = None,
    ) -> None:
        self.model = model
        self.residual = tuple(residual)
        self.vocab = None if vocab is None else tuple(vocab)
        self.numerical_tokens = numerical_tokens
        self.max_seq_len = max_seq_len
        self.fixed_length = fixed_length
        self.output = output
        self.guards = tuple(guards)
        self._report = report
        self._index = {d: i for i, d in enumerate(self.residual)}
        self._token_row = (
            {} if self.vocab is None else {_vkey(v): i + 1 for i, v in enumerate(self.vocab)}
        )

    def _is_token(self, x: Any) -> bool:
        return _hashable(x) and _vkey(x) in self._token_row

    @property
    def config(self) -> ModelConfig:
        return self.model.cfg

    # -- encoding --------------------------------------------------------------------------
    def encode(self, xs: Sequence[Sequence[Any]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token rows and values ``[batch, 1 + n]`` (BOS first) for equal-length inputs."""
        rows = [list(r) for r in xs]
        n = len(rows[0]) if rows else 0
        for r, row in enumerate(rows):
            if len(row) != n:
                raise ValueError(
                    f"a batch needs sequences of equal length: row 0 has {n}, row {r} has "
                    f"{len(row)}; run them separately"
                )
        if n > self.max_seq_len:
            raise ValueError(
                f"input length {n} exceeds the model's max_seq_len={self.max_seq_len}; "
                "compile with a larger max_seq_len"
            )
        if self.fixed_length and n != self.max_seq_len:
            raise ValueError(
                f"this model takes inputs of exactly {self.max_seq_len} tokens (it was "
                "compiled with fixed_length=True, or its program holds a ConstantSOp or a "
                f"ConstantSelector of that length), got {n}"
            )
        ids = torch.zeros(len(rows), n + 1, dtype=torch.long)
        vals = torch.zeros(len(rows), n + 1, dtype=torch.float64)
        if self.vocab is None and self.numerical_tokens and n:
            fast = _numeric_rows(rows)
            if fast is not None:  # all real numbers: one vectorised copy
                ids[:, 1:] = 1
                vals[:, 1:] = torch.from_numpy(fast)
                return ids, vals
        for b, row in enumerate(rows):
            for i, t in enumerate(row):
                if not _hashable(t):
                    raise TypeError(
                        f"token {t!r} at position {i} (row {b}) is a {type(t).__name__}, not a "
                        "token; a sequence is a flat list of tokens, a batch a list of "
                        "equal-length sequences"
                    )
                if self.vocab is not None:
                    k = self._token_row.get(_vkey(t))
                    if k is None and _is_num(t):
                        k = self._token_row.get(_vkey(_as_number(float(t))))
                    if k is None:
                        raise ValueError(
                            f"token {t!r} at position {i} is not in the vocabulary "
                            f"{list(self.vocab)}; use only the tokens the model was compiled for"
                        )
                    ids[b, i + 1] = k
                else:
                    ids[b, i + 1] = 1
                if self.numerical_tokens:
                    if not _is_num(t):
                        raise ValueError(
                            f"token {t!r} at position {i} is not a number; this model reads "
                            "real-valued tokens"
                        )
                    if not math.isfinite(float(t)):
                        raise ValueError(
                            f"token {t!r} at position {i} is not finite; this model computes "
                            "on finite real numbers"
                        )
                    vals[b, i + 1] = float(t)
        return ids, vals

    # -- running ---------------------------------------------------------------------------
    def forward(self, token_ids: torch.Tensor, token_values: torch.Tensor | None = None):
        """The final residual stream ``[batch, pos, d_model]`` for encoded inputs."""
        with torch.no_grad():
            return self.model(token_ids, token_values)

    __call__ = forward

    def run_with_cache(self, xs: Sequence[Any], *, check: bool = True) -> tuple[list, dict]:
        """Decoded outputs and every residual stream and attention pattern, by name."""
        batch, single = _as_batch(xs, self._is_token)
        ids, vals = self.encode(batch)
        cache: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            resid = self.model(ids, vals, cache=cache)
        if check:
            self._check_guards(cache)
            self._check_singular(cache)
            self._check_finite(resid, cache)
            self._check_blocks(resid)
        out = self._decode(resid)
        return (out[0] if single else out), cache

    def run(self, xs: Sequence[Any], *, check: bool = True) -> list:
        """Runs the model on one sequence (or a batch) and decodes like the interpreter.

        Args:
            xs: a token list (a string stands for its characters), or a list of
                equal-length token lists.
            check: verify intermediate values against the compiler's assumptions and raise
                if one is violated (a value outside a map's finite value set, a categorical
                aggregate over several distinct values, None where a function needs a value).

        Raises:
            TypeError: ``xs`` is not a sequence of tokens or a batch of them.
            ValueError: a token the model was not compiled for, or a length it cannot take.
            RunTimeCheckError: (a ValueError) a check failed; the message says where and why.
        """
        batch, single = _as_batch(xs, self._is_token)
        if check and (any(not g.on_block for g in self.guards) or self._singular_kinds()):
            out, _ = self.run_with_cache(batch, check=True)
            return out[0] if single else out
        ids, vals = self.encode(batch)
        resid = self.forward(ids, vals)
        if check:
            self._check_finite(resid)
            self._check_blocks(resid)
        out = self._decode(resid)
        return out[0] if single else out

    def _read(self, resid: torch.Tensor, form: Sequence[tuple[str, float]]) -> torch.Tensor:
        acc = torch.zeros(resid.shape[:-1], dtype=resid.dtype)
        for d, w in form:
            acc = acc + w * resid[..., self._index[d]]
        return acc

    def _block_tolerance(self) -> float:
        # a mixture's smallest share is 1/n >= 1/max_seq_len; rounding stays far below
        return min(1e-3, 0.25 / (self.max_seq_len + 1))

    def _decode(self, resid: torch.Tensor) -> list[list[Any]]:
        resid = resid[:, 1:]  # drop BOS
        spec = self.output
        if spec.kind == "num":
            vals = self._read(resid, spec.form)
            return vals.tolist()
        if not spec.dims:
            return [[None] * resid.shape[1] for _ in range(resid.shape[0])]
        idx = torch.tensor([self._index[d] for d in spec.dims])
        scores = resid[..., idx]  # [batch, pos, values]
        tol = self._block_tolerance()
        # the output is one-hot (a value) or zero (None); anything else cannot be decoded
        mixed = ((scores > tol) & (scores < 1 - tol)).any(dim=-1) | (scores.sum(-1) > 1 + tol)
        if bool(mixed.any()):
            b, i = (int(x) for x in torch.nonzero(mixed)[0])
            shares = ", ".join(
                f"{spec.values[k]!r}: {float(scores[b, i, k]):.3g}"
                for k in range(len(spec.dims))
                if float(scores[b, i, k]) > tol
            )
            raise RunTimeCheckError(
                f"the output at position {i} (row {b}) is not one value but a mixture "
                f"({shares}); a categorical aggregate averaged several distinct values, "
                "which the interpreter refuses too: make its selector select one key"
            )
        best = scores.argmax(dim=-1)
        top = scores.gather(-1, best[..., None])[..., 0]
        out = []
        for b in range(resid.shape[0]):
            row = []
            for i in range(resid.shape[1]):
                row.append(spec.values[best[b, i]] if top[b, i] > 0.5 else None)
            out.append(row)
        return out

    def _stage_resid(self, cache: dict, stage: int) -> torch.Tensor:
        if stage == 0:
            return cache["hook_embed"]
        layer = (stage + 1) // 2 - 1
        if layer >= self.model.cfg.n_layers:
            # a stage past the last block (its blocks were empty): the value is complete in
            # the final residual stream, which no later block changes
            layer, stage = self.model.cfg.n_layers - 1, 2 * self.model.cfg.n_layers
            if layer < 0:
                return cache["hook_embed"]
        hook = "hook_resid_mid" if stage % 2 == 1 else "hook_resid_post"
        return cache[f"blocks.{layer}.{hook}"]

    def _check_finite(self, resid: torch.Tensor, cache: dict | None = None) -> None:
        """Every value the model computed at a real position is finite.

        A residual direction keeps what was added to it, so a NaN or an infinity written at
        any stage is still there at the end: checking the final stream checks them all. With
        the cache, the message names the sublayer where it first appeared."""
        bad = ~torch.isfinite(resid[:, 1:])  # [batch, pos, d_model], BOS dropped
        if not bool(bad.any()):
            return
        b, i = (int(x) for x in torch.nonzero(bad.any(dim=-1))[0])
        where = ""
        for layer in range(self.config.n_layers) if cache is not None else ():
            for hook, part in (("hook_resid_mid", "attention"), ("hook_resid_post", "MLP")):
                stream = cache.get(f"blocks.{layer}.{hook}")
                if stream is not None and not bool(torch.isfinite(stream[b, i + 1]).all()):
                    where = f", first in layer {layer}'s {part}"
                    break
            if where:
                break
        raise RunTimeCheckError(
            f"run-time check failed: at position {i} (row {b}) a value is not finite{where}; "
            "a compiled model computes with finite values only (a NaN or an "
            "infinity spreads through its sums to other values), so it cannot give the "
            "interpreter's result here, which is inf or NaN (a division by zero, a square root "
            "or a log of a negative number). Keep the program's values finite on its inputs, "
            "or pass check=False for the raw output"
        )

    def _singular_kinds(self) -> list[str]:
        """Softmax mode: the native units that are singular at 0 (their inputs are checked)."""
        if self.config.attention is not AttentionMode.SOFTMAX:
            return []
        return [k for k in SINGULAR_AT_ZERO if self.config.d_native.get(k, 0)]

    def _check_singular(self, cache: dict) -> None:
        """Softmax mode: 1/x, 1/sqrt(x) and log(x) must not read a value that the attention's
        leakage cannot tell from 0 (a mean over no key is a tiny number there, not 0)."""
        for kind in self._singular_kinds():
            for layer in range(self.config.n_layers):
                pre = cache.get(f"blocks.{layer}.mlp.hook_{kind}_pre")
                if pre is None:
                    continue
                gate = cache[f"blocks.{layer}.mlp.hook_{kind}_gate"]
                bad = (gate[:, 1:] != 0) & (pre[:, 1:].abs() < LEAK_FLOOR)
                if bool(bad.any()):
                    b, i, u = (int(x) for x in torch.nonzero(bad)[0])
                    raise RunTimeCheckError(
                        f"run-time check failed: at position {i} (row {b}) a {kind} unit of "
                        f"layer {layer} reads {float(pre[b, i + 1, u]):.3g}, within "
                        f"{LEAK_FLOOR:g} of 0, where softmax attention's leakage decides the "
                        "result (the interpreter's value is infinite or undefined there); "
                        "compile with attention='hard', or keep that input away from 0"
                    )

    def _check_guards(self, cache: dict) -> None:
        for g in self.guards:
            if g.on_block:
                continue
            vals = self._read(self._stage_resid(cache, g.stage)[:, 1:], g.form)
            if g.value_range is not None:
                lo, hi = g.value_range
                slack = 1e-9 * max(1.0, abs(lo) if math.isfinite(lo) else 1.0, abs(hi))
                bad = (vals < lo - slack) | (vals > hi + slack) | ~torch.isfinite(vals)
                what = f"inside its declared range [{lo:g}, {hi:g}]"
            elif g.integer:
                bad = (vals - vals.round()).abs() > 1e-6 * vals.abs().clamp(min=1)
                what = "an integer"
            else:
                allowed = torch.tensor(g.allowed, dtype=vals.dtype)
                if len(g.allowed) == 0:  # no input gives a value (the function fails on all)
                    bad = torch.ones_like(vals, dtype=torch.bool)
                else:
                    dist = (vals[..., None] - allowed).abs().amin(dim=-1)
                    bad = dist > 1e-6 * vals.abs().clamp(min=1)
                what = (
                    "one of its inferred values"
                    if len(g.allowed)
                    else "a value: its function gives no value on any input the compiler saw"
                )
            if bad.any():
                b, i = (int(x) for x in torch.nonzero(bad)[0])
                raise RunTimeCheckError(
                    f"run-time check failed: {g.label!r} = {float(vals[b, i])!r} at position "
                    f"{i} (row {b}) is not {what}; the compiled model would be wrong here. "
                    + (
                        g.reason
                        or "Declare the S-op's values (or its range) so the compiler can plan "
                        "for it"
                    )
                )

    def _check_blocks(self, resid: torch.Tensor) -> None:
        """Checks the categorical blocks on the final residual stream (BOS left out)."""
        tol = self._block_tolerance()
        for g in self.guards:
            if not g.on_block:
                continue
            idx = torch.tensor([self._index[d] for d in g.dims])
            block = resid[:, 1:, idx]  # [batch, pos, values]
            if g.one_hot:
                mixed = ((block > tol) & (block < 1 - tol)).any(dim=-1) | (
                    block.sum(dim=-1) > 1 + tol
                )
                if bool(mixed.any()):
                    b, i = (int(x) for x in torch.nonzero(mixed)[0])
                    seen = sorted(g.names[k] for k in range(len(g.dims)) if block[b, i, k] > tol)
                    raise RunTimeCheckError(
                        f"run-time check failed: categorical Aggregate {g.label!r} would "
                        f"average several distinct values ({', '.join(seen)}) at query "
                        f"position {i} (row {b}); {g.reason}"
                    )
            if not g.none_ok:
                empty = (block.abs() <= tol).all(dim=-1)
                if bool(empty.any()):
                    b, i = (int(x) for x in torch.nonzero(empty)[0])
                    raise RunTimeCheckError(
                        f"run-time check failed: {g.label!r} is None (no value) at position "
                        f"{i} (row {b}); {g.reason}"
                    )
            if g.forbidden:
                self._check_combinations(g, block, tol)

    def _check_combinations(self, g: GuardSpec, block: torch.Tensor, tol: float) -> None:
        """Raises at the first position holding a forbidden combination of block values."""
        sizes = g.sizes or (len(g.dims),)
        # each block's value as a code (its index, or its size for None), then one joint code
        joint = torch.zeros(block.shape[:-1], dtype=torch.long)
        start, strides = 0, []
        for size in sizes:
            part = block[..., start : start + size]
            start += size
            if size:
                top, code = part.max(dim=-1)
                code = torch.where(top > 1 - tol, code, torch.full_like(code, size))
            else:
                code = torch.zeros(part.shape[:-1], dtype=torch.long)
            strides.append(size + 1)
            joint = joint * (size + 1) + code
        codes = []
        for combo, _ in g.forbidden:
            c = 0
            for k, size, stride in zip(combo, sizes, strides):
                c = c * stride + (size if k < 0 else k)
            codes.append(c)
        hit = torch.isin(joint, torch.tensor(codes, dtype=torch.long))
        if bool(hit.any()):
            b, i = (int(x) for x in torch.nonzero(hit)[0])
            message = g.forbidden[codes.index(int(joint[b, i]))][1]
            raise RunTimeCheckError(f"run-time check failed at position {i} (row {b}): {message}")

    # -- ground truth and activation patching -----------------------------------------------
    def components(self) -> ComponentTable:
        """Which head, unit range, embedding or readout computes which RASP expression.

        Returns:
            A :class:`ComponentTable` (a tuple of :class:`Component` rows; ``str`` of it is a
            readable table).

        Raises:
            ValueError: the model carries no table (a checkpoint saved before the table
                existed, or a model built by hand); recompile the program to get one.
        """
        rows = None if self._report is None else self._report.components
        if rows is None:
            raise ValueError(
                "this model carries no component table (it was saved before attnsim recorded "
                "one, or built without the compiler); compile the program again to get it"
            )
        return ComponentTable(Component.from_dict(r) for r in rows)

    def component_output(self, xs: Sequence[Any], component: Component) -> torch.Tensor:
        """What ``component`` adds to the residual stream on ``xs``: ``[batch, pos, d_model]``.

        Heads and unit ranges only (the embedding and the readout add nothing of their own).
        """
        batch, _ = _as_batch(xs, self._is_token)
        ids, vals = self.encode(batch)
        cache: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            self.model(ids, vals, cache=cache)
            key = "hook_resid_pre" if component.site == "attn" else "hook_resid_mid"
            x = cache[f"blocks.{component.layer}.{key}"]
            return self._contribution(x, component)

    def run_patched(
        self,
        xs: Sequence[Any],
        source: Sequence[Any],
        components: Iterable[Component],
    ) -> list:
        """Runs ``xs`` with the outputs of ``components`` taken from a run on ``source``.

        Activation patching: each patched head or unit range adds to the residual stream what
        it added in the (unpatched) run on ``source``, instead of what it computes on ``xs``;
        everything else runs on ``xs``. Run-time checks are off (a patched run may hold
        values no input gives).

        Args:
            xs: the input (one sequence or a batch).
            source: an input of the same shape whose activations are patched in.
            components: rows of :meth:`components` (heads or MLP unit ranges).

        Returns:
            The decoded output, like :meth:`run`.
        """
        batch, single = _as_batch(xs, self._is_token)
        src, _ = _as_batch(source, self._is_token)
        if len(src) != len(batch) or any(len(a) != len(b) for a, b in zip(src, batch)):
            raise ValueError("run_patched needs a source input of the same shape as xs")
        components = list(components)
        for c in components:
            if c.site not in ("attn", "mlp"):
                raise ValueError(f"only heads and MLP units can be patched, got {c.name}")
        src_out = {c: self.component_output(src, c) for c in components}
        handles = []
        for c in components:
            block = self.model.blocks[c.layer]
            module = block.attn if c.site == "attn" else block.mlp

            def hook(mod, args, out, c=c):
                return out - self._contribution(args[0], c) + src_out[c]

            handles.append(module.register_forward_hook(hook))
        try:
            ids, vals = self.encode(batch)
            resid = self.forward(ids, vals)
        finally:
            for h in handles:
                h.remove()
        out = self._decode(resid)
        return out[0] if single else out

    def _contribution(self, x: torch.Tensor, c: Component) -> torch.Tensor:
        """The residual update of head/unit range ``c`` on the stream ``x`` entering it."""
        block = self.model.blocks[c.layer]
        if c.site == "attn":
            attn = block.attn
            d_head = attn.W_Q.shape[-1]
            hs = torch.arange(c.start, c.stop)
            _, _, z = attn._heads(x, hs, d_head, d_head, False)  # [batch, head, pos, d_head]
            return torch.einsum("bhqk,hkd->bqd", z, attn.W_O[hs])
        mlp = block.mlp
        sl = slice(c.start, c.stop)
        if c.kind == "relu":
            return torch.relu(x @ mlp.W_in[:, sl]) @ mlp.W_out[sl]
        if c.kind == "bilinear":
            prod = (x @ mlp.W_bil_a[:, sl]) * (x @ mlp.W_bil_b[:, sl])
            return prod @ mlp.W_bil_out[sl]
        pre = x @ getattr(mlp, f"W_{c.kind}_in")[:, sl]
        gate = x @ getattr(mlp, f"W_{c.kind}_gate")[:, sl]
        val = torch.where(gate != 0, NATIVE_FUNCTIONS[c.kind](pre), torch.zeros_like(pre)) * gate
        return val @ getattr(mlp, f"W_{c.kind}_out")[sl]

    # -- reports and checkpoints -------------------------------------------------------------
    def report(self) -> Report:
        """Layers, heads per layer, widths, parameters and how every map was realised."""
        if self._report is None:
            raise ValueError("this model carries no report")
        return self._report

    def save(self, directory: str | Path) -> Path:
        """Writes ``model.safetensors`` and ``model.json`` into ``directory``."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().contiguous() for k, v in self.model.state_dict().items()}
        save_file(tensors, str(path / "model.safetensors"))
        meta = {
            "format": FORMAT,
            "config": self.model.cfg.to_json(),
            "residual": list(self.residual),
            "vocab": None if self.vocab is None else list(self.vocab),
            "numerical_tokens": self.numerical_tokens,
            "max_seq_len": self.max_seq_len,
            "fixed_length": self.fixed_length,
            "output": {
                "kind": self.output.kind,
                "values": list(self.output.values),
                "dims": list(self.output.dims),
                "form": [list(t) for t in self.output.form],
            },
            "guards": [
                {
                    "label": g.label,
                    "form": [list(t) for t in g.form],
                    "stage": g.stage,
                    "allowed": None if g.allowed is None else list(g.allowed),
                    "integer": g.integer,
                    "value_range": None if g.value_range is None else list(g.value_range),
                    "dims": list(g.dims),
                    "names": list(g.names),
                    "one_hot": g.one_hot,
                    "none_ok": g.none_ok,
                    "sizes": list(g.sizes),
                    "forbidden": [[list(c), m] for c, m in g.forbidden],
                    "reason": g.reason,
                }
                for g in self.guards
            ],
            "report": None if self._report is None else self._report.to_dict(),
        }
        (path / "model.json").write_text(json.dumps(meta, indent=1))
        return path

    @classmethod
    def load(cls, directory: str | Path) -> CompiledModel:
        """Loads a model written by :meth:`save` (reads data only; runs no code).

        Everything is checked before the model is built: the JSON's keys and value kinds,
        the weights' names, shapes and dtypes against the config, the memory the config
        asks for, and that every weight is finite.

        Raises:
            FileNotFoundError: ``model.json`` or ``model.safetensors`` is missing.
            DamagedCheckpointError: (a ValueError) a file is not what :meth:`save` wrote;
                the message names the file and the key or tensor.
            ModelTooLargeError: (a MemoryError) the config does not fit in memory.
        """
        path = Path(directory)
        meta, cfg = checkpoint.read_meta(path)
        state = checkpoint.read_weights(path, cfg)
        model = Transformer(cfg)
        model.load_state_dict(state)
        out = meta["output"]
        report = None
        if meta["report"] is not None:
            try:
                report = Report(**meta["report"])
            except TypeError as exc:
                raise checkpoint.damaged(
                    path / "model.json", f"has an invalid 'report' ({exc})"
                ) from None
        return cls(
            model,
            residual=meta["residual"],
            vocab=meta["vocab"],
            numerical_tokens=meta["numerical_tokens"],
            max_seq_len=meta["max_seq_len"],
            fixed_length=meta["fixed_length"],
            output=OutputSpec(out["kind"], tuple(out["values"]), tuple(out["dims"]), out["form"]),
            guards=[GuardSpec(**g) for g in meta["guards"]],
            report=report,
        )


def _vkey(v: Any) -> tuple:
    return (type(v).__name__, v)


def _numeric_rows(rows: list[list[Any]]) -> np.ndarray | None:
    """The rows as a float64 array when every token is a finite real number, else None
    (the element-by-element path then names the offending token)."""
    if not all(_is_num(t) for row in rows for t in row):
        return None
    arr = np.asarray(rows, dtype=np.float64)
    return arr if np.isfinite(arr).all() else None


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _as_number(x: float) -> Any:
    return int(x) if float(x).is_integer() else x


def _as_batch(xs: Any, is_token: Any = None) -> tuple[list, bool]:
    """``(rows, single)``: one sequence becomes a batch of one; refuses what is neither.

    ``is_token(x)`` tells a tuple token (a vocabulary of pairs) from a row of a batch.
    """
    if isinstance(xs, (np.ndarray, torch.Tensor)):
        if xs.ndim not in (1, 2):
            raise ValueError(
                f"expected a sequence of tokens (1-D) or a batch of them (2-D), got a "
                f"{xs.ndim}-D array of shape {tuple(xs.shape)}"
            )
        return (xs.tolist(), False) if xs.ndim == 2 else ([xs.tolist()], True)
    if isinstance(xs, (bytes, bytearray)) or not isinstance(xs, Iterable):
        raise TypeError(
            "expected a sequence of tokens (a list, or a string of characters) or a list of "
            f"equal-length sequences, got {type(xs).__name__} {xs!r}"
            + ("; wrap one token in a list: [token]" if _hashable(xs) else "")
        )
    if isinstance(xs, Mapping) or isinstance(xs, (set, frozenset)):
        raise TypeError(
            f"expected a sequence of tokens in order, got a {type(xs).__name__}; pass a list"
        )
    xs = list(xs)
    rows = [isinstance(r, (list, tuple, np.ndarray, torch.Tensor)) for r in xs]
    if xs and rows[0] and isinstance(xs[0], tuple) and is_token is not None and is_token(xs[0]):
        return [xs], True  # tuple tokens (pairs, say) in one sequence
    if xs and rows[0]:
        out = []
        for r, row in enumerate(xs):
            if not isinstance(row, (list, tuple, np.ndarray, torch.Tensor)):
                raise TypeError(
                    f"a batch is a list of sequences, but row {r} is the "
                    f"{type(row).__name__} {row!r} while row 0 is a sequence; pass one "
                    "sequence (a list of tokens) or a list of lists"
                )
            out.append(row.tolist() if isinstance(row, (np.ndarray, torch.Tensor)) else list(row))
        return out, False
    return [xs], True


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True
