"""The compiled matrix programs' resources next to the paper's counts, with measured errors.

Each case compiles one program of :mod:`attnsim.matrix.programs` at one shape (hard
attention, float64, fixed input length), reads the model report and runs a few random
inputs against numpy. Layer counting: an *attention layer* is one multi-head attention
sublayer (with its MLP); *blocks* also counts the layers whose attention sublayer is empty
(an MLP-only block needed when elementwise maps are chained, such as ``1/det`` then a
product). The paper counts attention layers including the one that computes ``length``;
these programs never read ``length`` (the shapes are compile-time constants), so the paper's
column also shows its count without that layer.

>>> rows = matrix_rows([Case("transpose", (2, 3))])
>>> row = rows[0]
>>> row["attention_layers"], row["heads_per_layer"], row["paper_layers"], row["error"] == 0.0
(1, [1], 2, True)
>>> print(matrix_table(rows).splitlines()[0])  # doctest: +ELLIPSIS
| operation | shape | attention layers | ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from attnsim.compiler import compile_program
from attnsim.matrix import layout, programs

__all__ = [
    "Case",
    "DEFAULT_CASES",
    "paper_counts",
    "matrix_rows",
    "table_cells",
    "TEXT_COLUMNS",
    "matrix_table",
    "write_doc",
]


@dataclasses.dataclass(frozen=True)
class Case:
    """One program at one shape.

    Attributes:
        op: a builder name in :mod:`attnsim.matrix.programs` (``"transpose"``, ``"matmul"``,
            ``"softmax"``, ``"relu"``, ``"maxmin"``, ``"bias_add"``, ``"scale"``, ``"det"``,
            ``"inverse"``).
        shape: ``(r, c)`` for transpose, softmax, bias_add and the elementwise programs (the
            input is an r x c matrix), ``(r, k, c)`` for matmul, ``(n,)`` for det and inverse.
        heads: matrices laid side by side (the paper's multi-head layout).
        option: an extra keyword for the builder, e.g. ``("layers", 1)`` or
            ``("method", "gram")``.
    """

    op: str
    shape: tuple[int, ...]
    heads: int = 1
    option: tuple[str, Any] | None = None

    @property
    def label(self) -> str:
        """The operation with its variant, e.g. ``"matmul (h=2)"``."""
        extra = [f"h={self.heads}"] if self.heads > 1 else []
        if self.option is not None:
            extra.append(f"{self.option[0]}={self.option[1]}")
        return self.op + (f" ({', '.join(extra)})" if extra else "")

    @property
    def shape_text(self) -> str:
        """The shape as ``"r x c"`` (``"r x k x c"`` for matmul, ``"n x n"`` for det/inverse)."""
        if self.op in ("det", "inverse"):
            return f"{self.shape[0]}x{self.shape[0]}"
        return "x".join(str(d) for d in self.shape)


_SQUARES = [(2, 2), (3, 3), (4, 4), (8, 8)]
DEFAULT_CASES: tuple[Case, ...] = (
    *(Case("transpose", s) for s in [*_SQUARES, (2, 5), (3, 7)]),
    Case("transpose", (3, 3), heads=2),
    *(Case("matmul", (n, n, n)) for n in (2, 3, 4, 8)),
    *(Case("matmul", s) for s in [(2, 3, 4), (3, 5, 2), (8, 1, 8)]),
    Case("matmul", (3, 3, 2), heads=2),
    Case("matmul", (3, 3, 3), option=("layers", 1)),
    *(Case("softmax", s) for s in [*_SQUARES, (2, 5)]),
    Case("softmax", (3, 3), heads=2),
    Case("softmax", (3, 3), option=("layers", 2)),
    *(Case(op, s) for op in ("relu", "maxmin", "scale") for s in [(3, 3), (8, 8)]),
    *(Case("bias_add", s) for s in [(3, 3), (4, 8)]),
    *(Case("det", (n,)) for n in (2, 3, 4, 8)),
    *(Case("inverse", (n,)) for n in (2, 3, 4, 6, 8)),
    Case("inverse", (3,), option=("method", "gram")),
)


def paper_counts(case: Case) -> tuple[int | None, list[int] | None]:
    """The paper's attention layers (with ``length``) and heads per layer, or None.

    Args:
        case: the program and shape.

    Returns:
        ``(layers, heads_per_layer)``; ``(None, None)`` where the paper gives no construction.

    >>> paper_counts(Case("matmul", (3, 3, 2), heads=2))
    (3, [1, 10, 12])
    >>> paper_counts(Case("inverse", (4,)))
    (None, None)
    """
    h = case.heads
    if case.op == "transpose":
        return 2, [1, h]
    if case.op == "matmul":
        r, _, c = case.shape
        return 3, [1, h * (r + c), h * r * c]
    if case.op == "softmax":
        return 2, [1, h * case.shape[0]]
    if case.op in ("relu", "scale"):
        return 0, []
    if case.op == "inverse" and case.shape == (3,):
        return 5, [1, 4, 1, 1, 1]
    if case.op == "det" and case.shape == (3,):
        return 4, [1, 4, 1, 1]  # the first four layers of the paper's 3x3 inverse
    return None, None  # maxmin: about 3 (inferred, no listing); no n x n det/inverse


def _scale(x: np.ndarray) -> np.ndarray:
    return -0.375 * x


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _maxmin(x: np.ndarray) -> np.ndarray:
    out, n = x.copy(), x.shape[-1] - x.shape[-1] % 2
    pairs = x[:, :n].reshape(len(x), -1, 2)
    out[:, :n] = np.stack([pairs.max(axis=2), pairs.min(axis=2)], axis=2).reshape(len(x), n)
    return out


def _problem(case: Case, count: int, rng: np.random.Generator):
    """(program, input length, inputs [count, L], numpy reference [count, L])."""
    kw = dict([case.option]) if case.option else {}
    h = case.heads
    if case.op in ("det", "inverse"):
        n = case.shape[0]
        u, _ = np.linalg.qr(rng.standard_normal((count, n, n)))
        a = (u * rng.uniform(1.0, 10.0, (count, 1, n))) @ np.linalg.qr(
            rng.standard_normal((count, n, n))
        )[0]  # singular values in [1, 10]
        if case.op == "det":
            want = np.repeat(np.linalg.det(a)[:, None], n * n, axis=1)
        else:
            want = np.linalg.inv(a).reshape(count, -1)
        return getattr(programs, case.op)(n, **kw), n * n, layout.pack_batch(a), want
    if case.op == "matmul":
        r, k, c = case.shape
        a, b = rng.standard_normal((count, h, r, k)), rng.standard_normal((count, h, k, c))
        length = programs.matmul_input_length(r, k, c, h)
        want = np.zeros((count, length))
        want[:, : h * r * c] = (a @ b).reshape(count, -1)
        seqs = layout.pack_batch(a, b, length=length)
        return programs.matmul(r, k, c, heads=h, **kw), length, seqs, want
    r, c = case.shape
    x = rng.standard_normal((count, h, r, c)) * 3
    flat = x.reshape(count, -1)
    if case.op == "transpose":
        want = x.transpose(0, 1, 3, 2).reshape(count, -1)
        return programs.transpose(r, c, heads=h), h * r * c, flat, want
    if case.op == "softmax":
        program = programs.softmax(r, c, heads=h, **kw)
        return program, h * r * c, flat, _softmax(x).reshape(count, -1)
    if case.op == "bias_add":
        bias = rng.standard_normal((count, c))
        want = np.concatenate([(x[:, 0] + bias[:, None]).reshape(count, -1), 0 * bias], 1)
        return programs.bias_add(r, c), r * c + c, layout.pack_batch(x[:, 0], bias), want
    elementwise: dict[str, tuple[Callable, Callable]] = {
        "relu": (programs.relu, lambda v: np.maximum(v, 0.0)),
        "maxmin": (programs.maxmin, _maxmin),
        "scale": (lambda: programs.scale(-0.375), _scale),
    }
    if case.op not in elementwise:
        raise ValueError(f"unknown matrix operation {case.op!r}; expected one of {_OPS}")
    build, ref = elementwise[case.op]
    return build(), r * c * h, flat, ref(flat)


_OPS = ("transpose", "matmul", "softmax", "relu", "maxmin", "bias_add", "scale", "det", "inverse")


def matrix_rows(
    cases: Iterable[Case] = DEFAULT_CASES,
    *,
    samples: int = 8,
    seed: int = 0,
    progress: Callable[[Case], None] | None = None,
) -> list[dict[str, Any]]:
    """Compiles every case and measures it: resources, the paper's counts, the error.

    Args:
        cases: the programs and shapes.
        samples: random inputs per case for the error column.
        seed: the random seed.
        progress: called with each case before it is compiled.

    Returns:
        One dict per case: ``op``, ``shape``, ``attention_layers``, ``blocks``,
        ``heads_per_layer`` (attention layers only), ``d_model``, ``d_mlp``, ``d_bilinear``,
        ``d_native`` (total native units), ``parameters``, ``paper_layers``,
        ``paper_layers_without_length``, ``paper_heads``, ``error`` (the largest max-norm
        relative error over the samples; for det, relative to the Hadamard bound).

    Raises:
        ValueError: an unknown operation.

    >>> matrix_rows([Case("relu", (2, 2))])[0]["attention_layers"]
    0
    """
    rng = np.random.default_rng(seed)
    rows = []
    for case in cases:
        if progress is not None:
            progress(case)
        program, length, seqs, want = _problem(case, samples, rng)
        model = compile_program(program, vocab=None, max_seq_len=length, fixed_length=True)
        got = np.asarray(model.run(seqs.tolist()), dtype=np.float64)
        if case.op == "det":
            a = seqs.reshape(samples, case.shape[0], case.shape[0])
            scale = np.prod(np.linalg.norm(a, axis=2), axis=1)
        else:
            scale = np.maximum(np.abs(want).max(axis=1), 1e-300)
        error = float((np.abs(got - want).max(axis=1) / scale).max())
        rep = model.report()
        paper_layers, paper_heads = paper_counts(case)
        rows.append(
            {
                "op": case.label,
                "shape": case.shape_text,
                "attention_layers": rep.attention_layers,
                "blocks": rep.layers,
                "heads_per_layer": [h for h in rep.heads_per_layer if h],
                "d_model": rep.d_model,
                "d_mlp": rep.d_mlp,
                "d_bilinear": rep.d_bilinear,
                "d_native": sum(rep.d_native.values()),
                "parameters": rep.parameters,
                "paper_layers": paper_layers,
                "paper_layers_without_length": None
                if paper_layers is None
                else max(paper_layers - 1, 0),
                "paper_heads": paper_heads,
                "error": error,
            }
        )
    return rows


_COLUMNS = [
    ("operation", "op"),
    ("shape", "shape"),
    ("attention layers", "attention_layers"),
    ("blocks", "blocks"),
    ("heads per layer", "heads_per_layer"),
    ("paper layers (w/o length)", None),
    ("authors' heads per layer", "paper_heads"),
    ("d_model", "d_model"),
    ("d_mlp", "d_mlp"),
    ("d_bilinear", "d_bilinear"),
    ("d_native", "d_native"),
    ("parameters", "parameters"),
    ("max rel. error", "error"),
]


# columns of text and lists (left-aligned on a terminal); the others hold numbers
TEXT_COLUMNS = ("operation", "shape", "heads per layer", "authors' heads per layer")


def _cell(row: dict[str, Any], key: str | None) -> str:
    if key is None:
        if row["paper_layers"] is None:
            return "-"
        return f"{row['paper_layers']} ({row['paper_layers_without_length']})"
    value = row[key]
    if value is None:
        return "-"
    if isinstance(value, list):
        return "(" + ", ".join(str(v) for v in value) + ")" if value else "-"
    if isinstance(value, float):
        return "0" if value == 0 else f"{value:.1e}"
    return str(value)


def table_cells(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The column titles and the text of every cell (for Markdown or a terminal table).

    Args:
        rows: from :func:`matrix_rows`.

    Returns:
        ``(titles, cells)``.

    >>> titles, cells = table_cells(matrix_rows([Case("scale", (1, 2))]))
    >>> dict(zip(titles, cells[0]))["heads per layer"]
    '-'
    """
    titles = [title for title, _ in _COLUMNS]
    return titles, [[_cell(row, key) for _, key in _COLUMNS] for row in rows]


def matrix_table(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of :func:`matrix_rows`.

    Args:
        rows: from :func:`matrix_rows`.

    Returns:
        The table, one line per row after the header.

    >>> line = matrix_table(matrix_rows([Case("scale", (1, 2))])).splitlines()[2]
    >>> line.startswith("| scale | 1x2 | 0 | 0 | - | 0 (0) | - | 3 | 0 | 0 | 0 |")
    True
    """
    titles, cells = table_cells(rows)
    lines = ["| " + " | ".join(titles) + " |", "|" + "---|" * len(titles)]
    lines += ["| " + " | ".join(c) + " |" for c in cells]
    return "\n".join(lines)


_DOC_HEAD = """# Matrix programs: compiled resources next to the paper

Generated by `attnsim report matrix` (do not edit by hand). Every operation of
`attnsim.matrix.programs` is compiled to a transformer (hard attention, float64, fixed input
length) and run on {samples} random inputs against numpy.

How layers are counted:

- **attention layers**: multi-head attention sublayers, each followed by its MLP. This is
  what the paper counts, but the paper also counts the layer that computes `length`; these
  programs never read `length` because shapes are compile-time constants, so the paper's
  column shows its count and, in parentheses, the count without that layer.
- **blocks**: all transformer layers of the compiled model, including MLP-only ones (an
  empty attention sublayer) that appear when elementwise maps are chained: each product,
  ReLU, `exp` or `1/x` applied to the result of another needs one more MLP stage. The
  paper's RASP programs fold any chain of maps into one MLP, so it has no such layers.
- **heads per layer**: the heads of each attention layer (MLP-only blocks omitted). The
  paper's heads include its `length` head in the first layer.
- **d_mlp / d_bilinear / d_native**: ReLU units, bilinear (product) units and native
  elementwise units (`exp`, `1/x`; exact by declaration) in the widest MLP.
- **max rel. error**: the largest max-norm relative error over the samples (inverse:
  condition number at most 10; det: relative to the Hadamard bound `prod_i |row_i|`).

Reference counts (docs: paper notes, section 5): the paper's Table 1 gives the layers of
transpose (2), matmul (3) and the 3x3 inverse (5); the heads per layer (matmul `(1, r+c, rc)`,
inverse `(1, 4, 1, 1, 1)`) and row softmax (2 layers, heads `(1, r)`) come from the authors'
RASP code and its compiled flow diagrams, not from the paper's text. Neither has a general
n x n inverse or determinant, nor a listing for maxmin (about 3 layers, inferred).

Where the compiled model is deeper than its attention layers, and why:

- softmax subtracts the row maximum (the paper does not, and overflows for logits past
  about 709): a balanced tree of `a + relu(b - a)` takes one MLP stage per level, then
  `exp`, `1/x` and a product one stage each. A selector that compares real numbers (an
  argmax head) would give the maximum in the attention layer; the compiler supports only
  equality of integer-valued numbers, so the maximum stays in the MLPs;
- det and inverse chain products and reciprocals: a Gauss-Jordan step is
  `alpha - beta * gamma / a_kk` (one stage for `beta * gamma` and `1 / a_kk`, one for the
  rest), so the n x n inverse has n attention layers in 2n + 2 blocks; the 3x3 inverse
  (cofactors) has 2 attention layers in 4 blocks (cofactors, `A * C`, `1 / det`, `C^T / det`).

"""


def write_doc(rows: Sequence[dict[str, Any]], path: str, samples: int = 8) -> str:
    """Writes the Markdown document (explanation and table) to ``path``.

    Args:
        rows: from :func:`matrix_rows`.
        path: the file to write.
        samples: the number of inputs the errors were measured on (for the text).

    Returns:
        The document's text.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "m.md")
    >>> write_doc(matrix_rows([Case("relu", (1, 1))]), path).startswith("# Matrix programs")
    True
    """
    text = _DOC_HEAD.format(samples=samples) + matrix_table(rows) + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return text
