"""The fuzzer itself: the generator covers the whole language, and outcomes are classified
as documented (checked with stand-in models, so these tests do not depend on the compiler)."""

from __future__ import annotations

import collections
import math
import random

import numpy as np
import pytest

from attnsim import rasp
from attnsim.compiler import compile_program
from tests import fuzz_programs as fp


def _walk(e: rasp.RASPExpr):
    seen, stack = set(), [e]
    while stack:
        x = stack.pop()
        if x.uid in seen:
            continue
        seen.add(x.uid)
        yield x
        stack.extend(x.children)


def _constructs(e: rasp.RASPExpr) -> set[str]:
    out = set()
    for x in _walk(e):
        name = type(x).__name__
        if isinstance(x, rasp.Aggregate):
            numeric = rasp.is_numerical(x) or x.reduction == "sum"
            name += f" {x.reduction} {'numerical' if numeric else 'categorical'}"
        if isinstance(x, rasp.Select):
            p = x.predicate
            name += f" {p.name}" if isinstance(p, rasp.Comparison) else " lambda"
        if isinstance(x, rasp.Map) and x._op is not None:
            out.add(f"op {x._op.kind}")
        if isinstance(x, rasp.SOp):
            out.add(f"encoding {rasp.get_encoding(x).value}")
        out.add(name)
    return out


@pytest.fixture(scope="module")
def cases():
    rng = random.Random(7)
    return [fp.random_case(rng) for _ in range(1500)]


def test_generator_covers_the_whole_language(cases):
    seen = collections.Counter()
    for c in cases:
        seen.update(_constructs(c.program))
        seen.update({f"causal {c.causal}", f"vocab {c.vocab_kind}"})
    expected = {
        "TokensType", "IndicesType", "LengthType", "Map", "SequenceMap", "LinearSequenceMap",
        "Full", "ConstantSOp", "ConstantSelector", "SelectorAnd", "SelectorOr", "SelectorNot",
        "Aggregate mean numerical", "Aggregate mean categorical", "Aggregate sum numerical",
        "SelectorWidth", "Select lambda", "encoding numerical", "encoding categorical",
        "causal True", "causal False",
    }  # fmt: skip
    expected |= {f"Select {c.name}" for c in rasp.Comparison}
    expected |= {f"op {k}" for k in fp.NAMED_MAPS + ["affine", "abs", "pow", "scaled_reciprocal"]}
    expected |= {f"vocab {v[0]}" for v in fp.VOCABS}
    missing = expected - set(seen)
    assert not missing, missing


def test_generator_is_deterministic_and_its_source_rebuilds_the_program():
    a = fp.random_case(random.Random(3))
    b = fp.random_case(random.Random(3))
    assert a.lines == b.lines and a.inputs == b.inputs and a.vocab == b.vocab
    for seed in range(30):
        case = fp.random_case(random.Random(seed))
        env = {"rasp": rasp, "math": math}
        for line in case.lines:
            exec(line, env)
        rebuilt = env[case.lines[-1].split(" = ")[0]]
        for xs in case.inputs:
            try:
                want = rasp.evaluate(case.program, xs, causal=case.causal)
            except rasp.RASPEvaluationError:
                with pytest.raises(rasp.RASPEvaluationError):
                    rasp.evaluate(rebuilt, xs, causal=case.causal)
                continue
            got = rasp.evaluate(rebuilt, xs, causal=case.causal)
            assert fp.same_row(got, want)


def test_inputs_respect_vocab_and_length(cases):
    for c in cases[:300]:
        for xs in c.inputs:
            assert 1 <= len(xs) <= c.max_seq_len
            assert not c.fixed_length or len(xs) == c.max_seq_len
            if c.vocab is not None:
                assert all(
                    any(t is v or (t == v and type(t) is type(v)) for v in c.vocab) for t in xs
                )


