"""attnsim.rasp.gathers: each builder against the interpreter and a plain-Python oracle."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim import rasp
from attnsim.rasp import gathers

X = rasp.numerical(rasp.tokens)


def _plain_gather(source, xs):
    """values[source(p)] where that position exists, else 0."""
    n = len(xs)
    return [xs[source(p)] if 0 <= source(p) < n else 0 for p in range(n)]


GATHER_CASES = [
    ("identity", lambda p: p),
    ("next", lambda p: p + 1),
    ("previous", lambda p: p - 1),
    ("first", lambda p: 0),
    ("reverse of 5", lambda p: 4 - p),
    ("none", lambda p: -1),
    ("even positions read their partner", lambda p: p + 1 if p % 2 == 0 else -1),
]


@pytest.mark.parametrize("name, source", GATHER_CASES, ids=[c[0] for c in GATHER_CASES])
@pytest.mark.parametrize("xs", [[1.0], [1.0, -2.0, 3.5, 0.0, 7.0]])
def test_gather_matches_plain_python(name, source, xs):
    assert rasp.evaluate(gathers.gather(source, X), xs) == _plain_gather(source, xs)


@given(
    xs=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=8),
    table=st.lists(st.integers(-2, 9), min_size=8, max_size=8),
)
@settings(max_examples=60, deadline=None)
def test_gather_by_any_table(xs, table):
    source = table.__getitem__
    assert rasp.evaluate(gathers.gather(source, X), xs) == _plain_gather(source, xs)


def test_reader_takes_an_sop_source_and_shares_one_selector():
    sel = gathers.reader(rasp.indices + 1)
    got = rasp.evaluate(gathers.read(sel, X), [1.0, 2.0, 3.0])
    assert got == [2.0, 3.0, 0.0]
    assert rasp.evaluate(gathers.any_selected(sel), [5.0, 6.0, 7.0]) == [1.0, 1.0, 0.0]


def test_index_map_and_index_constant():
    assert rasp.evaluate(gathers.index_map(lambda p: p * p), list("abcd")) == [0, 1, 4, 9]
    coeff = gathers.index_constant(lambda p: p < 2)
    assert rasp.is_numerical(coeff)
    assert rasp.evaluate(coeff, list("abcd")) == [1.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "keep",
    [lambda k: True, lambda k: k < 2, lambda k: k % 3 == 0, lambda k: False],
    ids=["all", "first two", "every third", "none"],
)
def test_select_keys_sums_the_same_keys_for_every_query(keep):
    xs = [1.0, 2.0, 4.0, 8.0, 16.0]
    want = sum(x for k, x in enumerate(xs) if keep(k))
    got = rasp.evaluate(rasp.SumAggregate(gathers.select_keys(keep), X), xs)
    assert got == [want] * len(xs)


def test_select_all_and_read_average():
    xs = [1.0, 2.0, 6.0]
    assert rasp.evaluate(gathers.read(gathers.select_all(), X), xs) == [3.0] * 3


@pytest.mark.parametrize("n, groups", [(6, 2), (6, 3), (5, 2), (4, 4)])
def test_sum_into_adds_each_key_to_its_owner(n, groups):
    xs = [float(2**k) for k in range(n)]
    owner = lambda k: k % groups  # noqa: E731
    target = lambda q: q if q < groups else -2  # noqa: E731
    want = [
        sum(x for k, x in enumerate(xs) if owner(k) == q) if q < groups else 0 for q in range(n)
    ]
    assert rasp.evaluate(gathers.sum_into(owner, target, X), xs) == want


@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=6), st.integers(1, 5))
@settings(max_examples=40, deadline=None)
def test_sum_of_and_max_of(xs, k):
    terms = [X * float(c) for c in range(-2, k - 2)]
    total = rasp.evaluate(gathers.sum_of(terms), xs)
    biggest = rasp.evaluate(gathers.max_of(terms), xs)
    for i, x in enumerate(xs):
        values = [x * float(c) for c in range(-2, k - 2)]
        assert total[i] == pytest.approx(sum(values), abs=1e-9)
        assert biggest[i] == pytest.approx(max(values), abs=1e-9)


def test_builders_create_the_same_expressions_on_every_call():
    """Compiled weights depend on default labels, so a builder must make the same number of
    expression objects, in the same order, every time."""
    from attnsim.rasp import expr

    def labels(build):
        saved = expr._ids
        expr._ids = itertools.count(1000)
        try:
            out = build()
        finally:
            expr._ids = saved
        seen, stack = [], [out]
        while stack:
            e = stack.pop()
            seen.append(e.label)
            stack.extend(e.children)
        return seen

    builders = [
        lambda: gathers.gather(lambda p: p + 1, X),
        lambda: gathers.sum_into(lambda k: k, lambda q: q, X),
        lambda: gathers.any_selected(gathers.reader(lambda p: p)),
        lambda: gathers.max_of([X, X * 2.0, X * 3.0]),
    ]
    for build in builders:
        assert labels(build) == labels(build)
    # gather = numerical(Aggregate(Select(indices, Map(source, indices), EQ), values))
    g = gathers.gather(lambda p: p, X)
    assert isinstance(g, rasp.Aggregate) and rasp.is_numerical(g)
    assert isinstance(g.selector, rasp.Select) and g.selector.predicate is rasp.Comparison.EQ
    assert g.selector.keys is rasp.indices and isinstance(g.selector.queries, rasp.Map)
