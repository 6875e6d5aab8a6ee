"""What a universal simulator U is built for: one frozen, validated configuration.

:class:`SimulatorConfig` holds every choice :func:`attnsim.simulator.build` takes: the layer
kind U simulates, its build sizes, U's own attention, how its maps are realised, and the
numeric bounds. It is checked once, in ``__post_init__``, and stores resolved values (the
default feed-forward width and score bound filled in), so that it can be written to JSON
and read back to the same build.

>>> cfg = SimulatorConfig(4, 4, 2, layer="encoder")
>>> cfg.layer, cfg.max_ff, cfg.score_bound, cfg.layout.length
(<LayerKind.ENCODER: 'encoder'>, 8, 10000.0, 48)
>>> SimulatorConfig.from_json(cfg.to_json()) == cfg
True
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from attnsim.compiler.options import STORAGES
from attnsim.model.memory import attention_bytes, check_available, gib
from attnsim.simulator.layout import Layout
from attnsim.simulator.vector_layout import VectorLayout

__all__ = [
    "AttentionKind",
    "LayoutKind",
    "LayerKind",
    "Maps",
    "SimulatorConfig",
    "max_score_bound",
    "EPS_RANGE",
    "LOGIT_LIMIT",
    "DEFAULT_SCORE_BOUND",
    "SCORE_BOUND",
    "SCORE_LIMIT",
]

# the default bound on |score| (every score of the target on its X, masked keys included),
# and the largest one a build accepts, by dtype. A float64 score carries an absolute rounding
# error (|s| * 2^-53 and more) that exp turns into a relative one: within 1e-9 up to 1e6;
# beyond (up to 1e9, for near-hard targets such as a compiled model's softmax heads, whose
# top scores tie exactly) a key's weight is exact to about |s| * 2^-52 only. float32 is also
# limited by the max head's precision (see ``max_score_bound``)
SCORE_BOUND = {torch.float64: 1.0e4, torch.float32: 1.0e3}
SCORE_LIMIT = {torch.float64: 1.0e9, torch.float32: 1.0e4}
DEFAULT_SCORE_BOUND = SCORE_BOUND[torch.float64]  # 1e4: the default of a float64 build
LOGIT_LIMIT = 350.0  # maps="relu": exp is realised down to e^(-2 logit_bound) > 0
EPS_RANGE = (1e-6, 1.0)  # maps="relu", encoder: the LayerNorm eps a build accepts
DTYPES = {"float64": torch.float64, "float32": torch.float32}


class LayerKind(str, enum.Enum):
    """The kind of layer T that U simulates."""

    ATTENTION = "attention"  # a multi-head self-attention layer
    ENCODER = "encoder"  # a whole TransformerEncoderLayer: attention, LayerNorms, FFN
    # today's layers too (vector layout): LayerNorm, RMSNorm or none, gated feed-forwards
    # (GLU, SwiGLU), rotary position embeddings; a LLaMA decoder layer is one
    DECODER = "decoder"


class AttentionKind(str, enum.Enum):
    """U's own attention (not the target's, which is always softmax)."""

    HARD = "hard"  # average-hard attention: exact gathers
    SOFTMAX = "softmax"  # softmax with a large inverse temperature


class LayoutKind(str, enum.Enum):
    """How U's input sequence holds <T, X>."""

    SCALAR = "scalar"  # the paper's: one real number per position, attention merged
    VECTOR = "vector"  # one real vector per position, parameters as torch stores them


class Maps(str, enum.Enum):
    """How U realises exp, 1/x, 1/sqrt and gelu."""

    NATIVE = "native"  # declared elementwise units, exact
    RELU = "relu"  # ReLU units only, piecewise linear with certified error bounds


