"""Layer, head and MLP counts of RASP programs scheduled as early as possible."""

import dataclasses
import json

import pytest

from attnsim import library, rasp
from attnsim.rasp import analysis

C = rasp.Comparison
tok, idx = rasp.tokens, rasp.indices


def chain(depth):
    """``depth`` numerical prefix means, each reading the previous one."""
    x = rasp.numerical(tok)
    for _ in range(depth):
        x = rasp.numerical(rasp.Aggregate(rasp.Select(idx, idx, C.LEQ), x))
    return x


# (id, program, layers, heads per layer, MLPs): counted by hand
CASES = [
    ("tokens", tok, 0, (), 0),
    ("indices-map", idx * 2 + 1, 0, (), 2),  # two affine Map nodes
    ("length-alone", rasp.length, 1, (1,), 0),
    ("length-used-twice", rasp.length + rasp.length * 2, 1, (1,), 2),
    ("hist", library.make_hist(), 1, (1,), 0),
    ("two-heads-one-layer", library.make_hist() + library.make_length(), 1, (2,), 1),
    ("chain-3", chain(3), 3, (1, 1, 1), 0),
    ("map-between-heads", rasp.SelectorWidth(rasp.Select(library.make_hist() + 1, tok, C.EQ)),
     2, (1, 1), 1),
    ("selector-depends-on-length", rasp.Aggregate(rasp.Select(idx, rasp.length - 1, C.EQ), tok),
     2, (1, 1), 1),
    ("constant-selector", rasp.SelectorWidth(rasp.ConstantSelector([[True]])), 1, (1,), 0),
    ("selector-alone", rasp.Select(library.make_hist(), tok, C.EQ), 1, (1,), 0),
    # the RASP paper's Table 1: reverse 2/1, hist 1/1, sort 2/1, most-freq 3/2, Dyck-1 2/1
    ("paper-reverse", library.make_reverse(tok), 2, (1, 1), 2),
    ("paper-sort", library.sort(tok, tok), 2, (1, 1), 0),
    ("paper-most-freq", library.sort_by_most_freq(tok), 3, (2, 1, 1), 3),
    ("paper-dyck1", library.make_dyck1_ptf(), 2, (1, 1), 4),
    ("dyck2", library.make_dyck2_ptf(), 4, (1, 1, 1, 1), 10),
    ("tracr-sort-freq", library.make_sort_freq(8), 3, (1, 1, 1), 2),
]  # fmt: skip


@pytest.mark.parametrize(
    "program, layers, heads, mlps", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_counts(program, layers, heads, mlps):
    a = analysis.analyze(program)
    assert (a.n_layers, a.heads_per_layer, a.n_mlps) == (layers, heads, mlps)
    assert a.n_heads == sum(heads) and a.max_heads == max(heads, default=0)
    assert len(a.attention) == a.n_heads
    assert sum(a.mlps_per_layer) == a.n_mlps and len(a.mlps_per_layer) == layers + 1


def test_shared_subexpression_is_one_head():
    hist = library.make_hist()
    both = rasp.SequenceMap(lambda a, b: a + b, hist, hist)
    assert analysis.analyze(both).heads_per_layer == (1,)


def test_attention_ops_name_their_layers():
    a = analysis.analyze(library.make_reverse(tok))
    assert [(op.label, op.kind, op.layer) for op in a.attention] == [
        ("length", "length", 1),
        ("reverse", "Aggregate", 2),
    ]
    assert a.uses_length
    assert not analysis.analyze(library.make_hist()).uses_length


def test_mlps_sit_after_the_attention_they_wait_for():
    a = analysis.analyze(library.make_reverse(tok))
    # length - indices - 1 waits for the length head: both maps are in layer 1's MLP
    assert a.mlps_per_layer == (0, 2, 0)


def test_deep_chain_needs_no_recursion():
    assert analysis.analyze(chain(2000)).n_layers == 2000


def test_is_frozen_and_serialisable():
    a = analysis.analyze(library.sort(tok, tok))
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.n_layers = 5
    d = json.loads(json.dumps(a.to_dict()))
    assert d["n_layers"] == 2 and d["heads_per_layer"] == [1, 1] and d["max_heads"] == 1
    assert d["attention"][0] == {"label": "target_pos", "kind": "SelectorWidth", "layer": 1}


def test_str_is_a_table():
    text = str(analysis.analyze(library.make_reverse(tok)))
    lines = text.splitlines()
    assert lines[0] == (
        "program reverse: 2 attention layer(s), 2 head(s) (at most 1 per layer), 2 MLP(s)"
    )
    assert lines[1].split() == ["layer", "heads", "MLPs", "attention", "operations"]
    assert lines[2].split() == ["1", "1", "2", "length"]
    assert lines[3].split() == ["2", "1", "0", "reverse", "(Aggregate)"]


def test_not_an_expression():
    with pytest.raises(TypeError, match=r"analyze expects a RASP expression, got str"):
        analysis.analyze("hist")
