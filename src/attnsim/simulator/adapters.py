"""Torch layers saved to a file, read back without running any code from the file.

A file holds either a whole module (``torch.save(module, FILE)``) or its weights
(``torch.save(module.state_dict(), FILE)``), of ``torch.nn.MultiheadAttention`` or
``torch.nn.TransformerEncoderLayer``. Both are read with ``torch.load(weights_only=True)``;
a whole module is accepted only when it is built from those classes, ``nn.Linear``,
``nn.LayerNorm``, ``nn.Dropout``, ``nn.ReLU``/``nn.GELU`` and ``F.relu``/``F.gelu``.

A whole module records everything. A state_dict records the weights, and so the width
``d``, the feed-forward width and whether there are biases, but not the number of heads
(the heads split the same matrices), the activation, pre- or post-norm, or the LayerNorm
eps. :func:`read_layer` says what the file records (``None`` for what it does not), and
:meth:`SavedLayer.module` rebuilds the module from the file plus the missing facts.

>>> import tempfile, torch
>>> path = tempfile.mkdtemp() + "/mha.pt"
>>> torch.save(torch.nn.MultiheadAttention(4, 2).state_dict(), path)
>>> saved = read_layer(path)
>>> saved.kind, saved.d_model, saved.heads, saved.is_state_dict
('attention', 4, None, True)
>>> saved.module(heads=2).num_heads
2
"""

from __future__ import annotations

import contextlib
import pickle
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["SavedLayer", "read_layer", "ACTIVATIONS", "DEFAULT_LAYER_NORM_EPS"]

ACTIVATIONS = ("relu", "gelu", "gelu_tanh")  # what an encoder layer's feed-forward may use
DEFAULT_LAYER_NORM_EPS = 1e-5  # torch.nn.TransformerEncoderLayer's default

_MHA_KEYS = {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}
_ENCODER_KEYS = {f"self_attn.{k}" for k in _MHA_KEYS} | {
    f"{m}.{p}" for m in ("linear1", "linear2", "norm1", "norm2") for p in ("weight", "bias")
}


def _safe_classes() -> list[Any]:
    from torch.nn.modules.linear import NonDynamicallyQuantizableLinear

    return [
        nn.MultiheadAttention,
        nn.TransformerEncoderLayer,
        nn.Linear,
        NonDynamicallyQuantizableLinear,
        nn.LayerNorm,
        nn.Dropout,
        nn.ReLU,
        nn.GELU,
        F.relu,
        F.gelu,
    ]


