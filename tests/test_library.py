"""The library programs against plain-Python oracles, on tables of cases and random inputs."""

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim import library, rasp

# -- plain-Python oracles ------------------------------------------------------------------


def stable_sort(vals, keys):
    return [v for _, _, v in sorted(zip(keys, range(len(keys)), vals))]


def by_most_freq(xs, filler):
    firsts = [x for i, x in enumerate(xs) if x not in xs[:i]]
    ordered = sorted(firsts, key=lambda x: -xs.count(x))  # sorted() is stable
    return ordered + [filler] * (len(xs) - len(firsts))


def dyck_ptf(xs, pairs):
    closer_of = {p[1]: p[0] for p in pairs}
    openers = {p[0] for p in pairs}
    stack, failed, out = [], False, []
    for t in xs:
        if t in openers:
            stack.append(t)
        elif t in closer_of:
            if stack and stack[-1] == closer_of[t]:
                stack.pop()
            else:
                failed = True
        out.append("F" if failed else ("T" if not stack else "P"))
    return out


def shuffle_dyck(xs, pairs):
    ok = True
    for o, c in pairs:
        depth = 0
        for t in xs:
            depth += (t == o) - (t == c)
            ok &= depth >= 0
        ok &= depth == 0
    return [ok] * len(xs)


def detect(xs, pattern):
    k = len(pattern)
    return [None if i < k - 1 else xs[i - k + 1 : i + 1] == list(pattern) for i in range(len(xs))]


def shifted(xs, n, filler=None):
    return [xs[i - n] if 0 <= i - n < len(xs) else filler for i in range(len(xs))]


def first_instance(xs, v):
    return [x == v and v not in xs[:i] for i, x in enumerate(xs)]


def last_instance(xs, v):
    return [x == v and v not in xs[i + 1 :] for i, x in enumerate(xs)]


letters = st.lists(st.sampled_from("abcd"), min_size=1, max_size=10)
digits = st.lists(st.integers(0, 5), min_size=1, max_size=10)
parens = st.lists(st.sampled_from("(){}[]a"), min_size=1, max_size=12)

# -- properties against the oracles ----------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(letters)
def test_hist_length_reverse(xs):
    assert rasp.evaluate(library.make_hist(), xs) == [xs.count(x) for x in xs]
    assert rasp.evaluate(library.make_length(), xs) == [len(xs)] * len(xs)
    assert rasp.evaluate(library.make_reverse(rasp.tokens), xs) == xs[::-1]


@settings(max_examples=60, deadline=None)
@given(digits, st.data())
def test_sorts_are_stable_sorts(keys, data):
    vals = data.draw(st.lists(st.sampled_from("xyz"), min_size=len(keys), max_size=len(keys)))
    # the values are the tokens; the keys ride along as a ConstantSOp
    key_sop = rasp.ConstantSOp(keys)
    expected = stable_sort(vals, keys)
    assert rasp.evaluate(library.sort(rasp.tokens, key_sop), vals) == expected
    made = library.make_sort(rasp.tokens, key_sop, max_seq_len=10, min_key=1)
    assert rasp.evaluate(made, vals) == expected
    assert rasp.evaluate(library.make_sort_freq(max_seq_len=10), keys) == stable_sort(
        keys, [-keys.count(k) for k in keys]
    )


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-50, 50), min_size=1, max_size=10, unique=True))
def test_sort_unique_with_distinct_keys(xs):
    assert rasp.evaluate(library.make_sort_unique(rasp.tokens, rasp.tokens), xs) == sorted(xs)


@settings(max_examples=60, deadline=None)
@given(letters)
def test_sort_by_most_freq(xs):
    assert rasp.evaluate(library.sort_by_most_freq(rasp.tokens), xs) == by_most_freq(xs, "§")
    program = library.sort_by_most_freq(rasp.tokens, non_token="-")
    assert rasp.evaluate(program, xs) == by_most_freq(xs, "-")


@settings(max_examples=100, deadline=None)
@given(parens)
def test_dyck_ptf_matches_a_stack_machine(xs):
    assert rasp.evaluate(library.make_dyck1_ptf(), xs) == dyck_ptf(xs, ["()"])
    assert rasp.evaluate(library.make_dyck2_ptf(), xs) == dyck_ptf(xs, ["()", "{}"])
    assert rasp.evaluate(library.make_dyck3_ptf(), xs) == dyck_ptf(xs, ["()", "{}", "[]"])


@pytest.mark.parametrize("n", range(1, 7))
def test_dyck2_on_every_short_string(n):
    rows = [list(t) for t in itertools.product("({)}", repeat=n)]
    got = rasp.evaluate_batch(library.make_dyck2_ptf(), rows)
    assert got == [dyck_ptf(row, ["()", "{}"]) for row in rows]


