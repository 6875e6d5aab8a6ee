"""attnsim.rasp.from_tracr: programs built with tracr's own classes, converted into attnsim's.

Each converted program is checked against tracr's own evaluator (``tracr.rasp.rasp.evaluate``)
and, where it compiles, against the compiled model; the structure (names, encodings, shared
subtrees, predicates) against the tracr tree. Needs tracr-pypi (skipped without it), except
the refusals of objects that are not RASP expressions.
"""

from __future__ import annotations

import pytest

from attnsim import rasp
from attnsim.compiler import compile_program


def _tracr():
    return pytest.importorskip("tracr.rasp.rasp")


def _walk(e):
    seen, stack = {}, [e]
    while stack:
        x = stack.pop()
        if x.uid not in seen:
            seen[x.uid] = x
            stack.extend(x.children)
    return list(seen.values())


def _same(got: list, want: list) -> bool:
    """Equal as tracr's values compare: numbers (bools too: tracr's mean of one selected True
    is True, attnsim's numerical value 1.0) within 1e-12, anything else exactly."""
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        if isinstance(g, (int, float)) and isinstance(w, (int, float)):
            if abs(g - w) > 1e-12:
                return False
        elif type(g) is not type(w) or g != w:
            return False
    return True


def test_attnsim_expressions_pass_through_and_other_objects_are_refused():
    prog = rasp.Map(lambda x: x + 1, rasp.tokens)
    assert rasp.from_tracr(prog) is prog
    with pytest.raises(TypeError, match=r"tracr\.rasp\.rasp.*got builtins\.str \(the program\)"):
        rasp.from_tracr("tokens")


def test_tracr_library_programs_agree_with_tracr_and_compile():
    tr = _tracr()
    lib = pytest.importorskip("tracr.compiler.lib")
    cases = [
        (lib.make_length(), list("abc"), list("abc")),
        (lib.make_reverse(tr.tokens), list("abcd"), list("abcd")),
        (lib.make_hist(), list("abca"), list("abc")),
        (lib.make_sort_unique(tr.tokens, tr.tokens), [3, 1, 2], [1, 2, 3]),
        (lib.make_sort(tr.tokens, tr.tokens, max_seq_len=5, min_key=1), [3, 1, 2, 1], [1, 2, 3]),
        (lib.make_frac_prevs(tr.tokens == "x"), list("xyxx"), list("xy")),
        (lib.make_pair_balance(tr.tokens, "(", ")"), list("(()"), list("()")),
        (lib.make_shuffle_dyck(["()", "{}"]), list("({})"), list("(){}")),
        (lib.make_sort_freq(5), list("abab"), list("ab")),
    ]
    for program, xs, vocab in cases:
        want = tr.evaluate(program, xs)
        converted = rasp.from_tracr(program)
        assert converted.label == program.name  # tracr's lib names its programs
        assert _same(rasp.evaluate(converted, xs), want), program.name
        model = compile_program(converted, vocab=vocab, max_seq_len=5)
        assert _same(model.run(xs), want), program.name


def test_names_and_encodings_are_kept_and_default_names_dropped():
    tr = _tracr()
    x = tr.numerical(tr.Map(lambda t: t + 1, tr.tokens)).named("x1")
    cat = tr.categorical(tr.Map(lambda t: t * 2, tr.indices))
    plain = tr.Map(lambda t: t - 1, tr.indices)
    _ = plain.label  # reading a label makes tracr store its default name "map"
    prog = tr.SequenceMap(lambda a, b: a + b, x, tr.Map(lambda t: t, plain, simplify=False))
    conv = rasp.from_tracr(prog)
    cx, _inner = conv.children
    assert cx.label == "x1" and rasp.is_numerical(cx)
    assert rasp.is_categorical(rasp.from_tracr(cat))
    conv_plain = rasp.from_tracr(plain)
    assert conv_plain.label.startswith("map_")  # tracr's default name "map" is not kept
    assert rasp.evaluate(conv, [1, 2]) == tr.evaluate(prog, [1, 2]) == [1, 3]
    # primitives stay attnsim's own; annotated ones are annotated copies of them
    assert rasp.from_tracr(tr.tokens) is rasp.tokens
    num_tokens = rasp.from_tracr(tr.numerical(tr.tokens))
    assert isinstance(num_tokens, rasp.TokensType) and rasp.is_numerical(num_tokens)


def test_shared_subtrees_stay_shared():
    tr = _tracr()
    shared = tr.Map(lambda t: t % 3, tr.tokens)
    sel = tr.Select(shared, shared, tr.Comparison.EQ)
    prog = tr.SequenceMap(lambda a, b: a * 10 + b, tr.SelectorWidth(sel), shared)
    conv = rasp.from_tracr(prog)
    width, m = conv.children
    assert width.selector.keys is width.selector.queries is m
    # one attnsim node per tracr node: the same count of distinct expressions
    assert len(_walk(conv)) == 5  # SequenceMap, SelectorWidth, Select, Map, tokens
    xs = [4, 1, 7, 2]
    assert rasp.evaluate(conv, xs) == tr.evaluate(prog, xs)


