"""Execution plans against the dense forward: the same model, two executors, the same answers.

The dense forward (every head over [query, key]) is the definition of a compiled model; a plan
runs the heads whose pattern only the length decides as gathers and sparse sums, and hard heads
whose scores are mostly static on their candidate keys. Here every library program, matrix
program, task and U up to (8, 8, 4) runs both ways on random inputs, and fuzzed programs of the
whole language are compared output by output.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from attnsim import library, rasp, simulator
from attnsim.compiler import compile_program
from attnsim.matrix import apply, layout, programs
from attnsim.model import plans as P
from attnsim.model.config import ModelConfig
from attnsim.model.runtime import Runtime
from attnsim.model.transformer import Transformer
from attnsim.simulator import reference, spec
from attnsim.tasks import match2, parity
from tests import fuzz_programs as fp

REL = 1e-12  # sums over several keys may add the same terms in another order


def streams_both_ways(model, ids, vals, executor="plan"):
    """The final residual streams ``[batch, pos, d_model]`` with ``executor`` and dense."""
    rt = model.runtime
    saved, rt.executor = rt.executor, executor
    try:
        with torch.no_grad():
            planned = rt(ids, vals)
            dense = model.model(ids, vals)  # the definition
    finally:
        rt.executor = saved
    return planned, dense


def assert_close(planned, dense, rel=None):
    if rel is None:  # float32 models (dtype="auto") round their internal steps there: the
        # compiler picks float32 only where a step's input rounds by less than 1e-4 of its
        # ramp (precision.SEPARATION), and its one-hot outputs carry that rounding
        rel = REL if dense.dtype == torch.float64 else 1e-3
    scale = 1.0 + float(dense.abs().max())
    diff = float((planned - dense).abs().max())
    assert diff <= rel * scale, f"plan and dense differ by {diff:.3e} (scale {scale:.3e})"


def run_both(model, xs, executor="plan"):
    """Decoded outputs (or the error each executor raises) with ``executor`` and dense."""
    outs = []
    saved = model.executor
    try:
        for name in (executor, "dense"):
            model.executor = name
            try:
                outs.append(model.run(xs))
            except ValueError as exc:  # a run-time check: both executors must raise it
                outs.append(f"{type(exc).__name__}: {exc}")
    finally:
        model.executor = saved
    return outs


# -- the analysis on a hand-built model ----------------------------------------------------


def tiny(attention="hard"):
    """One layer, two heads over d_model 4: direction 0 is position 0's flag (static),
    direction 1 a token's (dynamic); head 0 reads positions only, head 1 reads the token."""
    cfg = ModelConfig(
        n_layers=1,
        d_model=4,
        n_heads=2,
        d_head=1,
        d_mlp=0,
        d_bilinear=0,
        n_ctx=5,
        d_vocab=3,
        attention=attention,
    )
    t = Transformer(cfg)
    a = t.blocks[0].attn
    with torch.no_grad():
        t.W_pos[0, 0] = 1.0
        t.W_E[1, 1], t.W_E[2, 1] = 1.0, 2.0
        a.W_Q[0, 0, 0] = a.W_K[0, 0, 0] = 1.0
        a.W_V[0, 1, 0] = 1.0
        a.W_O[0, 0, 2] = 1.0
        a.W_Q[1, 1, 0] = a.W_K[1, 1, 0] = 1.0
        a.W_V[1, 1, 0] = 1.0
        a.W_O[1, 0, 3] = 1.0
    return t


def test_static_directions_follow_the_weights():
    t = tiny()
    masks = P.static_directions(t)
    assert masks[0].tolist() == [True, False, True, True]
    # head 0's pattern is static but its values are not: direction 2 becomes dynamic
    assert masks[1].tolist() == [True, False, False, False]
    assert P.static_heads(t) == ((0,),)


