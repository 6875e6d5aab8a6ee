"""The differential test against tracr: random programs built with tracr's own classes.

Each program (``tests/fuzz_tracr.py``) is evaluated by tracr's evaluator (``rasp.evaluate``,
its ``DefaultRASPEvaluator``), converted with ``attnsim.rasp.from_tracr``, evaluated by
attnsim's interpreter, compiled (``attnsim.compile_program``) and run; wherever attnsim
compiles, its values are tracr's. Needs tracr-pypi (the ``bench`` extra); skipped without it.
The larger sweep is ``benchmarks/compiler_fuzz.py --tracr N``.

Two classes of difference are known and marked as expected failures until attnsim's
interpreter takes tracr's semantics for them (issue 30), each with its own marker:

- ``pending_none_semantics``: tracr's Map and SequenceMap give None where an input is None,
  and an empty numerical Aggregate gives its default (None unless given);
- ``pending_tracr_categorical_mean``: tracr's evaluator averages a categorical Aggregate
  that selects several keys (a float for equal ints, the mean of different numbers), where
  attnsim takes the one value (as tracr's compiled model does) or raises.

Both markers are strict: when those semantics land, the marked tests pass, pytest reports
them as XPASS failures, and the markers are to be removed.
"""

from __future__ import annotations

import pytest

pytest.importorskip("tracr")

from tracr.rasp import rasp as tr  # noqa: E402

from attnsim import rasp  # noqa: E402
from tests import fuzz_tracr as ft  # noqa: E402

N_PROGRAMS = 250  # drawn in CI: about 15 s on one core
N_SLOW = 2000  # the bar, per attention mode
SEED = 30

pending_none_semantics = pytest.mark.xfail(
    strict=True,
    reason="attnsim's interpreter does not yet propagate None as tracr's evaluator does "
    "(Map/SequenceMap give None on None; an empty numerical Aggregate gives its default); "
    "issue 30: remove this marker when those semantics are merged",
)
pending_tracr_categorical_mean = pytest.mark.xfail(
    strict=True,
    reason="tracr's evaluator averages a categorical Aggregate that selects several keys "
    "(2.0 for [2, 2], 1.5 for [1, 2]); attnsim takes the value or raises; issue 30: remove "
    "this marker if attnsim takes tracr's mean",
)


def _report(tally: ft.Tally, statuses: tuple[str, ...]) -> str:
    lines = [f"{k}: {v}" for k, v in tally.reasons.most_common() if k.split(":")[0] in statuses]
    lines += [
        f"--- {e['status']}: {e['reason']}\n{e['detail']}\n{e['source']}"
        for e in tally.examples
        if e["status"] in statuses
    ][:3]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def tally() -> ft.Tally:
    return ft.fuzz(N_PROGRAMS, SEED, "hard")


EXPECTED_FEATURES = {
    "tokens", "indices", "length", "Full", "ConstantSOp", "Map", "SequenceMap",
    "LinearSequenceMap (categorical)", "LinearSequenceMap (numerical)", "SelectorWidth",
    "Aggregate categorical (one key)", "Aggregate categorical (any selector)",
    "Aggregate numerical (default None)", "Aggregate numerical (default given)",
    "Select categorical", "Select numerical", "Select custom predicate", "sugar selector &",
    "sugar selector |", "sugar selector ~", "simplified selector pair", "ConstantSelector",
    "sugar comparison", "sugar a + b", "named", "shared node", "Map numerical -> categorical",
    "Map categorical -> numerical", "Comparison TRUE", "Comparison FALSE", "Comparison LT",
}  # fmt: skip


def test_random_tracr_programs_agree_with_tracr(tally):
    assert tally.drawn == N_PROGRAMS
    # not vacuous: most programs compile and agree, and the constructs all occur
    assert tally.compiled >= N_PROGRAMS * 3 // 4
    assert tally.statuses["agreed"] >= N_PROGRAMS // 2
    assert EXPECTED_FEATURES <= set(tally.features), EXPECTED_FEATURES - set(tally.features)
    assert tally.count("disagreement") == 0, _report(tally, ("disagreement",))
    assert tally.count("unclear_error") == 0, _report(tally, ("unclear_error",))


@pending_none_semantics
def test_programs_whose_values_hold_none_agree_with_tracr(tally):
    assert tally.count("none_pending") == 0, _report(tally, ("none_pending",))


@pending_tracr_categorical_mean
def test_categorical_means_agree_with_tracr(tally):
    assert tally.count("tracr_mean") == 0, _report(tally, ("tracr_mean",))


@pytest.mark.slow
@pytest.mark.parametrize("attention, seed", [("hard", 31), ("softmax", 32)])
def test_2000_random_tracr_programs_agree_with_tracr(attention, seed):
    t = ft.fuzz(N_SLOW, seed, attention)
    assert t.drawn == N_SLOW and t.compiled >= N_SLOW * 3 // 4
    assert t.count("disagreement") == 0, _report(t, ("disagreement",))
    assert t.count("unclear_error") == 0, _report(t, ("unclear_error",))


# -- the check itself ------------------------------------------------------------------------------
def _case(program, vocab, xs) -> ft.TracrCase:
    return ft.TracrCase(
        program=program,
        lines=("v0 = <a hand-built program>",),
        vocab=vocab,
        vocab_kind="fixed",
        max_seq_len=max(len(x) for x in xs),
        fixed_length=False,
        inputs=xs,
        features=frozenset(),
    )


def test_an_agreeing_program_agrees_and_a_wrong_interpreter_is_caught(monkeypatch):
    hist = tr.SelectorWidth(tr.Select(tr.tokens, tr.tokens, tr.Comparison.EQ))
    case = _case(hist, ["a", "b"], [["a", "b", "a"], ["b"]])
    out = ft.check_case(case)
    assert (out.status, out.compiled, out.inputs_agreed) == ("agreed", True, 2)
    real = rasp.evaluate
    monkeypatch.setattr(ft.rasp, "evaluate", lambda p, xs: [v + 1 for v in real(p, xs)])
    assert ft.check_case(case).status == "disagreement"


def test_the_pending_classes_are_recognised():
    empty = tr.Aggregate(tr.Select(tr.indices, tr.indices, tr.Comparison.FALSE), tr.tokens)
    plus = tr.Map(lambda x: x + 1, empty)  # tracr: None; attnsim calls the function on None
    assert ft.holds_none(plus, [1, 2]) and not ft.holds_none(
        tr.Map(lambda x: x + 1, tr.tokens), [1]
    )
    everything = tr.Select(tr.indices, tr.indices, tr.Comparison.TRUE)
    mean = tr.Map(lambda x: str(x), tr.Aggregate(everything, tr.Full(2)))
    assert tr.evaluate(mean, [0, 0]) == ["2.0", "2.0"]  # tracr averages the two 2s
    assert ft.averages_categorical(mean, [0, 0]) and not ft.averages_categorical(mean, [0])
    numerical = tr.numerical(tr.Aggregate(everything, tr.numerical(tr.Full(2))))
    assert not ft.averages_categorical(numerical, [0, 0])
    assert ft.check_case(_case(mean, [0], [[0, 0]])).status == "tracr_mean"


def test_values_compare_as_tracr_compares_them():
    assert ft.same(1.0, True) and ft.same(2, 2.0) and ft.same(None, None)
    assert not ft.same(0, None) and not ft.same("1", 1) and not ft.same(2.0, 2.5)
    assert ft.same((1.0, "a"), (1, "a")) and not ft.same((1, "a"), (1, "b"))
