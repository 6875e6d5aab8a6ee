"""The compiled transformer's definition: embedding, blocks of (attention, MLP), no layer norm.

This module is what a compiled model computes, and it computes only that: every active head
over ``[query, key]``, every unit of every MLP, on any device. It keeps no executor state
and imports no executor; :mod:`attnsim.model.runtime` runs the same weights faster (plans,
feature-major) and is checked against this forward.

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

from attnsim.model.config import ModelConfig
from attnsim.model.costs import RELU_SLICE_VALUES
from attnsim.model.hard import HEAD_CHUNK_VALUES, mix
from attnsim.model.native import NATIVE_FUNCTIONS
from attnsim.model.projection import Projection, columns
from attnsim.model.stream import Columns, _capture, check_positions, stamp

__all__ = [
    "Attention",
    "Block",
    "HEAD_CHUNK_VALUES",
    "MLP",
    "Transformer",
    "relu_slices",
    "relu_units",
]


def _param(*shape: int, dtype: torch.dtype) -> nn.Parameter:
    return nn.Parameter(torch.zeros(*shape, dtype=dtype), requires_grad=False)


class Attention(nn.Module):
    """Multi-head attention with hard (average-hard) or softmax weights and no biases."""

    def __init__(
        self, cfg: ModelConfig, dtype: torch.dtype, shape: tuple[int, int] | None = None
    ) -> None:
        super().__init__()
        self.cfg = cfg
        h, k = (cfg.n_heads, cfg.d_head) if shape is None else shape
        d = cfg.d_model
        self.W_Q = _param(h, d, k, dtype=dtype)
        self.W_K = _param(h, d, k, dtype=dtype)
        self.W_V = _param(h, d, k, dtype=dtype)
        self.W_O = _param(h, k, d, dtype=dtype)

    def _plan(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Active heads (any non-zero output weight; the others add exactly 0) and the
        used width of each one's query-key and value-output spaces (zero columns dropped).
        Cached until the weights change."""
        key = stamp((self.W_Q, self.W_K, self.W_V, self.W_O))
        if getattr(self, "_plan_key", None) != key:
            heads = torch.nonzero(self.W_O.flatten(1).abs().sum(dim=1) > 0).flatten()

            def width(*ws: torch.Tensor) -> torch.Tensor:
                used = sum(w.abs().sum(dim=1) for w in ws) > 0  # [head, d_head]
                if not used.numel():  # a layer that stores no head
                    return torch.zeros(used.shape[0], dtype=torch.long, device=used.device)
                idx = torch.arange(1, used.shape[1] + 1, device=used.device)
                return (used * idx).amax(dim=1)  # last used column + 1 (0 if none)

            qk = width(self.W_Q, self.W_K)
            ov = width(self.W_V, self.W_O.transpose(1, 2))
            top = int(ov.max()) + 1 if ov.numel() else 1
            order = heads[torch.argsort(qk[heads] * top + ov[heads])]
            self._plan_cache = (order, qk, ov)
            self._plan_key = key
        return self._plan_cache

    def written_columns(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The residual columns any active head writes, and each column's place among them
        (-1 elsewhere).

        >>> from attnsim import compile_program, library
        >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
        >>> cols, where = m.model.blocks[0].attn.written_columns()
        >>> bool((where[cols] == torch.arange(len(cols))).all())
        True
        """
        heads = self._plan()[0]
        W_O = self.W_O[heads]  # [active heads, d_head, d_model]
        cols = torch.nonzero(W_O.abs().sum(dim=(0, 1)) > 0).flatten()
        where = torch.full((self.W_O.shape[2],), -1, dtype=torch.long, device=cols.device)
        where[cols] = torch.arange(len(cols), device=cols.device)
        return cols, where

    def active_heads(self) -> torch.Tensor:
        """Indices of heads with any non-zero output weight."""
        return torch.sort(self._plan()[0]).values

    def forward(self, x: torch.Tensor, cache: dict | None, prefix: str) -> torch.Tensor:
        # x: [batch, pos, d_model]
        if cache is None:
            return self.dense_heads(x, self._plan()[0])
        heads, qk_width, ov_width = self._plan()
        out = torch.zeros_like(x)
        n = x.shape[1]
        if cache is not None:
            scores_all = x.new_zeros(x.shape[0], self.W_Q.shape[0], n, n)
            pattern_all = torch.zeros_like(scores_all)
        # heads in chunks so that a chunk's [batch, head, query, key] stays near 2^25 values
        chunk = max(1, HEAD_CHUNK_VALUES // max(1, x.shape[0] * n * n))
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

    def dense_heads(self, x: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """The summed output ``[batch, pos, d_model]`` of the given heads, each computed
        densely over ``[query, key]``."""
        _, qk_width, ov_width = self._plan()
        out = torch.zeros_like(x)
        n = x.shape[1]
        # heads in chunks so that a chunk's [batch, head, query, key] stays near 2^25 values
        chunk = max(1, HEAD_CHUNK_VALUES // max(1, x.shape[0] * n * n))
        for start in range(0, len(heads), chunk):
            hs = heads[start : start + chunk]
            wq = max(1, int(qk_width[hs].max()))  # columns past these are zero in every head
            wv = max(1, int(ov_width[hs].max()))
            _, _, z = self._heads(x, hs, wq, wv, False)
            out = out + torch.einsum("bhqk,hkd->bqd", z, self.W_O[hs, :wv])
        return out

    def head_result(
        self, xq: torch.Tensor, xk: torch.Tensor, xv: torch.Tensor, head: int
    ) -> torch.Tensor:
        """What head ``head`` adds to the residual stream, ``[batch, pos, d_model]``, when its
        queries read the stream ``xq``, its keys ``xk`` and its values ``xv`` (each ``[batch,
        pos, d_model]``). One stream for all three is the ordinary forward pass; path patching
        (:mod:`attnsim.model.circuit`) gives each side its own.

        >>> from attnsim import compile_program, library
        >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
        >>> net, ids = m.model, m.encode(["abba"])[0]
        >>> x, a = net.W_E[ids] + net.W_pos[:5], net.blocks[0].attn
        >>> bool(torch.allclose(a.head_result(x, x, x, 0), a.dense_heads(x, a.active_heads())))
        True
        """
        q = xq @ self.W_Q[head]  # [batch, pos, d_head]
        k = xk @ self.W_K[head]
        v = xv @ self.W_V[head]
        scores = q @ k.transpose(-1, -2)  # [batch, query, key]
        if self.cfg.causal:
            n = scores.shape[-1]
            future = torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        _, z = mix(self.cfg, scores, v)  # [batch, pos, d_head]
        return z @ self.W_O[head]

    def _heads(
        self,
        x: torch.Tensor,
        hs: torch.Tensor,
        wq: int,
        wv: int,
        need_pattern: bool,
        rows: torch.Tensor | None = None,
    ):
        # rows: x holds only these residual rows (attnsim.model.plans.compact_heads)
        b, n, d = x.shape

        def project(W: torch.Tensor, width: int) -> torch.Tensor:
            # every head in one matrix product, [batch, pos, head * width], then split; this
            # does not copy x once per head as a broadcast batched product would
            W = W[hs] if rows is None else W[hs][:, rows]
            w = W[:, :, :width].permute(1, 0, 2).reshape(d, len(hs) * width)
            return (x @ w).view(b, n, len(hs), width).transpose(1, 2)

        q = project(self.W_Q, wq)  # [batch, head, pos, used d_head]
        k = project(self.W_K, wq)
        v = project(self.W_V, wv)
        scores = torch.matmul(q, k.transpose(-1, -2))  # [batch, head, query, key]
        if self.cfg.causal:
            future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        pattern, z = mix(self.cfg, scores, v, need_pattern)
        return scores, pattern, z


class MLP(nn.Module):
    """ReLU units, bilinear (product) units and declared elementwise units, side by side."""

    def __init__(
        self,
        cfg: ModelConfig,
        dtype: torch.dtype,
        width: int | None = None,
        bilinear: int | None = None,
    ) -> None:
        super().__init__()
        d = cfg.d_model
        width = cfg.d_mlp if width is None else width
        bilinear = cfg.d_bilinear if bilinear is None else bilinear
        self.W_in = _param(d, width, dtype=dtype)
        self.W_out = _param(width, d, dtype=dtype)
        self.W_bil_a = _param(d, bilinear, dtype=dtype)
        self.W_bil_b = _param(d, bilinear, dtype=dtype)
        self.W_bil_out = _param(bilinear, d, dtype=dtype)
        self.native_kinds = sorted(k for k, v in cfg.d_native.items() if v > 0)
        for kind in self.native_kinds:
            m = cfg.d_native[kind]
            setattr(self, f"W_{kind}_in", _param(d, m, dtype=dtype))
            setattr(self, f"W_{kind}_gate", _param(d, m, dtype=dtype))
            setattr(self, f"W_{kind}_out", _param(m, d, dtype=dtype))

    def _plan(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The residual rows the ReLU units read and the columns they write (cached until the
        weights change); None when the units read and write most of the stream anyway."""
        key = stamp((self.W_in, self.W_out))
        if getattr(self, "_plan_key", None) != key:
            rows = torch.nonzero(self.W_in.abs().sum(dim=1) > 0).flatten()
            cols = torch.nonzero(self.W_out.abs().sum(dim=0) > 0).flatten()
            d = self.W_in.shape[0]
            small = len(rows) and len(cols) and len(rows) + len(cols) < d
            self._plan_cache = (rows, cols) if small else None
            self._plan_key = key
        return self._plan_cache

    def _relu_used(self) -> bool:
        return bool(self.W_out.numel()) and bool((self.W_out != 0).any())

    def _unit_slices(self) -> dict:
        """For the bilinear units and each kind of declared unit: (the rows they read, the
        columns they write, their input weights on those rows, their output weights on those
        columns); cached until the weights change (made anew on each call that records
        gradients for them: slices taken then are part of that call's graph)."""
        ws = [self.W_bil_a, self.W_bil_b, self.W_bil_out]
        for kind in self.native_kinds:
            ws += [getattr(self, f"W_{kind}_{part}") for part in ("in", "gate", "out")]
        grads = torch.is_grad_enabled() and any(w.requires_grad for w in ws)
        key = stamp(ws)
        if grads or getattr(self, "_slices_key", None) != key:
            groups = {"bilinear": (self.W_bil_a, self.W_bil_b, self.W_bil_out)}
            for kind in self.native_kinds:
                groups[kind] = tuple(getattr(self, f"W_{kind}_{p}") for p in ("in", "gate", "out"))
            slices = {}
            with torch.set_grad_enabled(grads):
                for name, (w1, w2, w_out) in groups.items():
                    # both input forms in one product, each column over the rows it reads
                    # where that rounds as the full sum does (see plans.project)
                    cols = torch.nonzero(w_out.abs().sum(dim=0) > 0).flatten()
                    slices[name] = (
                        Projection(torch.cat([w1, w2], dim=1)),
                        cols,
                        w_out[:, cols],
                    )
            if grads:
                return slices
            self._slices, self._slices_key = slices, key
        return self._slices

    def forward(self, x: torch.Tensor, cache: dict | None, prefix: str) -> torch.Tensor:
        plan = self._plan()
        if plan is None:
            post = torch.relu(x @ self.W_in)  # [batch, pos, d_mlp]
            out = post @ self.W_out
        else:  # the same sums over the non-zero rows and columns only
            rows, cols = plan
            w_in, w_out = self.W_in[rows], self.W_out[:, cols]
            out = torch.zeros_like(x)
            if cache is None:  # a wide layer (a ReLU-realised map) runs in slices
                out[..., cols] = relu_slices(x, rows, w_in, w_out)
            else:  # the same 2-D products as the sliced pass, keeping the activations
                post = torch.relu(columns(x, rows).reshape(-1, len(rows)) @ w_in)
                out[..., cols] = (post @ w_out).reshape(*x.shape[:-1], len(cols))
                post = post.reshape(*x.shape[:-1], -1)
        if cache is not None:
            cache[f"{prefix}.hook_post"] = post
        # bilinear and declared units read and write a few directions of the stream: their
        # sums run over those rows and columns only (the others hold zero weights)
        slices = self._unit_slices()
        if self.W_bil_a.shape[1]:
            proj, cols, w_out = slices["bilinear"]
            a, b = proj(x).chunk(2, dim=-1)
            prod = a * b
            out[..., cols] += prod @ w_out
            if cache is not None:
                cache[f"{prefix}.hook_bilinear"] = prod
        for kind in self.native_kinds:
            proj, cols, w_out = slices[kind]
            pre, gate = proj(x).chunk(2, dim=-1)
            # the gate is 0 where the unit is unused (BOS): keep 0 * inf from becoming NaN
            val = torch.where(gate != 0, NATIVE_FUNCTIONS[kind](pre), torch.zeros_like(pre)) * gate
            out[..., cols] += val @ w_out
            if cache is not None:
                cache[f"{prefix}.hook_{kind}"] = val
                cache[f"{prefix}.hook_{kind}_pre"] = pre  # [batch, pos, units]
                cache[f"{prefix}.hook_{kind}_gate"] = gate
        return out


class Block(nn.Module):
    """resid_mid = resid_pre + attn(resid_pre); resid_post = resid_mid + mlp(resid_mid)."""

    def __init__(
        self,
        cfg: ModelConfig,
        dtype: torch.dtype,
        mlp_width: int | None = None,
        heads: tuple[int, int] | None = None,
        bilinear: int | None = None,
    ) -> None:
        super().__init__()
        self.attn = Attention(cfg, dtype, heads)
        self.mlp = MLP(cfg, dtype, mlp_width, bilinear)

    def forward(
        self,
        x: torch.Tensor,
        cache: dict | None,
        prefix: str,
        streams: dict | None = None,
        stage: int = 1,
    ) -> torch.Tensor:
        if cache is not None:
            cache[f"{prefix}.hook_resid_pre"] = x
        x = x + self.attn(x, cache, f"{prefix}.attn")
        if cache is not None:
            cache[f"{prefix}.hook_resid_mid"] = x
        _capture(streams, stage, x)
        x = x + self.mlp(x, cache, f"{prefix}.mlp")
        if cache is not None:
            cache[f"{prefix}.hook_resid_post"] = x
        _capture(streams, stage + 1, x)
        return x


class Transformer(nn.Module):
    """Embedding (token rows, numerical token direction, positions), then the blocks."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        dtype = torch.float64 if cfg.dtype == "float64" else torch.float32
        self.W_E = _param(cfg.d_vocab, cfg.d_model, dtype=dtype)
        self.W_E_num = _param(cfg.d_model, dtype=dtype)
        if cfg.token_width:  # vector tokens: channel k enters as value * row k
            self.W_E_vec = _param(cfg.token_width, cfg.d_model, dtype=dtype)
        self.W_pos = _param(cfg.n_ctx, cfg.d_model, dtype=dtype)
        self.blocks = nn.ModuleList(
            Block(cfg, dtype, cfg.mlp_width(li), cfg.head_shape(li), cfg.bilinear_width(li))
            for li in range(cfg.n_layers)
        )
        self._patterns: tuple = ()
        self._patterns_key: tuple | None = None

    @property
    def head_patterns(self) -> tuple:
        """Per layer and head, what the compiler knew of the head's keys (an
        :class:`attnsim.model.patterns.StaticPattern`, or None); ``()`` when unknown (weights
        made by hand, loaded, or changed since): the plans then find the keys from the
        weights."""
        key = stamp(self.parameters())
        return self._patterns if key == self._patterns_key else ()

    @head_patterns.setter
    def head_patterns(self, patterns: tuple) -> None:
        self._patterns = tuple(tuple(layer) for layer in patterns)
        self._patterns_key = stamp(self.parameters())

    def __setattr__(self, name: str, value) -> None:
        if name == "executor":  # not silently ignored: the definition runs as defined
            raise AttributeError(
                "Transformer is the definition and has no executor: run it through "
                "attnsim.model.runtime.Runtime(model, executor=...), or set "
                "CompiledModel.executor (its runtime is CompiledModel.runtime)"
            )
        super().__setattr__(name, value)

    @property
    def dtype(self) -> torch.dtype:
        return self.W_E.dtype

    def forward(
        self,
        token_ids: torch.Tensor,
        token_values: torch.Tensor | None = None,
        cache: dict | None = None,
        streams: dict[int, torch.Tensor | None] | None = None,
        keep: Columns | None = None,
    ) -> torch.Tensor:
        """Args: token_ids [batch, pos] (row 0 of W_E is BOS), token_values [batch, pos]
        (numerical tokens; 0 at BOS) or [batch, pos, token_width] (vector tokens),
        cache (filled with every hook), streams (a lighter
        cache: its keys are stages, 0 the embedding, 2l+1 and 2l+2 after layer l's attention
        and MLP sublayers; each is filled with that residual stream [batch, pos, d_model], or
        with the columns a :class:`Columns` value there asks for), keep (a :class:`Columns`:
        return only these columns of the final stream).
        Returns the final residual stream [batch, pos, d_model] (or [batch, pos, len(keep)]).
        Inputs move to the model's device; every allocation follows it.
        """
        token_ids, token_values, n = self.prepare_inputs(token_ids, token_values)
        x = self.embed(token_ids, token_values, n)
        if cache is not None:
            cache["hook_embed"] = x
        _capture(streams, 0, x)
        for i, block in enumerate(self.blocks):
            x = block(x, cache, f"blocks.{i}", streams, 2 * i + 1)
        return x if keep is None else x[..., keep.cols.to(x.device)]

    def prepare_inputs(
        self, token_ids: torch.Tensor, token_values: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """``(token_ids, token_values, n)``: the inputs on the model's device, checked (ids
        rows of the embedding, at most ``n_ctx`` positions, vector tokens of the model's
        width), and their number of positions ``n``.

        >>> cfg = ModelConfig(n_layers=1, d_model=2, n_heads=1, d_head=1, d_mlp=1,
        ...                   d_bilinear=0, n_ctx=3, d_vocab=2)
        >>> Transformer(cfg).prepare_inputs(torch.tensor([[0, 1]]), None)[2]
        2
        >>> try:
        ...     Transformer(cfg).prepare_inputs(torch.tensor([[0, 2]]), None)
        ... except ValueError as exc:
        ...     print(str(exc)[:49])
        token id 2 is not a row of this model's embedding
        """
        device = self.W_E.device
        # contiguous (a no-op where they are): the executors view the inputs' rows flat
        token_ids = token_ids.to(device).contiguous()
        token_values = None if token_values is None else token_values.to(device).contiguous()
        n = check_positions(token_ids, self.cfg.n_ctx, self.cfg.d_vocab)
        width = self.cfg.token_width
        if width and (token_values is None or token_values.shape[-1:] != (width,)):
            got = None if token_values is None else list(token_values.shape)
            raise ValueError(
                f"this model reads vector tokens of width {width}: pass "
                f"token_values [batch, pos, {width}], got {got}"
            )
        return token_ids, token_values, n

    def embed(
        self,
        token_ids: torch.Tensor,
        token_values: torch.Tensor | None,
        n: int,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The embedding ``[batch, pos, d_model]`` of checked inputs (written into ``out``
        when given): token row, plus position row, plus value times the numerical
        direction, plus vector tokens' channels through ``W_E_vec``.

        >>> cfg = ModelConfig(n_layers=1, d_model=2, n_heads=1, d_head=1, d_mlp=1,
        ...                   d_bilinear=0, n_ctx=3, d_vocab=2)
        >>> t = Transformer(cfg)
        >>> with torch.no_grad():
        ...     t.W_E[1, 0] = 5.0; t.W_pos[1, 1] = 2.0
        >>> t.embed(torch.tensor([[0, 1]]), None, 2).tolist()
        [[[0.0, 0.0], [5.0, 2.0]]]
        """
        flat = token_ids.reshape(-1)
        if out is None:  # a new tensor (the sums below go in place); a row gather
            x = torch.index_select(self.W_E, 0, flat).view(*token_ids.shape, self.W_E.shape[1])
        else:
            x = out
            torch.index_select(self.W_E, 0, flat, out=x.view(-1, x.shape[-1]))
        x += self.W_pos[:n]
        if token_values is not None and self.cfg.numerical_tokens:
            x += token_values.to(self.dtype)[..., None] * self.W_E_num
        if self.cfg.token_width:
            x = x + token_values.to(self.dtype) @ self.W_E_vec
            if out is not None:
                out.copy_(x)
                x = out
        return x