@pytest.mark.parametrize(
    "a, b, equal",
    [
        (1, 1.0, True),
        (1.0, 1.0 + 1e-12, True),
        (1.0, 1.001, False),
        (True, 1, False),
        (False, False, True),
        (float("nan"), float("nan"), True),
        (float("nan"), 0.0, False),
        (float("inf"), float("inf"), True),
        (float("inf"), float("-inf"), False),
        (float("nan"), float("inf"), True),  # the model's 0 * inf for the interpreter's inf
        (float("inf"), float("nan"), False),
        (float("inf"), 1e308, False),
        (None, None, True),
        (None, 0, False),
        ("a", "a", True),
        ("1", 1, False),
        ((1, 2), (1, 2.0), True),
    ],
)
def test_same(a, b, equal):
    assert fp.same(a, b) is equal


def _raised(f):
    try:
        f()
    except BaseException as exc:  # noqa: BLE001
        return exc
    raise AssertionError("did not raise")


def _user_fn():
    raise TypeError("a user's function failed with a long enough message")


@pytest.mark.parametrize(
    "make, clear",
    [
        # raised by attnsim, saying what is wrong
        (lambda: compile_program(rasp.tokens, vocab=None, max_seq_len=2), True),
        (lambda: compile_program(rasp.tokens, vocab=[1], max_seq_len=2, attention="x"), True),
        (lambda: rasp.Map(1, rasp.tokens), True),
        (lambda: rasp.evaluate(rasp.Map(lambda x: 1 // x, rasp.tokens), [0]), True),
        # not clear: wrong type, leaked from numpy or from a user's function, or too short
        (lambda: {}["key"], False),
        (lambda: [][1], False),
        (lambda: np.zeros(2) + np.zeros(3), False),
        (_user_fn, False),
        (lambda: int("a"), False),
    ],
)
def test_is_clear_error(make, clear):
    assert fp.is_clear_error(_raised(make)) is clear


class _Stub:
    """A stand-in compiled model: returns ``value`` or calls ``fail``."""

    def __init__(self, value=None, fail=None):
        self.value, self.fail = value, fail

    def run(self, xs):
        if self.fail:
            self.fail()
        return self.value(xs)


def _case(program, vocab, inputs):
    return fp.FuzzCase(
        program, ("v0 = ...",), ("int",), vocab, "test", 3, False, False, inputs, frozenset()
    )


HIST = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ))
BAD_AGG = rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.TRUE), rasp.tokens)


def _attnsim_value_error():
    compile_program(rasp.tokens, vocab=[1], max_seq_len=1, attention="bogus")


@pytest.mark.parametrize(
    "program, model, status",
    [
        (HIST, _Stub(lambda xs: rasp.evaluate(HIST, xs)), "agreed"),
        (HIST, _Stub(lambda xs: [0] * len(xs)), "disagreement"),
        (HIST, _Stub(fail=lambda: {}["k"]), "unclear_error"),
        (HIST, _Stub(fail=_attnsim_value_error), "refused"),
        (BAD_AGG, _Stub(lambda xs: [None] * len(xs)), "disagreement"),
        (BAD_AGG, _Stub(fail=_attnsim_value_error), "agreed_by_error"),
        (BAD_AGG, _Stub(fail=lambda: [][0]), "unclear_error"),
    ],
)
def test_check_case_classifies_outcomes(monkeypatch, program, model, status):
    monkeypatch.setattr(fp, "compile_program", lambda *a, **k: model)
    out = fp.check_case(_case(program, ["a", "b"], [["a", "b"], ["b", "a"]]), "hard")
    assert out.status == status
    assert out.compiled


@pytest.mark.parametrize(
    "fail, status",
    [(_attnsim_value_error, "refused"), (lambda: {}["k"], "unclear_error")],
)
def test_a_program_counts_as_compiled_only_after_it_ran(monkeypatch, fail, status):
    def compile_fails(*a, **k):
        fail()

    monkeypatch.setattr(fp, "compile_program", compile_fails)
    tally = fp.Tally()
    case = _case(HIST, ["a"], [["a"]])
    out = fp.check_case(case, "hard")
    tally.add(case, out, "hard")
    assert (out.status, out.compiled, tally.drawn, tally.compiled) == (status, False, 1, 0)
    assert out.reason.startswith("compile: ")
