"""attnsim's compiler side by side with tracr on tracr's own library programs.

For every program of ``tracr.compiler.lib`` (and the same program from ``attnsim.library``),
at the conformance setting (vocabulary and max_seq_len of tracr's test cases) and at
max_seq_len 10, 20, 40, 80 and 160, both compilers build a model and we measure, in the same
run and on the same inputs:

- compile time: cold (the program's first compile in its worker process, see below) and
  warm (compiled again);
- d_model, layers (attention + MLP blocks), parameters;
- forward throughput at batch 256 (sequences per second, one CPU thread each, of the fastest
  of the timed calls). Each side's timed call returns only the output that is compared:
  tracr's jitted function returns the unembedded output alone (its ``forward`` also returns
  every residual, layer output and attention logit, which XLA then no longer computes), and
  attnsim's ``forward`` returns the output ids or values. attnsim runs with
  ``executor="jit"``, tracr's counterpart: on short inputs its first call compiles the
  feature-major pass (``attnsim.model.fused``) with torch's compiler, times it against the
  plans and keeps the faster (``jit_kept``); there the uncompiled ``"auto"`` is timed too
  (``eager_seq_s``) and the first call's seconds are recorded (``jit_first_call_s``);
  elsewhere both executors run the same uncompiled code;
- error against the interpreter (attnsim's ``rasp.evaluate``) on the same 256 random
  full-length inputs: the fraction of wrong positions for categorical outputs, the largest
  absolute error for numerical ones.

tracr is measured twice per setting. First at its default ``mlp_exactness`` (100), which is
wrong at long lengths: its selector-width and numerical MLPs approximate a step function with
slopes of that size, and the steps get closer as max_seq_len grows. Then at the smallest
``mlp_exactness`` on the ladder 100, 200, 500, ..., 100000 that is correct on the check
inputs (no wrong position; for numerical outputs, a largest absolute error of at most
``NUMERICAL_TOL``, as float32 cannot be exact), searched upwards and stopped at the first
correct rung, with the compile time (warm: every rung is compiled in a process that has
compiled the program already), d_model, parameters and throughput at that setting. A setting
that no rung makes correct is recorded as such, with the error of every rung tried; when the
second rung gives tracr the very same weights as the default, the search stops there
(``mlp_exactness`` does not reach that error: numerical aggregates, for instance).

Lengths by default: the conformance setting and 10, 20, 40 for every program, and 80 and 160
for ``LONG_DEFAULT`` (length, hist, sort_unique, count, frac_prevs, shift_by); ``--full``
adds 80 and 160 for every program, ``--quick`` keeps two settings per program. Once one of a
program's tracr compiles took over ``TRACR_SLOW_S`` seconds, tracr skips its 80 and 160.
The results record how long the run took, with ``--jobs`` and the load average at its start
and end.

Worker processes do the measuring, ``--jobs`` of them at a time, one CPU thread each. They
compile side by side, but a worker times forward passes only while no other worker runs
(a lock file, held shared while a worker works and exclusively while it times:
:func:`work_shared`, :func:`timing_slot`): in a run where both timed at once on a loaded
2-core machine, throughput came out up to 14x lower for either side than measured alone, and
with one side timing while the other compiled (JAX's compiles use more than one thread), up
to 2.2x lower. A timing also waits until a fixed probe workload runs within 20% of its
fastest time in that worker (:func:`steady`): this shared machine has periods, seconds
long, in which everything runs up to twice as slowly; a timing that waited 30 s in vain is
recorded as not steady (``timings_disturbed`` in the results). Each worker times every
forward pass twice, as the setting is measured and again at the worker's end (minutes
apart, :func:`retime`), and the faster round is kept for both sides: a slow period that
outlasts the probe's wait would otherwise decide a ratio. One
process compiles every program with attnsim (cold = the program's first compile there), and
each program gets a fresh process for tracr (cold = the first compile in that process, JAX's
start-up included; the tracr workers do not import torch). A tracr worker may use
``--cpu-limit`` CPU seconds (default 120) for all its settings and searches; tracr's compile
time grows steeply with max_seq_len for some programs, and what a worker had not finished by
then is recorded as such. Without tracr (the ``bench`` extra: tracr-pypi, jax, dm-haiku) the
script says so and reports attnsim's numbers alone. Writes benchmarks/results/compare_tracr.json
and compare_tracr.md.

Usage: python benchmarks/compare_tracr.py [--programs hist,sort] [--quick | --full] [--jobs 2]
    [--cpu-limit 120]
"""

