"""The two sequence layouts of U side by side, for encoder layers of growing size.

Each size is one encoder layer of the BERT shape at n = d: n tokens of width d, 4 heads (1
where d < 4), feed-forward width 4 d, post-norm, GELU. For each layout ("scalar": the
paper's one number per position, the attention merged; "vector": one vector per position,
the raw parameters) the script records the sequence length and token width the layout gives
(exact, from the layout alone, for every size up to d = 384), and for the sizes it builds:
U's d_model, depth, parameters (total and nonzero), build seconds, the first and a warm
simulate (plan executor), the peak extra resident memory while simulating, the error
against ``torch.nn.TransformerEncoderLayer`` holding the same weights, and the ratio of the
simulate time to that module's forward pass in the same process (one CPU thread). Builds
stop where the next one would exceed the run's budget (the sizes are listed with the reason).

It also builds U for the all-MiniLM-L6-v2 layer shape (n = 12, d = 384, 12 heads,
feed-forward 1,536; sparse storage, as ``storage="auto"`` chooses at that size) and simulates
one random layer of that shape with scores up to |30| (build, simulate, peak memory, error;
a few minutes; ``--no-minilm`` leaves it out), and a stack of 6 such layers (``--stack L``:
L layers, 0 for none) in one pass of one U, against torch's layers one after the other.

Growth exponents in n = d (least squares on log-log) are fitted per layout over the sizes
built. Run: ``python benchmarks/simulator_layouts.py`` (``--full`` builds larger sizes;
writes benchmarks/results/simulator_layouts.json).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import resource
import statistics
import time
from pathlib import Path

# isort: off
import attnsim  # noqa: F401  (before torch: its huge-page setting takes effect)

# isort: on
import numpy as np
import torch
from _common import Run, fit_exponent, saved_and_loaded, write_json
from simulator_cost import PeakMemory, time_direct

from attnsim.model import sparse_ops
from attnsim.model.memory import ModelTooLargeError, available_memory, memory_limit
from attnsim.simulator import reference, sampling, universal
from attnsim.simulator.config import SimulatorConfig, memory_needed
from attnsim.simulator.layout import Layout
from attnsim.simulator.stack import EncoderStackSpec
from attnsim.simulator.to_torch import to_torch
from attnsim.simulator.vector_layout import VectorLayout
from attnsim.simulator.verify import relative_error

RESULTS = Path(__file__).resolve().parent / "results" / "simulator_layouts.json"
SIZES = (2, 4, 8, 16, 32, 64, 128, 256, 384)
# the largest n = d built per layout (default run / --full); past it, the reason is the
# measured peak memory's growth (see limit_reason)
BUILT = {"scalar": (64, 128), "vector": (128, 384)}
MINILM = (12, 384, 12, 1536)
LONG_TOKENS = (128, 256, 512)  # --full: the MiniLM shape on these input lengths (or its refusal)
# the longest input whose saved U simulates once more (its first simulate, timed)
RERUN_TOKENS = 128
# the longest input whose row runs again under an address-space limit of twice its resident
# peak (the rule; the stack's row too); past it the row reports its peak address
# space only (a rerun at 512 tokens would take another quarter of an hour)
ADDRESS_TOKENS = 256
STACK_TOKENS = 128  # --full: the six-layer stack on this many tokens too
# U's warm simulate time: the median of WARM_RUNS passes where one takes under WARM_SHORT_S
# (the torch layer's time is a median too, benchmarks/simulator_cost.time_direct), else one
WARM_RUNS = 3
WARM_SHORT_S = 10.0


def heads_of(d: int) -> int:
    return 4 if d >= 4 else 1


def laws(d: int) -> dict:
    """Sequence length and token width of both layouts (exact; nothing is built)."""
    h, f = heads_of(d), 4 * d
    scalar, vector = Layout(d, d, h, f), VectorLayout(d, d, h, f)
    return {
        "scalar": {"sequence_length": scalar.length, "token_width": 1},
        "vector": {"sequence_length": vector.length, "token_width": vector.width},
        "target_parameters": 4 * d * d + 4 * d + 2 * d * f + f + d + 4 * d,
    }


def measure(
    layout: str, n: int, d: int, h: int, f: int, seed: int = 0, logit_scale: float | None = None
) -> dict:
    """Builds U for (n, d, h, f) in ``layout`` and simulates one random layer of that size
    (``logit_scale``: its largest |score| on X, as the issue's MiniLM check asks)."""
    w0 = time.perf_counter()
    U = universal.build(n, d, h, layer="encoder", max_ff=f, layout=layout)
    build = time.perf_counter() - w0
    X = torch.tensor(np.random.default_rng(seed).standard_normal((n, d)), dtype=torch.float64)
    target = sampling.random_encoder_layer(
        h, d, f, seed=seed, activation="gelu", logit_scale=logit_scale, X=X
    )
    module = to_torch(target)
    with torch.no_grad():
        want = module(X[None])[0]
    with PeakMemory() as mem:
        t0 = time.perf_counter()
        got = U.simulate(target, X)
        first = time.perf_counter() - t0
    warm: list[float] = []
    while len(warm) < (WARM_RUNS if not warm or warm[0] < WARM_SHORT_S else 1):
        t0 = time.perf_counter()  # the median of a few warm passes, as time_direct's
        U.simulate(target, X)
        warm.append(time.perf_counter() - t0)
    warm = statistics.median(warm)
    with torch.no_grad():
        direct = time_direct(lambda: module(X[None]))
    fill = None
    if U.model.storage == "sparse":  # a third pass, counted (not timed)
        with StreamFill() as fill:
            U.simulate(target, X)
    r = U.report()
    return {
        "layout": layout,
        "n": n,
        "d": d,
        "heads": h,
        "d_ff": f,
        "sequence_length": r.sequence_length,
        "token_width": U.model.config.token_width or 1,
        "d_model": r.d_model,
        "layers": r.layers,
        "parameters": r.parameters,
        "nonzero_parameters": r.nonzero_parameters,
        "build_seconds": build,
        "simulate_first_seconds": first,
        "simulate_seconds": warm,
        "peak_extra_mb": mem.extra_mb,
        "direct_seconds": direct,
        "wall_ratio": warm / direct,
        "error_vs_torch": relative_error(got, want),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "storage": U.model.storage,
        # sparse storage: the most residual directions alive at once (of d_model), and the
        # stream they take (float64, every position)
        "peak_live_columns": getattr(U.model.runtime, "peak_columns", None),
        "stream_mb": _stream_mb(U),
        # sparse storage: the store's peak cells and peak non-zero entries (StreamFill)
        "stream_cells_peak": None if fill is None else fill.cells,
        "stream_nonzero_peak": None if fill is None else fill.nonzero,
        "stream_resident_peak_mb": None if fill is None else fill.resident_mb,
        "max_abs_score": max_abs_score(target, X),
        # U built once: saved, loaded back (digests checked), and the loaded U's output
        **saved_and_loaded(U, target, X),
    }


class ChildFailed(RuntimeError):
    """A size measured in a child process that ended without its row (killed for memory,
    say, or an error raised there): the message says why."""


def measure_apart(layout: str, n: int, d: int, h: int, f: int, **options) -> dict:
    """:func:`measure` in a child process of its own, so that its peak memory
    (``peak_rss_mb``) and its build time are this size's, not shaped by the sizes built
    before it in the same process.

    Raises:
        ChildFailed: the child ended without a row (the reason, with the child's peak
            resident memory where it was killed).
    """
    got = _in_child(_measured, layout, n, d, h, f, options)
    if got.get("ok") is False:
        raise ChildFailed(got["error"])
    return got


def _measured(layout: str, n: int, d: int, h: int, f: int, options: dict) -> dict:
    return measure(layout, n, d, h, f, **options)


class StreamFill:
    """Over one forward pass in sparse storage: the most cells the store holds at once (its
    live columns times the positions), the most non-zero entries among them, and the most
    memory of its rows (a store in blocks takes a block only where a write was non-zero),
    read at every stage before its columns are released."""

    def __enter__(self) -> StreamFill:
        self.cells = self.nonzero = 0
        self.resident_mb = 0.0
        self._real = real = sparse_ops.Store.release

        def release(store, stage: int) -> None:
            live = store.live_rows()
            cells = len(live) * store.data.shape[1] * store.data.shape[2]
            self.cells = max(self.cells, cells)
            # the live rows only, a few at a time (a row never taken holds no memory)
            nonzero = sum(int(torch.count_nonzero(store.data[r])) for r in live.split(64))
            self.nonzero = max(self.nonzero, nonzero)
            self.resident_mb = max(self.resident_mb, store.resident_mb())
            real(store, stage)

        sparse_ops.Store.release = release
        return self

    def __exit__(self, *exc) -> None:
        sparse_ops.Store.release = self._real


def _stream_mb(U) -> float:
    """MB of U's residual stream for one input: the live columns (sparse) or d_model."""
    cols = getattr(U.model.runtime, "peak_columns", None) or U.model.config.d_model
    return cols * (U.layout.length + 1) * 8 / 2**20


def max_abs_score(target, X: torch.Tensor) -> float:
    """The largest |score| of the target's attention on X (its input rows, pre-norm or not)."""
    return float(reference.scores(target.attention, X).abs().max())


def minilm() -> dict:
    """The MiniLM layer shape in the vector layout: built and simulated (in a child process,
    as a user's first build is), or refused."""
    n, d, h, f = MINILM
    w0 = time.perf_counter()
    try:
        row = measure_apart("vector", n, d, h, f, logit_scale=30.0)
    except (ModelTooLargeError, MemoryError, ChildFailed) as exc:
        return {"built": False, "seconds": time.perf_counter() - w0, "refusal": str(exc)}
    return {"built": True, **row}


def _peak_virtual_mb() -> float:
    """The process's peak address space (VmPeak, Linux), MB; NaN where not readable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


def _minilm_tokens(n: int, seed: int = 0) -> dict:
    """The MiniLM layer shape on ``n`` tokens, in this process: U built, one random layer
    (scores up to |30|) simulated once, against torch's layer; peak memory of the process
    (resident and address space), U saved and loaded back, and (up to ``RERUN_TOKENS``)
    the loaded U's first simulate of the same layer (timed: it finds the plans for this
    length; the same bits checked)."""
    import shutil
    import tempfile

    from attnsim.simulator.universal import UniversalSimulator

    torch.set_num_threads(1)
    _, d, h, f = MINILM
    w0 = time.perf_counter()
    U = universal.build(n, d, h, layer="encoder", max_ff=f)
    build = time.perf_counter() - w0
    build_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    X = torch.tensor(np.random.default_rng(seed).standard_normal((n, d)), dtype=torch.float64)
    target = sampling.random_encoder_layer(
        h, d, f, seed=seed, activation="gelu", logit_scale=30.0, X=X
    )
    module = to_torch(target)
    with torch.no_grad():
        want = module(X[None])[0]
        direct = time_direct(lambda: module(X[None]))
    t0 = time.perf_counter()
    got = U.simulate(target, X)
    simulate = time.perf_counter() - t0
    r = U.report()
    folder = Path(tempfile.mkdtemp(prefix="attnsim-u-"))
    try:
        t0 = time.perf_counter()
        U.save(folder)
        save = time.perf_counter() - t0
        saved = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
        del U
        t0 = time.perf_counter()
        loaded = UniversalSimulator.load(folder)
        load = time.perf_counter() - t0
        loaded_simulate = same = None
        if n <= RERUN_TOKENS:
            t0 = time.perf_counter()  # its first simulate finds the plans for this length
            again = loaded.simulate(target, X)
            loaded_simulate = time.perf_counter() - t0
            same = bool(torch.equal(again, got))
        del loaded
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "tokens": n,
        "sequence_length": r.sequence_length,
        "d_model": r.d_model,
        "nonzero_parameters": r.nonzero_parameters,
        "build_seconds": build,
        "simulate_seconds": simulate,
        "direct_seconds": direct,
        "wall_ratio": simulate / direct,
        "error_vs_torch": relative_error(got, want),
        "max_abs_score": max_abs_score(target, X),
        "build_peak_rss_mb": build_rss,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_virtual_mb": _peak_virtual_mb(),
        "save_seconds": save,
        "saved_mb": saved,
        "load_seconds": load,
        "loaded_simulate_seconds": loaded_simulate,
        "loaded_same_bits": same,
    }


def _under_limit(limit_bytes: int, fn, *args) -> dict:
    """``fn(*args)`` under an address-space limit (``RLIMIT_AS``): its row, or the error
    that stopped it."""
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    return {"ok": True, **fn(*args)}  # (an error: reported by _in_child)


def _in_child(fn, *args) -> dict:
    """``fn(*args)`` (a dict) in a forked child process; a child that dies without an
    answer (killed for memory, say) gives ``{"ok": False, "error": ...}``."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def child() -> None:
        try:
            send.send(fn(*args))
        except BaseException as exc:  # noqa: BLE001 (reported to the parent)
            send.send({"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:600]}"})

    proc = ctx.Process(target=child)
    proc.start()
    send.close()
    peak_kb = 0  # the child's resident peak, read while it runs (Linux; 0 elsewhere)
    got = None
    while True:
        peak_kb = max(peak_kb, _resident_peak_kb(proc.pid))
        try:
            if recv.poll(0.5):
                got = recv.recv()
                break
        except EOFError:
            break
        if not proc.is_alive() and not recv.poll(0):
            break
    proc.join()
    if got is None:
        code = proc.exitcode
        why = "was killed by signal 9 (the out-of-memory killer, as a rule)" if code == -9 else None
        why = why or f"ended with code {code}"
        seen = f", its resident peak {peak_kb / 2**20:.1f} GiB" if peak_kb else ""
        return {"ok": False, "error": f"the child process {why}{seen}"}
    return got


