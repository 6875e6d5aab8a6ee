"""Rows of zeros in pages (attnsim.model.zero_rows): the same values as ordinary
zero-filled tensors."""

import pytest
import torch

from attnsim.model import zero_rows
from attnsim.model.zero_rows import ZeroRows, copy_written, zeros

needs_pages = pytest.mark.skipif(not zero_rows.PAGED, reason="no anonymous pages here")


@pytest.mark.parametrize("paged", [True, False])
@pytest.mark.parametrize("row", [(3,), (1, 700), (2, 1025), (4096,)])
def test_clear_zeroes_exactly_the_rows_asked(paged, row):
    """Rows shorter than a page, unaligned rows and page-sized rows: clear sets the rows
    asked (including runs of consecutive rows) to 0 and leaves the others as written."""
    z = ZeroRows(9, row, torch.float64, paged=paged)
    ref = torch.zeros(9, *row, dtype=torch.float64)
    vals = torch.randn(9, *row, dtype=torch.float64)
    z.tensor += vals
    ref += vals
    for rows in ([1], [3, 4, 5], [0, 8], [2, 7]):
        z.clear(rows)
        ref[rows] = 0.0
        assert torch.equal(z.tensor, ref)
        z.tensor[rows] += 1.5  # written again after the clear
        ref[rows] += 1.5
        assert torch.equal(z.tensor, ref)


def test_zeros_and_copy_written():
    """zeros is all 0 whatever its size; copy_written copies up to the last non-zero
    position (a NaN counts as written) and leaves the zero tail untouched."""
    for shape in [(3, 4), (2, 70_000, 3)]:
        assert not bool(zeros(shape, torch.float64).ne(0).any())
    src = torch.zeros(2, 50, 3, dtype=torch.float64)
    src[1, 20, 2] = float("nan")
    src[0, 3, 0] = 4.0
    dst = zeros((2, 50, 3), torch.float64)
    copy_written(dst, src, step=7)
    assert torch.equal(dst.nan_to_num(7.0), src.nan_to_num(7.0))
    empty = zeros((1, 5), torch.float64)
    copy_written(empty, torch.zeros(1, 5, dtype=torch.float64), step=2)
    assert not bool(empty.ne(0).any())
