"""Token-table heads against the dense forward.

A head whose queries and keys read only directions that the token rows of the embedding write
runs over classes of positions (one per token id, and BOS's): its scores are a table, and its
output sums the values of each class (prefix sums when causal). Here a hand-built model with
two such heads runs both ways, causal or not, hard and softmax, on every length from 1 (BOS
alone), with classes missing from rows; compiled programs that have such heads run both ways.
"""

from __future__ import annotations

import random

import pytest
import torch

from attnsim import rasp
from attnsim.compiler import compile_program
from attnsim.model import plan_costs
from attnsim.model import plan_tables as T
from attnsim.model import plans as P
from attnsim.model.config import ModelConfig
from attnsim.model.runtime import Runtime
from attnsim.model.transformer import Transformer
from attnsim.rasp import library
from tests.test_plans import assert_close, run_both, streams_both_ways

N_CTX = 9


def table_model(attention="hard", causal=False):
    """Tokens 1..4 (0 is BOS), numerical token values. Directions: 0 BOS's flag, 1-4 the
    token's one-hot, 5 the token id as a number, 6 one (every position row), 7 the numerical
    value, 8 the position, 9-14 the heads' outputs.

    Head 0: a query of token a selects the keys of token a + 1, else BOS (score 1 against
    0.5); head 1: score a * b, so a token selects the largest token it sees and BOS every key;
    both token-table heads, with values reading the numerical value and the position. Head 2
    selects BOS (static)."""
    cfg = ModelConfig(
        n_layers=1,
        d_model=15,
        n_heads=3,
        d_head=5,
        d_mlp=0,
        d_bilinear=0,
        n_ctx=N_CTX,
        d_vocab=5,
        attention=attention,
        causal=causal,
        numerical_tokens=True,
    )
    t = Transformer(cfg)
    a = t.blocks[0].attn
    with torch.no_grad():
        t.W_E[0, 0] = 1.0
        for i in range(1, 5):
            t.W_E[i, i] = 1.0
            t.W_E[i, 5] = float(i)
        t.W_pos[:, 6] = 1.0
        t.W_E_num[7] = 1.0
        t.W_pos[:, 8] = torch.arange(N_CTX, dtype=torch.float64) / 3.0
        for i in range(1, 4):
            a.W_Q[0, i, i - 1] = 1.0
            a.W_K[0, i + 1, i - 1] = 1.0
        a.W_Q[0, 6, 4] = 1.0
        a.W_K[0, 0, 4] = 0.5
        a.W_V[0, 7, 0] = a.W_V[0, 8, 1] = 1.0
        a.W_O[0, 0, 9] = a.W_O[0, 1, 10] = 1.0
        a.W_Q[1, 5, 0] = a.W_K[1, 5, 0] = 1.0
        a.W_V[1, 7, 0] = 1.0
        a.W_V[1, 8, 0] = 0.7  # a value of more than two terms
        a.W_V[1, 5, 0] = 0.3
        a.W_V[1, 8, 1] = 1.0
        a.W_O[1, 0, 11] = a.W_O[1, 1, 12] = 1.0
        a.W_Q[2, 6, 0] = a.W_K[2, 0, 0] = 1.0
        a.W_V[2, 7, 0] = 1.0
        a.W_O[2, 0, 13] = 1.0
    return t


def inputs(n: int, rng: torch.Generator):
    """Eight rows of n positions: random tokens, one token repeated, two tokens."""
    ids = torch.randint(1, 5, (8, n), generator=rng)
    ids[1, 1:] = 3  # token 4 (head 0's keys for 3) absent
    ids[2, 1:] = torch.tensor([1, 4] * n)[: n - 1]
    ids[:, 0] = 0
    vals = torch.randn(8, n, generator=rng, dtype=torch.float64)
    vals[:, 0] = 0.0
    return ids, vals


