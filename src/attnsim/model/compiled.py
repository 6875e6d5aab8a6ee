"""A compiled model: the Transformer plus how to encode inputs and decode its output.

Knows no RASP: everything here is plain data (vocabulary, residual labels, the output's
directions), so a model saved with :meth:`CompiledModel.save` loads without the program.
Checkpoints are a safetensors file of weights and a JSON file of metadata; loading runs
no code.

The parts live in their own modules and are re-exported here: :mod:`attnsim.model.codec`
(input encoding, output decoding, :class:`OutputSpec`), :mod:`attnsim.model.checks` (the
run-time checks, :class:`GuardSpec`, :class:`RunTimeCheckError`) and
:mod:`attnsim.model.report` (:class:`Report`, :class:`Resources`, :class:`Component`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from attnsim.model import checkpoint, checks, codec, digests, memory, pattern_store, plans
from attnsim.model.checks import LEAK_FLOOR, SINGULAR_AT_ZERO, GuardSpec, RunTimeCheckError
from attnsim.model.codec import OutputSpec
from attnsim.model.config import ModelConfig
from attnsim.model.ground_truth import GroundTruth
from attnsim.model.report import Component, ComponentTable, Report, Resources
from attnsim.model.runtime import Runtime
from attnsim.model.sparse import SparseTransformer
from attnsim.model.transformer import Transformer
from attnsim.values import as_token, check_bool, is_hashable, value_key

__all__ = [
    "FORMAT",
    "LEAK_FLOOR",
    "SINGULAR_AT_ZERO",
    "CompiledModel",
    "Component",
    "ComponentTable",
    "GuardSpec",
    "OutputSpec",
    "Report",
    "Resources",
    "RunTimeCheckError",
]

FORMAT = checkpoint.FORMAT
_as_batch = codec.as_batch  # the name attnsim.model.onnx_export reads


class CompiledModel(GroundTruth):
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
        model: Transformer | SparseTransformer,
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
        self._token_row = codec.token_rows(self.vocab)

    def _batch(self, xs: Any) -> tuple[Any, bool]:
        """``(batch, single)``: the input as a batch, and whether it was one sequence."""
        if self.config.token_width:
            return codec.vector_batch(xs, self.config.token_width)
        return _as_batch(xs, self._is_token)

    def _is_token(self, x: Any) -> bool:
        x = as_token(x)
        return is_hashable(x) and value_key(x) in self._token_row

    @property
    def config(self) -> ModelConfig:
        return self.model.cfg

    # -- encoding --------------------------------------------------------------------------
    def encode(self, xs: Sequence[Sequence[Any]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token rows and values ``[batch, 1 + n]`` (BOS first) for equal-length inputs
        (vector tokens: values ``[batch, 1 + n, width]`` for ``xs`` ``[batch, n, width]``)."""
        if self.config.token_width:
            arr, _ = codec.vector_batch(xs, self.config.token_width)
            return codec.encode_vectors(
                arr, max_seq_len=self.max_seq_len, fixed_length=self.fixed_length
            )
        return codec.encode(
            xs,
            vocab=self.vocab,
            token_row=self._token_row,
            numerical_tokens=self.numerical_tokens,
            max_seq_len=self.max_seq_len,
            fixed_length=self.fixed_length,
        )

    # -- running ---------------------------------------------------------------------------
    def forward(self, token_ids: torch.Tensor, token_values: torch.Tensor | None = None):
        """The final residual stream ``[batch, pos, d_model]`` for encoded inputs."""
        with torch.no_grad():
            return self.runtime(token_ids, token_values)

    __call__ = forward

    @property
    def runtime(self) -> Runtime:
        """What runs :attr:`model`, called as the model is: a :class:`Runtime`, in either
        storage (it keeps the plans, counts and prepared weights of its executor). One per
        model object; a new :attr:`model` gets a new one, with the same executor.

        >>> from attnsim import compile_program, library
        >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
        >>> ids, _ = m.encode(["abba"])
        >>> type(m.runtime).__name__, torch.equal(m.runtime(ids), m.model(ids))
        ('Runtime', True)
        """
        got = self.__dict__.get("_runtime")
        if got is not None and got[0] is self.model:
            return got[1]
        rt = Runtime(self.model, got[1].executor if got is not None else "auto")
        self._runtime = (self.model, rt)
        return rt

    @property
    def storage(self) -> str:
        """ "dense" (a :class:`Transformer`) or "sparse" (a :class:`SparseTransformer`: the
        non-zero weights only; see :mod:`attnsim.model.sparse`).

        >>> from attnsim import compile_program, library
        >>> compile_program(library.make_hist(), vocab="ab", max_seq_len=3).storage
        'dense'
        """
        return getattr(self.model, "storage", "dense")

    def dense_only(self, what: str) -> None:
        """Raises ValueError naming ``what`` when the model is in sparse storage.

        >>> from attnsim import compile_program, library
        >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=3, storage="sparse")
        >>> try:
        ...     m.dense_only("the ONNX export")
        ... except ValueError as exc:
        ...     print(str(exc)[:60])
        the ONNX export needs the dense weights, and this model is i
        """
        if self.storage == "sparse":
            raise ValueError(
                f"{what} needs the dense weights, and this model is in sparse storage (its "
                "dense form would be too large, or storage='sparse' was asked for); compile "
                "with storage='dense', or take model.to_dense() when it fits in memory"
            )

    def to_dense(self) -> CompiledModel:
        """The same model with dense weights (a sparse model's :meth:`SparseTransformer.
        to_dense`; the model itself when it is dense).

        Raises:
            ModelTooLargeError: the dense weights do not fit in memory.

        >>> from attnsim import compile_program, library
        >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=3, storage="sparse")
        >>> d = m.to_dense()
        >>> d.storage, d.run("aba") == m.run("aba") == [2, 1, 2]
        ('dense', True)
        """
        if self.storage == "dense":
            return self
        cfg = self.model.cfg
        need = memory.weight_bytes(cfg)
        memory.check_fits(
            need, f"the dense form of this model ({memory.gib(need)})", "keep it sparse"
        )
        return CompiledModel(
            self.model.to_dense(),
            residual=self.residual,
            vocab=self.vocab,
            numerical_tokens=self.numerical_tokens,
            max_seq_len=self.max_seq_len,
            fixed_length=self.fixed_length,
            output=self.output,
            guards=self.guards,
            report=self._report,
        )

    def run_with_cache(self, xs: Sequence[Any], *, check: bool = True) -> tuple[list, dict]:
        """Decoded outputs and every residual stream and attention pattern, by name."""
        check = check_bool(check, "check")
        self.dense_only("run_with_cache")
        batch, single = self._batch(xs)
        ids, vals = self.encode(batch)
        cache: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            resid = self.runtime(ids, vals, cache=cache).cpu()  # checked and decoded on CPU
        cache.update((k, v.cpu()) for k, v in cache.items())
        if check:
            self._check_guards(cache)
            self._check_singular(cache)
            self._check_finite(resid, cache)
            self._check_blocks(resid)
        out = self._decode(resid)
        return (out[0] if single else out), cache

    def run(self, xs: Sequence[Any], *, check: bool = True, executor: str | None = None) -> list:
        """Runs the model on one sequence (or a batch) and decodes like the interpreter.

        Args:
            xs: a token list (a string stands for its characters), or a list of
                equal-length token lists.
            check: verify intermediate values against the compiler's assumptions and raise
                if one is violated (a value outside a map's finite value set, a categorical
                aggregate over several distinct values, None where a function needs a value).
            executor: "auto", "plan", "fused", "dense" or "jit" for this run only
                (default: :attr:`executor`).

        Raises:
            TypeError: ``xs`` is not a sequence of tokens or a batch of them, or ``check``
                is not a bool.
            ValueError: a token the model was not compiled for, or a length it cannot take.
            RunTimeCheckError: (a ValueError) a check failed; the message says where and why.
        """
        check = check_bool(check, "check")
        if executor is not None and executor != self.executor:
            saved = self.executor
            self.executor = executor  # checked there
            try:
                return self.run(xs, check=check)
            finally:
                self.executor = saved
        batch, single = self._batch(xs)
        if check and self._singular_kinds():  # the checks read MLP inputs: a full cache
            out, _ = self.run_with_cache(batch, check=True)
            return out[0] if single else out
        ids, vals = self.encode(batch)
        n_layers = self.config.n_layers
        # the guards read the residual stream after a few stages: only those are kept
        # (a full cache would hold every head's pattern, and run every head densely)
        streams = (
            {min(g.stage, 2 * n_layers): None for g in self.guards if not g.on_block}
            if check
            else {}
        )
        with torch.no_grad():
            resid = self.runtime(ids, vals, streams=streams or None).cpu()  # decoded on CPU
        streams = {k: None if v is None else v.cpu() for k, v in (streams or {}).items()}
        if check:
            if streams:
                self._check_guards(checks.streams_as_cache(streams, n_layers))
            self._check_finite(resid)
            self._check_blocks(resid)
        out = self._decode(resid)
        return out[0] if single else out

    def _read(self, resid: torch.Tensor, form: Sequence[tuple[str, float]]) -> torch.Tensor:
        return checks.read_form(resid, form, self._index)

    def _block_tolerance(self) -> float:
        return checks.block_tolerance(self.max_seq_len)

    def _decode(self, resid: torch.Tensor) -> list[list[Any]]:
        return codec.decode(resid, self.output, self._index, self._block_tolerance())

    def _stage_resid(self, cache: dict, stage: int) -> torch.Tensor:
        return checks.stage_resid(cache, stage, self.model.cfg.n_layers)

    def _check_finite(self, resid: torch.Tensor, cache: dict | None = None) -> None:
        checks.check_finite(resid, cache, self.config.n_layers)

    def _singular_kinds(self) -> list[str]:
        return checks.singular_kinds(self.config)

    def _check_singular(self, cache: dict) -> None:
        checks.check_singular(cache, self.config)

    def _check_guards(self, cache: dict) -> None:
        checks.check_guards(self.guards, cache, self._index, self.config.n_layers)

    def _check_blocks(self, resid: torch.Tensor) -> None:
        checks.check_blocks(self.guards, resid, self._index, self._block_tolerance())

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

    # -- reports and checkpoints -------------------------------------------------------------
    def report(self) -> Report:
        """Layers, heads per layer, widths, parameters and how every map was realised."""
        if self._report is None:
            raise ValueError("this model carries no report")
        return self._report

    @property
    def executor(self) -> str:
        """How the forward pass runs: "auto" (the default: short inputs feature-major where
        that costs less, see :mod:`attnsim.model.fused`, the others as "plan"), "plan"
        (heads whose pattern only the input length decides run as gathers and sparse sums,
        see :mod:`attnsim.model.plans`), "fused" (always feature-major, every head dense),
        "dense" (every head over [query, key]: the plain definition) or "jit" (short
        inputs: the feature-major pass compiled by torch's compiler, inductor, and timed
        against the plans on the first call of each input shape, seconds, the faster kept;
        longer ones, and weights made under ``torch.inference_mode()``, as "auto"). All give
        the dense outputs to rounding. Settable; kept by :attr:`runtime`.

        >>> from attnsim import rasp
        >>> from attnsim.compiler import compile_program
        >>> m = compile_program(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices,
        ...     rasp.Comparison.EQ), rasp.tokens), vocab=["a", "b"], max_seq_len=3)
        >>> m.executor, m.plan_summary()["static_heads"]
        ('auto', [[0]])
        >>> m.run(["a", "b"], executor="dense")  # for one run
        ['a', 'b']
        >>> m.executor = "dense"; m.run(["a", "b"])
        ['a', 'b']
        """
        return self.runtime.executor

    @executor.setter
    def executor(self, value: str) -> None:
        if value not in plans.EXECUTORS:
            raise ValueError(f"executor must be one of {plans.EXECUTORS}, got {value!r}")
        self.runtime.executor = value

    def plan_summary(self) -> dict:
        """Which heads the plan executor runs without [query, key] scores, per layer:
        ``static_heads`` (pattern fixed by the length) and ``partial_heads`` (hard heads
        whose scores are static up to a bounded part: run on their candidate keys)."""
        if getattr(self.model, "storage", "dense") == "sparse":
            return self.model.plan_summary()
        return plans.summary(self.model)

    def save(self, directory: str | Path) -> Path:
        """Writes ``model.safetensors`` and ``model.json`` into ``directory``.

        ``model.json`` records a digest of every table and every tensor (see
        :mod:`attnsim.model.checkpoint`), which :meth:`load` checks.
        """
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().contiguous() for k, v in self.model.state_dict().items()}
        pattern_table, pattern_tensors = pattern_store.to_checkpoint(self.model.head_patterns)
        tensors.update(pattern_tensors)  # what the compiler knew of each head's keys
        save_file(tensors, str(path / "model.safetensors"))
        sparse = getattr(self.model, "storage", "dense") == "sparse"
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
                    **({} if g.cancellation is None else {"cancellation": g.cancellation}),
                    **({"relative": True} if g.relative else {}),
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
            "plan": self.plan_summary(),
        }
        if sparse:
            meta["storage"] = self.model.layout()
        if pattern_table is not None:
            meta["head_patterns"] = pattern_table
        meta[digests.DIGEST_KEY] = digests.make_digest(meta, tensors)
        (path / "model.json").write_text(json.dumps(meta, indent=1))
        return path

    @classmethod
    def load(cls, directory: str | Path, *, check: bool = True) -> CompiledModel:
        """Loads a model written by :meth:`save` (reads data only; runs no code).

        Everything is checked before the model is built: the JSON's keys and value kinds,
        the weights' names, shapes and dtypes against the config, the memory the config
        asks for, that every weight is finite, and that every table and tensor is the one
        the digest in ``model.json`` records (so weights copied from another model of the
        same shape, or a vocabulary edited by hand, are refused).

        Args:
            directory: the directory :meth:`save` wrote.
            check: False skips the digest check only: it loads a checkpoint saved before
                checkpoints carried a digest (save it again to record one), or one whose
                files you changed on purpose.

        Raises:
            TypeError: ``check`` is not a bool.
            FileNotFoundError: ``model.json`` or ``model.safetensors`` is missing.
            DamagedCheckpointError: (a ValueError) a file is not what :meth:`save` wrote,
                or (with ``check``) records no digest or not this table or tensor; the
                message names the file and the key or tensor.
            ModelTooLargeError: (a MemoryError) the config does not fit in memory.
        """
        check = check_bool(check, "check")
        path = Path(directory)
        meta, cfg = checkpoint.read_meta(path)
        if "storage" in meta:
            state = checkpoint.read_sparse(path, cfg, meta["storage"])
            checkpoint.check_digest(path, meta, state, check)
            found = _patterns(
                path, meta, state, [la["n_heads"] for la in meta["storage"]["layers"]]
            )
            model = SparseTransformer.from_state(cfg, meta["storage"], state)
        else:
            state = checkpoint.read_weights(path, cfg)
            checkpoint.check_digest(path, meta, state, check)
            heads = [cfg.head_shape(li)[0] for li in range(cfg.n_layers)]
            found = _patterns(path, meta, state, heads)
            model = Transformer(cfg)
            model.load_state_dict(state)
        model.head_patterns = found  # after the weights: a dense model keys them to these
        sparse = getattr(model, "storage", "dense") == "sparse"
        found = model.plan_summary() if sparse else plans.summary(model)
        if "plan" in meta and found != meta["plan"]:  # re-derived: it must be the one saved
            raise checkpoint.damaged(
                path / "model.json",
                f"has an execution plan {meta['plan']} that its weights do not give "
                f"({found}); the weights or the plan were changed after saving",
            )
        for li, layer in enumerate(model.head_patterns):  # a pattern claims a static head
            for h, p in enumerate(layer):
                if p is not None and h not in found["static_heads"][li]:
                    raise checkpoint.damaged(
                        path / "model.json",
                        f"has a head pattern for head {h} of layer {li}, whose weights read "
                        "input-dependent directions (a static head was expected): the "
                        "patterns belong to other weights",
                    )
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


def _patterns(path: Path, meta: dict, state: dict, heads: list[int]) -> tuple:
    """The head patterns a checkpoint stores (taken out of ``state``), checked."""
    tensors = {k: state.pop(k) for k in list(state) if k.startswith(pattern_store.PREFIX)}
    try:
        return pattern_store.from_checkpoint(
            meta.get("head_patterns"), tensors, heads, meta["max_seq_len"], "the table"
        )
    except pattern_store.PatternTableError as exc:
        raise checkpoint.damaged(
            path / "model.json", f"has an invalid head pattern ({exc})"
        ) from None
