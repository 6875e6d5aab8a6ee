"""Run-time checks: what a compiled model verifies about its own activations.

The compiler plans for the values it inferred; a :class:`GuardSpec` records what must hold
for the plan to be exact (a value among a finite set, an integer, inside a declared range, a
sum whose terms do not cancel, a categorical block that is one-hot), and the functions here
check them on a run's residual streams and raise :class:`RunTimeCheckError` with the
position and the reason. Re-exported by :mod:`attnsim.model.compiled`, whose ``run`` calls
them.

Shapes: ``resid`` is ``[batch, pos, d_model]`` with BOS at position 0; ``cache`` maps hook
names (``blocks.0.hook_resid_mid``) to such streams.

>>> import torch
>>> g = GuardSpec("x", (("x:0", 1.0),), 0, integer=True)
>>> cache = {"hook_embed": torch.tensor([[[0.0], [2.5]]])}
>>> try:
...     check_guards([g], cache, {"x:0": 0}, n_layers=1)
... except RunTimeCheckError as exc:
...     print(str(exc).split(";")[0])
run-time check failed: 'x' = 2.5 at position 0 (row 0) is not an integer
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from attnsim.model.config import AttentionMode, ModelConfig

__all__ = [
    "LEAK_FLOOR",
    "SINGULAR_AT_ZERO",
    "GuardSpec",
    "RunTimeCheckError",
    "block_tolerance",
    "check_blocks",
    "check_combinations",
    "check_finite",
    "check_guards",
    "cancelled",
    "check_singular",
    "term_sizes",
    "not_integer",
    "read_form",
    "singular_kinds",
    "stage_resid",
]


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
        cancellation: the size of the form's terms, ``sum |w x|``, must be at most this
            times ``max(1, |value|)``: a declared function's input whose terms cancel
            carries their rounding (``2 - (-1e16) - 1e16`` is 0 in float64, not 2).
        relative: with ``cancellation``, measured against ``|value|`` itself: the input of
            a function singular at 0 (1/x, 1/sqrt(x), log x), whose output's relative error
            is its input's (terms of size 1 summing to 1e-12 leave it 1e-4 wrong).
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
            (a function raises on them, or a numerical one meets None), with the error.
        reason: what goes wrong, appended to the error message.
    """

    label: str
    form: tuple[tuple[str, float], ...]
    stage: int
    allowed: tuple[float, ...] | None = None
    integer: bool = False
    value_range: tuple[float, float] | None = None
    cancellation: float | None = None
    relative: bool = False
    dims: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    one_hot: bool = False
    none_ok: bool = True
    sizes: tuple[int, ...] = ()
    forbidden: tuple[tuple[tuple[int, ...], str], ...] = ()
    reason: str = ""

    def __post_init__(self) -> None:
        if self.relative and self.cancellation is None:
            raise ValueError(
                f"guard {self.label!r} is relative but has no cancellation limit to measure "
                "against: give cancellation (a number above 0) or leave relative False"
            )

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


def read_form(
    resid: torch.Tensor, form: Sequence[tuple[str, float]], index: Mapping[str, int]
) -> torch.Tensor:
    """The linear form ``sum w * resid[..., index[d]]`` over ``(d, w)`` in ``form``."""
    if not form:
        return torch.zeros(resid.shape[:-1], dtype=resid.dtype)
    return sum_terms(lambda d: resid[..., index[d]], form)


def not_integer(vals: torch.Tensor) -> torch.Tensor:
    """Where ``vals`` is not an integer up to float rounding (1e-9 relative): 1000.0004 is
    not one, 2.0000000000000004 is (the rule of both the model's and U's checks).

    >>> not_integer(torch.tensor([1000.0004, 2.0000000000000004, 3.0], dtype=torch.float64))
    tensor([ True, False, False])
    """
    return (vals - vals.round()).abs() > 1e-9 * vals.abs().clamp(min=1)


def cancelled(
    vals: torch.Tensor, size: torch.Tensor, limit: float, relative: bool = False
) -> torch.Tensor:
    """Where a sum ``vals`` of terms of total size ``size`` (:func:`term_sizes`) cancels:
    its terms more than ``limit`` times ``max(1, |vals|)`` (a guard's ``cancellation``),
    or ``|vals|`` itself where ``relative`` (a guard's ``relative``).

    >>> cancelled(torch.tensor([2.0, 2.0]), torch.tensor([4.0, 2e16]), 2.0**26).tolist()
    [False, True]
    >>> small, size = torch.tensor([1e-12]), torch.tensor([2.0])  # 1 + 1e-12 - 1
    >>> cancelled(small, size, 2.0**26).tolist(), cancelled(small, size, 2.0**26, True).tolist()
    ([False], [True])
    """
    return size > limit * (vals.abs() if relative else vals.abs().clamp(min=1))


def term_sizes(
    resid: torch.Tensor, form: Sequence[tuple[str, float]], index: Mapping[str, int]
) -> torch.Tensor:
    """``sum |w resid[..., index[d]]|`` over the form's terms ``(d, w)``: how large what a
    linear form sums is, against which its float rounding is measured.

    >>> x = torch.tensor([[2.0, -1e16, 1e16]], dtype=torch.float64)
    >>> form = (("x", 1.0), ("a", -1.0), ("r", -1.0))
    >>> term_sizes(x, form, {"x": 0, "a": 1, "r": 2}).tolist()
    [2e+16]
    """
    return sum_terms(lambda d: resid[..., index[d]].abs(), [(d, abs(w)) for d, w in form])