@pytest.fixture
def tables_always(monkeypatch):
    """Token-table heads planned at every length (the cost rule would leave short inputs
    dense); counts the calls that ran over classes."""
    monkeypatch.setattr(T, "pays", lambda p, n, attn: True)
    ran = []
    run = T.run

    def counted(attn, p, x, ids=None, cache=None):
        z = run(attn, p, x, ids, cache)
        ran.append(z is not None)
        return z

    monkeypatch.setattr(T, "run", counted)
    return ran


def test_token_directions_and_table_heads():
    t = table_model()
    (mask,) = T.token_directions(t)
    assert torch.nonzero(mask).flatten().tolist() == [0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 13, 14]
    assert P.static_heads(t) == ((2,),)
    assert T.table_heads(t) == ((0, 1),)
    head0, head1 = P.StaticAnalysis.of(t).tables[0]
    # head 0 reads BOS's flag, the one-hot and one: BOS (token 0 anywhere) and tokens 1..4
    assert head0.rows.tolist() == [0, 1, 2, 3, 4, 6] and head0.n_classes == 5
    assert head1.rows.tolist() == [5] and head1.n_classes == 5
    assert head1.scores.tolist() == [[float(a * b) for b in range(5)] for a in range(5)]


def test_a_position_written_direction_is_not_a_token_direction():
    t = table_model()
    with torch.no_grad():
        t.W_pos[3, 5] = 1.0  # the token id's direction now varies with the position
    assert T.table_heads(t) == ((0,),)
    t = table_model()
    with torch.no_grad():
        t.blocks[0].attn.W_O[2, 0, 5] = 1.0  # a head writes it (read by the next layer only)
    assert T.table_heads(t) == ((0, 1),)


def planned_and_dense(t, ids, vals):
    """The final streams of a transformer with plans and dense."""
    with torch.no_grad():
        planned = Runtime(t, "plan")(ids, vals)
        dense = t(ids, vals)  # the definition
    return planned, dense


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_table_heads_match_dense(attention, causal, tables_always):
    t = table_model(attention, causal)
    rng = torch.Generator().manual_seed(0)
    for n in range(1, N_CTX + 1):
        ids, vals = inputs(n, rng)
        assert sum(isinstance(p, P.TablePlan) for p in Runtime(t).plans(n)[0]) == 2
        ran = len(tables_always)
        planned, dense = planned_and_dense(t, ids, vals)
        assert tables_always[ran:] == [True, True]  # both heads ran over classes
        scale = 1.0 + float(dense.abs().max())
        assert float((planned - dense).abs().max()) <= 1e-12 * scale, (n, planned - dense)
        if attention == "hard":  # sums of one or two values per class: no rounding apart
            assert torch.equal(planned[..., :11], dense[..., :11])


@pytest.fixture
def fixed_counted(monkeypatch):
    """Records whether each token-table head's weights were the same for every sequence
    (``_fixed_selection`` gave them) or found per sequence."""
    seen = []
    fixed = T._fixed_selection

    def counted(p, count):
        got = fixed(p, count)
        seen.append(got is not None)
        return got

    monkeypatch.setattr(T, "_fixed_selection", counted)
    return seen


@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_fixed_selection_where_every_best_class_is_present(attention, tables_always, fixed_counted):
    """Every token present in every sequence: head 0's best key class for each query (token
    a + 1, or BOS for token 4) and head 1's (token 4) are present, so both heads weigh the
    classes alike in every sequence; a sequence that lacks a best class makes them weigh
    per sequence. Both ways match the dense forward."""
    t = table_model(attention)
    rng = torch.Generator().manual_seed(2)
    n = N_CTX
    for lacking in (False, True):
        ids = torch.stack([torch.randperm(4, generator=rng) + 1 for _ in range(2 * 8)])
        ids = torch.cat([torch.zeros(8, 1, dtype=torch.long), ids.view(8, 8)], dim=1)
        if lacking:
            ids[3, 1:] = 1  # tokens 2, 3, 4 absent there
        vals = torch.randn(8, n, generator=rng, dtype=torch.float64)
        vals[:, 0] = 0.0
        ran = len(fixed_counted)
        planned, dense = planned_and_dense(t, ids, vals)
        assert fixed_counted[ran:] == [not lacking] * 2
        scale = 1.0 + float(dense.abs().max())
        assert float((planned - dense).abs().max()) <= 1e-12 * scale
        if attention == "hard":  # sums of one or two values per class: no rounding apart
            assert torch.equal(planned[..., :11], dense[..., :11])


