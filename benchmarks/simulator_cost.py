"""What the universal simulator U costs next to computing the attention layer directly.

For builds with n = d in {2, 4, 8, 16, 32} and one head (and four heads for d in {4, 8, 16}),
the script builds U (timed), simulates one random target of the full size, and runs the same
target directly in torch (``scaled_dot_product_attention`` with the target's projections), in
the same process, one after the other. It records:

- build seconds, simulate seconds (the first call, and the median of warm repeats), wall and
  CPU time (CPU time is less sensitive to other processes on a shared machine);
- the wall-time ratio U / direct (medians), and the FLOP ratio (U's dense forward FLOPs from
  its config, active heads and sequence length; direct attention's FLOPs analytically);
- U's parameters (total and nonzero), d_model, sequence length, layers, heads per layer;
- where a forward pass of U spends its time (per attention and MLP sublayer, from hooks);
- growth exponents in n = d of U's parameters, sequence length, d_model, FLOPs and wall time
  (least squares on log-log, one-head builds).

Goal checked: the n = d = 32 one-head build builds and simulates in under 60 s.

Run: ``python benchmarks/simulator_cost.py`` (writes benchmarks/results/simulator_cost.json;
``--quick`` stops at n = 16).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from _common import Run, write_json

from attnsim.report import simulator_table as st
from attnsim.simulator import spec, universal
from attnsim.simulator.reference import reference
from attnsim.simulator.verify import relative_error

RESULTS = Path(__file__).resolve().parent / "results" / "simulator_cost.json"
ONE_HEAD = (2, 4, 8, 16, 32)
FOUR_HEADS = (4, 8, 16)
GOAL_SECONDS = 60.0
WARM_BUDGET_SECONDS = 12.0  # warm repeats of one build stop at about this much time


def direct_attention(target: spec.AttentionSpec, X: torch.Tensor) -> torch.Tensor:
    """T(X) computed directly: projections, ``scaled_dot_product_attention``, output map."""
    q = torch.einsum("nd,hdk->hnk", X, target.W_Q) + target.b_Q[:, None]
    k = torch.einsum("nd,hdk->hnk", X, target.W_K) + target.b_K[:, None]
    v = torch.einsum("nd,hdk->hnk", X, target.W_V) + target.b_V[:, None]
    z = F.scaled_dot_product_attention(q, k, v, is_causal=target.causal, scale=target.scale)
    return torch.einsum("hnk,hkd->nd", z, target.W_O) + target.b_O


def _clock(fn: Callable[[], object]) -> tuple[float, float, object]:
    """Wall and CPU seconds of one call, and what it returned."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w, time.process_time() - c, out


def time_direct(fn: Callable[[], object], min_seconds: float = 0.05, loops: int = 7) -> float:
    """Median seconds per call over ``loops`` timed loops of enough calls each."""
    fn()
    reps, elapsed = 1, 0.0
    while True:
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            break
        reps *= 4
    samples = []
    for _ in range(loops):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        samples.append((time.perf_counter() - start) / reps)
    return statistics.median(samples)


def sublayer_seconds(
    U: universal.UniversalSimulator, run: Callable[[], object]
) -> tuple[dict, float, float, object]:
    """Seconds in each attention and MLP sublayer during ``run()`` (forward hooks, which cost
    microseconds), the run's wall and CPU seconds, and what it returned."""
    spans: dict[str, float] = {}
    starts: dict[str, float] = {}
    handles = []
    for i, block in enumerate(U.model.model.blocks):
        for part in ("attn", "mlp"):
            name = f"blocks.{i}.{part}"
            module = getattr(block, part)

            def pre(_m, _a, name=name):
                starts[name] = time.perf_counter()

            def post(_m, _a, _o, name=name):
                spans[name] = spans.get(name, 0.0) + time.perf_counter() - starts[name]

            handles.append(module.register_forward_pre_hook(pre))
            handles.append(module.register_forward_hook(post))
    try:
        w, c, out = _clock(run)
    finally:
        for h in handles:
            h.remove()
    spans["other (encode, embed, decode)"] = max(0.0, w - sum(spans.values()))
    return spans, w, c, out


