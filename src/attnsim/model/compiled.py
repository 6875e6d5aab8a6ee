"""A compiled model: the Transformer plus how to encode inputs and decode its output.

Knows no RASP: everything here is plain data (vocabulary, residual labels, the output's
directions), so a model saved with :meth:`CompiledModel.save` loads without the program.
Checkpoints are a safetensors file of weights and a JSON file of metadata; loading runs
no code.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from attnsim.model.config import ModelConfig
from attnsim.model.transformer import Transformer

FORMAT = "attnsim-compiled-model/1"


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
    """A run-time check on an intermediate value (a linear form read after ``stage``)."""

    label: str
    form: tuple[tuple[str, float], ...]
    stage: int
    allowed: tuple[float, ...] | None = None
    integer: bool = False
    value_range: tuple[float, float] | None = None


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
                f"this model was compiled for inputs of exactly {self.max_seq_len} tokens "
                f"(fixed_length=True), got {n}"
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
                        raise ValueError(f"token {t!r} at position {i} is not finite")
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
        batch, single = _as_batch(xs)
        ids, vals = self.encode(batch)
        cache: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            resid = self.model(ids, vals, cache=cache)
        if check:
            self._check_guards(cache)
        out = self._decode(resid)
        return (out[0] if single else out), cache

    def run(self, xs: Sequence[Any], *, check: bool = True) -> list:
        """Runs the model on one sequence (or a batch) and decodes like the interpreter.

        Args:
            xs: a token list, or a list of equal-length token lists.
            check: verify intermediate values against the compiler's assumptions and raise
                if one is violated (a value outside a map's finite value set, say).
        """
        batch, single = _as_batch(xs)
        if not check or not self.guards:
            ids, vals = self.encode(batch)
            out = self._decode(self.forward(ids, vals))
            return out[0] if single else out
        out, _ = self.run_with_cache(batch, check=True)
        return out[0] if single else out

    def _read(self, resid: torch.Tensor, form: Sequence[tuple[str, float]]) -> torch.Tensor:
        acc = torch.zeros(resid.shape[:-1], dtype=resid.dtype)
        for d, w in form:
            acc = acc + w * resid[..., self._index[d]]
        return acc

    def _decode(self, resid: torch.Tensor) -> list[list[Any]]:
        resid = resid[:, 1:]  # drop BOS
        spec = self.output
        if spec.kind == "num":
            vals = self._read(resid, spec.form)
            return vals.tolist()
        if not spec.dims:
            return [[None] * resid.shape[1] for _ in range(resid.shape[0])]
        idx = torch.tensor([self._index[d] for d in spec.dims])
        scores = resid[..., idx]
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
        hook = "hook_resid_mid" if stage % 2 == 1 else "hook_resid_post"
        return cache[f"blocks.{layer}.{hook}"]

    def _check_guards(self, cache: dict) -> None:
        for g in self.guards:
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
                dist = (vals[..., None] - allowed).abs().amin(dim=-1)
                bad = dist > 1e-6 * vals.abs().clamp(min=1)
                what = "one of its inferred values"
            if bad.any():
                b, i = (int(x) for x in torch.nonzero(bad)[0])
                raise ValueError(
                    f"run-time check failed: {g.label!r} = {float(vals[b, i])!r} at position "
                    f"{i} (row {b}) is not {what}; the compiled model would be wrong here. "
                    "Declare the S-op's values (or its range) so the compiler can plan for it"
                )

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
                }
                for g in self.guards
            ],
            "report": None if self._report is None else self._report.to_dict(),
        }
        (path / "model.json").write_text(json.dumps(meta, indent=1))
        return path

    @classmethod
    def load(cls, directory: str | Path) -> CompiledModel:
        """Loads a model written by :meth:`save` (reads data only; runs no code)."""
        path = Path(directory)
        meta_file = path / "model.json"
        if not meta_file.exists():
            raise FileNotFoundError(f"no model.json in {path}; expected a saved CompiledModel")
        try:
            meta = json.loads(meta_file.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(
                f"{meta_file} is not valid JSON ({exc}); the checkpoint is damaged: save the "
                "model again"
            ) from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ValueError(f"{meta_file} is not an attnsim compiled model (format {FORMAT})")
        model = Transformer(ModelConfig.from_json(meta["config"]))
        weights = path / "model.safetensors"
        if not weights.exists():
            raise FileNotFoundError(f"no model.safetensors in {path}; save the model again")
        try:
            state = load_file(str(weights))
        except Exception as exc:  # safetensors raises its own error type for damaged files
            raise ValueError(
                f"{weights} cannot be read ({exc}); the checkpoint is damaged: save the model again"
            ) from None
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            raise ValueError(f"{weights} does not match {meta_file}: {exc}") from None
        out = meta["output"]
        report = None if meta["report"] is None else Report(**meta["report"])
        return cls(
            model,
            residual=meta["residual"],
            vocab=meta["vocab"],
            numerical_tokens=meta["numerical_tokens"],
            max_seq_len=meta["max_seq_len"],
            fixed_length=meta["fixed_length"],
            output=OutputSpec(
                out["kind"],
                tuple(out["values"]),
                tuple(out["dims"]),
                tuple((d, float(w)) for d, w in out["form"]),
            ),
            guards=[
                GuardSpec(
                    g["label"],
                    tuple((d, float(w)) for d, w in g["form"]),
                    g["stage"],
                    None if g["allowed"] is None else tuple(g["allowed"]),
                    g["integer"],
                    None if g.get("value_range") is None else tuple(g["value_range"]),
                )
                for g in meta["guards"]
            ],
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


def _as_batch(xs: Any) -> tuple[list, bool]:
    if isinstance(xs, np.ndarray):
        return (xs.tolist(), False) if xs.ndim == 2 else ([xs.tolist()], True)
    if isinstance(xs, torch.Tensor):
        return (xs.tolist(), False) if xs.ndim == 2 else ([xs.tolist()], True)
    xs = list(xs)
    if xs and isinstance(xs[0], (list, tuple, np.ndarray)):
        return [list(r) for r in xs], False
    return [xs], True
