"""The universal simulator U: one compiled transformer, fixed weights, any attention layer.

``build(N, D, H)`` writes U as a RASP program over real-valued tokens
(:mod:`attnsim.simulator.programs`) and compiles it once. ``U.simulate(target, X)`` is four
steps, each in its own module: validate the target and X against the build
(:mod:`~attnsim.simulator.checks`), encode them into one sequence
(:mod:`~attnsim.simulator.codec`, on the geometry of :mod:`~attnsim.simulator.layout`), run
the transformer, and decode T(X) from its output (the codec again). Nothing runs between its
layers, and its weights do not depend on the target: the same U serves every target with
n <= N, d <= D and at most H heads (and, built with ``layer="encoder"``, every
TransformerEncoderLayer of feed-forward width at most F).

Softmax rows are shifted by a *bounded* row maximum, not an exact one: a hard head averages
the scores within its tolerance (0.25) of the row maximum (a softmax head weights them), so
the shift lies up to 0.25 below it. The output stays exact, as softmax is invariant to any
shift of a row; what the shift buys is that every exponent is at most about 0 and every row
sum Z is in [1, n e^0.25], for any row of scores within the score bound (1e4 in float64 by
default), however far it is shifted. U's transformer checks at run time what it relies on
(the scores' range; with maps="relu", the input range of every ReLU map) and ``simulate``
raises, naming the quantity and the bound, when a target leaves it; no Python reference runs
on that path.

A built U is saved with ``U.save(directory)`` (safetensors + JSON, no pickle) and read back
with ``UniversalSimulator.load(directory)``, which gives bit-identical outputs.

>>> import torch
>>> from attnsim.simulator import sampling, universal
>>> U = universal.build(2, 2, 1)
>>> target = sampling.random_attention(1, 2, seed=0)
>>> X = torch.randn(2, 2, dtype=torch.float64)
>>> from attnsim.simulator.reference import reference
>>> bool(torch.allclose(U.simulate(target, X), reference(target, X), rtol=1e-9, atol=1e-12))
True
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

from attnsim.compiler import compile_program
from attnsim.compiler.collector import paused
from attnsim.model import memory, zero_rows
from attnsim.model.compiled import CompiledModel, Resources
from attnsim.model.stream import Columns, Forms
from attnsim.rasp import expr as E
from attnsim.rasp import interpret
from attnsim.simulator import checks, layouts, programs, saving
from attnsim.simulator import reference as R
from attnsim.simulator.checks import LN_SLOT_NAMES  # noqa: F401 - read here by older code
from attnsim.simulator.config import (  # noqa: F401 - the limits, read here by older code
    EPS_RANGE,
    LOGIT_LIMIT,
    SCORE_BOUND,
    SCORE_LIMIT,
    SimulatorConfig,
    build_weight_bytes,
    build_what,
    check_memory,
    max_score_bound,
    memory_needed,
)
from attnsim.simulator.layout import Layout
from attnsim.simulator.programs import (  # noqa: F401 - the labels, read here by older code
    EXP,
    EXP_HI,
    INV_Z,
    ROW_MAX,
    SCORE,
    mask_offset,
    universal_program,
)
from attnsim.values import check_bool

__all__ = [
    "UniversalSimulator",
    "SimulatorConfig",
    "SimulatorReport",
    "build",
    "max_score_bound",
    "universal_program",
]


@dataclass
class SimulatorReport(Resources):
    """U's resources (from the compiled model), its build sizes and its sequence length."""

    max_n: int = 0
    max_d: int = 0
    max_heads: int = 0
    max_ff: int = 0
    sequence_length: int = 0
    input_length: int = 0
    build_seconds: float = 0.0
    layout: str = "scalar"
    token_width: int = 1

    def __str__(self) -> str:
        width = self.token_width  # (one number per position: the scalar layout's tokens)
        tokens = f"vector tokens of width {width}" if width > 1 else "one number per position"
        return (
            f"U(N={self.max_n}, D={self.max_d}, H={self.max_heads}"
            f"{f', F={self.max_ff}' if self.max_ff else ''}), {self.layout} layout "
            f"({tokens}): {self.layers} layers "
            f"({self.attention_layers} with attention), heads per layer {self.heads_per_layer}\n"
            f"  d_model={self.d_model} d_head={self.d_head} d_mlp={self.d_mlp} "
            f"d_bilinear={self.d_bilinear} native={self.d_native}\n"
            f"  parameters={self.parameters} (nonzero {self.nonzero_parameters}), sequence "
            f"length {self.sequence_length} ({self.input_length} carry <T, X>), built in "
            f"{self.build_seconds:.2f} s"
        )


