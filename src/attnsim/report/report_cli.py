"""The ``report simulator`` and ``report all`` commands, and :func:`write_report`.

:func:`add_report_subcommands` adds both to the ``report`` command's subparsers:

- ``attnsim report simulator [--builds N,D,H ...] [--json]``: U's resource table for
  several builds next to the paper's layer counts;
- ``attnsim report all [--out docs]``: writes ``docs/report.md`` with every plot under
  ``docs/img/`` (attention patterns, residual layouts, U's size and cost).

>>> import argparse
>>> parser = argparse.ArgumentParser(prog="report")
>>> add_report_subcommands(parser.add_subparsers(dest="what"))
>>> args = parser.parse_args(["simulator", "--builds", "2,2,1"])
>>> args.builds, args.func(args)  # doctest: +ELLIPSIS
| build (N, D, H) | layout | layers | ...
([(2, 2, 1)], 0)

The plots (matplotlib) and the builds (torch) are imported inside the commands, so adding
these parsers costs nothing at start-up.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

# library programs shown in the report: (name, attention mode)
REPORT_PROGRAMS: tuple[tuple[str, str], ...] = (
    ("make_hist", "hard"),
    ("make_hist", "softmax"),
    ("make_sort_unique", "hard"),
    ("sort", "hard"),
    ("make_reverse", "hard"),
)
LAYOUT_PROGRAMS: tuple[str, ...] = ("sort", "make_reverse")
COST_JSON = Path("benchmarks") / "results" / "simulator_cost.json"
# U's builds in the resource table: (N, D, H), as attnsim.report.simulator_table.DEFAULT_BUILDS
# (not imported here: that module imports torch)
DEFAULT_BUILDS: tuple[tuple[int, int, int], ...] = ((2, 2, 1), (4, 4, 2), (8, 8, 4))


def _parse_build(text: str) -> tuple[int, int, int]:
    try:
        n, d, h = (int(v) for v in text.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"a build is N,D,H (three integers, e.g. 4,4,2), got {text!r}"
        ) from exc
    if min(n, d, h) < 1:
        raise argparse.ArgumentTypeError(f"N, D and H must be >= 1, got {text!r}")
    return n, d, h


def add_report_subcommands(report_subparsers: argparse._SubParsersAction) -> None:
    """Adds ``simulator`` and ``all`` to the ``report`` command's subparsers.

    Each sets ``func(args) -> int`` (the exit status).

    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="report")
    >>> add_report_subcommands(parser.add_subparsers(dest="what"))
    >>> parser.parse_args(["all", "--out", "somewhere"]).out
    PosixPath('somewhere')
    """
    sim = report_subparsers.add_parser(
        "simulator",
        help="the universal simulator's resources per build, next to the paper's counts",
        description="Build U for each N,D,H and print its layers, heads per layer, widths, "
        "parameters, sequence length and forward FLOPs, with the paper's layer counts.",
    )
    sim.add_argument(
        "--builds",
        type=_parse_build,
        nargs="+",
        default=list(DEFAULT_BUILDS),
        metavar="N,D,H",
        help="builds to report (default: "
        + " ".join(",".join(map(str, b)) for b in DEFAULT_BUILDS)
        + ")",
    )
    sim.add_argument("--json", action="store_true", help="print JSON")
    sim.set_defaults(func=_simulator)

    everything = report_subparsers.add_parser(
        "all",
        help="write docs/report.md with every plot (attention patterns, layouts, U's cost)",
        description="Write report.md and img/*.png into the output folder.",
    )
    everything.add_argument("--out", type=Path, default=Path("docs"), help="output folder")
    everything.add_argument(
        "--cost-json",
        type=Path,
        default=None,
        help="simulator_cost.json to plot (default: benchmarks/results/simulator_cost.json "
        "when present, else small builds are measured)",
    )
    everything.set_defaults(func=_all)


class _NoProgress:
    """Stands in for the CLI's progress display when none is given."""

    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def step(self, label: str) -> None:
        pass


def _progress(args: argparse.Namespace, prefix: str, total: int | None = None):
    """``args.progress(prefix, total=total)``: the display the CLI sets (default: none).

    The command line sets ``progress`` (with ``parser.set_defaults``) to a context manager
    factory whose value has ``step(label)``; this module does not import the CLI.
    """
    factory = getattr(args, "progress", None)
    return _NoProgress() if factory is None else factory(prefix, total=total)


def _simulator(args: argparse.Namespace) -> int:
    from attnsim.report import simulator_table as st

    rows = []
    with _progress(args, "attnsim report simulator", total=len(args.builds)) as bar:
        for n, d, h in args.builds:
            bar.step(f"building U({n},{d},{h})")
            rows += st.simulator_rows([(n, d, h)])
    if args.json:
        print(
            json.dumps(
                {
                    "builds": rows,
                    "paper": st.PAPER_COUNTS,
                    "sources": {k: v[1] for k, v in st.REFERENCE_COUNTS.items()},
                },
                indent=1,
            )
        )
    else:
        print(st.simulator_table(rows))
        print()
        print(st.paper_table())
    return 0


