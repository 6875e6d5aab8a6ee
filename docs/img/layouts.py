"""Draws docs/img/layouts.png: U's two sequence layouts for one build, side by side.

Left, the scalar layout (:class:`attnsim.simulator.layout.Layout`, the paper's: one real
number per position); right, the vector layout
(:class:`attnsim.simulator.vector_layout.VectorLayout`: one token of ``width`` channels per
position). Each row is one input region or scratch role, drawn as the positions it occupies;
the scratch roles reuse positions from 0. Both panels use the same position scale, and the
strip under each shows the whole sequence as a positions x channels array at one scale, so
the vector layout's sequence shows as shorter and wider. Every number comes from the layout
classes.

The picture is 1600 x 850 pixels and the same bytes on every run with one matplotlib (Agg
backend, no timestamp or version in the PNG's metadata). Its ``Description`` metadata holds
:func:`describe`, the text of what it draws, so that a test can tell a stale picture.

Usage: python docs/img/layouts.py [OUTPUT.png]   (default: beside this script)
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # _figure.py beside this script

import _figure  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

from attnsim.simulator.layout import SCRATCH_ROLES, Layout  # noqa: E402
from attnsim.simulator.vector_layout import VectorLayout  # noqa: E402

BUILD = (3, 4, 2, 8)  # N, D, H, F: an encoder layer, so that every region shows
WIDTH, HEIGHT, DPI = 1600, 850, 100  # pixels
INPUT = "#9ec5e8"  # an input region (written by the codec)
SCRATCH = "#f6c48f"  # a scratch role (reuses positions from 0)
WHOLE = "#cfd8dc"  # the whole sequence (the strips)
EDGE = "#34495e"
MONO = "DejaVu Sans Mono"

# panel geometry in pixels from the top left: bars, then the positions x channels strip
PANEL_LEFT = (130, 930)
PANEL_WIDTH = 600
BARS_TOP, BARS_HEIGHT = 95, 590
STRIP_TOP = 768


def scalar_regions(lay: Layout) -> list[tuple[str, int, int, bool]]:
    """``(name, first position, positions, is scratch)`` of every region of the scalar
    layout, in the order of ``Layout.diagram``."""
    scratch = SCRATCH_ROLES[: 4 if lay.F else 3]
    return [(r, lay.starts[r], lay.sizes[r], r in scratch) for r in lay.input_roles + scratch]


def vector_regions(lay: VectorLayout) -> list[tuple[str, int, int, bool, str]]:
    """``(name, first position, positions, is scratch, what)`` of every region of the vector
    layout (``VectorLayout.regions``)."""
    return [(n, s, k, w.startswith("scratch"), w) for n, s, k, w in lay.regions()]


def describe(build: tuple[int, int, int, int] = BUILD) -> str:
    """The text of what the picture draws (kept in the PNG's ``Description``)."""
    scalar, vector = Layout(*build), VectorLayout(*build)
    lines = [
        f"build N={build[0]} D={build[1]} H={build[2]} F={build[3]}",
        f"scalar: {scalar.length} positions x 1 number",
    ]
    lines += [f"  {n} {s} {k}{' scratch' if x else ''}" for n, s, k, x in scalar_regions(scalar)]
    lines.append(f"vector: {vector.length} positions x {vector.width} channels")
    lines += [f"  {n} {s} {k}{' scratch' if x else ''}" for n, s, k, x, _ in vector_regions(vector)]
    return "\n".join(lines)


def _axes(fig, left: float, top: float, width: float, height: float):
    """Axes at a pixel rectangle (from the figure's top left)."""
    return fig.add_axes((left / WIDTH, 1 - (top + height) / HEIGHT, width / WIDTH, height / HEIGHT))


def _bars(ax, rows: list[tuple], length: int, xmax: int, describe_rows: bool) -> None:
    """One bar per region, top to bottom; a dashed line at the sequence length."""
    ax.set_xlim(0, xmax)
    ax.set_ylim(len(rows) - 0.4, -0.6)
    for y, row in enumerate(rows):
        name, start, size, scratch = row[:4]
        ax.add_patch(
            Rectangle(
                (start, y - 0.36),
                size,
                0.72,
                facecolor=SCRATCH if scratch else INPUT,
                edgecolor=EDGE,
                linewidth=0.8,
            )
        )
        label = f"{start}..{start + size - 1}"
        if describe_rows:  # a column right of the sequence's end, where nothing is drawn
            label = f"{label:<8} {row[4]}"
            ax.text(length + xmax * 0.02, y, label, va="center", size=9, family=MONO)
        else:
            ax.text(start + size + xmax * 0.008, y, label, va="center", size=9, family=MONO)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r[0]} ({r[2]})" for r in rows], family=MONO, size=10)
    ax.tick_params(axis="y", length=0)
    ax.axvline(length, color=EDGE, linestyle="--", linewidth=1.2)
    ax.text(
        length,
        -0.75,
        f"length {length}",
        ha="right" if length > xmax * 0.8 else "left",
        va="bottom",
        size=10,
        style="italic",
    )
    ax.set_xlabel("position in U's input sequence (BOS not counted)", size=10)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _strip(ax, length: int, width: int, xmax: int, channels: int, title: str) -> None:
    """The sequence as a positions x channels array (one unit per position and channel)."""
    ax.set_xlim(0, xmax)
    ax.set_ylim(channels, 0)
    ax.add_patch(Rectangle((0, 0), length, width, facecolor=WHOLE, edgecolor=EDGE, linewidth=0.8))
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    ax.text(0, -0.5, title, va="bottom", size=10)


