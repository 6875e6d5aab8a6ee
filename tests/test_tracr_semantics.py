"""tracr's evaluator semantics in attnsim's interpreter: None propagation, defaults,
booleans, ints, tuples, selector helpers.

Each case builds its program from a ``rasp`` module, so the same code builds it in
attnsim's classes and, when tracr-pypi is installed, in tracr's: attnsim's interpreter must
give the literal expected value always, and tracr's ``DefaultRASPEvaluator`` must give it
too. Cases marked ``compile`` are also compiled (both attention modes) and must give it.
"""

import math
from typing import Any, NamedTuple

import pytest

from attnsim import compile_program
from attnsim.tracr.compiler import lib as attnsim_lib
from attnsim.tracr.rasp import rasp as attnsim_rasp


class Case(NamedTuple):
    build: Any  # (rasp, lib) -> program
    xs: list
    expected: list
    vocab: Any = None  # compile with this vocabulary (None: interpreter only)


def _shift(r, sop):
    return r.Aggregate(r.Select(r.indices, r.indices, lambda k, q: q == k + 1), sop)


def _nothing(r):
    return r.Select(r.indices, r.indices, lambda k, q: False)


CASES = {
    "map_of_none_is_none": Case(
        lambda r, _: r.Map(lambda x: x + 1, _shift(r, r.tokens)), [1, 2, 3], [None, 2, 3], {1, 2, 3}
    ),
    "map_not_called_on_none": Case(
        lambda r, _: r.Map(lambda x: x.upper(), _shift(r, r.tokens)),
        list("abc"),
        [None, "A", "B"],
        {"a", "b", "c"},
    ),
    "map_testing_none_gets_none": Case(
        lambda r, _: r.Map(lambda x: x is None, _shift(r, r.tokens)), [1, 2], [None, False], {1, 2}
    ),
    "sequence_map_first_none": Case(
        lambda r, _: r.SequenceMap(lambda x, y: x + y, _shift(r, r.tokens), r.tokens),
        [1, 2, 3],
        [None, 3, 5],
        {1, 2, 3},
    ),
    "sequence_map_second_none": Case(
        lambda r, _: r.SequenceMap(lambda x, y: (x, y), r.tokens, _shift(r, r.tokens)),
        ["a", "b"],
        [None, ("b", "a")],
        {"a", "b"},
    ),
    "operator_sugar_on_none": Case(
        lambda r, _: _shift(r, r.tokens) * 2 + r.indices, [1, 2, 3], [None, 3, 6], {1, 2, 3}
    ),
    "none_through_two_maps": Case(
        lambda r, _: r.Map(str, r.Map(lambda x: x - 1, _shift(r, r.tokens), simplify=False)),
        [5, 6],
        [None, "4"],
        {5, 6},
    ),
    "categorical_default": Case(
        lambda r, _: r.Aggregate(_nothing(r), r.tokens, default=None),
        ["a", "b"],
        [None, None],
        {"a", "b"},
    ),
    "numerical_default_zero": Case(
        lambda r, _: r.numerical(
            r.Aggregate(
                r.Select(r.indices, r.indices, r.Comparison.LT),
                r.numerical(r.Map(lambda x: x, r.tokens)),
                default=0,
            )
        ),
        [1, 2, 3],
        [0, 1, 1.5],
        {1, 2, 3},
    ),
    "numerical_mean_of_bools": Case(
        lambda r, lib: lib.make_frac_prevs(r.tokens == "a"), list("aab"), [1, 1, 2 / 3], {"a", "b"}
    ),
    "booleans": Case(
        lambda r, _: (r.tokens > 1) & (r.tokens < 3), [1, 2, 3], [False, True, False], {1, 2, 3}
    ),
    "and_is_pythons_and": Case(lambda r, _: r.tokens & 3, [2, 0], [3, 0], {0, 2}),
    "or_is_pythons_or": Case(lambda r, _: r.tokens | "z", ["", "a"], ["z", "a"], {"", "a"}),
    "constant_or_on_the_left": Case(lambda r, _: 7 | r.tokens, [0, 2], [7, 2], {0, 2}),
    "not": Case(lambda r, _: r.sop_not(r.tokens == "a"), list("ab"), [False, True], {"a", "b"}),
    "ints_stay_ints": Case(lambda r, _: r.Map(lambda x: x // 2, r.tokens), [3, 4], [1, 2], {3, 4}),
    "selector_width_counts": Case(
        lambda r, _: r.SelectorWidth(r.Select(r.tokens, r.tokens, r.Comparison.EQ)),
        list("aba"),
        [2, 1, 2],
        {"a", "b"},
    ),
    "tuples": Case(
        lambda r, _: r.Map(lambda t: t[1], r.SequenceMap(lambda x, i: (x, i), r.tokens, r.indices)),
        list("ab"),
        [0, 1],
        {"a", "b"},
    ),
    "tuple_tokens": Case(
        lambda r, _: r.Map(lambda t: t[0] * t[1], r.tokens), [(2, 3), (4, 5)], [6, 20]
    ),
    "linear_sequence_map": Case(
        lambda r, _: r.LinearSequenceMap(r.tokens, r.indices, 2, -1), [5, 5], [10, 9], {5}
    ),
    "full_and_constants": Case(
        lambda r, _: r.SequenceMap(lambda a, b: a + b, r.Full(10), r.ConstantSOp([1, 2])),
        ["x", "y"],
        [11, 12],
    ),
    "constant_selector": Case(
        lambda r, _: r.SelectorWidth(r.ConstantSelector([[True, True], [False, True]])),
        ["x", "y"],
        [2, 1],
    ),
    "selector_and_simplified": Case(
        lambda r, _: r.SelectorWidth(
            r.selector_and(
                r.Select(r.indices, r.indices, r.Comparison.LEQ),
                r.Select(r.indices, r.indices, r.Comparison.GEQ),
            )
        ),
        list("abc"),
        [1, 1, 1],
        {"a", "b", "c"},
    ),
    "selector_and_with_full": Case(
        lambda r, _: r.SelectorWidth(
            r.selector_and(
                r.Select(r.tokens, r.tokens, r.Comparison.EQ),
                r.Select(r.Full("a"), r.tokens, r.Comparison.EQ),  # folded: one Select
            )
        ),
        list("aab"),
        [2, 2, 0],
        {"a", "b"},
    ),
    "selector_or": Case(
        lambda r, _: r.SelectorWidth(
            r.selector_or(
                r.Select(r.indices, r.indices, r.Comparison.LT),
                r.Select(r.indices, r.indices, r.Comparison.GT),
            )
        ),
        list("abc"),
        [2, 2, 2],
        {"a", "b", "c"},
    ),
    "selector_not": Case(
        lambda r, _: r.SelectorWidth(
            r.selector_not(r.Select(r.indices, r.indices, r.Comparison.LEQ))
        ),
        list("abc"),
        [2, 1, 0],
        {"a", "b", "c"},
    ),
    "selector_operators": Case(
        lambda r, _: r.SelectorWidth(
            ~r.Select(r.tokens, r.tokens, r.Comparison.EQ)
            | r.Select(r.indices, r.indices, r.Comparison.EQ)
        ),
        list("aab"),
        [2, 2, 3],
        {"a", "b"},
    ),
    "detect_pattern": Case(
        lambda r, lib: lib.detect_pattern(r.tokens, "abc"),
        list("abcabc"),
        [None, None, True, False, False, True],
        {"a", "b", "c"},
    ),
    "shift_by": Case(
        lambda r, lib: lib.shift_by(2, r.tokens),
        list("abcd"),
        [None, None, "a", "b"],
        {"a", "b", "c", "d"},
    ),
    "nary_sequencemap": Case(
        lambda r, lib: lib.make_nary_sequencemap(
            lambda x, y, z: x * 100 + y * 10 + z, r.tokens, r.indices, r.length
        ),
        [1, 2],
        [102, 212],
        {1, 2},
    ),
    "sort_freq": Case(
        lambda r, lib: lib.make_sort_freq(4), list("abbc"), ["b", "b", "a", "c"], {"a", "b", "c"}
    ),
}


def _same(got, want):
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        if w is None or g is None:
            if g is not w:
                return False
        elif isinstance(w, float) or isinstance(g, float):
            if not math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-9):
                return False
        elif g != w:
            return False
    return True


@pytest.mark.parametrize("name", sorted(CASES))
def test_interpreter_gives_the_expected_value(name):
    case = CASES[name]
    program = case.build(attnsim_rasp, attnsim_lib)
    got = attnsim_rasp.evaluate(program, case.xs)
    assert _same(got, case.expected), (got, case.expected)
    assert _same(program(case.xs), case.expected)  # tracr's call form


@pytest.mark.parametrize("name", sorted(CASES))
def test_tracrs_evaluator_gives_the_expected_value(name):
    tracr_rasp = pytest.importorskip("tracr.rasp.rasp")
    tracr_lib = pytest.importorskip("tracr.compiler.lib")
    case = CASES[name]
    got = tracr_rasp.evaluate(case.build(tracr_rasp, tracr_lib), case.xs)
    assert _same(got, case.expected), (got, case.expected)


COMPILED = sorted(n for n, c in CASES.items() if c.vocab is not None)


@pytest.mark.parametrize("attention", ["hard", "softmax"])
@pytest.mark.parametrize("name", COMPILED)
def test_compiled_model_gives_the_expected_value(name, attention):
    case = CASES[name]
    program = case.build(attnsim_rasp, attnsim_lib)
    vocab = sorted(case.vocab, key=repr)
    model = compile_program(program, vocab=vocab, max_seq_len=len(case.xs), attention=attention)
    got = model.run(case.xs)
    assert _same(got, case.expected), (got, case.expected)


def test_comparison_on_none_raises_as_in_tracr():
    program = attnsim_rasp.SelectorWidth(
        attnsim_rasp.Select(
            _shift(attnsim_rasp, attnsim_rasp.tokens),
            attnsim_rasp.tokens,
            attnsim_rasp.Comparison.EQ,
        )
    )
    with pytest.raises(ValueError, match=r"raised ValueError: key is None!"):
        attnsim_rasp.evaluate(program, ["a", "b"])


def test_numerical_sop_cannot_hold_none():
    # tracr gives None here; a numerical S-op of attnsim holds numbers only (docs/tracr.md)
    program = attnsim_rasp.numerical(
        attnsim_rasp.Map(lambda x: 1, _shift(attnsim_rasp, attnsim_rasp.tokens))
    ).named("one")
    with pytest.raises(ValueError, match="'one' is numerical but holds the value None"):
        attnsim_rasp.evaluate(program, ["a", "b"])


def test_a_numerical_value_reaches_a_function_as_a_number():
    # docs/tracr.md: -0.0 is the number 0 there (tracr passes -0.0); the compiled model, whose
    # stream has no sign of zero, gives the interpreter's value
    r = attnsim_rasp
    program = r.numerical(r.Map(lambda x: math.copysign(2.0, x), r.numerical(r.tokens)))
    assert program([-0.0, 1.0]) == [2.0, 2.0]
    model = compile_program(program, vocab=[-0.0, -1.0, 1.0], max_seq_len=2)
    assert model.run([-0.0, -1.0]) == r.evaluate(program, [-0.0, -1.0]) == [2.0, -2.0]


def _lib_programs(r, lib):
    """Every program of tracr's lib, built from ``r`` and ``lib`` (tracr's or attnsim's)."""
    return {
        "make_length": lib.make_length(),
        "length": lib.length,
        "make_reverse": lib.make_reverse(r.tokens),
        "make_pair_balance": lib.make_pair_balance(r.tokens, "(", ")"),
        "make_shuffle_dyck": lib.make_shuffle_dyck(["()", "{}"]),
        "make_shuffle_dyck2": lib.make_shuffle_dyck2(),
        "make_hist": lib.make_hist(),
        "make_sort_unique": lib.make_sort_unique(r.tokens, r.indices),
        "make_sort": lib.make_sort(r.tokens, r.tokens, max_seq_len=6, min_key=1),
        "make_sort_freq": lib.make_sort_freq(6),
        "make_frac_prevs": lib.make_frac_prevs(r.tokens == "("),
        "shift_by": lib.shift_by(2, r.tokens),
        "detect_pattern": lib.detect_pattern(r.tokens, "()"),
        "make_count_less_freq": lib.make_count_less_freq(2),
        "make_count": lib.make_count(r.tokens, "("),
        "make_nary_sequencemap": lib.make_nary_sequencemap(
            lambda a, b, c: f"{a}{b}{c}", r.tokens, r.indices, r.tokens
        ),
    }


def test_every_lib_program_equals_tracrs_evaluator():
    tracr_rasp = pytest.importorskip("tracr.rasp.rasp")
    tracr_lib = pytest.importorskip("tracr.compiler.lib")
    import random

    theirs = _lib_programs(tracr_rasp, tracr_lib)
    ours = _lib_programs(attnsim_rasp, attnsim_lib)
    assert set(ours) == set(theirs)
    rng = random.Random(30)
    vocab = ["(", ")", "{", "}"]
    # make_sort needs numeric keys: its own inputs
    for name in sorted(ours):
        for _ in range(25):
            n = rng.randint(1, 6)
            xs = (
                [rng.randint(1, 4) for _ in range(n)]
                if name == "make_sort"
                else ([rng.choice(vocab) for _ in range(n)])
            )
            want = tracr_rasp.evaluate(theirs[name], xs)
            got = attnsim_rasp.evaluate(ours[name], xs)
            assert _same(got, want), (name, xs, got, want)


def test_numerical_sum_with_a_none_input_is_refused_by_both():
    # the interpreter raises (a numerical S-op holds numbers); the model must not read 0
    from attnsim.model.compiled import RunTimeCheckError

    r = attnsim_rasp
    prev = _shift(r, r.tokens).named("prev")
    program = (r.numerical(r.Map(lambda x: x, r.tokens)) + prev).named("s")
    with pytest.raises(ValueError, match="'s' is numerical but holds the value None"):
        r.evaluate(program, [1, 2, 3])
    model = compile_program(program, vocab=[1, 2, 3], max_seq_len=4)
    with pytest.raises(RunTimeCheckError, match="'prev' is None .* 's' cannot hold None"):
        model.run([1, 2, 3])
