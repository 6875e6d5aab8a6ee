"""LLaMA-shaped decoder layers as target specs: from weights (:func:`llama_layer`) and from
transformers' ``LlamaDecoderLayer`` (:func:`from_llama`, which
:func:`attnsim.simulator.from_torch` calls for such a layer).

A LLaMA decoder layer is an :class:`~attnsim.simulator.spec.EncoderLayerSpec`: pre-norm, two
:class:`~attnsim.simulator.spec_modern.RMSNormSpec`, causal attention without biases with a
:class:`~attnsim.simulator.spec_modern.RotarySpec`, and a SwiGLU feed-forward.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from attnsim.simulator import spec as S
from attnsim.simulator import spec_checks
from attnsim.simulator.exact_modules import global_hooks, has_hooks
from attnsim.simulator.spec_checks import DTYPE, Tensor
from attnsim.simulator.spec_modern import RMSNormSpec, RotarySpec

__all__ = ["llama_layer", "from_llama", "llama_forward", "random_weights"]


def random_weights(
    d_model: int, d_ff: int, generator: torch.Generator, *, norm_std: float = 0.2
) -> dict[str, Tensor]:
    """Random float64 weights of a LLaMA layer in the layout :func:`llama_layer` and
    :func:`llama_forward` read: projections with entries of standard deviation
    ``1/sqrt(fan_in)``, norm gains ``1 + N(0, norm_std^2)``, drawn from ``generator`` in the
    order q, k, v, o, gate, up, down, norm1, norm2.

    >>> w = random_weights(4, 6, torch.Generator().manual_seed(0))
    >>> {k: tuple(v.shape) for k, v in w.items()}["gate"], len(w)
    ((6, 4), 9)
    """

    def r(*shape: int, std: float) -> Tensor:
        return torch.randn(*shape, generator=generator, dtype=DTYPE) * std

    d, f = d_model, d_ff
    w = {c: r(d, d, std=d**-0.5) for c in "qkvo"}
    w |= {"gate": r(f, d, std=d**-0.5), "up": r(f, d, std=d**-0.5), "down": r(d, f, std=f**-0.5)}
    w |= {"norm1": 1 + r(d, std=norm_std), "norm2": 1 + r(d, std=norm_std)}
    return w


def llama_layer(
    d_model: int,
    n_heads: int,
    d_ff: int,
    *,
    weights: dict[str, Any],
    eps: float = 1e-6,
    base: float = 10000.0,
    causal: bool = True,
    rotary: RotarySpec | None = None,
) -> Any:
    """A LLaMA-shaped decoder layer (pre-RMSNorm, causal rotary attention without biases,
    SwiGLU feed-forward without biases) from weights in torch's ``nn.Linear`` layout.

    Args:
        d_model, n_heads, d_ff: sizes (``d_head = d_model / n_heads``).
        weights: ``q, k, v, o`` ``[d_model, d_model]``, ``gate, up`` ``[d_ff, d_model]``,
            ``down`` ``[d_model, d_ff]`` (each ``out_features x in_features``), ``norm1,
            norm2`` ``[d_model]``.
        eps: the RMSNorm eps; base: the rotary base (ignored when ``rotary`` is given);
        causal: causal attention (a decoder's); rotary: explicit tables.

    Returns:
        An :class:`~attnsim.simulator.spec.EncoderLayerSpec`.

    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> w = {k: torch.randn(4, 4, generator=g) for k in "qkvo"}
    >>> w |= {"gate": torch.randn(6, 4, generator=g), "up": torch.randn(6, 4, generator=g),
    ...       "down": torch.randn(4, 6, generator=g), "norm1": torch.ones(4),
    ...       "norm2": torch.ones(4)}
    >>> layer = llama_layer(4, 2, 6, weights=w)
    >>> layer.norm_first, layer.ffn.gated, layer.ffn.activation.value, layer.attention.causal
    (True, True, 'silu', True)
    """
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} must be a multiple of n_heads={n_heads}")
    dh = d_model // n_heads
    weights = _llama_weights(weights, d_model, d_ff)

    def heads(w: Tensor) -> Tensor:  # [h * dh, d] (out x in) -> [h, d, dh]
        w = torch.as_tensor(w, dtype=DTYPE)
        return w.reshape(n_heads, dh, d_model).transpose(1, 2)

    attention = S.AttentionSpec(
        W_Q=heads(weights["q"]),
        W_K=heads(weights["k"]),
        W_V=heads(weights["v"]),
        W_O=torch.as_tensor(weights["o"], dtype=DTYPE).T,
        causal=causal,
        scale=1.0 / math.sqrt(dh),
        rotary=RotarySpec(base=base) if rotary is None else rotary,
    )
    ffn = S.FeedForwardSpec(
        W1=torch.as_tensor(weights["gate"], dtype=DTYPE).T,
        W3=torch.as_tensor(weights["up"], dtype=DTYPE).T,
        W2=torch.as_tensor(weights["down"], dtype=DTYPE).T,
        activation="silu",
    )
    return S.EncoderLayerSpec(
        attention=attention,
        ffn=ffn,
        norm1=RMSNormSpec(weights["norm1"], eps),
        norm2=RMSNormSpec(weights["norm2"], eps),
        norm_first=True,
    )


def _llama_weights(weights: Any, d_model: int, d_ff: int) -> dict[str, Tensor]:
    """``llama_layer``'s weights checked: every name present, none unknown, each of its
    ``nn.Linear`` shape (out x in), as float64 tensors."""
    d, f = d_model, d_ff
    shapes = {
        "q": ((d, d), "[d_model, d_model]"),
        "k": ((d, d), "[d_model, d_model]"),
        "v": ((d, d), "[d_model, d_model]"),
        "o": ((d, d), "[d_model, d_model]"),
        "gate": ((f, d), "[d_ff, d_model]"),
        "up": ((f, d), "[d_ff, d_model]"),
        "down": ((d, f), "[d_model, d_ff]"),
        "norm1": ((d,), "[d_model]"),
        "norm2": ((d,), "[d_model]"),
    }
    if not isinstance(weights, Mapping):
        raise TypeError(
            f"llama_layer weights must be a dict of {', '.join(shapes)}, got "
            f"{type(weights).__name__}"
        )
    missing = [k for k in shapes if k not in weights]
    unknown = sorted(str(k) for k in weights if k not in shapes)
    if missing or unknown:
        said = [f"missing {', '.join(missing)}"] if missing else []
        said += [f"unknown {', '.join(unknown)}"] if unknown else []
        raise ValueError(
            f"llama_layer needs exactly the weights {', '.join(shapes)}; {'; '.join(said)} "
            "(from a LlamaDecoderLayer, use from_llama(layer))"
        )
    out = {}
    for name, (shape, names) in shapes.items():
        where = f"llama_layer weight {name!r}"
        t = spec_checks._tensor(weights[name], where)
        if tuple(t.shape) != shape:
            linear = " (out_features x in_features, as nn.Linear stores it)" * (len(shape) == 2)
            raise ValueError(
                f"{where} must have shape {names} = {shape}{linear}, got {tuple(t.shape)}; "
                f"d_model={d_model}, d_ff={d_ff}"
            )
        out[name] = t
    return out


def from_llama(
    module: Any,
    *,
    rotary: RotarySpec | None = None,
    causal: bool = True,
    trust_subclass: bool = False,
) -> Any:
    """Read a LLaMA-style decoder layer (transformers' ``LlamaDecoderLayer`` and layers of the
    same shape: ``self_attn.{q,k,v,o}_proj``, ``mlp.{gate,up,down}_proj`` with a SiLU,
    ``input_layernorm`` and ``post_attention_layernorm`` RMSNorms) into an
    :class:`~attnsim.simulator.spec.EncoderLayerSpec` (float64 copies).

    Args:
        module: the layer.
        rotary: the rotary tables the model hands the layer (``RotarySpec(cos=..., sin=...)``,
            as its rotary module makes them); None: the standard tables from the config's
            base (``rope_theta``).
        causal: the layer's mask (a decoder's is causal).
        trust_subclass: read a layer whose modules have forward hooks as if it had none.

    Grouped keys and values (fewer key/value heads than heads, as transformers'
    ``repeat_kv`` shares them) become one key and value head per head, each a copy of its
    group's: the same computation, with entries copied.

    Raises:
        ValueError: heads that do not divide into the key/value groups, an activation other
            than SiLU, a rotary kind other than the default without tables, parts LLaMA's
            layer does not have (q_norm and k_norm, extra feed-forward norms), or dropout
            in training mode.
        TypeError: a module of the layer has forward hooks (without ``trust_subclass``).

    A stand-in with the same attributes (transformers' own layer reads the same way):

    >>> from types import SimpleNamespace as NS
    >>> from torch import nn
    >>> lin = lambda i, o: nn.Linear(i, o, bias=False).double()
    >>> cfg = NS(num_attention_heads=2, num_key_value_heads=1, hidden_act="silu",
    ...          rope_parameters={"rope_theta": 100.0})
    >>> att = NS(q_proj=lin(4, 4), k_proj=lin(4, 2), v_proj=lin(4, 2), o_proj=lin(4, 4),
    ...          config=cfg)
    >>> norm = NS(weight=torch.ones(4), variance_epsilon=1e-6)
    >>> layer = NS(self_attn=att, mlp=NS(gate_proj=lin(4, 6), up_proj=lin(4, 6),
    ...            down_proj=lin(6, 4)), input_layernorm=norm, post_attention_layernorm=norm)
    >>> spec = from_llama(layer)
    >>> spec.attention.n_heads, spec.attention.rotary.base, spec.ffn.gated
    (2, 100.0, True)
    >>> bool(torch.equal(spec.attention.W_K[0], spec.attention.W_K[1]))  # one shared head
    True
    """
    att, mlp = module.self_attn, module.mlp
    cfg = getattr(att, "config", None)
    _check_parts(module, att, mlp, cfg, bool(trust_subclass))
    h = int(getattr(cfg, "num_attention_heads", 0) or att.num_heads)
    kv = int(getattr(cfg, "num_key_value_heads", h) or h)
    if h % kv:
        raise ValueError(
            f"the layer has {h} heads and {kv} key/value heads; each key/value head must "
            "serve the same number of heads (num_attention_heads a multiple of "
            "num_key_value_heads)"
        )
    for key in ("hidden_act", "hidden_activation"):  # (transformers' names for it)
        act = getattr(cfg, key, None) or "silu"
        if act != "silu":
            raise ValueError(
                f"the layer's feed-forward uses {act!r}; from_llama reads SiLU (SwiGLU)"
            )
    if rotary is None:
        params = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
        kind = params.get("rope_type", params.get("type", "default"))
        if kind != "default":
            raise ValueError(
                f"the layer's rotary embeddings are of kind {kind!r}: pass their tables "
                "(rotary=RotarySpec(cos=..., sin=...)) as the model computes them"
            )
        rotary = RotarySpec(base=float(params.get("rope_theta", getattr(cfg, "rope_theta", 1e4))))

    def w(lin) -> Tensor:
        return lin.weight.detach().to(DTYPE)

    def b(lin) -> Tensor | None:
        return None if lin.bias is None else lin.bias.detach().to(DTYPE)

    d = w(att.q_proj).shape[1]
    dh = w(att.q_proj).shape[0] // h

    def heads(lin) -> Tensor:  # [heads of lin, d, dh], each key/value head repeated
        out = w(lin).reshape(-1, dh, d).transpose(1, 2)
        return out.repeat_interleave(h // out.shape[0], dim=0)

    def head_bias(lin) -> Tensor | None:
        if lin.bias is None:
            return None
        out = b(lin).reshape(-1, dh)
        return out.repeat_interleave(h // out.shape[0], dim=0)

    attention = S.AttentionSpec(
        W_Q=heads(att.q_proj),
        W_K=heads(att.k_proj),
        W_V=heads(att.v_proj),
        W_O=w(att.o_proj).T,
        b_Q=head_bias(att.q_proj),
        b_K=head_bias(att.k_proj),
        b_V=head_bias(att.v_proj),
        b_O=b(att.o_proj),
        causal=causal,
        scale=float(getattr(att, "scaling", dh**-0.5)),
        rotary=rotary,
    )
    ffn = S.FeedForwardSpec(
        W1=w(mlp.gate_proj).T,
        b1=b(mlp.gate_proj),
        W3=w(mlp.up_proj).T,
        b3=b(mlp.up_proj),
        W2=w(mlp.down_proj).T,
        b2=b(mlp.down_proj),
        activation="silu",
    )
    norms = [
        RMSNormSpec(n.weight.detach().to(DTYPE), float(n.variance_epsilon))
        for n in (module.input_layernorm, module.post_attention_layernorm)
    ]
    return S.EncoderLayerSpec(attention, ffn, norms[0], norms[1], norm_first=True)


def _check_parts(module: Any, att: Any, mlp: Any, cfg: Any, trust: bool) -> None:
    """Refuses what :func:`from_llama` would not read: parts beyond LLaMA's (a Qwen3 or
    Gemma layer's query and key norms, Gemma's extra feed-forward norms), an activation
    module other than SiLU, dropout in training mode, and forward hooks on any of the
    layer's modules or on every module (torch's global hooks) unless ``trust``."""
    extra = [f"self_attn.{n}" for n in ("q_norm", "k_norm") if getattr(att, n, None) is not None]
    extra += [
        n
        for n in ("pre_feedforward_layernorm", "post_feedforward_layernorm")
        if getattr(module, n, None) is not None
    ]
    if extra:
        raise ValueError(
            f"the layer has {', '.join(extra)}, which LLaMA's layer does not: from_llama reads "
            "LLaMA's parts only; build the layer's spec (EncoderLayerSpec) directly"
        )
    act = getattr(mlp, "act_fn", None)
    if act is not None and not (
        act is torch.nn.functional.silu or type(act).__name__ in ("SiLU", "SiLUActivation")
    ):
        raise ValueError(
            f"the layer's mlp.act_fn is {act!r}; from_llama reads SiLU (SwiGLU): build the "
            "layer's spec (EncoderLayerSpec with its FeedForwardSpec) directly"
        )
    if getattr(module, "training", False) and float(getattr(cfg, "attention_dropout", 0) or 0):
        raise ValueError(
            "the layer is in training mode with attention_dropout > 0, so its output is "
            "random; call module.eval() first"
        )
    if trust:
        return
    parts = [module, att, mlp, getattr(mlp, "act_fn", None)]
    parts += [getattr(att, f"{n}_proj", None) for n in "qkvo"]
    parts += [getattr(mlp, f"{n}_proj", None) for n in ("gate", "up", "down")]
    parts += [getattr(module, n, None) for n in ("input_layernorm", "post_attention_layernorm")]
    hooked = [type(m).__name__ for m in parts if isinstance(m, torch.nn.Module) and has_hooks(m)]
    if hooked:
        where = "every module (global hooks)" if global_hooks() else f"its {', '.join(hooked)}"
        raise TypeError(
            f"forward hooks on {where} may change the layer's output, which from_llama "
            "reads from the weights alone: pass trust_subclass=True if they only log or check"
        )


def llama_forward(
    weights: dict[str, Any], X: Tensor, n_heads: int, *, base: float = 10000.0, eps: float = 1e-6
) -> Tensor:
    """One LLaMA decoder layer written from its definition in plain float64 torch (no spec,
    no module): pre-RMSNorm, causal attention with rotate-half rotary embeddings, SwiGLU.
    A second oracle beside :mod:`attnsim.simulator.reference`, from the same weights
    :func:`llama_layer` reads (``nn.Linear`` layout: ``y = x W^T``).

    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> w = {k: torch.randn(4, 4, generator=g, dtype=torch.float64) for k in "qkvo"}
    >>> w |= {"gate": torch.randn(6, 4, generator=g, dtype=torch.float64),
    ...       "up": torch.randn(6, 4, generator=g, dtype=torch.float64),
    ...       "down": torch.randn(4, 6, generator=g, dtype=torch.float64),
    ...       "norm1": torch.ones(4, dtype=torch.float64),
    ...       "norm2": torch.ones(4, dtype=torch.float64)}
    >>> X = torch.randn(3, 4, generator=g, dtype=torch.float64)
    >>> from attnsim.simulator import reference
    >>> want = reference.reference(llama_layer(4, 2, 6, weights=w), X)
    >>> bool((llama_forward(w, X, 2) - want).abs().max() < 1e-12)
    True
    """
    n, d = X.shape
    dh = d // n_heads

    def rms(x: Tensor, weight: Tensor) -> Tensor:
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    inv = 1.0 / base ** (torch.arange(0, dh, 2, dtype=DTYPE) / dh)
    ang = torch.arange(n, dtype=DTYPE)[:, None] * inv[None]
    ang = torch.cat([ang, ang], -1)
    cos, sin = ang.cos(), ang.sin()

    def rope(t: Tensor) -> Tensor:  # [heads, n, dh]
        t1, t2 = t[..., : dh // 2], t[..., dh // 2 :]
        return t * cos + torch.cat([-t2, t1], -1) * sin

    h = rms(X, weights["norm1"])
    q, k, v = ((h @ weights[c].T).reshape(n, n_heads, dh).transpose(0, 1) for c in "qkv")
    s = rope(q) @ rope(k).transpose(1, 2) / math.sqrt(dh)
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    Y = X + (torch.softmax(s, -1) @ v).transpose(0, 1).reshape(n, d) @ weights["o"].T
    h2 = rms(Y, weights["norm2"])
    gate = h2 @ weights["gate"].T
    return Y + ((gate * torch.sigmoid(gate)) * (h2 @ weights["up"].T)) @ weights["down"].T