@settings(max_examples=60, deadline=None)
@given(parens)
def test_shuffle_dyck_and_pair_balance(xs):
    assert rasp.evaluate(library.make_shuffle_dyck(["()"]), xs) == shuffle_dyck(xs, ["()"])
    assert rasp.evaluate(library.make_shuffle_dyck2(), xs) == shuffle_dyck(xs, ["()", "{}"])
    got = rasp.evaluate(library.make_pair_balance(rasp.tokens, "(", ")"), xs)
    for i, g in enumerate(got):
        want = (xs[: i + 1].count("(") - xs[: i + 1].count(")")) / (i + 1)
        assert math.isclose(g, want, abs_tol=1e-12)


@settings(max_examples=60, deadline=None)
@given(letters, st.sampled_from("abcd"), st.integers(-3, 3))
def test_counting_and_shifting(xs, a, n):
    n_a = xs.count(a)
    assert rasp.evaluate(library.make_count(rasp.tokens, a), xs) == [n_a] * len(xs)
    assert rasp.evaluate(library.count(rasp.tokens, a), xs) == [n_a] * len(xs)
    assert rasp.evaluate(library.contains(rasp.tokens, a), xs) == [a in xs] * len(xs)
    assert rasp.evaluate(library.shift(rasp.tokens, n, "_"), xs) == shifted(xs, n, "_")
    if n > 0:
        assert rasp.evaluate(library.shift_by(n, rasp.tokens), xs) == shifted(xs, n)
    rare = sum(1 for x in xs if xs.count(x) <= 2)
    assert rasp.evaluate(library.make_count_less_freq(2), xs) == [rare] * len(xs)
    fracs = rasp.evaluate(library.make_frac_prevs(rasp.tokens == a), xs)
    assert fracs == [xs[: i + 1].count(a) / (i + 1) for i in range(len(xs))]


@settings(max_examples=60, deadline=None)
@given(letters, st.sampled_from("abcd"))
def test_marking_instances(xs, a):
    assert rasp.evaluate(library.mark_first_instance(rasp.tokens, a), xs) == first_instance(xs, a)
    assert rasp.evaluate(library.mark_last_instance(rasp.tokens, a), xs) == last_instance(xs, a)
    first = rasp.Aggregate(library.select_from_first(rasp.tokens, a), rasp.indices)
    last = rasp.Aggregate(library.select_from_last(rasp.tokens, a), rasp.indices)
    where_first = xs.index(a) if a in xs else None
    where_last = len(xs) - 1 - xs[::-1].index(a) if a in xs else None
    assert rasp.evaluate(first, xs) == [where_first] * len(xs)
    assert rasp.evaluate(last, xs) == [where_last] * len(xs)


@settings(max_examples=60, deadline=None)
@given(letters, st.text("abcd", min_size=1, max_size=3))
def test_detect_pattern(xs, pattern):
    assert rasp.evaluate(library.detect_pattern(rasp.tokens, pattern), xs) == detect(xs, pattern)


@settings(max_examples=40, deadline=None)
@given(st.permutations(range(6)))
def test_load_from_location_is_a_gather(perm):
    xs = list(perm)
    got = rasp.evaluate(library.load_from_location(rasp.tokens, rasp.tokens), xs)
    assert got == [xs[x] for x in xs]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=8))
def test_minimum_maximum(xs):
    idx = list(range(len(xs)))
    for a, b in ((rasp.tokens, rasp.indices), (rasp.numerical(rasp.tokens), rasp.indices)):
        assert rasp.evaluate(library.minimum(a, b), xs) == [min(x, i) for x, i in zip(xs, idx)]
        assert rasp.evaluate(library.maximum(a, b), xs) == [max(x, i) for x, i in zip(xs, idx)]
    both = library.minimum(rasp.numerical(rasp.tokens), rasp.numerical(rasp.indices))
    assert rasp.is_numerical(both)
    assert rasp.evaluate(both, xs) == [min(x, i) for x, i in zip(xs, idx)]


# -- tables of hand-computed cases -----------------------------------------------------------

CAUSAL_CASES = [
    # (program, input, expected in causal mode: each position sees its prefix)
    (library.count(rasp.tokens, "a"), list("abaa"), [1, 1, 2, 3]),
    (library.contains(rasp.tokens, "b"), list("aabb"), [False, False, True, True]),
    (library.make_length(), list("xyz"), [1, 2, 3]),
    (library.make_dyck2_ptf(), list("({})"), ["P", "P", "P", "T"]),
]


