"""``executor="jit"``: the feature-major pass compiled by torch's compiler (inductor), against the
definition (the dense forward) and the interpreter; weights changed after a compile, another
batch size, a compiler that fails (a warning, then the uncompiled pass) and the inputs and
runs that keep to the uncompiled paths."""

from __future__ import annotations

import random
import shutil
import warnings

import pytest
import torch
import torch._inductor  # the compiler executor='jit' calls: patched below

from attnsim import library, rasp
from attnsim.compiler import compile_program
from attnsim.model import fused
from attnsim.model.costs import MEASURED_RUNS, TRIES
from attnsim.model.runtime import Runtime
from tests.test_plans import assert_close

# inductor compiles C++ on the CPU: where no compiler is installed, the runtime must still
# give the right outputs (uncompiled, with a warning), which the tests check either way
HAS_CXX = shutil.which("g++") is not None or shutil.which("c++") is not None


def _inputs(entry, n: int, count: int, seed: int) -> list:
    rng = random.Random(seed)
    return [[rng.choice(entry.vocab) for _ in range(n)] for _ in range(count)]


@pytest.mark.parametrize("name", ["make_hist", "make_frac_prevs"])
def test_jit_gives_the_definition_and_the_interpreter(name):
    """hist (float32, categorical) and frac_prevs (float64 means of several keys): the
    compiled pass gives the definition's stream to rounding, the interpreter's outputs, on
    two batch sizes (the second compiles again)."""
    entry = library.PROGRAMS[name]
    model = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)
    rt = Runtime(model.model, "jit")
    n = entry.max_seq_len
    assert fused.chosen(rt, n + 1)  # short: the feature-major pass, compiled
    for count, seed in ((16, 1), (5, 2)):
        xs = _inputs(entry, n, count, seed)
        ids, vals = model.encode(xs)
        with torch.no_grad():
            got = rt(ids, vals)
        assert_close(got, model.model(ids, vals))
        with torch.no_grad():  # the compiled pass itself (the call may have kept the plans)
            compiled = fused.forward(rt, ids, vals, None, None, True)
        assert_close(compiled, model.model(ids, vals))
        if HAS_CXX:  # compiled, not fallen back
            assert rt.fused.get("jit") not in (None, False)
        model.executor = "jit"
        assert model.run(xs) == rasp.evaluate(entry.factory(), xs)


def test_jit_follows_weights_changed_after_its_compile():
    model = compile_program(library.make_hist(), vocab="abc", max_seq_len=5)
    rt = Runtime(model.model, "jit")
    ids, _ = model.encode(["abcab", "aabbc", "cccab"])
    with torch.no_grad():
        before = rt(ids).clone()
        model.model.blocks[0].mlp.W_out.mul_(2.0)
        after = rt(ids)
    assert not torch.equal(before, after)
    assert_close(after, model.model(ids))
    with torch.no_grad():  # the compiled pass itself, compiled again for the new weights
        assert_close(fused.forward(rt, ids, None, None, None, True), model.model(ids))


def test_measuring_leaves_the_plans_as_one_call_does():
    """The first call under jit times the plans on one batch several times: what the plan
    executor learns from a call (its layers' counts of failed certificates) is as after
    one planned call, and the sublayer profile counts one call."""
    entry = library.PROGRAMS["make_sort"]
    model = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=8)
    ids, vals = model.encode(_inputs(entry, 8, 64, 4))
    learned = []
    for executor in ("plan", "jit"):
        rt = Runtime(model.model, executor)
        rt.profile = {}
        with torch.no_grad():
            rt(ids, vals)
        learned.append(([dict(s.misses) for s in rt.layers], sorted(rt.profile)))
    assert learned[0] == learned[1]
    assert any(learned[0][0])  # the batch made a certificate fail somewhere


