"""What the universal simulator U costs next to computing the attention layer directly.

For builds with n = d in {2, 4, 8, 16, 32, 64} and one head (and four heads for d in
{4, 8, 16}), the script builds U (timed; the build includes U's execution plan), simulates
one random target of the full size with each executor, and runs the same target directly in
torch (``scaled_dot_product_attention`` with the target's projections), in the same process,
one after the other, on one CPU thread. The executors: "plan" (the default: heads whose
pattern only the length decides run as gathers and sparse sums, see ``attnsim.model.plans``)
and "dense" (every head over [query, key]; not run at n = 64, where one dense pass takes
minutes). It records:

- build seconds (and the plan's share), simulate seconds per executor (the first call, and
  the median of warm repeats), wall and CPU time;
- the wall-time ratio U / direct (medians) per executor, and FLOPs per executor (dense: from
  the config, active heads and sequence length; plan: counted from the plan) against direct
  attention's FLOPs;
- the peak extra resident memory while simulating (sampled every 2 ms) per executor;
- U's parameters (total and nonzero), d_model, sequence length, layers, heads per layer;
- where a forward pass spends its time (per attention and MLP sublayer, from hooks);
- growth exponents in n = d of parameters, sequence length, d_model, and of FLOPs, time and
  memory for each executor (least squares on log-log, one-head builds).

Every size is measured in both sequence layouts ("scalar": the paper's one number per
position; "vector": one vector per position, the default). Goals checked per layout: U(32,
32, 1) simulates one target within 2,000x direct attention (plan executor, float64 error at
most 1e-9), and U(64, 64, 1) builds and simulates within 60 s.

Run: ``python benchmarks/simulator_cost.py`` (writes benchmarks/results/simulator_cost.json;
``--quick`` stops at n = 16).
"""

from __future__ import annotations

import json
import resource
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

# isort: off
import attnsim  # noqa: F401  (before torch: its huge-page setting takes effect)

# isort: on
import numpy as np
import torch
import torch.nn.functional as F
from _common import (
    Run,
    fit_exponent,
    machine_rates,
    quick_args,
    saved_and_loaded,
    stream_floor,
    write_json,
)

from attnsim.model import plan_costs
from attnsim.report import simulator_table as st
from attnsim.simulator import spec, universal
from attnsim.simulator.reference import reference
from attnsim.simulator.verify import relative_error

RESULTS = Path(__file__).resolve().parent / "results" / "simulator_cost.json"
ONE_HEAD = (2, 4, 8, 16, 32, 64)
FOUR_HEADS = (4, 8, 16)
LAYOUTS = ("scalar", "vector")
DENSE_UP_TO = 32  # the dense executor is timed up to this n = d
GOAL_SECONDS = 60.0  # U(64, 64, 1): build and first simulate
GOAL_RATIO = 2000.0  # U(32, 32, 1), plan executor: simulate / direct attention
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
    """Seconds in each attention and MLP sublayer during ``run()``, the run's wall and CPU
    seconds, and what it returned. The planned pass times its own sublayers
    (``Runtime.profile``); the definition (executor "dense") is timed by forward hooks,
    which cost microseconds (on the planned pass they would make it run the definition)."""
    rt = U.model.runtime
    spans: dict[str, float] = {}
    starts: dict[str, float] = {}
    handles = []
    if rt.executor != "dense":
        rt.profile = spans
    else:
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
        rt.profile = None
        for h in handles:
            h.remove()
    spans["other (encode, embed, decode)"] = max(0.0, w - sum(spans.values()))
    return spans, w, c, out


