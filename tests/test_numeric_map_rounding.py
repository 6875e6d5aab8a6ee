"""Numerical maps realised as tables of steps: proved against float rounding, or refused.

A map of a number with a finite value set is a table of ReLU steps between the values
(``forms.discretise``); its output is the result at the smallest value plus the change at
each step below the input. Where results are huge and some values close, those sums cancel
and float rounding swamps a small result: the compiler bounds that rounding
(``ir.discretise.output_rounding``) and refuses the map, naming the values, where it is not
within 1e-9 of the result. The oracle is the interpreter.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnsim
from attnsim import rasp
from attnsim.ir import discretise as D

C = rasp.Comparison
VOCAB = [-4.0, 6154405722775.249, 6154405722775.255, 6154405728929.661]


def _close(a, b) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def _repro():
    v3 = rasp.numerical(rasp.SelectorWidth(rasp.Select(rasp.indices, rasp.indices, C.GEQ)))
    v4, v5 = rasp.numerical(rasp.tokens), rasp.numerical(rasp.tokens)
    v7 = rasp.numerical(v3 - rasp.numerical(v4 - v5))
    return rasp.numerical(rasp.Map(lambda x: x * x - 1, v7))


@pytest.mark.parametrize("attention", ["hard", "softmax"])
@pytest.mark.parametrize("fixed_length", [False, True])
def test_huge_table_with_close_values_is_refused_naming_them(attention, fixed_length):
    prog = _repro()
    assert rasp.evaluate(prog, [VOCAB[1]]) == [0.0]
    with pytest.raises(NotImplementedError) as info:
        attnsim.compile_program(
            prog, vocab=VOCAB, max_seq_len=1, attention=attention, fixed_length=fixed_length
        )
    msg = str(info.value)
    assert "cannot be computed to float rounding in float64" in msg
    assert "at the input" in msg and "more than 1e-09 of the result" in msg
    assert "narrow the input's value set" in msg


def test_table_within_the_bound_still_compiles_exactly():
    prog = rasp.numerical(rasp.Map(lambda x: x * x - 1, rasp.numerical(rasp.tokens)))
    vocab = [-3.0, -1.0, 0.5, 1.0, 2.0, 1000.0]
    m = attnsim.compile_program(prog, vocab=vocab, max_seq_len=3)
    for xs in ([1.0, -1.0, 0.5], [1000.0, -3.0], [2.0]):
        got = m.run(xs)
        want = rasp.evaluate(prog, xs)
        assert all(_close(a, b) for a, b in zip(got, want)), (xs, got, want)
    assert "steps on finite values, exact" in str(m.report())


def test_bound_covers_the_rounding_of_the_units():
    # the steps' units evaluated in float64 (numpy) stay within the bound at every value;
    # above 1.006 the step to 6.15e12 has 3.8e25-sized terms, and the bound says so
    xs = [-4.0, 1.0, 1.006, 6.15e12]
    ys = [x * x - 1 for x in xs]
    units = D.step_units("f", {"x": 1.0}, xs, [{"y": y} if y else {} for y in ys])
    s = {"bos": np.zeros(4), "notbos": np.ones(4), "x": np.array(xs)}
    got = sum(u.apply(s).get("y", np.zeros(4)) for u in units)
    bounds, worst = D.output_rounding(xs, ys, 0.0, 1, 2.0**-53)
    err = np.abs(got - np.array(ys))
    assert (err <= np.array(bounds)).all(), (err, bounds)
    assert bounds[0] < 1e-12 and bounds[3] > 1e9 and worst == 2  # 1.006 .. 6.15e12


FUNCS = {
    "x*x": lambda x: x * x,
    "x*x-1": lambda x: x * x - 1,
    "abs": lambda x: x if x >= 0 else -x,
    "1/(1+x*x)": lambda x: 1 / (1 + x * x),
}


@st.composite
def vocabs(draw):
    scale = 10.0 ** draw(st.integers(0, 13))
    base = draw(st.floats(-2.0, 2.0, allow_nan=False)) * scale
    gaps = draw(st.lists(st.sampled_from([1e-3, 0.5, 1.0, 1e3, scale]), min_size=1, max_size=4))
    vals = [round(base, 3)]
    for g in gaps:
        vals.append(vals[-1] + g)
    extra = draw(st.sampled_from([[], [0.0], [-1.0, 1.0]]))
    return sorted(set(vals + extra))


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(
    vocab=vocabs(),
    name=st.sampled_from(sorted(FUNCS)),
    attention=st.sampled_from(["hard", "softmax"]),
    diff=st.booleans(),
)
def test_compiled_numeric_maps_agree_or_are_refused(vocab, name, attention, diff):
    x = rasp.numerical(rasp.tokens)
    if diff:  # tokens - tokens + width: value inference takes the two as independent
        w = rasp.numerical(rasp.SelectorWidth(rasp.Select(rasp.indices, rasp.indices, C.GEQ)))
        x = rasp.numerical(w - rasp.numerical(rasp.numerical(rasp.tokens) - x))
    prog = rasp.numerical(rasp.Map(FUNCS[name], x))
    try:
        m = attnsim.compile_program(prog, vocab=vocab, max_seq_len=2, attention=attention)
    except NotImplementedError as exc:
        assert "float rounding" in str(exc), str(exc)
        return
    for xs in [[v] for v in vocab] + [vocab[:2]]:
        got, want = m.run(xs), rasp.evaluate(prog, xs)
        assert all(_close(a, b) for a, b in zip(got, want)), (xs, got, want)


def test_a_numerical_table_over_stepped_values_near_1e12_is_exact_or_refused():
    C = rasp.Comparison
    width = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, C.EQ))
    small = rasp.numerical(
        rasp.Map(lambda x: min(x, 3), rasp.SequenceMap(lambda x, y: x - y, rasp.Full(2), width))
    )
    shifted = rasp.numerical(
        rasp.SequenceMap(lambda x, y: x + y, rasp.numerical(rasp.indices), small)
    )
    big = rasp.numerical(rasp.LinearSequenceMap(rasp.numerical(rasp.tokens), shifted, 0.5, 3))
    program = rasp.numerical(rasp.SequenceMap(lambda x, y: x * y, small, big))
    vocab = [-906226705365.3782, -604151136910.8563, -604151136910.2521, -3.0]
    xs = [-906226705365.3782, -3.0, -604151136910.8563]
    try:
        model = attnsim.compile_program(program, vocab=vocab, max_seq_len=4)
    except NotImplementedError as exc:
        assert "float rounding" in str(exc)
        return
    got, want = model.run(xs), rasp.evaluate(program, xs)
    assert all(math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-9) for g, w in zip(got, want))


def _noisy_codes(order=("p", "notbos", "q")):
    """One-hot codes made by steps on ``0.5 p + 3 q`` with terms near 1e12 that cancel to
    small values (as a linear map of a token and a position-dependent number does), each
    unit's input summed in float64 in the given order of directions (a matmul's order)."""
    xs = [-4.37, -1.52, 1.13, 3.0e11]
    rng = np.random.default_rng(0)
    q = 1.0e11 + rng.uniform(0, 1000, size=len(xs))
    p = 2.0 * (np.array(xs) - 3.0 * q)
    form = {"p": 0.5, "q": 3.0}
    vecs = [{f"c:{i}": 1.0} for i in range(len(xs))]
    s = {"notbos": np.ones(len(xs)), "p": p, "q": q}
    codes = {f"c:{i}": np.zeros(len(xs)) for i in range(len(xs))}
    for u in D.step_units("c", form, xs, vecs):
        coef = dict(u.inputs)
        acc = np.zeros(len(xs))
        for d in order:
            acc = acc + coef.get(d, 0.0) * s[d]
        for k, v in u.outputs:
            codes[k] = codes[k] + v * np.maximum(acc, 0.0)
    size = float(np.max(np.abs(0.5 * p) + np.abs(3.0 * q)))
    return xs, vecs, codes, size


def test_one_hot_bound_covers_the_rounding_of_steps_on_large_terms():
    import itertools

    errs = []
    for order in itertools.permutations(("p", "notbos", "q")):
        xs, vecs, codes, size = _noisy_codes(order)
        got = np.stack([codes[f"c:{i}"] for i in range(len(xs))], axis=1)
        errs.append(float(np.abs(got - np.eye(len(xs))).max()))
    bound = max(D.one_hot_rounding(xs, vecs, size, 2, 2.0**-53).values())
    assert max(errs) <= bound < 0.25, (errs, bound)
    assert max(errs) > 0.0, errs  # the rounding is real (a table's 1e12 output reads it)


def test_a_saturated_table_reads_rounded_codes_exactly_where_a_plain_one_does_not():
    from attnsim.ir import lookup

    # codes off by what steps on 1e12-sized terms leave (2.2e-16 on a false entry: the
    # compiled model of the test above read 4.49997 for 4.5 from that), and by 1e-4
    n = 4
    outs = [3e11, -7.0, 4.5, 0.5]
    rows = [((f"c:{i}",), (("y", y),)) for i, y in enumerate(outs)]
    for off in (2.2e-16, 1e-4):
        codes = {f"c:{i}": np.eye(n)[:, i] + off * (1 - 2 * np.eye(n)[:, i]) for i in range(n)}
        s = {"bos": np.zeros(n), "notbos": np.ones(n), **codes}

        def table(units, s=s):
            return sum(u.apply(s).get("y", np.zeros(n)) for u in units)

        plain = table(lookup.lookup_units("t", rows))
        sat = table(lookup.saturated_lookup_units("t", rows))
        tol = 1e-9 * np.maximum(np.abs(outs), 1.0)
        assert (np.abs(sat - np.array(outs)) <= tol).all(), sat
        assert (np.abs(plain - np.array(outs)) > tol).any(), plain  # what the proof catches


def test_a_number_read_from_a_rounded_code_is_exact_in_the_compiled_model():
    # big's one-hot code comes from steps on 0.5 * tokens + 3 * shifted (terms near 1e12);
    # a numerical map of it reads the code through a saturated table, not linearly
    C = rasp.Comparison
    width = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, C.EQ))
    shifted = rasp.numerical(
        rasp.SequenceMap(lambda x, y: x + y, rasp.numerical(rasp.indices), width)
    )
    big = rasp.numerical(rasp.LinearSequenceMap(rasp.numerical(rasp.tokens), shifted, 0.5, 3))
    out = rasp.numerical(rasp.SequenceMap(lambda x, y: x if x > -100 else 0.0, big, width))
    vocab = [-906226705365.3782, -604151136910.8563, -3.0, -9.0]
    model = attnsim.compile_program(out, vocab=vocab, max_seq_len=3)
    assert "saturated" in str(model.report())
    for xs in ([-906226705365.3782, -3.0, -604151136910.8563], [-9.0, -3.0], [-3.0, -3.0, -9.0]):
        got, want = model.run(xs), rasp.evaluate(out, xs)
        close = [math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-9) for g, w in zip(got, want)]
        assert all(close), (xs, got, want)


def test_one_hot_bound_refuses_mismatched_outputs():
    with pytest.raises(ValueError, match="3 values but 2 outputs"):
        D.one_hot_rounding([0.0, 1.0, 2.0], [{"a": 1.0}, {"b": 1.0}], 0.0, 1, 2.0**-53)
    assert D.one_hot_rounding([], [], 0.0, 1, 2.0**-53) == {}
