"""Activation patching against the ground truth, checked with the interpreter.

Patch the head that ``components()`` names for one RASP operation from a run on input B into
a run on input A: the output must be what the interpreter gives on A when that operation's
values are B's (the program re-built with the node replaced by a Map over indices holding
B's values). Patching a head the output does not depend on changes nothing.
"""

import copy

import pytest
import torch

from attnsim.compiler import compile_program
from attnsim.model import export
from attnsim.rasp import expr as E
from attnsim.rasp import interpret, library


def node_named(program: E.RASPExpr, label: str) -> E.RASPExpr:
    stack, seen = [program], set()
    while stack:
        e = stack.pop()
        if e.label == label:
            return e
        if e.uid not in seen:
            seen.add(e.uid)
            stack.extend(e.children)
    raise KeyError(label)


def with_override(program: E.RASPExpr, target: E.RASPExpr, values: list) -> E.RASPExpr:
    """``program`` re-built with ``target`` replaced by the constant sequence ``values``."""
    table = list(values)
    const = E.Map(lambda i: table[i], E.indices)
    const = E.numerical(const) if E.is_numerical(target) else E.categorical(const)
    done: dict[int, E.RASPExpr] = {}

    def rebuild(e: E.RASPExpr) -> E.RASPExpr:
        if e.uid == target.uid:
            return const
        if e.uid in done:
            return done[e.uid]
        new = copy.copy(e)
        changed = False
        for key, val in vars(e).items():
            if isinstance(val, E.RASPExpr):
                got = rebuild(val)
                changed |= got is not val
                setattr(new, key, got)
            elif isinstance(val, (list, tuple)) and val and isinstance(val[0], E.RASPExpr):
                got = type(val)(rebuild(v) for v in val)
                changed |= any(a is not b for a, b in zip(got, val))
                setattr(new, key, got)
        if changed:
            new._uid = next(E._ids)  # a new expression: the interpreter memoises by uid
            new._annotations = dict(e._annotations)
        done[e.uid] = new if changed else e
        return done[e.uid]

    return rebuild(program)


def expected(program, target_label, a, b):
    target = node_named(program, target_label)
    values_b = interpret.evaluate(target, b)
    return interpret.evaluate(with_override(program, target, values_b), a)


def patch_head(model, label, a, b):
    (head,) = model.components().heads(label)
    return model.run_patched(a, b, [head])


CASES = [
    # program, operation whose head is patched, input A, input B
    ("sort", "target_pos", ["c", "a", "d", "b"], ["a", "b", "d", "c"]),
    ("sort", "sort", ["c", "a", "d", "b"], ["b", "b", "d", "c"]),
    ("make_sort_unique", "target_pos", [2, 0, 1], [0, 2, 1]),
    ("make_hist", "hist", ["a", "b", "a", "c"], ["b", "b", "c", "c"]),
    ("make_reverse", "reverse", ["a", "b", "c"], ["c", "c", "a"]),
]


@pytest.mark.parametrize("attention", ["hard", "softmax"])
@pytest.mark.parametrize("name,label,a,b", CASES)
def test_patching_the_ground_truth_head_swaps_that_operation(name, label, a, b, attention):
    entry = library.PROGRAMS[name]
    program = entry.factory()
    model = compile_program(
        program, vocab=entry.vocab, max_seq_len=entry.max_seq_len, attention=attention
    )
    want = expected(program, label, a, b)
    assert want != interpret.evaluate(program, a)  # the patch matters
    assert patch_head(model, label, a, b) == want


def test_patching_what_the_output_ignores_changes_nothing():
    sel = E.Select(E.indices, E.indices, E.Comparison.EQ)
    shifted = E.Select(E.indices, E.indices, lambda k, q: k == q - 1)
    kept = E.Aggregate(sel, E.tokens).named("kept")
    ignored = E.Aggregate(shifted, E.tokens, default="x").named("ignored")
    program = E.SequenceMap(lambda x, y: x, kept, ignored).named("out")
    for attention in ("hard", "softmax"):
        model = compile_program(program, vocab=["x", "y"], max_seq_len=4, attention=attention)
        table = model.components()
        (head,) = table.heads("ignored")
        assert "kept" not in head.labels
        a, b = ["x", "y", "y"], ["y", "x", "x"]
        assert model.run_patched(a, b, [head]) == model.run(a) == interpret.evaluate(program, a)
        assert expected(program, "ignored", a, b) == model.run(a)
        (kept_head,) = table.heads("kept")
        assert model.run_patched(a, b, [kept_head]) == expected(program, "kept", a, b)
        assert model.run_patched(a, b, [kept_head]) != model.run(a)


def test_component_output_is_what_the_residual_gains():
    entry = library.PROGRAMS["make_hist"]
    model = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)
    xs = ["a", "b", "a"]
    _, cache = model.run_with_cache(xs)
    rows = [c for c in model.components() if c.site in ("attn", "mlp")]
    for layer in range(model.config.n_layers):
        heads = [c for c in rows if c.site == "attn" and c.layer == layer]
        gain = cache[f"blocks.{layer}.hook_resid_mid"] - cache[f"blocks.{layer}.hook_resid_pre"]
        total = sum((model.component_output(xs, c) for c in heads), torch.zeros_like(gain))
        torch.testing.assert_close(total, gain)


def _lens():
    pytest.importorskip("transformer_lens")
    try:
        from transformer_lens import HookedTransformer  # noqa: F401
    except ImportError:
        pytest.skip("this TransformerLens has no HookedTransformer")


@pytest.mark.parametrize("name,label,a,b", CASES[:2] + CASES[3:])
def test_patching_the_exported_lens_model(name, label, a, b):
    _lens()
    entry = library.PROGRAMS[name]
    program = entry.factory()
    model = compile_program(
        program, vocab=entry.vocab, max_seq_len=entry.max_seq_len, attention="softmax"
    )
    lens = export.to_transformer_lens(model)
    hooks = lens.attnsim_hook_labels
    (head,) = model.components().heads(label)
    assert label in hooks[head.hook][head.start]
    ids_a, _ = model.encode([a])
    ids_b, _ = model.encode([b])
    with torch.no_grad():
        _, cache_b = lens.run_with_cache(ids_b)

    def patch(z, hook):
        z[:, :, head.start] = cache_b[hook.name][:, :, head.start]
        return z

    with torch.no_grad():
        resid = lens.run_with_hooks(ids_a, return_type="logits", fwd_hooks=[(head.hook, patch)])
    got = model._decode(resid.to(model.model.dtype))[0]
    assert got == expected(program, label, a, b)


def test_run_patched_gives_mixed_where_a_patch_mixes_values():
    # checks are off in a patched run: a categorical output the patch turned into a mixture
    # is MIXED, as path patching all of the unit range's out-edges gives it
    from attnsim.model.path_patching import MIXED

    e = library.PROGRAMS["sort"]
    m = compile_program(e.factory(), vocab=e.vocab, max_seq_len=e.max_seq_len)
    a, b, node = ["b", "c", "b", "b"], ["a", "c", "b", "a"], "L0 MLP relu 0-31"
    got = m.run_patched(a, b, [node])
    assert MIXED in got
    pairs = [(s, r) for s, r in m.circuit().pairs() if s == node]
    assert got == m.run_path_patched(a, b, pairs)
