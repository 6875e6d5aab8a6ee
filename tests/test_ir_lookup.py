"""ir.lookup: a table built for a function on a small value set gives f on every input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from attnsim.ir import lookup
from attnsim.ir.blocks import BOS, NOTBOS


def one_hot_stream(assignments: list[dict[str, float]]) -> dict[str, np.ndarray]:
    """Positions 1..n hold the given directions at 1; BOS holds only ``bos``."""
    dims = sorted({d for a in assignments for d in a})
    s = {BOS: np.r_[1.0, np.zeros(len(assignments))], NOTBOS: np.r_[0.0, np.ones(len(assignments))]}
    for d in dims:
        s[d] = np.r_[0.0, [a.get(d, 0.0) for a in assignments]]
    return s


def run(units, s, out):
    return sum(u.apply(s).get(out, 0.0) for u in units)


@pytest.mark.parametrize(
    "f, xs",
    [
        (lambda x: x * x - 3, [-2, -1, 0, 1, 2]),
        (lambda x: 0.5 if x % 2 else -1.25, [1, 2, 3, 4, 5, 6]),
        (lambda x: 0, [7, 8]),
    ],
)
def test_numerical_table_of_one_argument(f, xs):
    rows = [((f"x:{x}",), (("y", float(f(x))),) if f(x) else ()) for x in xs]
    units = lookup.lookup_units("f", rows)
    assert len(units) == sum(1 for x in xs if f(x))
    s = one_hot_stream([{f"x:{x}": 1.0} for x in xs])
    got = run(units, s, "y")
    np.testing.assert_array_equal(np.broadcast_to(got, (len(xs) + 1,)), [0.0] + [f(x) for x in xs])


def test_categorical_table_of_two_arguments():
    xs, ys = ["a", "b"], [0, 1, 2]

    def f(x, y):
        return f"{x}{y % 2}"

    outs = sorted({f(x, y) for x in xs for y in ys})
    rows = [((f"x:{x}", f"y:{y}"), ((f"out:{f(x, y)}", 1.0),)) for x in xs for y in ys]
    units = lookup.lookup_units("f", rows)
    combos = list(itertools.product(xs, ys))
    s = one_hot_stream([{f"x:{x}": 1.0, f"y:{y}": 1.0} for x, y in combos])
    got = np.stack([np.broadcast_to(run(units, s, f"out:{o}"), (len(combos) + 1,)) for o in outs])
    for i, (x, y) in enumerate(combos, start=1):
        expected = [1.0 if o == f(x, y) else 0.0 for o in outs]
        assert got[:, i].tolist() == expected, (x, y)
    assert not got[:, 0].any()  # nothing at BOS


def test_a_repeated_argument_counts_twice():
    # f(x, x) with one S-op as both arguments: the row reads its direction with weight 2
    (unit,) = lookup.lookup_units("sq", [(("x:3", "x:3"), (("y", 9.0),))])
    assert dict(unit.inputs) == {"x:3": 2.0, NOTBOS: -1.0}
    s = one_hot_stream([{"x:3": 1.0}, {}])
    assert unit.apply(s)["y"].tolist() == [0.0, 9.0, 0.0]
