"""The matrix programs compiled to real transformers, checked against numpy.

Every program is compiled once per shape (float64, fixed input length) and run on a batch of
random inputs. Exact operations (gathers, sums, products, ReLU, native exp and 1/x) must
match numpy within 1e-12 relative (max norm per example); the inverse within 1e-9 on
matrices with condition number at most 10, and singular matrices must be flagged. The CI
tests use a representative set of shapes with 20 inputs each. The slow ones (``make bench``)
take a fixed sample of the shapes from 1x1 to 8x8 with 64 inputs each: every row and column
count, and for matmul a Latin square of (r, k, c) in which every pair of dimensions occurs
once. ``ATTNSIM_FULL_SWEEPS=1`` (``make bench-full``) runs every shape with 200 inputs. Inputs
come from fixed seeds. A few programs are also compiled with softmax attention.
"""

import functools
import os
import zlib

import numpy as np
import pytest

from attnsim.compiler import compile_program
from attnsim.matrix import layout, programs
from attnsim.model.compiled import RunTimeCheckError

EXACT = 1e-12  # relative error of exact operations in float64
INVERSE = 1e-9  # relative error of the inverse, cond(A) <= 10
FULL_SWEEPS = os.environ.get("ATTNSIM_FULL_SWEEPS") == "1"  # every shape, 200 inputs each
FAST, SLOW = 20, (200 if FULL_SWEEPS else 64)
DIMS = range(1, 9)
ALL_SHAPES = [(r, c) for r in DIMS for c in DIMS]
FAST_SHAPES = [(1, 1), (1, 4), (2, 3), (3, 3), (4, 2), (5, 5), (8, 8)]
FAST_MATMUL = [(1, 1, 1), (2, 2, 2), (3, 3, 3), (2, 3, 4), (4, 1, 4), (1, 5, 2), (8, 8, 8)]
# sampled sweeps: 22 shapes with every r and c in 1..8 (1x7 and 7x1, 2x8 and 8x2, the squares);
# for matmul the Latin square k = (r + c) mod 8 + 1 (64 shapes; every (r, k), (k, c) and (r, c)
# occurs once) and the largest shape
SLOW_SHAPES = ALL_SHAPES if FULL_SWEEPS else [(r, c) for r, c in ALL_SHAPES if (r - c) % 3 == 0]
SLOW_MATMUL = (
    [(r, k, c) for r in DIMS for k in DIMS for c in DIMS]
    if FULL_SWEEPS
    else [(r, (r + c) % 8 + 1, c) for r in DIMS for c in DIMS] + [(8, 8, 8)]
)


@functools.cache
def compiled(builder, args, length, attention="hard"):
    """One compiled model per (program, shape, attention mode), shared by the tests."""
    program = getattr(programs, builder)(*args)
    return compile_program(
        program, vocab=None, max_seq_len=length, fixed_length=True, attention=attention
    )


def run(model, seqs):
    return np.asarray(model.run(np.asarray(seqs, dtype=np.float64).tolist()), dtype=np.float64)


def rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def relative_error(got, want):
    """The largest max-norm relative error over a batch ``[batch, n]``."""
    scale = np.maximum(np.abs(want).max(axis=1), 1e-300)
    return float((np.abs(got - want).max(axis=1) / scale).max())


def assert_close(got, want, tol, what):
    assert got.shape == want.shape, what
    assert np.all(np.isfinite(got)), what
    err = relative_error(got, want)
    assert err <= tol, f"{what}: relative error {err:.2e} > {tol:.0e}"


def well_conditioned(key, count, n):
    """Random ``n x n`` matrices with singular values in [1, 10] (condition number <= 10)."""
    g = rng("wc", key, n)
    u, _ = np.linalg.qr(g.standard_normal((count, n, n)))
    v, _ = np.linalg.qr(g.standard_normal((count, n, n)))
    s = g.uniform(1.0, 10.0, (count, n))
    return (u * s[:, None, :]) @ v


