"""U's input as its first positions: every entry of a case lies in the layout's
``input_length`` first positions (both layouts), and a sparse model that reads vector
tokens given the values of those positions only runs exactly as when given all of them
(the rest zero); values of the wrong shape are refused."""

import numpy as np
import pytest
import torch

from attnsim.simulator import layouts, sampling, universal


def _case(U, seed=0):
    n, d = 3, 2
    X = torch.tensor(np.random.default_rng(seed).standard_normal((n, d)))
    layer = sampling.random_encoder_layer(2, d, 4, seed=seed, activation="gelu")
    return U._prepare(layer if U.config.layer == "encoder" else layer.attention, X, None)


@pytest.mark.parametrize(
    "kw",
    [
        dict(layout="scalar"),
        dict(layout="vector", layer="encoder", max_ff=4),
        dict(layout="vector", layer="encoder", max_ff=4, n_layers=2),
    ],
)
def test_every_entry_lies_in_the_input_prefix(kw):
    U = universal.build(3, 2, 2, storage="dense", **kw)
    lay = layouts.of(U.config)
    case = _case(U)
    full = lay.pack(U.config, [case])
    short = lay.pack(U.config, [case], prefix=True)
    m = U.config.layout.input_length
    assert short.shape[1] == m <= full.shape[1]
    assert torch.equal(full[:, :m], short)
    assert not bool(full[:, m:].ne(0).any())
    assert bool(short.ne(0).any())


def test_a_sparse_vector_model_reads_a_prefix_of_values_as_all_of_them():
    U = universal.build(3, 2, 2, layer="encoder", max_ff=4, layout="vector", storage="sparse")
    case = _case(U)
    ids, vals = U.model_inputs(U._pack([case]))
    m = 1 + U.config.layout.input_length
    net = U.model.model
    keep = U._columns([d for d, _ in U.model.output.form])
    with torch.no_grad():
        want = net(ids, vals, keep=keep)
        got = net(ids, vals[:, :m].clone(), keep=keep)
    assert torch.equal(got, want)
    assert bool(want.ne(0).any())
    for bad in (vals[:, :, :-1], vals[0], torch.cat([vals, vals]), vals[:, :1].expand(1, 9**4, -1)):
        with pytest.raises(ValueError, match="token_values"):
            net(ids, bad, keep=keep)