def test_every_node_kind_converts_to_its_counterpart():
    tr = _tracr()
    a = tr.numerical(tr.Aggregate(tr.Select(tr.indices, tr.indices, tr.Comparison.LEQ), tr.tokens))
    lin = tr.numerical(tr.LinearSequenceMap(a, tr.numerical(tr.indices), 2, -1))
    const = tr.ConstantSOp([1, 0, 1])
    full = tr.Full(1)
    csel = tr.ConstantSelector([[True, False, False], [True, True, False], [False, True, True]])
    sel = tr.SelectorOr(
        tr.SelectorAnd(csel, tr.Select(const, full, tr.Comparison.EQ)),
        tr.SelectorNot(tr.Select(tr.tokens, tr.length, lambda k, q: k > q)),
    )
    one = tr.SelectorAnd(csel, tr.Select(tr.indices, tr.indices, tr.Comparison.EQ))
    cat = tr.Aggregate(one, tr.Map(lambda t: t > 1, tr.tokens), default=False)
    prog = tr.SequenceMap(
        lambda u, v: (u, v), lin, tr.SequenceMap(lambda u, v: (u, v), cat, tr.SelectorWidth(sel))
    )
    conv = rasp.from_tracr(prog)
    kinds = {type(e).__name__ for e in _walk(conv)}
    assert kinds >= {
        "Aggregate", "LinearSequenceMap", "ConstantSOp", "Full", "ConstantSelector", "SelectorOr",
        "SelectorAnd", "SelectorNot", "Select", "Map", "SequenceMap", "SelectorWidth",
        "TokensType", "IndicesType", "LengthType",
    }  # fmt: skip
    lin_c = conv.children[0]
    assert (lin_c.fst_fac, lin_c.snd_fac) == (2, -1) and rasp.is_numerical(lin_c)
    leq = lin_c.fst.selector
    assert leq.predicate is rasp.Comparison.LEQ  # tracr's Comparison as attnsim's
    for xs in ([1, 2, 3], [3, 3, 0], [0, 2, 1]):
        assert rasp.evaluate(conv, xs) == tr.evaluate(prog, xs)


def test_tracr_simplified_selectors_and_fused_maps_convert():
    tr = _tracr()
    # tracr's & on two Selects with the same keys and queries builds one Select with a
    # combined predicate; a Full query is baked into the predicate; Map fuses even named maps
    both = tr.Select(tr.tokens, tr.indices, tr.Comparison.LEQ) & tr.Select(
        tr.tokens, tr.Full(2), tr.Comparison.NEQ
    )
    inner = tr.Map(lambda t: t + 1, tr.tokens).named("inner")
    fused = tr.Map(lambda t: t * 3, inner)
    prog = tr.SequenceMap(lambda w, f: w + f, tr.SelectorWidth(both), fused)
    conv = rasp.from_tracr(prog)
    assert type(conv.children[0].selector).__name__ == "Select"
    assert conv.children[1].inner is rasp.tokens  # fused, as in tracr
    for xs in ([0, 1, 2, 3], [3, 2, 2, 0]):
        assert rasp.evaluate(conv, xs) == tr.evaluate(prog, xs)
    model = compile_program(conv, vocab=[0, 1, 2, 3], max_seq_len=4)
    assert model.run([3, 2, 2, 0]) == tr.evaluate(prog, [3, 2, 2, 0])


def test_deep_programs_convert_without_recursion():
    tr = _tracr()
    x = tr.tokens
    for _ in range(3000):
        x = tr.Map(lambda t: t + 1, x, simplify=False)
    conv = rasp.from_tracr(x)
    assert rasp.evaluate(conv, [0, 5]) == [3000, 3005]


def test_unknown_tracr_classes_are_refused_by_name():
    tr = _tracr()

    class Doubled(tr.SOp):  # a user's own node kind: tracr's evaluator cannot run it either
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        @property
        def children(self):
            return [self.inner]

    with pytest.raises(
        TypeError,
        match=r"does not know the tracr class .*Doubled \(child 1 of a tracr SequenceMap\)",
    ):
        rasp.from_tracr(tr.SequenceMap(lambda a, b: a + b, tr.tokens, Doubled(tr.tokens)))


def test_a_selector_with_an_encoding_is_refused():
    tr = _tracr()
    sel = tr.numerical(tr.Select(tr.tokens, tr.tokens, tr.Comparison.EQ))
    with pytest.raises(TypeError, match=r"a selector \(Select\) has no encoding"):
        rasp.from_tracr(tr.SelectorWidth(sel))
