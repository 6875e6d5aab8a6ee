"""The compiled transformer: embedding, blocks of (attention, MLP), no layer norm.

Shapes (glossary): batch, pos (BOS included), d_model, n_heads, d_head, d_mlp.
Weight names follow TransformerLens: ``blocks.{l}.attn.W_Q`` is ``[n_heads, d_model, d_head]``,
``blocks.{l}.mlp.W_in`` is ``[d_model, d_mlp]``; cache keys like
``blocks.{l}.attn.hook_pattern``.

>>> import torch
>>> from attnsim.model.config import ModelConfig
>>> cfg = ModelConfig(n_layers=1, d_model=2, n_heads=1, d_head=1, d_mlp=1, d_bilinear=0,
...                   n_ctx=3, d_vocab=2)
>>> model = Transformer(cfg)
>>> model(torch.tensor([[0, 1, 1]]), torch.zeros(1, 3)).shape
torch.Size([1, 3, 2])
"""

from __future__ import annotations

import torch
from torch import nn

from attnsim.model.config import AttentionMode, ModelConfig

_NATIVE = {
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "reciprocal": torch.reciprocal,
    "rsqrt": torch.rsqrt,
    "gelu": lambda x: torch.nn.functional.gelu(x),
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
}


def _param(*shape: int, dtype: torch.dtype) -> nn.Parameter:
    return nn.Parameter(torch.zeros(*shape, dtype=dtype), requires_grad=False)


