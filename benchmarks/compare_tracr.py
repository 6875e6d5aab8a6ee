"""attnsim's compiler side by side with tracr on tracr's own library programs.

For every program of ``tracr.compiler.lib`` (and the same program from ``attnsim.library``),
at the conformance settings (vocabulary and max_seq_len of tracr's test cases) and at
max_seq_len 10, 20 and 40 (``--full``: hist, sort and frac_prevs also at 80 and 160), both
compilers build a model and we measure, in the same run and on the same inputs:

- compile time: cold (the program's first compile in its worker process, see below) and
  warm (compiled again);
- d_model, layers (attention + MLP blocks), parameters;
- forward throughput at batch 256 (sequences per second, one CPU thread each);
- error against the interpreter (attnsim's ``rasp.evaluate``) on the same 256 random
  full-length inputs: the fraction of wrong positions for categorical outputs, the largest
  absolute error for numerical ones.

Worker processes do the measuring, ``--jobs`` of them at a time, one CPU thread each: one
process compiles every program with attnsim (cold = the program's first compile there), and
each program gets a fresh process for tracr (cold = the first compile in that process, JAX's
start-up included; the tracr workers do not import torch). A tracr worker may use
``--cpu-limit`` CPU seconds; tracr's compile time grows steeply with max_seq_len for some
programs, and the lengths it had not finished by then are recorded as such. Without tracr
(the ``bench`` extra: tracr-pypi, jax, dm-haiku) the script says so and reports attnsim's
numbers alone. Writes benchmarks/results/compare_tracr.json and compare_tracr.md.

Usage: python benchmarks/compare_tracr.py [--programs hist,sort] [--quick | --full] [--jobs 2]
    [--cpu-limit 75]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import resource
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BATCH = 256
TRACR_SLOW_S = 20.0  # skip tracr at the --full lengths once one compile took this long
LONG = (80, 160)  # --full only; attnsim-only lengths unless tracr stays fast
THROUGHPUT_S = 0.1  # timed forward passes per model: at least this many seconds
NO_TRACR = "tracr is not installed (pip install -e '.[bench]')"

# name -> (builder(lib, rasp, max_seq_len), conformance vocab, conformance max_seq_len,
#          numerical output, input kind)
PROGRAMS: dict[str, tuple] = {
    "length": (lambda lib, rasp, n: lib.make_length(), ["a", "b", "c", "d"], 5, False, "any"),
    "reverse": (lambda lib, rasp, n: lib.make_reverse(rasp.tokens), list("abcd"), 5, False, "any"),
    "hist": (lambda lib, rasp, n: lib.make_hist(), list("abcd"), 5, False, "any"),
    "sort_unique": (
        lambda lib, rasp, n: lib.make_sort_unique(rasp.tokens, rasp.tokens),
        [1, 2, 3, 4, 5],
        5,
        False,
        "distinct",
    ),
    "sort": (
        lambda lib, rasp, n: lib.make_sort(rasp.tokens, rasp.tokens, max_seq_len=n, min_key=1),
        [1, 2, 3, 4, 5],
        5,
        False,
        "any",
    ),
    "sort_freq": (lambda lib, rasp, n: lib.make_sort_freq(n), [1, 2, 3, 4, 5], 5, False, "any"),
    "frac_prevs": (
        lambda lib, rasp, n: lib.make_frac_prevs(rasp.tokens == "x"),
        ["x", "y", "z"],
        5,
        True,
        "any",
    ),
    "pair_balance": (
        lambda lib, rasp, n: lib.make_pair_balance(rasp.tokens, "(", ")"),
        ["(", ")", "a"],
        10,
        True,
        "any",
    ),
    "shuffle_dyck": (
        lambda lib, rasp, n: lib.make_shuffle_dyck(["()", "{}"]),
        ["(", ")", "{", "}", "x"],
        10,
        False,
        "any",
    ),
    "shift_by": (lambda lib, rasp, n: lib.shift_by(2, rasp.tokens), list("abc"), 5, False, "any"),
    "detect_pattern": (
        lambda lib, rasp, n: lib.detect_pattern(rasp.tokens, "abc"),
        list("abc"),
        5,
        False,
        "any",
    ),
    "count_less_freq": (
        lambda lib, rasp, n: lib.make_count_less_freq(2),
        list("abcd"),
        5,
        False,
        "any",
    ),
    "count": (lambda lib, rasp, n: lib.make_count(rasp.tokens, "a"), list("abc"), 5, False, "any"),
    "nary_sequencemap": (
        lambda lib, rasp, n: lib.make_nary_sequencemap(
            lambda x, y, z: x + y - z, rasp.tokens, rasp.tokens, rasp.indices
        ),
        [1, 2, 3],
        5,
        False,
        "any",
    ),
}
LONG_PROGRAMS = {"hist", "sort", "frac_prevs"}
# the slowest workers start first, so that two jobs finish at about the same time
SLOW_FIRST = ("shuffle_dyck", "sort_freq", "reverse", "sort", "detect_pattern", "nary_sequencemap")


def settings(name: str, quick: bool, full: bool = False) -> list[tuple[list, int]]:
    """(vocab, max_seq_len) pairs for a program: the conformance setting, then 10, 20, 40...

    >>> [n for _, n in settings("hist", False)], [n for _, n in settings("pair_balance", True)]
    ([5, 10, 20, 40], [10, 20])
    """
    _, vocab, conf_len, _, kind = PROGRAMS[name]
    lengths = [conf_len] + [n for n in (10, 20, 40) if n != conf_len]
    if name in LONG_PROGRAMS and full and not quick:
        lengths += list(LONG)
    if quick:
        lengths = lengths[:2]
    out = []
    for n in lengths:
        v = list(range(1, n + 1)) if kind == "distinct" and n > len(vocab) else vocab
        out.append((v, n))
    return out


def draw(rng: random.Random, vocab: list, n: int, kind: str) -> list:
    return rng.sample(vocab, n) if kind == "distinct" else [rng.choice(vocab) for _ in range(n)]


def error(got: list[list], expected: list[list], numerical: bool) -> float:
    """Wrong-position fraction (categorical) or max absolute error (numerical); None ignored."""
    pairs = [(g, e) for gr, er in zip(got, expected) for g, e in zip(gr, er) if e is not None]
    if numerical:
        return max((abs(float(g) - float(e)) for g, e in pairs), default=0.0)
    return sum(g != e for g, e in pairs) / max(1, len(pairs))


def timed_throughput(fn, min_seconds: float = THROUGHPUT_S) -> float:
    """Calls ``fn`` (one batch) until ``min_seconds`` pass; returns sequences per second."""
    fn()  # warm up
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return BATCH * calls / elapsed


# -- the workers: attnsim (every program, one process) and tracr (one program, fresh process) --


def inputs(name: str, vocab: list, n: int) -> list[list]:
    """The setting's random full-length inputs: the same in both workers.

    One batch serves the error and the throughput measurement (tracr's jitted forward
    compiles once per input shape).
    """
    rng = random.Random(n)
    return [draw(rng, vocab, n, PROGRAMS[name][4]) for _ in range(BATCH)]


def attnsim_worker(names: list[str], quick: bool, full: bool) -> None:
    """Measures attnsim on every setting of every program; prints one JSON line each."""
    import torch

    torch.set_num_threads(1)
    from attnsim import library as a_lib
    from attnsim import rasp as a_rasp
    from attnsim.compiler import compile_program

    for name in names:
        build, _, _, numerical, _ = PROGRAMS[name]
        for i, (vocab, n) in enumerate(settings(name, quick, full)):
            big = inputs(name, vocab, n)
            program = build(a_lib, a_rasp, n)
            expected = a_rasp.evaluate(program, big)
            row: dict[str, Any] = {"program": name, "max_seq_len": n, "vocab_size": len(vocab)}
            row["setting"] = "conformance" if i == 0 else "sweep"
            start = time.perf_counter()
            try:
                model = compile_program(program, vocab=vocab, max_seq_len=n)
            except NotImplementedError as exc:  # too large a table, say: record why and go on
                row["attnsim"] = {"failed": str(exc).splitlines()[-1].strip(" -")[:200]}
                print(json.dumps(row), flush=True)
                continue
            cold = time.perf_counter() - start
            start = time.perf_counter()
            model = compile_program(build(a_lib, a_rasp, n), vocab=vocab, max_seq_len=n)
            warm = time.perf_counter() - start
            report = model.report()
            ids, vals = model.encode(big)
            row["attnsim"] = {
                "compile_cold_s": cold if i == 0 else None,
                "compile_warm_s": warm,
                "d_model": report.d_model,
                "layers": report.layers,
                "parameters": report.parameters,
                "throughput_seq_s": timed_throughput(
                    lambda m=model, i=ids, v=vals: m.forward(i, v)
                ),
                "error": error(model.run(big), expected, numerical),
            }
            print(json.dumps(row), flush=True)


def tracr_worker(name: str, quick: bool, full: bool) -> None:
    """Measures tracr on every setting of one program; prints one JSON line each."""
    from attnsim import library as a_lib  # the interpreter and library need no torch
    from attnsim import rasp as a_rasp

    tracr = _import_tracr()
    build = PROGRAMS[name][0]
    tracr_fast = True
    for i, (vocab, n) in enumerate(settings(name, quick, full)):
        if n in LONG and not tracr_fast:
            t = {"skipped": f"tracr took over {TRACR_SLOW_S:.0f} s at a shorter length"}
        else:
            big = inputs(name, vocab, n)
            expected = a_rasp.evaluate(build(a_lib, a_rasp, n), big)
            t = _run_tracr(tracr, name, vocab, n, big, expected, i == 0)
            t["worker_cpu_s"] = time.process_time()  # so far, of the --cpu-limit budget
            tracr_fast = tracr_fast and t.get("compile_warm_s", 0) <= TRACR_SLOW_S
        print(json.dumps({"program": name, "max_seq_len": n, "tracr": t}), flush=True)


def _import_tracr():
    if importlib.util.find_spec("tracr") is None:
        return None
    os.environ.setdefault(
        "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    )
    import jax
    from tracr.compiler import compiling, lib
    from tracr.rasp import rasp

    return {"jax": jax, "compiling": compiling, "lib": lib, "rasp": rasp}


def _run_tracr(t, name, vocab, n, big, expected, first) -> dict:
    build, _, _, numerical, _ = PROGRAMS[name]
    jax, compiling, lib, rasp = t["jax"], t["compiling"], t["lib"], t["rasp"]

    def compile_once():
        return compiling.compile_rasp_to_model(
            build(lib, rasp, n), vocab=set(vocab), max_seq_len=n, compiler_bos="BOS"
        )

    try:
        start = time.perf_counter()
        model = compile_once()
        cold = time.perf_counter() - start
        start = time.perf_counter()
        model = compile_once()
        warm = time.perf_counter() - start
    except Exception as exc:  # tracr refuses some programs: record why
        return {"failed": f"{type(exc).__name__}: {str(exc)[:200]}"}
    forward = jax.jit(model.forward)

    def run(batch):
        ids = jax.numpy.array([model.input_encoder.encode(["BOS", *r]) for r in batch])
        out = forward(model.params, ids).unembedded_output
        rows = []
        for r in out.tolist():
            dec = model.output_encoder.decode(r) if model.output_encoder else r
            rows.append(list(dec)[1:])
        return rows

    got = run(big)
    ids = jax.numpy.array([model.input_encoder.encode(["BOS", *r]) for r in big])
    leaves = jax.tree_util.tree_leaves(model.params)
    return {
        "compile_cold_s": cold if first else None,
        "compile_warm_s": warm,
        "d_model": len(model.residual_labels),
        "layers": model.model_config.num_layers,
        "parameters": int(sum(x.size for x in leaves)),
        "throughput_seq_s": timed_throughput(
            lambda: forward(model.params, ids).unembedded_output.block_until_ready()
        ),
        "error": error(got, expected, numerical),
    }


# -- the driver -------------------------------------------------------------------------------


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def markdown(rows: list[dict], tracr_note: str) -> str:
    def fmt(x, spec=".3g"):
        return "-" if x is None else format(x, spec)

    lines = [
        "# attnsim vs tracr: tracr's library programs",
        "",
        tracr_note,
        "",
        "Ratios are attnsim / tracr, measured in the same run. Error: wrong-position fraction"
        " (categorical) or max absolute error (numerical) against the interpreter. Throughput:"
        f" sequences per second at batch {BATCH}, one CPU thread each.",
        "",
        "| program | L | compile cold s (a / t) | compile warm s (a / t) | warm ratio | d_model"
        " (a / t) | layers (a / t) | params (a / t) | params ratio | throughput ratio |"
        " error attnsim | error tracr |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        a, t = r["attnsim"], r.get("tracr", {})
        if "failed" in a:
            lines.append(f"| {r['program']} | {r['max_seq_len']} | attnsim: {a['failed']} |")
            continue
        ok = "error" in t
        tr = t if ok else {}
        err_t = fmt(tr.get("error")) if ok else t.get("skipped") or t.get("failed", "-")[:60]
        lines.append(
            f"| {r['program']} | {r['max_seq_len']} "
            f"| {fmt(a['compile_cold_s'])} / {fmt(tr.get('compile_cold_s'))} "
            f"| {fmt(a['compile_warm_s'])} / {fmt(tr.get('compile_warm_s'))} "
            f"| {fmt(ratio(a['compile_warm_s'], tr.get('compile_warm_s')))} "
            f"| {a['d_model']} / {fmt(tr.get('d_model'), 'd')} "
            f"| {a['layers']} / {fmt(tr.get('layers'), 'd')} "
            f"| {a['parameters']} / {fmt(tr.get('parameters'), 'd')} "
            f"| {fmt(ratio(a['parameters'], tr.get('parameters')))} "
            f"| {fmt(ratio(a['throughput_seq_s'], tr.get('throughput_seq_s')))} "
            f"| {fmt(a['error'])} | {err_t} |"
        )
    return "\n".join(lines) + "\n"


def run_worker(job: str, names: list[str], args: argparse.Namespace) -> tuple[list[dict], str]:
    """Runs one worker (``attnsim`` or ``tracr``) in a fresh process; its JSON lines, and why it
    stopped early ("" if it finished)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", job]
    cmd += ["--programs", ",".join(names)]
    cmd += ["--quick"] if args.quick else []
    cmd += ["--full"] if args.full else []
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    limit = None
    if job == "tracr" and args.cpu_limit > 0:
        cpu = int(args.cpu_limit)

        def limit():
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))  # SIGXCPU stops it

    why = ""
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=args.wall_limit,
            env=env,
            preexec_fn=limit,
        )
        out, stderr = proc.stdout, proc.stderr
        if proc.returncode == -signal.SIGXCPU:
            why = f"not finished within the {args.cpu_limit:.0f} CPU s given to each tracr worker"
        elif proc.returncode:
            why = f"the {job} worker exited with status {proc.returncode}"
            print(f"{job} {','.join(names)}: {why}\n{stderr[-2000:]}", flush=True)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        why = f"not finished: the {job} worker was stopped after {args.wall_limit:.0f} s"
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")], why