def test_a_plan_is_the_dense_pattern():
    t = tiny()
    plan, table = Runtime(t).plans(5)[0]  # head 0 is static, head 1 a token-table head
    assert isinstance(table, P.TablePlan) and table.head == 1
    x = t.W_E[torch.tensor([[0, 1, 2, 1, 1]])] + t.W_pos[:5]
    cache = {}
    with torch.no_grad():
        t(torch.tensor([[0, 1, 2, 1, 1]]), cache=cache)
    assert x.shape == (1, 5, 4)
    dense = cache["blocks.0.attn.hook_pattern"][0, 0]
    assert torch.equal(plan.dense(torch.float64), dense)


@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_tiny_model_both_ways(attention):
    t = tiny(attention)
    ids = torch.tensor([[0, 1, 2, 2, 1], [0, 2, 2, 1, 1]])
    with torch.no_grad():
        a = Runtime(t, "plan")(ids)
        b = t(ids)  # the definition
    assert torch.equal(a, b)


def test_a_bad_executor_is_refused():
    t = tiny()
    with pytest.raises(ValueError, match="executor must be one of"):
        Runtime(t, "sparse")
    rt = Runtime(t)
    with pytest.raises(ValueError, match="executor must be one of"):
        rt.executor = "fast"
    assert rt.executor == "auto"
    # the definition has no executor: setting one is refused, not silently ignored
    with pytest.raises(AttributeError, match="Runtime"):
        t.executor = "plan"


def test_plans_follow_changed_weights():
    t = tiny()
    rt = Runtime(t)
    first = rt.plans(5)
    with torch.no_grad():
        t.blocks[0].attn.W_Q[0, 0, 0] = -1.0  # position 0 now repels every other query
    assert rt.plans(5) is not first
    ids = torch.tensor([[0, 1, 2, 1, 1]])
    with torch.no_grad():
        a = rt(ids)
        b = t(ids)
    assert torch.equal(a, b)


# -- the certificate of a partly static head -----------------------------------------------


def candidate_model(dynamic_query: bool = True):
    """A hard head whose score is 10 * [same block of two] + the key's token value: the
    static part picks the key's block, the token decides within it while it stays < 5.
    With ``dynamic_query`` every score of a query also gets its own token value (the same
    for all its keys), so that neither side is static."""
    n = 13
    cfg = ModelConfig(
        n_layers=1,
        d_model=5,
        n_heads=1,
        d_head=4,
        d_mlp=0,
        d_bilinear=0,
        n_ctx=n,
        d_vocab=1,
        numerical_tokens=True,
    )
    t = Transformer(cfg)
    a = t.blocks[0].attn
    block = torch.tensor([0.0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6])  # position -> block
    with torch.no_grad():
        t.W_pos[:, 0] = block  # dir 0: the block (static)
        t.W_pos[:, 1] = block**2  # dir 1: its square (static)
        t.W_pos[:, 2] = 1.0  # dir 2: one (static)
        t.W_E_num[3] = 1.0  # dir 3: the token value (dynamic)
        # score = -10 (b_q - b_k)^2 + v_k = 20 b_q b_k - 10 b_q^2 - 10 b_k^2 + v_k
        a.W_Q[0, 0, 0] = 20.0
        a.W_K[0, 0, 0] = 1.0
        a.W_Q[0, 1, 1] = -10.0
        a.W_K[0, 2, 1] = 1.0
        a.W_Q[0, 2, 2] = 1.0
        a.W_K[0, 1, 2] = -10.0
        a.W_K[0, 3, 2] = 1.0
        if dynamic_query:  # small: the certificate's bound on it stays below the gap
            a.W_Q[0, 3, 3] = 0.01
            a.W_K[0, 2, 3] = 1.0
        a.W_V[0, 3, 0] = 1.0
        a.W_O[0, 0, 4] = 1.0
    return t


