"""SelectMax compiled: exact on finite scores, bounded on real ones, refused where it would
be wrong; every case checked against the interpreter."""

import pytest

import attnsim
from attnsim import rasp
from attnsim.rasp.expr import SelectMax

EVERY = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.TRUE)


@pytest.mark.parametrize("attention", ["hard", "softmax"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("xs", [[0, 0, 0], [1, 2, 3], [3, 1, 2, 3], [2]])
def test_near_ties_of_a_finite_score_are_told_apart(attention, causal, xs):
    # scores 0.1 apart (below the head's tolerance): the compiler stretches them
    x = rasp.numerical(rasp.Map(lambda t: t / 10, rasp.tokens), value_range=(-1, 1))
    sel = SelectMax(EVERY, x)
    for program in (
        rasp.numerical(rasp.Aggregate(sel, x)),
        rasp.numerical(rasp.Aggregate(sel, rasp.numerical(rasp.Map(float, rasp.indices)))),
    ):
        model = attnsim.compile_program(
            program, vocab=[0, 1, 2, 3], max_seq_len=4, attention=attention, causal=causal
        )
        want = rasp.evaluate(program, xs, causal=causal)
        assert model.run(xs) == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_position_only_max_on_shorter_inputs(n):
    # the maximum over the keys that exist: not static unless every key always exists
    idx = rasp.numerical(rasp.Map(float, rasp.indices), value_range=(0, 10))
    program = rasp.numerical(rasp.Aggregate(SelectMax(EVERY, idx), idx, default=0))
    model = attnsim.compile_program(program, vocab=[0, 1], max_seq_len=5)
    xs = [0] * n
    assert model.run(xs) == rasp.evaluate(program, xs) == [float(n - 1)] * n


def test_another_value_over_a_real_valued_max_is_refused():
    x = rasp.numerical(rasp.tokens, value_range=(-1, 1))
    program = rasp.numerical(
        rasp.Aggregate(SelectMax(EVERY, x), rasp.numerical(rasp.Map(float, rasp.indices)))
    )
    with pytest.raises(NotImplementedError, match="only the numerical mean of that score"):
        attnsim.compile_program(program, vocab=None, max_seq_len=4)


def test_the_row_maximum_of_a_real_valued_score_is_bounded():
    x = rasp.numerical(rasp.tokens, value_range=(-10, 10))
    program = rasp.numerical(rasp.Aggregate(SelectMax(EVERY, x), x))
    model = attnsim.compile_program(program, vocab=None, max_seq_len=4)
    xs = [0.5, -3.0, 7.25, 7.0]
    got, want = model.run(xs), rasp.evaluate(program, xs)
    assert want == [7.25] * 4
    assert all(w - 0.25 <= g <= w for g, w in zip(got, want))
    assert any(r.get("level") == "bounded" for r in model.report().realisations)
