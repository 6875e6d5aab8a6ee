"""The runtime's exact shortcuts, each against the definition to the bit: the embedding's
token-position table, projections split by how many weights each column has, the stacked
planned heads whose output weights only move columns, and the feature-major forward's
inference mode (its output stays an ordinary tensor).

The oracles: ``Transformer.forward`` (the definition) and the dense matrix product.
"""

from __future__ import annotations

import random

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsim import compile_program, library
from attnsim.model import runtime
from attnsim.model.config import ModelConfig
from attnsim.model.projection import Projection
from attnsim.model.runtime import Runtime
from attnsim.model.transformer import Transformer
from attnsim.simulator import spec, universal


def _inputs(entry, k: int = 8, seed: int = 0) -> list:
    rng = random.Random(seed)
    return [[rng.choice(entry.vocab) for _ in range(entry.max_seq_len)] for _ in range(k)]


def _planned(name: str):
    """``(model, runtime, ids, vals, n)`` for a library program's random inputs."""
    entry = library.PROGRAMS[name]
    m = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)
    ids, vals = m.encode(_inputs(entry))
    rt = Runtime(m.model, "plan")
    rt.current()
    return m, rt, ids, vals, ids.shape[1]


def test_the_token_position_table_gives_the_definitions_embedding():
    m, rt, ids, vals, n = _planned("make_hist")
    got = rt._embed(ids, vals, n)
    assert rt._embedding[3] is not None  # the table was used
    assert torch.equal(got, m.model.embed(ids, vals, n))
    # a categorical model reads no token values: non-finite ones change nothing
    nan = torch.full_like(vals, float("nan"))
    assert torch.equal(rt._embed(ids, nan, n), got)


def test_a_table_too_large_is_not_kept(monkeypatch):
    monkeypatch.setattr(runtime, "TABLE_BYTES", 0)
    m, rt, ids, vals, n = _planned("make_hist")
    assert torch.equal(rt._embed(ids, vals, n), m.model.embed(ids, vals, n))
    assert rt._embedding[3] is None


def test_numerical_tokens_keep_their_direction_after_the_table():
    # a hand-made model reading numerical token values: the table's sum, then the value
    # times its direction, as the definition adds them; a non-finite value takes the
    # definition's path
    cfg = ModelConfig(
        n_layers=1,
        d_model=5,
        n_heads=1,
        d_head=1,
        d_mlp=1,
        d_bilinear=0,
        n_ctx=6,
        d_vocab=3,
        numerical_tokens=True,
    )
    net = Transformer(cfg)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for w in (net.W_E, net.W_pos, net.W_E_num):
            w.copy_(torch.randn(w.shape, generator=g, dtype=w.dtype))
    ids = torch.randint(0, 3, (4, 6), generator=g)
    vals = torch.randn(4, 6, generator=g, dtype=torch.float64)
    rt = Runtime(net, "plan")
    rt.current()
    assert rt._embedding is None
    got = rt._embed(ids, vals, 6)
    assert rt._embedding[3] is not None  # the table was used
    assert torch.equal(got, net.embed(ids, vals, 6))
    bad = vals.clone()
    bad[0, 1] = float("inf")
    got_bad, want_bad = rt._embed(ids, bad, 6), net.embed(ids, bad, 6)
    torch.testing.assert_close(got_bad, want_bad, rtol=0, atol=0, equal_nan=True)
    assert bool(got_bad.isinf().any())


@st.composite
def _sparse_weights(draw):
    d = draw(st.integers(1, 12))
    width = draw(st.integers(0, 10))
    seed = draw(st.integers(0, 2**31 - 1))
    g = np.random.default_rng(seed)
    W = np.zeros((d, width))
    for c in range(width):
        terms = int(g.choice([0, 1, 1, 2, 2, 3, d]))
        rows = g.choice(d, size=min(terms, d), replace=False)
        W[rows, c] = g.choice([1.0, -1.0, 0.5, 3.0, g.standard_normal()], size=len(rows))
    return torch.tensor(W)


