"""What the feature-major executor buys on short inputs, and what compiling the definition
would give instead.

On inputs of at most ``FUSED_MAX_POSITIONS`` positions the runtime may run a model
feature-major (``attnsim.model.fused``: every head of a layer at once, the stream laid out
by direction), uncompiled ("auto", "fused") or compiled by torch's inductor ("jit"). That is
code beside the plans (``attnsim.model.plans``), and the obvious alternative to it is to hand
the definition itself (``attnsim.model.transformer``) to ``torch.compile``. This script
measures both, per setting, in one process:

- ``plan``: the plan executor, uncompiled;
- ``fused``: the feature-major pass, uncompiled;
- ``auto``: the default executor's choice between the two;
- ``jit``: executor "jit" (the feature-major pass compiled, timed against the plans on its
  first call, the faster kept);
- ``compiled definition``: the definition's embedding and blocks under ``torch.compile``
  (its default mode, the one torch recommends; the input checks are left outside, as the
  runtime does them once), compiled once per setting.

Settings: every tracr library program of ``compare_tracr.PROGRAMS`` at its conformance
setting and at max_seq_len 20 (batch 256, compare_tracr's inputs). The paths are called one
after the other, round after round (about :data:`ROUNDS` times :data:`SECONDS` of calls
each, one thread), and the least time of each is kept; each path's output is checked
against the definition's (the largest difference, relative to the largest output).

Run: ``python benchmarks/executors.py [--quick] [--out PATH]`` (writes
benchmarks/results/executors.json; ``--quick``: hist and count at their conformance setting,
one round).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

# isort: off
import attnsim  # noqa: F401  (before torch: its huge-page setting takes effect)

# isort: on
import torch
from _common import Run, least_in_turn, least_seconds, quick_args, write_json

RESULTS = Path(__file__).resolve().parent / "results" / "executors.json"
LONGER = 20  # besides each program's conformance setting
ROUNDS = 3
SECONDS = 0.4  # per path and round: calls = ROUNDS * SECONDS / one call's time
MIN_CALLS, MAX_CALLS = 10, 300
PATHS = ("plan", "fused", "auto", "jit", "compiled definition")


def settings(quick: bool) -> list[tuple[str, object]]:
    """(label, make) per program and length; ``make()`` gives ``(net, ids, values)``."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import compare_tracr as ct

    from attnsim import library, rasp
    from attnsim.compiler import compile_program

    names = ("hist", "count") if quick else tuple(ct.PROGRAMS)
    out = []
    for name in names:
        found = ct.settings(name, False, True)  # the conformance setting first
        wanted = {found[0][1]} if quick else {found[0][1], LONGER}
        for vocab, n in (s for s in found if s[1] in wanted):
            build = ct.PROGRAMS[name][0]

            def make(name=name, n=n, build=build, vocab=vocab):
                m = compile_program(build(library, rasp, n), vocab=vocab, max_seq_len=n)
                ids, vals = m.encode(ct.inputs(name, vocab, n))
                return m.model, ids, vals

            out.append((f"{name} at {n}", make))
    return out


def compiled_definition(net, n: int):
    """The definition's forward (embedding, then every block) under ``torch.compile``,
    for inputs of ``n`` positions already checked."""

    def forward(ids, vals):
        x = net.embed(ids, vals, n)
        for block in net.blocks:
            x = block(x, None, "", None, 0)
        return x

    torch._dynamo.reset()  # one model's compiled code at a time (no recompile limit hit)
    return torch.compile(forward)


