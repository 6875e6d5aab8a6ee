"""Export a compiled model to TransformerLens (``HookedTransformer``), weights unchanged.

TransformerLens runs standard softmax transformers, so a model exports when it was compiled
with ``attention="softmax"``, reads categorical tokens only (no numerical token direction)
and its MLPs use ReLU units only (no bilinear or declared elementwise units). The mapping:

| attnsim                           | TransformerLens                                    |
|-----------------------------------|----------------------------------------------------|
| ``W_E`` (row 0 is BOS)            | ``embed.W_E`` (token id 0 is BOS)                  |
| ``W_pos``                         | ``pos_embed.W_pos`` (standard positional embedding) |
| ``blocks.l.attn.W_Q`` * beta      | ``blocks.l.attn.W_Q`` (``use_attn_scale=False``)   |
| ``W_K``, ``W_V``, ``W_O``         | the same names; all biases zero                    |
| ``blocks.l.mlp.W_in``/``W_out``   | the same names, ``act_fn="relu"``, biases zero     |
| no layer norm                     | ``normalization_type=None``                        |
| final residual stream             | logits through ``unembed.W_U`` = identity          |

The unembedding is the identity, so the "logits" are the final residual stream and
:func:`run_lens` decodes them with the compiled model's output spec, exactly as
:meth:`CompiledModel.run` does.

TransformerLens (versions 2 and 3, which have ``HookedTransformer``; version 4 removed it) is
the optional extra ``lens`` (``pip install 'attnsim[lens]'``); it is imported only when a
function here is called.

>>> from attnsim.compiler import compile_program
>>> from attnsim.rasp import library
>>> hard = compile_program(library.make_hist(), vocab=["a", "b"], max_seq_len=4)
>>> check_exportable(hard)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: TransformerLens runs softmax attention, but this model uses attention='hard'; ...
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch

from attnsim.model.compiled import CompiledModel
from attnsim.model.config import AttentionMode
from attnsim.model.onnx_export import run_onnx, to_onnx  # ONNX export, re-exported

__all__ = [
    "check_exportable",
    "lens_config",
    "to_transformer_lens",
    "compressed_to_transformer_lens",
    "attach_ground_truth",
    "run_lens",
    "hook_labels",
    "to_onnx",
    "run_onnx",
]


def check_exportable(model: CompiledModel) -> None:
    """Raises ValueError unless ``model`` maps exactly onto a TransformerLens model.

    Args:
        model: a compiled model.

    Raises:
        TypeError: ``model`` is not a CompiledModel.
        ValueError: hard attention, numerical tokens, or bilinear or declared elementwise
            (native) MLP units in use; the message says which and what to do.

    >>> from attnsim.compiler import compile_program
    >>> from attnsim.rasp import library
    >>> soft = compile_program(library.make_hist(), vocab=["a", "b"], max_seq_len=4,
    ...                        attention="softmax")
    >>> check_exportable(soft) is None
    True
    """
    if not isinstance(model, CompiledModel):
        raise TypeError(f"expected a CompiledModel, got {type(model).__name__}")
    model.dense_only("the TransformerLens export")
    cfg = model.config
    if cfg.attention is not AttentionMode.SOFTMAX:
        raise ValueError(
            "TransformerLens runs softmax attention, but this model uses "
            f"attention={cfg.attention.value!r}; compile it with "
            "compile_program(..., attention='softmax') to export it"
        )
    if model.numerical_tokens or cfg.token_width:
        raise ValueError(
            "this model reads real-valued tokens (a numerical token direction or vector "
            "tokens), which "
            "TransformerLens's token embedding cannot carry; only programs over a categorical "
            "vocabulary export"
        )
    used = []
    for i, block in enumerate(model.model.blocks):
        mlp = block.mlp
        if mlp.W_bil_out.numel() and bool((mlp.W_bil_out != 0).any()):
            used.append(f"layer {i}: {mlp.W_bil_out.shape[0]} bilinear units")
        for kind in mlp.native_kinds:
            w = getattr(mlp, f"W_{kind}_out")
            if bool((w != 0).any()):
                used.append(f"layer {i}: {w.shape[0]} native {kind!r} units")
    if used:
        raise ValueError(
            "TransformerLens MLPs have ReLU units only, but this model also uses "
            + ", ".join(used)
            + "; export programs whose maps compile to ReLU units (categorical maps, "
            "piecewise-linear numerical maps)"
        )


def lens_config(model: CompiledModel) -> dict[str, Any]:
    """The ``HookedTransformerConfig`` arguments that mirror ``model``'s shape.

    >>> from attnsim.compiler import compile_program
    >>> from attnsim.rasp import library
    >>> soft = compile_program(library.make_hist(), vocab=["a", "b"], max_seq_len=4,
    ...                        attention="softmax")
    >>> c = lens_config(soft)
    >>> c["act_fn"], c["normalization_type"], c["use_attn_scale"], c["d_vocab"]
    ('relu', None, False, 3)
    """
    cfg = model.config
    return {
        "n_layers": cfg.n_layers,
        "d_model": cfg.d_model,
        "n_ctx": cfg.n_ctx,
        "d_head": max(1, cfg.d_head),
        "n_heads": max(1, cfg.n_heads),
        "d_mlp": max(1, cfg.d_mlp),
        "d_vocab": cfg.d_vocab,
        "d_vocab_out": cfg.d_model,  # the identity unembedding: logits = residual stream
        "act_fn": "relu",
        "normalization_type": None,
        "attention_dir": "causal" if cfg.causal else "bidirectional",
        "use_attn_scale": False,
        "attn_scale": 1.0,
        "positional_embedding_type": "standard",
        "default_prepend_bos": False,
        "dtype": model.model.dtype,
        "original_architecture": "attnsim",
        "model_name": f"attnsim-{_name(model)}",
    }


def _name(model: CompiledModel) -> str:
    try:
        return model.report().name
    except ValueError:
        return "model"


def to_transformer_lens(model: CompiledModel):
    """A ``transformer_lens.HookedTransformer`` with ``model``'s weights.

    Args:
        model: a model compiled with ``attention="softmax"`` over a categorical vocabulary,
            whose MLPs use ReLU units only.

    Returns:
        The HookedTransformer (eval mode, no gradients). Token id 0 is BOS; its logits are
        the final residual stream (decode them with :func:`run_lens`).

    Raises:
        ValueError: the model cannot be exported (see :func:`check_exportable`).
        ImportError: TransformerLens is not installed.

    >>> from attnsim.compiler import compile_program
    >>> from attnsim.rasp import library
    >>> soft = compile_program(library.make_hist(), vocab=["a", "b"], max_seq_len=4,
    ...                        attention="softmax")
    >>> lens = to_transformer_lens(soft)  # doctest: +SKIP
    >>> run_lens(lens, soft, ["a", "b", "a"])  # doctest: +SKIP
    [2, 1, 2]
    """
    check_exportable(model)
    HookedTransformer, HookedTransformerConfig = _import_lens()
    lens = _lens_of(HookedTransformer, HookedTransformerConfig, lens_config(model), model.model)
    return attach_ground_truth(lens, model)


def compressed_to_transformer_lens(small):
    """A ``transformer_lens.HookedTransformer`` for a compressed model
    (``attnsim.compress``): width ``d``, the compressed embedding, heads and units, and the
    readout map ``[d, d_model]`` as ``W_U`` (its logits are the stream read back into the
    compiled model's directions: ``CompressedModel.run_lens`` decodes them). The compiled
    model's hook labels and circuit travel with it (:func:`attach_ground_truth`).

    Raises:
        ValueError: the compiled model cannot be exported (:func:`check_exportable`).
        ImportError: TransformerLens is not installed.

    >>> import attnsim
    >>> from attnsim.compiler import compile_program
    >>> from attnsim.rasp import library
    >>> soft = compile_program(library.make_hist(), vocab="abcd", max_seq_len=6,
    ...                        attention="softmax")
    >>> small = attnsim.compress(soft, d=12)
    >>> lens = compressed_to_transformer_lens(small)  # doctest: +SKIP
    >>> small.run_lens(lens, "abca") == small.run("abca")  # doctest: +SKIP
    True
    """
    check_exportable(small.base)
    HookedTransformer, HookedTransformerConfig = _import_lens()
    config = lens_config(small.base)
    config.update(
        d_model=small.config.d_model,
        d_vocab_out=small.base.config.d_model,
        model_name=f"{config['model_name']}-compressed-{small.config.d_model}",
    )
    lens = _lens_of(
        HookedTransformer, HookedTransformerConfig, config, small.model, unembed=small.readout
    )
    return attach_ground_truth(lens, small.base)


def attach_ground_truth(lens, model: CompiledModel):
    """Attaches ``model``'s labels to ``lens``: ``attnsim_hook_labels`` (hook name -> index
    -> RASP labels, :func:`hook_labels`) and ``attnsim_circuit`` (per granularity, the
    circuit's edges in TransformerLens hook names); None where the model has no component
    table. Returns ``lens``.

    >>> from types import SimpleNamespace
    >>> from attnsim.compiler import compile_program
    >>> from attnsim.rasp import library
    >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    >>> got = attach_ground_truth(SimpleNamespace(), m)
    >>> got.attnsim_hook_labels["blocks.0.attn.hook_z"][0], sorted(got.attnsim_circuit)
    (('hist',), ['component', 'qkv'])
    """
    try:  # the ground truth travels with the export: hook name -> index -> RASP labels
        lens.attnsim_hook_labels = hook_labels(model)
    except ValueError:  # a model without a component table (an old checkpoint)
        lens.attnsim_hook_labels = None
    try:  # and the circuit, in TransformerLens hook names (Circuit.lens_edges)
        lens.attnsim_circuit = {g: model.circuit(g).lens_edges() for g in ("component", "qkv")}
    except ValueError:
        lens.attnsim_circuit = None
    return lens


def _lens_of(HookedTransformer, HookedTransformerConfig, config: dict, src, unembed=None):
    """A HookedTransformer of ``config`` carrying the weights of the Transformer ``src``
    (softmax attention, ReLU units only), with ``unembed`` as ``W_U`` (default: the
    identity, so that the logits are the residual stream)."""
    with warnings.catch_warnings():
        # TransformerLens 3 announces HookedTransformer's removal in version 4
        warnings.simplefilter("ignore", DeprecationWarning)
        lens = HookedTransformer(HookedTransformerConfig(**config))
    lens.eval()
    dtype = src.dtype
    beta = src.cfg.beta
    with torch.no_grad():
        for p in lens.parameters():
            p.zero_()
            p.requires_grad_(False)
        lens.embed.W_E.copy_(src.W_E)
        lens.pos_embed.W_pos.copy_(src.W_pos)
        if unembed is None:
            unembed = torch.eye(src.cfg.d_model, dtype=dtype)
        lens.unembed.W_U.copy_(unembed)
        for block, out in zip(src.blocks, lens.blocks):
            attn = block.attn
            h, k = attn.W_Q.shape[0], attn.W_Q.shape[2]  # a layer's own heads: pad with 0
            if h and k:
                out.attn.W_Q[:h, :, :k].copy_(attn.W_Q * beta)  # softmax(beta * q.k)
                out.attn.W_K[:h, :, :k].copy_(attn.W_K)
                out.attn.W_V[:h, :, :k].copy_(attn.W_V)
                out.attn.W_O[:h, :k].copy_(attn.W_O)
            width = block.mlp.W_in.shape[1]  # layers narrower than d_mlp pad with zero units
            if width:
                out.mlp.W_in[:, :width].copy_(block.mlp.W_in)
                out.mlp.W_out[:width].copy_(block.mlp.W_out)
    return lens


def _import_lens():
    """``(HookedTransformer, HookedTransformerConfig)``, or an ImportError that says what
    to install."""
    try:
        import transformer_lens
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "to_transformer_lens needs TransformerLens 2 or 3: pip install 'attnsim[lens]' "
            "(or pip install 'transformer-lens<4')"
        ) from exc
    try:
        from transformer_lens import HookedTransformer, HookedTransformerConfig
    except ImportError as exc:  # pragma: no cover - depends on the environment
        version = getattr(transformer_lens, "__version__", "?")
        raise ImportError(
            f"TransformerLens {version} has no HookedTransformer (version 4 removed it); "
            "install a version that has it: pip install 'transformer-lens>=2,<4'"
        ) from exc
    return HookedTransformer, HookedTransformerConfig


def hook_labels(model: CompiledModel) -> dict[str, dict[int, tuple[str, ...]]]:
    """Which RASP expressions each head and MLP unit computes, by TransformerLens hook name.

    ``hook_labels(model)["blocks.1.attn.hook_z"][0]`` are the labels that head 0 of layer 1
    computes (patch ``hook_z[:, :, 0]``); ``["blocks.0.mlp.hook_post"][3]`` those of ReLU
    unit 3 of layer 0 (patch ``hook_post[..., 3]``). The same hook names index the compiled
    model's cache (bilinear and native units appear under ``hook_bilinear``/``hook_exp``...,
    which have no TransformerLens counterpart). :func:`to_transformer_lens` attaches this
    mapping to the model it returns as ``attnsim_hook_labels``.

    Raises:
        ValueError: the model carries no component table (see ``CompiledModel.components``).

    >>> from attnsim.compiler import compile_program
    >>> from attnsim.rasp import library
    >>> model = compile_program(library.make_hist(), vocab=["a", "b"], max_seq_len=4)
    >>> hook_labels(model)["blocks.0.attn.hook_z"][0]
    ('hist',)
    """
    out: dict[str, dict[int, tuple[str, ...]]] = {}
    for c in model.components():
        if c.site not in ("attn", "mlp"):
            continue
        slot = out.setdefault(c.hook, {})
        for i in range(c.start, c.stop):
            slot[i] = tuple(dict.fromkeys(slot.get(i, ()) + c.labels))
    return out


def run_lens(lens, model: CompiledModel, xs: Sequence[Any]) -> list:
    """Runs an exported HookedTransformer on inputs and decodes like ``model.run``.

    Args:
        lens: the result of :func:`to_transformer_lens` for ``model``.
        model: the compiled model (its encoding and output spec are used).
        xs: one token sequence, or a list of equal-length sequences.

    Returns:
        The decoded output (a list; a list of lists for a batch).

    >>> run_lens  # doctest: +ELLIPSIS
    <function run_lens at ...>
    """
    if xs and isinstance(xs[0], (list, tuple)):
        batch, single = [list(r) for r in xs], False
    else:
        batch, single = [list(xs)], True
    ids, _ = model.encode(batch)
    with torch.no_grad():
        resid = lens(ids, return_type="logits")  # [batch, pos, d_model]: the identity unembed
    out = model._decode(resid.to(model.model.dtype))
    return out[0] if single else out
