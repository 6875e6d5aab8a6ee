"""The fingerprint that ties an exported ONNX file to its model.

The oracle: a file exported from model A and run with model A gives ``A.run``; run with any
other model (different weights, same shapes) it is refused, where before it silently
returned A's outputs decoded with the other model's spec.
"""

import copy

import pytest
import torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from attnsim.compiler import compile_program  # noqa: E402
from attnsim.model import onnx_export  # noqa: E402
from attnsim.rasp import library  # noqa: E402


@pytest.fixture(scope="module")
def hist():
    entry = library.PROGRAMS["make_hist"]
    return compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)


def test_the_file_records_the_model_fingerprint(hist, tmp_path):
    path = onnx_export.to_onnx(hist, tmp_path / "h.onnx")
    props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    assert props[onnx_export.FINGERPRINT_KEY] == onnx_export.fingerprint(hist)
    xs = ["a", "b", "a"]
    assert onnx_export.run_onnx(path, hist, xs) == hist.run(xs)


def test_another_model_with_the_same_shapes_is_refused(hist, tmp_path):
    path = onnx_export.to_onnx(hist, tmp_path / "h.onnx")
    other = copy.deepcopy(hist)
    with torch.no_grad():
        other.model.W_pos.add_(0.5)  # same shapes, different function
    assert onnx_export.fingerprint(other) != onnx_export.fingerprint(hist)
    with pytest.raises(ValueError, match=r"was exported from another model \(fingerprint "):
        onnx_export.run_onnx(path, other, ["a", "b"])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with pytest.raises(ValueError, match="run the file that to_onnx wrote for this model"):
        onnx_export.run_onnx(session, other, ["a", "b"])


def test_an_edit_in_place_changes_the_fingerprint(hist):
    model = copy.deepcopy(hist)
    before = onnx_export.fingerprint(model)
    assert onnx_export.fingerprint(model) == before  # cached, unchanged
    with torch.no_grad():
        model.model.W_E[1, 0] += 1.0
    assert onnx_export.fingerprint(model) != before


def test_a_file_without_a_fingerprint_needs_check_false(hist, tmp_path):
    path = onnx_export.to_onnx(hist, tmp_path / "h.onnx")
    proto = onnx.load(str(path))
    del proto.metadata_props[:]
    onnx.save(proto, str(tmp_path / "bare.onnx"))
    with pytest.raises(ValueError, match="records no attnsim fingerprint.*check=False"):
        onnx_export.run_onnx(tmp_path / "bare.onnx", hist, ["a", "b"])
    xs = ["b", "a", "a"]
    assert onnx_export.run_onnx(tmp_path / "bare.onnx", hist, xs, check=False) == hist.run(xs)
    with pytest.raises(TypeError, match="expected a CompiledModel, got str"):
        onnx_export.run_onnx(path, "hist", xs)
