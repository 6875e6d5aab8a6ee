"""Both sequence layouts of U pass one interface test (``simulator.layouts``): prepare checks
the target and X, pack writes U's input, U's RASP program (run by the interpreter, the numpy
oracle) computes T(X) over it, and unpack reads T(X) back, equal to plain torch's reference;
universal.py reaches every layout-dependent step through the interface.

The oracle is ``simulator.reference`` (plain torch over the target's parameters).
"""

from __future__ import annotations

import inspect
import re

import pytest
import torch

from attnsim.model.memory import attention_bytes
from attnsim.rasp import interpret
from attnsim.simulator import layouts, sampling, universal
from attnsim.simulator.case import Case
from attnsim.simulator.config import SimulatorConfig
from attnsim.simulator.reference import reference

KINDS = ["scalar", "vector"]


def _x(n: int, d: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, dtype=torch.float64, generator=g)


@pytest.mark.parametrize("kind", KINDS)
def test_the_layout_of_a_build(kind):
    config = SimulatorConfig(2, 2, layout_kind=kind)
    got = layouts.of(config)
    assert isinstance(got, layouts.SequenceLayout) and got.name == kind


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layer", ["attention", "encoder"])
def test_prepare_pack_program_unpack_give_the_reference(kind, layer):
    config = SimulatorConfig(3, 4, 2, layer=layer, layout_kind=kind)
    lay = layouts.of(config)
    if layer == "attention":
        targets = [sampling.random_attention(h, 4, seed=h) for h in (1, 2)]
    else:
        targets = [sampling.random_encoder_layer(2, 4, 8, seed=s) for s in (1, 2)]
    Xs = [_x(3, 4, 1), _x(2, 4, 2)]  # two cases of different n in one batch
    cases = [lay.prepare(config, t, X, None) for t, X in zip(targets, Xs)]
    assert all(type(c) is Case for c in cases)  # one case type for every layout
    assert [c.shape.n for c in cases] == [3, 2]
    seq = lay.pack(config, cases)
    length = config.layout.length
    want_shape = (2, length) if kind == "scalar" else (2, length, config.layout.width)
    assert tuple(seq.shape) == want_shape
    out = interpret.evaluate_batch(lay.program(config), seq.numpy())
    got = lay.unpack(config, torch.tensor(out, dtype=torch.float64), cases)
    for g, t, X in zip(got, targets, Xs):
        want = reference(t, X)
        assert g.shape == X.shape
        assert float((g - want).abs().max()) <= 1e-10 * (1 + float(want.abs().max()))


@pytest.mark.parametrize("kind", KINDS)
def test_prepare_refuses_what_the_build_cannot_read(kind):
    config = SimulatorConfig(3, 4, 1, layout_kind=kind)
    lay = layouts.of(config)
    target = sampling.random_attention(1, 4, seed=0)
    with pytest.raises(ValueError):
        lay.prepare(config, target, _x(4, 4), None)  # n = 4 > max_n
    with pytest.raises(ValueError):
        lay.prepare(config, sampling.random_attention(2, 4, seed=0), _x(3, 4), None)  # heads
    with pytest.raises(ValueError):
        lay.prepare(config, target, _x(3, 3), None)  # X's width is not the target's


@pytest.mark.parametrize("kind", KINDS)
def test_cost_covers_the_input_and_grows_with_the_build(kind):
    small = SimulatorConfig(2, 2, layout_kind=kind)
    large = SimulatorConfig(8, 8, layout_kind=kind)
    lay = layouts.of(small)
    positions = small.layout.length + 1
    width = getattr(small.layout, "width", 1)
    assert lay.cost(small) >= positions * width * 8  # the input itself, float64
    assert lay.cost(large) > lay.cost(small)
    assert lay.cost(small, "dense") >= attention_bytes(positions, 1, 8)


@pytest.mark.parametrize("kind", KINDS)
def test_a_compiled_u_reads_its_layout_and_not_the_other(kind):
    U = universal.build(2, 2, 1, layout=kind)
    lay = layouts.of(U.config)
    assert lay.model_problems(U.config, U.model) == []
    other = universal.build(2, 2, 1, layout="vector" if kind == "scalar" else "scalar")
    assert lay.model_problems(U.config, other.model) != []


def test_universal_does_not_branch_on_the_layout():
    source = inspect.getsource(universal)
    assert not re.search(
        r"is_vector|layout_kind\s*(is|==|!=)|vector_codec|vector_program|isinstance\([^)]*Layout",
        source,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_pack_refuses_the_other_layouts_form_of_the_attention(kind):
    """A case made by hand in the form the other layout reads: a clear error, not a
    sequence U would read wrongly (scalar: merged; vector: the factors)."""
    config = SimulatorConfig(3, 4, 1, layout_kind=kind)
    lay = layouts.of(config)
    att = sampling.random_attention(1, 4, seed=0)
    own = lay.prepare(config, att, _x(3, 4), None)
    other = att if kind == "scalar" else att.merged()
    wrong = Case(other, own.X)
    with pytest.raises((TypeError, ValueError), match="merged|MergedAttention"):
        lay.pack(config, [wrong])
    assert lay.pack(config, [own]).shape[0] == 1


def test_a_case_checks_its_parts():
    att = sampling.random_attention(1, 4, seed=0)
    layer = sampling.random_encoder_layer(1, 4, 8, seed=0)
    with pytest.raises(TypeError, match="Case.rest must be a tuple of EncoderLayerSpec"):
        Case(layer.attention, _x(2, 4), layer, rest=(att,))
    with pytest.raises(ValueError, match="give its first as layer"):
        Case(att, _x(2, 4), None, rest=(layer,))
    wide = sampling.random_encoder_layer(1, 6, 8, seed=0)
    with pytest.raises(ValueError, match="Case.layer has d_model=6"):
        Case(layer.attention, _x(2, 4), layer, rest=(wide,))
    with pytest.raises(ValueError, match=r"Case.X must have shape \[n, d\] = \[n, 4\]"):
        Case(att, _x(2, 5))