@pytest.mark.parametrize("name", ["make_hist", "make_sort_unique"])
def test_selector_width_heads_weigh_classes_alike(name, tables_always, fixed_counted):
    """A selector width's head attends to BOS, which every sequence holds, with its row's
    best score: its class weights are the same for every sequence; outputs as the
    interpreter's and the definition's."""
    entry = library.PROGRAMS[name]
    model = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)
    rng = random.Random(1)
    n = min(entry.max_seq_len, len(entry.vocab))  # sort_unique's keys are distinct
    xs = [
        rng.sample(list(entry.vocab), n)
        if name == "make_sort_unique"
        else [rng.choice(list(entry.vocab)) for _ in range(n)]
        for _ in range(32)
    ]
    a, b = run_both(model, xs)
    assert a == b == rasp.evaluate(entry.factory(), xs)
    assert fixed_counted and all(fixed_counted)
    ids, vals = model.encode(xs)
    planned, dense = streams_both_ways(model, ids, vals)
    assert torch.equal(planned, dense)


def test_bos_only_rows(tables_always):
    for causal in (False, True):
        t = table_model(causal=causal)
        rt = Runtime(t, "plan")  # the plans themselves (short inputs would run feature-major)
        ids, vals = torch.zeros(3, 1, dtype=torch.long), torch.zeros(3, 1, dtype=torch.float64)
        with torch.no_grad():
            planned = rt(ids, vals)
            dense = t(ids, vals)
        assert tables_always == [True, True] * (2 if causal else 1)
        assert torch.equal(planned, dense)


def test_an_unknown_class_runs_dense(tables_always):
    """A stream that holds values no token row gives (here: BOS's flag past position 0
    with a token's one-hot) is not looked up: the head runs dense."""
    t = table_model()
    attn = t.blocks[0].attn
    ids = torch.tensor([[0, 1, 2, 3]])
    with torch.no_grad():
        x = t.W_E[ids] + t.W_pos[:4]
        x[0, 2, 0] = 1.0
        (head0,) = [p for p in Runtime(t).plans(4)[0] if isinstance(p, P.TablePlan) and p.head == 0]
        assert T.run(attn, head0, x) is None
        planned = P.planned_attention(attn, x, Runtime(t).plans(4)[0])
        dense = attn.dense_heads(x, attn.active_heads())
    assert torch.equal(planned, dense)


def test_the_cost_rule_leaves_short_inputs_dense():
    t = table_model()
    assert not any(isinstance(p, P.TablePlan) for p in Runtime(t).plans(2)[0])
    assert sum(isinstance(p, P.TablePlan) for p in Runtime(t).plans(N_CTX)[0]) == 2
    flops = plan_costs.forward_flops(Runtime(t), N_CTX)["attention"]
    assert flops > 0


# -- compiled programs ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["make_hist", "make_sort_unique", "make_count", "make_sort_freq"])
def test_library_programs_get_token_table_heads(name):
    entry = library.PROGRAMS[name]
    model = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)
    assert any(T.table_heads(model.model))


