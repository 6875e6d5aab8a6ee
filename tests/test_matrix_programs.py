"""Every matrix program against numpy: fast subsets here, shape sweeps under ``slow``.

The slow sweeps take every shape from 1x1 to 8x8; for matmul a Latin square of (r, k, c)
(k = (r + c) mod 8 + 1: every pair of dimensions occurs once), or every (r, k, c) with
``ATTNSIM_FULL_SWEEPS=1`` (``make bench-full``).

Error measures (float64): transpose, relu, scale and bias_add are bit-exact; matmul's error
per entry is at most 1e-12 times ``(|A| |B|)[i, j]`` (the scale of the sum, which no
summation order can beat); softmax is within 1e-12 relative per entry; maxmin within 1e-15
of the pair's magnitude (``x + relu(y - x)`` rounds twice); det within 1e-12 of the
Hadamard bound ``prod_i |row_i|``; inverse within 1e-9 relative (max norm) for
well-conditioned input.
"""

import itertools
import os

import numpy as np
import pytest

from attnsim import rasp
from attnsim.matrix import apply, layout, programs

DIMS = range(1, 9)
ALL_SHAPES = [(r, c) for r in DIMS for c in DIMS]
FAST_SHAPES = [(1, 1), (1, 6), (4, 1), (2, 3), (3, 2), (3, 3), (5, 7), (8, 3), (8, 8)]
ALL_MATMUL = list(itertools.product(DIMS, DIMS, DIMS))
FULL_SWEEPS = os.environ.get("ATTNSIM_FULL_SWEEPS") == "1"
SLOW_MATMUL = ALL_MATMUL if FULL_SWEEPS else [(r, (r + c) % 8 + 1, c) for r in DIMS for c in DIMS]
FAST_MATMUL = [
    (1, 1, 1), (1, 8, 1), (8, 1, 8), (2, 3, 4), (3, 3, 3), (4, 1, 4), (4, 2, 7), (6, 7, 8),
    (8, 8, 8), (7, 5, 1),
]  # fmt: skip
FAST, SLOW = 20, 200


def rng(*key):
    return np.random.default_rng([abs(hash(k)) % 2**32 for k in key])


def evaluate(program, seqs, length=None):
    """Evaluates a program on a batch of packed sequences (optionally zero-padded)."""
    if length is not None and length > seqs.shape[1]:
        seqs = np.pad(seqs, ((0, 0), (0, length - seqs.shape[1])))
    return np.asarray(rasp.evaluate_batch(program, seqs), dtype=np.float64)


# -- transpose -----------------------------------------------------------------------------


def check_transpose(r, c, count, heads=1):
    m = rng("t", r, c, heads).standard_normal((count, heads, r, c))
    out = evaluate(programs.transpose(r, c, heads=heads), m.reshape(count, -1))
    expected = np.swapaxes(m, -1, -2).reshape(count, -1)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("r, c", FAST_SHAPES)
def test_transpose(r, c):
    check_transpose(r, c, FAST)
    check_transpose(r, c, 4, heads=3)


@pytest.mark.slow
def test_transpose_all_shapes():
    for r, c in ALL_SHAPES:
        check_transpose(r, c, SLOW)
        check_transpose(r, c, 20, heads=2)


# -- matmul --------------------------------------------------------------------------------


def check_matmul(r, k, c, count, heads=1, layers=2, extra=0):
    gen = rng("mm", r, k, c, heads, layers)
    a = gen.standard_normal((count, heads, r, k)) * gen.uniform(0.1, 10, (count, 1, 1, 1))
    b = gen.standard_normal((count, heads, k, c))
    length = programs.matmul_input_length(r, k, c, heads=heads) + extra
    seqs = layout.pack_batch(a, b, length=length)
    out = evaluate(programs.matmul(r, k, c, heads=heads, layers=layers), seqs)
    size = heads * r * c
    ref = (a @ b).reshape(count, -1)
    scale = (np.abs(a) @ np.abs(b)).reshape(count, -1)
    assert np.all(np.abs(out[:, :size] - ref) <= 1e-12 * scale + 1e-300), (r, k, c, heads)
    assert np.all(out[:, size:] == 0.0)


