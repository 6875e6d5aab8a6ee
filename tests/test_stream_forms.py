"""Forms requests (attnsim.model.stream.Forms): a run keeps one row per linear form of a
stage's columns, not the columns, and the row is the sum a reader of the columns makes,
bit for bit, in the dense and the sparse runtime alike; bad forms are refused."""

import numpy as np
import pytest
import torch

from attnsim import compile_program, library, rasp
from attnsim.model.stream import Columns, Forms
from attnsim.simulator import sampling, universal


def _sum(cols_x: torch.Tensor, weights: list[float]) -> torch.Tensor:
    acc = torch.zeros(cols_x.shape[:-1], dtype=cols_x.dtype)
    for j, w in enumerate(weights):
        acc = acc + w * cols_x[..., j]
    return acc


@pytest.mark.parametrize("storage", ["dense", "sparse"])
def test_forms_equal_the_sums_of_the_columns(storage):
    U = universal.build(3, 2, 1, storage=storage)
    model = U.model
    X = torch.tensor(np.random.default_rng(1).standard_normal((3, 2)))
    ids, vals = U.model_inputs(
        U._pack([U._prepare(sampling.random_attention(1, 2, seed=0), X, None)])
    )
    d = model.config.d_model
    stages = [1, 2 * model.config.n_layers - 1]
    cols = {s: Columns(torch.arange(d)) for s in stages}
    with torch.no_grad():
        model.runtime(ids, vals, streams=cols)
    rng = np.random.default_rng(0)
    streams, forms = {}, {}
    for s in stages:
        alive = torch.nonzero(cols[s].abs().sum(dim=(0, 1))).flatten().numpy()
        assert len(alive) >= 5  # forms over columns that hold something at that stage
        forms[s] = [
            (torch.tensor(rng.choice(alive, size=5, replace=False)), torch.randn(5).double())
            for _ in range(3)
        ]
        streams[s] = Forms(forms[s])
    with torch.no_grad():
        model.runtime(ids, vals, streams=streams)
    for s in stages:
        assert streams[s].shape == (1, ids.shape[1], 3)
        for j, (c, w) in enumerate(forms[s]):
            want = _sum(cols[s][..., c], w.tolist())
            assert torch.equal(streams[s][..., j], want)


def test_bad_forms_are_refused():
    with pytest.raises(ValueError, match="one length"):
        Forms([(torch.tensor([0, 1]), torch.tensor([1.0]))])
    with pytest.raises(ValueError, match="not empty"):
        Forms([(torch.tensor([], dtype=torch.long), torch.tensor([]))])
    with pytest.raises(ValueError, match="1-D"):
        Forms([(torch.tensor([[0]]), torch.tensor([[1.0]]))])
    with pytest.raises(ValueError, match=r"does not have: \['zz'\]"):
        Forms.named([[("a", 1.0), ("zz", 2.0)]], {"a": 0})


@pytest.mark.parametrize("name", ["make_sort", "make_hist", "make_frac_prevs"])
def test_a_sparse_run_gives_every_stage_as_the_dense_one(name):
    """Every stage the sparse model is asked for holds the dense stream's values there,
    position rows included (a row first read by a request after a layer's MLP is written
    before that request reads it)."""
    prog = {
        "make_sort": lambda: library.make_sort(rasp.tokens, rasp.tokens, max_seq_len=5, min_key=1),
        "make_hist": library.make_hist,
        "make_frac_prevs": lambda: library.make_frac_prevs(rasp.tokens == "a"),
    }[name]()
    runs = {}
    for storage in ("dense", "sparse"):
        m = compile_program(prog, vocab="abc", max_seq_len=5, storage=storage)
        ids, vals = m.encode(["abcab", "ccbaa"])
        runs[storage] = {}
        for s in range(2 * m.config.n_layers + 1):  # one stage a run: its own first reads
            streams = {s: Columns(torch.arange(m.config.d_model))}
            with torch.no_grad():
                m.runtime(ids, vals, streams=streams)
            runs[storage][s] = streams[s]
    tol = 1e-6 if runs["dense"][0].dtype == torch.float32 else 1e-12  # (sums' order)
    for s in runs["dense"]:
        torch.testing.assert_close(runs["sparse"][s], runs["dense"][s], rtol=0, atol=tol)
