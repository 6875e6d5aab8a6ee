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
    for dims, out in rows:
        if not out:
            continue
        inputs: dict[str, float] = {}
        for d in dims:
            inputs[d] = inputs.get(d, 0.0) + 1.0
        if len(dims) > 1:
            inputs[NOTBOS] = -(len(dims) - 1.0)
        units.append(ReluUnit(name, linear_form(inputs), tuple(out)))
    return units
