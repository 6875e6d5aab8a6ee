"""Specs from torch layers: from a module (:func:`from_torch`) or from a file.

:func:`from_torch` reads a ``torch.nn.MultiheadAttention`` or a
``torch.nn.TransformerEncoderLayer`` into a spec (:mod:`attnsim.simulator.spec`).

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
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attnsim import values
from attnsim.simulator import exact_modules
from attnsim.simulator import spec as S

__all__ = ["from_torch", "SavedLayer", "read_layer", "ACTIVATIONS", "DEFAULT_LAYER_NORM_EPS"]

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
        if norm_first is not None:
            norm_first = given["norm_first"] = values.check_bool(norm_first, "norm_first")
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
    except (MemoryError, RecursionError):
        raise
    except Exception as exc:  # a text file, random bytes: pickle's own errors (KeyError, ...)
        text = str(exc) if not isinstance(exc, KeyError) else ""
        if not _torch_file(path):
            why = "it is not a file written by torch.save (neither a zip archive nor a pickle)"
        elif "Weights only load failed" in text or "Unsupported global" in text:
            why = (
                "it holds objects other than tensors and the supported torch modules, and "
                "they are not loaded (no code from the file is run)"
            )
        else:
            first = text.strip().splitlines()[0] if text.strip() else ""
            why = "it is not a file written by torch.save" + (f" ({first})" if first else "")
        raise ValueError(f"{path}: cannot be loaded: {why}") from None


def _torch_file(path: str) -> bool:
    """Whether ``path`` looks like what ``torch.save`` writes: a zip archive, or a pickle
    (the legacy format, which starts with the pickle protocol's mark)."""
    if zipfile.is_zipfile(path):
        return True
    with open(path, "rb") as f:
        return f.read(1) == b"\x80"


def _check_finite(tensors: dict[str, torch.Tensor], path: str) -> None:
    for name, t in tensors.items():
        if t.is_meta:
            raise ValueError(
                f"{path}: {name} is a meta tensor (a shape without values: the layer was built "
                f"on device='meta' and never given weights); save the state_dict of a layer "
                f"whose weights are set"
            )
        try:
            values.check_real(t, name)
        except TypeError:  # a float copy would keep the real parts only
            raise ValueError(
                f"{path}: {name} holds complex numbers ({t.dtype}); the weights of a layer U "
                "simulates are real, and a conversion would keep only their real parts: save "
                "real weights"
            ) from None
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


# --------------------------------------------------------------------------------------------
# specs from torch modules


def from_torch(
    module: nn.Module, *, causal: bool = False, rotary: Any = None, trust_subclass: bool = False
) -> S.AttentionSpec | S.EncoderLayerSpec:
    """Read a torch module's weights into a spec (float64 copies).

    Supported: ``nn.MultiheadAttention`` (self-attention, ``kdim == vdim == embed_dim``,
    with or without bias, ``batch_first`` either way) and ``nn.TransformerEncoderLayer``
    (``norm_first`` either way, activation ``"relu"``/``"gelu"`` or ``F.relu``/``F.gelu`` or
    ``nn.ReLU()``/``nn.GELU(approximate=...)``). Modules with dropout > 0 must be in eval mode.
    A mask is a call argument in torch, not part of the module: pass ``causal=True`` for a
    layer that is called with a causal mask. A LLaMA-style decoder layer (transformers'
    ``LlamaDecoderLayer``) is read by :func:`~attnsim.simulator.llama.from_llama`
    (read as causal, a decoder's mask; its rotary tables as ``rotary``).

    A subclass of those classes (or of the modules they call: ``nn.Linear``,
    ``nn.LayerNorm``, ``nn.Dropout``, ``nn.ReLU``, ``nn.GELU``) that redefines ``forward``
    or another method they run, or a module with forward hooks, is refused: U computes the
    torch class's own function, which such a module may not compute. ``trust_subclass=True``
    says that it does (for example a subclass that only logs).

    Args:
        module: the torch module.
        causal: whether the layer is used with a causal mask.
        rotary: a LLaMA layer's rotary tables (a ``RotarySpec``), or None.
        trust_subclass: read a subclass (or a module with hooks) as its torch base class.

    Returns:
        an ``AttentionSpec`` for ``nn.MultiheadAttention``, an ``EncoderLayerSpec`` for
        ``nn.TransformerEncoderLayer`` (:mod:`attnsim.simulator.spec`).

    Raises:
        TypeError: ``module`` is of another type, a subclass or a hooked module (without
            ``trust_subclass``), or a flag is not a bool.
        ValueError: an option is unsupported (named in the message).

    >>> from torch import nn
    >>> spec = from_torch(nn.MultiheadAttention(4, 2))
    >>> spec.n_heads, spec.d_head
    (2, 2)
    """
    causal = S._check_bool(causal, "from_torch causal")
    trust = values.check_bool(trust_subclass, "trust_subclass")
    if hasattr(module, "self_attn") and hasattr(getattr(module, "mlp", None), "gate_proj"):
        from attnsim.simulator.llama import from_llama

        return from_llama(module, rotary=rotary, causal=True, trust_subclass=trust)
    if isinstance(module, (nn.MultiheadAttention, nn.TransformerEncoderLayer)):
        exact_modules.check_parts(module, trust)
        for name, t in module.state_dict().items():  # a float copy would keep the real parts
            values.check_real(t, f"the module's {name}")
    if isinstance(module, nn.MultiheadAttention):
        return _from_multihead_attention(module, causal)
    if isinstance(module, nn.TransformerEncoderLayer):
        return _from_encoder_layer(module, causal)
    raise TypeError(
        f"from_torch supports nn.MultiheadAttention and nn.TransformerEncoderLayer, got "
        f"{type(module).__name__}; build the spec directly (AttentionSpec, EncoderLayerSpec)"
    )


def _reject_training_dropout(module: nn.Module, p: float, kind: str) -> None:
    if module.training and p > 0:
        raise ValueError(
            f"{kind} has dropout={p} and is in training mode, so its output is random; "
            f"call module.eval() (or build it with dropout=0.0) before from_torch"
        )


def _w(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().to(S.DTYPE)


def _from_multihead_attention(m: nn.MultiheadAttention, causal: bool) -> S.AttentionSpec:
    kind = "nn.MultiheadAttention"
    if not m._qkv_same_embed_dim or m.kdim != m.embed_dim or m.vdim != m.embed_dim:
        raise ValueError(
            f"{kind} with kdim={m.kdim}, vdim={m.vdim} different from embed_dim={m.embed_dim} "
            f"is not supported: the simulated layer is self-attention over one input X; "
            f"build it with kdim=vdim=embed_dim (or leave them None)"
        )
    if m.bias_k is not None or m.bias_v is not None:
        raise ValueError(
            f"{kind} with add_bias_kv=True is not supported: it appends a learned key/value "
            f"position that is not part of X; build it with add_bias_kv=False"
        )
    if m.add_zero_attn:
        raise ValueError(
            f"{kind} with add_zero_attn=True is not supported: it appends an all-zero "
            f"key/value position that is not part of X; build it with add_zero_attn=False"
        )
    _reject_training_dropout(m, m.dropout, kind)
    d, h, dh = m.embed_dim, m.num_heads, m.head_dim

    def heads(w: torch.Tensor) -> torch.Tensor:  # torch [h*dh, d] (out x in) -> [h, d, dh]
        return w.T.reshape(d, h, dh).permute(1, 0, 2)

    W_Q, W_K, W_V = (heads(w) for w in _w(m.in_proj_weight).chunk(3))
    b_Q = b_K = b_V = None
    if m.in_proj_bias is not None:
        b_Q, b_K, b_V = (b.reshape(h, dh) for b in _w(m.in_proj_bias).chunk(3))
    return S.AttentionSpec(
        W_Q=W_Q,
        W_K=W_K,
        W_V=W_V,
        W_O=_w(m.out_proj.weight).T.reshape(h, dh, d),  # [d, h*dh] (out x in) -> [h, dh, d]
        b_Q=b_Q,
        b_K=b_K,
        b_V=b_V,
        b_O=_w(m.out_proj.bias),
        causal=causal,
    )


def _activation_of(fn: Any) -> S.Activation:
    if fn is F.relu or fn is torch.relu or isinstance(fn, nn.ReLU):
        return S.Activation.RELU
    if fn is F.gelu:
        return S.Activation.GELU
    if isinstance(fn, nn.GELU):
        return S.Activation.GELU_TANH if fn.approximate == "tanh" else S.Activation.GELU
    raise ValueError(
        f"nn.TransformerEncoderLayer option activation={fn!r} is not supported; expected "
        f"'relu' or 'gelu' (as a string, F.relu/F.gelu, nn.ReLU() or nn.GELU()); for "
        f"'maxmin' build a FeedForwardSpec directly"
    )


def _layer_norm_of(norm: Any, name: str, d: int) -> S.LayerNormSpec:
    if not isinstance(norm, nn.LayerNorm) or tuple(norm.normalized_shape) != (d,):
        raise ValueError(
            f"nn.TransformerEncoderLayer option {name}={norm!r} is not supported; expected "
            f"nn.LayerNorm({d}) over the model width"
        )
    weight = _w(norm.weight) if norm.weight is not None else torch.ones(d, dtype=S.DTYPE)
    return S.LayerNormSpec(weight=weight, bias=_w(norm.bias), eps=norm.eps)


def _from_encoder_layer(layer: nn.TransformerEncoderLayer, causal: bool) -> S.EncoderLayerSpec:
    kind = "nn.TransformerEncoderLayer"
    for name in ("dropout", "dropout1", "dropout2"):  # each drops by its own mode
        drop = getattr(layer, name)
        if isinstance(drop, nn.Dropout):
            _reject_training_dropout(drop, drop.p, f"{kind} ({name})")
        elif not isinstance(drop, nn.Identity):
            raise ValueError(
                f"{kind} option {name} must be an nn.Dropout (or nn.Identity); got "
                f"{type(drop).__name__}"
            )
    attention = _from_multihead_attention(layer.self_attn, causal)
    d = attention.d_model
    for name in ("linear1", "linear2"):
        if not isinstance(getattr(layer, name), nn.Linear):
            raise ValueError(f"{kind} option {name} must be an nn.Linear; got a replacement")
    ffn = S.FeedForwardSpec(
        W1=_w(layer.linear1.weight).T,  # torch [d_mlp, d] (out x in) -> [d, d_mlp]
        b1=_w(layer.linear1.bias),
        W2=_w(layer.linear2.weight).T,  # [d, d_mlp] -> [d_mlp, d]
        b2=_w(layer.linear2.bias),
        activation=_activation_of(layer.activation),
    )
    # torch's fast path (eval, no gradients, batched) runs the activation the layer was
    # built with (its flag), not one set on it later
    built = {1: (S.Activation.RELU,), 2: (S.Activation.GELU, S.Activation.GELU_TANH)}
    flag = getattr(layer, "activation_relu_or_gelu", 0)
    if flag in built and ffn.activation not in built[flag]:
        raise ValueError(
            f"{kind}.activation was replaced after the layer was built: torch's fast path "
            f"still runs the one it was built with ({'relu' if flag == 1 else 'gelu'}), so "
            "the layer computes two functions; build the layer with the activation it uses"
        )
    return S.EncoderLayerSpec(
        attention=attention,
        ffn=ffn,
        norm1=_layer_norm_of(layer.norm1, "norm1", d),
        norm2=_layer_norm_of(layer.norm2, "norm2", d),
        norm_first=bool(layer.norm_first),
    )