class Attention(nn.Module):
    """Multi-head attention with hard (average-hard) or softmax weights and no biases."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.cfg = cfg
        h, d, k = cfg.n_heads, cfg.d_model, cfg.d_head
        self.W_Q = _param(h, d, k, dtype=dtype)
        self.W_K = _param(h, d, k, dtype=dtype)
        self.W_V = _param(h, d, k, dtype=dtype)
        self.W_O = _param(h, k, d, dtype=dtype)

    def _plan(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Active heads (any non-zero output weight; the others add exactly 0) and the
        used width of each one's query-key and value-output spaces (zero columns dropped).
        Cached until the weights change."""
        key = tuple((w.data_ptr(), w._version) for w in (self.W_Q, self.W_K, self.W_V, self.W_O))
        if getattr(self, "_plan_key", None) != key:
            heads = torch.nonzero(self.W_O.flatten(1).abs().sum(dim=1) > 0).flatten()

            def width(*ws: torch.Tensor) -> torch.Tensor:
                used = sum(w.abs().sum(dim=1) for w in ws) > 0  # [head, d_head]
                idx = torch.arange(1, used.shape[1] + 1)
                return (used * idx).amax(dim=1)  # last used column + 1 (0 if none)

            qk = width(self.W_Q, self.W_K)
            ov = width(self.W_V, self.W_O.transpose(1, 2))
            order = heads[torch.argsort(qk[heads] * (ov.max() + 1) + ov[heads])]
            self._plan_cache = (order, qk, ov)
            self._plan_key = key
        return self._plan_cache

    def active_heads(self) -> torch.Tensor:
        """Indices of heads with any non-zero output weight."""
        return torch.sort(self._plan()[0]).values

    def forward(self, x: torch.Tensor, cache: dict | None, prefix: str) -> torch.Tensor:
        # x: [batch, pos, d_model]
        heads, qk_width, ov_width = self._plan()
        out = torch.zeros_like(x)
        n = x.shape[1]
        if cache is not None:
            scores_all = torch.zeros(x.shape[0], self.cfg.n_heads, n, n, dtype=x.dtype)
            pattern_all = torch.zeros_like(scores_all)
        # heads in chunks so that a chunk's [batch, head, query, key] stays near 2^25 values
        chunk = max(1, (1 << 25) // max(1, x.shape[0] * n * n))
        for start in range(0, len(heads), chunk):
            hs = heads[start : start + chunk]
            wq = max(1, int(qk_width[hs].max()))  # columns past these are zero in every head
            wv = max(1, int(ov_width[hs].max()))
            scores, pattern, z = self._heads(x, hs, wq, wv, cache is not None)
            out = out + torch.einsum("bhqk,hkd->bqd", z, self.W_O[hs, :wv])
            if cache is not None:
                scores_all[:, hs] = scores
                pattern_all[:, hs] = pattern
        if cache is not None:
            cache[f"{prefix}.hook_attn_scores"] = scores_all
            cache[f"{prefix}.hook_pattern"] = pattern_all
        return out

    def _heads(self, x: torch.Tensor, hs: torch.Tensor, wq: int, wv: int, need_pattern: bool):
        q = torch.matmul(x[:, None], self.W_Q[hs, :, :wq])  # [batch, head, pos, used d_head]
        k = torch.matmul(x[:, None], self.W_K[hs, :, :wq])
        v = torch.matmul(x[:, None], self.W_V[hs, :, :wv])
        scores = torch.matmul(q, k.transpose(-1, -2))  # [batch, head, query, key]
        n = x.shape[1]
        if self.cfg.causal:
            future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        if self.cfg.attention is AttentionMode.HARD:
            best = scores.amax(dim=-1, keepdim=True)
            chosen = (scores >= best - self.cfg.hard_tolerance).to(x.dtype)
            count = chosen.sum(dim=-1, keepdim=True)
            # the mean over the chosen keys: sum their values, then divide (one pass fewer
            # over [query, key] than normalising the pattern first)
            z = torch.matmul(chosen, v) / count
            pattern = chosen / count if need_pattern else None
            return scores, pattern, z
        pattern = torch.softmax(self.cfg.beta * scores, dim=-1)
        return scores, pattern, torch.matmul(pattern, v)


class MLP(nn.Module):
    """ReLU units, bilinear (product) units and declared elementwise units, side by side."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        d = cfg.d_model
        self.W_in = _param(d, cfg.d_mlp, dtype=dtype)
        self.W_out = _param(cfg.d_mlp, d, dtype=dtype)
        self.W_bil_a = _param(d, cfg.d_bilinear, dtype=dtype)
        self.W_bil_b = _param(d, cfg.d_bilinear, dtype=dtype)
        self.W_bil_out = _param(cfg.d_bilinear, d, dtype=dtype)
        self.native_kinds = sorted(k for k, v in cfg.d_native.items() if v > 0)
        for kind in self.native_kinds:
            m = cfg.d_native[kind]
            setattr(self, f"W_{kind}_in", _param(d, m, dtype=dtype))
            setattr(self, f"W_{kind}_gate", _param(d, m, dtype=dtype))
            setattr(self, f"W_{kind}_out", _param(m, d, dtype=dtype))

    def forward(self, x: torch.Tensor, cache: dict | None, prefix: str) -> torch.Tensor:
        post = torch.relu(x @ self.W_in)  # [batch, pos, d_mlp]
        out = post @ self.W_out
        if cache is not None:
            cache[f"{prefix}.hook_post"] = post
        if self.W_bil_a.shape[1]:
            prod = (x @ self.W_bil_a) * (x @ self.W_bil_b)
            out = out + prod @ self.W_bil_out
            if cache is not None:
                cache[f"{prefix}.hook_bilinear"] = prod
        for kind in self.native_kinds:
            pre = x @ getattr(self, f"W_{kind}_in")
            gate = x @ getattr(self, f"W_{kind}_gate")
            # the gate is 0 where the unit is unused (BOS): keep 0 * inf from becoming NaN
            val = torch.where(gate != 0, _NATIVE[kind](pre), torch.zeros_like(pre)) * gate
            out = out + val @ getattr(self, f"W_{kind}_out")
            if cache is not None:
                cache[f"{prefix}.hook_{kind}"] = val
        return out


class Block(nn.Module):
    """resid_mid = resid_pre + attn(resid_pre); resid_post = resid_mid + mlp(resid_mid)."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.attn = Attention(cfg, dtype)
        self.mlp = MLP(cfg, dtype)

    def forward(self, x: torch.Tensor, cache: dict | None, prefix: str) -> torch.Tensor:
        if cache is not None:
            cache[f"{prefix}.hook_resid_pre"] = x
        x = x + self.attn(x, cache, f"{prefix}.attn")
        if cache is not None:
            cache[f"{prefix}.hook_resid_mid"] = x
        x = x + self.mlp(x, cache, f"{prefix}.mlp")
        if cache is not None:
            cache[f"{prefix}.hook_resid_post"] = x
        return x


class Transformer(nn.Module):
    """Embedding (token rows, numerical token direction, positions), then the blocks."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        dtype = torch.float64 if cfg.dtype == "float64" else torch.float32
        self.W_E = _param(cfg.d_vocab, cfg.d_model, dtype=dtype)
        self.W_E_num = _param(cfg.d_model, dtype=dtype)
        self.W_pos = _param(cfg.n_ctx, cfg.d_model, dtype=dtype)
        self.blocks = nn.ModuleList(Block(cfg, dtype) for _ in range(cfg.n_layers))

    @property
    def dtype(self) -> torch.dtype:
        return self.W_E.dtype

    def forward(
        self,
        token_ids: torch.Tensor,
        token_values: torch.Tensor | None = None,
        cache: dict | None = None,
    ) -> torch.Tensor:
        """Args: token_ids [batch, pos] (row 0 of W_E is BOS), token_values [batch, pos]
        (numerical tokens; 0 at BOS). Returns the final residual stream [batch, pos, d_model].
        """
        n = token_ids.shape[1]
        if n > self.cfg.n_ctx:
            raise ValueError(f"input has {n} positions (BOS included), the model {self.cfg.n_ctx}")
        x = self.W_E[token_ids] + self.W_pos[:n]
        if token_values is not None and self.cfg.numerical_tokens:
            x = x + token_values.to(self.dtype)[..., None] * self.W_E_num
        if cache is not None:
            cache["hook_embed"] = x
        for i, block in enumerate(self.blocks):
            x = block(x, cache, f"blocks.{i}")
        return x
