"""What each kind of plan buys: the plan executor timed with and without each kind.

The plan executor (``attnsim.model.plans``) runs a head by one of several kinds of plan
(fixed keys, constants, token tables, certified candidates, one-sided heads, classes of
rows) and an MLP's one-number discretisers as step tables (``attnsim.model.plan_steps``);
each kind is code to keep. This script measures, for each kind that can be left out
(:data:`attnsim.model.plans.OPTIONAL_KINDS`), how much slower the same models run without
it: a runtime built with ``without={kind}`` runs the heads of that kind by the next way
that applies (dense, in the end), with the same outputs to rounding (checked here against
the definition, and by ``tests/test_plan_kinds.py``).

Settings: tracr's library programs at length 40 (``compare_tracr.PROGRAMS``, batch 256),
``hist`` and ``count`` at 160 (:data:`LONG`), and the universal simulator U(16, 16, 1)
scalar, U(32, 32, 1) vector and U(32, 32, 1) scalar on one target. The runtimes (all
kinds, and each with one left out) are called one after the other, round after round
(about :data:`ROUNDS` times :data:`SECONDS` of calls each, one thread), and the least time
of each is kept: a disturbance of the machine falls on all of them alike. A second runtime
with every kind (the control) is timed the same way: its ratio to the first is the
resolution of the measurement. A kind "pays" on a setting where leaving it out makes the
pass at least :data:`PAYS` times slower.

Run: ``python benchmarks/plan_kinds.py [--quick] [--out PATH]`` (writes
benchmarks/results/plan_kinds.json; ``--quick``: three programs, U(8) only, one round).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

# isort: off
import attnsim  # noqa: F401  (before torch: its huge-page setting takes effect)

# isort: on
import numpy as np
import torch
from _common import Run, least_in_turn, least_seconds, quick_args, write_json

RESULTS = Path(__file__).resolve().parent / "results" / "plan_kinds.json"
LENGTH = 40
# and two of compare_tracr's long settings, where a discretiser has hundreds of units
LONG = (("hist", 160), ("count", 160))
ROUNDS = 3
PAYS = 1.2  # a kind pays where leaving it out costs at least this factor
SECONDS = 0.5  # per runtime and round: calls = ROUNDS * SECONDS / one call's time
MIN_CALLS, MAX_CALLS = 10, 400
U_SIZES = (("scalar", 16), ("vector", 32), ("scalar", 32))


def tracr_settings(quick: bool) -> list[tuple[str, object]]:
    """(label, make) per library program at :data:`LENGTH` and per setting of :data:`LONG`;
    ``make()`` gives ``(net, ids, values)`` (the compiled model's network and one batch of
    compare_tracr's inputs)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import compare_tracr as ct

    from attnsim import library, rasp
    from attnsim.compiler import compile_program

    names = [(p, LENGTH) for p in ct.PROGRAMS if p != "sort_freq"]  # refused at 40
    names += list(LONG)
    if quick:
        names = [("hist", LENGTH), ("sort_unique", LENGTH), ("count", LENGTH)]
    out = []
    for name, n in names:
        build = ct.PROGRAMS[name][0]
        vocab = [v for v, m in ct.settings(name, False, True) if m == n][0]

        def make(name=name, n=n, build=build, vocab=vocab):
            m = compile_program(build(library, rasp, n), vocab=vocab, max_seq_len=n)
            ids, vals = m.encode(ct.inputs(name, vocab, n))
            return m.model, ids, vals

        out.append((f"{name} at {n}", make))
    return out


def u_settings(quick: bool) -> list[tuple[str, object]]:
    """(label, make) per U size: U's network and the model inputs of one target and X."""
    from attnsim.simulator import spec, universal

    sizes = (("scalar", 8),) if quick else U_SIZES
    out = []
    for layout, n in sizes:

        def make(layout=layout, n=n):
            U = universal.build(n, n, 1, layout=layout, storage="dense")
            X = torch.tensor(np.random.default_rng(0).standard_normal((n, n)))
            target = spec.with_logit_scale(spec.random_attention(1, n, seed=0, bias=True), X, 10.0)
            ids, vals = U.model_inputs(U.encode(target, X)[None])
            return U.model.model, ids, vals

        out.append((f"U({n}, {n}, 1) {layout}", make))
    return out


def measure(label: str, make, kinds: tuple[str, ...], rounds: int) -> dict:
    """One setting: the least time with every kind and with each of ``kinds`` left out,
    and the largest difference from the definition of each pass."""
    from attnsim.model.runtime import Runtime

    net, ids, vals = make()
    with torch.no_grad():
        want = net(ids, vals)
        runtimes = {"all": Runtime(net, "plan")}
        runtimes.update({k: Runtime(net, "plan", without={k}) for k in kinds})
        runtimes["control"] = Runtime(net, "plan")  # all kinds again: the resolution
        worst = {}
        for k, rt in runtimes.items():
            got = rt(ids, vals)  # the plans built, and checked against the definition
            scale = max(1.0, float(want.abs().max()))
            worst[k] = float((got - want).abs().max()) / scale
        one = least_seconds(lambda: runtimes["all"](ids, vals), SECONDS / 10)
        calls = min(MAX_CALLS, max(MIN_CALLS, int(rounds * SECONDS / one)))
        best = least_in_turn({k: lambda rt=rt: rt(ids, vals) for k, rt in runtimes.items()}, calls)
    row = {
        "setting": label,
        "ms": best["all"] * 1e3,
        "calls": calls,
        "without": {k: {"ms": best[k] * 1e3, "ratio": best[k] / best["all"]} for k in kinds},
        "control_ratio": best["control"] / best["all"],
        "max_relative_error": max(worst.values()),
    }
    print(
        f"{label:28s} {row['ms']:9.3f} ms  "
        + "  ".join(f"{k} {row['without'][k]['ratio']:.2f}x" for k in kinds)
        + f"  (control {row['control_ratio']:.2f}x)",
        flush=True,
    )
    return row


def summary(rows: list[dict], kinds: tuple[str, ...]) -> dict:
    """Per kind: the settings where leaving it out costs at least :data:`PAYS` (and the
    most it costs, where).

    >>> rows = [{"setting": "a", "without": {"x": {"ratio": 1.5}}},
    ...         {"setting": "b", "without": {"x": {"ratio": 1.0}}}]
    >>> summary(rows, ("x",))["x"]
    {'pays_on': ['a'], 'most': 1.5, 'most_on': 'a'}
    """
    out = {}
    for k in kinds:
        ratios = [(r["without"][k]["ratio"], r["setting"]) for r in rows]
        top = max(ratios)
        out[k] = {
            "pays_on": [s for x, s in ratios if x >= PAYS],
            "most": top[0],
            "most_on": top[1],
        }
    return out


def markdown(result: dict) -> str:
    """The table for docs/benchmarks.md."""
    kinds = result["kinds"]
    lines = [
        "| setting | all kinds (ms) | "
        + " | ".join(f"without {k}" for k in kinds)
        + " | control |",
        "|---|---:|" + "---:|" * (len(kinds) + 1),
    ]
    for r in result["rows"]:
        cells = [f"{r['without'][k]['ratio']:.2f}x" for k in kinds] + [f"{r['control_ratio']:.2f}x"]
        lines.append(f"| {r['setting']} | {r['ms']:.3g} | " + " | ".join(cells) + " |")
    lines.append("")
    for k, s in result["summary"].items():
        where = ", ".join(s["pays_on"]) or "nowhere"
        lines.append(
            f"- **{k}**: at least {PAYS}x on {len(s['pays_on'])} of {len(result['rows'])} "
            f"settings ({where}); at most {s['most']:.2f}x ({s['most_on']})."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from attnsim.model.plans import OPTIONAL_KINDS

    args = quick_args(__doc__, RESULTS, "three programs, U(8), one round", argv)
    torch.set_num_threads(1)
    run = Run()
    rounds = 1 if args.quick else ROUNDS
    kinds = tuple(OPTIONAL_KINDS)
    rows = []
    start = time.perf_counter()
    for label, make in tracr_settings(args.quick) + u_settings(args.quick):
        rows.append(measure(label, make, kinds, rounds))
    result = {
        "machine": run.machine(),
        "quick": args.quick,
        "rounds": rounds,
        "length": LENGTH,
        "pays": PAYS,
        "kinds": list(kinds),
        "rows": rows,
        "summary": summary(rows, kinds),
        "seconds": time.perf_counter() - start,
    }
    write_json(args.out, result)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