def _resident_peak_kb(pid: int) -> int:
    """VmHWM of process ``pid`` in kB (0 where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def minilm_tokens(n: int, address_check: bool = True) -> dict:
    """The MiniLM layer shape on ``n`` tokens in a child process of its own (its peak
    memory is this row's), then, with ``address_check``, once more in a child whose
    address space is limited to twice the first run's resident peak (the issue's rule)."""
    w0 = time.perf_counter()
    row = _in_child(_minilm_tokens, n)
    if row.get("ok") is False:
        return {
            "tokens": n,
            "built": False,
            "seconds": time.perf_counter() - w0,
            "refusal": row["error"],
        }
    row = {"built": True, **row}
    if address_check and n <= ADDRESS_TOKENS:
        _address_check(row, _minilm_tokens, n)
    return row


def _address_check(row: dict, fn, *args) -> None:
    """Runs ``fn(*args)`` again in a child whose address space is limited to twice
    ``row``'s resident peak; notes the limit and whether it ran there in ``row``."""
    limit = int(2 * row["peak_rss_mb"] * 2**20)
    got = _in_child(_under_limit, limit, fn, *args)
    row["address_limit_mb"] = limit / 2**20
    row["under_address_limit"] = bool(got.get("ok", True))
    row["under_address_limit_error"] = got.get("error")


