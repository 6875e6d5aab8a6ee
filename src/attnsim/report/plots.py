"""Figures for the report: attention patterns, residual layout, the simulator's cost.

Every function returns a :class:`matplotlib.figure.Figure` (Agg backend, no window) and, when
given ``path``, writes it as a PNG. Every figure has a title, axis labels and units.

- :func:`attention_patterns`: each active head's attention pattern of a compiled model on one
  input (from ``run_with_cache``), one panel per (layer, head);
- :func:`residual_layout`: which named subspace (S-op) occupies which residual dimensions;
- :func:`simulator_cost`: U's size and cost against the build size n = d;
- :func:`relu_width_error`: the error of bounded maps against ReLU width, when the compiler
  offers ``maps="relu"`` (:func:`relu_maps_supported` says whether it does).

>>> from attnsim.compiler import compile_program
>>> from attnsim.rasp import library
>>> model = compile_program(library.make_hist(), vocab=["a", "b"], max_seq_len=4)
>>> fig = residual_layout(model)
>>> fig.axes[0].get_title()
'Residual stream layout of hist (d_model = 10)'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from attnsim.model.compiled import CompiledModel  # noqa: E402

MAX_HEAD_COLUMNS = 8  # panels per row in attention_patterns


def _save(fig: Figure, path: str | Path | None) -> Figure:
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=90, bbox_inches="tight")
    return fig


def _label(token: Any) -> str:
    return str(token)


def attention_patterns(
    model: CompiledModel,
    example: Sequence[Any],
    *,
    name: str | None = None,
    path: str | Path | None = None,
) -> Figure:
    """Heatmaps of every active head's attention pattern on ``example``.

    One panel per (layer, head) with non-zero output weights; rows are queries and columns
    keys, position 0 is BOS. In hard mode a query's weights are spread evenly over the keys
    with the best score; in softmax mode they are the softmax weights.

    Args:
        model: a compiled model.
        example: one input sequence.
        name: the program's name for the title (default: the model report's name).
        path: where to write the PNG (optional).

    Returns:
        The figure; ``fig.axes[0].get_title()`` names layer 0's first active head.

    >>> from attnsim.compiler import compile_program
    >>> from attnsim.rasp import library
    >>> model = compile_program(library.make_hist(), vocab=["a", "b"], max_seq_len=4)
    >>> fig = attention_patterns(model, ["a", "b", "a"])
    >>> fig._suptitle.get_text()
    "Attention patterns of hist on ['a', 'b', 'a'] (attention = hard)"
    >>> fig.axes[0].get_title(), fig.axes[0].get_xlabel()
    ('layer 0, head 0', 'key position (0 = BOS)')
    """
    _, cache = model.run_with_cache(list(example), check=False)
    panels = []
    for layer, block in enumerate(model.model.blocks):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0]  # [head, query, key]
        for head in block.attn.active_heads().tolist():
            panels.append((layer, head, pattern[head].numpy()))
    title = name or _model_name(model)
    mode = model.config.attention.value
    ticks = ["BOS"] + [_label(t) for t in example]
    cols = max(1, min(MAX_HEAD_COLUMNS, len(panels)))
    rows = max(1, math.ceil(len(panels) / cols))
    size = 0.35 * len(ticks) + 1.6
    fig, axes = plt.subplots(
        rows, cols, figsize=(cols * size + 1.0, rows * size + 0.9), squeeze=False
    )
    image = None
    for ax, (layer, head, pat) in zip(axes.flat, panels):
        image = ax.imshow(pat, vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_title(f"layer {layer}, head {head}", fontsize=9)
        ax.set_xlabel("key position (0 = BOS)", fontsize=8)
        ax.set_ylabel("query position", fontsize=8)
        ax.set_xticks(range(len(ticks)), ticks, fontsize=7, rotation=90)
        ax.set_yticks(range(len(ticks)), ticks, fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    if not panels:
        axes.flat[0].set_title("no attention heads", fontsize=9)
        axes.flat[0].set_xlabel("key position (0 = BOS)", fontsize=8)
        axes.flat[0].set_ylabel("query position", fontsize=8)
    fig.subplots_adjust(wspace=0.5, hspace=0.6)
    fig.suptitle(f"Attention patterns of {title} on {list(example)} (attention = {mode})")
    if image is not None:
        bar = fig.colorbar(image, ax=list(axes.flat), shrink=0.8)
        bar.set_label("attention weight (fraction of the query's attention)")
    return _save(fig, path)


def _model_name(model: CompiledModel) -> str:
    try:
        return model.report().name
    except ValueError:
        return "model"


def subspace_groups(labels: Sequence[str]) -> list[tuple[str, int, int]]:
    """Runs of residual directions that belong to one named subspace.

    A label ``"name:value"`` or ``"name@inv"`` belongs to ``name``; other labels (``"bos"``)
    are their own group. Returns ``(name, start, stop)`` runs in residual order.

    >>> subspace_groups(["bos", "tokens:'a'", "tokens:'b'", "hist@inv", "hist:0"])
    [('bos', 0, 1), ('tokens', 1, 3), ('hist', 3, 5)]
    """
    runs: list[tuple[str, int, int]] = []
    for i, label in enumerate(labels):
        name = label.split(":", 1)[0].split("@", 1)[0]
        if runs and runs[-1][0] == name and runs[-1][2] == i:
            runs[-1] = (name, runs[-1][1], i + 1)
        else:
            runs.append((name, i, i + 1))
    return runs


def residual_layout(
    model: CompiledModel, *, name: str | None = None, path: str | Path | None = None
) -> Figure:
    """Where each named subspace lives in the residual stream (one row per S-op).

    Args:
        model: a compiled model (its ``residual`` direction labels are read).
        name: the program's name for the title.
        path: where to write the PNG (optional).

    Returns:
        The figure: x is the residual dimension, each row one S-op (or ``bos``), with a bar
        over the dimensions it owns and its width written beside.

    >>> from attnsim.compiler import compile_program
    >>> from attnsim.rasp import library
    >>> model = compile_program(library.make_length(), vocab=["a"], max_seq_len=3)
    >>> residual_layout(model).axes[0].get_xlabel()
    'residual dimension (index, 0 .. d_model - 1)'
    """
    runs = subspace_groups(model.residual)
    names = list(dict.fromkeys(r[0] for r in runs))
    width = {n: 0 for n in names}
    for n, a, b in runs:
        width[n] += b - a
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(names) + 1.6))
    colors = plt.get_cmap("tab20")
    for row, group in enumerate(names):
        spans = [(a, b - a) for n, a, b in runs if n == group]
        ax.broken_barh(spans, (row - 0.4, 0.8), color=colors(row % 20))
        end = max(a + w for a, w in spans)
        ax.text(end + 0.5, row, f"{width[group]}", va="center", fontsize=8)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    d_model = len(model.residual)
    ax.set_xlim(0, d_model * 1.06 + 1)
    ax.set_xlabel("residual dimension (index, 0 .. d_model - 1)")
    ax.set_ylabel("named subspace (S-op)")
    title = name or _model_name(model)
    ax.set_title(f"Residual stream layout of {title} (d_model = {d_model})")
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def simulator_cost(rows: Sequence[dict], *, path: str | Path | None = None) -> Figure:
    """U's size and cost against the build size n = d (log-log), one line per head count.

    Args:
        rows: dicts with ``max_n``, ``max_heads``, ``parameters``, ``nonzero_parameters``,
            ``sequence_length``, ``d_model`` and, when present, ``flops_U`` (or ``flops``),
            ``simulate_seconds`` and ``direct_seconds`` (the rows of
            ``benchmarks/results/simulator_cost.json`` or of
            :func:`attnsim.report.simulator_table.simulator_rows`).
        path: where to write the PNG (optional).

    Returns:
        The figure: panels for parameters, sequence length and d_model, forward FLOPs, and
        wall time when measured.

    >>> rows = [dict(max_n=n, max_heads=1, parameters=9 * n**3, nonzero_parameters=n**3,
    ...              sequence_length=3 * n * n, d_model=20 * n, flops=n**5) for n in (2, 4)]
    >>> fig = simulator_cost(rows)
    >>> [ax.get_title() for ax in fig.axes[:2]]
    ['U parameters', 'U sequence length and residual width']
    """
    by_heads: dict[int, list[dict]] = {}
    for r in rows:
        by_heads.setdefault(r["max_heads"], []).append(r)
    for rs in by_heads.values():
        rs.sort(key=lambda r: r["max_n"])
    timed = any("simulate_seconds" in r for r in rows)
    ncols = 4 if timed else 3
    fig, axes = plt.subplots(1, ncols, figsize=(4.2 * ncols, 3.8))

    def line(ax, key, label, style="o-"):
        for h, rs in sorted(by_heads.items()):
            pts = [(r["max_n"], r[key]) for r in rs if r.get(key)]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, style, label=f"{label}, H = {h}")

    ax = axes[0]
    line(ax, "parameters", "all")
    line(ax, "nonzero_parameters", "nonzero", "s--")
    ax.set_title("U parameters")
    ax.set_ylabel("parameters (count)")
    ax = axes[1]
    line(ax, "sequence_length", "sequence length")
    line(ax, "d_model", "d_model", "s--")
    ax.set_title("U sequence length and residual width")
    ax.set_ylabel("positions / dimensions (count)")
    ax = axes[2]
    key = "flops_U" if any("flops_U" in r for r in rows) else "flops"
    line(ax, key, "U (dense)" if "flops_U_plan" in rows[0] else "U")
    if any("flops_U_plan" in r for r in rows):
        line(ax, "flops_U_plan", "U (plan)", "^-")
    line(ax, "flops_direct", "direct attention", "s--")
    ax.set_title("Forward FLOPs (one target)")
    ax.set_ylabel("FLOPs (count)")
    if timed:
        ax = axes[3]
        dense = any(r.get("simulate_seconds_dense") for r in rows)
        line(ax, "simulate_seconds", "U (plan)" if dense else "U")
        if dense:
            line(ax, "simulate_seconds_dense", "U (dense)", "^-")
        line(ax, "direct_seconds", "direct attention", "s--")
        ax.set_title("Wall time per simulated target")
        ax.set_ylabel("seconds")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("build size n = d (rows = width of X)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.suptitle("Universal simulator U: size and cost against n = d")
    fig.tight_layout()
    return _save(fig, path)


def relu_maps_supported() -> bool:
    """Whether ``compile_program(..., maps="relu")`` is accepted by the compiler.

    >>> isinstance(relu_maps_supported(), bool)
    True
    """
    from attnsim.compiler import compile_program
    from attnsim.rasp import expr as E

    program = E.exp(E.numerical(E.tokens, value_range=(-1.0, 1.0)))
    try:
        compile_program(program, vocab=None, max_seq_len=2, maps="relu")
    except (ValueError, NotImplementedError, TypeError):
        return False
    return True


def relu_width_error(
    points: Sequence[tuple[int, float]],
    *,
    function: str = "exp",
    path: str | Path | None = None,
) -> Figure:
    """The worst-case error of a ReLU-realised map against its hidden width (log-log).

    Args:
        points: ``(ReLU units, max absolute error)`` pairs, measured by the caller.
        function: the map's name, for the title.
        path: where to write the PNG (optional).

    >>> relu_width_error([(4, 0.1), (16, 0.006)]).axes[0].get_ylabel()
    'max absolute error on the declared range'
    """
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    if points:
        xs, ys = zip(*sorted(points))
        ax.plot(xs, ys, "o-")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
    ax.set_xlabel("ReLU units (hidden width)")
    ax.set_ylabel("max absolute error on the declared range")
    ax.set_title(f"Error of {function} realised with ReLU units")
    ax.grid(alpha=0.3, which="both")
    return _save(fig, path)


def close(fig: Figure) -> None:
    """Releases a figure's memory (pyplot keeps figures until closed).

    >>> close(relu_width_error([]))
    """
    plt.close(fig)


__all__ = [
    "attention_patterns",
    "residual_layout",
    "simulator_cost",
    "subspace_groups",
    "relu_maps_supported",
    "relu_width_error",
    "close",
]


def computation_graph(
    model: CompiledModel,
    edges: Sequence[tuple[str, str]],
    *,
    name: str | None = None,
    path: str | Path | None = None,
) -> Figure:
    """The program's computation graph, each expression placed at and coloured by its layer.

    Nodes are the expressions ``edges`` names (``(child label, parent label)`` pairs: the
    parent reads the child), labelled with the components that realise them according to
    ``model.components()`` (``embed``, ``L1H0``, ``L0 MLP relu 3-7``; expressions with none
    are folded into their readers' weights). The layout is layered: the rows are the model's
    stages (embedding, then each layer's attention and MLP), an expression sits at the stage
    of its last component, and nodes are spread evenly within a row.

    Args:
        model: a compiled model with a component table.
        edges: the dependencies, by label (see ``attnsim.compiler.tracing``: for a traced
            graph, ``(labels[c.uid], labels[n.uid])`` for every node ``n`` and child ``c``).
        name: the title (default: the model's name).
        path: where to write a PNG.

    >>> from attnsim.compiler import compile_program, tracing
    >>> from attnsim.rasp import library
    >>> model = compile_program(library.make_hist(), vocab=["a", "b"], max_seq_len=4)
    >>> g = tracing.trace(library.make_hist())
    >>> edges = [(g.labels[c.uid], g.labels[u]) for u in g.order for c in g.nodes[u].children]
    >>> fig = computation_graph(model, edges)
    >>> fig.axes[0].get_title()
    'Computation graph of hist (colour: layer)'
    """
    table = model.components()
    where: dict[str, list[str]] = {}
    stage: dict[str, int] = {}
    for c in table:
        if c.site == "output":
            continue
        s = 0 if c.site == "embed" else 2 * c.layer + (1 if c.site == "attn" else 2)
        for lb in c.labels:
            where.setdefault(lb, []).append(c.name)
            stage[lb] = max(stage.get(lb, 0), s)
    for c in table:  # an Aggregate or SelectorWidth sits at its head
        if c.site == "attn":
            for lb in c.labels:
                stage[lb] = min(stage[lb] if stage[lb] % 2 else 10**9, 2 * c.layer + 1)
    nodes = list(dict.fromkeys([x for e in edges for x in e]))
    parents: dict[str, list[str]] = {n: [] for n in nodes}
    for child, parent in edges:
        parents[child].append(parent)
    # an expression with no component of its own (a selector, a virtual map) sits at the
    # stage of the inputs it combines: the largest stage among what it reads
    reads: dict[str, list[str]] = {n: [] for n in nodes}
    for child, parent in edges:
        reads[parent].append(child)

    def level(n: str, seen: frozenset = frozenset()) -> int:
        if n in stage:
            return stage[n]
        if n in seen:
            return 0
        below = max([level(c, seen | {n}) for c in reads[n]] + [0])
        above = [level(p, seen | {n}) for p in parents[n]]
        # a selector (or a virtual map): just below the first expression that reads it
        return max(below, min(above) - 1) if above else below

    rows: dict[int, list[str]] = {}
    for n in nodes:
        rows.setdefault(level(n), []).append(n)
    pos = {}
    for y, members in rows.items():
        for i, n in enumerate(sorted(members)):
            pos[n] = ((i + 1) / (len(members) + 1), y)
    n_layers = model.config.n_layers
    cmap = plt.get_cmap("viridis", max(n_layers + 1, 2))
    height = 1.2 * (max(rows) + 1) + 1
    width = max(8.0, 2.6 * max(len(m) for m in rows.values()))
    fig, ax = plt.subplots(figsize=(width, height))
    for child, parent in edges:
        (x0, y0), (x1, y1) = pos[child], pos[parent]
        ax.annotate(
            "",
            xy=(x1, y1),
            xytext=(x0, y0),
            arrowprops={"arrowstyle": "->", "color": "0.5", "shrinkA": 14, "shrinkB": 14},
        )
    for n, (x, y) in pos.items():
        layer = (level(n) + 1) // 2  # 0: embedding, l + 1: layer l
        comps = where.get(n)
        text = (
            n
            + "\n"
            + (
                ", ".join(comps[:3]) + (" ..." if len(comps) > 3 else "")
                if comps
                else "(in readers' weights)"
            )
        )
        ax.text(
            x,
            y,
            text,
            ha="center",
            va="center",
            fontsize=8,
            bbox={"boxstyle": "round", "facecolor": cmap(layer), "alpha": 0.45},
        )
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.7, max(rows) + 0.7)
    ax.set_yticks(range(max(rows) + 1))
    ax.set_yticklabels(
        ["embed"]
        + [f"L{(s - 1) // 2} {'attn' if s % 2 else 'mlp'}" for s in range(1, max(rows) + 1)]
    )
    ax.set_xticks([])
    ax.set_ylabel("stage (layer, sublayer)")
    ax.set_xlabel("RASP expressions (arrows: data flow)")
    ax.set_title(f"Computation graph of {name or _model_name(model)} (colour: layer)")
    return _save(fig, path)


def program_edges(program: Any) -> list[tuple[str, str]]:
    """``(child label, parent label)`` for every dependency of a RASP program (traced labels,
    as the component table uses them); the input to :func:`computation_graph`."""
    from attnsim.compiler import tracing

    g = tracing.trace(program)
    return [(g.labels[c.uid], g.labels[u]) for u in g.order for c in g.nodes[u].children]
