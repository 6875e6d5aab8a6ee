"""The public entry points the issues name, checked against numpy and the deep paths."""

import subprocess
import sys

import numpy as np
import pytest

import attnsim
from attnsim import rasp


def test_named_entry_points_are_the_deep_ones():
    from attnsim.compiler import pipeline
    from attnsim.matrix import programs
    from attnsim.simulator import universal

    assert attnsim.compile_program is pipeline.compile_program
    from attnsim.model import compress

    assert attnsim.compress is compress.compress
    assert attnsim.simulator.build is universal.build
    for name in ("transpose", "matmul", "softmax", "inverse", "relu", "maxmin", "det"):
        assert getattr(attnsim.matrix, name) is getattr(programs, name)


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'compile_programme'"):
        attnsim.compile_programme  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'buidl'"):
        attnsim.simulator.buidl  # noqa: B018


def test_import_attnsim_does_not_import_torch():
    code = "import sys, attnsim; attnsim.rasp; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_matrix_builders_are_programs():
    m = np.arange(6.0).reshape(2, 3)
    got = rasp.evaluate(attnsim.matrix.transpose(2, 3), m.flatten().tolist())
    np.testing.assert_array_equal(np.asarray(got[:6]).reshape(3, 2), m.T)


RUNNERS = [
    ("transpose", (np.arange(6.0).reshape(2, 3),), lambda m: m.T),
    (
        "matmul",
        (np.arange(6.0).reshape(2, 3) - 2, np.arange(3.0).reshape(3, 1) + 0.5),
        lambda a, b: a @ b,
    ),
    (
        "softmax",
        (np.array([[0.5, -1.0, 2.0], [0.0, 0.0, 1.0]]),),
        lambda s: np.exp(s) / np.exp(s).sum(1, keepdims=True),
    ),
    ("relu", (np.array([-1.5, 0.0, 2.5]),), lambda x: np.maximum(x, 0)),
    ("maxmin", (np.array([1.0, 3.0, -2.0, -5.0]),), lambda x: np.array([3.0, 1.0, -2.0, -5.0])),
    ("bias_add", (np.ones((2, 2)), np.array([1.0, -2.0])), lambda m, b: m + b),
    ("det", (np.array([[2.0, 1.0], [1.0, 3.0]]),), np.linalg.det),
    ("inverse", (np.array([[2.0, 1.0], [1.0, 3.0]]),), np.linalg.inv),
]


@pytest.mark.parametrize("name,args,oracle", RUNNERS, ids=[r[0] for r in RUNNERS])
@pytest.mark.parametrize("backend", ["interpreter", "compiled"])
def test_runners_match_numpy_on_both_backends(name, args, oracle, backend):
    got = getattr(attnsim.matrix.apply, name)(*args, backend=backend)
    np.testing.assert_allclose(got, oracle(*args), rtol=1e-12, atol=1e-12)


def test_compiled_backend_runs_the_compiled_model():
    from attnsim.matrix import apply

    m = np.arange(6.0).reshape(2, 3)
    apply.transpose(m, backend="compiled")
    program = apply._program("transpose", 2, 3)
    model = apply.compiled_model(program, 6)
    assert type(model).__name__ == "CompiledModel"
    assert model.config.n_layers >= 1


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match=r"backend must be one of \('interpreter', 'compiled'\)"):
        attnsim.matrix.apply.transpose([[1.0]], backend="gpu")
