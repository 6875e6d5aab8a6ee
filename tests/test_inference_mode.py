"""Running under ``torch.inference_mode()``: every executor and both storages give what they
give outside it, for a model built outside (ordinary weights) or inside (inference tensors,
which have no version counter), and weights edited in place inside inference mode are
seen (nothing derived from the old weights is reused)."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch

from attnsim import library, simulator
from attnsim.compiler import compile_program
from attnsim.model.runtime import EXECUTORS
from attnsim.model.stream import stamp
from attnsim.simulator import spec


def _inputs(entry, count: int = 8) -> list:
    rng = random.Random(0)
    return [[rng.choice(entry.vocab) for _ in range(entry.max_seq_len)] for _ in range(count)]


@pytest.mark.parametrize("name", ["make_hist", "make_sort", "make_frac_prevs"])
@pytest.mark.parametrize("built_inside", [False, True])
def test_every_executor_runs_in_inference_mode(name, built_inside):
    entry = library.PROGRAMS[name]
    xs = _inputs(entry)
    oracle = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)
    want = [oracle.run(x, executor="dense") for x in xs]
    # executor "jit" compiles (seconds) for one program; built inside, it does not compile
    # (tests/test_jit.py) and warns
    for executor in [e for e in EXECUTORS if e != "jit" or name == "make_hist" or built_inside]:
        if built_inside:
            with torch.inference_mode():
                m = compile_program(
                    entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len
                )
                assert m.model.W_E.is_inference()
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", "executor='jit'", RuntimeWarning)
                    got = [m.run(x, executor=executor) for x in xs]
        else:
            m = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)
            with torch.inference_mode():
                got = [m.run(x, executor=executor) for x in xs]
            assert got == [m.run(x, executor=executor) for x in xs]  # and outside again
        assert got == want, (executor, built_inside)


def test_sparse_storage_runs_in_inference_mode():
    entry = library.PROGRAMS["make_sort"]
    xs = _inputs(entry)
    m = compile_program(
        entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len, storage="sparse"
    )
    ids, vals = m.encode(xs)
    want = m(ids, vals)
    with torch.inference_mode():
        got = m(ids, vals)
    assert torch.equal(got, want)


def test_the_simulator_runs_in_inference_mode():
    U = simulator.build(3, 3, 1, layout="vector", storage="dense")
    X = torch.tensor(np.random.default_rng(1).standard_normal((3, 3)))
    target = spec.random_attention(1, 3, seed=1)
    want = U.simulate(target, X)
    with torch.inference_mode():
        got = U.simulate(target, X)
    assert torch.equal(got, want)
    assert float((got - simulator.reference.attention(target, X)).abs().max()) < 1e-12


def test_weights_edited_in_place_inside_inference_mode_are_seen():
    # made inside inference mode, edited there: a reused plan would give the old outputs
    with torch.inference_mode():
        w = torch.zeros(3)
        before = stamp([w])
        w.add_(1.0)
        assert stamp([w]) != before
    entry = library.PROGRAMS["make_hist"]
    xs = _inputs(entry)
    with torch.inference_mode():
        m = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)
        ids, vals = m.encode(xs)
        first = m(ids, vals)
        m.model.blocks[0].attn.W_O.mul_(2.0)  # the head's output doubled, in place
        dense = m.model(ids, vals)  # the definition on the edited weights
        again = m(ids, vals)
    assert not torch.equal(first, dense)
    # the edit is seen (a stale plan is off by the doubled head's output); the executors
    # round as the definition up to the model's dtype (float32 here: the feature-major
    # products may round an entry otherwise on some CPUs)
    tol = 4 * torch.finfo(dense.dtype).eps * max(1.0, float(dense.abs().max()))
    assert float((again - dense).abs().max()) <= tol
