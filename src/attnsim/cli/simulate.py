"""``attnsim simulate`` and ``attnsim verify``: the universal simulator from the shell.

>>> main(["simulate", "--max-n", "2", "--max-d", "2", "--json"])  # doctest: +ELLIPSIS
{...
0
"""

from __future__ import annotations

import argparse
import json

import rich.console
import torch

from attnsim.cli import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds the ``simulate`` and ``verify`` commands."""
    sim = subparsers.add_parser(
        "simulate",
        help="run the universal simulator U on a random target (or a saved torch module)",
        description="Build U, simulate one attention layer T on an input X, and print T(X), "
        "U's output, the error and U's size.",
    )
    _build_args(sim)
    sim.add_argument(
        "--module",
        help="a state_dict of torch.nn.MultiheadAttention or torch.nn.TransformerEncoderLayer "
        "saved with torch.save(module.state_dict(), FILE); loaded with weights_only=True",
    )
    sim.add_argument("--heads", type=int, default=1, help="heads of the saved module")
    sim.add_argument(
        "--norm-first", action="store_true", help="the saved encoder layer is pre-norm"
    )
    sim.add_argument(
        "--activation",
        choices=["relu", "gelu"],
        default="relu",
        help="the saved encoder layer's activation",
    )
    sim.add_argument("--n", type=int, default=None, help="rows of X (default: max-n)")
    sim.add_argument("--causal", action="store_true", help="apply a causal mask")
    sim.set_defaults(func=_simulate)

    ver = subparsers.add_parser(
        "verify",
        help="check U against plain-torch attention on many random targets",
        description="Simulate N random targets (sizes up to the build, causal or not, "
        "biases, |scores| up to 50) and report the max and median relative error.",
    )
    _build_args(ver)
    ver.add_argument("--targets", type=int, default=100)
    ver.set_defaults(func=_verify)


def _build_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-n", type=int, default=4, help="largest n (rows of X) U serves")
    p.add_argument("--max-d", type=int, default=4, help="largest width d U serves")
    p.add_argument("--max-heads", type=int, default=1, help="most heads U serves")
    p.add_argument("--attention", choices=["hard", "softmax"], default="hard")
    p.add_argument("--float32", action="store_true", help="build U in float32")
    p.add_argument(
        "--maps",
        choices=["native", "relu"],
        default="native",
        help="exp and 1/x as native units (exact) or ReLU units (certified bounds)",
    )
    p.add_argument(
        "--logit-bound",
        type=float,
        default=50.0,
        help="maps=relu: the largest |score| U accepts (default 50)",
    )
    p.add_argument(
        "--map-tolerance",
        type=float,
        default=1e-6,
        help="maps=relu: relative error of each ReLU map (default 1e-6)",
    )
    p.add_argument(
        "--layer",
        choices=["attention", "encoder"],
        default="attention",
        help="simulate attention layers or full encoder layers",
    )
    p.add_argument(
        "--max-ff",
        type=int,
        default=None,
        help="largest feed-forward width (encoder; default 2 * max-d)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print JSON")


def _build(args):
    from attnsim.simulator import universal

    for name in ("max_n", "max_d", "max_heads"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1")
    return universal.build(
        args.max_n,
        args.max_d,
        args.max_heads,
        attention=args.attention,
        layer=args.layer,
        max_ff=args.max_ff if args.layer == "encoder" else None,
        maps=args.maps,
        logit_bound=args.logit_bound,
        map_tolerance=args.map_tolerance,
        dtype=torch.float32 if args.float32 else torch.float64,
    )


def _simulate(args) -> int:
    from attnsim.simulator import spec
    from attnsim.simulator.reference import reference
    from attnsim.simulator.verify import relative_error

    if args.module:
        module = _load_module(args)
        if isinstance(module, torch.nn.TransformerEncoderLayer):
            args.layer = "encoder"
            if args.max_ff is None:
                args.max_ff = module.linear1.out_features
        target = spec.from_torch(module, causal=args.causal)
    elif args.layer == "encoder":
        target = spec.random_encoder_layer(
            args.max_heads,
            args.max_d,
            args.max_ff or 2 * args.max_d,
            seed=args.seed,
            causal=args.causal,
        )
    else:
        target = spec.random_attention(
            args.max_heads, args.max_d, seed=args.seed, causal=args.causal
        )
    try:
        U = _build(args)
    except (ValueError, NotImplementedError) as exc:
        raise UserError(str(exc)) from None
    n = args.n or args.max_n
    d = target.d_model
    X = torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(args.seed))
    try:
        got = U.simulate(target, X)
    except ValueError as exc:
        raise UserError(str(exc)) from None
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
                    "report": report.__dict__,
                }
            )
        )
        return 0
    console = rich.console.Console()
    console.print(f"T(X) (plain torch):\n{want}")
    console.print(f"U(<T, X>):\n{got}")
    console.print(f"max relative error: {err:.3e}")
    if bound is not None:
        within = bool(((got - want).abs() <= bound).all())
        console.print(
            f"max |error| {float((got - want).abs().max()):.3e}, bound "
            f"{float(bound.max()):.3e} (every entry within its bound: {within})"
        )
    for label, b in U.map_bounds.items():
        console.print(f"  ReLU map {label}: certified relative error <= {b:.3g}")
    console.print(str(report))
    return 0


def _load_module(args) -> torch.nn.Module:
    """Rebuilds a module from a saved state_dict (weights only: no code is unpickled)."""
    try:
        state = torch.load(args.module, weights_only=True)
    except Exception as exc:  # a user's file: say what went wrong, no traceback
        raise UserError(f"cannot load {args.module!r}: {exc}") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UserError(
            f"{args.module!r} does not hold a state_dict; save one with "
            "torch.save(module.state_dict(), FILE)"
        )
    try:
        if "in_proj_weight" in state:
            d = state["in_proj_weight"].shape[1]
            module = torch.nn.MultiheadAttention(
                d, args.heads, bias="in_proj_bias" in state, dtype=torch.float64
            )
        elif "self_attn.in_proj_weight" in state:
            d = state["self_attn.in_proj_weight"].shape[1]
            module = torch.nn.TransformerEncoderLayer(
                d,
                args.heads,
                dim_feedforward=state["linear1.weight"].shape[0],
                dropout=0.0,
                activation=args.activation,
                norm_first=args.norm_first,
                dtype=torch.float64,
            )
        else:
            raise UserError(
                f"{args.module!r} is not the state_dict of a MultiheadAttention or a "
                "TransformerEncoderLayer (no in_proj_weight)"
            )
        module.load_state_dict({k: v.double() for k, v in state.items()})
    except (RuntimeError, AssertionError, ValueError) as exc:
        raise UserError(f"cannot rebuild the module from {args.module!r}: {exc}") from None
    return module.eval()


def _verify(args) -> int:
    from attnsim.simulator.verify import verify

    if args.targets < 1:
        raise UserError("--targets must be >= 1")
    try:
        U = _build(args)
    except (ValueError, NotImplementedError) as exc:
        raise UserError(str(exc)) from None
    result = verify(U, targets=args.targets, seed=args.seed, progress=not args.json)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        console = rich.console.Console()
        console.print(str(U.report()))
        console.print(
            f"{result.count} targets: max relative error {result.max_error:.3e}, median "
            f"{result.median_error:.3e}, "
            + (f"tolerance {result.tolerance:g}, " if U.maps == "native" else "")
            + f"failures {len(result.failures)}"
        )
        if result.max_bound_ratio is not None:
            console.print(
                f"entrywise bound (U.error_bound): largest relative bound "
                f"{result.max_certified:.3e}, largest |error| / bound {result.max_bound_ratio:.3g}"
                + (" (the criterion for maps=relu)" if U.maps == "relu" else "")
            )
        for label, b in result.map_bounds.items():
            console.print(f"  ReLU map {label}: certified relative error <= {b:.3g}")
        for seed, err in result.failures[:10]:
            console.print(f"  failure: target seed {seed}, error {err:.3e}")
    return 0 if not result.failures else 1


def main(argv):  # for the doctest
    from attnsim.cli import main as cli_main

    return cli_main(argv)
