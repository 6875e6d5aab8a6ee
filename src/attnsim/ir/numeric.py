"""Exact numerical MLPs: piecewise-linear maps by ReLU units, products by bilinear units, and
the declared elementwise functions by native units.

Every input is a linear form over residual directions (direction -> coefficient); constants
enter through ``notbos``, so each unit reads and writes 0 at BOS.

>>> import numpy as np
>>> s = {"notbos": np.array([0.0, 1, 1]), "x": np.array([0.0, -2, 3]), "y": np.array([0.0, 4, 5])}
>>> [u.apply(s)["ax"].tolist() for u in relu_units("a", {"x": 1.0}, "ax", absolute=True)]
[[0.0, 0.0, 3.0], [0.0, 2.0, 0.0]]
>>> product_unit("p", {"x": 1.0}, {"y": 1.0}, "xy").apply(s)["xy"].tolist()
[0.0, -8.0, 15.0]
"""

from __future__ import annotations

from collections.abc import Mapping

from attnsim.ir.blocks import NOTBOS, BilinearUnit, NativeUnit, ReluUnit, linear_form


def relu_units(
    name: str, form: Mapping[str, float], out: str, *, absolute: bool = False
) -> list[ReluUnit]:
    """``relu(x)`` (one unit), or ``|x| = relu(x) + relu(-x)`` (two), written to ``out``."""
    lf = linear_form(form)
    units = [ReluUnit(name, lf, ((out, 1.0),))]
    if absolute:
        neg = tuple((k, -v) for k, v in lf)
        units.append(ReluUnit(name, neg, ((out, 1.0),)))
    return units


def product_unit(
    name: str, a: Mapping[str, float], b: Mapping[str, float], out: str
) -> BilinearUnit:
    """``<a, x> * <b, x>`` written to ``out`` (``a == b``: a square)."""
    return BilinearUnit(name, linear_form(a), linear_form(b), ((out, 1.0),))


def gated_constant_unit(name: str, flag: str, out: str, value: float = 1.0) -> BilinearUnit:
    """``value * flag * notbos`` written to ``out``: a constant where ``flag`` is 1.

    An attention head raises ``flag`` where it attended BOS only (nothing was selected);
    this unit then writes the aggregate's default there (``notbos`` keeps BOS itself clean).
    """
    return BilinearUnit(name, ((flag, 1.0),), ((NOTBOS, 1.0),), ((out, value),))


def native_unit(
    name: str, kind: str, form: Mapping[str, float], out: str, scale: float = 1.0
) -> NativeUnit:
    """``scale * f(x)`` for a declared elementwise f, gated off at BOS by ``notbos``."""
    return NativeUnit(name, kind, linear_form(form), ((NOTBOS, 1.0),), ((out, scale),))
