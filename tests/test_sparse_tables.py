"""Sparse position tables (``rasp.gathers.sparse_table``): the same values, compiled model
and weights as the dense ``position_table`` of the same column, and bad tables refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim import compile_program, rasp
from attnsim.rasp import gathers
from attnsim.rasp.interpret import RASPEvaluationError


def _both(column: list[float]):
    """The dense table and the sparse one of ``column`` (default -1)."""
    at = [p for p, v in enumerate(column) if v != -1.0]
    return (
        gathers.position_table(column),
        gathers.sparse_table(len(column), -1.0, at, [column[p] for p in at]),
    )


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([-1.0, 0.0, 1.0, 2.0, 3.5, 7.0]), min_size=1, max_size=9))
def test_a_sparse_table_reads_as_its_dense_column(column):
    dense, sparse = _both(column)
    for n in (len(column), len(column) + 3):  # past the table: 0
        xs = ["a"] * n
        assert rasp.evaluate(sparse, xs) == rasp.evaluate(dense, xs)
    assert gathers.table_of(sparse).tolist() == column


def test_a_gather_through_a_sparse_table_compiles_as_the_dense_one():
    x = rasp.numerical(rasp.Map(float, rasp.tokens))
    dense, sparse = _both([-1.0, 0.0, -1.0, 4.0, 1.0])
    models = [
        compile_program(gathers.gather(t, x), vocab=[1, 2, 3], max_seq_len=5)
        for t in (dense, sparse)
    ]
    state = [m.model.state_dict() for m in models]
    assert state[0].keys() == state[1].keys()
    for name in state[0]:  # bit for bit the same weights
        assert np.array_equal(state[0][name].numpy(), state[1][name].numpy()), name
    rng = np.random.default_rng(0)
    for _ in range(20):
        xs = rng.integers(1, 4, size=5).tolist()
        want = rasp.evaluate(gathers.gather(sparse, x), xs)  # the interpreter
        assert models[1].run(xs) == want == models[0].run(xs)


@pytest.mark.parametrize(
    "args, match",
    [
        ((4, -1.0, [2, 1], [0.0, 1.0]), "must ascend within 0..3"),
        ((4, -1.0, [1, 1], [0.0, 1.0]), "each once"),
        ((4, -1.0, [4], [0.0]), "within 0..3"),
        ((4, -1.0, [-1], [0.0]), "within 0..3"),
        ((4, -1.0, [1, 2], [0.0]), "one value per listed position, got 2 positions and 1"),
    ],
)
def test_bad_sparse_tables_are_refused(args, match):
    with pytest.raises(ValueError, match=match):
        gathers.sparse_table(*args)


def test_a_non_finite_entry_is_refused_by_the_compiler():
    x = rasp.numerical(rasp.Map(float, rasp.tokens))
    bad = gathers.gather(gathers.sparse_table(5, -1.0, [1], [float("nan")]), x)
    with pytest.raises(RASPEvaluationError, match="finite values only"):
        compile_program(bad, vocab=[1, 2, 3], max_seq_len=5)