@pytest.mark.parametrize("r, k, c", FAST_MATMUL)
def test_matmul(r, k, c):
    check_matmul(r, k, c, FAST)
    check_matmul(r, k, c, 5, layers=1)
    check_matmul(r, k, c, 5, extra=7)  # longer inputs give the same result


@pytest.mark.parametrize("heads", [2, 3])
def test_multihead_matmul(heads):
    for r, k, c in [(3, 2, 2), (2, 4, 3), (1, 1, 5), (4, 4, 4)]:
        check_matmul(r, k, c, 10, heads=heads)


def test_matmul_paper_example_order_3():
    a = np.arange(1.0, 10.0).reshape(3, 3)
    b = np.arange(9.0, 0.0, -1.0).reshape(3, 3)
    np.testing.assert_array_equal(apply.matmul(a, b), a @ b)


@pytest.mark.slow
def test_matmul_shape_sweep():
    for r, k, c in SLOW_MATMUL:
        check_matmul(r, k, c, SLOW)
    for r, k, c in SLOW_MATMUL[:: 7 if FULL_SWEEPS else 3]:
        check_matmul(r, k, c, 20, layers=1)
        check_matmul(r, k, c, 20, heads=2)


# -- softmax -------------------------------------------------------------------------------


def softmax_reference(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def check_softmax(r, c, count, heads=1, layers=1):
    s = rng("sm", r, c, heads, layers).standard_normal((count, heads, r, c)) * 5
    out = evaluate(programs.softmax(r, c, heads=heads, layers=layers), s.reshape(count, -1))
    ref = softmax_reference(s).reshape(count, -1)
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=0)


@pytest.mark.parametrize("r, c", FAST_SHAPES)
def test_softmax(r, c):
    check_softmax(r, c, FAST)
    check_softmax(r, c, 5, layers=2)
    check_softmax(r, c, 5, heads=2)


def test_softmax_is_stable_for_huge_logits():
    s = np.array([[-12.0, 2, 3], [5, 20, -60], [74, -63, 12], [1e300, -1e300, 0]])
    out = apply.softmax(s)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, softmax_reference(s), rtol=1e-12, atol=0)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-15)


@pytest.mark.slow
def test_softmax_all_shapes():
    for r, c in ALL_SHAPES:
        check_softmax(r, c, SLOW)
        check_softmax(r, c, 20, layers=2, heads=2)


# -- activations and affine maps ---------------------------------------------------------


def maxmin_reference(xs):
    out = list(xs)
    for p in range(0, len(xs) - 1, 2):
        out[p], out[p + 1] = max(xs[p], xs[p + 1]), min(xs[p], xs[p + 1])
    return out


@pytest.mark.parametrize("n", range(1, 18))
def test_maxmin(n):
    xs = rng("maxmin", n).standard_normal((FAST, n)) * 10
    xs[:, ::3] = np.round(xs[:, ::3])  # ties and zeros
    xs[0, :] = 0.0
    out = evaluate(programs.maxmin(), xs)
    ref = np.array([maxmin_reference(row) for row in xs.tolist()])
    pair = np.abs(xs).reshape(FAST, -1)
    scale = np.maximum(pair, np.abs(ref))
    for p in range(0, n - 1, 2):  # the magnitude of each pair
        scale[:, p : p + 2] = np.max(np.abs(xs[:, p : p + 2]), axis=1, keepdims=True)
    assert np.all(np.abs(out - ref) <= 1e-15 * scale)


def test_maxmin_fixes_the_odd_position_flag_bug():
    xs = [1.0, -2.0, -3.0, -1.0, 5.0, -4.0]
    assert apply.maxmin(xs).tolist() == [1.0, -2.0, -1.0, -3.0, 5.0, -4.0]
    assert apply.maxmin([14.0, 18, 3, 12, 6, 20, 7, 17, 13, 9]).tolist() == [
        18.0, 14, 12, 3, 20, 6, 17, 7, 13, 9
    ]  # fmt: skip
    assert apply.maxmin([-5.0]).tolist() == [-5.0]
    assert apply.maxmin([3.0, 1.0, -7.0]).tolist() == [3.0, 1.0, -7.0]


