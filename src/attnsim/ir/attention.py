"""Attention constructions: scores that select keys, and the BOS default that catches the
queries selecting nothing.

A selector becomes bilinear score terms ``(query direction, key direction, weight)`` under
which a selected key scores ``max_score`` and any other key at most ``max_score - 1``. The
head adds two terms for BOS (position 0): every real query scores BOS half a unit below a
selected key (``mean`` mode: BOS wins only when nothing is selected), or exactly like one
(``width`` mode: BOS is always attended, so the head reads ``1 / (w + 1)`` from a direction
only BOS holds, for ``w`` selected keys); the BOS query scores BOS ``BIG`` higher, so it reads
only itself.

>>> import numpy as np
>>> s = {"bos": np.array([1.0, 0, 0, 0]), "notbos": np.array([0.0, 1, 1, 1]),
...      "x:a": np.array([0.0, 1, 0, 1]), "x:b": np.array([0.0, 0, 1, 0]),
...      "v": np.array([0.0, 10, 20, 40])}
>>> same = table_scores([[True, False], [False, True]], ["x:a", "x:b"], ["x:a", "x:b"])
>>> bos_default_head("mean", same, (("v", "out", 1.0),)).apply(s)["out"].tolist()
[0.0, 25.0, 20.0, 25.0]
>>> w = bos_default_head("width", same, (("bos", "inv", 1.0),), mode="width").apply(s)["inv"]
>>> (1 / w[1:] - 1).round(6).tolist()
[2.0, 1.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from attnsim.ir.blocks import BOS, NOTBOS, Head

BIG = 1.0e3  # extra score of BOS for the BOS query (it then reads only itself)

ScoreTerms = tuple[tuple[str, str, float], ...]


def bos_default_head(
    name: str,
    terms: ScoreTerms,
    ov: tuple[tuple[str, str, float], ...],
    *,
    mode: str = "mean",
    max_score: float = 1.0,
    gain: float = 1.0,
    pattern: object | None = None,
) -> Head:
    """A head with the selector's score ``terms`` and the BOS terms described above.

    Args:
        name: the head's name.
        terms: the selector's score terms.
        ov: the value/output map ``(source, destination, weight)``.
        mode: "mean" or "width".
        max_score: the score of a selected key.
        gain: the factor by which ``terms`` scale one unit of the selector (a SelectMax's
            base is scaled by its gain): BOS then sits half a scaled unit below.
        pattern: the keys the selector selects whatever the input, where the compiler knows
            them (an :class:`attnsim.model.patterns.StaticPattern`); kept for a plain unit
            (``max_score`` 1, ``gain`` 1), the BOS rule :func:`~attnsim.model.patterns.head_keys`
            assumes.
    """
    bos = max_score - 0.5 * gain if mode == "mean" else max_score
    qk = terms + ((NOTBOS, BOS, bos), (BOS, BOS, BIG))
    if pattern is not None and max_score == 1.0 and gain == 1.0:
        pattern = pattern.with_mode(mode)
    else:
        pattern = None  # another BOS rule than attnsim.model.patterns.head_keys assumes
    return Head(name, qk, ov, mode, max_score, pattern)


def table_scores(
    matrix: Sequence[Sequence[bool]] | np.ndarray, qdims: Sequence[str], kdims: Sequence[str]
) -> ScoreTerms:
    """Score 1 where ``matrix[i][j]`` (query value i, key value j, one-hot directions)."""
    qi, ki = np.nonzero(np.asarray(matrix, dtype=bool))
    return tuple((qdims[i], kdims[j], 1.0) for i, j in zip(qi.tolist(), ki.tolist()))


def equality_scores(
    fq: Mapping[str, float], sq: str, fk: Mapping[str, float], sk: str, scale: float
) -> ScoreTerms:
    """Scores ``1 - scale * (q - k)^2`` (0 when the key or the query is BOS).

    ``fq`` and ``fk`` are the linear forms of q and k; ``sq`` and ``sk`` directions holding
    their squares. On integer values (``scale = 1``) equal ones score 1, others at most 0.
    """
    terms = []
    for qd, qa in fq.items():
        for kd, kb in fk.items():
            terms.append((qd, kd, 2.0 * scale * qa * kb))
    terms.append((sq, NOTBOS, -scale))
    terms.append((NOTBOS, sk, -scale))
    terms.append((NOTBOS, NOTBOS, 1.0))
    return tuple(terms)


def constant_equality_scores(
    c: float, form: Mapping[str, float], square: str, scale: float, *, on_keys: bool
) -> ScoreTerms:
    """Scores ``1 - scale * (c - x)^2`` where one side is the constant ``c`` and x (with its
    square in ``square``) is read on the other side (keys when ``on_keys``) against notbos."""
    if on_keys:
        lin = tuple((NOTBOS, d, 2.0 * scale * c * w) for d, w in form.items())
        sq = ((NOTBOS, square, -scale),)
    else:
        lin = tuple((d, NOTBOS, 2.0 * scale * c * w) for d, w in form.items())
        sq = ((square, NOTBOS, -scale),)
    terms = tuple(t for t in lin if t[2] != 0.0) + sq
    return terms + ((NOTBOS, NOTBOS, 1.0 - scale * c * c),)


def max_scores(
    base: ScoreTerms, gain: float, score: Mapping[str, float], stretch: float = 1.0
) -> ScoreTerms:
    """``gain * base + stretch * score``: the base selection first, then the largest score.

    With ``|stretch * score| <= F`` and ``gain >= 4 (F + 1)`` a key the base selects
    outscores every key it does not select, and among those it selects the score decides.
    """
    scaled = tuple((q, k, gain * w) for q, k, w in base)
    return scaled + tuple((NOTBOS, k, stretch * c) for k, c in score.items() if c != 0.0)
