"""What every benchmark script records about its run, and how it writes its JSON.

The scripts run as ``python benchmarks/NAME.py``, so this folder is on the import path.

>>> run = Run()
>>> sorted(run.machine())[:3]
['cpus', 'load_average_at_start', 'numpy']
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np


class Run:
    """Started when created: the load average then, and the seconds since, for the JSON."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.load_at_start = list(os.getloadavg())

    def machine(self) -> dict:
        """Python, numpy and torch versions, CPUs, torch threads, load at start, seconds."""
        meta = {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpus": os.cpu_count(),
            "load_average_at_start": self.load_at_start,
            "seconds": time.perf_counter() - self.started,
        }
        try:
            import torch

            meta.update(torch=torch.__version__, torch_threads=torch.get_num_threads())
        except ImportError:  # the interpreter benchmark does not need torch
            pass
        return meta


def quick_args(doc: str, results: Path, quick: str, argv: list[str] | None) -> argparse.Namespace:
    """The usual options of a benchmark script, parsed from ``argv``: ``--quick`` (a smaller
    run, what ``quick`` says) and ``--out`` (the results JSON, ``results`` by default); the
    description is the first line of the script's ``doc``.

    >>> args = quick_args("Times things.", Path("r.json"), "one size", ["--quick"])
    >>> args.quick, args.out.name
    (True, 'r.json')
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--out", type=Path, default=results, help="where to write the JSON")
    return parser.parse_args(argv)


def write_json(path: Path, payload: dict) -> None:
    """Writes ``payload`` (indented, newline-terminated), creating the folder, and says so."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path}")


def machine_rates(seconds: float = 0.3) -> dict:
    """This machine's memory bandwidth and float64 arithmetic rate on the current torch
    threads: the best of repeated copies of a 256 MiB tensor (bytes read plus bytes written
    per second) and of 1024 x 1024 float64 matrix products (2 n^3 FLOPs each), each timed
    for at least ``seconds``."""
    import torch

    def best(fn, work: float) -> float:
        fn()  # warm: pages touched, kernels loaded
        rate, t_end = 0.0, time.perf_counter() + seconds
        while time.perf_counter() < t_end or rate == 0.0:
            t0 = time.perf_counter()
            fn()
            rate = max(rate, work / (time.perf_counter() - t0))
        return rate

    src = torch.ones(2**25, dtype=torch.float64)
    dst = torch.empty_like(src)
    bandwidth = best(lambda: dst.copy_(src), 2.0 * src.numel() * src.element_size())
    a = torch.rand(1024, 1024, dtype=torch.float64)
    flops = best(lambda: a @ a, 2.0 * 1024**3)
    return {"bytes_per_second": bandwidth, "flops_per_second": flops}


def stream_floor(net, positions: int, attention_flops: float, rates: dict) -> dict:
    """The least time a forward pass of ``net`` (an ``attnsim`` Transformer) can take on
    one input of ``positions`` rows at ``rates`` (:func:`machine_rates`): every sublayer
    reads the residual columns its input maps use and writes those its output maps fill
    (8 bytes per float64 cell per position); the arithmetic is ``attention_flops`` (what the
    heads must compute, as the caller counts it) and, for the MLPs, one multiply and one
    add per non-zero weight per position. The floor is the larger of the two times (a
    roofline), per layer and in all."""
    import torch

    moved = 0.0
    mlp_flops = 0.0
    per_layer = []
    for block in net.blocks:
        layer = 0.0
        for part in (block.attn, block.mlp):
            read = write = None
            for name, w in part.named_parameters(recurse=False):
                if w.numel() == 0 or w.dim() < 2 or not name.startswith("W_"):
                    continue
                if name == "W_O" or name.endswith("out"):  # [..., k, d_model]: writes
                    cols = (w != 0).reshape(-1, w.shape[-1]).any(dim=0)
                    write = cols if write is None else write | cols
                else:  # [..., d_model, k]: reads
                    rows = (w.transpose(-1, -2) != 0).reshape(-1, w.shape[-2]).any(dim=0)
                    read = rows if read is None else read | rows
                if part is block.mlp:
                    mlp_flops += 2.0 * int(torch.count_nonzero(w)) * positions
            cells = sum(int(torch.count_nonzero(x)) for x in (read, write) if x is not None)
            layer += cells * positions * 8.0
        per_layer.append(layer)
        moved += layer
    flops = attention_flops + mlp_flops
    t_bytes = moved / rates["bytes_per_second"]
    t_flops = flops / rates["flops_per_second"]
    return {
        "stream_bytes": moved,
        "stream_bytes_per_layer": moved / max(len(per_layer), 1),
        "flops": flops,
        "flops_per_layer": flops / max(len(per_layer), 1),
        "bytes_seconds": t_bytes,
        "flops_seconds": t_flops,
        "floor_seconds": max(t_bytes, t_flops),
    }


def least_seconds(fn, budget: float) -> float:
    """The least wall time of ``fn()`` over calls for at least ``budget`` seconds, after
    one warm-up call (what the benchmarks compare when one call takes microseconds).

    >>> least_seconds(lambda: sum(range(100)), 0.001) > 0
    True
    """
    fn()
    best, end = float("inf"), time.perf_counter() + budget
    while time.perf_counter() < end or best == float("inf"):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def least_in_turn(fns: dict, calls: int) -> dict:
    """The least wall time of each of ``fns`` (name -> function of no arguments) over
    ``calls`` rounds, each round calling every one once, in turn: a disturbance of the
    machine falls on all of them alike, so their ratios hold where their times do not.

    >>> sorted(least_in_turn({"a": lambda: None, "b": lambda: sum(range(9))}, 3))
    ['a', 'b']
    """
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(calls):
        for key, fn in fns.items():
            start = time.perf_counter()
            fn()
            best[key] = min(best[key], time.perf_counter() - start)
    return best


def timed(fn):
    """``(fn(), seconds)``: one call, timed by the wall clock."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def saved_and_loaded(U, target, X) -> dict:
    """U saved into a fresh folder and loaded back (``UniversalSimulator.save`` / ``load``,
    digests checked), timed; whether the loaded U simulates ``target`` on ``X`` to the same
    bits as U itself, and the folder's size."""
    import shutil
    import tempfile

    import torch

    from attnsim.simulator.universal import UniversalSimulator

    folder = Path(tempfile.mkdtemp(prefix="attnsim-u-"))
    try:
        _, save_s = timed(lambda: U.save(folder))
        V, load_s = timed(lambda: UniversalSimulator.load(folder))
        size = sum(f.stat().st_size for f in folder.iterdir())
        same = bool(torch.equal(V.simulate(target, X), U.simulate(target, X)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "save_seconds": save_s,
        "load_seconds": load_s,
        "saved_mb": size / 2**20,
        "loaded_identical": same,
    }


def fit_exponent(xs: list[float], ys: list[float]) -> float:
    """The slope of log y against log x by least squares (y ~ x^slope).

    >>> round(fit_exponent([1, 2, 4], [3, 12, 48]), 6)
    2.0
    """
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])