def minilm_stack(layers: int, seed: int = 0, tokens: int | None = None) -> dict:
    """A stack of ``layers`` encoder layers of the MiniLM shape (each with scores up to
    |30| on its own input) simulated by one U in one pass, against torch's layers applied
    one after the other; on the shape's 12 tokens, or on ``tokens``."""
    n, d, h, f = MINILM
    n = tokens or n
    w0 = time.perf_counter()
    try:
        U = universal.build(n, d, h, layer="encoder", max_ff=f, n_layers=layers)
    except (ModelTooLargeError, MemoryError) as exc:
        return {"built": False, "seconds": time.perf_counter() - w0, "refusal": str(exc)}
    build = time.perf_counter() - w0
    X = torch.tensor(np.random.default_rng(seed).standard_normal((n, d)), dtype=torch.float64)
    specs, inner, scores = [], X, []
    for ell in range(layers):
        layer = sampling.random_encoder_layer(
            h, d, f, seed=seed + ell, activation="gelu", logit_scale=30.0, X=inner
        )
        scores.append(max_abs_score(layer, inner))
        specs.append(layer)
        with torch.no_grad():
            inner = to_torch(layer)(inner[None])[0]
    stack = EncoderStackSpec(tuple(specs))
    with PeakMemory() as mem:
        t0 = time.perf_counter()
        got = U.simulate(stack, X)
        first = time.perf_counter() - t0
    r = U.report()
    return {
        "built": True,
        "layers": layers,
        "tokens": n,
        "sequence_length": r.sequence_length,
        "token_width": U.model.config.token_width,
        "d_model": r.d_model,
        "depth": r.layers,
        "parameters": r.parameters,
        "nonzero_parameters": r.nonzero_parameters,
        "storage": U.model.storage,
        "build_seconds": build,
        "simulate_seconds": first,
        "peak_extra_mb": mem.extra_mb,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_virtual_mb": _peak_virtual_mb(),
        "peak_live_columns": getattr(U.model.runtime, "peak_columns", None),
        "stream_mb": _stream_mb(U),
        "max_abs_score": max(scores),
        "error_vs_torch": relative_error(got, inner),
    }