from __future__ import annotations

import argparse
import contextlib
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
TIMING_LOCK = RESULTS / ".timing.lock"  # held by the worker that is timing (not kept in git)
BATCH = 256
TRACR_SLOW_S = 20.0  # skip tracr at 80 and 160 once one of its compiles took this long
LENGTHS = (10, 20, 40)  # every program, beside its conformance setting
LONG = (80, 160)  # LONG_DEFAULT programs by default, every program with --full
LONG_DEFAULT = ("length", "hist", "sort_unique", "count", "frac_prevs", "shift_by")
DEFAULT_EXACTNESS = 100  # tracr's default mlp_exactness
LADDER = (100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)
NUMERICAL_TOL = 1e-4  # a numerical output is correct within this (float32 is never exact)
THROUGHPUT_S = 0.1  # timed forward passes per model: at least this many seconds
# attnsim's executor: "jit" compiles its short-input pass with torch's compiler, as tracr's
# forward is jitted with jax.jit (the uncompiled "auto" is timed beside it, timed_jit)
EXECUTOR = "jit"
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
# the slowest workers start first, so that two jobs finish at about the same time
SLOW_FIRST = ("sort_freq", "shuffle_dyck", "reverse", "sort", "sort_unique", "nary_sequencemap")


def settings(name: str, quick: bool, full: bool = False) -> list[tuple[list, int]]:
    """(vocab, max_seq_len) pairs for a program: the conformance setting, then 10, 20, 40...

    >>> [n for _, n in settings("hist", False)], [n for _, n in settings("pair_balance", True)]
    ([5, 10, 20, 40, 80, 160], [10, 20])
    >>> [n for _, n in settings("reverse", False)], [n for _, n in settings("reverse", False, True)]
    ([5, 10, 20, 40], [5, 10, 20, 40, 80, 160])
    """
    _, vocab, conf_len, _, kind = PROGRAMS[name]
    lengths = [conf_len] + [n for n in LENGTHS if n != conf_len]
    if (full or name in LONG_DEFAULT) and not quick:
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
    """Wrong-position fraction (categorical) or max absolute error (numerical); None ignored.

    >>> error([[1, 2], [3, 4]], [[1, 2], [3, 5]], False), error([[0.5]], [[0.25]], True)
    (0.25, 0.25)
    """
    pairs = [(g, e) for gr, er in zip(got, expected) for g, e in zip(gr, er) if e is not None]
    if numerical:
        return max((abs(float(g) - float(e)) for g, e in pairs), default=0.0)
    return sum(g != e for g, e in pairs) / max(1, len(pairs))


def correct(err: float, numerical: bool) -> bool:
    """Whether an error counts as correct: none wrong, or numerical within ``NUMERICAL_TOL``.

    >>> correct(0.0, False), correct(0.004, False), correct(2e-8, True), correct(5e-3, True)
    (True, False, True, False)
    """
    return err <= NUMERICAL_TOL if numerical else err == 0


_BUSY: list = []  # this worker's open lock file, held shared while it works (see work_shared)


def work_shared() -> None:
    """Marks this worker busy: it holds a shared lock on ``TIMING_LOCK`` from now on except
    while it times (:func:`timing_slot`), so that no other worker times while it compiles.
    (Without ``fcntl``, not a POSIX system: nothing.)"""
    try:
        import fcntl
    except ImportError:
        return
    TIMING_LOCK.parent.mkdir(parents=True, exist_ok=True)
    handle = open(TIMING_LOCK, "a")  # noqa: SIM115  (held for the life of the worker)
    fcntl.flock(handle, fcntl.LOCK_SH)
    _BUSY.append(handle)