@dataclass(frozen=True)
class SavedLayer:
    """What a layer file records. ``None`` marks a fact the file does not record.

    Attributes:
        path: the file.
        kind: "attention" (nn.MultiheadAttention) or "encoder" (nn.TransformerEncoderLayer).
        d_model: the width d.
        d_ff: the feed-forward width (encoder), else None.
        bias: whether the layer has biases.
        heads: the number of heads (None for a state_dict).
        activation: "relu", "gelu" or "gelu_tanh" (encoder, whole module), else None.
        norm_first: pre-norm (encoder, whole module), else None.
        layer_norm_eps: the LayerNorms' eps (encoder, whole module), else None.
    """

    path: str
    kind: str
    d_model: int
    d_ff: int | None
    bias: bool
    heads: int | None
    activation: str | None
    norm_first: bool | None
    layer_norm_eps: float | None
    _state: dict[str, torch.Tensor] | None = field(default=None, repr=False)
    _module: nn.Module | None = field(default=None, repr=False)

    @property
    def is_state_dict(self) -> bool:
        """True for a state_dict (weights only), False for a whole module."""
        return self._module is None

    def module(
        self,
        *,
        heads: int | None = None,
        activation: str | None = None,
        norm_first: bool | None = None,
        layer_norm_eps: float | None = None,
    ) -> nn.Module:
        """The layer as a float64 torch module in eval mode.

        Args:
            heads, activation, norm_first, layer_norm_eps: the facts the file does not
                record; each must be given for a state_dict (``layer_norm_eps`` defaults to
                torch's 1e-5) and, when given, must agree with a whole module.

        Raises:
            ValueError: a fact is missing, disagrees with the file, or does not fit it.
        """
        given = {
            "heads": heads,
            "activation": activation,
            "norm_first": norm_first,
            "layer_norm_eps": layer_norm_eps,
        }
        if self.kind == "attention":
            extra = [k for k in ("activation", "norm_first", "layer_norm_eps") if given[k]]
            if extra:
                raise ValueError(
                    f"{', '.join(extra)} apply to encoder layers; {self.path} holds an "
                    f"nn.MultiheadAttention"
                )
        for name, value in given.items():
            recorded = getattr(self, name)
            if value is not None and recorded is not None and value != recorded:
                raise ValueError(
                    f"{name}={value!r} disagrees with {self.path}, which has {recorded!r}"
                )
        if self._module is not None:
            return self._module
        state = self._state
        assert state is not None
        if heads is None:
            raise ValueError(
                f"{self.path} is a state_dict, which does not record the number of heads; "
                f"give heads (a divisor of d={self.d_model})"
            )
        if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
            raise ValueError(f"heads must be a positive integer, got {heads!r}")
        if self.d_model % heads:
            raise ValueError(
                f"heads={heads} does not divide the width d={self.d_model} of {self.path}; "
                f"choose one of {divisors(self.d_model)}"
            )
        if self.kind == "attention":
            module: nn.Module = nn.MultiheadAttention(
                self.d_model, heads, bias=self.bias, dtype=torch.float64
            )
        else:
            if activation is None or norm_first is None:
                missing = [k for k in ("activation", "norm_first") if given[k] is None]
                raise ValueError(
                    f"{self.path} is a state_dict, which does not record "
                    f"{' or '.join(missing)}; give them"
                )
            if activation not in ACTIVATIONS:
                raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
            act: Any = {"relu": "relu", "gelu": "gelu", "gelu_tanh": nn.GELU("tanh")}[activation]
            eps = DEFAULT_LAYER_NORM_EPS if layer_norm_eps is None else float(layer_norm_eps)
            module = nn.TransformerEncoderLayer(
                self.d_model,
                heads,
                dim_feedforward=self.d_ff,
                dropout=0.0,
                activation=act,
                layer_norm_eps=eps,
                norm_first=bool(norm_first),
                bias=self.bias,
                dtype=torch.float64,
            )
        try:
            module.load_state_dict({k: v.to(torch.float64) for k, v in state.items()})
        except RuntimeError as exc:  # missing or unexpected keys, wrong shapes
            raise ValueError(
                f"{self.path}: the weights do not fit a {type(module).__name__}: "
                f"{' '.join(str(exc).split())}"
            ) from None
        return module.eval()


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` (the head counts a width allows).

    >>> divisors(12)
    [1, 2, 3, 4, 6, 12]
    """
    return [k for k in range(1, n + 1) if n % k == 0]


def _load(path: str) -> Any:
    safe = getattr(torch.serialization, "safe_globals", None)
    scope = safe(_safe_classes()) if safe is not None else contextlib.nullcontext()
    try:
        with scope, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. about the pickle protocol of the file
            return torch.load(path, weights_only=True, map_location="cpu")
    except OSError:
        raise
    except (pickle.UnpicklingError, RuntimeError, ValueError, EOFError, AttributeError) as exc:
        text = str(exc)
        if "Weights only load failed" in text or "Unsupported global" in text:
            why = (
                "it holds objects other than tensors and the supported torch modules, and "
                "they are not loaded (no code from the file is run)"
            )
        else:
            first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
            why = f"it is not a file written by torch.save ({first})"
        raise ValueError(f"{path}: cannot be loaded: {why}") from None


def _check_finite(tensors: dict[str, torch.Tensor], path: str) -> None:
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise ValueError(
                f"{path}: {name} has {bad} NaN or infinite entr{'y' if bad == 1 else 'ies'}; "
                f"a layer with non-finite weights has no defined output: check how it was "
                f"trained or saved"
            )


def _activation_name(fn: Any) -> str | None:
    if fn is F.relu or isinstance(fn, nn.ReLU):
        return "relu"
    if fn is F.gelu:
        return "gelu"
    if isinstance(fn, nn.GELU):
        return "gelu_tanh" if fn.approximate == "tanh" else "gelu"
    return None


def _from_module(module: nn.Module, path: str) -> SavedLayer:
    try:
        module.eval()  # a saved module is simulated as it runs in eval mode (dropout off)
        _check_finite(dict(module.state_dict()), path)
        if type(module) is nn.MultiheadAttention:
            return SavedLayer(
                path=path,
                kind="attention",
                d_model=int(module.embed_dim),
                d_ff=None,
                bias=module.in_proj_bias is not None,
                heads=int(module.num_heads),
                activation=None,
                norm_first=None,
                layer_norm_eps=None,
                _module=module.double(),
            )
        if type(module) is nn.TransformerEncoderLayer:
            activation = _activation_name(module.activation)
            if activation is None:
                raise ValueError(
                    f"{path}: the encoder layer's activation {module.activation!r} is not "
                    f"supported; expected relu or gelu"
                )
            return SavedLayer(
                path=path,
                kind="encoder",
                d_model=int(module.self_attn.embed_dim),
                d_ff=int(module.linear1.out_features),
                bias=module.linear1.bias is not None,
                heads=int(module.self_attn.num_heads),
                activation=activation,
                norm_first=bool(module.norm_first),
                layer_norm_eps=float(module.norm1.eps),
                _module=module.double(),
            )
    except AttributeError as exc:  # a module pickled without the attributes torch sets
        raise ValueError(f"{path}: the saved module is incomplete ({exc})") from None
    raise ValueError(
        f"{path} holds a {type(module).__name__}; expected an nn.MultiheadAttention or an "
        f"nn.TransformerEncoderLayer (the module or its state_dict)"
    )


def read_layer(path: str | Path) -> SavedLayer:
    """Reads a saved MultiheadAttention or TransformerEncoderLayer (module or state_dict).

    Args:
        path: the file ``torch.save`` wrote.

    Returns:
        What the file records, with ``None`` for what it does not.

    Raises:
        OSError: the file cannot be read.
        ValueError: it is not a saved layer, holds objects that are not loaded, or its
            weights are not finite (the message says which).
    """
    path = str(path)
    obj = _load(path)
    if isinstance(obj, nn.Module):
        return _from_module(obj, path)
    if not isinstance(obj, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()
    ):
        raise ValueError(
            f"{path} does not hold a state_dict or a module; save one with "
            f"torch.save(module.state_dict(), FILE)"
        )
    state: dict[str, torch.Tensor] = dict(obj)
    _check_finite(state, path)
    if "in_proj_weight" in state or "self_attn.in_proj_weight" in state:
        kind = "attention" if "in_proj_weight" in state else "encoder"
        prefix = "" if kind == "attention" else "self_attn."
        known = _MHA_KEYS if kind == "attention" else _ENCODER_KEYS
        unknown = sorted(set(state) - known)
        if unknown:
            hint = ""
            if any(k.endswith(("bias_k", "bias_v")) for k in unknown):
                hint = " (add_bias_kv=True is not supported)"
            cls = "nn.MultiheadAttention" if kind == "attention" else "nn.TransformerEncoderLayer"
            raise ValueError(
                f"{path}: unexpected keys {', '.join(unknown)} for the state_dict of an "
                f"{cls}{hint}; save the layer's own state_dict"
            )
        w = state[prefix + "in_proj_weight"]
        if w.ndim != 2 or w.shape[0] != 3 * w.shape[1] or w.shape[1] < 1:
            raise ValueError(
                f"{path}: {prefix}in_proj_weight has shape {tuple(w.shape)}; expected "
                f"[3 d, d] (query, key and value projections stacked)"
            )
        d_ff = None
        if kind == "encoder":
            w1 = state.get("linear1.weight")
            if w1 is None or w1.ndim != 2:
                raise ValueError(f"{path}: linear1.weight is missing or not a matrix")
            d_ff = int(w1.shape[0])
        return SavedLayer(
            path=path,
            kind=kind,
            d_model=int(w.shape[1]),
            d_ff=d_ff,
            bias=(prefix + "in_proj_bias") in state,
            heads=None,
            activation=None,
            norm_first=None,
            layer_norm_eps=None,
            _state=state,
        )
    if any(k.endswith(("q_proj_weight", "k_proj_weight")) for k in state):
        raise ValueError(
            f"{path}: separate q/k/v projections (kdim or vdim different from embed_dim) are "
            f"not supported: the simulated layer is self-attention over one input X"
        )
    nested = sorted({k.split(".self_attn.")[0] for k in state if ".self_attn." in k})
    hint = (
        f"; it seems to hold a larger model (layers {', '.join(nested[:4])}): save one "
        f"layer's state_dict"
        if nested
        else ""
    )
    raise ValueError(
        f"{path} is not the state_dict of an nn.MultiheadAttention or an "
        f"nn.TransformerEncoderLayer (it has no in_proj_weight){hint}"
    )