def test_a_partly_static_head_runs_on_its_candidates_when_certified():
    t = candidate_model()
    rt = Runtime(t)
    plan = rt.plans(13)[0]
    # its candidates first; the classes of its rows where their certificate fails
    assert [type(p) for p in plan] == [P.HeadPlan, P.RowTablePlan] and plan[0].gap is not None
    vals = torch.tensor([[0.0, 1.0, 2.5, -1.0, 0.5, 2.0, 2.0, 1, -2, 0, 0, 3, 4]])
    ids = torch.zeros(1, 13, dtype=torch.long)
    with torch.no_grad():
        a = rt(ids, vals)
        b = t(ids, vals)
    assert torch.equal(a, b)
    assert P._run_candidates(t.blocks[0].attn, plan[0], a) is not None  # certified


def test_an_uncertified_head_runs_dense():
    t = candidate_model()
    rt = Runtime(t)
    plan = rt.plans(13)[0][0]
    vals = torch.tensor([[0.0, 1.0, 40.0, -1.0, 0.5, 2.0, 2.0, 1, -2, 0, 0, 3, 4]])
    ids = torch.zeros(1, 13, dtype=torch.long)  # 40 above: it crosses the gap of 10
    x = t.W_E[ids] + t.W_pos[:13] + vals[..., None] * t.W_E_num
    assert P._run_candidates(t.blocks[0].attn, plan, x) is None
    with torch.no_grad():
        a = rt(ids, vals)
        b = t(ids, vals)
    assert torch.equal(a, b)


def test_a_head_with_static_queries_runs_over_key_classes_on_any_input():
    # the same head with queries that read static directions only: no certificate, the
    # keys' classes (their distinct rows) and a table of scores, exact where the token
    # values cross the gap too
    t = candidate_model(dynamic_query=False)
    rt = Runtime(t, "plan")
    cand, plan = rt.plans(13)[0]  # its candidates first, then the key classes
    assert cand.gap is not None
    assert isinstance(plan, P.SidePlan) and plan.side == "queries"
    assert plan.static.shape == (13, 3)
    rt.layers[0].misses[0] = 2  # as after two failed certificates
    ids = torch.zeros(3, 13, dtype=torch.long)
    vals = torch.tensor(
        [
            [0.0, 1.0, 40.0, -1.0, 0.5, 2.0, 2.0, 1, -2, 0, 0, 3, 4],
            [0.0, 1.0, 2.5, -1.0, 0.5, 2.0, 2.0, 1, -2, 0, 0, 3, 4],
            [0.0] + [1.0] * 12,  # ties: every query of a block selects both keys
        ]
    )
    from attnsim.model import plan_keys

    with torch.no_grad():
        x = t.W_E[ids] + t.W_pos[:13] + vals[..., None] * t.W_E_num
        assert plan_keys.run(t.blocks[0].attn, plan, x) is not None  # few key classes
        a = rt(ids, vals)
        b = t(ids, vals)
    assert torch.equal(a, b)
    assert float(a[0, 1, 4]) == 40.0  # query 1 (block 1) picks the key of value 40