def merge(names: list[str], args, attnsim: tuple, tracr: dict[str, tuple]) -> list[dict]:
    """One row per setting of every program: attnsim's and tracr's measurements side by side.

    ``attnsim`` and each ``tracr[name]`` are what ``run_worker`` returned; a setting a worker
    did not report gets the reason it stopped.
    """
    parts: dict[tuple[str, int], dict] = {}
    for part in attnsim[0] + [p for lines, _ in tracr.values() for p in lines]:
        parts.setdefault((part["program"], part["max_seq_len"]), {}).update(part)
    rows = []
    for name in names:
        for i, (vocab, n) in enumerate(settings(name, args.quick, args.full)):
            row = {
                "program": name,
                "max_seq_len": n,
                "vocab_size": len(vocab),
                "setting": "conformance" if i == 0 else "sweep",
                **parts.get((name, n), {}),
            }
            row.setdefault("attnsim", {"failed": attnsim[1] or "no result"})
            why = tracr[name][1] if name in tracr else NO_TRACR
            row.setdefault("tracr", {"skipped": why or "no result"})
            rows.append(row)
    return rows


def print_rows(rows: list[dict]) -> None:
    """One line per setting: warm compile seconds and error of each compiler."""
    for r in rows:
        name, n, a, t = r["program"], r["max_seq_len"], r["attnsim"], r["tracr"]
        if "failed" in a:
            print(f"{name:18s} L={n:<4d} attnsim: {a['failed']}", flush=True)
            continue
        tracr = (
            f"{t['compile_warm_s']:.3f} s err {t['error']:.2g}"
            if "error" in t
            else t.get("skipped") or t.get("failed", "")[:80]
        )
        print(
            f"{name:18s} L={n:<4d} attnsim {a['compile_warm_s']:.3f} s err {a['error']:.2g}"
            f" | tracr {tracr}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", default=",".join(PROGRAMS), help="comma-separated names")
    lengths = parser.add_mutually_exclusive_group()
    lengths.add_argument("--quick", action="store_true", help="two lengths per program")
    lengths.add_argument("--full", action="store_true", help=f"also lengths {LONG} where offered")
    parser.add_argument(
        "--jobs", type=int, default=min(2, os.cpu_count() or 1), help="workers at a time"
    )
    parser.add_argument(
        "--cpu-limit", type=float, default=75.0, help="CPU seconds per tracr worker (0: none)"
    )
    parser.add_argument(
        "--wall-limit", type=float, default=600.0, help="wall seconds per worker, a safety net"
    )
    parser.add_argument("--worker", choices=["attnsim", "tracr"], help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    names = args.programs.split(",")
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown:
        parser.error(f"unknown programs {unknown}; expected some of {', '.join(PROGRAMS)}")
    if args.worker:
        if args.worker == "attnsim":
            attnsim_worker(names, args.quick, args.full)
        else:
            tracr_worker(names[0], args.quick, args.full)
        sys.stdout.flush()
        os._exit(0)  # JAX's thread pools can hold up interpreter shutdown
    has_tracr = importlib.util.find_spec("tracr") is not None
    note = (
        "tracr: installed; both compilers measured."
        if has_tracr
        else "tracr is not installed here (pip install -e '.[bench]'): attnsim's numbers only."
    )
    print(note, flush=True)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        attnsim = pool.submit(run_worker, "attnsim", names, args)
        order = sorted(names, key=lambda n: SLOW_FIRST.index(n) if n in SLOW_FIRST else 99)
        futures = {n: pool.submit(run_worker, "tracr", [n], args) for n in order if has_tracr}
        attnsim_parts = attnsim.result()
        tracr_parts = {n: f.result() for n, f in futures.items()}
    rows = merge(names, args, attnsim_parts, tracr_parts)
    print_rows(rows)
    summary = {
        "tracr": has_tracr,
        "seconds": round(time.perf_counter() - start, 1),
        "batch": BATCH,
        "full": args.full,
        "quick": args.quick,
        "jobs": args.jobs,
        "cpu_limit_s": args.cpu_limit,
        "programs": len(names),
        "settings": len(rows),
        "tracr_measured": sum("error" in r["tracr"] for r in rows),
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compare_tracr.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.out / "compare_tracr.md").write_text(markdown(rows, note))
    print(
        f"{summary['tracr_measured']} of {len(rows)} settings measured with both compilers; wrote"
        f" {args.out / 'compare_tracr.json'} and compare_tracr.md in {summary['seconds']} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
