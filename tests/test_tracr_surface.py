"""attnsim's tracr surface against tracr's: every public name of ``tracr.rasp.rasp`` and of
tracr's ``lib``, with tracr's meaning (checked against tracr-pypi when it is installed)."""

import enum
import inspect
import types

import pytest

from attnsim import rasp as attnsim_rasp
from attnsim.rasp import library
from attnsim.tracr.compiler import lib
from attnsim.tracr.rasp import rasp

# dir(tracr.rasp.rasp) of tracr-pypi 1.0.0, public names (67)
TRACR_RASP_NAMES = sorted(
    """Aggregate Annotator Any Callable Comparison ConstantSOp ConstantSelector
    DEFAULT_ANNOTATORS DefaultRASPEvaluator Dict Encoding Full Generic IndicesType LengthType
    LinearSequenceMap List Map Mapping NumericValue Optional Predicate Protocol RASPEvaluator
    RASPExpr RASPExprT SOp SOpT Select Selector SelectorAnd SelectorNot SelectorOr SelectorValue
    SelectorWidth Sequence SequenceMap T TokensType TypeVar Union VT Value abc annotate
    categorical collections copy default_encoding default_name enum evaluate functools
    get_encoding indices is_categorical is_numerical itertools length logging np numerical
    selector_and selector_not selector_or sop_not tokens""".split()
)
# the names tracr's module imports rather than defines
IMPORTED = set(
    """Any Callable Dict Generic List Mapping Optional Protocol Sequence TypeVar Union abc
    collections copy enum functools itertools logging np""".split()
)
TRACR_LIB_NAMES = sorted(
    """detect_pattern length make_count make_count_less_freq make_frac_prevs make_hist
    make_length make_nary_sequencemap make_pair_balance make_reverse make_shuffle_dyck
    make_shuffle_dyck2 make_sort make_sort_freq make_sort_unique shift_by""".split()
)
COMPARISONS = {
    "EQ": "==",
    "LT": "<",
    "LEQ": "<=",
    "GT": ">",
    "GEQ": ">=",
    "NEQ": "!=",
    "TRUE": "True",
    "FALSE": "False",
}


def _kind(obj):
    if isinstance(obj, types.ModuleType):
        return "module"
    if isinstance(obj, type) and issubclass(obj, enum.Enum):
        return "enum"
    if inspect.isclass(obj):
        return "class"
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        return "function"
    if isinstance(obj, dict):
        return "dict"
    return "other"


def test_the_recorded_list_has_tracrs_67_names():
    assert len(TRACR_RASP_NAMES) == 67 and len(set(TRACR_RASP_NAMES)) == 67


def test_every_tracr_rasp_name_is_in_the_compat_module():
    missing = [n for n in TRACR_RASP_NAMES if not hasattr(rasp, n)]
    assert missing == []


def test_tracrs_own_names_are_in_attnsim_rasp_too():
    own = [n for n in TRACR_RASP_NAMES if n not in IMPORTED and n != "evaluate"]
    assert [n for n in own if not hasattr(attnsim_rasp, n)] == []
    for n in own:  # the same objects: a program built either way is one program
        assert getattr(rasp, n) is getattr(attnsim_rasp, n), n


def test_recorded_list_equals_tracr_pypi():
    tracr_rasp = pytest.importorskip("tracr.rasp.rasp")
    assert sorted(n for n in dir(tracr_rasp) if not n.startswith("_")) == TRACR_RASP_NAMES


def test_kinds_equal_tracr_pypi():
    tracr_rasp = pytest.importorskip("tracr.rasp.rasp")
    for n in TRACR_RASP_NAMES:
        if n in IMPORTED:
            continue
        ours, theirs = _kind(getattr(rasp, n)), _kind(getattr(tracr_rasp, n))
        if {ours, theirs} <= {"function", "other"}:  # evaluate: a bound method in both
            continue
        assert ours == theirs, (n, ours, theirs)
    assert set(rasp.DEFAULT_ANNOTATORS) == set(tracr_rasp.DEFAULT_ANNOTATORS)
    assert {m.name: m.value for m in rasp.Comparison} == {
        m.name: m.value for m in tracr_rasp.Comparison
    }
    assert {m.name: m.value for m in rasp.Encoding} == {
        m.name: m.value for m in tracr_rasp.Encoding
    }


def test_comparison_members_values_and_calls():
    assert {m.name: m.value for m in rasp.Comparison} == COMPARISONS
    calls = [(c, c(1, 2), c(2, 2)) for c in rasp.Comparison]
    assert [(c.name, a, b) for c, a, b in calls] == [
        ("EQ", False, True),
        ("LT", True, False),
        ("LEQ", True, True),
        ("GT", False, False),
        ("GEQ", False, True),
        ("NEQ", True, False),
        ("TRUE", True, True),
        ("FALSE", False, False),
    ]
    for c in rasp.Comparison:
        with pytest.raises(ValueError, match=r"^key is None!"):
            c(None, 1)
        with pytest.raises(ValueError, match=r"^query is None!"):
            c(1, None)


def test_every_tracr_lib_name_is_in_the_compat_lib():
    assert [n for n in TRACR_LIB_NAMES if not hasattr(lib, n)] == []
    assert lib.make_hist is library.make_hist  # one library, two import paths
    assert isinstance(lib.length, rasp.SOp) and lib.length([1, 2, 3]) == [3, 3, 3]


