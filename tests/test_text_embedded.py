"""The textual and the embedded forms of the same programs agree on 1,000 random inputs."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import pytest

from attnsim import rasp
from attnsim.rasp import text

N_INPUTS = 1000
CORPUS = Path(__file__).parent / "rasp_files"


def _embedded_hist() -> rasp.SOp:
    return rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ))


def _embedded_sort() -> rasp.SOp:
    keys = rasp.numerical(rasp.tokens)
    smaller = rasp.Select(keys, keys, rasp.Comparison.LT)
    tie_before = rasp.Select(keys, keys, rasp.Comparison.EQ) & rasp.Select(
        rasp.indices, rasp.indices, rasp.Comparison.LT
    )
    target = rasp.SelectorWidth(smaller | tie_before)
    grab = rasp.Select(target, rasp.indices, rasp.Comparison.EQ)
    return rasp.numerical(rasp.Aggregate(grab, keys, default=0))


def _embedded_reverse() -> rasp.SOp:
    mirror = rasp.Select(rasp.indices, rasp.length - rasp.indices - 1, rasp.Comparison.EQ)
    return rasp.Aggregate(mirror, rasp.tokens)


def _embedded_double_hist() -> rasp.SOp:
    same = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)
    hist = rasp.SelectorWidth(same)
    earlier = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LT)
    seen = rasp.Map(lambda w: w > 0, rasp.SelectorWidth(same & earlier))
    first = rasp.Select(seen, rasp.Full(False), rasp.Comparison.EQ)
    return rasp.SelectorWidth(rasp.Select(hist, hist, rasp.Comparison.EQ) & first)


PROGRAMS = {
    "hist": (
        "h = selector_width(select(tokens, tokens, ==));",
        _embedded_hist,
        lambda r: [r.choice("abcde") for _ in range(r.randint(1, 12))],
    ),
    "sort": (
        "s = sort(tokens_int, tokens_int);",
        _embedded_sort,
        lambda r: [r.randint(-30, 30) for _ in range(r.randint(1, 12))],
    ),
    "reverse": (
        "r = aggregate(select(indices, length - indices - 1, ==), tokens);",
        _embedded_reverse,
        lambda r: [r.choice("abcdefgh") for _ in range(r.randint(1, 12))],
    ),
    "double_hist": (
        (CORPUS / "double_hist.rasp").read_text().replace("hist2 =", "d ="),
        _embedded_double_hist,
        lambda r: [r.choice("abcd") for _ in range(r.randint(1, 12))],
    ),
}
_VAR = {"hist": "h", "sort": "s", "reverse": "r", "double_hist": "d"}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_text_and_embedded_agree_on_random_inputs(name):
    source, build, gen = PROGRAMS[name]
    textual = text.translate(source, _VAR[name])
    embedded = build()
    rng = random.Random(sorted(PROGRAMS).index(name) + 7)
    by_length: dict[int, list[list]] = defaultdict(list)
    for _ in range(N_INPUTS):
        xs = gen(rng)
        by_length[len(xs)].append(xs)
    checked = 0
    for batch in by_length.values():
        got = rasp.evaluate(textual, batch)
        want = rasp.evaluate(embedded, batch)
        assert got == want
        checked += len(batch)
    assert checked == N_INPUTS


def test_textual_tree_uses_the_embedded_node_types():
    s = text.translate("s = aggregate(select(indices, 0, ==), tokens_int);", "s")
    assert isinstance(s, rasp.Aggregate)
    assert rasp.is_numerical(s)
    assert isinstance(s.selector, rasp.Select)
    assert s.selector.predicate is rasp.Comparison.EQ
    assert s.label == "s"
    w = text.translate("w = selector_width(select(tokens, tokens, ==));", "w")
    assert isinstance(w, rasp.SelectorWidth)
    strings = text.translate("g = aggregate(select(indices, 0, ==), tokens);", "g")
    assert rasp.is_categorical(strings)
