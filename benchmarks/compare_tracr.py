"""attnsim's compiler side by side with tracr on tracr's own library programs.

For every program of ``tracr.compiler.lib`` (and the same program from ``attnsim.library``),
at the conformance settings (vocabulary and max_seq_len of tracr's test cases) and at
max_seq_len 10, 20 and 40 (hist, sort and frac_prevs also at 80 and 160), both compilers
build a model and we measure, in the same run and on the same inputs:

- compile time: cold (the first compile in a fresh process) and warm (compiled again);
- d_model, layers (attention + MLP blocks), parameters;
- forward throughput at batch 256 (sequences per second, one CPU thread each);
- error against the interpreter (attnsim's ``rasp.evaluate``) on the same 256 random
  full-length inputs: the fraction of wrong positions for categorical outputs, the largest
  absolute error for numerical ones.

Each program runs in its own fresh worker process. Without tracr (the ``bench`` extra:
tracr-pypi, jax, dm-haiku) the script says so and reports attnsim's numbers alone.
Writes benchmarks/results/compare_tracr.json and compare_tracr.md.

Usage: python benchmarks/compare_tracr.py [--programs hist,sort] [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BATCH = 256
TRACR_SLOW_S = 20.0  # skip tracr at longer lengths once one compile took this long
LONG = (80, 160)  # attnsim-only lengths unless tracr stays fast

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


def settings(name: str, quick: bool) -> list[tuple[list, int]]:
    """(vocab, max_seq_len) pairs for a program: the conformance setting, then 10, 20, 40..."""
    _, vocab, conf_len, _, kind = PROGRAMS[name]
    lengths = [conf_len] + [n for n in (10, 20, 40) if n != conf_len]
    if name in LONG_PROGRAMS and not quick:
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


def timed_throughput(fn, min_seconds: float = 0.3) -> float:
    """Calls ``fn`` (one batch) until ``min_seconds`` pass; returns sequences per second."""
    fn()  # warm up
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return BATCH * calls / elapsed


# -- the worker: one program, fresh process -----------------------------------------------------


def worker(name: str, quick: bool) -> list[dict]:
    import torch

    torch.set_num_threads(1)
    from attnsim import library as a_lib
    from attnsim import rasp as a_rasp
    from attnsim.compiler import compile_program

    tracr = _import_tracr()
    build, _, _, numerical, kind = PROGRAMS[name]
    rows = []
    tracr_fast = True
    for i, (vocab, n) in enumerate(settings(name, quick)):
        rng = random.Random(n)
        # one batch of full-length inputs serves the error and the throughput measurement
        # (tracr's jitted forward compiles once per input shape)
        big = [draw(rng, vocab, n, kind) for _ in range(BATCH)]
        inputs = [big]
        program = build(a_lib, a_rasp, n)
        expected = [a_rasp.evaluate(program, batch) for batch in inputs]
        row: dict[str, Any] = {"program": name, "max_seq_len": n, "vocab_size": len(vocab)}
        row["setting"] = "conformance" if i == 0 else "sweep"
        # attnsim
        start = time.perf_counter()
        try:
            model = compile_program(program, vocab=vocab, max_seq_len=n)
        except NotImplementedError as exc:  # too large a table, say: record why and go on
            row["attnsim"] = {"failed": str(exc).splitlines()[-1].strip()[:200]}
            row["tracr"] = {"skipped": "attnsim did not compile this setting"}
            rows.append(row)
            print(json.dumps(row), flush=True)
            continue
        cold = time.perf_counter() - start
        start = time.perf_counter()
        model = compile_program(build(a_lib, a_rasp, n), vocab=vocab, max_seq_len=n)
        warm = time.perf_counter() - start
        report = model.report()
        got = [row_ for batch in inputs for row_ in model.run(batch)]
        flat_expected = [r for batch in expected for r in batch]
        ids, vals = model.encode(big)
        row["attnsim"] = {
            "compile_cold_s": cold if i == 0 else None,
            "compile_warm_s": warm,
            "d_model": report.d_model,
            "layers": report.layers,
            "parameters": report.parameters,
            "throughput_seq_s": timed_throughput(lambda m=model, i=ids, v=vals: m.forward(i, v)),
            "error": error(got, flat_expected, numerical),
        }
        # tracr
        if tracr is None:
            row["tracr"] = {"skipped": "tracr is not installed (pip install -e '.[bench]')"}
        elif n in LONG and not tracr_fast:
            row["tracr"] = {"skipped": f"tracr took over {TRACR_SLOW_S:.0f} s at a shorter length"}
        else:
            row["tracr"] = _run_tracr(tracr, name, vocab, n, inputs, flat_expected, big, i == 0)
            if row["tracr"].get("compile_warm_s", 0) > TRACR_SLOW_S:
                tracr_fast = False
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


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


def _run_tracr(t, name, vocab, n, inputs, flat_expected, big, first) -> dict:
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

    got = [r for batch in inputs for r in run(batch)]
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
        "error": error(got, flat_expected, numerical),
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", default=",".join(PROGRAMS), help="comma-separated names")
    parser.add_argument("--quick", action="store_true", help="two lengths per program")
    parser.add_argument("--timeout", type=float, default=75.0, help="seconds per program")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.quick)
        sys.stdout.flush()
        os._exit(0)  # JAX's thread pools can hold up interpreter shutdown
    has_tracr = importlib.util.find_spec("tracr") is not None
    note = (
        "tracr: installed; both compilers measured."
        if has_tracr
        else "tracr is not installed here (pip install -e '.[bench]'): attnsim's numbers only."
    )
    print(note)
    rows: list[dict] = []
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for name in args.programs.split(","):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name]
        cmd += ["--quick"] if args.quick else []
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=args.timeout, env=env
            )
            out = proc.stdout
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            print(f"{name}: stopped after {args.timeout:.0f} s; keeping the finished lengths")
        got = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        if not got:
            print(f"{name}: no result\n{proc.stderr[-2000:]}")
        for r in got:
            t = r["tracr"]
            if "failed" in r["attnsim"]:
                print(f"{name:18s} L={r['max_seq_len']:<4d} attnsim: {r['attnsim']['failed']}")
                continue
            print(
                f"{name:18s} L={r['max_seq_len']:<4d} "
                f"attnsim {r['attnsim']['compile_warm_s']:.3f} s"
                f" err {r['attnsim']['error']:.2g} | tracr "
                + (
                    f"{t['compile_warm_s']:.3f} s err {t['error']:.2g}"
                    if "error" in t
                    else t.get("skipped") or t.get("failed", "")[:80]
                )
            )
        rows.extend(got)
    summary = {
        "tracr": has_tracr,
        "seconds": round(time.perf_counter() - start, 1),
        "batch": BATCH,
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compare_tracr.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.out / "compare_tracr.md").write_text(markdown(rows, note))
    print(f"wrote {args.out / 'compare_tracr.json'} and compare_tracr.md in {summary['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