@contextlib.contextmanager
def timing_slot():
    """While held, this worker is the only one running: it takes the lock file exclusively,
    which waits until every other worker is timing nothing and has put its work down (each
    holds the lock shared while it works, :func:`work_shared`). A worker never waits while it
    holds the lock, so two cannot wait on each other. Where ``fcntl`` is missing, no lock."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system: the timings may overlap other work
        yield
        return
    if _BUSY:  # shared -> exclusive (Linux drops the shared lock first) and back after
        handle = _BUSY[0]
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_SH)
        return
    TIMING_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(TIMING_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


PROBE_SLOWER = 1.2  # a probe this much slower than the fastest seen: the machine is disturbed
PROBE_WAIT_S = 30.0  # the longest a timing waits for the probe to come back to speed
_PROBE_BEST: list[float] = []  # this worker's fastest probe so far
WAITS: dict = {"seconds": 0.0, "timings": 0, "disturbed": 0, "last_steady": True}  # a worker's


def probe_seconds() -> float:
    """Seconds of a fixed small workload (float64 products of 64 x 64 matrices in a Python
    loop: dispatch and arithmetic, as a forward pass of either side is), the fastest of
    three."""
    import numpy as np

    a = np.full((64, 64), 1.0 / 64)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        b = a
        for _ in range(100):
            b = b @ a
        best = min(best, time.perf_counter() - start)
    return best


def steady() -> bool:
    """Waits (up to ``PROBE_WAIT_S``) until :func:`probe_seconds` is within ``PROBE_SLOWER``
    of the fastest probe this worker has seen: a shared virtual machine has periods, seconds
    long, in which everything runs up to twice as slowly (measured: the same attnsim setting
    at 279 and 481 us per batch in two runs a minute apart, nothing else running), which the
    fastest call of a short timing cannot step around. Both sides wait the same way. Returns
    whether the machine came back to speed (the waits are counted in ``WAITS``)."""
    if not _PROBE_BEST:
        _PROBE_BEST.append(min(probe_seconds() for _ in range(10)))
    start = time.perf_counter()
    while True:
        now = probe_seconds()
        _PROBE_BEST[0] = min(_PROBE_BEST[0], now)
        if now <= PROBE_SLOWER * _PROBE_BEST[0]:
            ok = True
            break
        if time.perf_counter() - start > PROBE_WAIT_S:
            ok = False
            break
        time.sleep(0.5)
    WAITS["seconds"] += time.perf_counter() - start
    WAITS["timings"] += 1
    WAITS["disturbed"] += not ok
    return ok


def timed_throughput(fn, min_seconds: float = THROUGHPUT_S) -> float:
    """Calls ``fn`` (one batch) for ``min_seconds`` (three calls at least) after one warm-up,
    with no other worker running meanwhile (:func:`timing_slot`) and the machine at its
    usual speed (:func:`steady`); returns the sequences per second of the fastest call, the
    one least disturbed by other work on a shared machine."""
    with timing_slot():
        WAITS["last_steady"] = steady()
        fn()  # warm up
        best, total, calls = float("inf"), 0.0, 0
        while total < min_seconds or calls < 3:
            start = time.perf_counter()
            fn()
            elapsed = time.perf_counter() - start
            best, total, calls = min(best, elapsed), total + elapsed, calls + 1
    return BATCH / best


RETIME: list = []  # (program, max_seq_len, side, fn): timed again at the end of the worker


def timed(fn, program: str, n: int, side: str) -> float:
    """:func:`timed_throughput` of ``fn``, kept to be timed again by :func:`retime`."""
    RETIME.append((program, n, side, fn))
    return timed_throughput(fn)


def retime() -> None:
    """Times every forward pass this worker timed once more, at its end, and prints each
    as a ``retime`` line: a setting first timed in one of this shared machine's slow
    periods (seconds long, everything up to twice as slow) gets a second chance minutes
    later; the results keep the faster of the two rounds (:func:`merge`), for both sides."""
    for program, n, side, fn in RETIME:
        tp = timed_throughput(fn)
        line = {"program": program, "max_seq_len": n, "retime": [side, tp, WAITS["last_steady"]]}
        print(json.dumps(line), flush=True)


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
    # isort: off
    import attnsim  # noqa: F401  (before torch: its huge-page setting takes effect)

    # isort: on
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
                "executor": EXECUTOR,
            }
            row["attnsim"].update(timed_jit(model, ids, vals, name, n))
            row["attnsim"]["error"] = error(model.run(big), expected, numerical)
            print(json.dumps(row), flush=True)
    retime()


def timed_jit(model, ids, vals, name: str, n: int) -> dict:
    """attnsim's throughput with ``executor=EXECUTOR`` (its best, as tracr's forward is
    jitted): where that compiles (short inputs: the compiled feature-major pass, measured
    against the plans on the first call, the faster kept), also the seconds of its first
    call (the compile and the measurement), whether torch compiled (``compiled``), which
    path the measurement kept (``jit_kept``) and the uncompiled throughput ("auto",
    ``eager_seq_s``), timed as its own side; elsewhere the two executors run the same code,
    timed once."""
    import torch

    from attnsim.model import fused
    from attnsim.model.runtime import Runtime

    model.executor = EXECUTOR
    rt = model.runtime
    if not fused.measured(rt, ids.shape[1]):
        tp = timed(lambda m=model, i=ids, v=vals: m.forward(i, v), name, n, "attnsim")
        return {"throughput_seq_s": tp, "steady": WAITS["last_steady"], "compiled": False}
    start = time.perf_counter()
    model.forward(ids, vals)  # the compile and the measurement: timed apart
    first = time.perf_counter() - start
    compiled = rt.fused.get("jit") is not False  # False: torch could not compile here
    # which the first call's measurement kept: the (compiled) feature-major pass or the plans
    fastest = rt.fused.get("fastest", {}).get(fused.signature(ids, vals))
    tp = timed(lambda m=model, i=ids, v=vals: m.forward(i, v), name, n, "attnsim")
    got = {"throughput_seq_s": tp, "steady": WAITS["last_steady"], "compiled": compiled}
    got["jit_first_call_s"] = first
    got["jit_kept"] = "feature-major" if fastest == 0 else "plans"
    # a runtime of its own: the timing is repeated at the worker's end (retime)
    eager_rt = Runtime(model.model, "auto")

    def eager(r=eager_rt, i=ids, v=vals):
        with torch.no_grad():  # as CompiledModel.forward calls its runtime
            return r(i, v)

    return {**got, "eager_seq_s": timed(eager, name, n, "attnsim_eager")}


def tracr_worker(name: str, quick: bool, full: bool) -> None:
    """Measures tracr on every setting of one program, at the default mlp_exactness and at the
    smallest correct one; prints JSON lines (one per rung of the search as it goes)."""
    from attnsim import library as a_lib  # the interpreter and library need no torch
    from attnsim import rasp as a_rasp

    tracr = _import_tracr()
    build = PROGRAMS[name][0]
    tracr_fast = True
    for i, (vocab, n) in enumerate(settings(name, quick, full)):
        row: dict[str, Any] = {"program": name, "max_seq_len": n}
        if n in LONG and not tracr_fast:
            why = f"tracr took over {TRACR_SLOW_S:.0f} s to compile at a shorter length"
            print(json.dumps({**row, "tracr": {"skipped": why}}), flush=True)
            continue
        big = inputs(name, vocab, n)
        expected = a_rasp.evaluate(build(a_lib, a_rasp, n), big)
        checker = _Checker(tracr, name, vocab, n, big, expected)
        t = checker.measure(DEFAULT_EXACTNESS, first=i == 0)
        t["worker_cpu_s"] = time.process_time()  # so far, of the --cpu-limit budget
        print(json.dumps({**row, "tracr": t}), flush=True)
        tracr_fast = tracr_fast and t.get("compile_warm_s", 0) <= TRACR_SLOW_S
        if "error" in t:
            exact = checker.search(t)
            exact["worker_cpu_s"] = time.process_time()
            print(json.dumps({**row, "tracr_exact": exact}), flush=True)
    retime()


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


class _Checker:
    """tracr on one setting: compiles at a given mlp_exactness, checks and measures."""

    def __init__(self, t: dict, name: str, vocab: list, n: int, big: list, expected: list):
        self.t, self.name, self.vocab, self.n = t, name, vocab, n
        self.big, self.expected = big, expected
        self.numerical = PROGRAMS[name][3]
        self.model = None  # the last model compiled, and its jitted forward
        self.forward = None

    def compile(self, exactness: int):
        build, compiling = PROGRAMS[self.name][0], self.t["compiling"]
        program = build(self.t["lib"], self.t["rasp"], self.n)
        return compiling.compile_rasp_to_model(
            program,
            vocab=set(self.vocab),
            max_seq_len=self.n,
            compiler_bos="BOS",
            mlp_exactness=exactness,
        )

    def adopt(self, model) -> None:
        """Makes ``model`` current; keeps the jitted forward when only the weights changed
        (same residual space and config: the forward function is then the same one)."""
        old = self.model
        same = (
            old is not None
            and old.residual_labels == model.residual_labels
            and old.model_config == model.model_config
        )
        if not same:
            # jit only what is compared: the unembedded output (XLA then drops the residuals,
            # layer outputs and attention logits that tracr's forward also returns)
            forward = model.forward
            self.forward = self.t["jax"].jit(
                lambda params, ids: forward(params, ids).unembedded_output
            )
        self.model = model
        self.ids = self.t["jax"].numpy.array(
            [model.input_encoder.encode(["BOS", *r]) for r in self.big]
        )

    def error(self) -> float:
        model = self.model
        out = self.forward(model.params, self.ids)
        rows = []
        for r in out.tolist():
            dec = model.output_encoder.decode(r) if model.output_encoder else r
            rows.append(list(dec)[1:])
        return error(rows, self.expected, self.numerical)

    def sizes(self, side: str) -> dict:
        model, forward, ids = self.model, self.forward, self.ids
        leaves = self.t["jax"].tree_util.tree_leaves(model.params)
        return {
            "d_model": len(model.residual_labels),
            "layers": model.model_config.num_layers,
            "parameters": int(sum(x.size for x in leaves)),
            "throughput_seq_s": timed(
                lambda: forward(model.params, ids).block_until_ready(), self.name, self.n, side
            ),
            "steady": WAITS["last_steady"],
        }

    def measure(self, exactness: int, first: bool) -> dict:
        """Cold and warm compile at ``exactness``, sizes, throughput and error."""
        try:
            start = time.perf_counter()
            self.compile(exactness)
            cold = time.perf_counter() - start
            start = time.perf_counter()
            model = self.compile(exactness)
            warm = time.perf_counter() - start
        except Exception as exc:  # tracr refuses some programs: record why
            return {"failed": f"{type(exc).__name__}: {str(exc)[:200]}"}
        self.adopt(model)
        err = self.error()
        return {
            "mlp_exactness": exactness,
            "compile_cold_s": cold if first else None,
            "compile_warm_s": warm,
            **self.sizes("tracr"),
            "error": err,
        }

    def search(self, default: dict) -> dict:
        """The smallest rung of ``LADDER`` that is correct; ``default`` measured the first.

        Each rung tried is printed as it finishes, so that a worker stopped for its CPU limit
        still tells how far it got.
        """
        tried = [[DEFAULT_EXACTNESS, default["error"], default["compile_warm_s"]]]
        if correct(default["error"], self.numerical):
            return {**default, "compile_cold_s": None, "tried": tried}
        weights = self.model.params
        for exactness in LADDER[1:]:
            start = time.perf_counter()
            try:
                model = self.compile(exactness)
            except Exception as exc:
                why = f"{type(exc).__name__} at mlp_exactness {exactness}: {str(exc)[:150]}"
                return {"none_correct_up_to": tried[-1][0], "why": why, "tried": tried}
            seconds = time.perf_counter() - start
            if exactness == LADDER[1] and _same_weights(self.t["jax"], weights, model.params):
                tried.append([exactness, default["error"], seconds])
                why = (
                    f"mlp_exactness {exactness} gives the same weights as {DEFAULT_EXACTNESS}:"
                    " the setting does not reach this error"
                )
                return {"none_correct_up_to": None, "why": why, "tried": tried}
            self.adopt(model)
            err = self.error()
            tried.append([exactness, err, seconds])
            line = {"program": self.name, "max_seq_len": self.n, "tracr_exact_try": tried[-1]}
            print(json.dumps(line), flush=True)
            if correct(err, self.numerical):
                return {
                    "mlp_exactness": exactness,
                    "compile_warm_s": seconds,
                    **self.sizes("tracr_exact"),
                    "error": err,
                    "tried": tried,
                }
        why = f"every rung up to {LADDER[-1]} is wrong on the check inputs"
        return {"none_correct_up_to": LADDER[-1], "why": why, "tried": tried}


def _same_weights(jax, a, b) -> bool:
    import numpy as np

    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(
        x.shape == y.shape and np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb)
    )


# -- the driver -------------------------------------------------------------------------------


def ratio(a, b):
    """``a / b``, or None when either is missing or ``b`` is 0.

    >>> ratio(1.0, 4.0), ratio(None, 2.0), ratio(3.0, 0)
    (0.25, None, None)
    """
    if a is None or b is None or b == 0:
        return None
    return a / b


def exactness_label(x: dict) -> str:
    """What the search found, in a few words.

    >>> exactness_label({"mlp_exactness": 2000, "error": 0.0})
    '2000'
    >>> exactness_label({"none_correct_up_to": 100000, "why": "every rung..."})
    'none correct up to 100000'
    >>> exactness_label({"none_correct_up_to": None, "why": "same weights"})
    'none (same weights)'
    >>> exactness_label({"unfinished": "CPU limit", "tried": [[100, 1.0, 0.1], [200, 0.5, 0.1]]})
    'unfinished: wrong up to 200'
    """
    if "mlp_exactness" in x and "error" in x:
        return str(x["mlp_exactness"])
    if "unfinished" in x:
        tried = x.get("tried") or []
        return f"unfinished: wrong up to {tried[-1][0]}" if tried else "unfinished"
    if "none_correct_up_to" in x:
        if x["none_correct_up_to"] is None:
            return f"none ({x.get('why', '')[:40]})"
        return f"none correct up to {x['none_correct_up_to']}"
    return x.get("skipped") or x.get("failed", "-")


def markdown(rows: list[dict], tracr_note: str) -> str:
    def fmt(x, spec=".3g"):
        return "-" if x is None else format(x, spec)

    lines = [
        "# attnsim vs tracr: tracr's library programs",
        "",
        tracr_note,
        "",
        f"tracr at its default mlp_exactness ({DEFAULT_EXACTNESS}) and at the smallest one on"
        f" the ladder {', '.join(map(str, LADDER))} that is correct on the check inputs"
        f" (numerical outputs: max absolute error at most {NUMERICAL_TOL:g}). Ratios are"
        " attnsim / tracr, measured in the same run. Error: wrong-position fraction"
        " (categorical) or max absolute error (numerical) against the interpreter. Throughput:"
        f" sequences per second at batch {BATCH}, one CPU thread each.",
        "",
        "| program | L | error attnsim | error tracr default | exactness | error tracr there"
        " | compile warm s (a / t default / t there) | d_model (a / t / t) | params (a / t / t)"
        " | throughput seq/s (a / t / t) | warm ratio (default / there) | params ratio"
        " | throughput ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        a, t, x = r["attnsim"], r.get("tracr", {}), r.get("tracr_exact", {})
        if "failed" in a:
            lines.append(f"| {r['program']} | {r['max_seq_len']} | attnsim: {a['failed']} |")
            continue
        t = t if "error" in t else {"why": t.get("skipped") or t.get("failed", "-")}
        found = x if "error" in x and "mlp_exactness" in x else {}

        def three(key, spec=".3g", t=t, found=found, a=a):
            return (
                f"{fmt(a.get(key), spec)} / {fmt(t.get(key), spec)} / {fmt(found.get(key), spec)}"
            )

        def ratios(key, t=t, found=found, a=a):
            return (
                f"{fmt(ratio(a.get(key), t.get(key)))} / {fmt(ratio(a.get(key), found.get(key)))}"
            )

        err_t = fmt(t.get("error")) if "error" in t else t["why"][:60]
        lines.append(
            f"| {r['program']} | {r['max_seq_len']} | {fmt(a['error'])} | {err_t} "
            f"| {exactness_label(x) if x else '-'} | {fmt(found.get('error'))} "
            f"| {three('compile_warm_s')} | {three('d_model', 'd')} | {three('parameters', 'd')} "
            f"| {three('throughput_seq_s', '.0f')} | {ratios('compile_warm_s')} "
            f"| {ratios('parameters')} | {ratios('throughput_seq_s')} |"
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
    did not report gets the reason it stopped, and a search it did not finish the rungs it
    had tried.
    """
    parts: dict[tuple[str, int], dict] = {}
    tries: dict[tuple[str, int], list] = {}
    again: list = []
    for part in attnsim[0] + [p for lines, _ in tracr.values() for p in lines]:
        key = (part["program"], part["max_seq_len"])
        if "retime" in part:
            again.append((key, *part["retime"]))
        elif "tracr_exact_try" in part:
            tries.setdefault(key, []).append(part["tracr_exact_try"])
        else:
            parts.setdefault(key, {}).update(part)
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
            why = (tracr[name][1] if name in tracr else NO_TRACR) or "no result"
            row.setdefault("tracr", {"skipped": why})
            if "tracr_exact" not in row:
                t = row["tracr"]
                if "error" in t:  # measured at the default, stopped during the search
                    first = [DEFAULT_EXACTNESS, t["error"], t["compile_warm_s"]]
                    tried = [first, *tries.get((name, n), [])]
                    row["tracr_exact"] = {"unfinished": why, "tried": tried}
                else:
                    row["tracr_exact"] = {"skipped": t.get("skipped") or t.get("failed")}
            rows.append(row)
    second_rounds(rows, again)
    return rows