@pytest.mark.parametrize("r, c", FAST_SHAPES)
def test_bias_add_relu_scale_are_exact(r, c):
    gen = rng("bias", r, c)
    m, b = gen.standard_normal((FAST, r, c)), gen.standard_normal((FAST, c))
    out = evaluate(programs.bias_add(r, c), layout.pack_batch(m, b))
    np.testing.assert_array_equal(out[:, : r * c], (m + b[:, None, :]).reshape(FAST, -1))
    np.testing.assert_array_equal(out[:, r * c :], 0.0)
    flat = m.reshape(FAST, -1)
    np.testing.assert_array_equal(evaluate(programs.relu(), flat), np.maximum(flat, 0.0))
    np.testing.assert_array_equal(evaluate(programs.scale(-0.3), flat), flat * -0.3)


# -- det and inverse -----------------------------------------------------------------------


def well_conditioned(n, count, key):
    """Random matrices with singular values in [1, 10] (condition number <= 10)."""
    gen = rng("wc", n, key)
    u = np.linalg.qr(gen.standard_normal((count, n, n)))[0]
    v = np.linalg.qr(gen.standard_normal((count, n, n)))[0]
    s = gen.uniform(1, 10, (count, n))
    return (u * s[:, None, :]) @ np.swapaxes(v, 1, 2) * gen.uniform(0.01, 100, (count, 1, 1))


def check_det(n, count, method=None):
    a = rng("det", n, method).standard_normal((count, n, n))
    got = apply.det(a, method=method)
    hadamard = np.prod(np.linalg.norm(a, axis=2), axis=1)
    assert np.all(np.abs(got - np.linalg.det(a)) <= 1e-12 * hadamard), (n, method)


def check_inverse(n, count, method=None):
    for a in (well_conditioned(n, count, method), random_normal(n, count, method)):
        got = apply.inverse(a, method=method)  # check=True: none of these may be flagged
        ref = np.linalg.inv(a)
        err = np.abs(got - ref).max(axis=(1, 2)) / np.abs(ref).max(axis=(1, 2))
        assert np.all(err <= 1e-9), (n, method, err.max())


def random_normal(n, count, key):
    """Standard normal matrices with condition number below 100."""
    a = rng("rn", n, key).standard_normal((4 * count, n, n))
    return a[np.linalg.cond(a) < 100][:count]


@pytest.mark.parametrize("n", DIMS)
def test_det(n):
    check_det(n, FAST)
    if n == 3:
        check_det(3, FAST, method="faddeev_leverrier")


@pytest.mark.parametrize("n", DIMS)
def test_inverse(n):
    check_inverse(n, FAST)
    if n == 3:
        check_inverse(3, FAST, method="gram")


def test_inverse_3x3_paper_example():
    m = np.array([[7.0, 8, 12], [10, 11, 9], [2, 4, 21]])
    assert apply.det(m) == 45.0
    np.testing.assert_allclose(apply.inverse(m), np.linalg.inv(m), rtol=1e-14, atol=1e-15)


def test_inverse_needs_no_pivot_search():
    perm = np.eye(5)[[3, 0, 4, 1, 2]]  # every leading minor of A itself is 0
    np.testing.assert_array_equal(apply.inverse(perm), perm.T)
    np.testing.assert_array_equal(apply.inverse([[0.0, 1.0], [1.0, 0.0]]), [[0, 1], [1, 0]])


@pytest.mark.parametrize("scale", [1e200, 1e-200, 1e-300, 1e100])
def test_inverse_of_huge_and_tiny_matrices(scale):
    """Cofactors of 1e200-sized entries overflow float64: the wrapper scales each matrix by a
    power of two first (exactly), then the inverse back (numpy as the oracle)."""
    a = rng("scaled").standard_normal((3, 3, 3)) + 4 * np.eye(3)
    for backend in ("interpreter", "compiled"):
        got = apply.inverse(a * scale, backend=backend)
        want = np.linalg.inv(a) / scale
        assert np.all(np.abs(got - want) <= 1e-12 * np.abs(want).max(axis=(1, 2))[:, None, None])
    with pytest.raises(ValueError, match="beyond float64's range"):
        apply.inverse(np.eye(2) * 1e-310)  # certified, but its inverse 1e310 is no float64
    got = apply.inverse(np.eye(2) * 1e-310, check=False)
    assert np.isinf(np.diag(got)).all()