class PeakMemory:
    """The peak resident memory above the level at entry, sampled every 2 ms in a thread
    (a forward pass's working memory: its tensors are freed when it returns)."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()

    @staticmethod
    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()

    def __enter__(self) -> PeakMemory:
        self.base = self.rss()
        self.peak = self.base

        def sample() -> None:
            while not self._stop.is_set():
                self.peak = max(self.peak, self.rss())
                time.sleep(0.002)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())

    @property
    def extra_mb(self) -> float:
        return (self.peak - self.base) / 2**20


def simulate_timed(U, target, X, repeats: int) -> dict:
    """One executor: the first call (with per-sublayer timing and peak memory), then warm
    repeats within the time budget; ``seconds`` is the median of the warm calls (the first
    call, which builds what the runtime keeps, where there is no time for another)."""
    with PeakMemory() as mem:
        profile, cold_wall, cold_cpu, got = sublayer_seconds(U, lambda: U.simulate(target, X))
    repeats = min(repeats, int(WARM_BUDGET_SECONDS // max(cold_wall, 1e-9)))
    warm = [_clock(lambda: U.simulate(target, X))[:2] for _ in range(repeats)]
    return {
        "first_seconds": cold_wall,
        "first_cpu_seconds": cold_cpu,
        "seconds": statistics.median([w for w, _ in warm] or [cold_wall]),
        "cpu_seconds": statistics.median([c for _, c in warm] or [cold_cpu]),
        "samples": 1 + len(warm),
        "peak_extra_mb": mem.extra_mb,
        "profile_seconds": profile,
        "error": relative_error(got, reference(target, X)),
    }


def measure(
    n: int,
    d: int,
    heads: int,
    repeats: int,
    seed: int = 0,
    layout: str = "vector",
    rates: dict | None = None,
) -> dict:
    """Builds U(n, d, heads) in ``layout``, simulates a full-size target with each executor,
    and times the direct path; with ``rates`` (``_common.machine_rates``), also the floor of
    the plan executor's pass (``_common.stream_floor``: the stream's bytes, the plan's
    attention FLOPs and the MLPs' non-zero weights, at this machine's rates)."""
    w0, c0 = time.perf_counter(), time.process_time()
    U = universal.build(n, d, heads, layout=layout, storage="dense")  # both executors
    build_wall, build_cpu = time.perf_counter() - w0, time.process_time() - c0
    r = U.report()
    positions = r.sequence_length + 1
    net, rt = U.model.model, U.model.runtime
    rt.forget()  # the plan again, timed on its own (build made it once)
    plan_seconds = _clock(lambda: rt.plans(positions))[0]
    X = torch.tensor(np.random.default_rng(seed).standard_normal((n, d)), dtype=torch.float64)
    target = spec.random_attention(heads, d, seed=seed, bias=True)
    target = spec.with_logit_scale(target, X, 10.0)

    runs = {"plan": simulate_timed(U, target, X, repeats)}
    if n <= DENSE_UP_TO:
        U.model.executor = "dense"
        try:
            runs["dense"] = simulate_timed(U, target, X, repeats)
        finally:
            U.model.executor = "plan"
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

    dense_flops = st.forward_flops(U.model, positions)
    plan_flops = plan_costs.forward_flops(rt, positions)["attention"] + dense_flops["mlp"]
    d_flops = st.direct_attention_flops(n, d, heads)
    plan_summary = U.model.plan_summary()
    floor = None
    if rates is not None:
        attn = plan_costs.forward_flops(rt, positions)["attention"]
        floor = stream_floor(net, positions, attn, rates)
        floor["simulate_over_floor"] = runs["plan"]["seconds"] / floor["floor_seconds"]
    row = {
        "layout": layout,
        "token_width": U.model.config.token_width or 1,
        "max_n": n,
        "max_d": d,
        "max_heads": heads,
        "build_seconds": build_wall,
        "build_cpu_seconds": build_cpu,
        "plan_seconds": plan_seconds,
        "planned_heads": sum(map(len, plan_summary["static_heads"])),
        "candidate_heads": sum(map(len, plan_summary["partial_heads"])),
        "executors": {
            name: {**run, "wall_ratio": run["seconds"] / direct_s} for name, run in runs.items()
        },
        "simulate_first_seconds": runs["plan"]["first_seconds"],
        "simulate_seconds": runs["plan"]["seconds"],
        "build_and_first_simulate_seconds": build_wall + runs["plan"]["first_seconds"],
        "direct_seconds": direct_s,
        "direct_seconds_by_threads": {str(threads): direct_default, "1": direct_one},
        "wall_ratio": runs["plan"]["seconds"] / direct_s,
        "wall_ratio_dense": runs["dense"]["seconds"] / direct_s if "dense" in runs else None,
        "simulate_seconds_dense": runs["dense"]["seconds"] if "dense" in runs else None,
        "flops_U": dense_flops["total"],
        "flops_U_attention": dense_flops["attention"],
        "flops_U_mlp": dense_flops["mlp"],
        "flops_U_plan": plan_flops,
        "flops_direct": d_flops,
        "flop_ratio": dense_flops["total"] / d_flops,
        "flop_ratio_plan": plan_flops / d_flops,
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
        "error_U_vs_reference": runs["plan"]["error"],
        "error_direct_vs_reference": relative_error(want, reference(target, X)),
        "forward_profile_seconds": runs["plan"]["profile_seconds"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "floor": floor,
        # U built once: saved, loaded back (digests checked), and the loaded U's output
        **saved_and_loaded(U, target, X),
    }
    return row


def profile_internals(n: int = 16, top: int = 10) -> list[dict]:
    """cProfile of one simulate call of U(n, n, 1): the functions with the most own time."""
    import cProfile
    import pstats

    U = universal.build(n, n, 1, storage="dense")
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


EXPONENT_KEYS = (
    "parameters",
    "nonzero_parameters",
    "sequence_length",
    "d_model",
    "flops_U",
    "flops_U_plan",
    "build_seconds",
)
EXECUTOR_KEYS = ("seconds", "cpu_seconds", "peak_extra_mb")


def exponents(rows: list[dict]) -> dict:
    """Growth exponents in n = d (one-head builds): over all sizes and over n >= 8; for each
    executor, of its time and memory over the sizes it ran."""
    one = sorted((r for r in rows if r["max_heads"] == 1), key=lambda r: r["max_n"])
    return _exponents(one)


def _exponents(one: list[dict]) -> dict:

    def fits(sel: list[dict], value) -> dict:
        entry = {}
        for label, part in (("all", sel), ("n>=8", [r for r in sel if r["max_n"] >= 8])):
            if len(part) >= 2:
                entry[label] = fit_exponent(
                    [r["max_n"] for r in part], [max(value(r), 1e-12) for r in part]
                )
        return entry

    out = {key: fits(one, lambda r, k=key: r[k]) for key in EXPONENT_KEYS}
    for name in ("plan", "dense"):
        sel = [r for r in one if name in r["executors"]]
        for key in EXECUTOR_KEYS:
            out[f"{name} executor: {key}"] = fits(
                sel, lambda r, k=key, e=name: r["executors"][e][k]
            )
    return out


def main(argv: list[str] | None = None) -> int:
    args = quick_args(__doc__, RESULTS, "stop at n = d = 16", argv)

    # one CPU thread for U and for the direct path alike: on a shared two-core machine a
    # second thread waits on the other core's work, and timings swing by several times
    torch.set_num_threads(1)
    sizes = [(n, 1) for n in ONE_HEAD] + [(n, 4) for n in FOUR_HEADS]
    if args.quick:
        sizes = [(n, h) for n, h in sizes if n <= 16]
    rows = []
    run = Run()
    rates = machine_rates()
    print(
        f"this machine, one thread: {rates['bytes_per_second'] / 1e9:.1f} GB/s copied, "
        f"{rates['flops_per_second'] / 1e9:.1f} GFLOP/s (float64)",
        flush=True,
    )
    for layout in LAYOUTS:
        for n, h in sizes:
            repeats = 9  # warm calls, at most (WARM_BUDGET_SECONDS)
            row = measure(n, n, h, repeats, layout=layout, rates=rates)
            rows.append(row)
            _print_row(row)
    fits = {lay: exponents([r for r in rows if r["layout"] == lay]) for lay in LAYOUTS}
    internals = profile_internals(16)
    goals = {lay: _goals([r for r in rows if r["layout"] == lay]) for lay in LAYOUTS}
    print("\ngrowth exponents in n = d (one head): " + json.dumps(fits, indent=1))
    print("goals: " + json.dumps(goals))
    write_json(
        args.out,
        {
            "machine": run.machine(),
            "rates": rates,
            "results": rows,
            "exponents": fits,
            "goal": goals,
            "simulate_profile_n16": internals,
        },
    )
    return 0


def _print_row(row: dict) -> None:
    n, h = row["max_n"], row["max_heads"]
    dense = row["executors"].get("dense")
    dense_text = f"{dense['seconds']:8.3f} s (x{dense['wall_ratio']:.3g})" if dense else "-"
    print(
        f"{row['layout']:>6} U({n:>2},{n:>2},{h}) build {row['build_seconds']:6.2f} s  plan "
        f"{row['simulate_seconds']:8.4f} s (x{row['wall_ratio']:.3g})  dense "
        + dense_text
        + f"  direct {row['direct_seconds'] * 1e6:8.1f} us  seq {row['sequence_length']}  "
        f"err {row['error_U_vs_reference']:.1e}",
        flush=True,
    )


def _goals(rows: list[dict]) -> dict:
    """The goals of one layout's rows: U(32, 32, 1) within GOAL_RATIO of direct attention,
    U(64, 64, 1) built and simulated within GOAL_SECONDS."""
    by_size = {(r["max_n"], r["max_heads"]): r for r in rows}
    goal = {"ratio": {"build": [32, 32, 1], "limit": GOAL_RATIO, "measured": False}}
    goal["time"] = {"build": [64, 64, 1], "limit_seconds": GOAL_SECONDS, "measured": False}
    if (32, 1) in by_size:
        r = by_size[(32, 1)]
        goal["ratio"].update(
            measured=True,
            ratio=r["wall_ratio"],
            ratio_dense=r["wall_ratio_dense"],
            error=r["error_U_vs_reference"],
            met=r["wall_ratio"] <= GOAL_RATIO and r["error_U_vs_reference"] <= 1e-9,
            where_the_time_goes=r["forward_profile_seconds"],
        )
    if (64, 1) in by_size:
        r = by_size[(64, 1)]
        total = r["build_and_first_simulate_seconds"]
        goal["time"].update(
            measured=True,
            build_seconds=r["build_seconds"],
            simulate_seconds=r["simulate_first_seconds"],
            total_seconds=total,
            met=total < GOAL_SECONDS,
            error=r["error_U_vs_reference"],
        )
    return goal


if __name__ == "__main__":
    raise SystemExit(main())