def sum_terms(column, terms: Sequence[tuple]) -> torch.Tensor:
    """``sum w * column(key)`` over ``(key, w)`` in ``terms`` (at least one), term by term
    in their order from 0: the one summation order every reader of a linear form uses, so
    that a form read from a run's columns and one a run sums for itself agree bit for bit.

    >>> x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> sum_terms(lambda c: x[:, c], [(0, 2.0), (1, -1.0)]).tolist()
    [0.0, 2.0]
    """
    acc = None
    for key, w in terms:
        x = column(key)
        acc = (torch.zeros_like(x) if acc is None else acc) + w * x
    if acc is None:
        raise ValueError("sum_terms needs at least one (key, weight) term, got none")
    return acc


def block_tolerance(max_seq_len: int) -> float:
    """How far from 0 and 1 a one-hot block's entries may stray (rounding, not mixtures)."""
    # a mixture's smallest share is 1/n >= 1/max_seq_len; rounding stays far below
    return min(1e-3, 0.25 / (max_seq_len + 1))


def stage_resid(cache: dict, stage: int, n_layers: int) -> torch.Tensor:
    """The residual stream after ``stage`` (0: the embedding; 2l+1, 2l+2: block l's
    attention and MLP) from a run's cache."""
    if stage == 0:
        return cache["hook_embed"]
    layer = (stage + 1) // 2 - 1
    if layer >= n_layers:
        # a stage past the last block (its blocks were empty): the value is complete in
        # the final residual stream, which no later block changes
        layer, stage = n_layers - 1, 2 * n_layers
        if layer < 0:
            return cache["hook_embed"]
    hook = "hook_resid_mid" if stage % 2 == 1 else "hook_resid_post"
    return cache[f"blocks.{layer}.{hook}"]


def streams_as_cache(streams: Mapping[int, torch.Tensor], n_layers: int) -> dict:
    """The residual streams of a run's ``streams`` (stage -> tensor) under the cache's
    names, for :func:`check_guards` (stages past the last block are the final stream).

    >>> sorted(streams_as_cache({0: None, 1: None, 4: None}, n_layers=2))
    ['blocks.0.hook_resid_mid', 'blocks.1.hook_resid_post', 'hook_embed']
    """
    cache = {}
    for stage, x in streams.items():
        if stage == 0:
            cache["hook_embed"] = x
        else:
            layer = (stage + 1) // 2 - 1
            hook = "hook_resid_mid" if stage % 2 == 1 else "hook_resid_post"
            cache[f"blocks.{layer}.{hook}"] = x
    return cache


def check_finite(resid: torch.Tensor, cache: dict | None, n_layers: int) -> None:
    """Every value the model computed at a real position is finite.

    A residual direction keeps what was added to it, so a NaN or an infinity written at
    any stage is still there at the end: checking the final stream checks them all. With
    the cache, the message names the sublayer where it first appeared."""
    bad = ~torch.isfinite(resid[:, 1:])  # [batch, pos, d_model], BOS dropped
    if not bool(bad.any()):
        return
    b, i = (int(x) for x in torch.nonzero(bad.any(dim=-1))[0])
    where = ""
    for layer in range(n_layers) if cache is not None else ():
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


def singular_kinds(cfg: ModelConfig) -> list[str]:
    """Softmax mode: the native units that are singular at 0 (their inputs are checked)."""
    if cfg.attention is not AttentionMode.SOFTMAX:
        return []
    return [k for k in SINGULAR_AT_ZERO if cfg.d_native.get(k, 0)]


def check_singular(cache: dict, cfg: ModelConfig) -> None:
    """Softmax mode: 1/x, 1/sqrt(x) and log(x) must not read a value that the attention's
    leakage cannot tell from 0 (a mean over no key is a tiny number there, not 0)."""
    for kind in singular_kinds(cfg):
        for layer in range(cfg.n_layers):
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


def check_guards(
    guards: Sequence[GuardSpec], cache: dict, index: Mapping[str, int], n_layers: int
) -> None:
    """Checks the guards on linear forms against the residual streams of a run's cache."""
    for g in guards:
        if g.on_block:
            continue
        vals = read_form(stage_resid(cache, g.stage, n_layers)[:, 1:], g.form, index)
        if g.value_range is not None:
            lo, hi = g.value_range
            slack = 1e-9 * max(1.0, abs(lo) if math.isfinite(lo) else 1.0, abs(hi))
            bad = (vals < lo - slack) | (vals > hi + slack) | ~torch.isfinite(vals)
            what = f"inside its declared range [{lo:g}, {hi:g}]"
        elif g.integer:
            bad = not_integer(vals)
            what = "an integer"
        elif g.cancellation is not None:
            size = term_sizes(stage_resid(cache, g.stage, n_layers)[:, 1:], g.form, index)
            bad = cancelled(vals, size, g.cancellation, g.relative)
            what = (
                f"a sum of terms of its own size: its terms reach {float(size.max()):.3g} "
                "and cancel, so their float rounding decides it"
            )
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
                    or "Declare the S-op's values (or its range) so the compiler can plan for it"
                )
            )


def check_blocks(
    guards: Sequence[GuardSpec], resid: torch.Tensor, index: Mapping[str, int], tol: float
) -> None:
    """Checks the categorical blocks on the final residual stream (BOS left out)."""
    for g in guards:
        if not g.on_block:
            continue
        idx = torch.tensor([index[d] for d in g.dims])
        block = resid[:, 1:, idx]  # [batch, pos, values]
        if g.one_hot:
            mixed = ((block > tol) & (block < 1 - tol)).any(dim=-1) | (block.sum(dim=-1) > 1 + tol)
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
            check_combinations(g, block, tol)


def check_combinations(g: GuardSpec, block: torch.Tensor, tol: float) -> None:
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