class UniversalSimulator:
    """One compiled transformer that simulates any layer up to its build size.

    Made by :func:`build` or :meth:`load`. Attributes: ``config`` (the
    :class:`~attnsim.simulator.config.SimulatorConfig`), ``layout`` (its sequence layout),
    ``model`` (the :class:`~attnsim.model.compiled.CompiledModel`) and ``program`` (U's RASP
    program, made again on first use after :meth:`load`).
    """

    def __init__(
        self,
        config: SimulatorConfig,
        model: CompiledModel,
        *,
        build_seconds: float = 0.0,
        program: E.SOp | None = None,
    ):
        if not isinstance(config, SimulatorConfig):
            raise TypeError(
                f"UniversalSimulator needs a SimulatorConfig, got {type(config).__name__}; "
                "make one with simulator.build(...) or UniversalSimulator.load(directory)"
            )
        self.config = config
        self.layout: Layout = config.layout
        self.model = model
        self._seconds = float(build_seconds)
        self._program = program
        self._residual_index = {d: i for i, d in enumerate(model.residual)}

    # -- what U was built for ----------------------------------------------------------------
    @property
    def program(self) -> E.SOp:
        """U's RASP program (the one its transformer was compiled from)."""
        if self._program is None:
            self._program = _program(self.config)
        return self._program

    @property
    def maps(self) -> str:
        """How U realises exp and 1/x: "native" units or "relu" (bounded)."""
        return self.config.maps.value

    @property
    def logit_bound(self) -> float | None:
        """maps="relu": exp is certified on exponents s - max >= -2 logit_bound; else None."""
        return self.config.relu_logit_bound

    @property
    def value_bound(self) -> float | None:
        """maps="relu", encoder: the ReLU maps' value scale; else None."""
        return self.config.relu_value_bound

    @property
    def score_bound(self) -> float:
        """The largest |score| of a target U accepts."""
        return self.config.score_bound

    @property
    def max_n(self) -> int:
        return self.layout.N

    @property
    def max_d(self) -> int:
        return self.layout.D

    @property
    def max_heads(self) -> int:
        return self.layout.H

    @property
    def is_encoder(self) -> bool:
        return self.config.is_encoder

    @property
    def map_bounds(self) -> dict[str, float]:
        """maps="relu": the certified error of each ReLU-realised map, by label (``e``: the
        exponentials, ``inv_Z``: 1/Z, relative; the encoder's ``*_rsqrt`` relative and
        ``ffn_gelu*`` absolute); empty for native maps.

        >>> sorted(build(2, 2, 1, maps="relu", logit_bound=5.0, map_tolerance=1e-3).map_bounds)
        ['e', 'inv_Z']
        """
        return {
            r["label"]: r["bound"]
            for r in self.model.report().realisations
            if r.get("level") == "bounded" and r.get("bound") is not None
        }

    def error_bound(
        self, target: checks.Target, X: Any, *, causal: bool | None = None
    ) -> torch.Tensor:
        """A bound on ``|U(T, X) - T(X)|``, entry by entry (attention targets).

        U computes ``e_j = exp(s_j - m)`` with ``m`` its row maximum, so ``Z >= 1``. With
        maps="relu" every exponential whose exponent is at least ``-2 logit_bound`` is within
        a relative ``eps_e`` (the per-map bound, times ``e^eps_s`` for the rounding of the
        exponent: ``eps_s = 2 (2 d + 6) u max |x~_i| |A~_h| |x~_j|``, which grows with the
        size of the scores, shifted or not) and any other one, below
        ``delta = e^(-2 logit_bound)``, within ``delta`` absolutely; 1/Z is within a relative
        ``eps_r`` (all 0 for native maps). So ``Z`` is within a relative
        ``eps_z = eps_e + n delta``, each weight of a key in the certified range within a
        relative ``kappa = (1 + eps_e)(1 + eps_r) / (1 - eps_z) - 1`` of the true one, and
        any other weight within ``delta' = delta (1 + eps_r) / (1 - eps_z)`` absolutely: in
        exact arithmetic ``|error[i, c]| <= kappa W[i, c] + delta' V[i, c]`` with
        ``W[i, c] = sum_h sum_j p_hij |v_hjc|`` and ``V[i, c] = sum_h sum_j |v_hjc|`` (keys
        the query sees). Rounding adds the standard worst case for sums of ``m`` terms,
        ``m u`` (``u`` the unit roundoff, ``m`` the widest ReLU map plus d_model plus the
        sequence length), of ``W + |b_O|``. So the bound is
        ``(kappa + m u) W + delta' V + m u |b_O|``.

        Raises:
            ValueError: an encoder-layer target (use ``relative_error`` against
                ``reference`` and the per-map ``map_bounds`` there), or a bad X.

        >>> import torch
        >>> from attnsim.simulator import sampling
        >>> from attnsim.simulator.reference import reference
        >>> U = build(2, 2, 1, maps="relu", logit_bound=5.0, map_tolerance=1e-4)
        >>> T, X = sampling.random_attention(1, 2, seed=0), torch.tensor([[0.5, -1.0], [1.0, 0.2]])
        >>> bool(((U.simulate(T, X) - reference(T, X)).abs() <= U.error_bound(T, X)).all())
        True
        """
        case = checks.prepare(self.config, target, X, causal)
        if case.layer is not None:
            raise ValueError(
                "error_bound covers attention targets, got an encoder layer (LayerNorm has no "
                "composite bound); compare with reference() and read U.map_bounds instead"
            )
        merged, X = case.attention, case.X
        absv = R.values(merged, X).abs()  # [h, n, d]
        weight = (R.pattern(merged, X) @ absv).sum(dim=0)  # [n, d]
        bounds = self.map_bounds
        cfg = self.model.config
        u = torch.finfo(self.config.dtype).eps / 2
        n = X.shape[0]
        # the exponents s - m carry the rounding of the scores: |s| and |m| are at most
        # |x~_i| |A~_h| |x~_j| summed, and a bilinear form over d + 1 features (then the
        # subtraction of m and the exponent's linear form) rounds by (2 d + 6) u of that;
        # counted twice, for the float64 reference U is compared with
        A_aug, _ = merged.augmented()
        Xt = torch.cat([X, torch.ones(n, 1, dtype=X.dtype)], dim=1).abs()  # [n, d + 1]
        size = float((Xt @ A_aug.abs() @ Xt.T).max())  # the largest |x~_i| |A~_h| |x~_j|
        eps_s = 2.0 * (2 * merged.d_model + 6) * u * size
        eps_e = (1.0 + bounds.get(EXP, 0.0)) * math.exp(eps_s) - 1.0
        eps_r = bounds.get(INV_Z, 0.0)
        delta = 0.0 if self.logit_bound is None else math.exp(-2.0 * self.logit_bound)
        eps_z = eps_e + n * delta
        kappa = (1.0 + eps_e) * (1.0 + eps_r) / (1.0 - eps_z) - 1.0
        seen = torch.ones(n, n, dtype=torch.float64)
        if merged.causal:
            seen = torch.tril(seen)
        below = delta * (1.0 + eps_r) / (1.0 - eps_z) * (seen @ absv).sum(dim=0)  # [n, d]
        m = cfg.d_mlp + cfg.d_model + self.layout.length
        return (kappa + m * u) * weight + below + m * u * merged.b_O.abs()

    # -- simulate = validate -> encode -> run -> decode -------------------------------------
    def encode(self, target: checks.Target, X: Any, *, causal: bool | None = None) -> torch.Tensor:
        """Validates a target and X and writes <T, X> into U's input sequence.

        Returns:
            ``[length]`` float64 (see :mod:`attnsim.simulator.layout`), or ``[length,
            width]`` in the vector layout (see :mod:`attnsim.simulator.vector_layout`).
        """
        return self._pack([self._prepare(target, X, causal)])[0]

    def _prepare(self, target: checks.Target, X: Any, causal: bool | None) -> Any:
        return layouts.of(self.config).prepare(self.config, target, X, causal)

    def _pack(self, cases: list, prefix: bool = False) -> torch.Tensor:
        return layouts.of(self.config).pack(self.config, cases, prefix)

    def _unpack(self, out: torch.Tensor, cases: list) -> list[torch.Tensor]:
        return layouts.of(self.config).unpack(self.config, out, cases)

    def simulate(
        self, target: checks.Target, X: Any, *, causal: bool | None = None
    ) -> torch.Tensor:
        """Runs U on <T, X> and returns T(X) as an ``(n, d)`` float64 tensor.

        Args:
            target: an AttentionSpec / MergedAttention / EncoderLayerSpec, or a
                torch.nn.MultiheadAttention / TransformerEncoderLayer.
            X: the input, shape ``(n, d)``.
            causal: for a torch module, whether to apply a causal mask (torch passes masks
                at call time); for specs, overrides the spec's flag when given.

        Raises:
            TypeError: ``target`` is not a spec or a supported torch module.
            ValueError: sizes beyond the build, non-finite values, or a value U's own
                run-time checks find outside the range it was built for (a score beyond
                ``score_bound``; with maps="relu", a LayerNorm variance or a feed-forward
                pre-activation beyond what ``value_bound`` covers): the message names the
                quantity, where it occurs, the bound and what to build instead.

        U computes each activation as the target defines it: for GELU(approximate="tanh"),
        torch's own TransformerEncoderLayer under ``no_grad`` in eval mode computes the exact
        GELU instead (about 1e-4 apart; :func:`attnsim.simulator.verify.reference_notes`).
        """
        return self.simulate_batch([(target, X)], causal=causal)[0]

    def simulate_batch(
        self, items: Sequence[tuple[checks.Target, Any]], *, causal: bool | None = None
    ) -> list[torch.Tensor]:
        """Simulates several (target, X) pairs in one forward pass; one ``(n, d)`` each (no
        pairs: none)."""
        items = checks.pairs(items)
        if not items:
            return []
        cases = [self._prepare(target, X, causal) for target, X in items]
        # [batch, length] (vector layout: [batch, length, width]), held by _run alone
        out = self._run(self._pack(cases, prefix=True))  # [batch, length]
        results = self._unpack(out, cases)
        for Y in results:
            if not torch.isfinite(Y).all():  # not expected once the checks have passed
                raise ValueError(
                    "U's output is not finite although its run-time checks passed: a value "
                    "inside U overflowed float64 (U squares a sublayer's outputs for LayerNorm, "
                    "so outputs near 1e154 do); scale the target down, or report it and X"
                )
        return results

    def model_inputs(self, seqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The transformer's inputs for encoded sequences ``[batch, length]``: token ids and
        token values, both ``[batch, 1 + length]`` (BOS first), as ``model.encode`` makes
        them for all-numerical tokens (id 1 everywhere but BOS, id 0; the values beside).
        Vector layout: sequences ``[batch, length, width]``, values ``[batch, 1 + length,
        width]``."""
        if seqs.shape[1] != self.model.max_seq_len:
            raise ValueError(
                f"U reads sequences of exactly {self.model.max_seq_len} positions, got "
                f"{seqs.shape[1]}"
            )
        return self._inputs(seqs)

    def _inputs(self, seqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`model_inputs` of sequences given as their first positions (the rest 0:
        ``pack(..., prefix=True)``). A sparse model of vector tokens takes those values only
        (U on 512 tokens: 3 million positions, its entries in the first few thousand)."""
        batch, m = seqs.shape[:2]
        length = self.model.max_seq_len
        ids = torch.ones(batch, 1 + length, dtype=torch.long)
        ids[:, 0] = 0  # BOS
        short = bool(self.model.config.token_width) and self.model.storage == "sparse"
        vals = zero_rows.zeros(
            (batch, 1 + (m if short else length), *seqs.shape[2:]), torch.float64
        )
        zero_rows.copy_written(vals[:, 1:], seqs)  # (a zero tail takes no pages)
        return ids, vals

    def _run(self, seqs: torch.Tensor) -> torch.Tensor:
        """U's output ``[batch, length]`` (float64) on encoded sequences ``[batch, length]``,
        after its run-time checks (the compiler's guards on what its maps rely on) pass."""
        model = self.model
        ids, vals = self._inputs(seqs)  # [batch, 1 + length]; the values maybe fewer
        del seqs  # (vals holds a copy)
        guards = [g for g in model.guards if not g.on_block]  # U has numerical ones only
        final = 2 * model.config.n_layers  # the stream after the last layer
        at: dict[int, list] = {}  # stage -> the forms read there: guards, then the output
        sizes: dict[int, list] = {}  # stage -> which of them are read as sizes
        where = []  # per guard: the places of its value and of its terms' size (or None)
        for g in guards:
            forms = at.setdefault(g.stage, [])
            forms.append(g.form)
            if g.cancellation is not None:  # and the size of its terms, after it
                sizes.setdefault(g.stage, []).append(len(forms))
                forms.append(g.form)
            where.append((len(forms) - 1 - (g.cancellation is not None), len(forms) - 1))
        at.setdefault(final, []).append(model.output.form)
        index = self._residual_index
        streams = {s: Forms.named(f, index, sizes.get(s, ())) for s, f in at.items()}
        with torch.no_grad():  # one row per form, no columns kept
            model.runtime(
                ids, vals, streams=streams, keep=Columns(torch.zeros(0, dtype=torch.long))
            )
        got = {s: v.cpu() for s, v in streams.items()}  # (the model may run elsewhere)
        for g, (k, s) in zip(guards, where):
            size = got[g.stage][:, 1:, s] if g.cancellation is not None else None
            checks.check_guard(self.config, g, got[g.stage][:, 1:, k], size)
        return got[final][:, 1:, -1].to(torch.float64)

    def _columns(self, dirs: list[str]) -> Columns:
        return Columns(torch.tensor([self._residual_index[d] for d in dirs], dtype=torch.long))

    def interpret(
        self, target: checks.Target, X: Any, *, causal: bool | None = None
    ) -> torch.Tensor:
        """The same computation by the RASP interpreter (U's program, not its weights)."""
        case = self._prepare(target, X, causal)
        seq = self._pack([case])  # [1, length] (vector layout: [1, length, width])
        out = interpret.evaluate_batch(self.program, seq.numpy())[0]  # the numpy oracle
        out = torch.tensor(out, dtype=torch.float64)[None, :]  # [1, length]
        return self._unpack(out, [case])[0]

    def report(self) -> SimulatorReport:
        """Layers, heads per layer, widths, parameters and sequence length."""
        return SimulatorReport(
            **self.model.report().resources(),
            max_n=self.max_n,
            max_d=self.max_d,
            max_heads=self.max_heads,
            max_ff=self.layout.F,
            sequence_length=self.layout.length,
            input_length=self.layout.input_length,
            build_seconds=self._seconds,
            layout=self.config.layout_kind.value,
            token_width=self.model.config.token_width or 1,
        )

    # -- saving ------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Writes U into ``directory`` (made if missing): the compiled model
        (``model.safetensors`` + ``model.json``) and ``simulator.json`` (the build config
        and layout). Data only, no pickle; :meth:`load` reads it back.

        Returns:
            The directory.

        Raises:
            NotADirectoryError: ``directory`` exists and is a file.
        """
        path = Path(directory)
        if path.exists() and not path.is_dir():
            raise NotADirectoryError(
                f"{path} is a file; UniversalSimulator.save writes a directory: pass a new or "
                "an existing directory"
            )
        self.model.save(path)
        saving.write_meta(path, self.config, self._seconds)  # last: it marks a whole save
        return path

    @classmethod
    def load(cls, directory: str | Path, *, check: bool = True) -> UniversalSimulator:
        """Reads a simulator :meth:`save` wrote; it gives bit-identical outputs.

        Everything is checked before U is returned: ``simulator.json`` (format, keys, a
        valid config, the layout that config gives), the compiled model (by
        ``CompiledModel.load``), that the model is the one the config describes, and that
        every table and weight is the one the digests of ``simulator.json`` and
        ``model.json`` record.

        Args:
            directory: the directory :meth:`save` wrote.
            check: False skips the digest checks only (for a simulator saved before
                simulators carried a digest: save it again to record one).

        Raises:
            TypeError: ``check`` is not a bool.
            FileNotFoundError: ``directory`` or one of its files is missing.
            ValueError: a file is damaged or the files disagree (the message names the file
                and what is wrong).
            MemoryError: the model does not fit in memory (``CompiledModel.load``).

        >>> import tempfile
        >>> U = build(2, 2, 1)
        >>> V = UniversalSimulator.load(U.save(tempfile.mkdtemp()))
        >>> V.config == U.config, V.layout.length
        (True, 14)
        """
        check = check_bool(check, "check")
        path = Path(directory)
        config, seconds = saving.read_meta(path)
        model = CompiledModel.load(path, check=check)
        saving.check_model(path, config, model)
        saving.check_digest(path, check)
        return cls(config, model, build_seconds=seconds)


@paused
def build(
    max_n: int | None = None,
    max_d: int | None = None,
    max_heads: int = 1,
    *,
    config: SimulatorConfig | None = None,
    storage: str = "auto",
    **options: Any,
) -> UniversalSimulator:
    """Builds U for targets with n <= max_n, d <= max_d and at most max_heads heads.

    Either give the sizes and any option of
    :class:`~attnsim.simulator.config.SimulatorConfig` as keywords, or one ``config``.

    Args:
        max_n: the most rows of X.
        max_d: the largest model width d.
        max_heads: the most attention heads.
        config: the whole build configuration (then give no sizes or options).
        storage: "dense", "sparse" (:mod:`attnsim.model.sparse`) or "auto" (dense while the
            dense weights fit in 256 MiB); not part of the config: both hold the same U.
        **options: the other fields of ``SimulatorConfig``, each explained there (strings
            allowed for its enums): ``layer`` ("attention" or "encoder": a whole
            TransformerEncoderLayer), ``max_ff``, ``attention`` (U's own: "hard" or
            "softmax"), ``maps`` ("native" exact units or "relu" with certified bounds, see
            ``map_bounds`` and ``error_bound``), ``logit_bound``, ``value_bound``,
            ``map_tolerance``, ``dtype``, ``score_bound`` and ``layout`` ("scalar", the
            paper's one number per position, or "vector": one vector per position, the
            target's raw parameters; the config's ``layout_kind``).

    Returns:
        A UniversalSimulator with ``simulate``, ``encode``, ``interpret``, ``report`` and
        ``save``.

    Raises:
        TypeError: both a config and sizes or options, or an unknown option.
        ValueError: an option out of its range (see ``SimulatorConfig``).
        MemoryError: U for these sizes does not fit in this machine's memory.

    >>> build(config=SimulatorConfig(2, 2, layer="encoder")).report().max_ff
    4
    """
    config = _config(max_n, max_d, max_heads, config, options)
    layout = config.layout
    if storage == "auto" and not memory.fits(memory_needed(config, "dense")):
        storage = "sparse"  # dense weights could not run it: no need to find that out
    check_memory(config, storage)  # refuse what cannot fit before building
    what = build_what(config)
    start = time.perf_counter()
    program = _program(config)
    model = compile_program(
        program,
        vocab=None,
        max_seq_len=layout.length,
        fixed_length=True,
        attention=config.attention.value,
        maps=config.maps.value,
        map_tolerance=config.map_tolerance,
        map_ranges=programs.map_ranges(config),
        map_error="relative",
        dtype=config.dtype,
        # softmax mode: a large inverse temperature keeps every leaked weight below the
        # smallest number (e^-700 in float64, e^-88 in float32), as hard attention would
        value_scale=math.exp(700.0 if config.dtype == torch.float64 else 88.0),
        storage=storage,
    )
    if model.storage == "dense":  # "auto" chose dense weights: their attention must fit
        need = memory_needed(config, "dense")
        memory.check_available(need, what, "build with storage='sparse'")
    keep = program if model.storage == "dense" else None  # a large U makes it again on use
    del program  # (its position tables take gigabytes at the largest sizes)
    memory.release_free()  # the compiler's tables, freed, leave the resident memory too
    # the execution plan for U's one input length: its gathers and sums, found once here
    # so that every simulate runs them without [query, key] scores
    model.runtime.plans(config.layout.length + 1)
    memory.release_free()
    seconds = time.perf_counter() - start
    return UniversalSimulator(config, model, build_seconds=seconds, program=keep)


def _program(config: SimulatorConfig) -> E.SOp:
    """U's RASP program for a build."""
    return layouts.of(config).program(config)


def _config(
    max_n: Any, max_d: Any, max_heads: Any, config: Any, options: dict[str, Any]
) -> SimulatorConfig:
    """The build's config: ``config`` itself, or one made of the sizes and options."""
    if config is not None:
        if not isinstance(config, SimulatorConfig):
            raise TypeError(f"config must be a SimulatorConfig, got {type(config).__name__}")
        if max_n is not None or max_d is not None or max_heads != 1 or options:
            raise TypeError(
                "build takes either config=SimulatorConfig(...) or sizes and options, not "
                "both; put every option into the config (dataclasses.replace(config, ...))"
            )
        return config
    if max_n is None or max_d is None:
        raise TypeError("build needs max_n and max_d (or config=SimulatorConfig(...))")
    if "layout" in options:  # build(layout="vector"): the config's layout_kind
        if "layout_kind" in options:
            raise TypeError("give layout= or layout_kind=, not both")
        options = dict(options)
        options["layout_kind"] = options.pop("layout")
    allowed = [f.name for f in fields(SimulatorConfig)][3:]  # after max_n, max_d, max_heads
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise TypeError(
            f"build got unknown options {', '.join(unknown)}; it takes {', '.join(allowed)}"
        )
    return SimulatorConfig(max_n, max_d, max_heads, **options)
