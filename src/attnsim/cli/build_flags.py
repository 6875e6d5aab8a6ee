"""The flags that say which U to build, shared by ``attnsim simulate`` and ``attnsim verify``.

>>> import argparse
>>> p = argparse.ArgumentParser()
>>> add_build_args(p, "verify")
>>> args = fill_defaults(p.parse_args(["--layout", "scalar", "--n-layers", "2"]))
>>> args.layout, args.n_layers, args.maps, args.attention
('scalar', 2, 'native', 'hard')
"""

from __future__ import annotations

import argparse

DEFAULT_MAX_N = 4
DEFAULT_MAX_D = 4
# the build's defaults as --help shows them; the build itself takes them from
# attnsim.simulator.config.SimulatorConfig (importing it here would import torch for --help;
# tests/test_simulator_config.py keeps these equal to its defaults)
DEFAULT_LOGIT_BOUND = 50.0  # maps=relu: the largest |score| U accepts
DEFAULT_MAP_TOLERANCE = 1e-6  # maps=relu: the relative error of each ReLU map
DEFAULT_VALUE_BOUND = 20.0  # maps=relu, encoder: the scale of the values the ReLU maps read


# the build flags' defaults (None in the parser: a U loaded with --u tells a flag given from
# one left out), filled by fill_defaults where U is built
FLAG_DEFAULTS = {"attention": "hard", "maps": "native", "layout": "vector", "n_layers": 1}

# `attnsim verify --layer KIND`: one kind of decoder layer (sampling_decoder.DECODER_KINDS)
DECODER_TARGET_KINDS = ("llama", "rmsnorm", "no_norm", "glu", "rotary", "linear", "linformer")


def add_build_args(p: argparse.ArgumentParser, command: str = "simulate") -> None:
    """Adds the build flags (sizes, layer kind, maps, bounds, layout) to ``p``.

    Args:
        p: the parser of ``command``.
        command: ``"simulate"`` (takes a ``--module``, the layer kinds attention, encoder and
            decoder) or ``"verify"`` (random targets only; also one kind of decoder layer).
    """
    if command not in ("simulate", "verify"):
        raise ValueError(f"command must be 'simulate' or 'verify', got {command!r}")
    module = command == "simulate"
    p.add_argument(
        "--max-n",
        type=int,
        default=None,
        help=f"largest n (rows of X) U serves (default {DEFAULT_MAX_N})",
    )
    p.add_argument(
        "--max-d",
        type=int,
        default=None,
        help=f"largest width d U serves (default {DEFAULT_MAX_D}"
        + (", or the --module's d)" if module else ")"),
    )
    p.add_argument(
        "--max-heads",
        type=int,
        default=None,
        help="most heads U serves (default 1" + (", or the --module's heads)" if module else ")"),
    )
    p.add_argument(
        "--attention",
        choices=["hard", "softmax"],
        default=None,
        help="U's own attention: average-hard or softmax (default: hard)",
    )
    p.add_argument("--float32", action="store_true", help="build U in float32")
    p.add_argument(
        "--maps",
        choices=["native", "relu"],
        default=None,
        help="exp and 1/x as native units (exact) or ReLU units (certified bounds) "
        "(default: native)",
    )
    p.add_argument(
        "--logit-bound",
        type=float,
        default=None,
        help=f"--maps relu: the largest |score| U accepts (default {DEFAULT_LOGIT_BOUND:g})",
    )
    p.add_argument(
        "--map-tolerance",
        type=float,
        default=None,
        help=f"--maps relu: relative error of each ReLU map (default {DEFAULT_MAP_TOLERANCE:g})",
    )
    p.add_argument(
        "--value-bound",
        type=float,
        default=None,
        help="--maps relu --layer encoder: the scale of the values U's ReLU maps read "
        f"(LayerNorm inputs, feed-forward pre-activations; default {DEFAULT_VALUE_BOUND:g})",
    )
    p.add_argument(
        "--score-bound",
        type=float,
        default=None,
        help="the largest |attention score| of a target that U accepts (default 1e4 in "
        "float64, 1e3 with --float32, at most what the build's precision allows)",
    )
    kinds = ["attention", "encoder", "decoder"] + (list(DECODER_TARGET_KINDS) if not module else [])
    p.add_argument(
        "--layer",
        choices=kinds,
        default=None,
        metavar="KIND",
        help=f"{', '.join(kinds)}: simulate attention layers, full encoder layers, or "
        "today's layers too (decoder: RMSNorm, gated feed-forwards, rotary embeddings, "
        "linear attention, Linformer; "
        + (
            "a random decoder target is LLaMA-shaped) (default attention, or the --module's "
            "kind); targets of one decoder kind (glu, rotary, ...): attnsim verify --layer KIND"
            if module
            else "targets of every kind) (default attention); one kind of decoder layer "
            "builds a decoder U and draws targets of that kind only"
        ),
    )
    p.add_argument(
        "--max-ff",
        type=int,
        default=None,
        help="--layer encoder or decoder: largest feed-forward width (default 2 * max-d"
        + (", or the module's)" if module else ")"),
    )
    p.add_argument(
        "--layout",
        choices=["vector", "scalar"],
        default=None,
        help="U's input sequence: one vector per position holding the target's raw "
        "parameters (vector), or the paper's one number per position with the attention "
        "merged (scalar) (default: vector)",
    )
    p.add_argument(
        "--n-layers",
        type=int,
        default=None,
        help="--layer encoder --layout vector: U for a stack of this many encoder layers "
        "(torch.nn.TransformerEncoder), one pass for the whole stack (default 1)",
    )
    p.add_argument(
        "--u",
        metavar="DIR",
        default=None,
        help="use the U saved in DIR (by --save-u or UniversalSimulator.save) instead of "
        "building one: loaded in seconds, every weight checked against its digest; the "
        "build flags, where given, must agree with it",
    )
    p.add_argument(
        "--save-u",
        metavar="DIR",
        default=None,
        help="save the U this command builds into DIR, for --u: a new or empty folder, or "
        "one holding a saved U, which is replaced",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random target and X")
    p.add_argument("--json", action="store_true", help="print JSON")


def fill_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Fills the build flags left out with their defaults (:data:`FLAG_DEFAULTS`); returns
    ``args``."""
    for name, value in FLAG_DEFAULTS.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    return args