def _all(args: argparse.Namespace) -> int:
    with _progress(args, "attnsim report all", total=report_stages()) as bar:
        path = write_report(args.out, cost_json=args.cost_json, progress=bar.step)
    print(f"wrote {path.resolve()}")
    return 0


def report_stages(
    programs: Sequence[tuple[str, str]] = REPORT_PROGRAMS,
    layouts: Sequence[str] = LAYOUT_PROGRAMS,
) -> int:
    """How many times :func:`write_report` calls its ``progress`` (for a progress bar)."""
    from attnsim.report import plots

    return len(programs) + len(layouts) + 2 + (1 if plots.relu_maps_supported() else 0)


# what each row of a simulator_cost.json needs for the plot (plots.simulator_cost)
COST_KEYS = ("max_n", "max_heads", "parameters", "nonzero_parameters", "sequence_length")


def read_cost_rows(path: str | Path) -> list[dict]:
    """The rows (``"results"``) of a ``simulator_cost.json`` that
    ``benchmarks/simulator_cost.py`` wrote.

    Raises:
        ValueError: the file is not UTF-8 JSON with such rows; the message names it.

    >>> import tempfile
    >>> f = Path(tempfile.mkdtemp()) / "cost.json"
    >>> row = dict.fromkeys(COST_KEYS, 1)
    >>> _ = f.write_text(json.dumps({"results": [row]}))
    >>> read_cost_rows(f) == [row]
    True
    >>> _ = f.write_text("[]")
    >>> try:
    ...     read_cost_rows(f)
    ... except ValueError as exc:
    ...     print(str(exc).split(": ")[1])
    it holds no list of rows under 'results'
    """
    path = Path(path)
    what = f"{path} is not a simulator_cost.json that benchmarks/simulator_cost.py writes"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{what}: {exc}") from None
    rows = data.get("results") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{what}: it holds no list of rows under 'results'")
    for i, row in enumerate(rows):
        missing = [k for k in COST_KEYS if not isinstance(row, dict) or k not in row]
        if missing:
            raise ValueError(
                f"{what}: its row {i} lacks {len(missing)} of the {len(COST_KEYS)} keys the "
                "plot reads"
            )
    return rows


def _find_cost_json(cost_json: str | Path | None) -> Path | None:
    if cost_json is not None:
        return Path(cost_json)
    for base in (Path.cwd(), Path(__file__).resolve().parents[3]):
        if (base / COST_JSON).exists():
            return base / COST_JSON
    return None


def relu_width_measurements(
    tolerances: tuple[float, ...] = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6),
) -> list[dict]:
    """Compiles exp and 1/x with maps="relu" at each tolerance; measures the error.

    >>> rows = relu_width_measurements((1e-2,))
    >>> all(r["measured"] <= r["bound"] for r in rows)
    True
    """
    import numpy as np

    from attnsim.compiler import compile_program
    from attnsim.rasp import expr as E

    out = []
    for fn, (lo, hi) in (("exp", (-8.0, 2.0)), ("reciprocal", (0.5, 8.0))):
        x = E.numerical(E.tokens, value_range=(lo, hi))
        program = getattr(E, fn)(x)
        xs = np.linspace(lo, hi, 2001)
        want = np.asarray(_interpreted(program, xs))
        for tol in tolerances:
            model = compile_program(
                program, vocab=None, max_seq_len=len(xs), maps="relu", map_tolerance=tol
            )
            got = np.asarray(model.run(xs))
            (row,) = [r for r in model.report().realisations if r["level"] == "bounded"]
            out.append(
                {
                    "function": fn,
                    "tolerance": tol,
                    "units": row["units"],
                    "bound": tol,
                    "measured": float(np.abs(got - want).max()),
                }
            )
    return out


def _interpreted(program, xs):  # the exact values, by the interpreter
    from attnsim.rasp import interpret

    return interpret.evaluate(program, list(xs))