def stack_tokens(layers: int, address_check: bool = True) -> dict:
    """:func:`minilm_stack` on ``STACK_TOKENS`` tokens in a process of its own (its peak
    memory is the row's), then, with ``address_check``, again under an address-space limit
    of twice that resident peak."""
    row = _in_child(minilm_stack, layers, 0, STACK_TOKENS)
    if address_check and row.get("built"):
        _address_check(row, minilm_stack, layers, 0, STACK_TOKENS)
    return row


def limit_reason(layout: str, rows: list[dict], d: int) -> str:
    """Why ``layout`` is not built at ``n = d``: the library's estimate of the memory that
    building and simulating it needs (:func:`attnsim.simulator.config.memory_needed`, which
    refuses it where it exceeds the memory available), against this machine's memory, and
    how the measured peaks grew between the two largest sizes built."""
    config = SimulatorConfig(d, d, heads_of(d), layer="encoder", max_ff=4 * d, layout_kind=layout)
    need, limit = memory_needed(config) / 2**30, memory_limit() / 2**30
    have = min(limit, (available_memory() or memory_limit()) / 2**30)
    verdict = "refused: more than" if need > have else "within"
    out = (
        f"the library's estimate for building and simulating it: about {need:.1f} GiB, "
        f"{verdict} the {have:.0f} GiB available in this run (this machine: {limit:.0f} GiB)"
    )
    built = sorted((r for r in rows if r["layout"] == layout), key=lambda r: r["d"])
    if len(built) < 2:
        return out
    a, b = built[-2], built[-1]
    grow = math.log(b["peak_rss_mb"] / a["peak_rss_mb"]) / math.log(b["d"] / a["d"])
    was, now = a["peak_rss_mb"] / 1024, b["peak_rss_mb"] / 1024
    return (
        f"{out}; measured peaks grew as n^{grow:.2f} from n = d = {a['d']} to {b['d']} "
        f"({was:.1f} -> {now:.1f} GiB)"
    )