def test_the_plans_are_timed_as_later_calls_run_them(monkeypatch):
    """A head whose certificate fails twice runs dense from then on: the timed planned
    runs of jit's first call see that settled state (timed before it, the plans looked
    slower than later calls make them: make_sort at 20 kept a pass twice as slow)."""
    entry = library.PROGRAMS["make_sort"]
    model = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=8)
    ids, vals = model.encode(_inputs(entry, 8, 64, 4))
    rt = Runtime(model.model, "jit")
    seen = []
    planned = rt._planned

    def spy(*args):
        seen.append([dict(s.misses) for s in rt.layers])
        return planned(*args)

    monkeypatch.setattr(rt, "_planned", spy)
    with torch.no_grad():
        rt(ids, vals)
    timed = seen[1 + TRIES : 1 + TRIES + MEASURED_RUNS]  # after the first and settling runs
    assert len(timed) == MEASURED_RUNS
    assert not any(seen[0]) and any(timed[0])  # (a dict of counts: true when not empty)
    assert all(count >= TRIES for state in timed for m in state for count in m.values())


def test_a_compiler_that_fails_warns_once_and_the_pass_runs_uncompiled(monkeypatch):
    def broken(graph, example, *args):
        raise RuntimeError("no C++ compiler found")

    model = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    rt = Runtime(model.model, "jit")
    first, _ = model.encode(["abab"])
    with torch.no_grad():
        rt(first)  # compiled (where a C++ compiler exists), and a choice measured on it
    monkeypatch.setattr(torch._inductor, "compile", broken)
    ids, _ = model.encode(["abba", "baab"])
    with pytest.warns(RuntimeWarning, match="torch could not compile here.*no C\\+\\+ compiler"):
        got = rt(ids)
    assert rt.fused["jit"] is False
    # the passes compiled before went, and the choices measured on them
    assert fused.signature(first, None) not in rt.fused.get("fastest", {})
    assert_close(got, model.model(ids))
    assert_close(rt(first), model.model(first))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: no second warning
        assert_close(rt(ids), model.model(ids))


def test_jit_keeps_other_runs_uncompiled(monkeypatch):
    """Stages asked for (``streams``), long inputs (the plans), weights being trained and
    token values that need gradients never reach the compiler; the outputs are the
    definition's, and gradients reach the token values."""
    calls = []
    real = torch._inductor.compile

    def counting(graph, example, *args):
        calls.append(graph)
        return real(graph, example, *args)

    monkeypatch.setattr(torch._inductor, "compile", counting)
    model = compile_program(library.make_hist(), vocab="ab", max_seq_len=40)
    rt = Runtime(model.model, "jit")
    ids, _ = model.encode(["ab" * 20])  # 41 positions: past the feature-major inputs
    assert not fused.chosen(rt, ids.shape[1])
    with torch.no_grad():
        assert_close(rt(ids), model.model(ids))
    short, _ = model.encode(["abba"])
    stages = 2 * len(model.model.blocks) + 1
    streams: dict = dict.fromkeys(range(stages))  # every stage asked for
    with torch.no_grad():
        got = rt(short, None, streams=streams)
    assert_close(got, model.model(short))
    assert all(isinstance(streams[s], torch.Tensor) for s in range(stages))
    assert_close(streams[stages - 1], got)
    for p in model.model.parameters():
        p.requires_grad_(True)
    assert_close(rt(short).detach(), model.model(short).detach())
    assert calls == []
    num = _prefix_mean()
    ids, vals = num.encode([[1, 2, 0, 1, 2, 2], [0, 0, 1, 2, 1, 0]])
    rt = Runtime(num.model, "jit")
    assert fused.chosen(rt, ids.shape[1])
    weights = torch.linspace(-1.0, 1.0, num.model.cfg.d_model, dtype=num.model.dtype)
    grads = []
    for run in (rt, num.model):
        x = vals.clone().requires_grad_(True)
        (run(ids, x) * weights).sum().backward()
        grads.append(x.grad)
    assert calls == []
    assert_close(grads[0], grads[1])
    assert bool((grads[1] != 0).any())
    with torch.no_grad():  # no gradients asked for: compiled
        assert_close(rt(ids, vals), num.model(ids, vals))
    assert len(calls) == (1 if HAS_CXX else 0)