def softmax_reference(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def maxmin_reference(x):
    out = x.copy()
    n = x.shape[1] - x.shape[1] % 2
    pairs = x[:, :n].reshape(len(x), -1, 2)
    out[:, :n] = np.stack([pairs.max(axis=2), pairs.min(axis=2)], axis=2).reshape(len(x), n)
    return out


# -- checks, one per program ------------------------------------------------------------------


def check_transpose(r, c, count, heads=1, attention="hard", tol=EXACT):
    m = rng("t", r, c, heads).standard_normal((count, heads, r, c))
    model = compiled("transpose", (r, c, heads), heads * r * c, attention)
    want = m.transpose(0, 1, 3, 2).reshape(count, -1)
    assert_close(run(model, m.reshape(count, -1)), want, tol, f"transpose {r}x{c} h={heads}")


def check_matmul(r, k, c, count, heads=1, layers=2, attention="hard", tol=EXACT):
    g = rng("mm", r, k, c, heads, layers)
    a = g.standard_normal((count, heads, r, k))
    b = g.standard_normal((count, heads, k, c))
    length = programs.matmul_input_length(r, k, c, heads)
    model = compiled("matmul", (r, k, c, heads, layers), length, attention)
    want = np.zeros((count, length))
    want[:, : heads * r * c] = (a @ b).reshape(count, -1)  # every other position reads 0
    got = run(model, layout.pack_batch(a, b, length=length))
    assert_close(got, want, tol, f"matmul {r}x{k}x{c} h={heads} layers={layers}")


def check_softmax(r, c, count, heads=1, layers=1, attention="hard", tol=EXACT):
    s = rng("sm", r, c, heads, layers).standard_normal((count, heads, r, c)) * 5
    model = compiled("softmax", (r, c, heads, layers), heads * r * c, attention)
    want = softmax_reference(s).reshape(count, -1)
    got = run(model, s.reshape(count, -1))
    assert_close(got, want, tol, f"softmax {r}x{c} h={heads} layers={layers}")
    np.testing.assert_allclose(got.reshape(count, -1, c).sum(axis=2), 1.0, rtol=1e-14)


def check_elementwise(r, c, count, attention="hard"):
    x = rng("ew", r, c).standard_normal((count, r * c)) * 3
    x[:, 0] = 0.0  # relu's kink and an exact tie for maxmin
    if r * c > 1:
        x[:, 1] = 0.0
    relu = run(compiled("relu", (), r * c, attention), x)
    np.testing.assert_array_equal(relu, np.maximum(x, 0.0))
    scale = run(compiled("scale", (-0.375,), r * c, attention), x)
    np.testing.assert_array_equal(scale, -0.375 * x)
    maxmin = run(compiled("maxmin", (), r * c, attention), x)  # x + relu(y - x): rounded
    assert_close(maxmin, maxmin_reference(x), EXACT, f"maxmin {r * c}")


def check_bias_add(r, c, count, attention="hard"):
    g = rng("bias", r, c)
    m, bias = g.standard_normal((count, r, c)), g.standard_normal((count, c))
    model = compiled("bias_add", (r, c), r * c + c, attention)
    want = np.concatenate([(m + bias[:, None, :]).reshape(count, -1), np.zeros((count, c))], 1)
    got = run(model, layout.pack_batch(m, bias))
    assert_close(got, want, EXACT, f"bias_add {r}x{c}")


def check_det(n, count, method=None, attention="hard"):
    a = rng("det", n, method).standard_normal((count, n, n))
    model = compiled("det", (n, method), n * n, attention)
    got = run(model, layout.pack_batch(a))
    want = np.repeat(np.linalg.det(a)[:, None], n * n, axis=1)
    # det is a sum of products: measure the error against the Hadamard bound prod_i |row_i|
    bound = np.prod(np.linalg.norm(a, axis=2), axis=1)
    err = float((np.abs(got - want).max(axis=1) / bound).max())
    assert err <= EXACT, f"det {n}x{n} ({method}): error {err:.2e} of the Hadamard bound"


def check_inverse(n, count, method=None, attention="hard"):
    a = well_conditioned(method, count, n)
    model = compiled("inverse", (n, method), n * n, attention)
    got = run(model, layout.pack_batch(a))
    want = np.linalg.inv(a).reshape(count, -1)
    assert_close(got, want, INVERSE, f"inverse {n}x{n} ({method})")
    return relative_error(got, want)


# -- CI ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("r, c", FAST_SHAPES)
def test_transpose_compiled(r, c):
    check_transpose(r, c, FAST)
    check_transpose(r, c, FAST, heads=2)


@pytest.mark.parametrize("r, k, c", FAST_MATMUL)
def test_matmul_compiled(r, k, c):
    check_matmul(r, k, c, FAST)
    if r * k * c <= 27:
        check_matmul(r, k, c, FAST, layers=1)
        check_matmul(r, k, c, FAST, heads=2)


@pytest.mark.parametrize("r, c", FAST_SHAPES)
def test_softmax_compiled(r, c):
    check_softmax(r, c, FAST)
    if r * c <= 16:
        check_softmax(r, c, FAST, layers=2)
        check_softmax(r, c, FAST, heads=2)


def test_softmax_compiled_is_stable_for_large_logits():
    s = np.array([[-12.0, 2, 3, 5, 20, -60, 74, -63, 12], [700.0, -700, 0, 1e3, 0, -1e3, 3, 2, 1]])
    got = run(compiled("softmax", (3, 3, 1, 1), 9), s)
    np.testing.assert_allclose(got, softmax_reference(s.reshape(2, 3, 3)).reshape(2, 9), rtol=1e-12)


def test_softmax_compiled_refuses_a_row_whose_terms_cancel(tmp_path):
    # a mask value of float32's minimum beside ordinary scores: the row maximum's terms
    # (-3.4e38 and +3.4e38) cancel where the exponent sums them, and float rounding would
    # decide the result; refused by name, where rows of values of one size agree
    from attnsim.model.checks import RunTimeCheckError
    from attnsim.model.compiled import CompiledModel

    model = compiled("softmax", (1, 3, 1, 1), 3)
    model.save(tmp_path)
    for m in (model, CompiledModel.load(tmp_path)):  # the check is saved with the model
        for row in ([-3.4028234663852886e38, 2.0, 1.0], [-1e16, 2.0, 1.0]):
            with pytest.raises(RunTimeCheckError, match=r"its terms reach .* and cancel"):
                m.run(row)
        s = np.array([[-1e7, 2.0, 1.0], [2.0, 1.0, -1e16], [0.5, 2.0, 1.0]])
        np.testing.assert_allclose(run(m, s), softmax_reference(s[:, None, :])[:, 0], rtol=1e-12)


@pytest.mark.parametrize("r, c", FAST_SHAPES)
def test_elementwise_and_bias_compiled(r, c):
    check_elementwise(r, c, FAST)
    check_bias_add(r, c, FAST)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_det_compiled(n):
    check_det(n, FAST)
    if n == 3:
        check_det(3, FAST, method="faddeev_leverrier")


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_inverse_compiled(n):
    check_inverse(n, FAST)
    if n == 3:
        check_inverse(3, FAST, method="gram")


def test_inverse_compiled_paper_example():
    m = np.array([[7.0, 8, 12], [10, 11, 9], [2, 4, 21]])
    got = run(compiled("inverse", (3, None), 9), m.reshape(1, -1)).reshape(3, 3)
    np.testing.assert_allclose(got, np.linalg.inv(m), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("n", [2, 3])
def test_singular_matrices_are_reported_by_the_compiled_flag(n):
    g = rng("sing", n)
    good = well_conditioned("flag", 5, n)
    rank_one = g.integers(-3, 4, (5, n, 1)) @ g.integers(-3, 4, (5, 1, n)).astype(np.float64)
    dup = g.integers(-5, 6, (5, n, n)).astype(np.float64)
    dup[:, -1] = dup[:, 0]  # two equal rows
    bad = np.concatenate([rank_one, dup])
    inv = programs.inverse(n)
    flag_program = programs.singular_flag(n, inverse_sop=inv)
    model = compile_program(flag_program, vocab=None, max_seq_len=n * n, fixed_length=True)
    seqs = layout.pack_batch(bad)
    raw = np.asarray(model.run(seqs.tolist(), check=False), dtype=np.float64)
    assert np.all(~(raw == 0.0)), raw  # nonzero or nan at every position
    for seq, flag in zip(seqs, raw):  # checked, a non-finite flag is an error, not a value
        if not np.all(np.isfinite(flag)):
            with pytest.raises(RunTimeCheckError, match="is not finite"):
                model.run(seq.tolist())
    np.testing.assert_array_equal(run(model, layout.pack_batch(good)), 0.0)


@pytest.mark.parametrize("n", [2, 3])
def test_singular_matrices_through_the_compiled_runner(n):
    from attnsim.matrix import apply

    singular = np.ones((n, n))
    with pytest.raises(apply.SingularMatrixError, match="singular or too ill-conditioned"):
        apply.inverse(singular, backend="compiled")
    good = well_conditioned("runner", 1, n)[0]
    np.testing.assert_allclose(apply.inverse(good, backend="compiled") @ good, np.eye(n), atol=1e-9)


def test_softmax_attention_mode_subset():
    """Softmax attention (an ordinary transformer) on a subset: the same results."""
    tol = 1e-12
    check_transpose(3, 3, FAST, attention="softmax", tol=tol)
    check_transpose(2, 3, FAST, heads=2, attention="softmax", tol=tol)
    check_matmul(2, 3, 4, FAST, attention="softmax", tol=tol)
    check_softmax(3, 4, FAST, attention="softmax", tol=tol)
    check_bias_add(2, 3, FAST, attention="softmax")
    check_elementwise(3, 3, FAST, attention="softmax")
    check_det(4, FAST, attention="softmax")
    check_inverse(3, FAST, attention="softmax")
    check_inverse(4, FAST, attention="softmax")


# -- slow: sampled shapes (every shape with ATTNSIM_FULL_SWEEPS=1) ------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("r, c", SLOW_SHAPES)
def test_shape_sweep_compiled(r, c):
    check_transpose(r, c, SLOW)
    check_softmax(r, c, SLOW)
    check_elementwise(r, c, SLOW)
    check_bias_add(r, c, SLOW)
    if r * c <= 32:
        check_transpose(r, c, SLOW, heads=2)
        check_softmax(r, c, SLOW, heads=2, layers=2)


@pytest.mark.slow
@pytest.mark.parametrize("r, k, c", SLOW_MATMUL)
def test_matmul_sweep_compiled(r, k, c):
    check_matmul(r, k, c, SLOW)
    if (r + k + c) % 5 == 0:
        check_matmul(r, k, c, SLOW, layers=1)
        check_matmul(r, k, c, SLOW, heads=2)


@pytest.mark.slow
@pytest.mark.parametrize("n", DIMS)
def test_det_and_inverse_sweep_compiled(n):
    check_det(n, SLOW)
    check_inverse(n, SLOW)
    if n == 3:
        check_det(3, SLOW, method="faddeev_leverrier")
        check_inverse(3, SLOW, method="gram")


@pytest.mark.slow
def test_softmax_attention_mode_more_shapes():
    for r, c in [(1, 1), (2, 5), (4, 4), (8, 8)]:
        check_transpose(r, c, SLOW, attention="softmax")
        check_softmax(r, c, SLOW, attention="softmax")
        check_matmul(r, 3, c, SLOW, attention="softmax")
    for n in (2, 5, 6):
        check_inverse(n, SLOW, attention="softmax")
