"""The reference interpreter: semantics against hand-computed values and Python oracles."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim import library, rasp

C = rasp.Comparison
tok, idx = rasp.tokens, rasp.indices
num = rasp.numerical(rasp.tokens)
nothing = rasp.Select(idx, idx, C.FALSE)
everything = rasp.Select(idx, idx, C.TRUE)
prefix = rasp.Select(idx, idx, C.LEQ)
previous = rasp.Select(idx, idx, lambda k, q: k == q - 1)

# (id, program, input, expected): expected values are computed by hand
SEMANTICS = [
    # empty selections give the default
    ("numerical-empty-is-0", rasp.numerical(rasp.Aggregate(nothing, num)), [1, 2], [0.0, 0.0]),
    ("numerical-empty-default", rasp.numerical(rasp.Aggregate(nothing, num, default=5)), [1, 2],
     [5.0, 5.0]),
    ("categorical-empty-is-None", rasp.Aggregate(nothing, tok), ["a", "b"], [None, None]),
    ("categorical-empty-default", rasp.Aggregate(previous, tok, default="_"), ["a", "b"],
     ["_", "a"]),
    ("sum-empty-is-0", rasp.SumAggregate(nothing, num), [1, 2], [0.0, 0.0]),
    ("width-empty-is-0", rasp.SelectorWidth(nothing), ["a", "b"], [0, 0]),
    # aggregation
    ("mean-of-prefix", rasp.numerical(rasp.Aggregate(prefix, num)), [2, 4, 9], [2.0, 3.0, 5.0]),
    ("sum-of-prefix", rasp.SumAggregate(prefix, num), [2, 4, 9], [2.0, 6.0, 15.0]),
    ("sum-reduction", rasp.numerical(rasp.Aggregate(everything, num, reduction="sum")), [1, 2],
     [3.0, 3.0]),
    ("categorical-one-value", rasp.Aggregate(rasp.Select(tok, tok, C.EQ), tok), list("aba"),
     list("aba")),
    # selectors and their combinations (predicate(key, query))
    ("select-lt-width", rasp.SelectorWidth(rasp.Select(tok, tok, C.LT)), [3, 1, 2], [2, 0, 1]),
    ("selector-and", rasp.SelectorWidth(prefix & rasp.Select(tok, tok, C.EQ)), list("abab"),
     [1, 1, 2, 2]),
    ("selector-or", rasp.SelectorWidth(previous | rasp.Select(idx, idx, C.EQ)), list("abc"),
     [1, 2, 2]),
    ("selector-not", rasp.SelectorWidth(~prefix), list("abc"), [2, 1, 0]),
    ("python-predicate", rasp.SelectorWidth(rasp.Select(tok, tok, lambda k, q: k % q == 0)),
     [1, 2, 4], [3, 2, 1]),
    # maps and sequence maps
    ("sequence-map-3-ary", rasp.SequenceMap(lambda a, b, c: f"{a}{b}{c}", tok, idx, rasp.Full("!")),
     list("xy"), ["x0!", "y1!"]),
    ("constant-sop", rasp.SequenceMap(lambda a, b: a * b, tok, rasp.ConstantSOp([1, 2, 3])),
     [5, 5, 5], [5, 10, 15]),
    ("length", rasp.length, list("abc"), [3, 3, 3]),
    ("full", rasp.Full(7), list("ab"), [7, 7]),
    # operator sugar
    ("1-indices", 1 - idx, list("abc"), [1, 0, -1]),
    ("affine", idx * 2 + 1, list("abc"), [1, 3, 5]),
    ("neg", -idx, list("ab"), [0, -1]),
    ("rtruediv", 6 / (idx + 1), list("abc"), [6.0, 3.0, 2.0]),
    ("mod-eq", idx % 2 == 0, list("abc"), [True, False, True]),
    ("sop-vs-sop", tok < idx, [1, 1, 1], [False, False, True]),
    ("invert", ~(idx < 1), list("ab"), [False, True]),
    ("invert-numerical-input", ~num, [0, 1], [True, False]),
    ("and-or", (idx > 0) & (idx < 2) | (idx == 2), list("abcd"), [False, True, True, False]),
    ("numerical-sugar", num / 2 + num, [1, 2], [1.5, 3.0]),
    ("abs", abs(1 - idx), list("abc"), [1, 0, 1]),
    ("tuple-values", rasp.SequenceMap(lambda a, b: (a, b), tok, idx), list("ab"),
     [("a", 0), ("b", 1)]),
]  # fmt: skip


@pytest.mark.parametrize(
    "program, xs, expected", [c[1:] for c in SEMANTICS], ids=[c[0] for c in SEMANTICS]
)
def test_semantics(program, xs, expected):
    got = rasp.evaluate(program, xs)
    assert got == expected
    assert [type(g) for g in got] == [type(e) for e in expected]  # True stays True, not 1


CAUSAL = [
    ("mean-all", rasp.numerical(rasp.Aggregate(everything, num)), [2, 4, 9], [2.0, 3.0, 5.0]),
    ("length-is-prefix", rasp.length, list("abc"), [1, 2, 3]),
    ("width-all", rasp.SelectorWidth(everything), list("abc"), [1, 2, 3]),
    ("not-is-masked", rasp.SelectorWidth(~rasp.Select(idx, idx, C.EQ)), list("abc"), [0, 1, 2]),
    ("future-is-empty", rasp.Aggregate(rasp.Select(idx, idx, C.GT), tok), list("ab"),
     [None, None]),
]  # fmt: skip


@pytest.mark.parametrize(
    "program, xs, expected", [c[1:] for c in CAUSAL], ids=[c[0] for c in CAUSAL]
)
def test_causal(program, xs, expected):
    assert rasp.evaluate(program, xs, causal=True) == expected


def test_causal_equals_prefix_evaluation():
    # causal position i == the last position of the prefix xs[:i+1], evaluated non-causally
    xs = list("abcab")
    program = rasp.numerical(rasp.Aggregate(rasp.Select(tok, tok, C.EQ), rasp.numerical(idx)))
    causal = rasp.evaluate(program, xs, causal=True)
    assert causal == [rasp.evaluate(program, xs[: i + 1])[-1] for i in range(len(xs))]


def test_selector_evaluates_to_matrix():
    assert rasp.evaluate(prefix, list("ab")) == [[True, False], [True, True]]


def test_numpy_inputs():
    hist = library.make_hist()
    rows = [[1, 2, 1], [3, 3, 3]]
    assert rasp.evaluate(hist, np.array(rows)) == [[2, 1, 2], [3, 3, 3]]
    assert rasp.evaluate(num * 2, np.array(rows)) == [[2.0, 4.0, 2.0], [6.0, 6.0, 6.0]]
    # one sequence as a 1-D array comes back as Python values, strings included
    got = rasp.evaluate(tok, np.array(["a", "b"]), vocab=["a", "b"])
    assert got == ["a", "b"] and type(got[0]) is str
    assert rasp.evaluate(hist, np.array([4, 4, 5])) == [2, 2, 1]
    assert type(rasp.evaluate(tok, np.array([4, 5]))[0]) is int


def test_empty_batch():
    assert rasp.evaluate_batch(library.make_hist(), []) == []


# -- properties ------------------------------------------------------------------------------

tokens_lists = st.lists(st.sampled_from("abcde"), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(tokens_lists)
def test_reverse_twice_is_identity(xs):
    twice = library.make_reverse(library.make_reverse(rasp.tokens))
    assert rasp.evaluate(twice, xs) == xs


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-20, 20), min_size=1, max_size=12))
def test_sort_output_is_sorted_permutation(xs):
    out = rasp.evaluate(library.sort(rasp.tokens, rasp.tokens), xs)
    assert all(a <= b for a, b in zip(out, out[1:]))
    assert sorted(out) == sorted(xs)


@settings(max_examples=60, deadline=None)
@given(tokens_lists)
def test_hist_sums_to_sum_of_squared_counts(xs):
    out = rasp.evaluate(library.make_hist(), xs)
    assert sum(out) == sum(xs.count(t) ** 2 for t in set(xs))


PROGRAMS_FOR_BATCH = [
    library.make_hist(),
    library.sort(rasp.tokens, rasp.tokens),
    library.make_dyck2_ptf(),
    library.make_frac_prevs(rasp.tokens == "("),
    library.shift_by(1, rasp.tokens),
]


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 8).flatmap(
        lambda n: st.lists(st.lists(st.sampled_from("(){}a"), min_size=n, max_size=n), max_size=6)
    ),
    st.booleans(),
)
def test_batch_equals_row_by_row(rows, causal):
    for program in PROGRAMS_FOR_BATCH:
        batch = rasp.evaluate_batch(program, rows, causal=causal)
        assert batch == [rasp.evaluate(program, row, causal=causal) for row in rows]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=10))
def test_numerical_mean_matches_numpy(xs):
    out = rasp.evaluate(rasp.numerical(rasp.Aggregate(prefix, num)), xs)
    want = np.cumsum(xs) / np.arange(1, len(xs) + 1)
    assert all(math.isclose(o, w, rel_tol=1e-12, abs_tol=1e-9) for o, w in zip(out, want))


# -- error wording ---------------------------------------------------------------------------


def test_token_outside_vocab():
    message = r"token 'z' at position 2 \(row 0\) is not in the vocabulary \['a', 'b'\]; use only"
    with pytest.raises(ValueError, match=message):
        rasp.evaluate(tok, ["a", "b", "z"], vocab=["a", "b"])


def test_argument_that_is_not_an_expression():
    with pytest.raises(TypeError, match=r"Map expects a RASP SOp, got int 3 \(wrap a constant"):
        rasp.Map(lambda x: x, 3)
    with pytest.raises(TypeError, match=r"evaluate expects a RASP expression, got list"):
        rasp.evaluate([1, 2], [1, 2])


def test_sequence_map_over_different_lengths():
    short = rasp.ConstantSOp([1, 2])
    message = r"has 2 values but the input has length 3; give one value per position"
    with pytest.raises(rasp.RASPEvaluationError, match=message):
        rasp.evaluate(rasp.SequenceMap(lambda a, b: a + b, tok, short), [1, 2, 3])


def test_categorical_aggregate_of_several_values():
    message = (
        r"would average several distinct values \('a', 'b'\) at query position 0; "
        r".*annotate the aggregate numerical"
    )
    with pytest.raises(rasp.RASPEvaluationError, match=message):
        rasp.evaluate(rasp.Aggregate(everything, tok), ["a", "b"])


def test_other_errors():
    with pytest.raises(ValueError, match=r"row 0 has 2, row 1 has 1; evaluate them separately"):
        rasp.evaluate_batch(tok, [["a", "b"], ["a"]])
    with pytest.raises(ValueError, match=r"input length 3 exceeds max_seq_len=2; shorten"):
        rasp.evaluate(tok, "abc", max_seq_len=2)
    with pytest.raises(rasp.RASPEvaluationError, match=r"is numerical but holds the value 'a'"):
        rasp.evaluate(num, ["a"])
    with pytest.raises(rasp.RASPEvaluationError, match=r"raised ZeroDivisionError.* on \(0\)"):
        rasp.evaluate(rasp.Map(lambda x: 1 // x, tok), [0, 1])
    with pytest.raises(rasp.RASPEvaluationError, match=r"must be hashable, got list \['a'\]"):
        rasp.evaluate(rasp.Map(lambda x: [x], tok), ["a"])


# -- random programs against a plain-Python interpreter ----------------------------------------


def python_oracle(program, xs, causal=False):
    """RASP semantics position by position, in plain Python: the independent oracle."""
    n = len(xs)
    memo = {}

    def run(e):
        if e.uid not in memo:
            memo[e.uid] = compute(e)
        return memo[e.uid]

    def compute(e):
        if isinstance(e, rasp.Selector):
            if isinstance(e, rasp.Select):
                keys, queries = run(e.keys), run(e.queries)
                m = [[bool(e.predicate(keys[k], queries[q])) for k in range(n)] for q in range(n)]
            elif isinstance(e, rasp.SelectorAnd):
                a, b = run(e.fst), run(e.snd)
                m = [[x and y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]
            elif isinstance(e, rasp.SelectorOr):
                a, b = run(e.fst), run(e.snd)
                m = [[x or y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]
            else:
                m = [[not x for x in row] for row in run(e.inner)]
            return [[x and (k <= q or not causal) for k, x in enumerate(row)] for q, row in
                    enumerate(m)]  # fmt: skip
        if isinstance(e, rasp.TokensType):
            v = list(xs)
        elif isinstance(e, rasp.IndicesType):
            v = list(range(n))
        elif isinstance(e, rasp.LengthType):
            v = [i + 1 if causal else n for i in range(n)]
        elif isinstance(e, rasp.Full):
            v = [e.fill] * n
        elif isinstance(e, rasp.Map):
            v = [e.f(x) for x in run(e.inner)]
        elif isinstance(e, rasp.SequenceMap):
            v = [e.f(*args) for args in zip(*(run(s) for s in e.sops))]
        elif isinstance(e, rasp.SelectorWidth):
            v = [sum(row) for row in run(e.selector)]
        else:  # Aggregate
            sel, vals = run(e.selector), run(e.sop)
            v = []
            for row in sel:
                chosen = [vals[k] for k in range(n) if row[k]]
                if rasp.is_numerical(e) or e.reduction == "sum":
                    total = sum(chosen)
                    if not chosen:
                        v.append(0.0 if e.default is None else e.default)
                    else:
                        v.append(total / len(chosen) if e.reduction == "mean" else total)
                elif not chosen:
                    v.append(e.default)
                elif len(set(chosen)) > 1:
                    raise ValueError("categorical aggregate of several values")
                else:
                    v.append(chosen[0])
        return [float(x) for x in v] if rasp.is_numerical(e) else v

    return run(program)


UNARY = [lambda x: x + 1, lambda x: x % 3, lambda x: 2 * x, lambda x: -x, lambda x: x // 2]
BINARY = [lambda x, y: x + y, lambda x, y: x - y, max, lambda x, y: x * (y % 2)]
COMPARISONS = list(C)


def int_sops(depth):
    base = st.sampled_from([tok, idx, rasp.length, rasp.Full(1), rasp.Full(0)])
    if depth == 0:
        return base
    sub = int_sops(depth - 1)
    return st.one_of(
        base,
        st.builds(rasp.Map, st.sampled_from(UNARY), sub),
        st.builds(lambda f, a, b: rasp.SequenceMap(f, a, b), st.sampled_from(BINARY), sub, sub),
        st.builds(rasp.SelectorWidth, selectors(depth - 1)),
        st.builds(
            lambda s, v: rasp.Aggregate(s & rasp.Select(idx, idx, C.EQ), v, default=0),
            selectors(depth - 1),
            sub,
        ),  # a categorical aggregate that selects at most one key
    )


def selectors(depth):
    sub = int_sops(depth)
    select = st.one_of(
        st.builds(rasp.Select, sub, sub, st.sampled_from(COMPARISONS)),
        st.builds(rasp.Select, sub, sub, st.just(lambda k, q: (k + q) % 2 == 0)),
    )
    if depth == 0:
        return select
    return st.one_of(
        select,
        st.builds(lambda a, b: a & b, select, select),
        st.builds(lambda a, b: a | b, select, select),
        st.builds(lambda a: ~a, select),
    )


random_programs = st.one_of(
    int_sops(3),
    st.builds(
        lambda s, v, r: rasp.numerical(rasp.Aggregate(s, rasp.numerical(v), reduction=r)),
        selectors(2),
        int_sops(2),
        st.sampled_from(["mean", "sum"]),
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    random_programs,
    st.lists(st.lists(st.integers(-3, 3), min_size=4, max_size=4), min_size=1, max_size=4),
    st.booleans(),
)
def test_random_programs_match_python(program, rows, causal):
    got = rasp.evaluate_batch(program, rows, causal=causal)
    for row, out in zip(rows, got):
        want = python_oracle(program, row, causal)
        if rasp.is_numerical(program):
            assert all(math.isclose(o, w, rel_tol=1e-12, abs_tol=1e-12) for o, w in zip(out, want))
        else:
            assert out == want
    # a numpy batch gives the same answers
    assert rasp.evaluate_batch(program, np.array(rows), causal=causal) == got


# -- SelectMax ---------------------------------------------------------------------------------


def _select_max_oracle(base: np.ndarray, score: np.ndarray) -> np.ndarray:
    """``[query, key]``: base[q, k] and score[k] == max of score over base[q, :]."""
    out = np.zeros_like(base)
    for q in range(base.shape[0]):
        keys = np.flatnonzero(base[q])
        if len(keys):
            top = max(score[k] for k in keys)
            out[q, keys] = score[keys] == top
    return out


def _base_matrix(xs: list, pred) -> np.ndarray:
    n = len(xs)
    return np.array([[bool(pred(k, q)) for k in range(n)] for q in range(n)])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-3, 3), min_size=1, max_size=7),
    st.sampled_from(["prefix", "everything", "nothing", "previous", "same-parity"]),
    st.booleans(),
)
def test_select_max_against_a_numpy_oracle(xs, base_name, causal):
    """Ties (small integer scores), empty base selections and causal masking."""
    preds = {
        "prefix": (C.LEQ, lambda k, q: k <= q),
        "everything": (C.TRUE, lambda k, q: True),
        "nothing": (C.FALSE, lambda k, q: False),
        "previous": (lambda k, q: k == q - 1, lambda k, q: k == q - 1),
        "same-parity": (lambda k, q: k % 2 == q % 2, lambda k, q: k % 2 == q % 2),
    }
    rasp_pred, py_pred = preds[base_name]
    base = rasp.Select(idx, idx, rasp_pred)
    sel = rasp.expr.SelectMax(base, num)
    got = np.array(rasp.evaluate(sel, xs, causal=causal), dtype=bool)
    pred = py_pred if not causal else (lambda k, q: py_pred(k, q) and k <= q)
    want = _select_max_oracle(_base_matrix(xs, pred), np.asarray(xs, dtype=float))
    assert (got == want).all()
    # aggregating the score itself gives the row maximum exactly (0 where nothing is chosen)
    row_max = rasp.numerical(rasp.Aggregate(sel, num))
    means = rasp.evaluate(row_max, xs, causal=causal)
    for q, m in enumerate(means):
        keys = np.flatnonzero(want[q])
        assert m == (float(xs[keys[0]]) if len(keys) else 0.0)


def test_select_max_with_a_categorical_numeric_score_and_a_batch():
    # indices as the score: the last key the base selects
    last = rasp.expr.SelectMax(rasp.Select(idx, idx, C.LEQ), idx)
    assert rasp.evaluate(rasp.Aggregate(last, tok), [["a", "b", "c"], ["x", "y", "z"]]) == [
        ["a", "b", "c"],
        ["x", "y", "z"],
    ]


def test_select_max_refuses_scores_that_are_not_numbers():
    sel = rasp.expr.SelectMax(everything, tok)
    with pytest.raises(
        rasp.RASPEvaluationError, match=r"score of SelectMax .* holds the value 'a'"
    ):
        rasp.evaluate(rasp.Aggregate(sel, tok), ["a", "b"])
    with pytest.raises(rasp.RASPEvaluationError, match=r"key position 1 is NaN"):
        rasp.evaluate(
            rasp.numerical(rasp.Aggregate(rasp.expr.SelectMax(everything, num), num)),
            [1.0, math.nan],
        )
    with pytest.raises(TypeError, match=r"SelectMax \(base\) expects a RASP Selector"):
        rasp.expr.SelectMax(num, num)
    with pytest.raises(TypeError, match=r"SelectMax \(score\) expects a RASP SOp"):
        rasp.expr.SelectMax(everything, everything)
