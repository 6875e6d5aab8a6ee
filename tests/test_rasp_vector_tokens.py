"""Vector tokens: rasp.token_channel(k) in the interpreter and in compiled models.

The oracle is numpy (the interpreter's values are checked against direct formulas first),
then the compiled models against the interpreter, with both executors and after a save/load.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnsim import compile_program, rasp
from attnsim.model.compiled import CompiledModel
from attnsim.rasp import gathers

RNG = np.random.default_rng(7)


def _programs():
    c = [rasp.token_channel(k) for k in range(3)]
    prev = rasp.Select(rasp.indices, rasp.indices - 1, rasp.Comparison.EQ)
    upto = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ)
    dot_prev = rasp.numerical(
        sum((ci * rasp.numerical(rasp.Aggregate(prev, ci, default=0)) for ci in c[1:]), c[0] * 0)
    )

    # numpy formulas for each program on X [batch, n, 3]
    def np_dot_prev(X):
        prevX = np.concatenate([np.zeros_like(X[:, :1]), X[:, :-1]], axis=1)
        return (X[..., 1:] * prevX[..., 1:]).sum(-1)

    def np_prefix_mean(X):
        return np.cumsum(X[..., 2], axis=1) / np.arange(1, X.shape[1] + 1)

    return [
        ("product", (c[0] * c[1]).named("prod"), lambda X: X[..., 0] * X[..., 1]),
        ("dot_prev", dot_prev.named("dot_prev"), np_dot_prev),
        (
            "prefix_mean",
            rasp.numerical(rasp.Aggregate(upto, c[2], default=0)).named("pm"),
            np_prefix_mean,
        ),
        (
            "gather_next",
            gathers.gather(lambda p: p + 1, c[1]).named("next"),
            lambda X: np.concatenate([X[:, 1:, 1], np.zeros_like(X[:, :1, 1])], axis=1),
        ),
    ]


@pytest.mark.parametrize("name, prog, oracle", _programs(), ids=[p[0] for p in _programs()])
def test_interpreter_and_compiled_match_numpy(name, prog, oracle, tmp_path):
    X = RNG.normal(size=(5, 6, 3))
    want = oracle(X)
    got = np.array(rasp.evaluate(prog, X))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    m = compile_program(prog, vocab=None, max_seq_len=6)
    assert m.config.token_width == rasp.reads_channels(prog)
    for executor in ("plan", "dense"):
        out = np.array(m.run(X, executor=executor))
        np.testing.assert_allclose(out, got, rtol=1e-12, atol=1e-12)
    # one sequence ([n, width]) and a shorter input
    np.testing.assert_allclose(np.array(m.run(X[0])), got[0], rtol=1e-12, atol=1e-12)
    short = np.array(m.run(X[:, :4]))
    np.testing.assert_allclose(short, np.array(rasp.evaluate(prog, X[:, :4])), atol=1e-12)
    loaded = CompiledModel.load(m.save(tmp_path / name))
    assert np.array_equal(np.array(loaded.run(X)), np.array(m.run(X)))


def test_channel_basics():
    ch = rasp.token_channel(2)
    assert ch.label == "tokens[2]" and rasp.is_numerical(ch)
    assert rasp.reads_channels(ch + rasp.token_channel(0)) == 3
    assert rasp.reads_channels(rasp.numerical(rasp.tokens)) == 0
    for bad in (-1, 1.5, True, "0"):
        with pytest.raises(ValueError, match="non-negative integer"):
            rasp.token_channel(bad)


def test_interpreter_bad_inputs():
    prog = rasp.token_channel(0) * rasp.token_channel(1)
    with pytest.raises(ValueError, match="expected an array"):
        rasp.evaluate(prog, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="width 1"):
        rasp.evaluate(prog, [[1.0], [2.0]])
    with pytest.raises(ValueError, match="finite"):
        rasp.evaluate(prog, [[1.0, float("nan")]])
    with pytest.raises(ValueError, match="real numbers"):
        rasp.evaluate(prog, [["a", "b"]])
    mixed = rasp.numerical(rasp.tokens) + rasp.token_channel(0)
    with pytest.raises(rasp.RASPEvaluationError, match="both `tokens` and token channels"):
        rasp.evaluate(mixed, [[1.0, 2.0]])
    assert rasp.evaluate(prog, np.zeros((0, 2))) == []


def test_compiled_bad_inputs():
    prog = (rasp.token_channel(0) * rasp.token_channel(1)).named("p")
    m = compile_program(prog, vocab=None, max_seq_len=4)
    with pytest.raises(ValueError, match="vector tokens of width 2"):
        m.run([1.0, 2.0])
    with pytest.raises(ValueError, match="vector tokens of width 2"):
        m.run(np.ones((2, 3, 1)))
    with pytest.raises(ValueError, match="vector tokens of width 2"):
        m.run(np.ones((2, 2, 3, 2)))
    with pytest.raises(ValueError, match="finite"):
        m.run([[1.0, float("inf")]])
    with pytest.raises(ValueError, match="exceeds the model's max_seq_len=4"):
        m.run(np.ones((5, 2)))
    with pytest.raises(ValueError, match="token_values"):
        m.model(torch.ones(1, 3, dtype=torch.long), torch.zeros(1, 3))
    mixed = rasp.numerical(rasp.tokens) + rasp.token_channel(0)
    with pytest.raises(NotImplementedError, match="both `tokens` and token channels"):
        compile_program(mixed, vocab=None, max_seq_len=4)


def test_channels_are_not_static_for_plans():
    """A selector on a token channel is data-dependent: the plan executor must not treat it
    as a fixed pattern (the interpreter decides)."""
    c0 = rasp.token_channel(0)
    sel = rasp.Select(c0, c0, rasp.Comparison.EQ)
    prog = rasp.numerical(rasp.Aggregate(sel, rasp.token_channel(1), default=0)).named("agg")
    m = compile_program(prog, vocab=None, max_seq_len=5, maps="relu")
    X = np.stack([RNG.integers(0, 2, size=(4, 5)).astype(float), RNG.normal(size=(4, 5))], -1)
    want = np.array(rasp.evaluate(prog, X))
    for executor in ("plan", "dense"):
        np.testing.assert_allclose(np.array(m.run(X, executor=executor)), want, atol=1e-9)
