"""The row-major layout: the bijection, packing several operands, reading results back."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnsim.matrix import layout

shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)


@given(shapes, st.data())
def test_flat_index_is_the_row_major_bijection(shape, data):
    pos = data.draw(st.integers(0, math.prod(shape) - 1))
    index = layout.unflat_index(pos, shape)
    assert layout.flat_index(index, shape) == pos
    assert np.ravel_multi_index(index, shape) == pos  # numpy's C order is row-major


@given(shapes)
def test_flatten_unflatten_round_trip(shape):
    arr = np.arange(math.prod(shape), dtype=float).reshape(shape) * 0.5 - 1
    seq = layout.flatten(arr)
    assert seq.tolist() == arr.reshape(-1).tolist()
    for pos, value in enumerate(seq):
        assert arr[layout.unflat_index(pos, shape)] == value
    np.testing.assert_array_equal(layout.unflatten(seq, shape), arr)


def test_pack_unpack_with_padding_and_batches():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(4.0).reshape(4, 1) + 10
    seq = layout.pack(a, b, length=12)
    assert seq.shape == (12,) and seq[10:].tolist() == [0.0, 0.0]
    got_a, got_b = layout.unpack(seq, (2, 3), (4, 1))
    np.testing.assert_array_equal(got_a, a)
    np.testing.assert_array_equal(got_b, b)
    assert layout.offsets((2, 3), (4, 1)) == (0, 6, 10)
    batch = layout.pack_batch(np.stack([a, -a]), np.stack([b, -b]))
    assert batch.shape == (2, 10)
    np.testing.assert_array_equal(layout.unflatten(batch, (4, 1), offset=6)[1], -b)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: layout.flat_index((2, 0), (2, 2)), "not inside"),
        (lambda: layout.unflat_index(4, (2, 2)), "outside"),
        (lambda: layout.unflatten([1.0, 2.0], (2, 2)), "needs 4 positions"),
        (lambda: layout.pack([[1.0, 2.0]], length=1), "shorter"),
        (lambda: layout.pack_batch(np.ones((2, 1)), np.ones((3, 1))), "equal batch sizes"),
        (lambda: layout.flatten([]), "empty"),
        (lambda: layout.offsets((0, 2)), "positive"),
    ],
)
def test_layout_errors_say_what_is_wrong(call, message):
    with pytest.raises(ValueError, match=message):
        call()
