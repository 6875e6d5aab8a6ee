"""Export to ONNX: ONNX Runtime's outputs against the torch model's, program by program.

The oracle is the compiled torch model itself (``model.run``, ``model.forward``): categorical
outputs must be equal, numerical ones within 1e-9 relative in float64. Needs the optional
``onnx`` extra (``pip install 'attnsim[onnx]'``); without it the whole file is skipped.
"""

import sys

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from attnsim import rasp  # noqa: E402
from attnsim.compiler import compile_program  # noqa: E402
from attnsim.model import export, onnx_export  # noqa: E402
from attnsim.rasp import expr as E  # noqa: E402
from attnsim.rasp import library  # noqa: E402
from attnsim.simulator import spec, universal  # noqa: E402

ROUND_TRIP = [
    "make_hist",
    "make_sort_unique",
    "make_reverse",
    "make_frac_prevs",  # numerical output
    "make_length",
    "make_pair_balance",  # numerical output
]


def _compile(name: str, attention: str, **kw):
    entry = library.PROGRAMS[name]
    return compile_program(
        entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len, attention=attention, **kw
    )


def _session(path):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _resid(session, model, xs) -> torch.Tensor:
    ids, vals = model.encode(xs)
    feed = {"token_ids": ids.numpy(), "token_values": vals.to(model.model.dtype).numpy()}
    return torch.from_numpy(session.run(["resid"], feed)[0])


def _assert_same(got, want, kind: str, rel: float = 1e-9):
    """Categorical outputs equal; numerical ones within ``rel`` of the largest |value|."""
    if kind == "cat":
        assert got == want
    else:
        g, w = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
        assert g.shape == w.shape
        assert np.abs(g - w).max() <= rel * max(1.0, np.abs(w).max()), (got, want)


@pytest.mark.parametrize("attention", ["hard", "softmax"])
@pytest.mark.parametrize("name", ROUND_TRIP)
def test_round_trip_matches_the_torch_model(name, attention, tmp_path):
    entry = library.PROGRAMS[name]
    model = _compile(name, attention)
    path = export.to_onnx(model, tmp_path / f"{name}.onnx")
    # a path runs as is; a session runs many batches
    xs = [list(entry.example), list(entry.example)[::-1]]
    _assert_same(export.run_onnx(path, model, xs), model.run(xs), model.output.kind)
    session = _session(path)
    one = list(entry.example)
    _assert_same(export.run_onnx(session, model, one), model.run(one), model.output.kind)
    # the batch and position axes are dynamic: other sizes through the same graph
    short = [one[:2], one[1:3], one[:1] + one[:1]]
    _assert_same(export.run_onnx(session, model, short), model.run(short), model.output.kind)
    # the whole residual stream agrees, not only the decoded output
    ids, vals = model.encode(xs)
    model.executor = "dense"  # the export is the dense computation, the model's definition
    got, want = _resid(session, model, xs), model.forward(ids, vals)
    assert (got - want).abs().max() <= 1e-12 * want.abs().max()


@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_causal_model_at_every_length(attention, tmp_path):
    entry = library.PROGRAMS["make_frac_prevs"]
    model = compile_program(
        entry.factory(), vocab=entry.vocab, max_seq_len=6, attention=attention, causal=True
    )
    session = _session(export.to_onnx(model, tmp_path / "causal.onnx"))
    rng = np.random.default_rng(0)
    for n in range(1, 7):
        xs = [[str(t) for t in rng.choice(list(entry.vocab), n)] for _ in range(3)]
        _assert_same(export.run_onnx(session, model, xs), model.run(xs), "num")