# -- compiled programs ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(library.PROGRAMS))
@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_library_programs_both_ways(name, attention):
    entry = library.PROGRAMS[name]
    model = compile_program(
        entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len, attention=attention
    )
    rng = random.Random(hash(name) % 1000)
    for n in (1, entry.max_seq_len // 2, entry.max_seq_len):
        xs = [[rng.choice(entry.vocab) for _ in range(n)] for _ in range(8)]
        a, b = run_both(model, xs)
        assert a == b
        if not isinstance(a, str):  # both ran: the interpreter is the oracle
            assert all(fp.same_row(g, w) for g, w in zip(a, rasp.evaluate(entry.factory(), xs)))
        ids, vals = model.encode(xs)
        assert_close(*streams_both_ways(model, ids, vals))


def _matrix_cases():
    return [
        ("transpose", (2, 3), [(2, 3)]),
        ("matmul", (2, 3, 2), None),
        ("softmax", (3, 3), [(3, 3)]),
        ("bias_add", (2, 3), [(2, 3), (3,)]),
        ("det", (3,), [(3, 3)]),
        ("inverse", (3,), [(3, 3)]),
        ("relu", (), [(6,)]),
        ("maxmin", (), [(6,)]),
    ]


@pytest.mark.parametrize("name, args, shapes", _matrix_cases())
def test_matrix_programs_both_ways(name, args, shapes):
    rng = np.random.default_rng(0)
    if shapes is None:
        length = programs.matmul_input_length(*args)
        seqs = rng.normal(size=(6, length))
    else:
        seqs = layout.pack_batch(
            *[
                rng.normal(size=(6, *s)) + 2 * np.eye(*s[:2])[None]
                if len(s) == 2 and s[0] == s[1]
                else rng.normal(size=(6, *s))
                for s in shapes
            ]
        )
    model = apply.compiled_model(getattr(programs, name)(*args), seqs.shape[-1])
    a, b = run_both(model, seqs.tolist())
    np.testing.assert_allclose(np.array(a, dtype=float), np.array(b, dtype=float), rtol=1e-12)
    ids, vals = model.encode(seqs.tolist())
    assert_close(*streams_both_ways(model, ids, vals))


def test_tasks_both_ways():
    rng = random.Random(1)
    pairs = [(0, False), (0, True), (1, False), (1, True)]
    cases = [
        (
            compile_program(
                match2.match2(5), vocab=list(range(5)), max_seq_len=6, fixed_length=True
            ),
            list(range(5)),
        ),
        (compile_program(parity.parity(), vocab=[0, 1], max_seq_len=7, fixed_length=True), [0, 1]),
        (compile_program(parity.k_parity(), vocab=pairs, max_seq_len=6, fixed_length=True), pairs),
    ]
    for model, vocab in cases:
        xs = [[rng.choice(vocab) for _ in range(model.max_seq_len)] for _ in range(16)]
        a, b = run_both(model, xs)
        assert a == b


@pytest.mark.parametrize("sizes", [(2, 2, 1), (4, 4, 2), (8, 8, 4)])
@pytest.mark.parametrize("layer", ["attention", "encoder"])
def test_universal_simulator_both_ways(sizes, layer):
    n, d, h = sizes
    U = simulator.build(n, d, h, layer=layer)
    plan = U.model.runtime.plans(U.model.config.n_ctx)
    assert sum(len(p) for p in plan) > 0  # U's gathers and sums are planned
    for seed in range(3):
        if layer == "attention":
            target = spec.random_attention(h, d, seed=seed)
        else:
            target = spec.random_encoder_layer(h, d, 2 * d, seed=seed)
        X = torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
        simulate_both(U, target, X, "plan")


def simulate_both(U, target, X, executor: str) -> None:
    """U with ``executor`` against its dense executor (to rounding) and the reference."""
    try:
        U.model.executor = executor
        got = U.simulate(target, X)
        U.model.executor = "dense"
        dense = U.simulate(target, X)
    finally:
        U.model.executor = "auto"
    assert_close(got, dense)
    want = reference.reference(target, X)
    assert float((got - want).abs().max()) <= 1e-9 * (1 + float(want.abs().max()))


# -- the whole language, fuzzed ------------------------------------------------------------


def compare_fuzzed(attention: str, executor: str, seed: int, cases: int) -> int:
    """Runs fuzzed programs with ``executor`` and dense: the same outputs or the same kind
    of error on every input. Returns how many inputs were compared."""
    rng = random.Random(seed)
    compared = 0
    for _ in range(cases):
        case = fp.random_case(rng)
        try:
            model = fp.compile_case(case, attention)
        except Exception:  # noqa: BLE001 - refusals are the compiler tests' business
            continue
        for xs in case.inputs:
            outs = []
            for name in (executor, "dense"):
                model.executor = name
                try:
                    outs.append(("ok", model.run(xs)))
                except Exception as exc:  # noqa: BLE001 - both executors must agree
                    outs.append(("error", type(exc).__name__))
            model.executor = "auto"
            assert outs[0][0] == outs[1][0], (case.source(), xs, outs)
            if outs[0][0] == "ok":
                assert fp.same_row(outs[0][1], outs[1][1]), (case.source(), xs, outs)
            compared += 1
    return compared


@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_fuzzed_programs_have_no_executor_differences(attention):
    assert compare_fuzzed(attention, "plan", 7 if attention == "hard" else 8, 150) > 100


# -- the public switch and checkpoints -----------------------------------------------------


def reverse_model():
    return compile_program(library.make_reverse(rasp.tokens), vocab="abc", max_seq_len=5)


def test_executor_switch_on_the_compiled_model():
    model = reverse_model()
    assert model.executor == "auto"
    assert model.plan_summary()["static_heads"] != [[]] * model.config.n_layers
    model.executor = "dense"
    assert model.runtime.executor == "dense" and model.run("abc") == ["c", "b", "a"]
    with pytest.raises(ValueError, match="executor must be one of"):
        model.executor = "fast"
    with pytest.raises(ValueError, match="executor must be one of"):
        model.run("abc", executor="fast")
    assert model.executor == "dense"  # a refused run leaves the setting as it was
    assert model.run("abc", executor="plan") == ["c", "b", "a"] and model.executor == "dense"
    assert model.run("abc", executor="fused") == ["c", "b", "a"] and model.executor == "dense"


def test_checkpoints_carry_the_plan_and_check_it(tmp_path):
    import json

    from attnsim.model.checkpoint import DamagedCheckpointError
    from attnsim.model.compiled import CompiledModel

    model = reverse_model()
    model.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    assert meta["plan"] == model.plan_summary()
    loaded = CompiledModel.load(tmp_path / "m")
    assert loaded.plan_summary() == model.plan_summary()
    assert loaded.run("abca") == model.run("abca") == ["a", "c", "b", "a"]

    # a plan that the weights do not give
    bad = dict(
        meta, plan={**meta["plan"], "static_heads": [[] for _ in meta["plan"]["static_heads"]]}
    )
    (tmp_path / "m" / "model.json").write_text(json.dumps(bad))
    with pytest.raises(DamagedCheckpointError, match="execution plan"):
        CompiledModel.load(tmp_path / "m")
    # a malformed plan
    bad = dict(meta, plan={"static_heads": "all"})
    (tmp_path / "m" / "model.json").write_text(json.dumps(bad))
    with pytest.raises(DamagedCheckpointError, match="plan"):
        CompiledModel.load(tmp_path / "m")
    # a checkpoint written before plans were saved still loads (the plan is derived);
    # it was also written before digests (hence check=False)
    old = {k: v for k, v in meta.items() if k not in ("plan", "digest")}
    (tmp_path / "m" / "model.json").write_text(json.dumps(old))
    assert CompiledModel.load(tmp_path / "m", check=False).run("abca") == ["a", "c", "b", "a"]


# -- step plans: a discretiser's units as a table over one number --------------------------


@pytest.mark.parametrize("name", ["make_hist", "make_count", "make_sort_unique"])
def test_step_plans_at_longer_lengths(name):
    from attnsim.model import plan_steps

    entry = library.PROGRAMS[name]
    model = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=40)
    steps = model.runtime.step_plans(41)
    assert any(isinstance(p, plan_steps.StepPlan) for layer in steps for p in layer)
    rng = random.Random(3)
    for n in (1, 2, 17, 40):
        xs = [[rng.choice(entry.vocab) for _ in range(n)] for _ in range(12)]
        xs.append([entry.vocab[0]] * n)  # the widest selector
        a, b = run_both(model, xs)
        assert a == b
        ids, vals = model.encode(xs)
        assert_close(*streams_both_ways(model, ids, vals))