def _prefix_mean():
    """The mean of the numerical tokens up to each position (causal, float64)."""
    prefix = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ)
    program = rasp.numerical(rasp.Aggregate(prefix, rasp.numerical(rasp.tokens), default=0))
    return compile_program(program, vocab=[0, 1, 2], max_seq_len=6, causal=True)


def test_the_executor_is_named_where_it_is_taken():
    model = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    model.executor = "jit"
    assert model.runtime.executor == "jit"
    with pytest.raises(ValueError, match="'jit'"):
        model.executor = "jitted"
    sparse = compile_program(library.make_hist(), vocab="ab", max_seq_len=3, storage="sparse")
    ids, vals = sparse.encode(["aba"])
    sparse.executor = "jit"
    with pytest.raises(ValueError, match="'fused' and 'jit' need dense weights"):
        sparse.runtime(ids, vals)


def test_bad_inputs_under_jit_end_as_the_definition_ends():
    """A token id outside the embedding is refused before anything compiles; a NaN
    numerical token runs the definition (the plans and the compiled pass are made for
    finite values): its NaN positions and, elsewhere, its values, with nothing compiled."""
    model = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    rt = Runtime(model.model, "jit")
    with pytest.raises(ValueError, match="token id 7 is not a row of this model's embedding"):
        rt(torch.tensor([[0, 1, 7]]))
    num = _prefix_mean()
    ids, vals = num.encode([[1, 2, 0, 1, 2, 2], [0, 0, 1, 2, 1, 0]])
    vals = vals.clone()
    vals[0, 3] = float("nan")
    rt = Runtime(num.model, "jit")
    assert fused.chosen(rt, ids.shape[1])
    with torch.no_grad():
        got, want = rt(ids, vals), num.model(ids, vals)
    assert torch.equal(got.isnan(), want.isnan()) and bool(want.isnan().any())
    assert_close(got.nan_to_num(0.0), want.nan_to_num(0.0))
    assert rt.fused.get("jit") is None


def test_an_error_of_the_input_is_raised_and_compiling_stays(monkeypatch):
    """Where compiling fails and the uncompiled pass fails as well, the error is the
    input's: it is raised as it is, with no warning, and the runtime keeps compiling."""
    model = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    rt = Runtime(model.model, "jit")
    ids, _ = model.encode(["abba", "baab"])

    def compiler_fails(*args):
        raise RuntimeError("compiler")

    def input_fails(*args):
        raise ValueError("the input's own error")

    monkeypatch.setattr(fused, "_compile", compiler_fails)
    monkeypatch.setattr(fused, "_whole", input_fails)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="the input's own error"):
            with torch.no_grad():
                rt(ids)
    assert rt.fused.get("jit") is not False


def test_weights_made_in_inference_mode_run_uncompiled_with_a_warning(monkeypatch):
    """Tensors made under ``torch.inference_mode()`` keep no version counter, so nothing
    compiled for them could be kept between calls: executor "jit" compiles nothing for such
    weights (before, it compiled again on every call, seconds each), says so, and gives the
    definition's outputs."""
    compiled = []

    def refuse(*args):
        compiled.append(args)
        raise AssertionError("compiled")

    monkeypatch.setattr(fused, "_compile", refuse)
    entry = library.PROGRAMS["make_hist"]
    xs = _inputs(entry, entry.max_seq_len, 4, seed=5)
    with torch.inference_mode():
        model = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)
        ids, _ = model.encode(xs)
        rt = Runtime(model.model, "jit")
        for _ in range(3):
            with pytest.warns(RuntimeWarning, match="inference_mode"):
                got = rt(ids)
            assert_close(got, model.model(ids))
        want = [model.run(x, executor="dense") for x in xs]
        with pytest.warns(RuntimeWarning, match="runs uncompiled"):
            assert [model.run(x, executor="jit") for x in xs] == want
    assert compiled == []