def draw(path: Path, build: tuple[int, int, int, int] = BUILD) -> Path:
    """Draws the picture into ``path`` (a PNG) and returns it."""
    scalar, vector = Layout(*build), VectorLayout(*build)
    xmax = max(scalar.length, vector.length)
    channels = max(vector.width, 1)
    fig = plt.figure(figsize=(WIDTH / DPI, HEIGHT / DPI), dpi=DPI)
    N, D, H, F = build
    fig.text(
        0.5,
        1 - 24 / HEIGHT,
        f"U's input sequence for one build (N={N}, D={D}, H={H}, F={F}): "
        "the two layouts at one position scale",
        ha="center",
        va="center",
        size=16,
        weight="bold",
    )
    panels = [
        (
            scalar_regions(scalar),
            scalar.length,
            1,
            f'scalar layout (the paper\'s, layout="scalar"): {scalar.length} positions, '
            "one number each",
            False,
        ),
        (
            vector_regions(vector),
            vector.length,
            vector.width,
            f'vector layout (the default, layout="vector"): {vector.length} positions, '
            f"tokens of {vector.width} channels",
            True,
        ),
    ]
    px_per_position = PANEL_WIDTH / xmax
    strip_height = channels * px_per_position
    for left, (rows, length, width, title, describe_rows) in zip(PANEL_LEFT, panels):
        fig.text((left - 110) / WIDTH, 1 - 66 / HEIGHT, title, ha="left", va="center", size=12.5)
        ax = _axes(fig, left, BARS_TOP, PANEL_WIDTH, BARS_HEIGHT)
        _bars(ax, rows, length, xmax, describe_rows)
        strip = _axes(fig, left, STRIP_TOP, PANEL_WIDTH, strip_height)
        _strip(
            strip,
            length,
            width,
            xmax,
            channels,
            f"the whole sequence: {length} positions x "
            f"{'1 number' if width == 1 else f'{width} channels'} (one scale for both axes)",
        )
    fig.legend(
        handles=[
            Patch(facecolor=INPUT, edgecolor=EDGE, label="input region (the codec writes it)"),
            Patch(facecolor=SCRATCH, edgecolor=EDGE, label="scratch role (reuses positions)"),
        ],
        loc="lower center",
        ncol=2,
        frameon=False,
        fontsize=11,
        bbox_to_anchor=(0.5, 0.0),
    )
    return _figure.save(fig, path, DPI, describe(build))


def main(argv: list[str] | None = None) -> int:
    return _figure.main(draw, __file__, argv)


if __name__ == "__main__":
    sys.exit(main())