@pytest.mark.parametrize("name", ["make_hist", "make_sort_unique", "sort_by_most_freq"])
@pytest.mark.parametrize("attention", ["hard", "softmax"])
@pytest.mark.parametrize("causal", [False, True])
def test_compiled_table_heads_run_over_classes(name, attention, causal, tables_always, monkeypatch):
    entry = library.PROGRAMS[name]
    try:
        model = compile_program(
            entry.factory(),
            vocab=entry.vocab,
            max_seq_len=entry.max_seq_len,
            attention=attention,
            causal=causal,
        )
    except Exception as exc:  # noqa: BLE001 - a program the causal compiler refuses
        pytest.skip(f"not compiled: {exc}")
    net, rt = model.model, model.runtime
    if rt.plans(entry.max_seq_len + 1) is None:
        # no static or candidate head (softmax): the runtime does not ask for a plan;
        # here it is given one, built as it would be
        analysis = P.StaticAnalysis.of(net)
        monkeypatch.setattr(rt, "plans", lambda n: P.build_plans(net, n, analysis))
    rng = random.Random(3)
    for n in (1, 2, entry.max_seq_len):
        xs = [[rng.choice(entry.vocab) for _ in range(n)] for _ in range(16)]
        xs[0] = [entry.vocab[0]] * n  # one class only
        ran = len(tables_always)
        a, b = run_both(model, xs)
        assert a == b
        assert any(tables_always[ran:]), "no token-table head ran over classes"
        ids, vals = model.encode(xs)
        assert_close(*streams_both_ways(model, ids, vals))


@pytest.mark.parametrize("attention", ["hard", "softmax"])
@pytest.mark.parametrize("causal", [False, True])
def test_sorted_class_lookup_matches_dense(attention, causal, tables_always, monkeypatch):
    """Heads with many classes find each position's class by sorting the positions' rows
    first (``classes_of``); forced here on the small model, against the dense forward."""
    monkeypatch.setattr(T, "DIRECT_LOOKUP", 0)
    monkeypatch.setattr(T, "classes_of_ids", lambda p, ids: None)  # not from the token ids
    t = table_model(attention, causal)
    rng = torch.Generator().manual_seed(1)
    for n in range(1, N_CTX + 1):
        ids, vals = inputs(n, rng)
        planned, dense = planned_and_dense(t, ids, vals)
        scale = 1.0 + float(dense.abs().max())
        assert float((planned - dense).abs().max()) <= 1e-12 * scale


def test_sort_unique_runs_its_token_head_over_classes_at_length_40():
    """sort_unique at max_seq_len 40: 41 classes of 42 directions, the sorted lookup; both
    executors and the interpreter agree."""
    entry = library.PROGRAMS["make_sort_unique"]
    vocab = list(range(1, 41))
    model = compile_program(entry.factory(), vocab=vocab, max_seq_len=40)
    assert any(isinstance(p, P.TablePlan) for p in model.runtime.plans(41)[0])
    rng = random.Random(4)
    xs = [rng.sample(vocab, 40) for _ in range(6)]
    outs = []
    for executor in ("plan", "dense"):
        model.executor = executor
        outs.append(model.run(xs))
    model.executor = "plan"
    assert outs[0] == outs[1] == rasp.evaluate(entry.factory(), xs)


def test_distinct_rows_hash_one_hot_rows_without_the_fallback(monkeypatch):
    """Rows of 0s and 1s (1.0 is 0x3ff0 followed by 48 zero bits) get distinct hashes: no
    fallback to the slow ``torch.unique(dim=0)``. (A flag and a one-hot of 81, as in
    sort_unique's comparison head at length 80: a plain product hash collided there.)"""
    from attnsim.model import plan_core

    real = torch.unique

    def no_dim(*args, **kwargs):
        assert "dim" not in kwargs, "distinct_rows fell back to torch.unique(dim=0)"
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "unique", no_dim)
    for dtype in (torch.float64, torch.float32):
        pick = torch.randint(0, 81, (5000,), generator=torch.Generator().manual_seed(0))
        q = torch.cat([torch.ones(5000, 1, dtype=dtype), torch.eye(81, dtype=dtype)[pick]], 1)
        rows, inverse = plan_core.distinct_rows(q)
        assert torch.equal(rows[inverse], q) and len(rows) == len(torch.unique(pick))