def singular_matrices(n):
    gen = rng("singular", n)
    out = [np.zeros((n, n))]
    if n > 1:
        low = gen.standard_normal((8, n, n - 1)) @ gen.standard_normal((8, n - 1, n))
        dup = gen.standard_normal((4, n, n))
        dup[:, -1] = dup[:, 0]
        zero_col = gen.standard_normal((4, n, n))
        zero_col[:, :, 1] = 0.0
        out += [*low, *dup, *zero_col, np.ones((n, n))]
    if n > 2:
        out.append(np.arange(n * n, dtype=float).reshape(n, n))
    return np.array(out)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf * 0 inside the interpreter
@pytest.mark.parametrize("n", DIMS)
def test_singular_input_is_reported(n):
    bad = singular_matrices(n)
    methods = [None, "gram"] if n == 3 else [None]
    for method in methods:
        inv = programs.inverse(n, method=method)
        flags = evaluate(programs.singular_flag(n, inverse_sop=inv), layout.pack_batch(bad))
        assert not np.any(flags == 0.0), (n, method)  # nonzero or nan everywhere
        with pytest.raises(apply.SingularMatrixError, match="singular or too ill-conditioned"):
            apply.inverse(bad, method=method)
    good = well_conditioned(n, 5, "flag")
    assert np.all(evaluate(programs.singular_flag(n), layout.pack_batch(good)) == 0.0)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_nearly_singular_input_is_reported(n):
    gen = rng("near", n)
    u = np.linalg.qr(gen.standard_normal((n, n)))[0]
    v = np.linalg.qr(gen.standard_normal((n, n)))[0]
    a = u @ np.diag(np.logspace(0, -14, n)) @ v.T
    with pytest.raises(apply.SingularMatrixError):
        apply.inverse(a)


@pytest.mark.slow
def test_det_and_inverse_sweep():
    for n in DIMS:
        check_det(n, SLOW)
        check_inverse(n, SLOW)
    check_det(3, SLOW, method="faddeev_leverrier")
    check_inverse(3, SLOW, method="gram")


# -- argument checking ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: programs.transpose(0, 2), ValueError, "r must be >= 1"),
        (lambda: programs.transpose(2.5, 2), TypeError, "r must be an int"),
        (lambda: programs.matmul(2, 2, 2, layers=3), ValueError, "layers must be 1 or 2"),
        (lambda: programs.softmax(2, 2, layers=0), ValueError, "layers must be 1 or 2"),
        (lambda: programs.inverse(2, method="cofactor"), ValueError, "3x3 only"),
        (lambda: programs.det(3, method="lu"), ValueError, "method must be one of"),
        (lambda: programs.scale(float("nan")), ValueError, "finite"),
        (lambda: programs.scale("2"), TypeError, "real number"),
        (lambda: programs.singular_flag(2, rtol=0.0), ValueError, "positive"),
        (lambda: apply.matmul(np.ones((2, 3)), np.ones((2, 3))), ValueError, "cannot multiply"),
        (lambda: apply.inverse(np.ones((2, 3))), ValueError, "square"),
    ],
)
def test_bad_arguments_are_explained(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_the_interpreter_backend_gives_no_nan_for_an_answer():
    # the row maximum a + relu(b - a) of -1e20 and 750 is 0 in float64, exp(750) is inf: a
    # NaN output raises (as the compiled backend's checks do), an infinite mask too
    with pytest.raises(ValueError, match=r"is nan: the program's float64 arithmetic overflowed"):
        apply.softmax([[-1e20, 750.0]])
    with pytest.raises(ValueError, match=r"is nan: the inputs hold inf or NaN"):
        apply.softmax([[-np.inf, 1.0]])
    s = np.array([[-1e3, 2.0, 1.0]])  # a finite mask of the scores' size
    want = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    np.testing.assert_allclose(apply.softmax(s), want, rtol=1e-12)
    assert np.isnan(
        apply.run(programs.softmax(1, 2), np.array([[-np.inf, 1.0]]), check=False)
    ).all()
