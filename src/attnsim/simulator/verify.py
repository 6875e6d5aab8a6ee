"""Checking U against the plain-torch oracle on many random targets, and the demo.

The random targets come from :mod:`attnsim.simulator.sampling` (``random_target``,
``shift_rows`` and ``random_shifted_target`` are also reachable here).

>>> from attnsim.simulator import stack, universal
>>> result = verify(universal.build(2, 2, 1), targets=3, seed=0, progress=False)
>>> result.failures, result.max_error <= 1e-9
([], True)
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np
import rich.console
import rich.progress
import rich.table
import torch

from attnsim.simulator import stack, universal
from attnsim.simulator.reference import reference
from attnsim.simulator.sampling import (
    random_shifted_target,
    random_target,
    shift_rows,
)
from attnsim.simulator.sampling_decoder import random_decoder_target, random_kind_target
from attnsim.values import check_bool

__all__ = [
    "VerifyResult",
    "demo",
    "reference_notes",
    "relative_error",
    "reference_of",
    "verify",
    "random_target",  # from sampling
    "random_shifted_target",  # from sampling
    "shift_rows",  # from sampling
]


@dataclass
class VerifyResult:
    """Errors of U against the reference over random targets.

    Attributes:
        count: targets checked.
        max_error / median_error: relative errors ``max|U - ref| / max|ref|``.
        failures: ``(seed, error)`` of targets above the tolerance (for maps="relu": of
            targets with an entry above its certified bound).
        tolerance: the relative error allowed (native maps); for maps="relu" the entrywise
            certified bound of ``UniversalSimulator.error_bound`` is the criterion instead.
        map_bounds: maps="relu": the certified relative error of each ReLU-realised map.
        max_certified: attention targets: the largest relative bound
            ``max(U.error_bound) / max|ref|`` over the targets.
        max_bound_ratio: attention targets: the largest ``|U - ref| / U.error_bound`` over
            all entries (at most 1 when every entry is within its bound).
        refused: maps="relu": targets U refused with a message because their values left
            the ranges its maps cover (not counted in the errors).
        notes: what a reader comparing with torch's own modules should know about the
            targets drawn (:func:`reference_notes`), each once.
    """

    count: int
    max_error: float
    median_error: float
    tolerance: float
    failures: list[tuple[int, float]] = field(default_factory=list)
    map_bounds: dict[str, float] = field(default_factory=dict)
    max_certified: float | None = None
    max_bound_ratio: float | None = None
    refused: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def reference_of(target, X: torch.Tensor) -> torch.Tensor:
    """The plain-torch oracle of any target U takes (a stack included).

    >>> from attnsim.simulator import sampling
    >>> T = sampling.random_attention(1, 2, seed=0)
    >>> X = torch.ones(2, 2, dtype=torch.float64)
    >>> bool(torch.equal(reference_of(T, X), reference(T, X)))
    True
    """
    if isinstance(target, stack.EncoderStackSpec):
        return stack.reference_stack(target, X)
    return reference(target, X)


TANH_GELU_NOTE = (
    "the target's feed-forward is GELU(approximate='tanh'), and U computes that function, "
    "as the module defines it (so does attnsim.simulator.reference). PyTorch's own "
    "TransformerEncoderLayer in eval mode with autograd off (torch.no_grad, "
    "torch.inference_mode) takes a fused fast path that computes the exact GELU instead, so "
    "module(X) there differs from U by about 1e-4 relative: torch's deviation from its "
    "definition, not U's error. Compare with attnsim.simulator.reference(target, X), or call "
    "the module with autograd on."
)


LOW_PRECISION_NOTE = (
    "the target's weights are {dtype}: U (and attnsim.simulator.reference) computes the "
    "function of those weights in float64, while the module itself rounds to {dtype} at "
    "every step, so module(X) differs from U by about {size} relative: the module's "
    "rounding, not U's error. Compare with attnsim.simulator.reference(target, X), or with "
    "the module in float64 (module.double())."
)


def reference_notes(target) -> list[str]:
    """What someone comparing U's output with a torch module's own forward should know
    about ``target`` (a spec, a stack or a torch module): that a tanh-approximate GELU is
    computed as defined while torch's eval fast path computes the exact one, and that a
    module in float16 or bfloat16 rounds where U computes in float64.

    Returns:
        The notes (none for most targets).

    >>> from torch import nn
    >>> layer = nn.TransformerEncoderLayer(4, 1, 8, activation=nn.GELU(approximate="tanh"))
    >>> reference_notes(layer)[0][:55]
    "the target's feed-forward is GELU(approximate='tanh'), "
    >>> reference_notes(nn.MultiheadAttention(4, 1))
    []
    >>> reference_notes(nn.MultiheadAttention(4, 1, dtype=torch.float16))[0][:42]
    "the target's weights are torch.float16: U "
    """
    from attnsim.simulator import spec as S

    tanh, notes = False, []
    if isinstance(target, torch.nn.Module):
        low = {p.dtype for p in target.parameters()} & {torch.float16, torch.bfloat16}
        for dtype in sorted(low, key=str):
            size = "1e-3" if dtype == torch.float16 else "1e-2"
            notes.append(LOW_PRECISION_NOTE.format(dtype=dtype, size=size))
        tanh = any(
            isinstance(m, torch.nn.GELU) and m.approximate == "tanh" for m in target.modules()
        )
    else:
        layers = target.layers if isinstance(target, stack.EncoderStackSpec) else [target]
        tanh = any(
            isinstance(t, S.EncoderLayerSpec) and t.ffn.activation == S.Activation.GELU_TANH
            for t in layers
        )
    return ([TANH_GELU_NOTE] if tanh else []) + notes


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """``max|got - want| / max|want|``."""
    return float((got - want).abs().max() / want.abs().max().clamp(min=1e-300))


def verify(
    U: universal.UniversalSimulator,
    *,
    targets: int = 100,
    seed: int = 0,
    max_logit: float = 50.0,
    tolerance: float | None = None,
    batch: int = 4,
    progress: bool = True,
    kind: str | None = None,
) -> VerifyResult:
    """Simulates ``targets`` random attention layers with U and compares with ``reference``.

    Args:
        U: the simulator.
        targets: how many random targets (sizes up to U's build, causal or not, biases,
            scores scaled up to ``max_logit``; for a U of ``n_layers`` > 1, stacks of 1 to
            n_layers layers).
        seed: the random seed.
        max_logit: the largest |score| of a target on its X.
        tolerance: the relative error above which a target is a failure (default 1e-9 in
            float64, 1e-4 in float32). For an attention U with maps="relu" a target fails
            when any entry is beyond its certified bound (``U.error_bound``) instead; for an
            encoder U with maps="relu" (no composite certificate: LayerNorm divides by the
            row's spread) the default is 1,000 times the largest per-map bound.
        batch: targets per forward pass.
        progress: show a progress bar.
        kind: a decoder U: only targets of this kind (``sampling_decoder.DECODER_KINDS``: llama,
            rmsnorm, no_norm, glu, rotary, linear, linformer, mixed); None: every kind.
    """
    progress = check_bool(progress, "progress")
    float64 = U.model.config.dtype == "float64"
    relu = U.logit_bound is not None
    if tolerance is None:
        tolerance = 1e-9 if float64 else 1e-4
        if relu and U.is_encoder:  # no entrywise certificate: a sanity bound on the maps'
            tolerance = max(tolerance, 1e3 * max(U.map_bounds.values()))
    if relu:
        max_logit = min(max_logit, U.logit_bound)
    rng = np.random.default_rng(seed)
    layers = U.config.n_layers
    if kind is not None:
        if not U.config.is_decoder:
            raise ValueError(
                f"kind={kind!r} draws decoder layers: it needs a U built with layer='decoder'"
            )
        F = U.layout.F
        cases = [
            random_kind_target(rng, kind, U.max_n, U.max_d, U.max_heads, F, max_logit=max_logit)
            for _ in range(targets)
        ]
    elif U.config.is_decoder:  # layers of every kind a decoder U reads (single layers)
        cases = [
            random_decoder_target(rng, U.max_n, U.max_d, U.max_heads, max_logit, U.layout.F)
            for _ in range(targets)
        ]
    elif layers > 1:  # stacks of 1 to n_layers layers
        cases = [
            stack.random_stack(
                rng, U.max_n, U.max_d, U.max_heads, max_logit, U.layout.F, layers=1 + k % layers
            )
            for k in range(targets)
        ]
    else:
        cases = [
            random_target(rng, U.max_n, U.max_d, U.max_heads, max_logit, U.layout.F)
            for _ in range(targets)
        ]
    errors: list[float] = []
    notes = list(dict.fromkeys(n for t, _, _ in cases for n in reference_notes(t)))
    refused = 0
    failures: list[tuple[int, float]] = []
    certified: list[float] = []
    ratios: list[float] = []
    with rich.progress.Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("simulating targets", total=targets)
        for start in range(0, targets, batch):
            chunk = cases[start : start + batch]
            try:
                outs = U.simulate_batch([(t, X) for t, X, _ in chunk])
            except ValueError:
                if not relu:
                    raise
                outs = [_simulate_or_none(U, t, X) for t, X, _ in chunk]
            for (t, X, s), got in zip(chunk, outs):
                if got is None:  # beyond the ranges of U's maps: refused with a message
                    refused += 1
                    continue
                want = reference_of(t, X)
                err = relative_error(got, want)
                errors.append(err)
                ok = err <= tolerance
                if not U.is_encoder:  # the entrywise bound (rounding only, for native maps)
                    bound = U.error_bound(t, X)
                    ratio = float(((got - want).abs() / bound.clamp(min=1e-300)).max())
                    certified.append(float(bound.max() / want.abs().max().clamp(min=1e-300)))
                    ratios.append(ratio)
                    ok = ratio <= 1.0 if relu else ok
                if not ok:
                    failures.append((s, err))
            bar.advance(task, len(chunk))
    return VerifyResult(
        count=targets,
        max_error=max(errors) if errors else 0.0,
        median_error=statistics.median(errors) if errors else 0.0,
        tolerance=tolerance,
        failures=failures,
        map_bounds=U.map_bounds,
        max_certified=max(certified) if certified else None,
        max_bound_ratio=max(ratios) if ratios else None,
        refused=refused,
        notes=notes,
    )


def _simulate_or_none(U, target, X) -> torch.Tensor | None:
    """U(target, X), or None when U refuses the target for a value beyond its maps' ranges
    (maps="relu"); other errors propagate."""
    try:
        return U.simulate(target, X)
    except ValueError as exc:
        if "maps='relu'" in str(exc) or "range this U" in str(exc):
            return None
        raise


def demo(console: rich.console.Console, sizes: tuple[int, int, int] = (4, 4, 2)) -> int:
    """Builds U, simulates a torch.nn.MultiheadAttention and random targets, and prints all.

    Returns:
        0 when every simulated output matches the oracle within 1e-9, else 1.
    """
    n, d, h = sizes
    with console.status(
        f"building the universal simulator U for n <= {n}, d <= {d}, heads <= {h} ..."
    ):
        U = universal.build(n, d, h)
    console.print(str(U.report()))
    what = (
        "one vector per position, T's parameters as torch stores them"
        if U.config.is_vector
        else "one real number per position"
    )
    console.print(f"\n[bold]<T, X> layout[/bold] ({what}):")
    console.print(U.layout.diagram())
    torch.manual_seed(0)
    module = torch.nn.MultiheadAttention(d, h, batch_first=True, dtype=torch.float64).eval()
    X = torch.randn(n - 1 if n > 1 else 1, d, dtype=torch.float64)
    with torch.no_grad():
        want = module(X[None], X[None], X[None], need_weights=False)[0][0]
    got = U.simulate(module, X)
    table = rich.table.Table(
        title=f"U simulating torch.nn.MultiheadAttention({d}, {h}) on X of shape {tuple(X.shape)}"
    )
    table.add_column("row")
    table.add_column("torch module T(X)")
    table.add_column("U's output")
    for i in range(X.shape[0]):
        table.add_row(
            str(i),
            " ".join(f"{v:+.6f}" for v in want[i].tolist()),
            " ".join(f"{v:+.6f}" for v in got[i].tolist()),
        )
    console.print(table)
    err = relative_error(got, want)
    console.print(f"max relative error vs torch: {err:.2e}")
    result = verify(U, targets=20, seed=1)
    console.print(
        f"20 random targets (n <= {n}, d <= {d}, heads <= {h}, |scores| <= 50, causal or "
        f"not): max relative error {result.max_error:.2e}, median {result.median_error:.2e}, "
        f"failures {len(result.failures)}"
    )
    return 0 if err <= 1e-9 and not result.failures else 1