@settings(max_examples=150, deadline=None)
@given(_sparse_weights(), st.integers(0, 2**31 - 1))
def test_a_projection_rounds_as_before_the_split(W, seed):
    # the oracle: the few-weight columns (at most two) in one product over the rows they
    # read, the others in the full product, as the projection computed them before one-weight
    # columns became gathers; one-weight columns are the full product's to the bit
    x = torch.tensor(np.random.default_rng(seed).standard_normal((2, 3, W.shape[0])))
    nonzero = W != 0
    terms = nonzero.sum(dim=0)
    few = terms <= 2
    rows = nonzero[:, few].any(dim=1)
    got = Projection(W)(x)
    assert torch.equal(got[..., few], x[..., rows] @ W[rows][:, few])
    one = terms == 1
    assert torch.equal(got[..., one], (x @ W)[..., one])  # one product: exact on any CPU
    # the columns of more terms: the definition's sums, rounded by a product of those
    # columns over the rows they read where those are few (whether it rounds a column as
    # the full product does depends on the kernel the CPU's BLAS picks for the width and
    # depth; one rounding per term bounds the difference)
    assert _within_rounding(got[..., ~few], x, W[:, ~few])


def test_a_lone_column_of_many_terms_rounds_within_the_wider_product():
    # one column of more than two weights beside one-weight columns, on 300 random W: it
    # is computed as a product of two columns (a one-column product would go through
    # torch's matrix-vector kernel); the one-weight columns stay exact, the other within
    # one rounding per term of the wider product (its bits depend on the CPU's kernels)
    g = np.random.default_rng(5)
    for _ in range(300):
        d = int(g.integers(3, 40))
        W = torch.zeros(d, 3, dtype=torch.float64)
        W[:, 0] = torch.tensor(g.standard_normal(d))
        W[int(g.integers(d)), 1] = 1.0
        W[int(g.integers(d)), 2] = float(g.standard_normal())
        x = torch.tensor(g.standard_normal((2, 17, d)))
        want = x @ W
        got = Projection(W)(x)
        assert torch.equal(got[..., 1:], want[..., 1:])  # the one-weight columns: exact
        assert _within_rounding(got[..., :1], x, W[:, :1])


def _within_rounding(got: torch.Tensor, x: torch.Tensor, W: torch.Tensor) -> bool:
    """``got`` is ``x @ W`` up to one rounding per term (float64)."""
    bound = (x.abs() @ W.abs()) * (W.shape[0] + 1) * torch.finfo(x.dtype).eps
    return bool(((got - x @ W).abs() <= bound).all())


def test_a_lone_two_weight_column_keeps_its_wider_product():
    # one two-weight column beside one-weight ones: a product of one column would round
    # otherwise (torch's matrix-vector kernel), so it is not split off
    W = torch.tensor([[0.1, 0.0], [0.7, 0.0], [0.0, 1.3]], dtype=torch.float64)
    x = torch.tensor(np.random.default_rng(0).standard_normal((1, 64, 3)))
    assert torch.equal(Projection(W)(x), x @ W)


def test_stacked_heads_that_move_columns_add_without_a_product():
    U = universal.build(8, 8, 1, storage="dense")
    X = torch.tensor(np.random.default_rng(0).standard_normal((8, 8)))
    target = spec.with_logit_scale(spec.random_attention(1, 8, seed=0, bias=True), X, 10.0)
    got = U.simulate(target, X)
    rt = U.model.runtime
    moved = [
        s[1].moved_to is not None
        for s in (layer.cache.get("summed") for layer in rt.layers)
        if s is not None
    ]
    assert any(moved)  # U's position gathers move their values column by column
    U.model.executor = "dense"
    try:  # the definition, to rounding (products over the rows a weight reads)
        want = U.simulate(target, X)
    finally:
        U.model.executor = "auto"
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)


def test_the_feature_major_output_is_an_ordinary_tensor():
    entry = library.PROGRAMS["make_hist"]
    m = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)
    ids, vals = m.encode(_inputs(entry))
    rt = Runtime(m.model, "fused")
    with torch.no_grad():
        out = rt(ids, vals)
        want = m.model(ids, vals)
    assert not out.is_inference() and torch.equal(out, want)
    out[0, 0, 0] = 1.0  # writable outside inference mode
    streams = {1: None, 2: None}
    with torch.no_grad():
        rt(ids, vals, streams=streams)
    assert all(not s.is_inference() for s in streams.values())