@pytest.mark.parametrize("program, xs, expected", CAUSAL_CASES)
def test_causal_mode(program, xs, expected):
    assert rasp.evaluate(program, xs, causal=True) == expected


def test_nary_sequencemap():
    three = library.make_nary_sequencemap(
        lambda x, y, z: x * y / z, rasp.indices, rasp.indices, rasp.tokens
    )
    assert rasp.evaluate(three, [1, 2, 3]) == [0.0, 0.5, 4 / 3]
    one = library.make_nary_sequencemap(lambda x: x + 1, rasp.tokens)
    assert rasp.evaluate(one, [1, 2]) == [2, 3]


def test_numerical_values_stay_numerical():
    x = rasp.numerical(rasp.tokens)
    for program in (
        library.make_reverse(x),
        library.sort(x, rasp.tokens),
        library.shift(x, 1, 0),
        library.load_from_location(x, rasp.indices),
    ):
        assert rasp.is_numerical(program)
    assert rasp.evaluate(library.make_reverse(x), [0.5, 1.5]) == [1.5, 0.5]
    assert rasp.evaluate(library.sort(x, rasp.tokens), [2.5, 0.25]) == [0.25, 2.5]


# Every registry entry runs on its example; outputs checked by hand.
REGISTRY_EXPECTED = {
    "make_length": [3, 3, 3],
    "make_reverse": list("dcba"),
    "make_shuffle_dyck": [True] * 6,
    "make_shuffle_dyck2": [True] * 4,
    "make_hist": [2, 3, 3, 1, 2, 3],
    "make_sort_unique": [1, 2, 3, 4],
    "make_sort": [1, 2, 3, 3],
    "make_sort_freq": [2, 2, 4, 1],
    "make_frac_prevs": [1.0, 0.5, 2 / 3, 0.75],
    "shift_by": [None, "a", "b", "c"],
    "detect_pattern": [None, False, True, False],
    "make_count_less_freq": [3] * 6,
    "make_count": [2] * 4,
    "make_nary_sequencemap": [2, 3, 4],
    "sort": list("abbc"),
    "sort_by_most_freq": ["c", "b", "a", "§", "§", "§"],
    "make_dyck1_ptf": list("PPPTPTFF"),
    "make_dyck2_ptf": list("PPPTPF"),
    "make_dyck3_ptf": list("PPPTPT"),
    "count": [2] * 4,
    "contains": [True] * 4,
    "shift": list("_abc"),
    "mark_first_instance": [False, True, False, False, False],
    "mark_last_instance": [False, False, False, True, False],
    "minimum": [0, 0, 2],
    "maximum": [3, 1, 5],
    "load_from_location": [3, 2, 1, 0],
}


@pytest.mark.parametrize("name", sorted(library.PROGRAMS))
def test_registry_entry(name):
    entry = library.PROGRAMS[name]
    assert callable(getattr(library, name)), "registry names are library function names"
    assert len(entry.example) <= entry.max_seq_len
    out = rasp.evaluate(
        entry.factory(), entry.example, vocab=entry.vocab, max_seq_len=entry.max_seq_len
    )
    if name == "make_pair_balance":  # "(a)(()": running (opens - closes) / (i + 1)
        want = [1.0, 0.5, 0.0, 0.25, 0.4, 1 / 6]
        assert all(math.isclose(o, w, abs_tol=1e-12) for o, w in zip(out, want))
    else:
        assert out == REGISTRY_EXPECTED[name]


# -- errors ----------------------------------------------------------------------------------

ERRORS = [
    (lambda: library.make_shuffle_dyck([]), ValueError, r"at least|list of bracket pairs"),
    (lambda: library.make_shuffle_dyck("()"), ValueError, r"list of bracket pairs"),
    (lambda: library.make_dyck_ptf(["(("]), ValueError, r"two different characters"),
    (lambda: library.make_dyck_ptf(["()", "(]"]), ValueError, r"appears in two pairs"),
    (lambda: library.make_sort(rasp.tokens, rasp.tokens, max_seq_len=0, min_key=1), ValueError,
     r"max_seq_len > 0"),
    (lambda: library.detect_pattern(rasp.tokens, ""), ValueError, r"non-empty pattern"),
    (lambda: library.make_nary_sequencemap(lambda: 0), TypeError, r"at least one S-op"),
    (lambda: library.make_reverse("abc"), TypeError, r"expects a RASP S-op.*got str"),
    (lambda: library.sort(rasp.tokens, 3), TypeError, r"sort \(keys\).*rasp.Full"),
]  # fmt: skip


@pytest.mark.parametrize("build, error, match", ERRORS)
def test_errors(build, error, match):
    with pytest.raises(error, match=match):
        build()
