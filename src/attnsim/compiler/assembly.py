"""Stage 5, assembly: layers of named blocks become dense PyTorch weights.

A head's score terms ``(query dir, key dir, w)`` become W_Q (one column per query direction
it reads) and W_K (the weights); its value map becomes W_V (one column per source direction)
and W_O. Embedding rows: 0 is BOS, then the vocabulary; the positional embedding holds the
static S-ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from attnsim.ir.basis import Basis
from attnsim.ir.blocks import Layer
from attnsim.model.config import ModelConfig
from attnsim.model.transformer import Transformer


def assemble(
    layers: Sequence[Layer],
    basis: Basis,
    *,
    static_embed: dict[str, np.ndarray],
    token_dims: dict[str, Any],
    token_vocab: Sequence[Any],
    numerical_token_dir: str | None,
    max_seq_len: int,
    attention: str,
    beta: float,
    causal: bool,
    dtype: torch.dtype,
) -> Transformer:
    """Builds the Transformer holding ``layers`` over the residual ``basis``."""
    d_model = len(basis)
    n_heads = max([len(layer.heads) for layer in layers] + [1])
    d_head = 1
    for layer in layers:
        for h in layer.heads:
            d_head = max(d_head, len({q for q, _, _ in h.qk}), len({s for s, _, _ in h.ov}))
    d_mlp = max([len(layer.relu) for layer in layers] + [0])
    d_bil = max([len(layer.bilinear) for layer in layers] + [0])
    d_native: dict[str, int] = {}
    for layer in layers:
        counts: dict[str, int] = {}
        for u in layer.native:
            counts[u.kind] = counts.get(u.kind, 0) + 1
        for k, c in counts.items():
            d_native[k] = max(d_native.get(k, 0), c)
    cfg = ModelConfig(
        n_layers=len(layers),
        d_model=d_model,
        n_heads=n_heads,
        d_head=d_head,
        d_mlp=d_mlp,
        d_bilinear=d_bil,
        d_native=d_native,
        n_ctx=max_seq_len + 1,
        d_vocab=1 + max(len(token_vocab), 1),
        numerical_tokens=numerical_token_dir is not None,
        attention=attention,
        beta=beta,
        causal=causal,
        dtype="float64" if dtype == torch.float64 else "float32",
    )
    model = Transformer(cfg)
    ix = basis.index
    with torch.no_grad():
        W_E = torch.zeros(cfg.d_vocab, d_model, dtype=torch.float64)
        W_E[0, ix("bos")] = 1.0
        W_E[1:, ix("notbos")] = 1.0
        row = {_vkey(v): i + 1 for i, v in enumerate(token_vocab)}
        for d, v in token_dims.items():
            W_E[row[_vkey(v)], ix(d)] = 1.0
        model.W_E.copy_(W_E)
        if numerical_token_dir is not None:
            model.W_E_num[ix(numerical_token_dir)] = 1.0
        W_pos = torch.zeros(cfg.n_ctx, d_model, dtype=torch.float64)
        for d, vals in static_embed.items():
            W_pos[1:, ix(d)] = torch.as_tensor(vals, dtype=torch.float64)
        model.W_pos.copy_(W_pos)
        for li, layer in enumerate(layers):
            blk = model.blocks[li]
            for hi, h in enumerate(layer.heads):
                qdirs = list(dict.fromkeys(q for q, _, _ in h.qk))
                for j, q in enumerate(qdirs):
                    blk.attn.W_Q[hi, ix(q), j] = 1.0
                for q, k, w in h.qk:
                    blk.attn.W_K[hi, ix(k), qdirs.index(q)] += w
                sdirs = list(dict.fromkeys(s for s, _, _ in h.ov))
                for j, s in enumerate(sdirs):
                    blk.attn.W_V[hi, ix(s), j] = 1.0
                for s, dst, w in h.ov:
                    blk.attn.W_O[hi, sdirs.index(s), ix(dst)] += w
            for ui, u in enumerate(layer.relu):
                for d, w in u.inputs:
                    blk.mlp.W_in[ix(d), ui] += w
                for d, w in u.outputs:
                    blk.mlp.W_out[ui, ix(d)] += w
            for ui, u in enumerate(layer.bilinear):
                for d, w in u.a:
                    blk.mlp.W_bil_a[ix(d), ui] += w
                for d, w in u.b:
                    blk.mlp.W_bil_b[ix(d), ui] += w
                for d, w in u.outputs:
                    blk.mlp.W_bil_out[ui, ix(d)] += w
            slot: dict[str, int] = {}
            for u in layer.native:
                ui = slot.get(u.kind, 0)
                slot[u.kind] = ui + 1
                for d, w in u.inputs:
                    getattr(blk.mlp, f"W_{u.kind}_in")[ix(d), ui] += w
                for d, w in u.gate:
                    getattr(blk.mlp, f"W_{u.kind}_gate")[ix(d), ui] += w
                for d, w in u.outputs:
                    getattr(blk.mlp, f"W_{u.kind}_out")[ui, ix(d)] += w
    return model


def _vkey(v: Any) -> tuple:
    return (type(v).__name__, v)
