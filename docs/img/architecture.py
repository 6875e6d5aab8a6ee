"""Draws docs/img/architecture.png: the compile pipeline and the run / simulate path.

Each box is a stage, named by its module under ``src/attnsim``; each arrow is labelled with
the value one stage passes to the next. The picture is 1600 x 700 pixels and the same bytes
on every run (Agg backend, no timestamp or version in the PNG's metadata).

Usage: python docs/img/architecture.py [OUTPUT.png]   (default: beside this script)
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # _figure.py beside this script

import _figure  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

WIDTH, HEIGHT, DPI = 1600, 700, 100  # pixels; the axes use pixel coordinates, y down
COMPILE = "#dbe9f6"  # compile row
RUN = "#dff0d8"  # CompiledModel.run (upper half of the lower row)
SIM = "#fbe5c8"  # UniversalSimulator.simulate (lower half of the lower row)
EDGE = "#34495e"
MONO = "DejaVu Sans Mono"

# the compile row: (title, lines), left to right, and the value each arrow passes on
COMPILE_STAGES = [
    ("RASP program", ["an S-op", "(rasp.expr), or", "U's program", "(simulator.", "programs)"]),
    ("tracing", ["trace()", "check_size()"]),
    ("value_inference", ["infer()", "static S-ops go", "into the embedding"]),
    ("lowering/", ["lower()", "forms, maps,", "selectors,", "aggregates", "(ir/ constructions)"]),
    ("scheduling", ["schedule()", "place() slots,", "group() heads"]),
    (
        "assembly",
        ["assemble()", "dense weights:", "W_E, W_pos,", "W_Q, W_K, W_V,", "W_O, W_in, W_out"],
    ),
    ("guards, package", ["runtime_guards()", "assembly.", "package()", "report and", "components"]),
]
COMPILE_DATA = [
    ["S-op"],
    ["Graph"],
    ["Value", "Inference:", "value sets"],
    ["Lowered", "Program"],
    ["Schedule", "(layers)"],
    ["Transformer", "(weights)"],
]

# the lower row: (title, CompiledModel.run lines, UniversalSimulator.simulate lines)
RUN_STAGES = [
    (
        "call",
        ["CompiledModel.run(xs)"],
        ["U.simulate(T, X)", "U = build(config)", "(SimulatorConfig)"],
    ),
    ("encode", ["model/codec.py", "encode()"], ["checks.prepare()", "codec.pack() <T, X>"]),
    (
        "forward",
        ["Transformer.forward", "executor: 'plan'", "(model/plans.py)", "or 'dense'"],
        ["the same forward", "on U's sequence"],
    ),
    ("checks", ["model/checks.py", "check_guards()", "check_blocks()"], ["checks.check_guard()"]),
    ("decode", ["model/codec.py", "decode()"], ["codec.unpack_output()"]),
    ("result", ["values, as the", "interpreter gives"], ["T(X)", "[n, d] float64"]),
]
RUN_DATA = [
    ["input"],
    ["ids, values", "[batch, pos]"],
    ["residual", "streams"],
    ["final", "resid"],
    ["values"],
]


def _box(ax, x, y, w, h, color, title, lines, title_size=12):
    ax.add_patch(
        FancyBboxPatch(
            (x, y),
            w,
            h,
            boxstyle="round,pad=0,rounding_size=10",
            facecolor=color,
            edgecolor=EDGE,
            linewidth=1.6,
        )
    )
    if title:
        ax.text(x + w / 2, y + 18, title, ha="center", va="center", weight="bold", size=title_size)
    top = y + (40 if title else 20)
    for i, line in enumerate(lines):
        ax.text(x + w / 2, top + 17 * i, line, ha="center", va="center", size=9.5, family=MONO)


def _arrow(ax, x0, y0, x1, y1, label=None):
    ax.annotate(
        "",
        xy=(x1, y1),
        xytext=(x0, y0),
        arrowprops={"arrowstyle": "-|>", "color": EDGE, "lw": 1.8, "mutation_scale": 18},
    )
    if label:
        ax.text(
            (x0 + x1) / 2,
            y0 - 10,
            "\n".join(label),
            ha="center",
            va="bottom",
            size=9.5,
            style="italic",
        )


def _row(n, w, left, right):
    """The left edges of n boxes of width w spread evenly from left to right."""
    gap = (right - left - n * w) / (n - 1)
    return [left + i * (w + gap) for i in range(n)]


def draw(path: Path) -> Path:
    """Draws the picture into ``path`` (a PNG) and returns it."""
    fig = plt.figure(figsize=(WIDTH / DPI, HEIGHT / DPI), dpi=DPI)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, WIDTH)
    ax.set_ylim(HEIGHT, 0)
    ax.axis("off")
    ax.text(
        WIDTH / 2,
        24,
        "attnsim: the compile pipeline (top) and the run / simulate path (bottom)",
        ha="center",
        va="center",
        size=16,
        weight="bold",
    )

    # compile row
    y1, h1, w1 = 58, 150, 152
    xs = _row(len(COMPILE_STAGES), w1, 55, 1575)
    ax.text(28, y1 + h1 / 2, "compile", rotation=90, ha="center", va="center", size=14)
    for x, (title, lines) in zip(xs, COMPILE_STAGES):
        _box(ax, x, y1, w1, h1, COMPILE, title, lines, title_size=11)
    for i, label in enumerate(COMPILE_DATA):
        a, b = xs[i] + w1, xs[i + 1]
        _arrow(ax, a + 4, y1 + h1 / 2 + 20, b - 4, y1 + h1 / 2 + 20, label)

    # run / simulate row: each box split in the CompiledModel half and the U half
    y2, h2, w2 = 340, 270, 190
    hx = _row(len(RUN_STAGES), w2, 55, 1575)
    ax.text(28, y2 + h2 / 2, "run / simulate", rotation=90, ha="center", va="center", size=14)
    split = 150  # height of the upper (CompiledModel.run) half
    for x, (title, run_lines, sim_lines) in zip(hx, RUN_STAGES):
        _box(ax, x, y2, w2, split, RUN, title, run_lines)
        _box(ax, x, y2 + split, w2, h2 - split, SIM, None, sim_lines)
    for i, label in enumerate(RUN_DATA):
        a, b = hx[i] + w2, hx[i + 1]
        _arrow(ax, a + 4, y2 + split, b - 4, y2 + split, label)
    ax.text(
        hx[0] + w2 / 2,
        y2 + h2 + 22,
        "green: CompiledModel.run        orange: UniversalSimulator.simulate",
        ha="left",
        va="center",
        size=11,
    )

    # the compiled model (or U, compiled once by simulator.build) feeds the forward box
    last = xs[-1] + w1 / 2
    mid = y1 + h1 + 60
    fwd = hx[2] + w2 / 2
    ax.plot([last, last, fwd + 40], [y1 + h1 + 4, mid, mid], color=EDGE, lw=1.8)
    _arrow(ax, fwd + 40, mid, fwd + 40, y2 - 4)
    ax.text(
        last - 14,
        mid - 8,
        "CompiledModel: weights, residual labels, OutputSpec, GuardSpecs "
        "(save / load: safetensors + JSON)",
        ha="right",
        va="bottom",
        size=10.5,
        style="italic",
    )
    # U: simulator.build compiles U's RASP program once, through the row above
    ux = xs[0] + 40
    ax.annotate(
        "",
        xy=(ux, y1 + h1 + 4),
        xytext=(ux, y2 - 4),
        arrowprops={"arrowstyle": "-|>", "color": EDGE, "lw": 1.8, "ls": "--"},
    )
    ax.text(
        ux + 12,
        (y1 + h1 + y2) / 2 + 12,
        "U: simulator.build(config) compiles\nprograms.program(layout) once",
        ha="left",
        va="center",
        size=10.5,
        style="italic",
    )

    return _figure.save(fig, path, DPI)


def main(argv: list[str] | None = None) -> int:
    return _figure.main(draw, __file__, argv)


if __name__ == "__main__":
    sys.exit(main())