NATIVE_CASES = [
    ("exp", (-3.0, 3.0)),
    ("log", (0.2, 4.0)),
    ("sqrt", (0.0, 4.0)),
    ("reciprocal", (0.2, 4.0)),
    ("rsqrt", (0.2, 4.0)),
    ("gelu", (-6.0, 6.0)),
    ("gelu_tanh", (-6.0, 6.0)),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("kind, value_range", NATIVE_CASES)
def test_native_units(kind, value_range, dtype, tmp_path):
    x = rasp.numerical(rasp.tokens, value_range=value_range)
    model = compile_program(getattr(rasp, kind)(x), vocab=None, max_seq_len=6, dtype=dtype)
    assert model.config.d_native == {kind: 1}  # a declared elementwise unit, not ReLUs
    path = export.to_onnx(model, tmp_path / f"{kind}.onnx")
    lo, hi = value_range
    xs = np.linspace(lo, hi, 12).reshape(2, 6).tolist()
    # float32 keeps a few ulps of rounding (ONNX Runtime's kernels are not torch's)
    rel = 1e-9 if dtype == torch.float64 else 1e-6
    _assert_same(export.run_onnx(path, model, xs), model.run(xs), "num", rel)
    ops = {node.op_type for node in onnx.load(str(path)).graph.node}
    if kind == "gelu":
        # ONNX Runtime's CPU provider has no float64 Erf: float64 computes erf without it
        assert ("Erf" in ops) == (dtype == torch.float32)


def test_numerical_tokens_and_bilinear_units(tmp_path):
    affine = compile_program(E.numerical(E.tokens) * 2 + 1, vocab=None, max_seq_len=4)
    assert affine.numerical_tokens
    xs = [[0.5, -1.25, 3.0, 1e6], [0.0, 2.0, -7.5, 1e-3]]
    path = export.to_onnx(affine, tmp_path / "affine.onnx")
    _assert_same(export.run_onnx(path, affine, xs), affine.run(xs), "num")
    x = E.numerical(E.Map(lambda t: t, E.tokens))
    square = compile_program(E.numerical(x * x), vocab=[1, 2, 3], max_seq_len=3)
    path = export.to_onnx(square, tmp_path / "square.onnx")
    ys = [[1, 2, 3], [3, 3, 1]]
    assert export.run_onnx(path, square, ys) == square.run(ys) == [[1, 4, 9], [9, 9, 1]]


@pytest.mark.parametrize("layout", ["scalar", "vector"])
def test_universal_simulator(tmp_path, layout):
    U = universal.build(2, 2, 1, layout=layout)  # native exp and 1/x units, fixed length
    model = U.model
    path = export.to_onnx(model, tmp_path / "U.onnx", batch=2)
    session = _session(path)
    (ids_in, values_in) = session.get_inputs()
    assert ids_in.shape == ["batch", model.config.n_ctx]  # pos is fixed
    width = [model.config.token_width] if layout == "vector" else []
    assert values_in.shape == ["batch", model.config.n_ctx, *width]
    X = torch.tensor([[0.5, -1.0], [1.5, 0.25]], dtype=torch.float64)
    seqs = np.stack(
        [
            U.encode(spec.random_attention(1, 2, seed=3), X),
            U.encode(spec.random_attention(1, 2, seed=4), X[:1]),
            U.encode(spec.random_attention(1, 1, seed=5), X[:, :1]),
        ]
    )
    _assert_same(export.run_onnx(session, model, seqs), model.run(seqs, check=False), "num")
    # one row at a time, through the dynamic batch axis
    _assert_same(export.run_onnx(session, model, seqs[0]), model.run(seqs[0], check=False), "num")


def test_graph_interface(tmp_path):
    model = _compile("make_hist", "hard")
    path = export.to_onnx(model, tmp_path / "sub" / "hist.onnx")  # creates the folder
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    assert [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")] == [
        onnx_export.OPSET
    ]
    session = _session(path)
    # both inputs are declared even though a categorical model ignores token_values, whose
    # type is the model's dtype (float32 for make_hist with the default dtype="auto")
    values = {torch.float64: "tensor(double)", torch.float32: "tensor(float)"}[model.model.dtype]
    assert [(i.name, i.shape, i.type) for i in session.get_inputs()] == [
        ("token_ids", ["batch", "pos"], "tensor(int64)"),
        ("token_values", ["batch", "pos"], values),
    ]
    (out,) = session.get_outputs()
    assert (out.name, out.shape) == ("resid", ["batch", "pos", model.config.d_model])
    # the model itself is left as it was, and exporting twice writes the same graph
    again = export.to_onnx(model, tmp_path / "again.onnx", batch=3)
    assert onnx.load(str(again)).graph.node == proto.graph.node


def test_static_transformer_is_the_same_computation():
    for name in ("make_sort_unique", "make_pair_balance"):
        model = _compile(name, "hard", causal=True)
        static = onnx_export.StaticTransformer(model.model)
        ids, vals = model.encode([library.PROGRAMS[name].example])
        model.executor = "dense"  # the dense forward is what the static graph computes
        want = model.forward(ids, vals)
        assert (static(ids, vals) - want).abs().max() <= 1e-12 * want.abs().max()
    with pytest.raises(TypeError, match="expected an attnsim Transformer"):
        onnx_export.StaticTransformer(torch.nn.Linear(2, 2))


def test_erf64_matches_torch():
    z = torch.cat(
        [
            torch.linspace(-30, 30, 200_001, dtype=torch.float64),
            torch.tensor([0.0, 1e-310, 0.46875, 4.0, float("inf"), -float("inf")]),
        ]
    )
    got, want = onnx_export.erf64(z), torch.erf(z)
    assert torch.all((got - want).abs() <= 4 * torch.finfo(torch.float64).eps * want.abs())
    assert torch.isnan(onnx_export.erf64(torch.tensor([float("nan")], dtype=torch.float64))).all()


def test_errors_say_what_to_do(tmp_path, monkeypatch):
    model = _compile("make_hist", "hard")
    with pytest.raises(TypeError, match="expected a CompiledModel, got str"):
        export.to_onnx("model", tmp_path / "m.onnx")
    with pytest.raises(ValueError, match="batch must be a positive integer, got 0"):
        export.to_onnx(model, tmp_path / "m.onnx", batch=0)
    path = export.to_onnx(model, tmp_path / "m.onnx")
    other = compile_program(library.make_hist(), vocab=model.vocab, max_seq_len=3)
    assert other.config.d_model != model.config.d_model
    with pytest.raises(ValueError, match="run the file that to_onnx wrote for this model"):
        export.run_onnx(path, other, ["a", "b"])
    with pytest.raises(ValueError, match="not in the vocabulary"):  # model.encode's checks
        export.run_onnx(path, model, ["a", "z"])
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ImportError, match=r"pip install 'attnsim\[onnx\]'"):
        export.to_onnx(model, tmp_path / "m.onnx")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ImportError, match=r"ONNX Runtime: pip install 'attnsim\[onnx\]'"):
        export.run_onnx(path, model, ["a", "b"])
