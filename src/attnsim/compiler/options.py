"""How to compile: one frozen, validated set of choices (``CompileOptions``).

``compile_program(program, vocab=..., max_seq_len=..., options=CompileOptions(...))`` takes
the object; keyword arguments (``causal=True``, ``maps="relu"``, ...) remain a convenience
and build one. Enum fields accept their plain strings ("hard", "relu", "relative").

>>> opts = CompileOptions(attention="softmax", maps="relu", map_ranges={"x": (0.5, 2.0)})
>>> opts.attention is AttentionMode.SOFTMAX, opts.maps is MapMode.RELU, opts.causal
(True, True, False)
>>> resolve(None, {"causal": True}).causal
True
>>> CompileOptions(maps="taylor")
Traceback (most recent call last):
...
ValueError: maps must be 'native' or 'relu', got 'taylor'
>>> CompileOptions().dtype, CompileOptions(dtype="float32").dtype
('auto', torch.float32)
"""

from __future__ import annotations

import dataclasses
import enum
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from attnsim import values
from attnsim.model.config import AttentionMode

__all__ = [
    "AUTO",
    "AttentionMode",
    "CompileOptions",
    "MapError",
    "MapMode",
    "check_dtype",
    "check_max_seq_len",
]

STORAGES = ("auto", "dense", "sparse")
SPARSE_ABOVE = 256 << 20  # storage="auto": sparse when the dense weights exceed this (bytes)
AUTO = "auto"  # dtype: float32 where every value is exact there, else float64
DTYPES = {"float64": torch.float64, "float32": torch.float32}
DTYPE_CHOICES = "torch.float64 or torch.float32, or one of the strings 'auto', 'float64', 'float32'"


class MapMode(str, enum.Enum):
    """How exp, log, sqrt, 1/x, rsqrt and gelu are realised."""

    NATIVE = "native"  # declared elementwise units (exact)
    RELU = "relu"  # ReLU units only: a certified piecewise-linear interpolant on a range


class MapError(str, enum.Enum):
    """What ``map_tolerance`` bounds for ReLU-realised maps."""

    ABSOLUTE = "absolute"  # |f - f^| <= map_tolerance
    RELATIVE = "relative"  # |f - f^| <= map_tolerance |f| (for f with no zero on the range)


@dataclass(frozen=True)
class CompileOptions:
    """The choices of a compilation (everything but the program, vocab and max_seq_len).

    Attributes:
        causal: build a causal model (each query sees keys at positions <= its own).
        attention: "hard" (average-hard attention) or "softmax" (a softmax transformer whose
            inverse temperature makes the weight on unselected keys below 1e-17).
        maps: "native" (exp, log, sqrt, 1/x, rsqrt and gelu as declared elementwise units,
            exact) or "relu" (ReLU units only: a piecewise-linear interpolant on the map's
            declared input range, with a certified error bound in the report).
        map_tolerance: the largest error of a ReLU-realised map (maps="relu").
        map_ranges: input ranges of maps by label (of the map or of its input), for
            maps="relu"; the input's ``rasp.numerical(x, value_range=...)`` works too.
        map_error: "absolute" (``|f - f^| <= map_tolerance``) or "relative"
            (``|f - f^| <= map_tolerance |f|`` for exp, 1/x, 1/sqrt(x) and sqrt above 0: the
            choice for ranges where f spans many orders of magnitude; maps whose function
            reaches 0 on the range, such as gelu and log, keep the absolute tolerance).
        fixed_length: inputs always have exactly ``max_seq_len`` tokens (then ``length`` and
            counts over position-only selectors are known in advance).
        dtype: "auto" (float32 when the compiler proves that every value the model
            computes is exact in float32: categorical and small-integer programs with hard
            attention; float64 otherwise; the report says which and why), torch.float64 or
            torch.float32 (as asked, exact or not); "float64" and "float32" name those.
        value_scale: softmax mode only: how much larger than the smallest relevant value the
            values a head averages can be (for example e^700 for exponentials). The inverse
            temperature grows by 2 ln(value_scale), so that the weight leaked to unselected
            keys stays below 1e-17 relative to that spread.
        storage: how the weights are held: "dense" (the plain
            :class:`~attnsim.model.transformer.Transformer`: every export, hook and executor),
            "sparse" (:class:`~attnsim.model.sparse.SparseTransformer`: the non-zero weights
            only, a stream of live columns; for models whose dense form is too large) or
            "auto" (the default: dense when its weights fit in ``SPARSE_ABOVE`` bytes, sparse
            beyond).

    Raises:
        TypeError: ``causal`` or ``fixed_length`` is not a bool.
        ValueError: any other field is out of its range (the message names the choices).
    """

    causal: bool = False  # bidirectional attention
    attention: AttentionMode = AttentionMode.HARD  # average-hard heads
    maps: MapMode = MapMode.NATIVE  # exact declared elementwise units
    map_tolerance: float = 1e-6  # only read with maps="relu"
    map_ranges: Mapping[str, tuple[float, float]] | None = None  # none declared here
    map_error: MapError = MapError.ABSOLUTE  # only read with maps="relu"
    fixed_length: bool = False  # inputs of any length up to max_seq_len
    dtype: torch.dtype | str = AUTO  # float32 where proven exact, else float64
    value_scale: float = 1.0  # values of one order of magnitude (softmax mode)
    storage: str = AUTO  # dense weights unless they would be too large

    def __post_init__(self) -> None:
        for name in ("causal", "fixed_length"):  # numpy bools become bools
            object.__setattr__(self, name, values.check_bool(getattr(self, name), name))
        if self.attention not in ("hard", "softmax"):
            raise ValueError(f"attention must be 'hard' or 'softmax', got {self.attention!r}")
        if self.maps not in ("native", "relu"):
            raise ValueError(f"maps must be 'native' or 'relu', got {self.maps!r}")
        if not _positive_finite(self.map_tolerance):
            raise ValueError(
                f"map_tolerance must be a positive finite number, got {self.map_tolerance!r}"
            )
        if self.map_error not in ("absolute", "relative"):
            raise ValueError(f"map_error must be 'absolute' or 'relative', got {self.map_error!r}")
        dtype = check_dtype(self.dtype)
        if self.storage not in STORAGES:
            raise ValueError(f"storage must be one of {STORAGES}, got {self.storage!r}")
        if not (_positive_finite(self.value_scale) and self.value_scale >= 1.0):
            raise ValueError(f"value_scale must be a finite number >= 1, got {self.value_scale!r}")
        # the plain strings become their enum members (equal to them: "hard" == HARD)
        object.__setattr__(self, "attention", AttentionMode(self.attention))
        object.__setattr__(self, "maps", MapMode(self.maps))
        object.__setattr__(self, "map_error", MapError(self.map_error))
        object.__setattr__(self, "dtype", dtype)  # "float32" becomes torch.float32

    @property
    def itemsize(self) -> int:
        """Bytes per number of the model's dtype (with "auto": 8, the most it can be)."""
        return 4 if self.dtype == torch.float32 else 8