def _enum(kind: type[enum.Enum], value: Any, name: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        choices = " or ".join(repr(k.value) for k in kind)
        raise ValueError(f"{name} must be {choices}, got {value!r}") from None


def _positive_int(value: Any, name: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int ({what}), got {value!r}")
    return value


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class SimulatorConfig:
    """The build configuration of a universal simulator U.

    Enums accept their values as strings (``layer="encoder"``); ``dtype`` accepts
    ``"float64"``/``"float32"``. ``max_ff`` and ``score_bound`` are stored resolved.

    Attributes:
        max_n: the most rows of X.
        max_d: the largest model width d.
        max_heads: the most attention heads.
        layer: the kind of layer U simulates (:class:`LayerKind`): a multi-head attention
            layer, or a full TransformerEncoderLayer (attention, residuals, LayerNorms
            before or after, and a ReLU/GELU feed-forward block).
        max_ff: encoder: the largest feed-forward width (default 2 * max_d); 0 for attention.
        attention: U's own attention (:class:`AttentionKind`).
        maps: how U realises its maps (:class:`Maps`): "native" (exp, 1/x, rsqrt, gelu as
            declared elementwise units, exact) or "relu" (ReLU units only: exp, 1/x and
            rsqrt piecewise linear with certified relative error bounds, gelu with an
            absolute one).
        logit_bound: maps="relu": U shifts each row of scores by its maximum, and exp is
            realised on exponents in [-2 logit_bound, 1] (those of every row whose scores
            lie within logit_bound of some centre, anywhere within the score bound); a key
            further below its row's maximum gets a weight within e^(-2 logit_bound)
            absolutely, which ``error_bound`` counts. 1/Z is realised on [1/2, 2 e max_n].
            At most ``LOGIT_LIMIT`` (350).
        value_bound: maps="relu", encoder: the scale of the values the ReLU maps read:
            1/sqrt is realised on [1e-6, value_bound^2 + 2] (a LayerNorm's variance plus
            eps: rows with entries up to about value_bound) and gelu on [-value_bound,
            value_bound] (the feed-forward pre-activations); LayerNorm eps must lie in
            [1e-6, 1]. U checks these values while it runs and refuses a target beyond them.
        map_tolerance: maps="relu": the relative error allowed to each map. The ReLU widths
            grow as ``logit_bound / sqrt(map_tolerance)`` (about 35,000 units for exp at 50
            and 1e-6; 1/Z needs about 1,000).
        dtype: U's float type, torch.float64 or torch.float32.
        layout_kind: the sequence layout (:class:`LayoutKind`; ``build(layout=...)``):
            "scalar" (the paper's: one number per position, the attention merged into
            A_h = W_Q,h W_K,h^T and W_V,h W_O,h before U reads it; see
            :mod:`~attnsim.simulator.layout`) or "vector" (one vector per position, the
            raw parameters as torch stores them, every product computed by U; see
            :mod:`~attnsim.simulator.vector_layout`).
        n_layers: a stack of this many encoder layers (``torch.nn.TransformerEncoder``),
            simulated in one forward pass: each layer's output is the next one's input
            inside the sequence (vector layout, layer="encoder"); stacks of fewer layers
            too. 1: one layer.
        score_bound: the largest |score| of a target on its X (every query-key pair of every
            head, masked keys included) that U accepts: U checks it while it runs. Default
            1e4 in float64 (at most 1e9; beyond 1e6 a key's weight is exact only to about
            ``score_bound * 2^-52`` relatively, see ``SCORE_LIMIT``) and 1e3 in float32 (at
            most what
            ``max_score_bound`` allows for the build: 8191 for (4, 4, 2), 511 for
            (8, 8, 4)).

    Raises:
        ValueError: a choice is unknown or a value is out of its range (the message names
            the option, the range and what arrived).

    >>> SimulatorConfig(2, 2, maps="tanh")
    Traceback (most recent call last):
    ...
    ValueError: maps must be 'native' or 'relu', got 'tanh'
    """

    max_n: int
    max_d: int
    max_heads: int = 1
    layer: LayerKind = LayerKind.ATTENTION  # attention layers unless asked for encoders
    max_ff: int | None = None  # None: 2 * max_d for an encoder U, 0 for an attention U
    attention: AttentionKind = AttentionKind.HARD  # average-hard: exact gathers
    maps: Maps = Maps.NATIVE  # exact elementwise units
    logit_bound: float = 50.0  # maps="relu": a row's scores within 50 of some centre
    value_bound: float = 20.0  # maps="relu", encoder: entries up to about +-20
    map_tolerance: float = 1e-6  # maps="relu": each map within a relative 1e-6
    dtype: torch.dtype = torch.float64  # float64: errors at the 1e-12 level
    score_bound: float | None = None  # None: 1e4 in float64, 1e3 in float32 (or the limit)
    layout_kind: LayoutKind = LayoutKind.VECTOR  # one vector per position, raw parameters
    n_layers: int = 1  # a stack of encoder layers (torch.nn.TransformerEncoder) when > 1

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)  # frozen: only __post_init__ writes

        put("layer", _enum(LayerKind, self.layer, "layer"))
        put("maps", _enum(Maps, self.maps, "maps"))
        put("layout_kind", _enum(LayoutKind, self.layout_kind, "layout"))
        _positive_int(self.n_layers, "n_layers", "the layers of a stack")
        if self.n_layers > 1 and (
            self.layer is LayerKind.ATTENTION or self.layout_kind is not LayoutKind.VECTOR
        ):
            raise ValueError(
                f"n_layers={self.n_layers} builds U for a stack of encoder layers: it needs "
                "layer='encoder' and layout='vector' (or layer='decoder')"
            )
        if self.layer is LayerKind.DECODER:
            if self.layout_kind is not LayoutKind.VECTOR:
                raise ValueError(
                    "layer='decoder' (RMSNorm, gated feed-forwards, rotary embeddings) is "
                    "built in the vector layout: use layout='vector'"
                )

        dtype = DTYPES.get(self.dtype, self.dtype) if isinstance(self.dtype, str) else self.dtype
        if dtype not in SCORE_BOUND:
            raise ValueError(f"dtype must be torch.float64 or torch.float32, got {self.dtype}")
        put("dtype", dtype)
        put("attention", _enum(AttentionKind, self.attention, "attention"))
        _positive_int(self.max_n, "max_n", "the most rows of X")
        _positive_int(self.max_d, "max_d", "the largest model width")
        _positive_int(self.max_heads, "max_heads", "the most attention heads")
        if self.layer is not LayerKind.ATTENTION:
            ff = 2 * self.max_d if self.max_ff is None else self.max_ff
            put("max_ff", _positive_int(ff, "max_ff", "the largest feed-forward width"))
        elif self.max_ff not in (None, 0):
            raise ValueError("max_ff applies to layer='encoder' or 'decoder' only")
        else:
            put("max_ff", 0)
        limit = self.score_limit
        bound = min(SCORE_BOUND[dtype], limit) if self.score_bound is None else self.score_bound
        if not (_is_real(bound) and 0 < bound <= limit):
            raise ValueError(
                f"score_bound must be in (0, {limit:g}] for this build in {self.dtype_name} "
                f"(the precision of its max head and of exp), got {bound!r}"
                + ("; use dtype=torch.float64 for larger scores" if dtype == torch.float32 else "")
            )
        put("score_bound", float(bound))
        if self.maps is Maps.RELU:
            B = self.logit_bound
            if not (_is_real(B) and math.isfinite(B) and 0 < B <= LOGIT_LIMIT):
                raise ValueError(f"logit_bound must be in (0, {LOGIT_LIMIT:g}], got {B!r}")
            V = self.value_bound
            if not (_is_real(V) and math.isfinite(V) and V > 0):
                raise ValueError(f"value_bound must be positive and finite, got {V!r}")
        tol = self.map_tolerance
        if not (_is_real(tol) and math.isfinite(tol) and tol > 0):
            raise ValueError(f"map_tolerance must be a positive finite number, got {tol!r}")
        for name in ("logit_bound", "value_bound", "map_tolerance"):
            value = getattr(self, name)
            put(name, float(value) if _is_real(value) else value)

    # -- derived -------------------------------------------------------------------------
    @cached_property
    def layout(self) -> Layout | VectorLayout:
        """Where everything lives in U's input sequence (see :mod:`.layout` and
        :mod:`.vector_layout`)."""
        if self.layout_kind is LayoutKind.VECTOR:
            return VectorLayout(
                self.max_n,
                self.max_d,
                self.max_heads,
                self.max_ff,
                self.n_layers,
                modern=self.layer is LayerKind.DECODER,
            )
        return Layout(self.max_n, self.max_d, self.max_heads, self.max_ff)

    @property
    def is_vector(self) -> bool:
        return self.layout_kind is LayoutKind.VECTOR

    @property
    def score_limit(self) -> float:
        """The largest score bound this build accepts (see :func:`max_score_bound`)."""
        return max_score_bound(Layout(self.max_n, self.max_d, self.max_heads), self.dtype)

    @property
    def dtype_name(self) -> str:
        """``"float64"`` or ``"float32"``."""
        return "float64" if self.dtype == torch.float64 else "float32"

    @property
    def is_encoder(self) -> bool:
        """Whether U simulates whole layers (encoder or decoder), not attention alone."""
        return self.layer is not LayerKind.ATTENTION

    @property
    def is_decoder(self) -> bool:
        """Whether U also reads today's layers (RMSNorm, gated FFN, rotary)."""
        return self.layer is LayerKind.DECODER

    @property
    def relu_logit_bound(self) -> float | None:
        """``logit_bound`` where it applies (maps="relu"), else None."""
        return self.logit_bound if self.maps is Maps.RELU else None

    @property
    def relu_value_bound(self) -> float | None:
        """``value_bound`` where it applies (maps="relu" and an encoder U), else None."""
        return self.value_bound if self.maps is Maps.RELU and self.is_encoder else None

    # -- JSON ----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The configuration as JSON-ready values (enums by value, dtype by name)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, enum.Enum):
                value = value.value
            elif f.name == "dtype":
                value = self.dtype_name
            out[f.name] = value
        return out

    @classmethod
    def from_json(cls, data: Any) -> SimulatorConfig:
        """Reads what :meth:`to_json` wrote (every field, nothing else), then validates it.

        Raises:
            ValueError: ``data`` is not such an object, or a value is invalid.
        """
        names = [f.name for f in dataclasses.fields(cls)]
        if not isinstance(data, dict):
            raise ValueError(f"a simulator config must be a JSON object, got {type(data).__name__}")
        if "layout_kind" not in data:  # saved before the vector layout existed
            data = {**data, "layout_kind": LayoutKind.SCALAR.value}
        if "n_layers" not in data:  # saved before stacks existed
            data = {**data, "n_layers": 1}
        missing = [n for n in names if n not in data]
        extra = sorted(set(data) - set(names))
        if missing or extra:
            raise ValueError(
                f"a simulator config needs exactly the keys {', '.join(names)}; "
                + (f"missing {', '.join(missing)}" if missing else f"unexpected {', '.join(extra)}")
            )
        if data["dtype"] not in DTYPES:
            raise ValueError(f"dtype must be 'float64' or 'float32', got {data['dtype']!r}")
        return cls(**data)


def max_score_bound(layout: Layout, dtype: torch.dtype) -> float:
    """The largest score bound a build of this layout accepts in ``dtype``.

    The max head scores a key ``G * base + s`` with ``G`` the power of two
    ``>= 4 (score_bound + 1)`` and ``base`` a quadratic form in the centred row ids (at most
    ``r`` in size): its terms reach ``M = G (4 r^2 + 6)``, and the head must still resolve
    ``s`` to well within its tolerance, ``2 M u <= 1/2`` (``u`` the unit roundoff), so that
    the row maximum it finds stays within ``EXP_HI`` of the true one. In float64 that is
    never the limit (``SCORE_LIMIT`` is: exp of a score carries its absolute rounding).

    >>> lay = Layout(4, 4, 2)
    >>> max_score_bound(lay, torch.float32), max_score_bound(lay, torch.float64)
    (8191.0, 1000000000.0)
    """
    rows = layout.N * layout.H
    r = rows - rows // 2 + 1  # the largest |row id| (the values outside P included)
    u = torch.finfo(dtype).eps / 2
    gain = 2.0 ** math.floor(math.log2(0.25 / (u * (4 * r * r + 6))))
    return min(SCORE_LIMIT[dtype], gain / 4.0 - 1.0)


# Building U holds its weights as sparse coordinate lists, about 8 (attention layers) to 14
# (encoder layers) non-zero weights per position of its sequence and unit of max_d in either
# layout, and the build's peak resident memory follows them. Measured peaks (2 cores,
# 23.5 GiB; benchmarks/simulator_layouts.py for the encoder layers), in bytes per position
# per unit of max_d: scalar attention n = d = 128 (one head): 228; scalar encoder 64: 297,
# 128: 290 (10.0 GiB); vector attention 128 (one head): 72. The vector layout's position
# tables are sparse (a default and the listed entries) from RASP to the weights: its encoder
# builds peak at 16.2 (the MiniLM layer shape on 128 tokens, 1.14 GiB), 7.4 (256 tokens,
# 2.09 GiB) and 4.8 (512 tokens, 5.45 GiB). Each constant below lies under every peak of
# its kind, so no size built there is refused; the scalar layout's n^2.7 growth gets
# n = d = 400 refused (about 29 GiB by this estimate, about 41 GiB at the measured rate).
BUILD_BYTES_PER_POSITION_D = {
    ("scalar", "attention"): 160,
    ("scalar", "layer"): 160,  # encoder layers
    ("vector", "attention"): 60,
    ("vector", "layer"): 4,  # encoder and decoder layers
}
# A simulation of the scalar layout peaks at about this many times the size of its input
# as dense float64 values, plus the compiler's position tables (dense in that layout).
INPUT_COPIES = 3.25
# A simulation of the vector layout holds, at its peak, a few groups of max_d + 1 rows of
# its stream over its widest row-wise role, n (max_ff or max_d, the wider) positions: the
# feed-forward's hidden products and their factors (its input takes only the positions its
# entries lie in). Measured (whole process, build and simulate) on the MiniLM layer shape:
# 256 tokens 6.0 GiB, 5.3 such groups; 512 tokens 12.7 GiB, 5.6 groups. Counted at 3.
VECTOR_STREAM_GROUPS = 3
# a stack of layers: six MiniLM-shaped layers on 128 tokens peaked at 6.0 GiB over the whole
# run, build and simulate, against 3.3 GiB for one layer; counted at 1.5 of the first per
# further layer, the estimate stays under the whole run's peak
BUILD_BYTES_PER_EXTRA_LAYER = 1.5


def memory_needed(config: SimulatorConfig, storage: str = "auto") -> int:
    """An estimate, from the config alone, of the bytes building and running U need (see
    ``BUILD_BYTES_PER_POSITION_D``, ``INPUT_COPIES`` and ``VECTOR_STREAM_GROUPS``). Dense
    weights: one head's scores ``[pos, pos]`` at a time. Sparse storage (and "auto", sparse
    at the sizes where this matters): the larger of U's weights while building (bytes per
    position and unit of max_d, by layout; more for a stack of layers) and a simulation:
    in the vector layout ``VECTOR_STREAM_GROUPS`` groups of ``max_d + 1`` rows over
    ``max_n * max(max_ff, max_d)`` positions (:func:`vector_stream_bytes`); in the scalar
    layout ``INPUT_COPIES`` times its input plus the position tables its compiler holds (at
    least 100 tables, three copies each: ``300 pos``).

    >>> config = SimulatorConfig(2, 2)
    >>> memory_needed(config) == max(vector_stream_bytes(config), build_weight_bytes(config))
    True
    >>> positions, item = config.layout.length + 1, 8
    >>> memory_needed(config, "dense") >= item * positions**2  # one [pos, pos] score matrix
    True
    >>> memory_needed(SimulatorConfig(400, 400, 1, layout_kind="scalar")) / 2**30 > 28
    True
    """
    if storage not in STORAGES:
        raise ValueError(f"storage must be one of {STORAGES}, got {storage!r}")
    item = 8 if config.dtype == torch.float64 else 4
    layout = config.layout
    if storage == "dense":
        return attention_bytes(layout.length + 1, 1, item)
    if config.is_vector:
        stream = vector_stream_bytes(config)
    else:
        stream = int((INPUT_COPIES + 300) * (layout.length + 1) * item)
    return max(stream, build_weight_bytes(config))


def vector_stream_bytes(config: SimulatorConfig) -> int:
    """The part of :func:`memory_needed` that a simulation in the vector layout takes:
    ``VECTOR_STREAM_GROUPS`` groups of ``max_d + 1`` rows over ``max_n * max(max_ff,
    max_d)`` positions.

    >>> minilm = SimulatorConfig(512, 384, 12, layer="encoder", max_ff=1536)
    >>> round(vector_stream_bytes(minilm) / 2**30, 1)  # 12.7 GiB measured (whole process)
    6.8
    """
    item = 8 if config.dtype == torch.float64 else 4
    rows = max(config.max_ff or 0, config.max_d) * config.max_n
    return int(VECTOR_STREAM_GROUPS * (config.max_d + 1) * rows * item)


def build_weight_bytes(config: SimulatorConfig) -> int:
    """The part of :func:`memory_needed` that U's weights take while it is built (sparse
    storage): measured bytes per position and unit of max_d, by layout, times the positions
    and max_d, a stack of ``n_layers`` counting more.

    >>> build_weight_bytes(SimulatorConfig(128, 128, 4, layer="encoder", max_ff=512,
    ...                                    layout_kind="scalar")) / 2**30 < 10.0  # measured
    True
    """
    kind = "attention" if config.layer == LayerKind.ATTENTION else "layer"
    rate = BUILD_BYTES_PER_POSITION_D[config.layout_kind.value, kind]
    layers = 1.0 + BUILD_BYTES_PER_EXTRA_LAYER * (config.n_layers - 1)
    return int(rate * config.layout.length * config.max_d * layers)


def build_what(config: SimulatorConfig) -> str:
    """What a build is, for messages: its sizes and its sequence length.

    >>> build_what(SimulatorConfig(2, 2))
    'building U for max_n=2, max_d=2, max_heads=1 (a sequence of 14 positions)'
    """
    sizes = f"max_n={config.max_n}, max_d={config.max_d}, max_heads={config.max_heads}"
    return f"building U for {sizes} (a sequence of {config.layout.length:,} positions)"


def check_memory(config: SimulatorConfig, storage: str = "auto") -> None:
    """Refuses, before anything is built, a U whose estimated memory
    (:func:`~attnsim.simulator.config.memory_needed`) exceeds the memory available now.

    The message gives the estimate, the memory available and this machine's, and what to
    lower; for the scalar layout, the vector layout's estimate where that would fit.

    Raises:
        ModelTooLargeError: (a MemoryError and a ValueError) it does not fit.

    >>> check_memory(SimulatorConfig(2, 2))  # a few MiB: nothing to say
    >>> try:
    ...     check_memory(SimulatorConfig(1000, 1000, 1, layout_kind="scalar"))
    ... except MemoryError as exc:
    ...     print(str(exc)[:50])
    building U for max_n=1000, max_d=1000, max_heads=1
    """
    need = memory_needed(config, storage)
    if storage == "dense":
        basis = "one [pos, pos] score matrix of its dense attention"
    elif build_weight_bytes(config) >= need:
        basis = (
            f"{config.layout_kind.value} layout: its weights while building, at the bytes "
            "per position and unit of max_d measured on built sizes"
        )
    else:
        basis = (
            f"a simulation: about {VECTOR_STREAM_GROUPS} groups of max_d + 1 rows of its stream "
            "over n times the feed-forward's width, measured"
            if config.is_vector
            else f"a simulation: about {INPUT_COPIES} times its input's size as dense values, "
            "measured, and the compiler's position tables"
        )
    advice = "lower max_n, max_d or max_heads"
    if not config.is_vector:
        try:
            vector = memory_needed(dataclasses.replace(config, layout_kind="vector"))
        except ValueError:  # options the vector layout does not take
            vector = None
        if vector is not None and vector < need:
            advice += f", or build with layout='vector' (about {gib(vector)} at these sizes)"
    check_available(need, build_what(config), advice, basis)