def second_rounds(rows: list[dict], again: list) -> None:
    """Applies the workers' second timings (``(key, side, throughput, steady)``, from
    :func:`retime`): each side keeps the faster round, both recorded in
    ``throughput_rounds``. tracr correct at its default mlp_exactness is the same model in
    both columns: a second round of the default applies to both.

    >>> rows = [{"program": "p", "max_seq_len": 5, "attnsim": {"throughput_seq_s": 2.0},
    ...          "tracr": {"throughput_seq_s": 1.0, "mlp_exactness": 100},
    ...          "tracr_exact": {"throughput_seq_s": 1.0, "mlp_exactness": 100}}]
    >>> second_rounds(rows, [(("p", 5), "attnsim", 1.5, True), (("p", 5), "tracr", 3.0, True)])
    >>> [rows[0][k]["throughput_seq_s"] for k in ("attnsim", "tracr", "tracr_exact")]
    [2.0, 3.0, 3.0]
    >>> rows[0]["attnsim"]["throughput_rounds"]
    [2.0, 1.5]
    >>> rows[0]["attnsim"]["eager_seq_s"] = 1.0
    >>> second_rounds(rows, [(("p", 5), "attnsim_eager", 1.25, True)])
    >>> rows[0]["attnsim"]["eager_seq_s"], rows[0]["attnsim"]["eager_rounds"]
    (1.25, [1.0, 1.25])
    """
    by = {(r["program"], r["max_seq_len"]): r for r in rows}
    for key, side, tp, steady in again:
        row = by.get(key)
        if row is None:
            continue
        sides = [side]
        exact = row.get("tracr_exact", {})
        if side == "tracr" and exact.get("mlp_exactness") == row["tracr"].get("mlp_exactness"):
            sides.append("tracr_exact")  # (correct at the default: the same model)
        for name in sides:
            # attnsim's uncompiled timing (timed_jit) sits in its row as eager_seq_s
            got = row.get("attnsim" if name == "attnsim_eager" else name, {})
            key = "eager_seq_s" if name == "attnsim_eager" else "throughput_seq_s"
            if key not in got:
                continue
            rounds = "eager_rounds" if name == "attnsim_eager" else "throughput_rounds"
            first = got.get(rounds, [got[key]])[0]
            got[rounds] = [first, tp]
            if tp > first:  # the second round is kept, with whether it ran steady
                got[key] = tp
                if name != "attnsim_eager":
                    got["steady"] = bool(steady)


