"""The cost table on this machine: the break-even points of ``attnsim.model.costs`` measured
here, beside the values the table holds, and how often the feature-major rule picks the
faster executor.

Each constant below chooses between two exact ways of computing the same thing (the
differential tests run both against the definition), so a value off this machine's
break-even costs speed, never a result. For each, the script times both ways over a sweep
of the quantity the constant bounds (one thread, the least of repeated calls, batch 256),
with the runtime's own functions (``attnsim.model.fused``), and reports where each way was
faster:

- ``DENSE_WIDTH``: a feature-major weight reading half the residual rows of a model of
  ``d_model`` rows, by a product over all rows (at most ``DENSE_WIDTH``) or over the rows
  read, gathered first;
- ``DENSE_SHARE``: the same at ``d_model`` 64, over the share of the rows the weight reads
  (gathered while at most ``DENSE_SHARE``);
- ``ONE_HOT_MIN_WIDTH``: the feature-major embedding of 4 tokens, by an indexed gather of
  ``W_E``'s columns (``d_model`` at most ``ONE_HOT_MIN_WIDTH``) or a one-hot product;
- ``ONE_HOT_VOCAB``: the same at ``d_model`` 64 over the vocabulary (one-hot while at most
  ``ONE_HOT_VOCAB``).

The rule that sends short inputs feature-major (``attnsim.model.fused.applies``: the
``FUSED_*`` constants) is checked as a whole: on tracr's library programs at lengths 5, 10
and 20 (``compare_tracr.PROGRAMS``), ``executor="fused"`` and ``"plan"`` are both timed,
and the rule's choice is set against the faster (``executor="jit"`` measures instead of
following the rule).

Run: ``python benchmarks/calibrate_costs.py [--quick] [--out PATH]`` (writes
benchmarks/results/calibrate_costs.json; ``--quick``: fewer points and shorter timings).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# isort: off
import attnsim  # noqa: F401  (before torch: its huge-page setting takes effect)

# isort: on
import torch
from _common import Run, least_seconds, write_json

from attnsim.model import costs, fused

RESULTS = Path(__file__).resolve().parent / "results" / "calibrate_costs.json"
BATCH = 256
POSITIONS = 6  # a length-5 input and BOS: where the feature-major choices matter most
RULE_LENGTHS = (5, 10, 20)


def break_even(points: list[dict]) -> dict:
    """Where the "above" way (the one the table takes past its constant) starts to win:
    ``low_wins_to`` the largest swept value at which the "below" way was faster, and
    ``high_wins_from`` the smallest value from which the "above" way was faster at every
    larger value (None where there is none).

    >>> pts = [{"x": 1, "below_s": 1, "above_s": 2}, {"x": 2, "below_s": 2, "above_s": 1},
    ...        {"x": 3, "below_s": 3, "above_s": 4}, {"x": 4, "below_s": 5, "above_s": 1}]
    >>> break_even(pts)
    {'low_wins_to': 3, 'high_wins_from': 4}
    """
    low = [p["x"] for p in points if p["below_s"] <= p["above_s"]]
    high_from = None
    for p in reversed(points):
        if p["above_s"] < p["below_s"]:
            high_from = p["x"]
        else:
            break
    return {"low_wins_to": max(low) if low else None, "high_wins_from": high_from}


def consistent(value, found: dict) -> bool:
    """Whether the table's ``value`` sits between the measured ways: at or above the
    largest value where the "below" way won, and below the first from which the "above"
    way always won (a bound that the sweep did not reach counts as met).

    >>> consistent(16, {"low_wins_to": 12, "high_wins_from": 24})
    True
    >>> consistent(16, {"low_wins_to": 32, "high_wins_from": 48})
    False
    """
    low, high = found["low_wins_to"], found["high_wins_from"]
    return (low is None or value >= low) and (high is None or value < high)


def _stream(d: int, dtype=torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(d)
    return torch.randint(0, 3, (d, POSITIONS, BATCH), generator=gen).to(dtype)


def _weight(rows: int, d: int, read: int) -> torch.Tensor:
    """``[rows, d]`` with non-zero columns at ``read`` evenly spread residual rows."""
    w = torch.zeros(rows, d)
    cols = torch.linspace(0, d - 1, read).round().long().unique()
    w[:, cols] = torch.arange(1, rows * len(cols) + 1, dtype=torch.float32).view(rows, -1)
    return w


def product_sweep(xs, budget: float, d_fixed: int | None) -> list[dict]:
    """A weight of 8 rows read by ``fused._read``: all rows (``below`` for the width,
    ``above`` for the share) against the rows read, gathered first."""
    points = []
    for x in xs:
        d, share = (x, 0.5) if d_fixed is None else (d_fixed, x)
        w = _weight(8, d, max(1, round(share * d)))
        reads = torch.nonzero((w != 0).any(dim=0)).flatten()
        stream = _stream(d)
        dense = (w.contiguous(), None)
        gathered = (w[:, reads].contiguous(), reads)
        a, b = fused._read(dense, stream), fused._read(gathered, stream)
        if not torch.equal(a, b):  # exact either way: small integers
            raise AssertionError(f"the two products differ at {x}")
        t_dense = least_seconds(lambda w=dense, x=stream: fused._read(w, x), budget)
        t_gathered = least_seconds(lambda w=gathered, x=stream: fused._read(w, x), budget)
        below, above = (t_dense, t_gathered) if d_fixed is None else (t_gathered, t_dense)
        points.append({"x": x, "below_s": below, "above_s": above})
    return points


def embed_sweep(xs, budget: float, d_fixed: int | None) -> list[dict]:
    """``fused._embed`` by an indexed gather and by a one-hot product (``below`` the width:
    gather; ``below`` the vocabulary: one-hot)."""
    points = []
    saved = fused.ONE_HOT_MIN_WIDTH, fused.ONE_HOT_VOCAB
    try:
        for x in xs:
            d, vocab = (x, 4) if d_fixed is None else (d_fixed, x)
            gen = torch.Generator().manual_seed(x)
            E = (
                torch.randint(0, 3, (d, vocab), generator=gen).float(),
                torch.randint(0, 3, (d, POSITIONS), generator=gen).float(),
                None,
                None,
            )
            ids = torch.randint(0, vocab, (BATCH, POSITIONS), generator=gen)
            fused.ONE_HOT_MIN_WIDTH, fused.ONE_HOT_VOCAB = -1, vocab  # one-hot
            one_hot = fused._embed(E, ids, None)
            t_one_hot = least_seconds(lambda e=E, i=ids: fused._embed(e, i, None), budget)
            fused.ONE_HOT_MIN_WIDTH = d  # the gather
            if not torch.equal(one_hot, fused._embed(E, ids, None)):
                raise AssertionError(f"the two embeddings differ at {x}")
            t_gather = least_seconds(lambda e=E, i=ids: fused._embed(e, i, None), budget)
            below, above = (t_gather, t_one_hot) if d_fixed is None else (t_one_hot, t_gather)
            points.append({"x": x, "below_s": below, "above_s": above})
    finally:
        fused.ONE_HOT_MIN_WIDTH, fused.ONE_HOT_VOCAB = saved
    return points


def rule_check(lengths, budget: float, programs: list[str] | None) -> list[dict]:
    """Per library setting: the feature-major and the planned pass timed, and the rule's
    choice (``fused.applies``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import compare_tracr as ct

    from attnsim import library as a_lib
    from attnsim import rasp as a_rasp
    from attnsim.compiler import compile_program
    from attnsim.model.runtime import Runtime

    rows = []
    for name in programs or list(ct.PROGRAMS):
        build = ct.PROGRAMS[name][0]
        for vocab, n in ct.settings(name, False, True):
            if n not in lengths:
                continue
            model = compile_program(build(a_lib, a_rasp, n), vocab=vocab, max_seq_len=n)
            ids, vals = model.encode(ct.inputs(name, vocab, n))
            times = {}
            for executor in ("fused", "plan"):
                rt = Runtime(model.model, executor)
                with torch.no_grad():
                    times[executor] = least_seconds(lambda r=rt, i=ids, v=vals: r(i, v), budget)
            rule = fused.applies(Runtime(model.model), ids.shape[1])
            rows.append(
                {
                    "program": name,
                    "max_seq_len": n,
                    "fused_s": times["fused"],
                    "plan_s": times["plan"],
                    "rule_fused": bool(rule),
                }
            )
    return rows


SWEEPS = {  # name: (sweep, values, quick values, fixed d_model or None, axis)
    "DENSE_WIDTH": (product_sweep, (8, 12, 16, 24, 32, 48, 64, 96), (8, 32), None, "d_model"),
    "DENSE_SHARE": (
        product_sweep,
        (0.125, 0.25, 0.5, 0.75, 0.875, 1.0),
        (0.25, 1.0),
        64,
        "share of rows read",
    ),
    "ONE_HOT_MIN_WIDTH": (embed_sweep, (8, 13, 16, 26, 32, 64, 128), (8, 64), None, "d_model"),
    "ONE_HOT_VOCAB": (embed_sweep, (4, 16, 64, 128, 256), (4, 128), 64, "tokens"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer points, shorter timings")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--programs", help="comma-separated compare_tracr programs (the rule)")
    args = parser.parse_args(argv)
    run = Run()
    torch.set_num_threads(1)
    budget = 0.02 if args.quick else 0.2
    constants = []
    for name, (sweep, values, quick, d_fixed, axis) in SWEEPS.items():
        points = sweep(quick if args.quick else values, budget, d_fixed)
        found = break_even(points)
        value = getattr(costs, name)
        constants.append(
            {
                "constant": name,
                "value": value,
                "axis": axis,
                "points": points,
                **found,
                "consistent": consistent(value, found),
            }
        )
        print(f"{name} = {value}: {found}", flush=True)
    programs = args.programs.split(",") if args.programs else None
    lengths = RULE_LENGTHS[:1] if args.quick else RULE_LENGTHS
    rule = rule_check(lengths, budget, programs)
    write_json(
        args.out,
        {
            "machine": {**run.machine(), "cpu": cpu_model()},
            "batch": BATCH,
            "positions": POSITIONS,
            "quick": args.quick,
            "constants": constants,
            "rule": rule,
        },
    )
    return 0


def cpu_model() -> str | None:
    """The CPU's model name (Linux), else None."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


if __name__ == "__main__":
    raise SystemExit(main())