def test_a_step_plan_off_its_plateaus_matches_the_units():
    """Inputs between a discretiser's values (on its ramps) run through slope * t + offset:
    the same piecewise-linear function as the units."""
    from attnsim.model import plan_steps

    model = compile_program(
        library.make_hist(), vocab=list("ab"), max_seq_len=20, dtype=torch.float64
    )
    mlp = model.model.blocks[0].mlp
    steps = [p for layer in model.runtime.step_plans(21) for p in layer]
    (p,) = [p for p in steps if isinstance(p, plan_steps.StepPlan)]
    t = torch.linspace(-0.2, 1.3, 997, dtype=torch.float64)
    streams = {1: None}  # the stream entering layer 0's MLP, on a real input
    ids, vals = model.encode([list("abba")])
    with torch.no_grad():
        model.model(ids, vals, streams=streams)
    x = streams[1][:, 1:2].repeat(1, 998, 1)  # position 1's stream, 998 times
    x[0, 1:, p.row] = t
    got = torch.zeros_like(x)
    plan_steps.run(mlp, p, x, got)
    pre = x @ mlp.W_in[:, p.units]
    want = torch.relu(pre) @ mlp.W_out[p.units]
    assert float((got[0, 1:] - want[0, 1:]).abs().max()) <= 1e-9


