"""The compiled model's configuration: one frozen dataclass, every field explained."""

from __future__ import annotations

import enum
import math
from dataclasses import MISSING, dataclass, field, fields

from attnsim.values import is_int, is_real


class AttentionMode(str, enum.Enum):
    """How a head turns scores into weights."""

    HARD = "hard"  # average-hard attention: mean over the keys with the maximal score
    SOFTMAX = "softmax"  # softmax(beta * scores)


NATIVE_KINDS = ("exp", "log", "sqrt", "reciprocal", "rsqrt", "gelu", "gelu_tanh")


@dataclass(frozen=True)
class ModelConfig:
    """Sizes and modes of a compiled transformer.

    Attributes:
        n_layers: number of blocks (attention sublayer, then MLP sublayer).
        d_model: residual stream width.
        n_heads: heads per layer (unused heads have zero weights).
        d_head: width of each head's query/key and value spaces.
        d_mlp: ReLU units per layer (the most in any layer).
        mlp_widths: ReLU units in each layer, when they differ (a wide ReLU-realised map in
            one layer does not widen the others); None means d_mlp in every layer.
        d_bilinear: bilinear (product) units per layer.
        d_native: units per layer for each declared elementwise function (kind -> count).
        n_ctx: positions, BOS included (max_seq_len + 1).
        d_vocab: rows of the token embedding (categorical tokens and BOS).
        numerical_tokens: tokens also enter as a real value times a learned direction.
        bilinear_widths: bilinear units in each layer, when they differ; None means
            d_bilinear in every layer.
        head_shapes: ``(heads, d_head)`` of each layer, when layers differ (a layer with
            no head stores none); None means n_heads heads of width d_head in every layer.
        token_width: vector tokens: each position's token is a real vector of this width,
            entering through ``W_E_vec`` [token_width, d_model]; 0 for scalar tokens.
        attention: hard or softmax.
        beta: inverse temperature of softmax mode (scores are multiplied by it).
        hard_tolerance: in hard mode, keys within this of the best score count as best
            (the compiler keeps score gaps >= 0.5).
        causal: each query sees only keys at positions <= its own.
        dtype: "float64" or "float32".
    """

    n_layers: int
    d_model: int
    n_heads: int
    d_head: int
    d_mlp: int
    d_bilinear: int
    n_ctx: int
    d_vocab: int
    d_native: dict[str, int] = field(default_factory=dict)
    numerical_tokens: bool = False
    attention: AttentionMode = AttentionMode.HARD
    beta: float = 100.0
    hard_tolerance: float = 0.25
    causal: bool = False
    dtype: str = "float64"
    mlp_widths: tuple[int, ...] | None = None
    token_width: int = 0
    head_shapes: tuple[tuple[int, int], ...] | None = None
    bilinear_widths: tuple[int, ...] | None = None

    def bilinear_width(self, layer: int) -> int:
        """Bilinear units in block ``layer``.

        >>> cfg = ModelConfig(n_layers=2, d_model=1, n_heads=1, d_head=1, d_mlp=0,
        ...                   d_bilinear=3, n_ctx=2, d_vocab=2, bilinear_widths=(3, 0))
        >>> cfg.bilinear_width(0), cfg.bilinear_width(1)
        (3, 0)
        """
        return self.d_bilinear if self.bilinear_widths is None else self.bilinear_widths[layer]

    def head_shape(self, layer: int) -> tuple[int, int]:
        """``(heads, d_head)`` stored in block ``layer``.

        >>> cfg = ModelConfig(n_layers=2, d_model=1, n_heads=3, d_head=2, d_mlp=0,
        ...                   d_bilinear=0, n_ctx=2, d_vocab=2, head_shapes=((3, 1), (0, 0)))
        >>> cfg.head_shape(0), cfg.head_shape(1)
        ((3, 1), (0, 0))
        """
        if self.head_shapes is None:
            return self.n_heads, self.d_head
        return self.head_shapes[layer]

    def mlp_width(self, layer: int) -> int:
        """ReLU units in block ``layer``.

        >>> cfg = ModelConfig(n_layers=2, d_model=1, n_heads=1, d_head=1, d_mlp=5,
        ...                   d_bilinear=0, n_ctx=2, d_vocab=2, mlp_widths=(5, 0))
        >>> cfg.mlp_width(0), cfg.mlp_width(1)
        (5, 0)
        """
        return self.d_mlp if self.mlp_widths is None else self.mlp_widths[layer]

    def __post_init__(self) -> None:
        sizes = ("n_layers", "d_model", "n_heads", "d_head", "d_mlp", "d_bilinear", "n_ctx")
        for name in (*sizes, "d_vocab", "token_width"):
            value = getattr(self, name)
            if not is_int(value):
                raise TypeError(
                    f"ModelConfig.{name} must be an int, got {type(value).__name__} {value!r}"
                )
            if value < 0:
                raise ValueError(f"ModelConfig.{name} must be >= 0, got {value}")
        if self.n_ctx < 1 or self.d_vocab < 1:
            raise ValueError(
                f"ModelConfig needs n_ctx >= 1 and d_vocab >= 1, got {self.n_ctx}, {self.d_vocab}"
            )
        if not isinstance(self.d_native, dict):
            raise TypeError(
                f"ModelConfig.d_native must be a dict (kind -> units), got "
                f"{type(self.d_native).__name__} {self.d_native!r}"
            )
        unknown = set(self.d_native) - set(NATIVE_KINDS)
        if unknown:
            raise ValueError(
                f"unknown native units {sorted(unknown, key=repr)}; expected some of {NATIVE_KINDS}"
            )
        for kind, count in self.d_native.items():
            if not is_int(count) or count < 0:
                raise ValueError(
                    f"ModelConfig.d_native[{kind!r}] must be an int >= 0, got {count!r}"
                )
        for name in ("numerical_tokens", "causal"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(
                    f"ModelConfig.{name} must be True or False, got {getattr(self, name)!r}"
                )
        for name in ("beta", "hard_tolerance"):
            value = getattr(self, name)
            if not is_real(value) or not math.isfinite(value) or value <= 0:
                raise ValueError(
                    f"ModelConfig.{name} must be a positive finite number, got {value!r}"
                )
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"dtype must be 'float64' or 'float32', got {self.dtype!r}")
        try:
            object.__setattr__(self, "attention", AttentionMode(self.attention))
        except ValueError:
            raise ValueError(
                f"ModelConfig.attention must be 'hard' or 'softmax', got {self.attention!r}"
            ) from None
        for name, limit in (("mlp_widths", "d_mlp"), ("bilinear_widths", "d_bilinear")):
            widths = getattr(self, name)
            if widths is None:
                continue
            top = getattr(self, limit)
            if (
                not isinstance(widths, (tuple, list))
                or len(widths) != self.n_layers
                or not all(is_int(w) and 0 <= w <= top for w in widths)
            ):
                raise ValueError(
                    f"ModelConfig.{name} must give 0..{limit}={top} units for each of the "
                    f"{self.n_layers} layers, got {widths!r:.200}"
                )
            object.__setattr__(self, name, tuple(int(w) for w in widths))
        if self.head_shapes is not None:
            shapes = self.head_shapes
            ok = isinstance(shapes, (tuple, list)) and len(shapes) == self.n_layers
            ok = ok and all(
                isinstance(s, (tuple, list))
                and len(s) == 2
                and is_int(s[0])
                and is_int(s[1])
                and 0 <= s[0] <= self.n_heads
                and 0 <= s[1] <= self.d_head
                for s in shapes
            )
            if not ok:
                raise ValueError(
                    f"ModelConfig.head_shapes must give (0..n_heads={self.n_heads}, "
                    f"0..d_head={self.d_head}) for each of the {self.n_layers} layers, got "
                    f"{self.head_shapes!r:.200}"
                )
            object.__setattr__(self, "head_shapes", tuple((int(h), int(k)) for h, k in shapes))

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["attention"] = self.attention.value
        d["d_native"] = dict(self.d_native)
        if self.mlp_widths is not None:
            d["mlp_widths"] = list(self.mlp_widths)
        if self.head_shapes is not None:
            d["head_shapes"] = [list(s) for s in self.head_shapes]
        else:
            del d["head_shapes"]  # uniform heads: the config as before per-layer shapes
        if self.bilinear_widths is not None:
            d["bilinear_widths"] = list(self.bilinear_widths)
        else:
            del d["bilinear_widths"]
        return d

    @classmethod
    def from_json(cls, d: dict) -> ModelConfig:
        """The config saved by :meth:`to_json`.

        Raises:
            TypeError: ``d`` is not a dict, a field is of the wrong kind, or a field is
                missing or unknown.
            ValueError: a field has a bad value.
        """
        if not isinstance(d, dict):
            raise TypeError(f"a ModelConfig is stored as a JSON object, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        required = {
            f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING
        }
        if set(d) - known:
            raise TypeError(f"unknown ModelConfig fields {sorted(set(d) - known)}")
        if required - set(d):
            raise TypeError(f"missing ModelConfig fields {sorted(required - set(d))}")
        return cls(**d)
