"""``attnsim.compress``: the residual stream in fewer dimensions, checked end to end.

The compressed model runs on its own (no teacher forcing) and its decoded outputs are
compared with the interpreter's; the weights are checked to be the compiled ones seen
through the projection.
"""

import functools

import pytest
import torch

import attnsim
from attnsim.model import compress as C
from attnsim.rasp import interpret
from attnsim.report import suite


@functools.cache
def setup(name: str):
    p = suite.PROGRAMS[name]
    model = suite._compile(p, "hard")
    xs, ys = suite.sample_inputs(p, model, per_length=4)
    return p, model, xs, ys


def exact(small, xs, ys) -> float:
    hits = 0
    for x, y in zip(xs, ys):
        try:
            hits += small.run(x) == y
        except ValueError:
            pass
    return hits / len(xs)


def rank(model, xs) -> int:
    return int(torch.linalg.matrix_rank(torch.cat([x.double() for x in C._streams(model, xs)])))


def test_make_hist_runs_exactly_in_the_rank_of_its_streams():
    p, model, xs, ys = setup("make_hist")
    assert model.config.d_model == 16 and rank(model, xs) == 11
    small = attnsim.compress(model, d=11, inputs=xs, steps=50)
    assert small.config.d_model == 11 and small.loss < 1e-9
    assert exact(small, xs, ys) == 1.0
    assert all(small.run(x) == interpret.evaluate(p.factory(), x) for x in xs[:5])
    # the labels are kept: same components and circuit; a direction is a vector of R^11
    assert small.components() == model.components()
    assert small.circuit() == model.circuit()
    assert small.direction("hist:1").shape == (11,)
    with pytest.raises(KeyError, match="no residual direction 'nope'"):
        small.direction("nope")


def test_the_weights_are_the_compiled_ones_through_the_projection():
    _, model, xs, _ = setup("make_hist")
    small = C.compress(model, d=12, inputs=xs, steps=10)
    P = small.projection
    big, net = model.model, small.model
    torch.testing.assert_close(net.W_E, big.W_E @ P)
    torch.testing.assert_close(net.blocks[0].attn.W_Q, P.T @ big.blocks[0].attn.W_Q)
    torch.testing.assert_close(net.blocks[0].attn.W_O, big.blocks[0].attn.W_O @ P)
    torch.testing.assert_close(net.blocks[0].mlp.W_in, P.T @ big.blocks[0].mlp.W_in)
    torch.testing.assert_close(net.blocks[0].mlp.W_out, big.blocks[0].mlp.W_out @ P)


def test_too_narrow_loses_the_program():
    _, model, xs, ys = setup("make_hist")
    small = C.compress(model, d=3, inputs=xs, steps=50, end_to_end_steps=50)
    assert exact(small, xs, ys) < 1.0 and small.violations > 0


def test_smallest_width_reports_the_curve():
    _, model, xs, ys = setup("make_hist")
    best, curve = C.smallest_width(model, xs, ys, widths=[4, 11, 16], steps=30, end_to_end_steps=30)
    assert best == 11 and [k for k, _, _ in curve] == [4, 11, 16]
    assert curve[0][1] < 1.0 and curve[1][1] == curve[2][1] == 1.0


def test_bad_arguments():
    _, model, xs, _ = setup("make_hist")
    with pytest.raises(ValueError, match="d must be an integer from 1 to d_model=16, got 17"):
        C.compress(model, d=17, inputs=xs)
    with pytest.raises(ValueError, match="got 0"):
        C.compress(model, d=0, inputs=xs)
    with pytest.raises(TypeError, match="compress expects a CompiledModel, got str"):
        C.compress("model", d=3)
    _, matrix, _, _ = setup("transpose")
    with pytest.raises(ValueError, match="reads real-valued tokens: pass compress"):
        C.compress(matrix, d=3)


