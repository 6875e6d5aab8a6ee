"""ir.blocks: every block's numpy ``apply`` against the equation it stands for (no torch)."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from attnsim.ir import blocks as B


def stream(n: int, **dirs) -> dict[str, np.ndarray]:
    """BOS at position 0, then n positions; extra directions given as lists (BOS gets 0)."""
    s = {B.BOS: np.array([1.0] + [0.0] * n), B.NOTBOS: np.array([0.0] + [1.0] * n)}
    for d, vals in dirs.items():
        s[d] = np.array([0.0, *vals], dtype=np.float64)
    return s


def test_ir_imports_no_torch():
    code = (
        "import sys; import attnsim.ir.blocks, attnsim.ir.lookup, attnsim.ir.discretise, "
        "attnsim.ir.piecewise, attnsim.ir.attention, attnsim.ir.numeric; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_linear_form_and_read():
    s = stream(3, x=[1, 2, 3], y=[0, 1, 0])
    form = B.linear_form({"x": 2.0, "y": -1.0, "z": 0.0, "missing": 5.0})
    assert form == (("missing", 5.0), ("x", 2.0), ("y", -1.0))
    np.testing.assert_array_equal(B.read(s, form), [0.0, 2.0, 3.0, 6.0])


@pytest.mark.parametrize(
    "inputs, outputs, expected",
    [
        ((("x", 1.0),), (("y", 1.0),), {"y": [0, 0, 2, 0]}),
        ((("x", -1.0),), (("y", 3.0), ("z", -1.0)), {"y": [0, 3, 0, 6], "z": [0, -1, 0, -2]}),
        ((("x", 1.0), (B.NOTBOS, 1.0)), (("y", 1.0),), {"y": [0, 0, 3, 0]}),
    ],
)
def test_relu_unit(inputs, outputs, expected):
    s = stream(3, x=[-1, 2, -2])
    got = B.ReluUnit("u", inputs, outputs).apply(s)
    assert {k: v.tolist() for k, v in got.items()} == expected


def test_bilinear_unit_is_an_exact_product():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=5), rng.normal(size=5)
    s = stream(5, x=x, y=y)
    got = B.BilinearUnit("p", (("x", 1.0),), (("y", 2.0),), (("xy", 0.5),)).apply(s)["xy"]
    np.testing.assert_array_equal(got, np.r_[0.0, x * y])


@pytest.mark.parametrize("kind", sorted(B.NATIVE_FUNCTIONS))
def test_native_units_against_math(kind):
    xs = [0.25, 1.0, 2.5]
    ref = {
        "exp": math.exp,
        "log": math.log,
        "sqrt": math.sqrt,
        "reciprocal": lambda x: 1 / x,
        "rsqrt": lambda x: 1 / math.sqrt(x),
        "gelu": lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2))),
        "gelu_tanh": lambda x: (
            0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
        ),
    }[kind]
    s = stream(3, x=xs)
    unit = B.NativeUnit("n", kind, (("x", 1.0),), ((B.NOTBOS, 1.0),), (("y", 2.0),))
    got = unit.apply(s)["y"]
    assert got[0] == 0.0  # gated off at BOS, even where f(0) is undefined
    np.testing.assert_allclose(got[1:], [2 * ref(x) for x in xs], rtol=1e-14)


def test_head_averages_the_best_keys_and_masks_the_future():
    s = stream(3, k=[1, 0, 1], v=[10, 20, 40])
    head = B.Head("h", ((B.NOTBOS, "k", 1.0),), (("v", "out", 1.0),))
    np.testing.assert_array_equal(head.apply(s)["out"], [70 / 4, 25, 25, 25])
    causal = head.apply(s, causal=True)["out"]
    # query 1 sees BOS and key 1 (score 1 only for key 1); query 2 sees keys 0..2
    np.testing.assert_array_equal(causal, [0, 10, 10, 25])


def test_layer_runs_attention_then_mlp():
    s = stream(2, x=[3, -4])
    layer = B.Layer(
        heads=[B.Head("copy", ((B.BOS, B.BOS, 1.0),), (("x", "x", 0.0),))],
        relu=[B.ReluUnit("r", (("x", 1.0),), (("y", 1.0),))],
        bilinear=[B.BilinearUnit("sq", (("x", 1.0),), (("x", 1.0),), (("x2", 1.0),))],
    )
    out = layer.apply(s)
    assert out["y"].tolist() == [0, 3, 0] and out["x2"].tolist() == [0, 9, 16]
    assert out["x"].tolist() == [0, 3, -4] and layer.mlp_size == 2