def test_plans_are_kept_for_a_bounded_number_of_lengths(monkeypatch):
    from attnsim.model import runtime

    monkeypatch.setattr(runtime, "PLANS_KEPT", 3)
    model = reverse_model()
    for n in (1, 2, 3, 4, 5):
        assert model.run("abc"[: n % 3 + 1]) == list(reversed("abc"[: n % 3 + 1]))
        model.runtime.plans(n + 1)
    kept = model.runtime._plans
    assert len(kept) == 3 and sorted(kept) == [4, 5, 6]


# -- constant heads and units: the same output on every input of a length ------------------


@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_constant_heads_and_units_are_folded_and_match_dense(attention):
    """``length`` in a fixed-length model: its head (all keys, values from BOS) and its
    discretiser's units read static directions only, so the plan adds their output as
    constants; both executors and the interpreter agree on every length."""
    from attnsim.model import plan_steps

    model = compile_program(
        library.make_length(), vocab=list("abc"), max_seq_len=30, attention=attention
    )
    plans, steps = model.runtime.plans(31), model.runtime.step_plans(31)
    assert isinstance(plans[0][0], P.ConstPlan) and plans[0][0].heads == (0,)
    assert any(isinstance(p, plan_steps.ConstUnits) for p in steps[0])
    rng = random.Random(5)
    for n in (1, 7, 30):
        xs = [[rng.choice("abc") for _ in range(n)] for _ in range(6)]
        a, b = run_both(model, xs)
        assert a == b == rasp.evaluate(library.make_length(), xs)
        ids, vals = model.encode(xs)
        assert_close(*streams_both_ways(model, ids, vals))


def test_a_head_with_input_dependent_values_is_not_folded():
    """reverse's gather has a static pattern but reads the tokens: it stays a gather."""
    model = compile_program(library.make_reverse(rasp.tokens), vocab="ab", max_seq_len=6)
    plans = model.runtime.plans(7)
    assert isinstance(plans[0][0], P.ConstPlan)  # length
    assert [type(p).__name__ for p in plans[3]] == ["HeadPlan"]
    assert model.run([list("abb")]) == [["b", "b", "a"]]


def test_constant_units_follow_changed_weights():
    """The constants are recomputed when the weights change (the plans are keyed on them)."""
    model = compile_program(library.make_length(), vocab="ab", max_seq_len=8, dtype=torch.float64)
    net = model.model
    ids, vals = model.encode([list("abab")])
    before = streams_both_ways(model, ids, vals)[0]
    with torch.no_grad():
        net.blocks[0].mlp.W_out.mul_(2.0)
    planned, dense = streams_both_ways(model, ids, vals)
    assert_close(planned, dense)
    assert not torch.equal(planned, before)