def exponents(rows: list[dict]) -> dict:
    out: dict[str, dict] = {}
    for layout in ("scalar", "vector"):
        sel = sorted((r for r in rows if r["layout"] == layout), key=lambda r: r["d"])
        if len(sel) < 2:
            continue
        ds = [r["d"] for r in sel]
        out[layout] = {
            key: fit_exponent(ds, [max(r[key], 1e-12) for r in sel])
            for key in (
                "sequence_length",
                "d_model",
                "parameters",
                "nonzero_parameters",
                "build_seconds",
                "simulate_seconds",
                "peak_extra_mb",
            )
        }
    return out


def parse_size(text: str) -> tuple[str, int]:
    """What ``--add`` names: ``"vector:384"`` -> ``("vector", 384)``, ``"minilm"`` -> the
    MiniLM layer shape on its 12 tokens, ``"tokens:256"`` -> that shape on 256 tokens,
    ``"stack"`` and ``"stack_tokens"`` -> the six-layer stack on 12 and on ``STACK_TOKENS``
    tokens; ValueError with the reason otherwise.

    >>> parse_size("vector:384"), parse_size("scalar:64"), parse_size("minilm")
    (('vector', 384), ('scalar', 64), ('minilm', 12))
    >>> parse_size("tokens:512"), parse_size("stack_tokens"), parse_size("stack")
    (('tokens', 512), ('stack_tokens', 128), ('stack', 12))
    """
    if text == "minilm":
        return "minilm", MINILM[0]
    if text == "stack_tokens":
        return "stack_tokens", STACK_TOKENS
    if text == "stack":
        return "stack", MINILM[0]
    layout, _, d = text.partition(":")
    if layout == "tokens" and d.isdigit() and int(d) > 0:
        return layout, int(d)
    if layout not in ("scalar", "vector") or not d.isdigit() or int(d) not in SIZES:
        raise ValueError(
            f"--add takes minilm, stack, stack_tokens, tokens:N or LAYOUT:D with LAYOUT scalar or "
            f"vector and D one of {SIZES}, got {text!r}"
        )
    return layout, int(d)


