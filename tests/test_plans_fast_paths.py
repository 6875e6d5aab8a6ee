"""The plan executor's short cuts, each against an independent computation.

- token-table heads read each position's class from its token id (``classes_of_ids``)
  where the stream's token directions are the embedding's rows: the same classes as the
  comparison of rows, and the dense forward's stream;
- ``distinct_rows`` groups one-hot rows by where their 1 sits (checked exactly; rows that
  are not one-hot take the hash path);
- a static-query head whose every query's best class is present and alone above the
  tolerance takes that class (a gather when it holds one key), against a dense hard
  attention written out here;
- column reads and writes by runs (``columns``, ``add_columns``, ``set_columns``) against
  plain indexing.
"""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim import rasp
from attnsim.compiler import compile_program
from attnsim.model import plan_core, plan_keys, plan_tables
from attnsim.model import plans as P
from attnsim.model.config import AttentionMode, ModelConfig
from attnsim.model.projection import add_columns, columns, set_columns
from attnsim.model.runtime import Runtime
from attnsim.rasp import library
from tests.test_plans import assert_close, run_both, streams_both_ways


def table_plans_of(model, n):
    return [p for layer in model.runtime.plans(n + 1) for p in layer if isinstance(p, P.TablePlan)]


@pytest.mark.parametrize("n", [5, 20, 40])
def test_sort_unique_reads_its_token_classes_from_the_ids(n):
    """sort_unique's comparison head (``Select(tokens, tokens, <)``) is a token-table head
    whose classes come from the token ids; its streams match dense, its outputs the
    interpreter."""
    program = library.make_sort_unique(rasp.tokens, rasp.tokens)
    vocab = list(range(1, n + 1))
    model = compile_program(program, vocab=vocab, max_seq_len=n)
    tables = table_plans_of(model, n)
    assert tables and all(p.of_id is not None for p in tables)
    rng = random.Random(n)
    xs = [rng.sample(vocab, n) for _ in range(40)]
    ids, vals = model.encode(xs)
    assert_close(*streams_both_ways(model, ids, vals))
    planned, dense = run_both(model, xs)
    assert planned == dense == rasp.evaluate(program, xs)


def test_classes_from_ids_equal_the_classes_of_the_rows():
    """On hist and sort_unique, every token-table head's classes read from the ids are
    those found by comparing the stream's rows."""
    for program, vocab in (
        (library.make_hist(), list("abcd")),
        (library.make_sort_unique(rasp.tokens, rasp.tokens), list(range(1, 9))),
    ):
        model = compile_program(program, vocab=vocab, max_seq_len=8)
        rng = random.Random(0)
        xs = [[rng.choice(vocab) for _ in range(8)] for _ in range(30)]
        ids, _ = model.encode(xs)
        with torch.no_grad():  # the stream before layer 0's attention: the embedding
            x = model.model.W_E[ids] + model.model.W_pos[: ids.shape[1]]
        tables = [p for p in model.runtime.plans(9)[0] if isinstance(p, P.TablePlan)]
        assert tables
        for p in tables:
            by_ids = plan_tables.classes_of_ids(p, ids)
            assert by_ids is not None
            assert torch.equal(by_ids, plan_tables.classes_of(p, x))


def test_a_token_other_than_bos_at_position_0():
    """An id other than BOS at position 0 (hand-made ids: encode never writes one): the
    class read from the ids is the class of the row there, and the stream is the dense
    one. Where such a row is no class, ``classes_of_ids`` gives None (its doctest) and the
    head compares rows instead."""
    program = library.make_sort_unique(rasp.tokens, rasp.tokens)
    model = compile_program(program, vocab=list(range(1, 21)), max_seq_len=20)
    ids, vals = model.encode([random.Random(1).sample(range(1, 21), 20) for _ in range(8)])
    ids = ids.clone()
    ids[3, 0] = 5  # token 5 where BOS belongs
    (p,) = table_plans_of(model, 20)
    with torch.no_grad():
        x = model.model.W_E[ids] + model.model.W_pos[: ids.shape[1]]
    assert torch.equal(plan_tables.classes_of_ids(p, ids), plan_tables.classes_of(p, x))
    assert_close(*streams_both_ways(model, ids, vals))


MISPLACED = {
    "reverse": (lambda: library.make_reverse(rasp.tokens), list("abcd"), ["abcdab"] * 3),
    "length": (library.make_length, list("abcd"), ["abcdab"] * 3),
    "sort_unique": (
        lambda: library.make_sort_unique(rasp.tokens, rasp.tokens),
        [1, 2, 3, 4, 5, 6],
        [[3, 1, 2, 6, 5, 4]] * 3,
    ),
}