def check_dtype(dtype: Any) -> torch.dtype | str:
    """A dtype option as ``"auto"``, ``torch.float64`` or ``torch.float32``.

    >>> check_dtype("float64"), check_dtype(torch.float32), check_dtype("auto")
    (torch.float64, torch.float32, 'auto')
    >>> try:
    ...     check_dtype("half")
    ... except ValueError as exc:
    ...     print(str(exc)[:44])
    dtype must be torch.float64 or torch.float32

    Raises:
        TypeError: ``dtype`` is neither a string nor a torch dtype.
        ValueError: a string or a torch dtype other than those.
    """
    if isinstance(dtype, str):
        if dtype == AUTO:
            return AUTO
        if dtype in DTYPES:
            return DTYPES[dtype]
        raise ValueError(f"dtype must be {DTYPE_CHOICES}; got {dtype!r}")
    if isinstance(dtype, torch.dtype):
        if dtype in (torch.float64, torch.float32):
            return dtype
        raise ValueError(f"dtype must be {DTYPE_CHOICES}; got {dtype}")
    raise TypeError(f"dtype must be {DTYPE_CHOICES}; got {type(dtype).__name__} {dtype!r}")


FIELDS = tuple(f.name for f in dataclasses.fields(CompileOptions))


def resolve(options: CompileOptions | None, overrides: Mapping[str, Any]) -> CompileOptions:
    """The options of one compilation: ``options`` (or the defaults) with keyword overrides.

    Raises:
        TypeError: ``options`` is not a CompileOptions, a keyword is not an option, or an
            option is given both in ``options`` and as a keyword with another value.
        ValueError: an option's value is out of range (see :class:`CompileOptions`).
    """
    unknown = sorted(set(overrides) - set(FIELDS))
    if unknown:
        raise TypeError(
            f"compile_program got unexpected keyword argument(s) {', '.join(unknown)}; the "
            f"options are {', '.join(FIELDS)}"
        )
    if options is None:
        return CompileOptions(**overrides)
    if not isinstance(options, CompileOptions):
        raise TypeError(
            f"options must be a CompileOptions (from attnsim.compiler), got "
            f"{type(options).__name__} {options!r}"
        )
    clash = [k for k, v in overrides.items() if not _same(getattr(options, k), _plain(k, v))]
    if clash:
        both = "; ".join(_both(options, overrides, k) for k in clash)
        raise TypeError(
            f"compile_program got {', '.join(clash)} both in options and as a keyword, with "
            f"different values ({both}); give each option once: in options, or as a keyword"
        )
    return options


def check_max_seq_len(max_seq_len: Any) -> int:
    """``max_seq_len`` as an int, refusing anything but a positive integer."""
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, numbers.Integral):
        raise TypeError(
            "max_seq_len must be a positive int (the longest input the model accepts), got "
            f"{type(max_seq_len).__name__} {max_seq_len!r}"
        )
    if max_seq_len < 1:
        raise ValueError(
            f"max_seq_len must be a positive int (the longest input the model accepts), got "
            f"{max_seq_len!r}"
        )
    return int(max_seq_len)


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return a is b


def _plain(k: str, v: Any) -> Any:
    """A keyword's value as the options hold it ("float32" -> torch.float32)."""
    if k == "dtype":
        try:
            return check_dtype(v)
        except (TypeError, ValueError):
            return v
    return v


def _both(options: CompileOptions, overrides: Mapping[str, Any], k: str) -> str:
    a = getattr(options, k)
    shown = a.value if isinstance(a, enum.Enum) else a
    return f"{k}={shown!r} in options, {k}={overrides[k]!r} as a keyword"


def _positive_finite(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) and x > 0
