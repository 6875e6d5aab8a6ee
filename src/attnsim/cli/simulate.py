"""``attnsim simulate`` and ``attnsim verify``: the universal simulator from the shell.

Every option is checked before U is built: sizes must be positive and fit in memory, options
that would be ignored are refused, and a ``--module`` file must agree with the flags given.

>>> main(["simulate", "--max-n", "2", "--max-d", "2", "--json"])  # doctest: +ELLIPSIS
{...
0
"""

from __future__ import annotations

import argparse
import json
import math
import textwrap

from attnsim.cli import (
    LibraryError,
    UserError,
    _module_file,
    _output,
    at_least,
    fits_in_memory,
    saved_u,
)
from attnsim.cli.build_flags import (
    DECODER_TARGET_KINDS,
    DEFAULT_MAX_D,
    DEFAULT_MAX_N,
    fill_defaults,
)
from attnsim.cli.build_flags import add_build_args as _build_args

MAX_SEED = 2**63 - 1

# one paragraph: the help formatter wraps it to the terminal (80 columns through a pipe)
_MODULE_HELP = (
    "--module FILE: a torch.nn.MultiheadAttention or torch.nn.TransformerEncoderLayer saved "
    "with torch.save(module, FILE) or torch.save(module.state_dict(), FILE), read with "
    "weights_only=True (no code from the file is run). A whole module records its heads, "
    "activation, norm_first, LayerNorm eps and add_zero_attn. A state_dict records only the "
    "weights (so d, the feed-forward width and the biases): give --heads for it, and for an "
    "encoder layer also --activation and --norm-first or --no-norm-first. What a state_dict "
    "does not record and no flag gives is assumed at torch's default (--layer-norm-eps 1e-5, "
    "--no-add-zero-attn); the run prints every assumption, and T(X) and the error are those "
    "of the layer rebuilt with them. Flags that disagree with the file are refused. Sizes of "
    "the build (--max-d, --max-heads, --max-ff) default to the module's."
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the ``simulate`` and ``verify`` commands."""
    sim = subparsers.add_parser(
        "simulate",
        help="run the universal simulator U on a random target (or a saved torch module)",
        description="Build U, simulate one attention layer T on an input X, and print T(X), "
        "U's output, the error and U's size.",
        epilog=_MODULE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _build_args(sim, "simulate")
    sim.add_argument(
        "--module",
        metavar="FILE",
        help="simulate this saved MultiheadAttention or TransformerEncoderLayer (see below)",
    )
    sim.add_argument(
        "--heads",
        type=int,
        default=None,
        help="the target's heads: required for a --module state_dict (it does not record "
        "them); random targets: default --max-heads",
    )
    sim.add_argument(
        "--norm-first",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="encoder target: pre-norm (--norm-first) or post-norm (--no-norm-first); "
        "required for a --module state_dict; random targets: default post-norm",
    )
    sim.add_argument(
        "--activation",
        choices=["relu", "gelu", "gelu_tanh", "maxmin", "silu", "identity"],
        default=None,
        metavar="ACT",
        help="relu, gelu, gelu_tanh, maxmin, silu or identity: an encoder or decoder "
        "target's feed-forward activation (maxmin: GroupSort-2, "
        "hidden pairs sorted; silu and identity: decoder layers only); required for a "
        "--module state_dict; random targets: default relu (decoder: silu)",
    )
    sim.add_argument(
        "--layer-norm-eps",
        type=float,
        default=None,
        help="encoder --module state_dict: the LayerNorm eps (default: torch's 1e-5, "
        "printed as an assumption)",
    )
    sim.add_argument(
        "--add-zero-attn",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--module state_dict: whether the attention was built with add_zero_attn=True "
        "(an extra all-zero key and value, which U does not simulate: refused); default: "
        "--no-add-zero-attn, printed as an assumption",
    )
    sim.add_argument("--n", type=int, default=None, help="rows of X (default: --max-n)")
    sim.add_argument("--causal", action="store_true", help="apply a causal mask")
    sim.set_defaults(func=_simulate)

    ver = subparsers.add_parser(
        "verify",
        help="check U against plain-torch attention on many random targets",
        description="Simulate N random targets (sizes up to the build, causal or not, "
        "biases, |scores| up to 50) and report the max and median relative error.",
    )
    _build_args(ver, "verify")
    ver.add_argument("--targets", type=int, default=100, help="how many random targets")
    ver.set_defaults(func=_verify)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _check_build_args(args: argparse.Namespace) -> None:
    """Checks the build options that do not depend on a --module."""
    for name in ("max_n", "max_d", "max_heads", "max_ff"):
        at_least(getattr(args, name), _flag(name), 1)
    _check_seed(args)
    if args.score_bound is not None and not (
        math.isfinite(args.score_bound) and args.score_bound > 0
    ):
        raise UserError(f"--score-bound must be positive, got {args.score_bound}")
    if args.maps == "native":
        given = [
            f
            for f in ("logit_bound", "map_tolerance", "value_bound")
            if getattr(args, f) is not None
        ]
        if given:
            flags = " and ".join(_flag(f) for f in given)
            raise UserError(
                f"{flags} appl{'ies' if len(given) == 1 else 'y'} only with --maps relu "
                f"(native maps are exact); add --maps relu or leave {flags} out"
            )
    else:
        from attnsim.simulator.config import LOGIT_LIMIT

        bound, tol, value = args.logit_bound, args.map_tolerance, args.value_bound
        if bound is not None and not (math.isfinite(bound) and 0 < bound <= LOGIT_LIMIT):
            raise UserError(
                f"--logit-bound must be in (0, {LOGIT_LIMIT:g}] (U realises exp down to "
                f"e^(-2 x bound)), got {bound:g}"
            )
        if tol is not None and not (math.isfinite(tol) and 0 < tol < 1):
            raise UserError(f"--map-tolerance must be in (0, 1), e.g. 1e-6, got {tol}")
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UserError(f"--value-bound must be positive, got {value:g}")


def _check_seed(args: argparse.Namespace) -> None:
    if not 0 <= args.seed <= MAX_SEED:
        raise UserError(f"--seed must be in [0, 2^63 - 1], got {args.seed}")


def _resolve_sizes(args: argparse.Namespace) -> None:
    """Fills the build sizes left to their defaults (random targets)."""
    args.layer = args.layer or "attention"
    args.max_n = args.max_n or DEFAULT_MAX_N
    args.max_d = args.max_d or DEFAULT_MAX_D
    args.max_heads = args.max_heads or 1
    _check_encoder_only(args)


def _check_encoder_only(args: argparse.Namespace) -> None:
    """Refuses the encoder-only build options for an attention U."""
    if args.value_bound is not None and args.layer != "encoder":
        raise UserError(
            "--value-bound applies only to encoder layers (--layer encoder) with --maps relu; "
            "add --layer encoder or leave --value-bound out"
        )
    if args.max_ff is not None and args.layer not in ("encoder", "decoder"):
        raise UserError(
            "--max-ff applies only to whole layers (--layer encoder or decoder); add --layer "
            "encoder or leave --max-ff out"
        )


def _config(args: argparse.Namespace):
    """The build's SimulatorConfig, made once from the flags (those left out take its
    defaults); an option the config refuses is a LibraryError."""
    import torch

    from attnsim.simulator.config import SimulatorConfig

    given = ("logit_bound", "map_tolerance", "value_bound", "score_bound")
    given += ("max_ff",) if args.layer in ("encoder", "decoder") else ()
    options = {name: getattr(args, name) for name in given if getattr(args, name) is not None}
    try:
        return SimulatorConfig(
            args.max_n,
            args.max_d,
            args.max_heads,
            layer=args.layer,
            attention=args.attention,
            maps=args.maps,
            dtype=torch.float32 if args.float32 else torch.float64,
            layout_kind=getattr(args, "layout", "vector"),
            n_layers=getattr(args, "n_layers", 1),
            **options,
        )
    except ValueError as exc:
        raise LibraryError(f"cannot build U: {exc}") from None


def _target_bytes(config) -> int:
    """The bytes of a random target of the build's sizes and of its X (float64): the
    attention's four [d, d] projections, the feed-forward's [d, ff] matrices (three for a
    gated decoder layer), per layer."""
    d, ff = config.max_d, config.max_ff if config.is_encoder else 0
    per_layer = 4 * d * d + (3 if config.is_decoder else 2) * d * ff + 8 * d + ff
    return 8 * (per_layer * config.n_layers + config.max_n * d)


def _check_memory(config, target_bytes: int = 0) -> None:
    """Refuses builds whose input and stream alone (and a random target of
    ``target_bytes``) would not fit in memory, before anything is allocated
    (``universal.memory_needed``)."""
    from attnsim.simulator import universal

    length = config.layout.length
    item = 4 if config.dtype_name == "float32" else 8
    need = universal.memory_needed(config) + target_bytes
    sizes = f"--max-n {config.max_n} --max-d {config.max_d} --max-heads {config.max_heads}"
    fits_in_memory(
        need,
        f"U for {sizes} reads a sequence of {length:,} positions; running it",
        "use smaller --max-n, --max-d or --max-heads",
    )
    if config.maps == "relu":
        # ReLU maps: about (35,000 + 52,000) units at bound 50 and tolerance 1e-6, growing as
        # bound / sqrt(tolerance); each unit has a row and a column of the residual width
        bound, tol = config.logit_bound, config.map_tolerance
        units = 87_000 * (bound / 50.0) * math.sqrt(1e-6 / tol)
        width = 40 + 20 * config.max_d  # U's residual width grows about so with max-d
        fits_in_memory(
            2.0 * item * units * width,
            f"--maps relu with --logit-bound {bound:g} and --map-tolerance "
            f"{tol:g} ({units:,.0f} ReLU units)",
            "use a larger --map-tolerance or a smaller --logit-bound",
        )


def _describe_build(config) -> str:
    """``U(4,4,2) for encoder layers with ReLU maps``: what a build is for (n, d, heads)."""
    text = f"U({config.max_n},{config.max_d},{config.max_heads})"
    if config.is_encoder:
        text += f" for {config.layer.value} layers (feed-forward <= {config.max_ff})"
    if config.maps == "relu":
        text += " with ReLU maps"
    if not config.is_vector:
        text += " (scalar layout)"
    if config.n_layers > 1:
        text += f", a stack of {config.n_layers} layers"
    return text


def _build(config, bar: _output.Progress):
    from attnsim.simulator import universal

    _check_memory(config)
    bar.step(f"building {_describe_build(config)}")
    try:
        return universal.build(config=config)
    except (ValueError, NotImplementedError) as exc:
        raise LibraryError(f"cannot build U: {exc}") from None


def _check_target(config, target, X) -> None:
    """Refuses a target that U would refuse (its kind, activation, sizes), before U is built."""
    from attnsim.simulator import layouts

    try:
        layouts.of(config).prepare(config, target, X, None)
    except (ValueError, NotImplementedError) as exc:
        raise LibraryError(str(exc)) from None


def _random_target(args: argparse.Namespace):
    """A random target of the flags' sizes, and the build's config."""
    from attnsim.simulator import sampling, sampling_decoder, stack

    _resolve_sizes(args)
    if args.layer not in ("encoder", "decoder"):
        extra = [
            flag
            for flag, value in (
                ("--activation", args.activation),
                ("--norm-first/--no-norm-first", args.norm_first),
            )
            if value is not None
        ]
        if extra:
            raise UserError(
                f"{' and '.join(extra)} appl{'ies' if len(extra) == 1 else 'y'} only to encoder "
                f"layers; add --layer encoder or leave {'it' if len(extra) == 1 else 'them'} out"
            )
    for flag, value in (
        ("--layer-norm-eps", args.layer_norm_eps),
        ("--add-zero-attn/--no-add-zero-attn", args.add_zero_attn),
    ):
        if value is not None:
            raise UserError(
                f"{flag} applies only to a --module state_dict; leave it out for random targets"
            )
    heads = args.max_heads if args.heads is None else args.heads
    at_least(args.heads, "--heads", 1)
    if heads > args.max_heads:
        raise UserError(
            f"--heads {heads} exceeds --max-heads {args.max_heads}; "
            + saved_u.larger(args, f"--max-heads {heads}")
        )
    if args.max_d % heads:
        raise UserError(
            f"a random target has width d = --max-d {args.max_d}, which {heads} heads do not "
            f"divide; pass --heads H with H dividing {args.max_d}, or another --max-d"
        )
    config = _config(args)
    # the target's weights are drawn before U is built: refuse sizes that cannot fit first
    _check_memory(config, _target_bytes(config))
    if config.is_encoder:
        if config.is_decoder:  # LLaMA's shape (rotary where the head width is even)
            draw, options = (
                sampling_decoder.random_decoder_layer,
                {
                    "causal": True,
                    "activation": args.activation or "silu",
                    "norm_first": True if args.norm_first is None else bool(args.norm_first),
                    "rotary": (args.max_d // heads) % 2 == 0,
                },
            )
        else:
            draw, options = (
                sampling.random_encoder_layer,
                {
                    "causal": args.causal,
                    "activation": args.activation or "relu",
                    "norm_first": bool(args.norm_first),
                },
            )
        layers = [
            draw(heads, args.max_d, config.max_ff, seed=args.seed + k, **options)
            for k in range(config.n_layers)
        ]
        target = layers[0] if len(layers) == 1 else stack.EncoderStackSpec(tuple(layers))
    else:
        target = sampling.random_attention(heads, args.max_d, seed=args.seed, causal=args.causal)
    return target, config


def _simulate(args: argparse.Namespace) -> int:
    import torch

    from attnsim.simulator.verify import reference_notes, relative_error
    from attnsim.simulator.verify import reference_of as reference

    saved_u.check_flags(args)
    _check_seed(args)
    args.assumptions = None
    at_least(args.n, "--n", 1)
    at_least(args.heads, "--heads", 1)
    loaded = saved_u.loaded(args, "attnsim simulate")
    if loaded is None:
        fill_defaults(args)
        _check_build_args(args)
        saved_u.check_save_dir(args)
    if args.module:
        target = _module_file.module_target(args)
        if loaded is not None:
            saved_u.fits(args, loaded[0].config, args.u)
            saved_u.fill(args, loaded[0].config)
        config = _config(args)
    else:
        target, config = _random_target(args)
    if loaded is not None:  # the saved U's own configuration runs
        config = loaded[0].config
    n = args.max_n if args.n is None else args.n
    if n > args.max_n:
        raise UserError(
            f"--n {n} exceeds --max-n {args.max_n}; "
            + saved_u.larger(args, f"--max-n {n}", " or a smaller --n")
        )
    d = target.d_model
    X = torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(args.seed))
    _check_target(config, target, X)  # what U.simulate would refuse, before U is built
    with _output.Progress("attnsim simulate") as bar:
        U = _build(config, bar) if loaded is None else loaded[0]
        if args.save_u is not None:
            bar.step(f"saving U into {args.save_u}")
        saved = saved_u.save(U, args)
        bar.step(f"simulating the target on X of shape ({n}, {d})")
        try:
            got = U.simulate(target, X)
        except ValueError as exc:
            raise LibraryError(str(exc)) from None
    origin = saved_u.origin(args, U, loaded, saved)
    want = reference(target, X)
    err = relative_error(got, want)
    report = U.report()
    bound = None if U.is_encoder else U.error_bound(target, X)
    if args.json:
        print(
            json.dumps(
                {
                    "reference": want.tolist(),
                    "simulated": got.tolist(),
                    "relative_error": err,
                    "error_bound": None if bound is None else bound.tolist(),
                    "map_bounds": U.map_bounds,
                    "notes": reference_notes(target),
                    "report": report.__dict__,
                    "u": origin,
                    **(
                        {}
                        if args.assumptions is None
                        else {
                            "target": {
                                "module": args.module,
                                "facts": {
                                    k: {"value": v, "from": w} for k, v, w in args.assumptions
                                },
                            }
                        }
                    ),
                }
            )
        )
        return 0
    # plain print: lines stay whole (rich would break them at 80 columns through a pipe)
    if args.assumptions is not None:
        print(_module_file.describe(args))
    print(f"T(X) (plain torch{'' if args.assumptions is None else ', the layer above'}):\n{want}")
    print(f"U(<T, X>):\n{got}")
    print(f"max relative error: {err:.3e}")
    for note in reference_notes(target):  # where torch's own forward differs from U's
        print(textwrap.fill(f"note: {note}", 80, subsequent_indent="  "))
    if bound is not None:
        within = bool(((got - want).abs() <= bound).all())
        print(
            f"max |error| {float((got - want).abs().max()):.3e}, bound "
            f"{float(bound.max()):.3e} (every entry within its bound: {within})"
        )
    for label, b in U.map_bounds.items():
        print(f"  ReLU map {label}: certified relative error <= {b:.3g}")
    print(_output.wrap(str(report)))
    print(_output.wrap(saved_u.describe(origin)))
    return 0


def _verify(args: argparse.Namespace) -> int:
    from attnsim.simulator.verify import verify

    kind = args.layer if args.layer in DECODER_TARGET_KINDS else None
    if kind is not None:  # one kind of decoder layer: a decoder U
        args.layer = "decoder"
        args.layer_flag = f"--layer {kind}"  # (what a saved U's check names)
    saved_u.check_flags(args)
    _check_seed(args)
    at_least(args.targets, "--targets", 1)
    args.module = None
    loaded = saved_u.loaded(args, "attnsim verify")
    if loaded is None:
        fill_defaults(args)
        _check_build_args(args)
        saved_u.check_save_dir(args)
        _resolve_sizes(args)
        config = _config(args)
    with _output.Progress("attnsim verify") as bar:
        U = _build(config, bar) if loaded is None else loaded[0]
        if args.save_u is not None:
            bar.step(f"saving U into {args.save_u}")
        saved = saved_u.save(U, args)
        if not bar.terminal:  # through a pipe: one line for the whole run
            bar.step(f"simulating {args.targets} random targets")
            result = verify(U, targets=args.targets, seed=args.seed, progress=False, kind=kind)
    if bar.terminal:  # verify's own bar counts the targets (one live display at a time)
        result = verify(U, targets=args.targets, seed=args.seed, progress=True, kind=kind)
    origin = saved_u.origin(args, U, loaded, saved)
    if args.json:
        print(json.dumps({**result.to_dict(), "u": origin}))
        return 0 if not result.failures else 1
    print(_output.wrap(str(U.report())))
    print(_output.wrap(saved_u.describe(origin)))
    # lines fit the terminal (80 columns through a pipe): the verdict comes first
    print(
        _output.wrap(
            f"{result.count} targets: max relative error {result.max_error:.3e}, failures "
            f"{len(result.failures)}, median {result.median_error:.3e}"
            + (f", tolerance {result.tolerance:g}" if U.maps == "native" else "")
        )
    )
    if result.max_bound_ratio is not None:
        print(
            _output.wrap(
                f"entrywise bound (U.error_bound): largest relative bound "
                f"{result.max_certified:.3e}, largest |error| / bound "
                f"{result.max_bound_ratio:.3g}"
                + (" (the criterion for maps=relu)" if U.maps == "relu" else "")
            )
        )
    for label, b in result.map_bounds.items():
        print(f"  ReLU map {label}: certified relative error <= {b:.3g}")
    if result.refused:
        print(
            _output.wrap(
                f"  {result.refused} targets refused with a message: their values left the "
                "ranges U's ReLU maps cover (--value-bound)"
            )
        )
    for note in result.notes:
        print(textwrap.fill(f"note: {note}", 80, subsequent_indent="  "))
    for seed, err in result.failures[:10]:
        print(f"  failure: target seed {seed}, error {err:.3e}")
    return 0 if not result.failures else 1


def main(argv):  # for the doctest
    from attnsim.cli import main as cli_main

    return cli_main(argv)