def test_lib_names_equal_tracr_pypi():
    tracr_lib = pytest.importorskip("tracr.compiler.lib")
    theirs = {
        n
        for n, v in vars(tracr_lib).items()
        if inspect.isfunction(v) and v.__module__ == "tracr.compiler.lib" and n[0] != "_"
    }
    assert isinstance(tracr_lib.length, tracr_lib.rasp.SOp)
    assert sorted(theirs | {"length"}) == TRACR_LIB_NAMES


def test_default_annotations_name_and_encoding():
    m = rasp.Map(lambda x: x + 1, rasp.tokens)
    assert m.annotations["name"] == "map" == m.name == rasp.default_name(m)
    assert m.annotations["encoding"] is rasp.Encoding.CATEGORICAL
    assert dict(m.annotations) == {}  # defaults are read, not stored
    assert rasp.numerical(m).annotations["encoding"] is rasp.Encoding.NUMERICAL
    assert rasp.default_name(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)) == "select"
    assert [rasp.default_name(p) for p in (rasp.tokens, rasp.indices, rasp.length)] == [
        "tokens",
        "indices",
        "length",
    ]
    with pytest.raises(TypeError, match="only an S-op has an encoding"):
        rasp.default_encoding(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ))
    with pytest.raises(KeyError, match="no annotation 'colour'"):
        m.annotations["colour"]  # noqa: B018


def test_a_custom_default_annotator_is_read(monkeypatch):
    monkeypatch.setitem(rasp.DEFAULT_ANNOTATORS, "colour", lambda expr: "blue")
    m = rasp.Map(lambda x: x, rasp.tokens)
    assert m.annotations["colour"] == "blue"
    assert m.annotated(colour="red").annotations["colour"] == "red"


def test_naming_copies_and_ids():
    m = rasp.Map(lambda x: x, rasp.tokens)
    named = m.named("double")
    assert named is not m and named.name == named.label == "double"
    assert named.unique_id != m.unique_id and m.unique_id == m.uid
    copy = m.copy()
    assert copy is not m and copy.unique_id != m.unique_id and copy.f is m.f
    assert rasp.annotate(m, foo=1).annotations["foo"] == 1
    assert m.label == f"map_{m.unique_id}"  # an unnamed label is unique (tracr: map_<id>)


def test_map_simplify_combines_unnamed_maps():
    inner = rasp.Map(lambda x: x + 1, rasp.tokens)
    outer = rasp.Map(lambda x: x * 10, inner)
    kept = rasp.Map(lambda x: x * 10, inner, simplify=False)
    assert outer.inner is rasp.tokens and kept.inner is inner
    assert outer([1, 2]) == kept([1, 2]) == [20, 30]


def test_generic_subscripts_and_type_names():
    assert rasp.Aggregate[int] is rasp.Aggregate and rasp.ConstantSOp[str] is rasp.ConstantSOp
    assert rasp.Value.__args__ == (type(None), int, float, str, bool)
    assert rasp.NumericValue.__args__ == (int, float)
    assert rasp.VT.__bound__ is rasp.Value


def test_expressions_are_callable_but_not_functions():
    assert rasp.indices("abc") == [0, 1, 2]
    with pytest.raises(TypeError, match="Map expects a callable, got TokensType"):
        rasp.Map(rasp.tokens, rasp.tokens)
    with pytest.raises(TypeError, match="Select expects a Comparison or a function"):
        rasp.Select(rasp.tokens, rasp.tokens, rasp.indices)


def test_evaluators():
    assert issubclass(rasp.DefaultRASPEvaluator, rasp.RASPEvaluator)
    with pytest.raises(TypeError):
        rasp.RASPEvaluator()  # abstract, as in tracr
    pairs = [(1, "a"), (2, "b")]
    assert rasp.evaluate(rasp.tokens, pairs) == pairs  # one sequence of tuples, not a batch
    assert rasp.DefaultRASPEvaluator().evaluate(rasp.length, "ab") == [2, 2]


def test_tracrs_keyword_arguments():
    sm = rasp.SequenceMap(f=lambda x, y: x * y, fst=rasp.tokens, snd=rasp.indices)
    assert sm([3, 3]) == [0, 3] and (sm.fst, sm.snd) == (rasp.tokens, rasp.indices)
    m = rasp.Map(f=lambda x: -x, inner=rasp.tokens, simplify=False)
    sel = rasp.Select(keys=rasp.tokens, queries=rasp.tokens, predicate=rasp.Comparison.EQ)
    agg = rasp.Aggregate(selector=sel, sop=m, default=None)
    assert agg([1, 2]) == [-1, -2]
    assert rasp.SelectorWidth(selector=sel)([1, 1]) == [2, 2]
    assert rasp.LinearSequenceMap(fst=rasp.tokens, snd=rasp.indices, fst_fac=1, snd_fac=2)(
        [1, 1]
    ) == [1, 3]
    with pytest.raises(TypeError, match="either by position or as fst= snd="):
        rasp.SequenceMap(lambda x, y: x, rasp.tokens, snd=rasp.indices)
