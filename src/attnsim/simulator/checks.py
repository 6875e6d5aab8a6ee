"""What U checks: a target and X before they are packed, and its own values while it runs.

:func:`prepare` turns what a caller passes (a spec or a torch module, and X) into a
:class:`~attnsim.simulator.case.Case` once, or raises saying what the build allows and what
to build instead. :func:`check_guard` reads one of the run-time checks the compiler placed in
U's transformer (the scores' range for its max head; with maps="relu", the input range of
every ReLU map) and raises a ValueError that names the quantity, where it occurs in the
target, the bound and what to do.

>>> import torch
>>> from attnsim.simulator import config, sampling
>>> cfg = config.SimulatorConfig(2, 2)
>>> case = prepare(cfg, sampling.random_attention(1, 2, seed=0), torch.zeros(2, 2))
>>> case.shape
Shape(n=2, d=2, n_heads=1, d_mlp=0)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import nn

from attnsim import values
from attnsim.model import checks as model_checks
from attnsim.simulator import adapters, codec, spec_checks, stack
from attnsim.simulator import spec as S
from attnsim.simulator.config import EPS_RANGE, SimulatorConfig, max_score_bound
from attnsim.simulator.programs import INV_Z, SCORE

__all__ = ["prepare", "check_guard", "LN_SLOT_NAMES"]

LN_SLOT_NAMES = {  # the encoder U's LayerNorm slots, in the target's terms
    "ln_input": "before the attention: norm1 of a pre-norm layer",
    "ln_middle": "after the attention: norm1 of a post-norm layer, norm2 of a pre-norm one",
    "ln_output": "after the feed-forward block: norm2 of a post-norm layer",
}

Target = Any  # AttentionSpec | MergedAttention | EncoderLayerSpec | a torch module


def prepare(
    config: SimulatorConfig, target: Target, X: Any, causal: bool | None = None
) -> codec.Case:
    """Validates a target and X against a build and returns them as a case for the codec.

    A torch module is read with ``from_torch`` (with ``causal``); a spec's attention is
    merged once, its causal flag replaced by ``causal`` when that is given.

    Raises:
        TypeError: ``target`` is not a spec or a supported torch module.
        ValueError: the target or X does not fit the build, or X is not finite.
        NotImplementedError: an encoder layer U does not simulate yet (no LayerNorm).
    """
    layout = config.layout
    causal = check_causal(causal)
    attention, layer = split_target(config, target, causal)
    if isinstance(attention, S.AttentionSpec):
        _check_merge(attention)
    merged = attention.merged()
    if merged.n_heads > layout.H or merged.d_model > layout.D:
        raise ValueError(
            f"target has {merged.n_heads} heads and d={merged.d_model}, but this U was "
            f"built for at most {layout.H} heads and d <= {layout.D}; build a "
            "larger U with simulator.build(max_n, max_d, max_heads)"
        )
    X = _check_x(X, merged.d_model, layout.N)
    if layer is not None:
        _check_norm_eps(config, layer)
    if causal is not None and bool(causal) != merged.causal:
        merged = dataclasses.replace(merged, causal=bool(causal))
    return codec.Case(merged, X, layer)


def check_causal(causal: Any) -> bool | None:
    """The ``causal`` of a simulate call: None (the target's own) or a bool, never a truth
    value (``"False"`` is refused, not read as True).

    >>> check_causal(None), check_causal(True)
    (None, True)

    Raises:
        TypeError: anything else.
    """
    return None if causal is None else S._check_bool(causal, "causal")


def split_target(
    config: SimulatorConfig, target: Target, causal: bool | None
) -> tuple[S.AttentionSpec | S.MergedAttention, S.EncoderLayerSpec | None]:
    """``(attention, layer)`` of a target (a torch module read with ``from_torch``), after
    checking that its kind is the one the build simulates (``layer`` is None for an
    attention target).

    >>> from attnsim.simulator import config, sampling
    >>> target = sampling.random_attention(1, 2, seed=0)
    >>> att, layer = split_target(config.SimulatorConfig(2, 2), target, None)
    >>> type(att).__name__, layer
    ('AttentionSpec', None)

    Raises:
        TypeError: ``target`` is not a spec or a supported torch module.
        ValueError: an encoder layer for an attention U or the other way round, or a feed-
            forward block the build cannot hold.
        NotImplementedError: an encoder layer without its LayerNorms.
    """
    if isinstance(target, (nn.TransformerEncoder, stack.EncoderStackSpec)):
        raise ValueError(
            "this U simulates one layer; a stack of encoder layers (torch.nn.TransformerEncoder"
            ", EncoderStackSpec) needs a U built with layer='encoder', n_layers=L (vector "
            "layout)"
        )
    if isinstance(target, nn.Module):
        target = adapters.from_torch(target, causal=bool(causal))
    if isinstance(target, S.EncoderLayerSpec):
        if not config.is_encoder:
            raise ValueError(
                "this U simulates attention layers; build one with layer='encoder' for full "
                "encoder layers"
            )
        _check_encoder(config, target)
        return target.attention, target
    if not isinstance(target, (S.AttentionSpec, S.MergedAttention)):
        raise TypeError(
            f"simulate expects an AttentionSpec, a MergedAttention, an EncoderLayerSpec or a "
            f"torch.nn.MultiheadAttention / TransformerEncoderLayer, got {type(target).__name__}"
        )
    if config.is_encoder:
        raise ValueError(
            "this U simulates encoder layers; give an EncoderLayerSpec or a "
            "torch.nn.TransformerEncoderLayer (or build a U with layer='attention')"
        )
    return target, None


def _check_encoder(config: SimulatorConfig, target: S.EncoderLayerSpec) -> None:
    ffn = target.ffn
    maxmin = ffn.activation is S.Activation.MAXMIN
    if maxmin and ffn.d_mlp % 2:  # FeedForwardSpec refuses this; a clear word if it slips by
        raise ValueError(
            f"a maxmin feed-forward block sorts hidden units in pairs (2k, 2k+1), so its "
            f"width must be even, got d_mlp={ffn.d_mlp}; add or drop one hidden unit"
        )
    if ffn.d_mlp > config.max_ff:
        pairs = ""
        if maxmin and config.max_ff % 2:  # the last hidden unit of an odd F has no partner
            widest = config.max_ff - 1
            pairs = (
                f" (maxmin sorts hidden units in pairs: the widest maxmin block it takes has "
                f"d_mlp={widest})"
                if widest
                else " (maxmin sorts hidden units in pairs: it takes no maxmin block)"
            )
        raise ValueError(
            f"target's feed-forward width is {ffn.d_mlp}, but this U was built for at most "
            f"{config.max_ff}{pairs}; build a U with a larger max_ff"
        )
    if config.is_decoder:
        return
    modern = _modern_parts(target)
    if modern:
        raise ValueError(
            f"the target has {', '.join(modern)}, which this U does not read; build U with "
            "layer='decoder' (vector layout) for today's layers"
        )
    if target.norm1 is None or target.norm2 is None:
        raise NotImplementedError(
            "the encoder U simulates layers with both LayerNorms (as torch's "
            "TransformerEncoderLayer has); for a layer without them build U with "
            "layer='decoder'"
        )


def _modern_parts(target: S.EncoderLayerSpec) -> list[str]:
    """What a decoder U reads and an encoder U does not: RMSNorm, a gated feed-forward,
    silu or identity activations, rotary embeddings."""
    out = []
    if any(
        n is not None and not isinstance(n, S.LayerNormSpec) for n in (target.norm1, target.norm2)
    ):
        out.append("an RMSNorm")
    if target.ffn.gated:
        out.append("a gated feed-forward (W3)")
    if target.ffn.activation in (S.Activation.SILU, S.Activation.IDENTITY):
        out.append(f"the {target.ffn.activation.value} activation")
    if getattr(target.attention, "rotary", None) is not None:
        out.append("rotary embeddings")
    if getattr(target.attention, "linear", None) is not None:
        out.append("linear attention")
    if getattr(target.attention, "linformer", None) is not None:
        out.append("Linformer projections")
    return out


def _check_merge(att: S.AttentionSpec) -> None:
    """Refuses factors whose merged products (``scale W_Q W_K^T`` and its bias forms,
    ``W_V W_O``, ``b_V W_O``) would fall below float64's normal range, where they lose their
    relative precision (tiny weights for huge inputs: the scores stay ordinary numbers, the
    merged matrix underflows to subnormals or 0)."""
    floor = math.log2(torch.finfo(S.DTYPE).tiny) + 53

    def below(a: torch.Tensor, b: torch.Tensor, scale: float = 1.0) -> bool:
        # the size of each entry's terms, sum |a| |b|, as its exponent: the factors scaled
        # to at most 1 first (by powers of two), so that the product cannot underflow itself
        tops = [float(t.abs().max()) if t.numel() else 0.0 for t in (a, b)]
        if not all(tops) or not scale:
            return False
        ea, eb = (math.frexp(t)[1] for t in tops)
        size = torch.ldexp(a.abs(), torch.tensor(-ea)) @ torch.ldexp(b.abs(), torch.tensor(-eb))
        exponent = torch.log2(size[size > 0]) + ea + eb + math.log2(abs(scale))
        return bool((exponent < floor).any())

    qk = [(att.W_Q, att.W_K.transpose(1, 2)), (att.W_Q, att.b_K[:, :, None])]
    qk += [(att.W_K, att.b_Q[:, :, None]), (att.b_Q[:, None, :], att.b_K[:, :, None])]
    parts = [(below(a, b, att.scale), "scale W_Q W_K^T") for a, b in qk]
    parts += [(below(att.W_V, att.W_O), "W_V W_O")]
    parts += [(below(att.b_V[:, None, :], att.W_O), "b_V W_O")]
    for small, name in parts:
        if small:
            raise ValueError(
                f"the target's merged {name} has entries below 1e-292, where float64 loses "
                "their precision (the scalar layout merges the attention's factors): use the "
                "vector layout (layout='vector'), which keeps them apart, or scale X down and "
                "the weights up"
            )


def _check_norm_eps(config: SimulatorConfig, target: S.EncoderLayerSpec) -> None:
    """maps="relu", encoder: each LayerNorm's eps must lie in the range U's 1/sqrt covers
    for a constant row (variance 0)."""
    if config.relu_value_bound is None:
        return
    for name, norm in (("norm1", target.norm1), ("norm2", target.norm2)):
        if norm is not None and not EPS_RANGE[0] <= norm.eps <= EPS_RANGE[1]:
            raise ValueError(
                f"the target's {name}.eps = {norm.eps:g} is outside [{EPS_RANGE[0]:g}, "
                f"{EPS_RANGE[1]:g}], the range this U's ReLU 1/sqrt covers (maps='relu')"
            )


def _check_x(X: Any, d: int, max_n: int) -> torch.Tensor:
    """X as a float64 ``[n, d]`` tensor with 1 <= n <= max_n and finite entries."""
    values.check_real(X, "X")  # a conversion would keep only the real parts
    spec_checks.check_has_values(X, "X")
    X = torch.as_tensor(X, dtype=torch.float64)
    if X.ndim != 2 or X.shape[1] != d:
        raise ValueError(f"X must have shape (n, {d}), got {tuple(X.shape)}")
    n = X.shape[0]
    if not 1 <= n <= max_n:
        raise ValueError(
            f"X has n={n} rows, but this U was built for 1 <= n <= {max_n}; build a larger U"
        )
    if not torch.isfinite(X).all():
        i, c = (int(v) for v in torch.nonzero(~torch.isfinite(X))[0])
        raise ValueError(f"X[{i}, {c}] = {float(X[i, c])} is not finite")
    return X


def pairs(items: Any) -> list:
    """``items`` as a list of ``(target, X)`` pairs (``simulate_batch``'s argument).

    >>> pairs([]), pairs([("t", "X")])
    ([], [('t', 'X')])
    """
    items = list(items)
    for item in items:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise TypeError(
                "simulate_batch takes a list of (target, X) pairs, got an item of type "
                f"{type(item).__name__}: for one target call simulate(target, X)"
            )
    return items


def check_guard(
    config: SimulatorConfig, guard: Any, vals: torch.Tensor, size: torch.Tensor | None = None
) -> None:
    """Raises a ValueError that names the quantity, where, the bound and what to do when
    a guarded value leaves what U was built for.

    Args:
        config: the build.
        guard: one of the compiled model's run-time checks (its label, range or values).
        vals: ``[batch, length]`` the guarded value at every position (BOS left out).
        size: for a check of cancellation, the size of the value's terms there.
    """
    if guard.value_range is not None:
        lo, hi = guard.value_range
        slack = 1e-9 * max(1.0, abs(lo) if math.isfinite(lo) else 1.0, abs(hi))
        # a positive low end (1/x, 1/sqrt: flat below it) allows rounding relative to itself
        below = lo - (1e-9 * lo if lo > 0 else slack)
        bad = (vals < below) | (vals > hi + slack) | ~torch.isfinite(vals)
    elif guard.integer:
        bad = model_checks.not_integer(vals)
        lo = hi = math.nan
    elif guard.cancellation is not None:
        bad = model_checks.cancelled(vals, size, guard.cancellation, guard.relative)
        if bool(bad.any()):
            b, p = (int(x) for x in torch.nonzero(bad)[0])
            raise ValueError(
                f"U's {guard.label!r} at position {p}{f' (target {b} of the batch)' if b else ''}"
                f" is {float(vals[b, p]):.6g}, a sum of terms up to {float(size[b, p]):.3g} "
                "that cancel, so float rounding decides it; the target's values differ too "
                "much in size: scale its weights or X"
            )
        return
    else:
        allowed = torch.tensor(guard.allowed, dtype=vals.dtype)
        bad = (vals[..., None] - allowed).abs().amin(dim=-1) > 1e-6 * vals.abs().clamp(min=1)
        lo = hi = math.nan
    if not bool(bad.any()):
        return
    b, p = (int(x) for x in torch.nonzero(bad)[0])
    raise ValueError(_range_message(config, guard.label, p, float(vals[b, p]), lo, hi, b))


def _range_message(
    config: SimulatorConfig, label: str, p: int, v: float, lo: float, hi: float, b: int
) -> str:
    roles = config.layout.roles(p)
    which = f" (target {b} of the batch)" if b else ""
    if "/L" in label:  # layer l of a stack: the same quantity, in that layer
        label, layer = label.split("/L")
        which += f" in layer {layer} of the stack"
    value_bound = config.relu_value_bound
    if label == SCORE and "P" in roles:
        i, j, h = roles["P"]
        limit = max_score_bound(config.layout, config.dtype)
        return (
            f"the target's attention score of query row {i} and key row {j} in head {h} "
            f"is {v:.6g}{which}, beyond +-{config.score_bound:g}, the score bound this U was "
            f"built for (scores of masked keys count too); build U with a larger "
            f"score_bound (at most {limit:g} for this build in {config.dtype_name}) or scale "
            "the target's scores down"
        )
    if label == INV_Z and value_bound is not None and "P" in roles:
        i, _, h = roles["P"]
        return (
            f"the attention's row sum Z for query row {i} in head {h} is {v:.6g}{which}, "
            f"outside [{lo:g}, {hi:g}], the range this U's ReLU 1/x covers (maps='relu', "
            f"value_bound {value_bound:g}); for linear attention Z = phi(q) . sum_j phi(k_j) "
            f"+ eps must lie there: give the target a linear_eps of at least {lo:g} (a query "
            "whose features meet no key's has Z = eps), scale its queries and keys down, or "
            "build U with a larger value_bound"
        )
    if label.endswith("_rsqrt") and value_bound is not None:
        slot = label[: -len("_rsqrt")]
        where = f" for row {roles['X'][0]}" if "X" in roles else ""
        return (
            f"LayerNorm '{slot}' ({LN_SLOT_NAMES.get(slot, 'a LayerNorm')}): the variance "
            "plus eps of the values it normalises is "
            f"{v:.6g}{where}{which}, outside [{lo:g}, {hi:g}], the range this U's ReLU "
            f"1/sqrt covers (maps='relu', value_bound {value_bound:g}: entries up to "
            f"about +-{value_bound:g}); build U with a larger value_bound"
        )
    if label.startswith("ffn_") and value_bound is not None:
        where = ""
        if "HID" in roles:
            where = f" for row {roles['HID'][0]} and hidden unit {roles['HID'][1]}"
        return (
            f"the feed-forward pre-activations reach {v:.6g}{where}{which}, beyond the "
            f"value bound {value_bound:g} this U (maps='relu') was built for: its "
            "ReLU gelu covers only [-value_bound, value_bound] (it runs for every "
            "activation, relu and maxmin too); build U with a larger value_bound"
        )
    bounds = f"[{lo:g}, {hi:g}]" if math.isfinite(hi) else "its planned values"
    return (
        f"U's run-time check on {label!r} failed: {v:.6g} at sequence position {p}{which} "
        f"is outside {bounds}; U would be wrong here. This is not expected for any target "
        "within the build's bounds: please report the target and X"
    )
