"""ir.attention: score constructions and the BOS-default head, run in numpy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from attnsim.ir import attention as A
from attnsim.ir.blocks import BOS, NOTBOS


def stream(n, **dirs):
    s = {BOS: np.r_[1.0, np.zeros(n)], NOTBOS: np.r_[0.0, np.ones(n)]}
    s.update({d: np.r_[0.0, np.asarray(v, dtype=np.float64)] for d, v in dirs.items()})
    return s


def one_hot(prefix, values, domain):
    return {f"{prefix}:{v}": [1.0 if x == v else 0.0 for x in values] for v in domain}


def reference_mean(selected: np.ndarray, v: np.ndarray, default: float = 0.0) -> np.ndarray:
    """Mean over the selected keys per query (``[query, key]``); ``default`` where none."""
    out = []
    for row in selected:
        out.append(v[row].mean() if row.any() else default)
    return np.array(out)


@pytest.mark.parametrize("pred", [lambda k, q: k == q, lambda k, q: k < q, lambda k, q: False])
def test_table_head_averages_the_selected_keys(pred):
    tokens = [2, 0, 1, 2, 0]
    dom = [0, 1, 2]
    vals = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    s = stream(5, v=vals, **one_hot("t", tokens, dom))
    m = [[pred(k, q) for k in dom] for q in dom]
    terms = A.table_scores(m, [f"t:{q}" for q in dom], [f"t:{k}" for k in dom])
    head = A.bos_default_head("agg", terms, (("v", "out", 1.0), (BOS, "empty", 1.0)))
    got = head.apply(s)
    selected = np.array([[pred(k, q) for k in tokens] for q in tokens])
    np.testing.assert_allclose(got["out"][1:], reference_mean(selected, vals))
    # the flag reads 1 exactly where nothing was selected (BOS was the only key attended)
    np.testing.assert_array_equal(got["empty"][1:], (~selected.any(axis=1)).astype(float))
    assert got["out"][0] == 0.0 and got["empty"][0] == 1.0  # BOS reads itself


def test_width_head_reads_one_over_width_plus_one():
    tokens = ["a", "b", "a", "a"]
    s = stream(4, **one_hot("t", tokens, "ab"))
    terms = A.table_scores(np.eye(2, dtype=bool), ["t:a", "t:b"], ["t:a", "t:b"])
    head = A.bos_default_head("w", terms, ((BOS, "inv", 1.0),), mode="width")
    inv = head.apply(s)["inv"][1:]
    widths = [tokens.count(t) for t in tokens]
    np.testing.assert_allclose(inv, [1 / (w + 1) for w in widths])


def test_equality_scores_on_integers():
    qs = np.array([3.0, -1.0, 0.0, 2.0])
    ks = np.array([0.0, 3.0, 2.0, 3.0])
    s = stream(4, q=qs, k=ks, q2=qs**2, k2=ks**2)
    terms = A.equality_scores({"q": 1.0}, "q2", {"k": 1.0}, "k2", 1.0)
    head = A.bos_default_head("eq", terms, (("k", "out", 1.0),))
    scores = head.scores(s)[1:, 1:]
    np.testing.assert_allclose(scores, 1 - (qs[:, None] - ks[None, :]) ** 2)
    got = head.apply(s)["out"][1:]
    sel = qs[:, None] == ks[None, :]
    np.testing.assert_allclose(got, reference_mean(sel, ks))


@pytest.mark.parametrize("on_keys", [True, False])
def test_constant_equality_scores(on_keys):
    xs = np.array([1.0, 4.0, 2.0, 4.0])
    s = stream(4, x=xs, x2=xs**2)
    terms = A.constant_equality_scores(4.0, {"x": 1.0}, "x2", 1.0, on_keys=on_keys)
    head = A.bos_default_head("c", terms, ())
    scores = head.scores(s)[1:, 1:]
    expected = 1 - (4.0 - xs) ** 2
    np.testing.assert_allclose(
        scores, np.broadcast_to(expected if on_keys else expected[:, None], (4, 4))
    )


def test_max_scores_select_the_largest_among_the_base():
    score = np.array([0.5, 3.0, -2.0, 3.0, 1.0])
    base_keys = np.array([1.0, 0.0, 1.0, 1.0, 1.0])  # key 1 is not in the base
    s = stream(5, score=score, base=base_keys, v=np.arange(5.0))
    gain = 2.0 ** np.ceil(np.log2(4 * (3 + 1)))
    terms = A.max_scores(((NOTBOS, "base", 1.0),), gain, {"score": 1.0})
    head = A.bos_default_head("max", terms, (("v", "out", 1.0),), max_score=gain, gain=gain)
    got = head.apply(s)["out"][1:]
    assert got.tolist() == [3.0] * 5  # key 3: the largest score the base selects


def test_every_selector_matrix_on_small_domains():
    dom = [0, 1, 2]
    tokens = [0, 2, 1, 1]
    s = stream(4, v=np.array([1.0, 10.0, 100.0, 1000.0]), **one_hot("t", tokens, dom))
    for bits in itertools.product([False, True], repeat=4):
        m = np.zeros((3, 3), dtype=bool)
        m[:2, :2] = np.array(bits).reshape(2, 2)
        terms = A.table_scores(m, [f"t:{q}" for q in dom], [f"t:{k}" for k in dom])
        got = A.bos_default_head("h", terms, (("v", "out", 1.0),)).apply(s)["out"][1:]
        sel = np.array([[m[q, k] for k in tokens] for q in tokens])
        np.testing.assert_allclose(got, reference_mean(sel, s["v"][1:]))