def write_report(
    out_dir: str | Path = "docs",
    *,
    cost_json: str | Path | None = None,
    programs: Sequence[tuple[str, str]] = REPORT_PROGRAMS,
    layouts: Sequence[str] = LAYOUT_PROGRAMS,
    builds: Sequence[tuple[int, int, int]] = DEFAULT_BUILDS,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Writes ``out_dir/report.md`` and its plots under ``out_dir/img/``.

    Args:
        out_dir: the output folder (default ``docs``).
        cost_json: a ``simulator_cost.json`` to plot U's cost from; default: the benchmark's
            result when it exists, else sizes of small builds measured now.
        programs: ``(library program, attention mode)`` pairs whose attention patterns are
            drawn on the program's example input.
        layouts: library programs whose residual layout is drawn.
        builds: U builds for the resource table.
        progress: called with a label as each stage starts (:func:`report_stages` of them).

    Returns:
        The path of ``report.md``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:  # doctest: +SKIP
    ...     write_report(tmp).name
    'report.md'
    """
    from attnsim.compiler import compile_program
    from attnsim.rasp import library
    from attnsim.report import plots
    from attnsim.report import simulator_table as st

    step = progress if progress is not None else (lambda label: None)
    out = Path(out_dir)
    img = out / "img"
    img.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    lines = [
        "<!-- Generated by `attnsim report all` (attnsim.report.report_cli.write_report). "
        "Do not edit by hand. -->",
        "",
        "# attnsim report",
        "",
        "Pictures of compiled models (attention patterns, residual stream layout) and of the "
        "universal simulator U (its resources per build and its cost against n = d).",
        "",
        "## Attention patterns of compiled library programs",
        "",
        "Each panel is one head with non-zero output weights: rows are queries, columns keys, "
        "position 0 is BOS. Hard attention averages over the keys with the best score; "
        "softmax mode uses the compiler's inverse temperature, so its patterns match the hard "
        "ones to within the stated leak bound.",
        "",
    ]
    compiled = {}
    for name, mode in programs:
        step(f"compiling {name} ({mode} attention) and drawing its patterns")
        entry = library.PROGRAMS[name]
        model = compile_program(
            entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len, attention=mode
        )
        compiled[(name, mode)] = model
        file = f"attention_{name}_{mode}.png"
        fig = plots.attention_patterns(model, entry.example, name=name, path=img / file)
        plots.close(fig)
        r = model.report()
        output = model.run(entry.example)
        lines += [
            f"### `{name}` ({mode} attention)",
            "",
            f"Input `{entry.example}` gives `{output}`. {r.layers} "
            f"layer{'s' if r.layers != 1 else ''}, heads per layer "
            f"{r.heads_per_layer}, d_model {r.d_model}, {r.parameters:,} parameters.",
            "",
            f"![attention patterns of {name}, {mode}](img/{file})",
            "",
        ]
    lines += [
        "## Residual stream layout",
        "",
        "Which named subspace (S-op) owns which residual dimensions; the number beside a bar is "
        "its width.",
        "",
    ]
    for name in layouts:
        step(f"drawing the residual layout of {name}")
        model = compiled.get((name, "hard"))
        if model is None:
            entry = library.PROGRAMS[name]
            model = compile_program(
                entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len
            )
        file = f"residual_{name}.png"
        plots.close(plots.residual_layout(model, name=name, path=img / file))
        lines += [f"![residual layout of {name}](img/{file})", ""]

    step("building U for " + " ".join(f"({n},{d},{h})" for n, d, h in builds))
    rows = st.simulator_rows(builds)
    lines += [
        "## The universal simulator U",
        "",
        "U's resources per build (layers count one attention sublayer plus its MLP; FLOPs are "
        "for one dense forward pass), next to reference counts: the authors' demo code runs "
        "the simulator of one head as separate stages whose layers sum to about 13; about 8 "
        "if fused is our estimate, not the paper's. The paper's own counts (Table 1) are "
        "transpose 2, matmul 3 and inverse 5 attention layers.",
        "",
        st.simulator_table(rows),
        "",
        st.paper_table(),
        "",
    ]
    step("plotting U's size and cost")
    source = _find_cost_json(cost_json)
    if source is not None and source.exists():
        cost_rows = read_cost_rows(source)
        where = f"measured by `benchmarks/simulator_cost.py` (`{source.name}`)"
    else:
        cost_rows = st.simulator_rows([(n, n, 1) for n in (2, 4, 8)], layouts=["scalar"])
        where = "computed now for small builds (run `benchmarks/simulator_cost.py` for timings)"
    plots.close(plots.simulator_cost(cost_rows, path=img / "simulator_cost.png"))
    lines += [
        f"U's size and cost against n = d, {where}:",
        "",
        "![U size and cost](img/simulator_cost.png)",
        "",
        "## Bounded maps: error against ReLU width",
        "",
    ]
    if plots.relu_maps_supported():
        step("compiling exp and 1/x as ReLU maps at five tolerances")
        rows = relu_width_measurements()
        for fn in sorted({r["function"] for r in rows}):
            pts = [(r["units"], r["measured"]) for r in rows if r["function"] == fn]
            plots.close(plots.relu_width_error(pts, function=fn, path=img / f"relu_{fn}.png"))
            lines += [f"![ReLU {fn}](img/relu_{fn}.png)", ""]
        lines += [
            'Each map is compiled with `maps="relu"` at several tolerances and run on 2,001 '
            "evenly spaced inputs of its declared range (exp on [-8, 2], 1/x on [0.5, 8]); "
            "the measured error stays below the certified bound the compiler reports.",
            "",
            "| function | tolerance | ReLU units | certified bound | measured max error |",
            "|---|---|---|---|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['function']} | {r['tolerance']:g} | {r['units']} | {r['bound']:.3g} | "
                f"{r['measured']:.3g} |"
            )
        lines.append("")
    else:
        lines += [
            'Not drawn: the compiler does not offer `maps="relu"` (ReLU-only realisations of '
            "exp, 1/x and sqrt) yet; maps are realised natively (exact), see the design notes.",
            "",
        ]
    lines += [f"Generated in {time.perf_counter() - started:.1f} s.", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
