"""Classic RASP programs: tracr's library and the library of the original RASP paper.

Two families, each under the names its users know:

- tracr's ``lib`` (``make_length``, ``make_hist``, ``make_sort``, ``shift_by``, ...): the same
  names, signatures and outputs, so a tracr program ports by changing its imports;
- the library of the original RASP paper (Weiss et al., 2021): ``sort`` with a composite
  selector that breaks ties by position, ``sort_by_most_freq``, the Dyck-k recognisers with
  ``"T"``/``"F"``/``"P"`` output (``make_dyck1_ptf`` ...), ``count``, ``contains``, ``shift``,
  ``mark_first_instance``/``mark_last_instance``, ``select_from_first``/``select_from_last``,
  ``minimum``/``maximum`` and ``load_from_location``.

``PROGRAMS`` maps a function's name to a ready-to-run instance: a zero-argument factory, an
example input, the vocabulary and the maximum sequence length (the CLI reads it).

This module gathers the names; the code lives in :mod:`attnsim.rasp.lib.tracr`,
:mod:`attnsim.rasp.lib.original` and :mod:`attnsim.rasp.lib.registry`.

>>> from attnsim import rasp
>>> from attnsim.rasp import library
>>> rasp.evaluate(library.make_hist(), ["a", "b", "a", "c"])
[2, 1, 2, 1]
>>> rasp.evaluate(library.sort(rasp.tokens, rasp.tokens), [3, 1, 3, 2])
[1, 2, 3, 3]
"""

from __future__ import annotations

# the language, under the module name tracr programs use for it (``library.rasp``)
from attnsim.rasp import expr as rasp  # noqa: F401
from attnsim.rasp.lib.original import (
    contains,
    count,
    load_from_location,
    make_dyck1_ptf,
    make_dyck2_ptf,
    make_dyck3_ptf,
    make_dyck_ptf,
    mark_first_instance,
    mark_last_instance,
    maximum,
    minimum,
    select_from_first,
    select_from_last,
    shift,
    sort,
    sort_by_most_freq,
)
from attnsim.rasp.lib.registry import PROGRAMS, LibraryProgram
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

__all__ = [
    # tracr's library
    "make_length",
    "make_reverse",
    "make_pair_balance",
    "make_shuffle_dyck",
    "make_shuffle_dyck2",
    "make_hist",
    "make_sort_unique",
    "make_sort",
    "make_sort_freq",
    "make_frac_prevs",
    "shift_by",
    "detect_pattern",
    "make_count_less_freq",
    "make_count",
    "make_nary_sequencemap",
    # the original RASP library
    "sort",
    "sort_by_most_freq",
    "make_dyck_ptf",
    "make_dyck1_ptf",
    "make_dyck2_ptf",
    "make_dyck3_ptf",
    "count",
    "contains",
    "shift",
    "mark_first_instance",
    "mark_last_instance",
    "select_from_first",
    "select_from_last",
    "minimum",
    "maximum",
    "load_from_location",
    # the registry
    "LibraryProgram",
    "PROGRAMS",
]
