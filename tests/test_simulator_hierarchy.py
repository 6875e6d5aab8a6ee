"""The hierarchy: compiled transformers as targets of a decoder U.

The oracle is the compiled model itself (its dense forward pass in float64): a U' built for
its blocks must reproduce its residual stream.
"""

from __future__ import annotations

import pytest
import torch

from attnsim import compile_program, library, rasp, simulator
from attnsim.simulator import hierarchy, reference


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max()) / max(1.0, float(want.abs().max()))


def product_program():
    """A numerical product of a token and a mean: a bilinear unit after a softmax head."""
    x = rasp.numerical(rasp.Map(lambda t: t, rasp.tokens))
    mean = rasp.numerical(
        rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE), x)
    )
    return rasp.numerical(x * mean)


def compiled(program, vocab):
    return compile_program(program, vocab=vocab, max_seq_len=4, attention="softmax", maps="relu")


def final_stream(model, xs):
    with torch.no_grad():
        return model.model(*model.encode(xs))[0]


def u_prime(stack, X):
    n, d = X.shape
    heads = max(layer.attention.n_heads for layer in stack.layers)
    ff = max(layer.ffn.d_mlp for layer in stack.layers)
    return simulator.build(
        n, d, heads, layer="decoder", max_ff=ff, n_layers=len(stack.layers), score_bound=1e6
    )


@pytest.mark.parametrize(
    "program, vocab, xs",
    [
        (library.make_hist(), list("abc"), ["abca"]),
        (product_program(), [1, 2, 3], [[3, 1, 2]]),
    ],
)
def test_a_compiled_model_inside_a_decoder_U(program, vocab, xs):
    model = compiled(program, vocab)
    stack = hierarchy.stack_targets(model)
    X = hierarchy.embedded(model, xs)
    want = final_stream(model, xs)
    Y = X
    for layer in stack.layers:  # the split into decoder layers is the same computation
        Y = reference.encoder_layer(layer, Y)
    assert rel(Y, want) <= 1e-12
    got = u_prime(stack, X).simulate(stack, X)
    assert rel(got, want) <= 1e-9


def test_bilinear_units_become_a_second_layer():
    model = compiled(product_program(), [1, 2, 3])
    sizes = [len(hierarchy.block_targets(model, i)) for i in range(len(model.model.blocks))]
    assert 2 in sizes  # the block with the product
    (second,) = [hierarchy.block_targets(model, i)[1] for i, s in enumerate(sizes) if s == 2]
    assert second.ffn.gated and second.ffn.activation.value == "identity"
    assert float(second.attention.W_O.abs().max()) == 0.0


def test_models_a_decoder_U_cannot_read():
    hard = compile_program(library.make_hist(), vocab="ab", max_seq_len=3)
    with pytest.raises(ValueError, match="attention='softmax'"):
        hierarchy.stack_targets(hard)
    native = compile_program(
        rasp.exp(rasp.numerical(rasp.tokens, value_range=(0.0, 1.0))),
        vocab=None,
        max_seq_len=2,
        attention="softmax",
    )
    with pytest.raises(ValueError, match="maps='relu'"):
        hierarchy.stack_targets(native)
    with pytest.raises(ValueError, match="layer must be in"):
        hierarchy.block_targets(compiled(library.make_hist(), list("ab")), 7)
    with pytest.raises(TypeError, match="CompiledModel"):
        hierarchy.stack_targets("not a model")
