"""How exact the universal simulator U is, and whether its depth stays constant.

One U built for (n, d, heads) <= (8, 8, 4) simulates random targets (sizes drawn up to the
build, causal or not, biases, each head's largest |score| on its X drawn up to 50) and is
compared with the plain-torch oracle (``simulator.reference``):

- float64, hard attention: goal max relative error <= 1e-9;
- float32, hard attention: goal <= 1e-4;
- float64, softmax attention (U's own heads use softmax): goal <= 1e-9;
- float64, maps="relu" (exp and 1/Z by ReLU units, relative tolerance 1e-6 and 1e-4, logit
  bound 50): goal: every output entry within its certified bound (``U.error_bound``); the
  measured error is recorded next to the per-map bounds.

Then full encoder layers (torch.nn.TransformerEncoderLayer's computation, feed-forward widths up
to 16), native and with ReLU maps (logit bound 50, value bound 20, tolerance 1e-6; the goal for
these is 1,000 times the per-map tolerance, as there is no composite certificate).

Then shifted rows: every row of scores of a target moved by its own amount, anywhere within
U's score bound (1e4 in float64; in float32 the build's limit, 511 for (8, 8, 4)): float64
hard (goal 1e-9), float32 hard (goal 1e-3: a score of size 500 carries a rounding of about
3e-5 into its exponential) and float64 ReLU maps (the certified bound).

Targets per sweep are in ``SWEEPS``: the ``--full`` counts (1,000 for the float64 attention
sweeps and the native encoder) or the default counts (which fit ``make bench``); ``--quick``
runs a tenth of the default.

The relative error of a target is ``max|U - ref| / max|ref|``; outputs that are not finite are
counted apart. Target ``index`` k is the k-th draw of ``verify.random_target`` from
``numpy.random.default_rng(seed)`` with the build's sizes and ``max_logit=50``. Then U is built for
(2, 2, 1), (4, 4, 2), (8, 8, 4) and (16, 16, 4) and its layers are recorded: the depth must
not grow with the build.

Run: ``python benchmarks/simulator_accuracy.py [--full | --quick]`` (writes
benchmarks/results/simulator_accuracy.json).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

# isort: off
import attnsim  # noqa: F401  (before torch: its huge-page setting takes effect)

# isort: on
import numpy as np
import torch
from _common import Run, write_json

from attnsim.simulator import universal
from attnsim.simulator.reference import reference, scores
from attnsim.simulator.verify import random_shifted_target, random_target, relative_error

RESULTS = Path(__file__).resolve().parent / "results" / "simulator_accuracy.json"
BUILD = (8, 8, 4)
MAX_FF = 16  # encoder sweeps: feed-forward widths up to 16
DEPTH_BUILDS = ((2, 2, 1), (4, 4, 2), (8, 8, 4), (16, 16, 4))
MAX_LOGIT = 50.0

# (name, layer, attention, dtype, maps tolerance or None for native, targets with --full,
# by default, goal). For attention targets with ReLU maps the goal is the certified entrywise
# bound (|error| / bound <= 1); encoder layers with ReLU maps have no composite certificate,
# and their goal is 1,000 times the per-map tolerance.
SWEEPS = (
    ("float64 hard", "attention", "hard", torch.float64, None, 1000, 100, 1e-9),
    ("float32 hard", "attention", "hard", torch.float32, None, 300, 60, 1e-4),
    ("float64 softmax", "attention", "softmax", torch.float64, None, 100, 40, 1e-9),
    ("float64 relu 1e-6", "attention", "hard", torch.float64, 1e-6, 1000, 40, 1.0),
    ("float64 relu 1e-4", "attention", "hard", torch.float64, 1e-4, 1000, 40, 1.0),
    ("encoder float64", "encoder", "hard", torch.float64, None, 1000, 20, 1e-9),
    ("encoder float64 relu 1e-6", "encoder", "hard", torch.float64, 1e-6, 300, 10, 1e-3),
    ("float64 hard shifted", "attention", "hard", torch.float64, None, 1000, 60, 1e-9),
    ("float32 hard shifted", "attention", "hard", torch.float32, None, 300, 30, 1e-3),
    ("float64 relu 1e-6 shifted", "attention", "hard", torch.float64, 1e-6, 300, 20, 1.0),
)
# sweeps whose every row of scores is shifted by its own amount, anywhere within U's score
# bound (``verify.random_shifted_target``): U subtracts each row's maximum before exp
SHIFTED = {name for name, *_ in SWEEPS if name.endswith(" shifted")}
# the sweeps above run in the paper's scalar layout; the same ones but shifted (whose targets
# come merged, which the vector layout does not read) run in the vector layout too, named
# "vector ..."
SWEEPS += tuple(("vector " + s[0], *s[1:]) for s in SWEEPS if s[0] not in SHIFTED)


def layout_of(name: str) -> str:
    return "vector" if name.startswith("vector ") else "scalar"


def sweep(
    name: str,
    layer: str,
    attention: str,
    dtype: torch.dtype,
    tolerance: float | None,
    count: int,
    goal: float,
    *,
    seed: int,
    batch: int,
) -> dict:
    """Builds U(8, 8, 4) in one mode and compares ``count`` random targets with the oracle."""
    w0 = time.perf_counter()
    ff = MAX_FF if layer == "encoder" else 0
    extra = {"layer": layer, "max_ff": ff or None}
    if tolerance is not None:
        extra.update(maps="relu", logit_bound=MAX_LOGIT, map_tolerance=tolerance)
    U = universal.build(*BUILD, attention=attention, dtype=dtype, layout=layout_of(name), **extra)
    build_s = time.perf_counter() - w0
    relu = tolerance is not None and layer == "attention"  # the entrywise certificate
    ratios: list[float] = []
    certified: list[float] = []
    rng = np.random.default_rng(seed)
    if name in SHIFTED:
        cases = [random_shifted_target(rng, *BUILD, U.score_bound) for _ in range(count)]
    else:
        cases = [random_target(rng, *BUILD, MAX_LOGIT, ff) for _ in range(count)]
    errors: list[float] = []
    kinds: list[tuple[int, int, int, bool]] = []
    start = time.perf_counter()
    non_finite: list[dict] = []
    for k in range(0, count, batch):
        chunk = cases[k : k + batch]
        try:
            outs = U.simulate_batch([(t, X) for t, X, _ in chunk])
        except ValueError:  # a non-finite output somewhere: find it target by target
            outs = [_simulate_one(U, t, X) for t, X, _ in chunk]
        for i, ((t, X, s), got) in enumerate(zip(chunk, outs), start=k):
            want = reference(t, X)
            att = t.attention if layer == "encoder" else t
            kinds.append((X.shape[0], X.shape[1], att.n_heads, att.causal))
            if got is None:
                errors.append(math.inf)
                non_finite.append(
                    {
                        "index": i,
                        "seed": s,
                        "n": X.shape[0],
                        "d": X.shape[1],
                        "heads": att.n_heads,
                        "causal": att.causal,
                        "max_abs_score": float(scores(att, X).abs().max()),
                    }
                )
            else:
                errors.append(relative_error(got, want))
                if layer == "encoder":
                    continue
                bound = U.error_bound(t, X)
                ratios.append(float(((got - want).abs() / bound.clamp(min=1e-300)).max()))
                certified.append(float(bound.max() / want.abs().max().clamp(min=1e-300)))
        done = min(k + batch, count)
        if done % (batch * 8) == 0 or done == count:
            print(
                f"  {name}: {done}/{count} targets, max error so far {_max(errors):.2e}, "
                f"non-finite outputs {len(non_finite)}",
                flush=True,
            )
    seconds = time.perf_counter() - start
    finite = [e if math.isfinite(e) else -1.0 for e in errors]
    worst = int(np.argmax(finite))
    by_heads = {}
    for h in sorted({kd[2] for kd in kinds}):
        sel = [e for e, kd in zip(errors, kinds) if kd[2] == h]
        by_heads[str(h)] = {"targets": len(sel), "max_error": _max(sel)}
    by_causal = {}
    for c in (False, True):
        sel = [e for e, kd in zip(errors, kinds) if kd[3] == c]
        if sel:
            by_causal["causal" if c else "not causal"] = {
                "targets": len(sel),
                "max_error": _max(sel),
            }
    over = ratios if relu else errors
    return {
        "name": name,
        "layout": layout_of(name),
        "build": list(BUILD),
        "layer": layer,
        "max_ff": ff or None,
        "attention": attention,
        "dtype": str(dtype).replace("torch.", ""),
        "maps": "relu" if tolerance is not None else "native",
        "map_tolerance": tolerance,
        "logit_bound": U.logit_bound,
        "map_bounds": U.map_bounds,
        "relu_units": {
            r["label"]: r["units"]
            for r in U.model.report().realisations
            if r.get("level") == "bounded"
        },
        "d_mlp": U.model.config.d_mlp,
        "targets": count,
        "max_logit": MAX_LOGIT,
        "score_bound": U.score_bound,
        "rows_shifted_within": U.score_bound if name in SHIFTED else None,
        "max_error": _max(errors),
        "median_error": statistics.median(errors),
        "p99_error": float(np.quantile([e for e in errors if math.isfinite(e)] or [0.0], 0.99)),
        "max_certified": max(certified) if certified else None,
        "max_bound_ratio": max(ratios) if ratios else None,
        "goal": goal,
        "goal_kind": "|error| / certified bound, entrywise" if relu else "relative error",
        "met": _max(over) <= goal and not non_finite,
        "failures": sum(e > goal for e in over),
        "non_finite": len(non_finite),
        "non_finite_targets": non_finite,
        "worst_target": {
            "index": worst,
            "seed": cases[worst][2],
            "n": kinds[worst][0],
            "d": kinds[worst][1],
            "heads": kinds[worst][2],
            "causal": kinds[worst][3],
            "error": errors[worst],
        },
        "by_heads": by_heads,
        "by_causal": by_causal,
        "build_seconds": build_s,
        "seconds": seconds,
        "targets_per_second": count / seconds,
        "batch": batch,
    }


def _max(errors: list[float]) -> float:
    """The largest finite error (non-finite outputs are counted separately)."""
    finite = [e for e in errors if math.isfinite(e)]
    return max(finite) if finite else 0.0


def _simulate_one(U, target, X):
    """U's output for one target, or None when it is not finite."""
    try:
        return U.simulate(target, X)
    except ValueError as exc:
        if "not finite" not in str(exc):
            raise
        return None


