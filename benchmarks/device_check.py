"""Accuracy and speed on a device: compiled programs and U run on the device by each
executor, against the interpreter, the CPU executors and the attention's definition.

On a device other than the CPU the default executor ("auto") runs a model's definition
(``Transformer.forward``: every head over ``[query, key]``); the plan, feature-major and
compiled executors run there when asked for, allocating on the model's device and dtype.
This script moves each model with ``.to(device)`` and checks, on random inputs and for each
executor:

- library programs: the decoded outputs against the interpreter's, and the final residual
  stream against the CPU plan executor's (largest difference);
- U: ``simulate`` on a random target against the attention's definition
  (``simulator.reference.attention``, float64 on the CPU);

and times a batch on the device by each executor against the CPU plan executor in the
same run.

Run: ``python benchmarks/device_check.py [--device cuda] [--programs hist,reverse]``
(default: cuda when available, else cpu with the device passed explicitly; every program;
writes benchmarks/results/device_check.json).
The docs report device figures only from a run on a GPU.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

# isort: off
import attnsim  # noqa: F401  (before torch: its huge-page setting takes effect)

# isort: on
import numpy as np
import torch
from _common import Run, write_json

from attnsim import compile_program, library, rasp, simulator
from attnsim.simulator import reference, spec

RESULTS = Path(__file__).resolve().parent / "results" / "device_check.json"
PROGRAMS = {
    "reverse": (lambda: library.make_reverse(rasp.tokens), "abc"),
    "hist": (library.make_hist, "abc"),
    "sort_unique": (lambda: library.make_sort_unique(rasp.tokens, -rasp.indices), "abc"),
    "frac_prevs": (lambda: rasp.numerical(library.make_frac_prevs(rasp.tokens == "a")), "ab"),
    "pair_balance": (lambda: library.make_pair_balance(rasp.tokens, "(", ")"), "()"),
}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _seconds(fn, device: torch.device, repeats: int = 5) -> float:
    fn()  # warm
    out = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        out.append(time.perf_counter() - start)
    return statistics.median(out)


# the executors run on the device: the definition ("auto" off the CPU) and the others
EXECUTORS = ("dense", "plan", "fused", "jit")
U_EXECUTORS = ("dense", "plan")  # (U's inputs are longer than the feature-major ones)


def check_program(name: str, device: torch.device, length: int, batch: int) -> dict:
    make, vocab = PROGRAMS[name]
    program = make()
    m = compile_program(program, vocab=vocab, max_seq_len=length)
    rng = random.Random(0)
    xs = [[rng.choice(vocab) for _ in range(length)] for _ in range(batch)]
    want = [rasp.evaluate(program, x) for x in xs]
    cpu_out = m.run(xs)
    ids, vals = m.encode(xs)
    with torch.no_grad():
        cpu_stream = m(ids, vals)
    cpu_seconds = _seconds(lambda: m(ids, vals), torch.device("cpu"))
    m.model.to(device)
    runs = {}
    for executor in EXECUTORS:
        m.executor = executor
        got = m.run(xs)
        with torch.no_grad():
            stream = m(ids, vals)
        runs[executor] = {
            "outputs_equal_interpreter": got == want,
            "max_stream_difference_vs_cpu_plan": float((stream.cpu() - cpu_stream).abs().max()),
            "device_seconds": _seconds(lambda: m(ids, vals), device),
        }
    return {
        "program": name,
        "length": length,
        "batch": batch,
        "device": str(stream.device),
        **runs["dense"],  # the definition, what "auto" runs off the CPU
        "cpu_outputs_equal_interpreter": cpu_out == want,
        "cpu_plan_seconds": cpu_seconds,
        "executors": runs,
    }


def check_u(device: torch.device, n: int, d: int) -> dict:
    U = simulator.build(n, d, 1, storage="dense")
    X = torch.tensor(np.random.default_rng(0).standard_normal((n, d)), dtype=torch.float64)
    target = spec.random_attention(1, d, seed=0, bias=True)
    want = reference.attention(target, X)  # the definition, in float64 on the CPU
    cpu_seconds = _seconds(lambda: U.simulate(target, X), torch.device("cpu"), repeats=3)
    cpu = U.simulate(target, X)
    U.model.model.to(device)
    runs = {}
    for executor in U_EXECUTORS:
        U.model.executor = executor
        got = U.simulate(target, X)
        runs[executor] = {
            "max_error_vs_reference": float((got - want).abs().max() / (1 + want.abs().max())),
            "max_difference_vs_cpu": float((got - cpu).abs().max()),
            "device_seconds": _seconds(lambda: U.simulate(target, X), device, repeats=3),
        }
    return {
        "n": n,
        "d": d,
        "device": str(U.model.model.W_E.device),
        **runs["dense"],
        "cpu_plan_seconds": cpu_seconds,
        "executors": runs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="a torch device (default: cuda if any)")
    parser.add_argument("--length", type=int, default=10, help="input length of the programs")
    parser.add_argument("--batch", type=int, default=64, help="sequences per batch")
    parser.add_argument(
        "--programs",
        default=",".join(PROGRAMS),
        help=f"comma-separated programs to check (default: all of {', '.join(PROGRAMS)})",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    name = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
        torch.zeros(1, device=device)
    except (RuntimeError, AssertionError) as exc:
        print(f"device {name!r} is not available here ({exc})")
        return 2
    if device.type == "cpu":
        print(
            "no GPU here: a smoke run on cpu with the device passed explicitly, every "
            "executor on the device side as on another device"
        )
    names = [p.strip() for p in args.programs.split(",") if p.strip()]
    unknown = [p for p in names if p not in PROGRAMS]
    if unknown or not names:
        print(
            f"--programs: {', '.join(unknown) or 'none given'}; choose from {', '.join(PROGRAMS)}"
        )
        return 2
    run = Run()
    programs = [check_program(p, device, args.length, args.batch) for p in names]
    for r in programs:
        for executor, e in r["executors"].items():
            ok = e["outputs_equal_interpreter"]
            print(
                f"{r['program']:>13} on {r['device']} ({executor}): outputs "
                f"{'equal' if ok else 'DIFFER'}, stream vs cpu plan "
                f"{e['max_stream_difference_vs_cpu_plan']:.1e}, {e['device_seconds'] * 1e3:.2f} "
                f"ms (cpu plan {r['cpu_plan_seconds'] * 1e3:.2f} ms)"
            )
    u = check_u(device, 4, 4)
    for executor, e in u["executors"].items():
        print(
            f"U(4, 4, 1) on {u['device']} ({executor}): error "
            f"{e['max_error_vs_reference']:.1e}, {e['device_seconds'] * 1e3:.1f} ms "
            f"(cpu plan {u['cpu_plan_seconds'] * 1e3:.1f} ms)"
        )
    write_json(args.out, {"machine": run.machine(), "programs": programs, "u": u})
    bad = [
        f"{r['program']} ({executor})"
        for r in programs
        for executor, e in r["executors"].items()
        if not e["outputs_equal_interpreter"]
    ]
    wrong_u = any(e["max_error_vs_reference"] > 1e-9 for e in u["executors"].values())
    return 1 if bad or wrong_u else 0


if __name__ == "__main__":
    raise SystemExit(main())