def add_sizes(parser: argparse.ArgumentParser, sizes: list[str], out_path: Path) -> int:
    """Builds each size of ``sizes`` (``LAYOUT:D`` or ``minilm``, in a child process) and
    merges it into the results at ``out_path``: its row replaces one of the same size, its
    entry leaves ``not_built``, the exponents are fitted again; the sizes still not built get
    their reasons again (from the rows now held)."""
    try:
        wanted = [parse_size(t) for t in sizes]
    except ValueError as exc:
        parser.error(str(exc))
    if not out_path.is_file():
        parser.error(f"--add merges into existing results; {out_path} is not a file")
    out = json.loads(out_path.read_text())
    rows = out["results"]
    tried: dict[tuple[str, int], str] = {}  # sizes whose child ended without a row
    for layout, d in wanted:
        if layout == "minilm":
            out["minilm"] = minilm()
            print(f"MiniLM layer shape {MINILM}: {out['minilm']}", flush=True)
            continue
        if layout == "stack":
            out["minilm_stack"] = minilm_stack(6)
            print(f"MiniLM stack of 6: {out['minilm_stack']}", flush=True)
            continue
        if layout == "stack_tokens":
            out["minilm_stack_tokens"] = stack_tokens(6)
            print(f"MiniLM stack on {d} tokens: {out['minilm_stack_tokens']}", flush=True)
            continue
        if layout == "tokens":  # the row of that length replaced, the rows kept in order
            row = minilm_tokens(d)
            kept = [r for r in out.get("minilm_tokens", []) if r["tokens"] != d]
            out["minilm_tokens"] = sorted([*kept, row], key=lambda r: r["tokens"])
            print(f"MiniLM layer shape on {d} tokens: {row}", flush=True)
            continue
        w0 = time.perf_counter()
        try:
            row = measure_apart(layout, d, d, heads_of(d), 4 * d)
        except ChildFailed as exc:
            tried[(layout, d)] = f"tried: {exc} after {time.perf_counter() - w0:.0f} s"
            print(f"{layout} n=d={d}: {tried[(layout, d)]}", flush=True)
            continue
        rows[:] = [r for r in rows if (r["layout"], r["d"]) != (layout, d)] + [row]
        print(
            f"{layout} n=d={d}: build {row['build_seconds']:.1f} s, simulate "
            f"{row['simulate_seconds']:.1f} s, peak {row['peak_rss_mb'] / 1024:.1f} GiB, "
            f"error {row['error_vs_torch']:.1e}",
            flush=True,
        )
    rows.sort(key=lambda r: (r["d"], r["layout"] != "scalar"))
    built = {(r["layout"], r["d"]) for r in rows}
    out["not_built"] = [
        {
            "layout": s["layout"],
            "d": s["d"],
            "reason": tried.get((s["layout"], s["d"])) or limit_reason(s["layout"], rows, s["d"]),
        }
        for s in out.get("not_built", [])
        if (s["layout"], s["d"]) not in built
    ]
    out["exponents"] = exponents(rows)
    write_json(out_path, out)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="build the larger sizes too")
    parser.add_argument("--no-minilm", action="store_true", help="skip the MiniLM layer shape")
    parser.add_argument(
        "--stack",
        type=int,
        default=None,
        help="also simulate a stack of this many MiniLM-shaped layers (default 6; 0: none; "
        "about 5 minutes)",
    )
    parser.add_argument(
        "--tokens",
        type=int,
        action="append",
        default=None,
        help="also the MiniLM layer shape on this many tokens (repeatable; --full: 128 and 256), "
        "each in a child process, then again under an address-space limit of twice its "
        "resident peak (about 10 minutes at 128)",
    )
    parser.add_argument(
        "--no-address-check", action="store_true", help="skip the address-space rerun"
    )
    parser.add_argument(
        "--add",
        action="append",
        default=None,
        metavar="LAYOUT:D",
        help="only build this size (vector:384, say; minilm: the MiniLM layer shape; "
        "tokens:256: that shape on 256 tokens; stack, stack_tokens: the six-layer stack on 12 "
        "and 128 tokens; repeatable) and merge it into the results at --out, which must exist "
        "(every other row there is kept)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.add:
        return add_sizes(parser, args.add, args.out)
    run = Run()
    table = {str(d): laws(d) for d in SIZES}
    rows, skipped = [], []
    for d in SIZES:
        for layout in ("scalar", "vector"):
            limit = BUILT[layout][1 if args.full else 0]
            if d > limit:
                skipped.append({"layout": layout, "d": d, "reason": limit_reason(layout, rows, d)})
                continue
            w0 = time.perf_counter()
            try:
                row = measure_apart(layout, d, d, heads_of(d), 4 * d)
            except ChildFailed as exc:
                why = f"tried: {exc} after {time.perf_counter() - w0:.0f} s"
                skipped.append({"layout": layout, "d": d, "reason": why})
                print(f"{layout:>6} n=d={d:>3}: {why}", flush=True)
                continue
            rows.append(row)
            print(
                f"{layout:>6} n=d={d:>3}: seq {row['sequence_length']:>7} x {row['token_width']:>4}"
                f"  d_model {row['d_model']:>6}  params {row['parameters']:>12,}  build "
                f"{row['build_seconds']:7.2f} s  simulate {row['simulate_seconds']:8.4f} s "
                f"(x{row['wall_ratio']:.3g} torch)  mem {row['peak_extra_mb']:8.1f} MB  err "
                f"{row['error_vs_torch']:.1e}",
                flush=True,
            )
    out = {
        "machine": None,
        "laws": table,
        "results": rows,
        "not_built": skipped,
        "exponents": exponents(rows),
    }
    if not args.no_minilm:
        out["minilm"] = minilm()
        print(f"MiniLM layer shape {MINILM}: {out['minilm']}", flush=True)
    stack = 6 if args.stack is None else args.stack
    if stack:
        out["minilm_stack"] = minilm_stack(stack)
        print(f"MiniLM stack of {stack}: {out['minilm_stack']}", flush=True)
    if stack and args.full:
        out["minilm_stack_tokens"] = stack_tokens(stack, not args.no_address_check)
        print(f"MiniLM stack on {STACK_TOKENS} tokens: {out['minilm_stack_tokens']}", flush=True)
    tokens = args.tokens if args.tokens is not None else (list(LONG_TOKENS) if args.full else [])
    if tokens:
        out["minilm_tokens"] = []
        for n in tokens:
            row = minilm_tokens(n, address_check=not args.no_address_check)
            out["minilm_tokens"].append(row)
            print(f"MiniLM layer shape on {n} tokens: {row}", flush=True)
    out["machine"] = run.machine()
    write_json(args.out, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