def depth(builds=DEPTH_BUILDS) -> list[dict]:
    """U's layers and widths for each build, in each layout."""
    rows = []
    for layout, (n, d, h) in ((lay, b) for lay in ("scalar", "vector") for b in builds):
        r = universal.build(n, d, h, layout=layout).report()
        rows.append(
            {
                "layout": layout,
                "build": [n, d, h],
                "layers": r.layers,
                "attention_layers": r.attention_layers,
                "heads_per_layer": list(r.heads_per_layer),
                "d_model": r.d_model,
                "parameters": r.parameters,
                "sequence_length": r.sequence_length,
                "build_seconds": r.build_seconds,
            }
        )
        print(f"  U{(n, d, h)}: {r.layers} layers, heads {r.heads_per_layer}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the default targets")
    parser.add_argument(
        "--full", action="store_true", help="1,000 targets per float64 sweep (about an hour)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=32, help="targets per forward pass")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="SWEEP",
        help="rerun only these sweeps (e.g. 'float64 softmax') and replace them in the JSON",
    )
    args = parser.parse_args(argv)

    run = Run()
    sweeps = []
    for name, layer, attention, dtype, tolerance, full, default, goal in SWEEPS:
        if args.only and name not in args.only:
            continue
        count = full if args.full else max(10, default // 10) if args.quick else default
        row = sweep(
            name,
            layer,
            attention,
            dtype,
            tolerance,
            count,
            goal,
            seed=args.seed,
            batch=args.batch,
        )
        sweeps.append(row)
        bound = (
            f", max |error|/bound {row['max_bound_ratio']:.3g}, per-map bounds {row['map_bounds']}"
            if row["max_bound_ratio"] is not None and tolerance is not None
            else f", per-map bounds {row['map_bounds']}"
            if tolerance is not None
            else ""
        )
        print(
            f"{name}: {count} targets, max error {row['max_error']:.2e} (goal "
            f"{row['goal_kind']} <= {goal:g}, {'met' if row['met'] else 'NOT met'}), "
            f"non-finite outputs {row['non_finite']}, median {row['median_error']:.2e}"
            f"{bound}, {row['seconds']:.1f} s",
            flush=True,
        )
    if args.only and args.out.exists():  # keep the other sweeps and the depth table
        old = json.loads(args.out.read_text())
        kept = [r for r in old["sweeps"] if r["name"] not in args.only]
        old["sweeps"] = sorted(
            kept + sweeps, key=lambda r: [n for n, *_ in SWEEPS].index(r["name"])
        )
        old.setdefault("reruns", []).append({"sweeps": args.only, "machine": run.machine()})
        write_json(args.out, old)
        return 0
    depths = depth()
    constant = all(
        len({r["layers"] for r in depths if r["layout"] == lay}) == 1
        for lay in ("scalar", "vector")
    )
    print(f"depth constant across builds: {constant}")
    write_json(
        args.out,
        {
            "machine": run.machine(),
            "sweeps": sweeps,
            "depth": depths,
            "depth_constant": constant,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
