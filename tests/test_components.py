"""The ground-truth table: every head and unit is explained, every weighted expression found.

The oracle for "which expressions need weights" is the traced program itself: its Aggregates
and SelectorWidths, and its Maps/SequenceMaps that are neither static (value inference) nor
realised without units (the compiler's report says "virtual"). Checked in both directions:
every active head and every MLP unit of the weights appears in a row with a program label,
and every such expression appears in at least one row.
"""

import functools
import json

import pytest
import torch

from attnsim.compiler import compile_program, components, tracing, value_inference
from attnsim.matrix import programs as mp
from attnsim.model.compiled import CompiledModel
from attnsim.rasp import expr as E
from attnsim.rasp import library

LIBRARY = sorted(library.PROGRAMS)
MATRIX = {
    "transpose": (lambda: mp.transpose(2, 3), 6),
    "matmul": (lambda: mp.matmul(2, 2, 2), mp.matmul_input_length(2, 2, 2)),
    "softmax": (lambda: mp.softmax(2, 3), 6),
    "softmax_2layers": (lambda: mp.softmax(2, 3, layers=2), 6),
    "relu": (mp.relu, 4),
    "maxmin": (mp.maxmin, 4),
    "bias_add": (lambda: mp.bias_add(2, 2), 6),
    "det": (lambda: mp.det(2), 4),
    "inverse": (lambda: mp.inverse(2), 4),
}


@functools.cache
def compiled(kind: str, name: str):
    """(program, model), compiled once per program."""
    if kind == "library":
        entry = library.PROGRAMS[name]
        program = entry.factory()
        model = compile_program(program, vocab=entry.vocab, max_seq_len=entry.max_seq_len)
        return program, model, (entry.vocab, entry.max_seq_len, False)
    factory, length = MATRIX[name]
    program = factory()
    model = compile_program(program, vocab=None, max_seq_len=length, fixed_length=True)
    return program, model, (None, length, True)


CASES = [("library", n) for n in LIBRARY] + [("matrix", n) for n in MATRIX]


def active_units(model: CompiledModel) -> set[tuple]:
    """Every (site, layer, kind, index) with a non-zero output weight, from the weights."""
    out = set()
    for li, block in enumerate(model.model.blocks):
        for h in block.attn.active_heads().tolist():
            out.add(("attn", li, "head", h))
        mlp = block.mlp
        for u in torch.nonzero(mlp.W_out.abs().sum(dim=1) > 0).flatten().tolist():
            out.add(("mlp", li, "relu", u))
        for u in torch.nonzero(mlp.W_bil_out.abs().sum(dim=1) > 0).flatten().tolist():
            out.add(("mlp", li, "bilinear", u))
        for kind in mlp.native_kinds:
            w = getattr(mlp, f"W_{kind}_out")
            for u in torch.nonzero(w.abs().sum(dim=1) > 0).flatten().tolist():
                out.add(("mlp", li, kind, u))
    return out


def needs_weights(program, vocab, length, fixed, model) -> set[str]:
    graph = tracing.trace(program)
    vi = value_inference.ValueInference(value_inference.check_vocab(vocab), length, False, fixed)
    virtual = {r["label"] for r in model.report().realisations if "virtual" in r["how"]}
    out = set()
    for uid in graph.order:
        node = graph.nodes[uid]
        label = graph.labels[uid]
        if not isinstance(node, E.SOp) or vi.is_static(node):
            continue
        if isinstance(node, (E.Aggregate, E.SelectorWidth)):
            out.add(label)
        elif isinstance(node, (E.Map, E.SequenceMap)) and label not in virtual:
            out.add(label)
    return out


@pytest.mark.parametrize("kind,name", CASES, ids=[n for _, n in CASES])
def test_every_component_is_explained_and_every_operation_found(kind, name):
    program, model, (vocab, length, fixed) = compiled(kind, name)
    table = model.components()
    graph_labels = set(tracing.trace(program).labels.values())
    # every row names program expressions only, and at least one
    for row in table:
        assert row.labels, row
        assert set(row.labels) <= graph_labels, (row, graph_labels)
    # weights -> table: every active head and unit is in some row
    covered = {
        (r.site, r.layer, r.kind, i) for r in table if r.site in ("attn", "mlp")
        for i in range(r.start, r.stop)
    }  # fmt: skip
    missing = active_units(model) - covered
    assert not missing, f"{name}: components with no row: {sorted(missing)[:5]}"
    # table -> weights: rows name real heads and units only
    assert covered <= active_units(model), sorted(covered - active_units(model))[:5]
    # program -> table: every expression that needs weights is realised by a head or units
    realised = {lb for r in table if r.site in ("attn", "mlp") for lb in r.labels}
    lost = needs_weights(program, vocab, length, fixed, model) - realised
    assert not lost, f"{name}: operations with no component: {sorted(lost)}"
    # aggregates and selector widths live in heads
    heads = {lb for r in table.heads() for lb in r.labels}
    graph = tracing.trace(program)
    for uid in graph.order:
        node = graph.nodes[uid]
        if isinstance(node, (E.Aggregate, E.SelectorWidth)) and graph.labels[uid] in realised:
            assert graph.labels[uid] in heads, graph.labels[uid]
    assert table[-1].site == "output" and table[-1].labels == (program.label,)


