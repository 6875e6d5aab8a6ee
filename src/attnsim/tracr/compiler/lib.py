"""tracr's ``lib``: its programs under their names, built from attnsim's expressions.

The same functions as :mod:`attnsim.rasp.lib.tracr`, plus tracr's module-level ``length``
(an instance of ``make_length()``).

>>> from attnsim.tracr.compiler import lib
>>> lib.make_hist()(["a", "b", "a"])
[2, 1, 2]
"""

from attnsim.rasp.lib.tracr import (
    detect_pattern,
    make_count,
    make_count_less_freq,
    make_frac_prevs,
    make_hist,
    make_length,
    make_nary_sequencemap,
    make_pair_balance,
    make_reverse,
    make_shuffle_dyck,
    make_shuffle_dyck2,
    make_sort,
    make_sort_freq,
    make_sort_unique,
    shift_by,
)
from attnsim.tracr.rasp import rasp  # noqa: F401  (tracr's lib exposes its `rasp`)

__all__ = [
    "detect_pattern",
    "length",
    "make_count",
    "make_count_less_freq",
    "make_frac_prevs",
    "make_hist",
    "make_length",
    "make_nary_sequencemap",
    "make_pair_balance",
    "make_reverse",
    "make_shuffle_dyck",
    "make_shuffle_dyck2",
    "make_sort",
    "make_sort_freq",
    "make_sort_unique",
    "shift_by",
]

length = make_length()