def test_below_the_rank_argmax_decoding_reads_the_superposed_output():
    """At d=10 < rank 11 the output directions overlap: a strict one-hot read refuses the
    mixture, the argmax read (how a model in superposition is read) is still exact."""
    _, model, xs, ys = setup("make_hist")
    small = C.compress(model, d=10, inputs=xs, steps=200)
    assert small.loss > 1e-6  # no longer exact inside
    assert exact(small, xs, ys) == 1.0
    strict = 0
    for x, y in zip(xs, ys):
        try:
            strict += small.run(x, decode="strict") == y
        except ValueError:
            pass
    assert strict < len(xs)
    with pytest.raises(ValueError, match="decode must be 'argmax' or 'strict', got 'max'"):
        small.run(xs[0], decode="max")


def test_end_to_end_training_reaches_half_the_width_where_the_read_loss_does_not():
    """make_hist at d=8 (half its d_model, below the rank 11): the read loss alone misses some
    inputs; training end to end with margins makes every hard decision as the compiled model
    does, and the compressed model's own run then matches the interpreter on every input."""
    p, model, xs, ys = setup("make_hist")
    reads_only = C.compress(model, d=8, inputs=xs, steps=200, end_to_end_steps=0)
    assert reads_only.violations is None and exact(reads_only, xs, ys) < 1.0
    small = C.compress(model, d=8, inputs=xs, steps=200)
    assert small.violations == 0
    assert all(small.run(x) == interpret.evaluate(p.factory(), x) for x in xs)
    # per-layer reads: a plain Transformer of width 8 whose weights are the folded products
    big, net = model.model, small.model
    assert len(small.reads) == 3 and all(r.shape == (8, 16) for r in small.reads)
    assert not torch.allclose(small.reads[0], small.projection.T)
    torch.testing.assert_close(net.blocks[0].attn.W_K, small.reads[0] @ big.blocks[0].attn.W_K)
    torch.testing.assert_close(net.blocks[0].mlp.W_in, small.reads[1] @ big.blocks[0].mlp.W_in)
    torch.testing.assert_close(net.blocks[0].mlp.W_out, big.blocks[0].mlp.W_out @ small.projection)
    assert small.readout is small.reads[-1]
    # the readout decodes through its own map: the stream of the small model, read by hand
    ids, vals = model.encode([xs[-1]])
    with torch.no_grad():
        resid = net(ids, vals) @ small.readout
    cols = [model._index[d] for d in model.output.dims]
    got = [model.output.values[int(i)] for i in resid[0, 1:, cols].argmax(-1)]
    assert got == ys[-1] == small.run(xs[-1])


def test_shared_reads_keep_one_projection():
    _, model, xs, ys = setup("make_hist")
    small = C.compress(model, d=8, inputs=xs, steps=200, per_layer_reads=False)
    assert all(torch.equal(r, small.projection.T) for r in small.reads)
    torch.testing.assert_close(
        small.model.blocks[0].attn.W_Q, small.projection.T @ model.model.blocks[0].attn.W_Q
    )
    assert small.violations is not None


def test_exact_widths_skip_the_end_to_end_stage():
    _, model, xs, _ = setup("make_hist")
    small = C.compress(model, d=11, inputs=xs, steps=10)
    assert small.violations is None and small.loss < 1e-9


def test_bad_training_arguments():
    _, model, xs, _ = setup("make_hist")
    for kw, msg in [
        ({"steps": -1}, "steps must be an integer >= 0, got -1"),
        ({"end_to_end_steps": 1.5}, "end_to_end_steps must be an integer >= 0, got 1.5"),
        ({"end_to_end_steps": True}, "end_to_end_steps must be an integer >= 0, got True"),
        ({"lr": 0}, "lr must be a positive finite number, got 0"),
        ({"end_to_end_lr": float("nan")}, "end_to_end_lr must be a positive finite number"),
        ({"margin": 0.25}, r"margin must be a number from 0 to below hard_tolerance=0.25"),
        ({"margin": -0.1}, "got -0.1"),
        ({"inputs": []}, "compress needs at least one input"),
    ]:
        with pytest.raises(ValueError, match=msg):
            C.compress(model, d=8, **{"inputs": xs, **kw})
