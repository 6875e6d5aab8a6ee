"""Leaving a kind of plan out (``Runtime(net, without={kind})``, what benchmarks/plan_kinds.py
measures): the heads and units of that kind run by the next way that applies, with the
definition's outputs, and no plan of that kind is built; bad kinds are refused."""

import random

import numpy as np
import pytest
import torch

from attnsim import library, rasp
from attnsim.compiler import compile_program
from attnsim.model.plans import OPTIONAL_KINDS
from attnsim.model.runtime import Runtime
from attnsim.simulator import spec, universal

PROGRAMS = {  # between them every kind is built (checked below)
    "hist": (library.make_hist, list("abc")),
    "sort_unique": (lambda: library.make_sort_unique(rasp.tokens, rasp.tokens), [1, 2, 3, 4]),
    "sort": (
        lambda: library.make_sort(rasp.tokens, rasp.tokens, max_seq_len=10, min_key=1),
        [1, 2, 3],
    ),
    "count_less_freq": (lambda: library.make_count_less_freq(2), list("abc")),
    "frac_prevs": (lambda: library.make_frac_prevs(rasp.tokens == "a"), list("ab")),
    "reverse": (lambda: library.make_reverse(rasp.tokens), list("abc")),
}


def random_inputs(vocab, n: int, k: int, seed: int) -> list[list]:
    rng = random.Random(seed)
    return [[rng.choice(vocab) for _ in range(n)] for _ in range(k)]


def _kinds(rt: Runtime, n: int) -> set[str]:
    plans = rt.plans(n) or []
    kinds = {p.kind for layer in plans for p in layer}
    if any(p.kind == "step" for layer in rt.step_plans(n) for p in layer):
        kinds.add("steps")
    return kinds


@pytest.fixture(scope="module")
def models():
    out = {}
    for name, (make, vocab) in PROGRAMS.items():
        n = 20 if name == "hist" else 10  # (hist's width takes step tables from 20 on)
        m = compile_program(make(), vocab=vocab, max_seq_len=n)
        out[name] = (m, m.encode(random_inputs(vocab, n, 24, seed=1)))
    return out


def test_the_programs_build_every_kind(models):
    built = set()
    for m, (ids, _) in models.values():
        built |= _kinds(Runtime(m.model, "plan"), ids.shape[1])
    U = universal.build(4, 4, 1, layout="scalar", storage="dense")
    built |= _kinds(U.model.runtime, U.model.max_seq_len + 1)
    assert built >= set(OPTIONAL_KINDS), set(OPTIONAL_KINDS) - built


@pytest.mark.parametrize("kind", OPTIONAL_KINDS)
def test_without_a_kind_the_outputs_are_the_definitions(models, kind):
    for name, (m, (ids, vals)) in models.items():
        want = m.model(ids, vals)
        rt = Runtime(m.model, "plan", without={kind})
        for _ in range(3):  # (counts of failed tries settle within TRIES calls)
            got = rt(ids, vals)
            tol = 1e-12 if got.dtype == torch.float64 else 1e-5  # sums in another order
            torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=name)
        assert kind not in _kinds(rt, ids.shape[1]), name


@pytest.mark.parametrize("layout", ["scalar", "vector"])
def test_u_without_each_kind_simulates_the_target(layout):
    U = universal.build(4, 4, 1, layout=layout, storage="dense")
    X = torch.tensor(np.random.default_rng(0).standard_normal((4, 4)))
    target = spec.random_attention(1, 4, seed=0, bias=True)
    ids, vals = U.model_inputs(U.encode(target, X)[None])
    want = U.model.model(ids, vals)
    for kind in OPTIONAL_KINDS:
        rt = Runtime(U.model.model, "plan", without={kind})
        torch.testing.assert_close(rt(ids, vals), want, rtol=1e-11, atol=1e-11, msg=kind)
        assert kind not in _kinds(rt, ids.shape[1])


def test_bad_kinds_are_refused():
    m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    with pytest.raises(ValueError, match="without takes kinds of"):
        Runtime(m.model, without={"tables"})
    with pytest.raises(ValueError, match="without takes a set of kinds"):
        Runtime(m.model, without="table")  # a string is not a set of kinds
    with pytest.raises(ValueError, match="without takes a set of kinds"):
        Runtime(m.model, without=3)
    assert Runtime(m.model, without=None).without == frozenset()  # nothing left out
    sparse = compile_program(library.make_hist(), vocab="ab", max_seq_len=4, storage="sparse")
    with pytest.raises(ValueError, match="this model is in sparse storage"):
        Runtime(sparse.model, without={"table"})
    for bad in (0, m.model.cfg.n_ctx + 1, "5"):  # plans for a length the model cannot take
        with pytest.raises(ValueError, match="number of positions from 1 to"):
            Runtime(m.model).plans(bad)
