"""Validation helpers shared by the target specs (:mod:`attnsim.simulator.spec` and
:mod:`attnsim.simulator.spec_modern`): every array becomes a private float64 copy, checked
for shape and finiteness, with a message that says what to pass instead."""

import math
from typing import Any

import numpy as np
import torch

from attnsim import values

Tensor = torch.Tensor
DTYPE = torch.float64  # every stored array has this dtype


def check_has_values(value: Any, where: str) -> None:
    """Refuses a tensor on PyTorch's "meta" device, which has a shape but no values.

    >>> try:
    ...     check_has_values(torch.zeros(2, device="meta"), "X")
    ... except ValueError as exc:
    ...     print(str(exc)[:60])
    X is a tensor on the meta device, which holds a shape (2,) b
    """
    if isinstance(value, torch.Tensor) and value.device.type == "meta":
        raise ValueError(
            f"{where} is a tensor on the meta device, which holds a shape "
            f"{tuple(value.shape)} but no values; pass a tensor with values (materialise a "
            "meta module with module.to_empty(device='cpu') and load its weights, or "
            "torch.load(..., map_location='cpu'))"
        )


def _tensor(value: Any, where: str) -> Tensor:
    """Return a private float64 copy of ``value``; reject non-numeric and non-finite input."""
    check_has_values(value, where)
    if isinstance(value, torch.Tensor):
        t = value.detach()
    else:
        try:
            t = torch.as_tensor(np.asarray(value))
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(
                f"{where} must be a real array (torch.Tensor, numpy array or nested lists of "
                f"numbers), got {type(value).__name__}; pass the weights as numbers"
            ) from err
    if t.is_complex() or t.dtype == torch.bool:
        raise TypeError(
            f"{where} must hold real numbers, got dtype {t.dtype}; convert it to a float dtype"
        )
    t = t.to(device="cpu", dtype=DTYPE).clone()
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        first = tuple(int(i) for i in bad.nonzero()[0])
        count = int(bad.sum())
        entries = "entry" if count == 1 else "entries"
        raise ValueError(
            f"{where} has {count} non-finite {entries} (first: {t[first].item()} at index "
            f"{first}); expected finite numbers; replace NaN/Inf before building the spec"
        )
    return t


def _shaped(value: Any, where: str, shape: tuple[int, ...], names: str) -> Tensor:
    """Convert ``value`` with :func:`_tensor` and check that it has exactly ``shape``."""
    t = _tensor(value, where)
    if tuple(t.shape) != shape:
        raise ValueError(
            f"{where} must have shape {names} = {shape}, got {tuple(t.shape)}; "
            f"check its orientation (rows are inputs: a layer computes x @ W) and its sizes"
        )
    return t


def _optional(value: Any, where: str, shape: tuple[int, ...], names: str) -> Tensor:
    """Like :func:`_shaped`, but ``None`` becomes zeros of ``shape``."""
    if value is None:
        return torch.zeros(shape, dtype=DTYPE)
    return _shaped(value, where, shape, names)


def _sizes(value: Any, where: str, ndim: int, names: str) -> tuple[int, ...]:
    """Convert ``value``, check its rank and that no size is zero; return its shape."""
    t = _tensor(value, where)
    if t.ndim != ndim:
        raise ValueError(
            f"{where} must have {ndim} dimensions {names}, got shape {tuple(t.shape)}; "
            f"for a single head add a leading head axis (W[None])"
        )
    if min(t.shape) < 1:
        raise ValueError(
            f"{where} has shape {tuple(t.shape)}, but every size in {names} must be positive; "
            f"a layer needs at least one head, one feature and one hidden unit"
        )
    return tuple(t.shape)


def _set(obj: object, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)  # frozen dataclass: only __post_init__ writes


def _check_bool(value: Any, where: str) -> bool:
    return values.check_bool(value, where)  # the one check of a flag, shared with the compiler


def _check_real(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{where} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{where} must be finite, got {value}; pass a finite number")
    return value