@pytest.mark.parametrize("storage", ["dense", "sparse"])
@pytest.mark.parametrize("name", sorted(MISPLACED))
def test_ids_with_bos_out_of_place_run_the_definition(name, storage):
    """The plans are made for BOS at position 0 and nowhere else (the static directions are
    those every other token row writes alike). Hand-made ids with a token at position 0 or
    BOS further on (encode never makes them) give the definition's stream on every
    executor: before, the fixed-key, constant and candidate plans gave other values."""
    make, vocab, xs = MISPLACED[name]
    model = compile_program(make(), vocab=vocab, max_seq_len=6, storage=storage)
    ids, vals = model.encode(xs)
    bad = ids.clone()
    bad[0, 0] = 1  # a token where BOS belongs
    bad[1, 3] = 0  # BOS further on
    want = model.model(bad, vals)
    executors = ("plan", "auto") if storage == "sparse" else ("plan", "fused", "auto")
    for executor in executors:
        got = Runtime(model.model, executor)(bad, vals)
        assert torch.equal(got, want), executor
    assert torch.equal(Runtime(model.model, "plan")(ids, vals), model.model(ids, vals))


def test_an_infinite_token_value_runs_the_definition():
    """An infinite numerical token reaches every direction as ``0 * inf`` (NaN): the
    definition's scores are then NaN at every query, and so is its stream; the plans,
    which skip the zero weights, gave finite values at most positions before."""
    from tests.test_plans_tables import table_model

    t = table_model()
    with torch.no_grad():  # only the static head 2 left
        t.blocks[0].attn.W_O[0].zero_()
        t.blocks[0].attn.W_O[1].zero_()
    ids = torch.tensor([[0, 1, 2, 3, 4, 1]])
    vals = torch.tensor([[0.0, 1.0, float("inf"), 2.0, 3.0, 4.0]], dtype=torch.float64)
    want = t(ids, vals)
    assert bool(want.isnan().any(-1).all())
    for executor in ("plan", "fused", "auto"):
        got = Runtime(t, executor)(ids, vals)
        assert torch.equal(got.isnan(), want.isnan()), executor
        assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(want)), executor


def test_models_with_numerical_tokens_do_not_read_classes_from_ids(monkeypatch):
    """A numerical token channel can carry a non-finite value into every direction (0 *
    inf): such a model's token-table heads (forced here at every length) look their classes
    up from the rows; the stream is the dense one."""
    from tests.test_plans_tables import table_model

    t = table_model()
    tables = [p for p in P.StaticAnalysis.of(t).tables[0]]
    assert tables and all(p.of_id is None for p in tables)
    ids = torch.tensor([[0, 1, 2, 3, 4, 1]] * 2)
    vals = torch.randn(2, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    vals[:, 0] = 0.0
    monkeypatch.setattr(plan_tables, "pays", lambda p, n, attn: True)
    rt = Runtime(t, "plan")
    with torch.no_grad():
        planned = rt(ids, vals)
        assert any(isinstance(p, P.TablePlan) for p in rt.plans(6)[0])
        dense = t(ids, vals)  # the definition
    assert torch.allclose(planned, dense, rtol=1e-12, atol=1e-12)


def test_run_projected_refuses_causal_heads_and_unknown_sides():
    cfg = hard_cfg(causal=True)
    q = k = v = torch.zeros(1, 4, 1, dtype=torch.float64)
    with pytest.raises(ValueError, match="causal"):
        plan_keys.run_projected(cfg, "queries", q, k, v)
    with pytest.raises(ValueError, match="'keys' or 'queries'"):
        plan_keys.run_projected(hard_cfg(), "values", q, k, v)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_distinct_rows_of_one_hot_rows(dtype):
    pick = torch.randint(0, 7, (500,), generator=torch.Generator().manual_seed(0))
    q = torch.eye(7, dtype=dtype)[pick]
    rows, inverse = plan_core.distinct_rows(q)
    assert torch.equal(rows[inverse], q)
    assert torch.equal(inverse, pick)


@pytest.mark.parametrize(
    "bad",
    [
        [0.5, 0.5, 0.0],  # sums to 1, two entries
        [2.0, -1.0, 0.0],  # sums to 1, weighted index could look like a unit
        [0.0, 0.0, 0.0],  # no 1
        [1.0, 1.0, 0.0],  # two 1s
        [1.0, 1e-30, 0.0],  # a 1 and a tiny entry
        [float("nan"), 0.0, 0.0],
        [0.0, float("inf"), 0.0],
        [-0.0, 1.0, -0.0],  # negative zeros: equal to the unit row
    ],
)
def test_distinct_rows_near_one_hot_rows_group_exactly(bad):
    """Rows that are not one-hot take the hash path; every row is grouped with equal rows
    only (NaN rows each alone, as ``==`` says)."""
    q = torch.eye(3, dtype=torch.float64)[torch.tensor([0, 1, 2, 1, 0] * 4)]
    q = torch.cat([q, torch.tensor([bad], dtype=torch.float64)])
    rows, inverse = plan_core.distinct_rows(q)
    got = rows[inverse]
    finite = ~torch.isnan(q).any(dim=1)
    assert torch.equal(got[finite], q[finite])
    if not bool(finite.all()):
        assert bool(torch.isnan(got[~finite]).any())


def dense_static_query_head(cfg, table, cls, v):
    """Hard attention written out: query q of sequence s attends to the keys k with
    ``table[q, cls[s, k]] >= max_k' table[q, cls[s, k']] - tolerance`` and takes their mean."""
    b, n, wv = v.shape
    scores = table[:, cls].permute(1, 0, 2)  # [batch, query, key]
    top = scores.amax(dim=-1, keepdim=True)
    chosen = (scores >= top - cfg.hard_tolerance).to(v.dtype)
    return (chosen @ v) / chosen.sum(dim=-1, keepdim=True)


def hard_cfg(causal: bool = False):
    return ModelConfig(
        n_layers=1,
        d_model=1,
        n_heads=1,
        d_head=1,
        d_mlp=0,
        d_bilinear=0,
        n_ctx=8,
        d_vocab=1,
        causal=causal,
    )


@pytest.mark.parametrize("case", ["one_key", "several_keys", "best_absent", "tie"])
def test_static_query_head_short_cuts_match_dense_hard_attention(case):
    cfg = hard_cfg()
    assert cfg.attention is AttentionMode.HARD
    g = torch.Generator().manual_seed(3)
    b, n, c, wv = 16, 6, 6, 3
    table = torch.eye(n, c, dtype=torch.float64) * 2.0  # query q prefers class q
    if case == "one_key":  # a permutation of the classes in each sequence
        cls = torch.stack([torch.randperm(c, generator=g) for _ in range(b)])
    elif case == "several_keys":  # every class present, some twice or more
        cls = torch.stack([torch.randperm(c, generator=g) for _ in range(b)])
        cls = torch.cat([cls, cls[:, :3]], dim=1)
        table = torch.eye(n, c, dtype=torch.float64) * 2.0
    elif case == "best_absent":  # class 5 missing in sequence 0: its query takes the others
        cls = torch.stack([torch.randperm(c, generator=g) for _ in range(b)])
        cls[0, cls[0] == 5] = 4
    else:  # query 0 ties two classes
        cls = torch.stack([torch.randperm(c, generator=g) for _ in range(b)])
        table[0, 1] = 2.0
    v = torch.randn(b, cls.shape[1], wv, generator=g, dtype=torch.float64)
    got = plan_keys._by_key(cfg, table, cls, v)
    want = dense_static_query_head(cfg, table, cls, v)
    assert torch.allclose(got, want, rtol=1e-14, atol=1e-14)
    if case == "one_key":  # a gather: the value itself, bit for bit
        assert torch.equal(got, want)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 11), min_size=0, max_size=12))