def test_every_name_resolves():
    """No head or unit name falls through to an unknown label (a lowering naming bug)."""
    for kind, name in CASES:
        program, model, (vocab, length, fixed) = compiled(kind, name)
        # rebuild the table from the stages to read its unresolved names
        from attnsim.compiler import lowering, scheduling
        from attnsim.compiler.options import CompileOptions

        graph = tracing.trace(program)
        vi = value_inference.ValueInference(
            value_inference.check_vocab(vocab), length, False, fixed
        )
        lowered = lowering.lower(graph, vi, CompileOptions(fixed_length=fixed))
        table = components.build(graph, lowered, scheduling.schedule(lowered).layers)
        assert table.unresolved == (), (name, table.unresolved)


def test_table_is_stable_across_recompiles():
    entry = library.PROGRAMS["sort"]
    program = entry.factory()
    a = compile_program(program, vocab=entry.vocab, max_seq_len=entry.max_seq_len)
    b = compile_program(program, vocab=entry.vocab, max_seq_len=entry.max_seq_len)

    # everything: labels, operations, places, hooks and the directions read and written
    # (expressions the compiler makes itself, such as an Or selector's joint keys, are named
    # after the selector, so their directions are the same too)
    def key(table):
        return [(r.name, r.labels, r.ops, r.hook, r.reads, r.writes) for r in table]

    assert key(a.components()) == key(b.components())
    same = compile_program(program, vocab=entry.vocab, max_seq_len=entry.max_seq_len)
    assert key(same.components()) == key(a.components())


def test_sort_table_names_the_selectors():
    _, model, _ = compiled("library", "sort")
    table = model.components()
    (head,) = table.heads("sort")
    assert head.hook == f"blocks.{head.layer}.attn.hook_z"
    assert any(op.startswith("Select 'select_new_val' (keys=target_pos") for op in head.ops)
    assert dict(head.reads)["value"] == tuple(
        sorted(d for d in model.residual if d.startswith("tokens:"))
    )
    assert all(d.startswith("sort:") for d in head.writes)
    assert "target_pos" in {lb for r in table.heads() for lb in r.labels}
    text = str(model.report())
    assert "components" in text and "L" in text and "sort" in text
    assert [r.site for r in table[:1]] == ["embed"]


def test_merged_head_names_split_against_known_labels():
    known = {"a", "b+c", "b", "c+d"}
    assert components.split_head_name("a+b+c", known) == ["a", "b+c"]
    assert components.split_head_name("b+c+d", {"b", "c+d"}) == ["b", "c+d"]
    assert components.split_head_name("a+z", known) is None
    assert components.resolve_base("a+b:1", {"a", "a+b"}) == "a+b"
    assert components.resolve_base("x@empty_2", {"x"}) == "x"
    assert components.resolve_base("xy", {"x"}) is None


def test_merged_heads_serve_every_aggregate():
    sel = E.Select(E.indices, E.indices, E.Comparison.EQ).named("same")
    a = E.Aggregate(sel, E.tokens).named("copy+a")
    b = E.numerical(
        E.Aggregate(sel, E.numerical(E.Map(lambda t: 1 if t == "x" else 0, E.tokens)))
    ).named("b")
    prog = E.SequenceMap(lambda x, y: f"{x}{y}", a, b).named("out")
    model = compile_program(prog, vocab=["x", "y"], max_seq_len=3)
    heads = model.components().heads()
    merged = [h for h in heads if {"copy+a", "b"} <= set(h.labels)]
    assert merged, [h.labels for h in heads]


def test_checkpoint_round_trip_and_old_checkpoints(tmp_path):
    _, model, _ = compiled("library", "make_hist")
    model.save(tmp_path / "m")
    loaded = CompiledModel.load(tmp_path / "m")
    assert loaded.components() == model.components()
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    del meta["report"]["components"]  # as written before the table existed
    del meta["digest"]  # and before checkpoints carried a digest
    (tmp_path / "m" / "model.json").write_text(json.dumps(meta))
    old = CompiledModel.load(tmp_path / "m", check=False)
    assert old.run(["a", "b", "a"]) == model.run(["a", "b", "a"])
    with pytest.raises(ValueError, match="no component table.*compile the program again"):
        old.components()


def test_damaged_component_table_is_refused(tmp_path):
    from attnsim.model.checkpoint import DamagedCheckpointError

    _, model, _ = compiled("library", "make_hist")
    model.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "model.json").read_text())
    meta["report"]["components"][0]["writes"] = ["no such direction"]
    (tmp_path / "m" / "model.json").write_text(json.dumps(meta))
    with pytest.raises(DamagedCheckpointError, match="no such direction"):
        CompiledModel.load(tmp_path / "m")