def measure(label: str, make, rounds: int) -> dict:
    """One setting: the least time of each path, the first call's seconds of the compiled
    ones, and each path's largest difference from the definition."""
    from attnsim.model.runtime import Runtime

    net, ids, vals = make()
    n = ids.shape[1]
    with torch.no_grad():
        want = net(ids, vals)
        scale = max(1.0, float(want.abs().max()))
        paths = {p: Runtime(net, p) for p in PATHS[:4]}
        paths[PATHS[4]] = compiled_definition(net, n)
        first, error = {}, {}
        for key, fn in paths.items():
            start = time.perf_counter()
            got = fn(ids, vals)
            first[key] = time.perf_counter() - start
            error[key] = float((got - want).abs().max()) / scale
        one = least_seconds(lambda: paths["jit"](ids, vals), SECONDS / 10)
        calls = min(MAX_CALLS, max(MIN_CALLS, int(rounds * SECONDS / one)))
        best = least_in_turn({k: lambda fn=fn: fn(ids, vals) for k, fn in paths.items()}, calls)
    row = {
        "setting": label,
        "positions": n,
        "dtype": str(want.dtype).replace("torch.", ""),
        "calls": calls,
        "us": {k: v * 1e6 for k, v in best.items()},
        "first_call_s": {k: first[k] for k in ("jit", PATHS[4])},
        "max_relative_error": error,
    }
    kept = paths["jit"].fused.get("fastest", {})
    row["jit_kept"] = "feature-major" if 0 in kept.values() else "plans"
    print(
        f"{label:24s} "
        + "  ".join(f"{k} {row['us'][k]:8.0f} us" for k in PATHS)
        + f"  jit kept {row['jit_kept']}",
        flush=True,
    )
    return row


def summary(rows: list[dict]) -> dict:
    """The ratios that say what the feature-major pass buys: plans / fused (uncompiled),
    plans / auto, and compiled definition / jit, each as least, median and most.

    >>> rows = [{"setting": "a", "us": {"plan": 4.0, "fused": 2.0, "auto": 2.0, "jit": 1.0,
    ...                                 "compiled definition": 5.0}}]
    >>> summary(rows)["compiled definition / jit"]
    {'least': 5.0, 'median': 5.0, 'most': 5.0, 'least_on': 'a'}
    """
    out = {}
    for slow, fast in (("plan", "fused"), ("plan", "auto"), ("compiled definition", "jit")):
        ratios = sorted((r["us"][slow] / r["us"][fast], r["setting"]) for r in rows)
        mid = ratios[len(ratios) // 2][0]
        out[f"{slow} / {fast}"] = {
            "least": ratios[0][0],
            "median": mid,
            "most": ratios[-1][0],
            "least_on": ratios[0][1],
        }
    return out


def markdown(result: dict) -> str:
    """The table for docs/benchmarks.md."""
    lines = [
        "| setting | " + " | ".join(f"{p} (us)" for p in PATHS) + " | jit kept | "
        "plan / fused | compiled definition / jit |",
        "|---|" + "---:|" * len(PATHS) + "---|---:|---:|",
    ]
    for r in result["rows"]:
        us = r["us"]
        cells = [f"{us[p]:.0f}" for p in PATHS]
        ratios = f"{us['plan'] / us['fused']:.2f}x | {us[PATHS[4]] / us['jit']:.2f}x"
        lines.append(
            f"| {r['setting']} | " + " | ".join(cells) + f" | {r['jit_kept']} | {ratios} |"
        )
    lines.append("")
    for name, s in result["summary"].items():
        lines.append(
            f"- **{name}**: {s['least']:.2f}x to {s['most']:.2f}x, median {s['median']:.2f}x "
            f"(least on {s['least_on']})."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = quick_args(__doc__, RESULTS, "hist and count, one round", argv)
    torch.set_num_threads(1)
    run = Run()
    rounds = 1 if args.quick else ROUNDS
    rows = []
    start = time.perf_counter()
    for label, make in settings(args.quick):
        rows.append(measure(label, make, rounds))
    result = {
        "machine": run.machine(),
        "quick": args.quick,
        "rounds": rounds,
        "torch": torch.__version__,
        "paths": list(PATHS),
        "rows": rows,
        "summary": summary(rows),
        "seconds": time.perf_counter() - start,
    }
    write_json(args.out, result)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