def measure(n: int, d: int, heads: int, repeats: int, seed: int = 0) -> dict:
    """Builds U(n, d, heads), simulates a full-size target, and times the direct path."""
    w0, c0 = time.perf_counter(), time.process_time()
    U = universal.build(n, d, heads)
    build_wall, build_cpu = time.perf_counter() - w0, time.process_time() - c0
    r = U.report()
    X = torch.tensor(np.random.default_rng(seed).standard_normal((n, d)), dtype=torch.float64)
    target = spec.random_attention(heads, d, seed=seed, bias=True)
    target = spec.with_logit_scale(target, X, 10.0)

    # the first call, with per-sublayer timing; then warm repeats
    profile, cold_wall, cold_cpu, got = sublayer_seconds(U, lambda: U.simulate(target, X))
    repeats = min(repeats, int(WARM_BUDGET_SECONDS // max(cold_wall, 1e-9)))
    warm = [_clock(lambda: U.simulate(target, X))[:2] for _ in range(repeats)]
    sim_wall = statistics.median([cold_wall] + [w for w, _ in warm])
    sim_cpu = statistics.median([cold_cpu] + [c for _, c in warm])
    want = direct_attention(target, X)
    # small ops suffer from thread hand-offs on a busy machine: time the direct path with
    # the default threads and with one, and keep the faster (the ratio then favours direct)
    threads = torch.get_num_threads()
    direct_default = time_direct(lambda: direct_attention(target, X))
    torch.set_num_threads(1)
    try:
        direct_one = time_direct(lambda: direct_attention(target, X))
    finally:
        torch.set_num_threads(threads)
    direct_s = min(direct_default, direct_one)

    positions = r.sequence_length + 1
    u_flops = st.forward_flops(U.model, positions)
    d_flops = st.direct_attention_flops(n, d, heads)
    row = {
        "max_n": n,
        "max_d": d,
        "max_heads": heads,
        "build_seconds": build_wall,
        "build_cpu_seconds": build_cpu,
        "simulate_first_seconds": cold_wall,
        "simulate_first_cpu_seconds": cold_cpu,
        "simulate_seconds": sim_wall,
        "simulate_cpu_seconds": sim_cpu,
        "simulate_samples": 1 + len(warm),
        "build_and_first_simulate_seconds": build_wall + cold_wall,
        "direct_seconds": direct_s,
        "direct_seconds_by_threads": {str(threads): direct_default, "1": direct_one},
        "wall_ratio": sim_wall / direct_s,
        "flops_U": u_flops["total"],
        "flops_U_attention": u_flops["attention"],
        "flops_U_mlp": u_flops["mlp"],
        "flops_direct": d_flops,
        "flop_ratio": u_flops["total"] / d_flops,
        "parameters": r.parameters,
        "nonzero_parameters": r.nonzero_parameters,
        "d_model": r.d_model,
        "d_head": r.d_head,
        "d_mlp": r.d_mlp,
        "d_bilinear": r.d_bilinear,
        "d_native": dict(r.d_native),
        "sequence_length": r.sequence_length,
        "layers": r.layers,
        "attention_layers": r.attention_layers,
        "heads_per_layer": list(r.heads_per_layer),
        "error_U_vs_reference": relative_error(got, reference(target, X)),
        "error_direct_vs_reference": relative_error(want, reference(target, X)),
        "forward_profile_seconds": profile,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    return row


def profile_internals(n: int = 16, top: int = 10) -> list[dict]:
    """cProfile of one simulate call of U(n, n, 1): the functions with the most own time."""
    import cProfile
    import pstats

    U = universal.build(n, n, 1)
    X = torch.tensor(np.random.default_rng(0).standard_normal((n, n)), dtype=torch.float64)
    target = spec.random_attention(1, n, seed=0, bias=True)
    profiler = cProfile.Profile()
    profiler.enable()
    U.simulate(target, X)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (cc, nc, tt, ct, callers)
    total = sum(v[2] for v in stats.values())
    rows = sorted(
        (
            {
                "function": f"{Path(f).name}:{line}({name})",
                "own_seconds": v[2],
                "share": v[2] / total,
            }
            for (f, line, name), v in stats.items()
        ),
        key=lambda r: -r["own_seconds"],
    )
    return rows[:top]


def fit_exponent(xs: list[float], ys: list[float]) -> float:
    """The slope of log y against log x by least squares (y ~ x^slope).

    >>> round(fit_exponent([1, 2, 4], [3, 12, 48]), 6)
    2.0
    """
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


EXPONENT_KEYS = (
    "parameters",
    "nonzero_parameters",
    "sequence_length",
    "d_model",
    "flops_U",
    "simulate_seconds",
    "simulate_cpu_seconds",
    "build_seconds",
)


def exponents(rows: list[dict]) -> dict:
    """Growth exponents in n = d (one-head builds): over all sizes and over n >= 8."""
    one = sorted((r for r in rows if r["max_heads"] == 1), key=lambda r: r["max_n"])
    out = {}
    for key in EXPONENT_KEYS:
        entry = {}
        for label, sel in (("all", one), ("n>=8", [r for r in one if r["max_n"] >= 8])):
            if len(sel) >= 2:
                entry[label] = fit_exponent(
                    [r["max_n"] for r in sel], [max(r[key], 1e-12) for r in sel]
                )
        out[key] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="stop at n = d = 16")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args(argv)

    sizes = [(n, 1) for n in ONE_HEAD] + [(n, 4) for n in FOUR_HEADS]
    if args.quick:
        sizes = [(n, h) for n, h in sizes if n <= 16]
    rows = []
    run = Run()
    for n, h in sizes:
        repeats = 4 if n <= 16 else 0
        row = measure(n, n, h, repeats)
        rows.append(row)
        print(
            f"U({n:>2},{n:>2},{h}) build {row['build_seconds']:6.2f} s  simulate "
            f"{row['simulate_seconds']:8.3f} s (first {row['simulate_first_seconds']:.3f} s)  "
            f"direct {row['direct_seconds'] * 1e6:8.1f} us  wall x{row['wall_ratio']:.3g}  "
            f"FLOPs x{row['flop_ratio']:.3g}  params {row['parameters']:,}  "
            f"seq {row['sequence_length']}  err {row['error_U_vs_reference']:.1e}",
            flush=True,
        )
    fits = exponents(rows)
    internals = profile_internals(16)
    goal_row = next((r for r in rows if r["max_n"] == 32 and r["max_heads"] == 1), None)
    goal = {
        "build": [32, 32, 1],
        "limit_seconds": GOAL_SECONDS,
        "measured": goal_row is not None,
    }
    if goal_row is not None:
        total = goal_row["build_and_first_simulate_seconds"]
        goal.update(
            build_seconds=goal_row["build_seconds"],
            simulate_seconds=goal_row["simulate_first_seconds"],
            total_seconds=total,
            total_cpu_seconds=goal_row["build_cpu_seconds"]
            + goal_row["simulate_first_cpu_seconds"],
            met=total < GOAL_SECONDS,
            where_the_time_goes=goal_row["forward_profile_seconds"],
        )
    print("\ngrowth exponents in n = d (one head): " + json.dumps(fits, indent=1))
    print("goal: " + json.dumps(goal))
    write_json(
        args.out,
        {
            "machine": run.machine(),
            "results": rows,
            "exponents": fits,
            "goal": goal,
            "simulate_profile_n16": internals,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
