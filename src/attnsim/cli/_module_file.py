"""``attnsim simulate --module FILE``: a saved layer as the target, and what it assumed.

:func:`module_target` reads the file (``adapters.read_layer``), resolves the flags against
what the file records (a flag that disagrees is refused; what a state_dict does not record
comes from a flag or torch's default), and keeps each fact with where it came from in
``args.assumptions``; :func:`describe` prints them, so a run says which layer its T(X) and
error are those of.
"""

from __future__ import annotations

import argparse
import math

from attnsim.cli import LibraryError, UserError
from attnsim.cli.build_flags import DEFAULT_MAX_N

__all__ = ["module_target", "describe"]


def module_target(args: argparse.Namespace):
    """The --module file as a spec; resolves the flags against what the file records."""
    from attnsim.simulator import adapters

    try:
        saved = adapters.read_layer(args.module)
    except OSError as exc:
        raise UserError(f"--module {args.module}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UserError(f"--module {exc}") from None
    name = args.module
    what = "nn.MultiheadAttention" if saved.kind == "attention" else "nn.TransformerEncoderLayer"
    if args.layer is not None and args.layer != saved.kind:
        raise UserError(
            f"--layer {args.layer} disagrees with --module {name}, which holds an {what}; "
            f"leave --layer out or pass --layer {saved.kind}"
        )
    args.layer = saved.kind
    if saved.kind == "attention":
        extra = [
            flag
            for flag, value in (
                ("--activation", args.activation),
                ("--norm-first/--no-norm-first", args.norm_first),
                ("--layer-norm-eps", args.layer_norm_eps),
                ("--max-ff", args.max_ff),
                ("--value-bound", args.value_bound),
            )
            if value is not None
        ]
        if extra:
            raise UserError(
                f"{', '.join(extra)} appl{'ies' if len(extra) == 1 else 'y'} to encoder layers; "
                f"--module {name} holds an nn.MultiheadAttention: leave "
                f"{'it' if len(extra) == 1 else 'them'} out"
            )
    # each fact: the flag, the value given, what the file records, how to pass it
    facts = [("--heads", "heads", args.heads, saved.heads)]
    if saved.kind == "encoder":
        facts += [
            ("--activation", "activation", args.activation, saved.activation),
            ("--norm-first", "norm_first", args.norm_first, saved.norm_first),
            ("--layer-norm-eps", "layer_norm_eps", args.layer_norm_eps, saved.layer_norm_eps),
        ]
    for flag, attr, given, recorded in facts:
        if given is not None and recorded is not None and given != recorded:
            shown = _shown(flag, recorded)
            raise UserError(
                f"{_shown(flag, given)} disagrees with --module {name}: its layer has "
                f"{attr.replace('_', ' ')} = {recorded}; leave the flag out or pass {shown}"
            )
    if saved.is_state_dict:
        # a state_dict records none of these: the flags decide, none is assumed
        missing = [flag for flag, _, given, _ in facts if given is None]
        if args.add_zero_attn is None:
            missing.append("--add-zero-attn")
        if missing:
            need = {
                "--heads": f"--heads H (H divides d = {saved.d_model}: "
                f"{', '.join(map(str, adapters.divisors(saved.d_model)))})",
                "--activation": "--activation relu|gelu|gelu_tanh|maxmin",
                "--norm-first": "--norm-first or --no-norm-first",
                "--layer-norm-eps": "--layer-norm-eps EPS (torch's default is 1e-05)",
                "--add-zero-attn": "--no-add-zero-attn (U does not simulate add_zero_attn=True)",
            }
            said = {
                "--heads": "its number of heads",
                "--activation": "its activation",
                "--norm-first": "whether it is pre-norm",
                "--layer-norm-eps": "its LayerNorm eps",
                "--add-zero-attn": "whether its attention adds a zero key (add_zero_attn)",
            }
            raise UserError(
                f"--module {name} is a state_dict of an {what}, which does not record "
                f"{' or '.join(said[f] for f in missing)}; pass "
                f"{'; '.join(need[f] for f in missing)}"
            )
        if args.heads < 1 or saved.d_model % args.heads:
            raise UserError(
                f"--heads {args.heads} does not divide the width d = {saved.d_model} of "
                f"--module {name}; pass one of "
                f"{', '.join(map(str, adapters.divisors(saved.d_model)))}"
            )
        if args.layer_norm_eps is not None and not (
            math.isfinite(args.layer_norm_eps) and args.layer_norm_eps > 0
        ):
            raise UserError(f"--layer-norm-eps must be positive, got {args.layer_norm_eps}")
    heads = saved.heads or args.heads
    for flag, attr, need in (
        ("--max-d", "max_d", saved.d_model),
        ("--max-heads", "max_heads", heads),
        ("--max-ff", "max_ff", saved.d_ff),
    ):
        have = getattr(args, attr)
        if need is None:
            continue
        if have is None:
            setattr(args, attr, need)
        elif have < need:
            raise UserError(
                f"{flag} {have} is smaller than the {need} of --module {name}; pass "
                f"{flag} {need} or more (or leave it out)"
            )
    args.max_n = args.max_n or DEFAULT_MAX_N
    try:
        module = saved.module(
            heads=args.heads,
            activation=args.activation,
            norm_first=args.norm_first,
            layer_norm_eps=args.layer_norm_eps,
        )
    except (ValueError, TypeError) as exc:
        raise LibraryError(f"--module {name}: {_without_path(str(exc), name)}") from None
    attention = module if saved.kind == "attention" else module.self_attn
    recorded = None if saved.is_state_dict else bool(attention.add_zero_attn)
    zero_attn = args.add_zero_attn
    if zero_attn is not None and recorded is not None and zero_attn != recorded:
        flag = "--add-zero-attn" if recorded else "--no-add-zero-attn"
        raise UserError(
            f"{'--add-zero-attn' if zero_attn else '--no-add-zero-attn'} disagrees with "
            f"--module {name}: its attention has add_zero_attn = {recorded}; leave the flag "
            f"out or pass {flag}"
        )
    if zero_attn or recorded:
        said = (
            "--add-zero-attn: an attention" if zero_attn else f"--module {name} holds an attention"
        )
        raise UserError(
            f"{said} built with add_zero_attn=True, which appends an all-zero key and value "
            f"to every sequence: a position that is not part of X, and U does not simulate "
            f"it; save a layer built with add_zero_attn=False"
        )
    args.assumptions = _assumptions(args, saved, module)
    try:
        return adapters.from_torch(module, causal=args.causal)
    except (ValueError, TypeError) as exc:
        raise LibraryError(f"--module {name}: {_without_path(str(exc), name)}") from None


def _without_path(message: str, path: str) -> str:
    """``message`` without a leading ``PATH: `` (the caller names the file already)."""
    return message[len(path) + 2 :] if message.startswith(f"{path}: ") else message


def _assumptions(args: argparse.Namespace, saved, module) -> list[tuple[str, str, str]]:
    """What the layer simulated is, fact by fact: ``(name, value, where it comes from)``.

    The sources: "the file" or "--FLAG" (given: a state_dict records neither these flags'
    facts nor the eps, so its run needs them). T(X) and the error printed are those of this
    layer: each fact is shown.
    """
    file = "the file"
    given = lambda flag, value: flag if value is not None else None
    facts: list[tuple[str, str, str]] = [
        ("heads", str(saved.heads or args.heads), given("--heads", args.heads) or file),
    ]
    if saved.kind == "encoder":
        norm_flag = "--norm-first" if args.norm_first else "--no-norm-first"
        facts += [
            (
                "activation",
                str(saved.activation or args.activation),
                given("--activation", args.activation) or file,
            ),
            ("norm_first", str(bool(module.norm_first)), given(norm_flag, args.norm_first) or file),
            (
                "layer_norm_eps",
                f"{module.norm1.eps:g}",
                given("--layer-norm-eps", args.layer_norm_eps) or file,
            ),
        ]
    facts += [
        (
            "add_zero_attn",
            "False",
            "--no-add-zero-attn" if args.add_zero_attn is False else file,
        ),
        ("bias", str(saved.bias), file),
        ("causal mask", str(bool(args.causal)), "--causal" if args.causal else "no --causal"),
        ("dropout", "off", "simulated in eval mode"),
        ("batch_first", "either", "X is one sequence [n, d]"),
    ]
    return facts


def describe(args: argparse.Namespace) -> str:
    """The layer a --module run simulates: each fact with where it comes from."""
    lines = [f"--module {args.module}: the layer simulated, fact by fact:"]
    width = max(len(k) for k, _, _ in args.assumptions)
    for name, value, source in args.assumptions:
        lines.append(f"  {name:<{width}}  {value}  ({source})")
    lines.append("  T(X), U's output and the error below are those of this layer")
    return "\n".join(lines)


def _shown(flag: str, value) -> str:
    if flag == "--norm-first":
        return "--norm-first" if value else "--no-norm-first"
    return f"{flag} {value}"
