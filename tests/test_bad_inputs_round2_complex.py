"""Complex input is refused, never dropped to its real part.

``np.asarray(x, dtype=float64)`` of a complex array keeps the real parts (with a warning at
most), so ``attnsim.matrix.apply.matmul`` of ``[[1 + 2j]]`` used to answer for ``[[1]]`` and
a ``--module`` state_dict of complex weights ran as its real part. Every entry point now
refuses them with a TypeError (a ValueError for a file's content, which the CLI reports as
the user's error), whatever carries them: a numpy array, Python complex numbers in lists, a
torch tensor. Real input keeps its answers (oracle: numpy and the torch module).
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from attnsim.cli import main
from attnsim.matrix import apply, programs
from attnsim.simulator import adapters, reference, universal
from attnsim.simulator import spec as S

F64 = torch.float64
MESSAGE = r"holds complex numbers \(such as {}\); attnsim computes over the real numbers"


def _forms(z: complex, shape: tuple[int, ...]) -> dict:
    """The same complex array as numpy, nested Python lists and a torch tensor."""
    arr = np.full(shape, 1.0, dtype=complex)
    arr.reshape(-1)[-1] = z
    return {"numpy": arr, "lists": arr.tolist(), "torch": torch.tensor(arr)}


# runner -> (a call with one complex argument in place, the argument's name)
RUNNERS = {
    "transpose": (lambda z: apply.transpose(z), "m", (2, 2)),
    "matmul a": (lambda z: apply.matmul(z, [[1.0], [1.0]]), "a", (1, 2)),
    "matmul b": (lambda z: apply.matmul([[1.0, 1.0]], z), "b", (2, 1)),
    "softmax": (lambda z: apply.softmax(z), "s", (1, 2)),
    "relu": (lambda z: apply.relu(z), "x", (3,)),
    "maxmin": (lambda z: apply.maxmin(z), "x", (2,)),
    "bias_add m": (lambda z: apply.bias_add(z, [1.0, 1.0]), "m", (1, 2)),
    "bias_add bias": (lambda z: apply.bias_add([[1.0, 1.0]], z), "bias", (2,)),
    "det": (lambda z: apply.det(z), "m", (2, 2)),
    "inverse": (lambda z: apply.inverse(z), "m", (2, 2)),
    "run": (lambda z: apply.run(programs.scale(2.0), z), "seqs", (2,)),
}


@pytest.mark.parametrize("form", ["numpy", "lists", "torch"])
@pytest.mark.parametrize("name", list(RUNNERS))
def test_matrix_runners_refuse_complex_input(name, form):
    call, what, shape = RUNNERS[name]
    z = _forms(3 - 2j, shape)[form]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused before any conversion warns
        with pytest.raises(TypeError, match="^" + what + " " + MESSAGE.format(r"\(3-2j\)")):
            call(z)


@pytest.mark.parametrize("name", ["matmul a", "relu", "det"])
def test_a_complex_dtype_is_refused_even_with_zero_imaginary_parts(name):
    call, what, shape = RUNNERS[name]
    z = np.ones(shape, dtype=np.complex64)
    with pytest.raises(TypeError, match=f"^{what} holds complex numbers .*x.real and x.imag"):
        call(z)


def test_inverse_refuses_a_complex_rtol():
    with pytest.raises(TypeError, match="^rtol " + MESSAGE.format("1e-08j")):
        apply.inverse([[2.0]], rtol=1e-8j)


def test_real_input_keeps_its_answers():
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    b = [[0.5], [-1.0]]
    assert np.allclose(apply.matmul(a, b), a @ np.array(b))
    assert np.allclose(apply.matmul(torch.tensor(a), b), a @ np.array(b))
    assert np.isclose(apply.det(a), np.linalg.det(a))
    assert np.allclose(apply.relu([-1, 0.5]), [0.0, 0.5])
    assert np.allclose(apply.inverse(a), np.linalg.inv(a))


# -- the simulator: X, module weights, files ------------------------------------------------------


@pytest.fixture(scope="module")
def U():
    return universal.build(2, 2, 1)


def _mha() -> nn.MultiheadAttention:
    torch.manual_seed(0)
    return nn.MultiheadAttention(2, 1, dtype=F64).eval()


@pytest.mark.parametrize("form", ["numpy", "lists", "torch"])
def test_simulate_refuses_a_complex_x(U, form):
    X = _forms(0.5 + 1j, (2, 2))[form]
    with pytest.raises(TypeError, match="^X " + MESSAGE.format(r"\(0\.5\+1j\)")):
        U.simulate(_mha(), X)
    spec = adapters.from_torch(_mha())
    with pytest.raises(TypeError, match="must hold real numbers, got dtype torch.complex128"):
        reference.reference(spec, X)


def test_a_module_with_complex_weights_is_refused(U):
    mha = _mha()
    with torch.no_grad():
        mha.out_proj.bias = nn.Parameter(mha.out_proj.bias.to(torch.complex128) + 2j)
    with pytest.raises(TypeError, match=r"^the module's out_proj.bias holds complex numbers"):
        adapters.from_torch(mha)
    X = torch.randn(2, 2, dtype=F64, generator=torch.Generator().manual_seed(1))
    with pytest.raises(TypeError, match=r"out_proj.bias holds complex numbers"):
        U.simulate(mha, X)
    with pytest.raises(TypeError, match="must hold real numbers"):
        S.AttentionSpec(*[torch.ones(1, 2, 1, dtype=torch.complex128)] * 3,
                        torch.ones(1, 1, 2))  # fmt: skip


def test_real_weights_still_match_the_torch_module(U):
    mha = _mha()
    X = torch.randn(2, 2, dtype=F64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = mha(X, X, X, need_weights=False)[0]
    assert torch.allclose(U.simulate(mha, X), want, atol=1e-9, rtol=0)


def _complex_state(path, key: str = "in_proj_weight"):
    state = _mha().state_dict()
    state[key] = state[key].to(torch.complex128) * (1 + 1j)
    torch.save(state, path)
    return path


def test_read_layer_refuses_a_complex_state_dict(tmp_path):
    path = _complex_state(tmp_path / "mha.pt")
    with pytest.raises(
        ValueError,
        match=r"mha\.pt: in_proj_weight holds complex numbers \(torch.complex128\); the "
        "weights of a layer U simulates are real.*save real weights",
    ):
        adapters.read_layer(path)
    module = _mha()
    module.in_proj_weight = nn.Parameter(module.in_proj_weight.to(torch.complex128))
    torch.save(module, tmp_path / "whole.pt")
    with pytest.raises(ValueError, match=r"whole\.pt: in_proj_weight holds complex numbers"):
        adapters.read_layer(tmp_path / "whole.pt")


def test_the_cli_refuses_a_complex_state_dict(tmp_path, capsys):
    path = _complex_state(tmp_path / "mha.pt", "out_proj.bias")
    status = main(["simulate", "--max-n", "2", "--module", str(path), "--heads", "1"])
    out, err = capsys.readouterr()
    assert status != 0 and "Traceback" not in out + err and "internal error" not in err
    assert re.search(r"--module .*mha\.pt: out_proj\.bias holds complex numbers", err), err
