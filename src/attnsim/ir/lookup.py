"""Lookup tables: a function of one-hot (categorical) arguments as one ReLU unit per row.

A row is one combination of argument values, given by the one-hot direction of each
argument, and the linear form written where that combination occurs. With ``k`` arguments
the unit reads ``relu(e_1 + ... + e_k - (k - 1) notbos)``: 1 exactly where every argument
holds its row's value, 0 elsewhere (and at BOS), so the MLP writes the row's output there.
This is tracr's categorical MLP, extended to several arguments.

>>> import numpy as np
>>> units = lookup_units("neg", [(("x:1",), (("y", -1.0),)), (("x:2",), (("y", -2.0),))])
>>> s = {"bos": np.array([1.0, 0, 0]), "notbos": np.array([0.0, 1, 1]),
...      "x:1": np.array([0.0, 1, 0]), "x:2": np.array([0.0, 0, 1])}
>>> sum(u.apply(s)["y"] for u in units).tolist()
[0.0, -1.0, -2.0]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from attnsim.ir.blocks import NOTBOS, LinearForm, ReluUnit, linear_form


def lookup_units(name: str, rows: Iterable[tuple[Sequence[str], LinearForm]]) -> list[ReluUnit]:
    """One ReLU unit per row with a non-empty output.

    Args:
        name: the units' name.
        rows: ``(directions, output)``: the one-hot direction of each argument's value (a
            direction may repeat when two arguments are the same S-op) and the linear form
            to write where they all hold.

    Returns:
        The units, in the order of ``rows`` (rows writing nothing are left out).
    """
    units = []
    for dims, out in _written(rows):
        inputs = _sum_of(dims, 1.0)
        if len(dims) > 1:
            inputs[NOTBOS] = -(len(dims) - 1.0)
        units.append(ReluUnit(name, linear_form(inputs), tuple(out)))
    return units


def _written(rows: Iterable[tuple[Sequence[str], LinearForm]]):
    return ((dims, out) for dims, out in rows if out)


def _sum_of(dims: Sequence[str], weight: float) -> dict[str, float]:
    """``weight`` times the sum of the directions (a repeated one counts twice)."""
    inputs: dict[str, float] = {}
    for d in dims:
        inputs[d] = inputs.get(d, 0.0) + weight
    return inputs


# a saturated row's unit pair reads its codes' sum ``s`` (``k`` codes) as ``2 (s - k) + 3/2``
# and ``2 (s - k) + 1/2``: their difference is 1 from ``s = k - 1/4`` up and 0 below
# ``s = k - 3/4``; codes whose entries round by less than this pass on nothing
SATURATED_MARGIN = 0.25


def saturated_lookup_units(
    name: str, rows: Iterable[tuple[Sequence[str], LinearForm]]
) -> list[ReluUnit]:
    """A table that reads one-hot codes carrying rounding (entries off by less than
    ``SATURATED_MARGIN`` in all, summed over a row's codes): two units per row,
    ``relu(2 s - (2 k - 3/2) notbos) - relu(2 s - (2 k - 1/2) notbos)`` with ``s`` the sum
    of the row's ``k`` entries; both saturate, so the rounding of the codes is not passed on
    (a plain row's unit passes it on, times its output).

    >>> import numpy as np
    >>> units = saturated_lookup_units("t", [(("x:1",), (("y", 1e12),)), (("x:2",), (("y", 6.0),))])
    >>> s = {"bos": np.array([1.0, 0, 0]), "notbos": np.array([0.0, 1, 1]),
    ...      "x:1": np.array([0.0, 1e-4, 0]), "x:2": np.array([0.0, 1 - 1e-4, 1])}
    >>> [round(v, 9) for v in sum(u.apply(s)["y"] for u in units).tolist()]
    [0.0, 6.0, 6.0]
    """
    units = []
    for dims, out in _written(rows):
        inputs = _sum_of(dims, 2.0)
        k = float(len(dims))
        neg = tuple((dim, -c) for dim, c in out)
        units.append(ReluUnit(name, linear_form({**inputs, NOTBOS: -(2.0 * k - 1.5)}), tuple(out)))
        units.append(ReluUnit(name, linear_form({**inputs, NOTBOS: -(2.0 * k - 0.5)}), neg))
    return units
