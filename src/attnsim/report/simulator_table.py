"""The universal simulator's resources next to the paper's counts, and forward FLOP counts.

The paper (Table 1; see docs: paper notes, section 5) gives attention-layer counts per
operation: transpose 2, matmul 3, inverse 5. The authors' RASP code adds softmax 2, and its
end-to-end demo runs the simulator of one head as separate stages whose layers sum to about 13.
"About 8 if the stages were fused" is this project's estimate, not a figure of the paper.
attnsim's U is one fused program; :func:`simulator_rows` measures it for several builds and
:func:`simulator_table` prints it beside those counts, each with its source.

FLOPs are counted for the dense forward pass as it runs (zero weights are multiplied too):
a multiply-add is 2 FLOPs, an elementwise operation 1.

>>> rows = simulator_rows([(2, 2, 1)])
>>> [(r["layout"], r["layers"], r["attention_layers"]) for r in rows]
[('scalar', 6, 5), ('vector', 10, 9)]
>>> print(simulator_table(rows).splitlines()[0])  # doctest: +ELLIPSIS
| build (N, D, H) | layout | layers | attention layers | ...|
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from attnsim.model.compiled import CompiledModel

# Reference layer counts, attention layers including the one that computes `length`:
# operation -> (count, source). Only the first three are the paper's own (Table 1).
PAPER = "paper (Table 1)"
AUTHORS_CODE = "authors' RASP code"
AUTHORS_DEMO = "authors' demo code (sum over its stages)"
OURS = "our estimate, not the paper's"
REFERENCE_COUNTS: dict[str, tuple[int, str]] = {
    "transpose": (2, PAPER),
    "matmul": (3, PAPER),
    "inverse (3x3)": (5, PAPER),
    "softmax": (2, AUTHORS_CODE),
    "staged U (one head)": (13, AUTHORS_DEMO),
    "fused U": (8, OURS),
}
PAPER_COUNTS: dict[str, int] = {op: n for op, (n, _) in REFERENCE_COUNTS.items()}

DEFAULT_BUILDS: tuple[tuple[int, int, int], ...] = ((2, 2, 1), (4, 4, 2), (8, 8, 4))


def active_heads_per_layer(model: CompiledModel) -> list[int]:
    """The number of heads with non-zero output weights in each layer of ``model``.

    >>> from attnsim.simulator import universal
    >>> active_heads_per_layer(universal.build(2, 2, 1, layout="scalar").model)
    [9, 6, 1, 1, 0, 1]
    """
    return [int(block.attn.active_heads().numel()) for block in model.model.blocks]


def forward_flops(model: CompiledModel, positions: int, batch: int = 1) -> dict[str, int]:
    """FLOPs of one dense forward pass of ``model`` on ``positions`` positions (BOS included).

    Per active head: the Q, K, V projections (``3 * 2 * pos * d_model * d_head``), the scores
    and the weighted values (``2 * 2 * pos^2 * d_head``), the selection or softmax
    (``4 * pos^2``) and the output projection (``2 * pos * d_head * d_model``). Per MLP: ReLU
    units (``2 * 2 * pos * d_model`` per unit, each layer with its own width), bilinear units
    (three projections and a product) and declared elementwise units (three projections and
    the function).

    Args:
        model: a compiled model (its config and its active heads are read).
        positions: sequence length including BOS.
        batch: sequences per pass.

    Returns:
        ``{"attention": ..., "mlp": ..., "total": ...}`` in FLOPs.

    >>> from attnsim.simulator import universal
    >>> U = universal.build(2, 2, 1)
    >>> f = forward_flops(U.model, U.layout.length + 1)
    >>> f["total"] == f["attention"] + f["mlp"] > 0
    True
    """
    cfg = model.config
    p, d = positions, cfg.d_model
    attention = 0
    for li, heads in enumerate(active_heads_per_layer(model)):  # each layer its own d_head
        k = cfg.head_shape(li)[1]
        attention += heads * (3 * 2 * p * d * k + 2 * 2 * p * p * k + 4 * p * p + 2 * p * k * d)
    relu_units = sum(cfg.mlp_width(li) for li in range(cfg.n_layers))
    bilinear = sum(cfg.bilinear_width(li) for li in range(cfg.n_layers))
    per_mlp = sum(m * (3 * 2 * p * d + 2 * p) for m in cfg.d_native.values())
    mlp = cfg.n_layers * per_mlp + relu_units * (2 * 2 * p * d + p)
    mlp += bilinear * (3 * 2 * p * d + p)
    return {
        "attention": batch * attention,
        "mlp": batch * mlp,
        "total": batch * (attention + mlp),
    }


def direct_attention_flops(n: int, d: int, heads: int, d_head: int | None = None) -> int:
    """FLOPs of multi-head attention computed directly on X of shape ``(n, d)``.

    Q, K, V projections with biases, scores, softmax (about 5 FLOPs per score), weighted
    values, output projection with bias.

    >>> direct_attention_flops(2, 2, 1)
    132
    """
    k = d // heads if d_head is None else d_head
    proj = 3 * heads * (2 * n * d * k + n * k)
    scores = heads * 2 * n * n * k
    softmax = heads * 5 * n * n
    values = heads * 2 * n * n * k
    out = 2 * n * heads * k * d + n * d
    return proj + scores + softmax + values + out


def simulator_rows(
    builds: Iterable[tuple[int, int, int]] = DEFAULT_BUILDS,
    *,
    attention: str = "hard",
    layouts: Sequence[str] = ("scalar", "vector"),
) -> list[dict[str, Any]]:
    """Builds U for each ``(max_n, max_d, max_heads)`` in each sequence layout and collects
    its resources.

    Returns:
        One dict per build and layout: sizes, layout, layers, attention layers, heads per
        layer, widths, parameters (total and nonzero), sequence length, token width, build
        seconds and forward FLOPs.

    >>> [r["d_model"] for r in simulator_rows([(2, 2, 1)], layouts=["scalar"])]
    [84]
    """
    from attnsim.simulator import universal

    rows = []
    for (n, d, h), layout in ((b, lay) for b in builds for lay in layouts):
        U = universal.build(n, d, h, attention=attention, layout=layout)
        r = U.report()
        rows.append(
            {
                "layout": layout,
                "token_width": U.model.config.token_width or 1,
                "max_n": n,
                "max_d": d,
                "max_heads": h,
                "layers": r.layers,
                "attention_layers": r.attention_layers,
                "heads_per_layer": list(r.heads_per_layer),
                "d_model": r.d_model,
                "d_head": r.d_head,
                "d_mlp": r.d_mlp,
                "d_bilinear": r.d_bilinear,
                "d_native": dict(r.d_native),
                "parameters": r.parameters,
                "nonzero_parameters": r.nonzero_parameters,
                "sequence_length": r.sequence_length,
                "build_seconds": r.build_seconds,
                "flops": forward_flops(U.model, r.sequence_length + 1)["total"],
            }
        )
    return rows


def simulator_table(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of U's resources per build, with the reference layer counts beside
    (the authors' staged demo and our fused estimate; see :data:`REFERENCE_COUNTS`).

    >>> print(simulator_table([]).splitlines()[1][:23])
    |---|---|---:|---:|---|
    """
    staged = PAPER_COUNTS["staged U (one head)"]
    fused = PAPER_COUNTS["fused U"]
    lines = [
        "| build (N, D, H) | layout | layers | attention layers | heads per layer | d_model "
        "| d_head | MLP units (ReLU / bilinear / native) | parameters (nonzero) "
        "| sequence length x token width | forward FLOPs | authors' demo: staged layers "
        "| fused estimate (ours) |",
        "|---|---|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        native = sum(r["d_native"].values())
        lines.append(
            f"| ({r['max_n']}, {r['max_d']}, {r['max_heads']}) | {r.get('layout', 'scalar')} "
            f"| {r['layers']} "
            f"| {r['attention_layers']} | {r['heads_per_layer']} | {r['d_model']} "
            f"| {r['d_head']} | {r['d_mlp']} / {r['d_bilinear']} / {native} "
            f"| {r['parameters']:,} ({r['nonzero_parameters']:,}) "
            f"| {r['sequence_length']} x {r.get('token_width', 1)} "
            f"| {r['flops']:.3g} | ~{staged} | {fused} |"
        )
    return "\n".join(lines)


def paper_table() -> str:
    """The reference layer counts per operation, each with its source, as a Markdown table.

    >>> print(paper_table().splitlines()[2])
    | transpose | 2 | paper (Table 1) |
    """
    lines = ["| operation | attention layers | source |", "|---|---:|---|"]
    lines += [f"| {op} | {n} | {src} |" for op, (n, src) in REFERENCE_COUNTS.items()]
    return "\n".join(lines)