def relu_slices(
    x: torch.Tensor, rows: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor
) -> torch.Tensor:
    """``relu(x[..., rows] @ w_in) @ w_out`` (``[batch, pos, columns]``) over slices of the
    positions, so that a wide layer's hidden activations stay small (each position's sums
    are the same).

    >>> x = torch.tensor([[[1.0, -2.0], [3.0, 4.0]]], dtype=torch.float64)
    >>> w = torch.eye(2, dtype=torch.float64)
    >>> relu_slices(x, torch.tensor([0, 1]), w, torch.ones(2, 1, dtype=torch.float64)).tolist()
    [[[1.0], [7.0]]]
    """
    out = relu_units(columns(x, rows).reshape(-1, len(rows)), w_in, w_out)
    return out.reshape(*x.shape[:-1], w_out.shape[1])


def relu_units(xs: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor) -> torch.Tensor:
    """``relu(xs @ w_in) @ w_out`` for rows ``xs [rows, width]``, a slice of rows at a time
    (at most :data:`RELU_SLICE_VALUES` hidden activations).

    >>> relu_units(torch.tensor([[1.0, -3.0]]), torch.eye(2), torch.ones(2, 1)).tolist()
    [[1.0]]
    """
    step = max(1, RELU_SLICE_VALUES // max(1, w_in.shape[1]))
    return torch.cat([torch.relu(c @ w_in) @ w_out for c in torch.split(xs, step)])