def print_rows(rows: list[dict]) -> None:
    """One line per setting: warm compile seconds and error of each compiler."""
    for r in rows:
        name, n, a, t = r["program"], r["max_seq_len"], r["attnsim"], r["tracr"]
        x = r["tracr_exact"]
        if "failed" in a:
            print(f"{name:18s} L={n:<4d} attnsim: {a['failed']}", flush=True)
            continue
        tracr = (
            f"{t['compile_warm_s']:.3f} s err {t['error']:.2g}"
            if "error" in t
            else t.get("skipped") or t.get("failed", "")[:80]
        )
        exact = exactness_label(x)
        if "error" in x and "mlp_exactness" in x:
            exact = f"{exact}: {x['compile_warm_s']:.3f} s err {x['error']:.2g}"
        print(
            f"{name:18s} L={n:<4d} attnsim {a['compile_warm_s']:.3f} s err {a['error']:.2g}"
            f" | tracr {tracr} | correct at mlp_exactness {exact}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", default=",".join(PROGRAMS), help="comma-separated names")
    lengths = parser.add_mutually_exclusive_group()
    lengths.add_argument("--quick", action="store_true", help="two lengths per program")
    lengths.add_argument("--full", action="store_true", help=f"lengths {LONG} for every program")
    parser.add_argument(
        "--jobs", type=int, default=min(2, os.cpu_count() or 1), help="workers at a time"
    )
    parser.add_argument(
        "--cpu-limit", type=float, default=120.0, help="CPU seconds per tracr worker (0: none)"
    )
    parser.add_argument(
        "--wall-limit",
        type=float,
        default=3600.0,
        help="wall seconds per worker, a safety net (the attnsim worker waits for the tracr "
        "workers' compiles before each timing: its wall time approaches the whole run's)",
    )
    parser.add_argument("--worker", choices=["attnsim", "tracr"], help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    names = args.programs.split(",")
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown:
        parser.error(f"unknown programs {unknown}; expected some of {', '.join(PROGRAMS)}")
    if args.worker:
        work_shared()
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
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    start, cpu_start = time.perf_counter(), os.times()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        attnsim = pool.submit(run_worker, "attnsim", names, args)
        order = sorted(names, key=lambda n: SLOW_FIRST.index(n) if n in SLOW_FIRST else 99)
        futures = {n: pool.submit(run_worker, "tracr", [n], args) for n in order if has_tracr}
        attnsim_parts = attnsim.result()
        tracr_parts = {n: f.result() for n, f in futures.items()}
    cpu_end = os.times()
    rows = merge(names, args, attnsim_parts, tracr_parts)
    print_rows(rows)
    summary = {
        "tracr": has_tracr,
        "seconds": round(time.perf_counter() - start, 1),
        "worker_cpu_seconds": round(
            cpu_end.children_user
            + cpu_end.children_system
            - cpu_start.children_user
            - cpu_start.children_system,
            1,
        ),
        "batch": BATCH,
        "full": args.full,
        "quick": args.quick,
        "jobs": args.jobs,
        "cpu_limit_s": args.cpu_limit,
        "lengths": list(LENGTHS),
        "long_lengths": list(LONG),
        "long_programs": list(PROGRAMS) if args.full else list(LONG_DEFAULT),
        "slow_s": TRACR_SLOW_S,
        "default_exactness": DEFAULT_EXACTNESS,
        "exactness_ladder": list(LADDER),
        "numerical_tolerance": NUMERICAL_TOL,
        "programs": len(names),
        "settings": len(rows),
        "tracr_measured": sum("error" in r["tracr"] for r in rows),
        "tracr_default_correct": sum(
            "error" in r["tracr"] and correct(r["tracr"]["error"], PROGRAMS[r["program"]][3])
            for r in rows
        ),
        "tracr_exact_found": sum(
            "error" in r["tracr_exact"] and "mlp_exactness" in r["tracr_exact"] for r in rows
        ),
        # timings taken after PROBE_WAIT_S without the machine coming back to speed
        "timings_disturbed": sum(
            r[k].get("steady") is False for r in rows for k in ("attnsim", "tracr", "tracr_exact")
        ),
        "probe_slower": PROBE_SLOWER,
        "cpus": os.cpu_count(),
        "load_average_at_start": load_at_start,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compare_tracr.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.out / "compare_tracr.md").write_text(markdown(rows, note))
    print(
        f"{summary['tracr_measured']} of {len(rows)} settings measured with both compilers,"
        f" tracr correct at its default mlp_exactness in {summary['tracr_default_correct']}"
        f" and at a larger one in {summary['tracr_exact_found'] - summary['tracr_default_correct']}"
        f" more; wrote {args.out / 'compare_tracr.json'} and compare_tracr.md in"
        f" {summary['seconds']} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
