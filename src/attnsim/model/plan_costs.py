"""FLOPs of a planned forward pass, counted from its execution plan (for benchmarks and
reports; see :mod:`attnsim.model.plans`)."""

from __future__ import annotations

from attnsim.model import plan_keys, plan_tables
from attnsim.model.plan_static import _reads, _writes


def forward_flops(rt, n: int) -> dict[str, int]:
    """FLOPs of the attention sublayers of one planned forward pass on ``n`` positions
    (BOS included), batch 1, counted from the plan: per planned head, its value projection
    over the rows it reads, the sum over its selected pairs and its output projection over
    the columns it writes (a candidate head adds its query and key projections and the
    scores of its candidate pairs); every other active head as in the dense forward.
    ``rt``: the model's :class:`attnsim.model.runtime.Runtime` (its plans).

    >>> import torch
    >>> from attnsim.model.config import ModelConfig
    >>> from attnsim.model.runtime import Runtime
    >>> from attnsim.model.transformer import Transformer
    >>> t = Transformer(ModelConfig(n_layers=1, d_model=3, n_heads=1, d_head=1, d_mlp=0,
    ...                             d_bilinear=0, n_ctx=4, d_vocab=3))
    >>> with torch.no_grad():  # the values read a token direction (2)
    ...     t.W_pos[0, 0] = 1.0; t.W_E[1, 2] = 1.0; t.W_E[2, 2] = 2.0; a = t.blocks[0].attn
    ...     a.W_Q[0, 0, 0] = a.W_K[0, 0, 0] = a.W_V[0, 2, 0] = a.W_O[0, 0, 1] = 1.0
    >>> forward_flops(Runtime(t), 4)["attention"]  # 2*4 (values) + 13 pairs + 2*4 (outputs)
    29
    """
    transformer = rt.net
    plans = rt.plans(n) or [() for _ in transformer.blocks]
    total = 0
    for block, layer_plans in zip(transformer.blocks, plans):
        a = block.attn
        # token-table heads run first (see planned_attention)
        layer_plans = sorted(layer_plans, key=lambda p: p.kind != "table")
        heads, qk_width, ov_width = a._plan()
        done = set()
        for p in layer_plans:
            if p.kind == "const":  # one add per output the heads write
                total += int(p.values.numel())
                done.update(p.heads)
                continue
            h = p.head
            if h in done:
                continue
            if p.kind == "table":
                total += plan_tables.flops(a, p, n)
                done.add(h)
                continue
            if p.kind == "side":
                total += plan_keys.flops(a, p, n)
                done.add(h)
                continue
            wv = max(1, int(ov_width[h]))
            rows_v = int(_reads(a.W_V[h, :, :wv]).sum())
            cols_o = int(_writes(a.W_O[h, :wv]).sum())
            total += 2 * n * rows_v * wv + p.nnz * wv + 2 * n * wv * cols_o
            if p.gap is not None:
                wq = max(1, int(qk_width[h]))
                rows_qk = int((_reads(a.W_Q[h, :, :wq]) | _reads(a.W_K[h, :, :wq])).sum())
                total += 2 * 2 * n * rows_qk * wq + 2 * p.nnz * wq
            done.add(h)
        d, k = a.W_Q.shape[1], a.W_Q.shape[2]
        dense = [h for h in heads.tolist() if h not in done]
        total += len(dense) * (3 * 2 * n * d * k + 2 * 2 * n * n * k + 4 * n * n + 2 * n * k * d)
    return {"attention": total}
