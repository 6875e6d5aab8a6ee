"""U's sums are balanced trees (simulator.programs.tree_sum): the compiled model is the one a
sum from the left gives, weight for weight, and both compute what the interpreter does."""

import functools

import torch

from attnsim import compile_program, rasp
from attnsim.simulator.programs import tree_sum


def _parts():
    x = rasp.numerical(rasp.Map(float, rasp.tokens))
    sel = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ)
    prefix = rasp.numerical(rasp.Aggregate(sel, x, default=0))
    return [x * prefix * float(k) for k in range(1, 8)]  # seven products, one unit each


def test_tree_and_chain_compile_to_the_same_weights_and_values():
    tree = compile_program(tree_sum(_parts()), vocab=[1, 2, 3], max_seq_len=4)
    chain = compile_program(
        functools.reduce(lambda a, b: a + b, _parts()), vocab=[1, 2, 3], max_seq_len=4
    )
    a, b = tree.model.state_dict(), chain.model.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    for xs in ([1, 2, 3, 1], [3, 3], [2]):
        (want,) = rasp.evaluate(tree_sum(_parts()), [xs])
        for model in (tree, chain):
            (got,) = model.run([xs])
            assert max(abs(g - w) for g, w in zip(got, want)) <= 1e-12 * max(map(abs, want))