def test_column_reads_and_writes_by_runs_match_indexing(picked):
    x = torch.randn(2, 3, 12, generator=torch.Generator().manual_seed(len(picked)))
    rows = torch.tensor(picked, dtype=torch.long)
    assert torch.equal(columns(x, rows), x[..., rows])
    distinct = torch.tensor(sorted(set(picked)), dtype=torch.long)  # writes: no repeats
    vals = torch.randn(2, 3, len(distinct))
    want = x.clone()
    want[..., distinct] += vals
    got = x.clone()
    add_columns(got, distinct, vals)
    assert torch.equal(got, want)
    want[..., distinct] = vals
    set_columns(got, distinct, vals)
    assert torch.equal(got, want)
    in_order = torch.tensor(list(dict.fromkeys(picked)), dtype=torch.long)  # unsorted runs
    want = x.clone()
    want[..., in_order] += vals
    got = x.clone()
    add_columns(got, in_order, vals)
    assert torch.equal(got, want)


@pytest.mark.parametrize("name", ["make_hist", "make_count"])
def test_step_tables_by_rows_and_by_scatter(name, monkeypatch):
    """A selector width's discretiser runs as a step table, writing each position's whole
    row of outputs (``ROW_TABLE_WIDTH`` at least its columns) or scattering its plateau's
    few outputs (0): the same stream both ways, the definition's to rounding, and the
    interpreter's outputs."""
    from attnsim.model import plan_steps

    entry = library.PROGRAMS[name]
    n = 16
    model = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=n)
    assert any(model.runtime.step_plans(n + 1))  # a step plan runs
    rng = random.Random(7)
    xs = [[rng.choice(list(entry.vocab)) for _ in range(n)] for _ in range(64)]
    ids, vals = model.encode(xs)
    streams = []
    for width in (0, 1000):
        monkeypatch.setattr(plan_steps, "ROW_TABLE_WIDTH", width)
        planned, dense = streams_both_ways(model, ids, vals)
        assert_close(planned, dense)
        streams.append(planned)
        a, b = run_both(model, xs)
        assert a == b == rasp.evaluate(entry.factory(), xs)
    assert torch.equal(*streams)
