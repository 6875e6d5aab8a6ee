"""The universal simulator U: one compiled transformer, fixed weights, any attention layer.

``build(N, D, H)`` writes U as a RASP program over real-valued tokens and compiles it once.
``U.simulate(target, X)`` lays the target's parameters and X into one sequence
(:mod:`attnsim.simulator.layout`), runs the transformer, and reads T(X) back. Nothing runs
between its layers, and its weights do not depend on the target: the same U serves every
target with n <= N, d <= D and at most H heads.

The program (positions and regions as in the layout; every selector depends only on
positions, so every head is a fixed gather or a fixed sum):

1. attention: R and V positions gather a row of X and a column of A~_h or W~_h;
   MLP: q = x~_i A~_h and v = x~_j W~_h (bilinear units);
2. attention: each P(i, j, h) gathers q[i,h,:], x_j, v[j,h,:], the padding bit of j and the
   causal flag; MLP: S = q . x~_j (bilinear) and the causal mask bit;
3. MLP: e = exp(S - 10^4 (pad_j + causal [j > i])) (an exp unit: masked keys give 0);
4. attention: Z = sum_j e over the row (i, h); MLP: 1/Z (a reciprocal unit) and e * v;
5. MLP: p v = (e v) / Z;
6. attention: each X position (i, c) sums p v over j and h; MLP: picks component c and adds
   b_O. The output is read at the X positions.

>>> import torch
>>> from attnsim.simulator import spec, universal
>>> U = universal.build(2, 2, 1)
>>> target = spec.random_attention(1, 2, seed=0)
>>> X = torch.randn(2, 2, dtype=torch.float64)
>>> from attnsim.simulator.reference import reference
>>> bool(torch.allclose(U.simulate(target, X), reference(target, X), rtol=1e-9, atol=1e-12))
True
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from attnsim.compiler import compile_program
from attnsim.model.compiled import CompiledModel, Resources
from attnsim.rasp import expr as E
from attnsim.rasp import interpret
from attnsim.simulator import spec as S
from attnsim.simulator.layout import Layout

MASK = 1.0e4  # exp(s - MASK) == 0 in float64 and float32 for any |s| <= 700
EPS_RANGE = (1e-6, 1.0)  # maps="relu", encoder: the LayerNorm eps a build accepts
EXP, INV_Z = "e", "inv_Z"  # labels of the exponentials and of 1/Z (maps and their bounds)


def _static(layout: Layout, name: str, fn) -> E.SOp:
    """A numerical S-op of the position alone: fn(roles) -> number (roles: role -> coords)."""
    table = [fn(layout.roles(p)) for p in range(layout.length)]
    return E.numerical(E.Map(lambda p, t=table: t[p], E.indices, simplify=False)).named(name)


def _gather(src: E.SOp, name: str) -> E.Selector:
    return E.Select(E.indices, src, E.Comparison.EQ).named(name)


def universal_program(layout: Layout, tiny: float = 1e-300) -> E.SOp:
    """U as a RASP program over numerical tokens laid out by ``layout``.

    Args:
        layout: the sequence layout (build sizes).
        tiny: added to every row sum before 1/Z, so that a row whose exponentials all
            underflow (only padding rows, for targets in range) gives 0 instead of inf;
            far below any real row sum (1e-300 for float64, 1e-37 for float32).
    """
    return attention_program(layout, E.numerical(E.tokens), tiny)


def attention_program(layout: Layout, x_source: E.SOp, tiny: float) -> E.SOp:
    """The attention part of U: reads X from ``x_source`` at the X positions.

    ``x_source`` is the tokens for an attention layer, or a computed S-op (a layer norm of
    the tokens, say) inside an encoder layer. The output is T(X)[i, c] at X position (i, c).
    """
    N, D, H, Dp = layout.N, layout.D, layout.H, layout.Dp
    del N, H
    tok = E.numerical(E.tokens)

    def agg(sel: E.Selector, sop: E.SOp, name: str) -> E.SOp:
        return E.numerical(E.Aggregate(sel, sop, default=0)).named(name)

    # layer 1: R(i,h,b) and V(j,h,c) read the row x_i (x_j) and a column of A~_h (W~_h);
    # X positions (i, c) read b_O[c]
    def src_x(a):
        def fn(roles):
            c = roles.get("R") or roles.get("V")
            return layout.xpos(c[0], a) if c is not None else -1

        return fn

    def src_m(a):
        def fn(roles):
            if "R" in roles:
                i, h, b = roles["R"]
                return layout.apos(h, a, b)
            if "V" in roles:
                j, h, c = roles["V"]
                return layout.wpos(h, a, c)
            return -1

        return fn

    gx = [
        agg(_gather(_static(layout, f"src_x{a}", src_x(a)), f"sel_x{a}"), x_source, f"x{a}")
        for a in range(D)
    ]
    gm = [
        agg(_gather(_static(layout, f"src_m{a}", src_m(a)), f"sel_m{a}"), tok, f"m{a}")
        for a in range(Dp)
    ]

    # the constant feature of x~ is 1 for the n real rows and 0 for padding rows: a padding
    # query row then has q = 0 and scores 0, so its exponentials stay finite whatever the
    # target's constant terms are
    def src_row_pad(roles):
        c = roles.get("R") or roles.get("V")
        return layout.padpos(c[0]) if c is not None else -1

    row_pad = agg(
        _gather(_static(layout, "src_row_pad", src_row_pad), "sel_row_pad"), tok, "row_pad"
    )
    t = (1 - row_pad) * gm[D]
    for a in range(D):
        t = t + gx[a] * gm[a]
    t = t.named("qv")  # q[i,h,b] at R positions, v[j,h,c] at V positions

    # layer 2: P(i,j,h) gathers q[i,h,:], x_j, v[j,h,:], pad_j and the causal flag
    def at_p(f):
        return lambda roles: f(*roles["P"]) if "P" in roles else -1

    gq = [
        agg(
            _gather(
                _static(layout, f"src_q{b}", at_p(lambda i, j, h, b=b: layout.rpos(i, h, b))),
                f"sel_q{b}",
            ),
            t,
            f"q{b}",
        )
        for b in range(Dp)
    ]
    sel_xj = _gather(
        _static(layout, "src_xj", at_p(lambda i, j, h: layout.vpos(j, h, 0))), "sel_xj"
    )
    gxj = [agg(sel_xj, gx[a], f"xj{a}") for a in range(D)]
    gv = [
        agg(
            _gather(
                _static(layout, f"src_v{c}", at_p(lambda i, j, h, c=c: layout.vpos(j, h, c))),
                f"sel_v{c}",
            ),
            t,
            f"v{c}",
        )
        for c in range(D)
    ]
    pad = agg(
        _gather(_static(layout, "src_pad", at_p(lambda i, j, h: layout.padpos(j))), "sel_pad"),
        tok,
        "pad",
    )
    flag = agg(
        _gather(_static(layout, "src_flag", at_p(lambda i, j, h: layout.flagpos())), "sel_flag"),
        tok,
        "flag",
    )
    score = gq[D]
    for a in range(D):
        score = score + gq[a] * gxj[a]
    score = score.named("score")
    future = _static(layout, "future", lambda r: float("P" in r and r["P"][1] > r["P"][0]))
    masked = (pad + flag * future).named("masked")

    # layer 3: the exponentials, 0 for masked keys
    e = E.exp(score - masked * MASK).named(EXP)

    # layer 4: row sums Z over keys j, then 1/Z and e * v
    def row(r, missing):
        return r["P"][0] * layout.H + r["P"][2] if "P" in r else missing

    row_k = _static(layout, "row_key", lambda r: row(r, -1))
    row_q = _static(layout, "row_query", lambda r: row(r, -2))
    Z = E.SumAggregate(E.Select(row_k, row_q, E.Comparison.EQ).named("sel_row"), e).named("Z")
    # positions outside P sum nothing (Z = 0): add 1 there so every value stays finite
    not_p = _static(layout, "not_p", lambda r: float("P" not in r))
    inv_z = E.reciprocal(Z + not_p + tiny).named(INV_Z)
    pv = [((e * gv[c]) * inv_z).named(f"pv{c}") for c in range(D)]

    # layer 6: X position (i, c) sums p*v over j and h and picks component c
    out_k = _static(layout, "out_key", lambda r: r["P"][0] if "P" in r else -1)
    out_q = _static(layout, "out_query", lambda r: r["X"][0] if "X" in r else -2)
    sel_out = E.Select(out_k, out_q, E.Comparison.EQ).named("sel_out")
    src_b = _static(layout, "src_b", lambda r: layout.bpos(r["X"][1]) if "X" in r else -1)
    y = agg(_gather(src_b, "sel_b"), tok, "b_O")  # b_O[c] at X positions (i, c)
    for c in range(D):
        onehot = _static(layout, f"is_col{c}", lambda r, c=c: float("X" in r and r["X"][1] == c))
        y = y + E.SumAggregate(sel_out, pv[c]).named(f"sum_pv{c}") * onehot
    return y.named("U")


@dataclass
class SimulatorReport(Resources):
    """U's resources (from the compiled model), its build sizes and its sequence length."""

    max_n: int = 0
    max_d: int = 0
    max_heads: int = 0
    max_ff: int = 0
    sequence_length: int = 0
    input_length: int = 0
    build_seconds: float = 0.0

    def __str__(self) -> str:
        return (
            f"U(N={self.max_n}, D={self.max_d}, H={self.max_heads}"
            f"{f', F={self.max_ff}' if self.max_ff else ''}): {self.layers} layers "
            f"({self.attention_layers} with attention), heads per layer {self.heads_per_layer}\n"
            f"  d_model={self.d_model} d_head={self.d_head} d_mlp={self.d_mlp} "
            f"d_bilinear={self.d_bilinear} native={self.d_native}\n"
            f"  parameters={self.parameters} (nonzero {self.nonzero_parameters}), sequence "
            f"length {self.sequence_length} ({self.input_length} carry <T, X>), built in "
            f"{self.build_seconds:.2f} s"
        )


Target = Any  # AttentionSpec | MergedAttention | nn.MultiheadAttention


class UniversalSimulator:
    """One compiled transformer that simulates any attention layer up to its build size."""

    def __init__(
        self,
        layout: Layout,
        program: E.SOp,
        model: CompiledModel,
        seconds: float,
        logit_bound: float | None = None,
        value_bound: float | None = None,
    ):
        self.layout = layout
        self.program = program
        self.model = model
        self._seconds = seconds
        self.logit_bound = logit_bound  # maps="relu": the largest |score| U accepts
        self.value_bound = value_bound  # maps="relu", encoder: the largest |value| U accepts

    @property
    def maps(self) -> str:
        """How U realises exp and 1/x: "native" units or "relu" (bounded)."""
        return "native" if self.logit_bound is None else "relu"

    @property
    def map_bounds(self) -> dict[str, float]:
        """maps="relu": the certified error of each ReLU-realised map, by label (``e``: the
        exponentials, ``inv_Z``: 1/Z, relative; the encoder's ``*_rsqrt`` relative and
        ``ffn_gelu*`` absolute); empty for native maps.

        >>> sorted(build(2, 2, 1, maps="relu", logit_bound=5.0, map_tolerance=1e-3).map_bounds)
        ['e', 'inv_Z']
        """
        return {
            r["label"]: r["bound"]
            for r in self.model.report().realisations
            if r.get("level") == "bounded" and r.get("bound") is not None
        }

    def error_bound(self, target: Target, X: Any, *, causal: bool | None = None) -> torch.Tensor:
        """A bound on ``|U(T, X) - T(X)|``, entry by entry (attention targets).

        With every exponential within a relative ``eps_e`` and 1/Z within ``eps_r`` (the
        per-map bounds of maps="relu"; 0 for native maps), each softmax weight is within a
        relative ``kappa = (1 + eps_e)(1 + eps_r) / (1 - eps_e) - 1`` of the true one, so in
        exact arithmetic ``|error[i, c]| <= kappa * W[i, c]`` with
        ``W[i, c] = sum_h sum_j p_hij |v_hjc|``. Rounding adds the standard worst case for
        sums of ``m`` terms, ``m u`` (``u`` the unit roundoff, ``m`` the widest ReLU map plus
        d_model plus the sequence length), of ``W + |b_O|``. So the bound is
        ``(kappa + m u) W + m u |b_O|``.

        Raises:
            ValueError: an encoder-layer target (use ``relative_error`` against
                ``reference`` and the per-map ``map_bounds`` there), or a bad X.

        >>> import torch
        >>> from attnsim.simulator.reference import reference
        >>> U = build(2, 2, 1, maps="relu", logit_bound=5.0, map_tolerance=1e-4)
        >>> T, X = S.random_attention(1, 2, seed=0), torch.tensor([[0.5, -1.0], [1.0, 0.2]])
        >>> bool(((U.simulate(T, X) - reference(T, X)).abs() <= U.error_bound(T, X)).all())
        True
        """
        from attnsim.simulator import reference as R

        spec_ = self._target(target, causal)
        if isinstance(spec_, S.EncoderLayerSpec):
            raise ValueError(
                "error_bound covers attention targets, got an encoder layer (LayerNorm has no "
                "composite bound); compare with reference() and read U.map_bounds instead"
            )
        merged = self._merged(spec_, causal)
        X = self._check_x(X, merged.d_model)
        if causal is not None:
            merged = dataclasses.replace(merged, causal=bool(causal))
        weight = (R.pattern(merged, X) @ R.values(merged, X).abs()).sum(dim=0)  # [n, d]
        bounds = self.map_bounds
        eps_e, eps_r = bounds.get(EXP, 0.0), bounds.get(INV_Z, 0.0)
        kappa = (1.0 + eps_e) * (1.0 + eps_r) / (1.0 - eps_e) - 1.0
        cfg = self.model.config
        m = cfg.d_mlp + cfg.d_model + self.layout.length
        u = torch.finfo(torch.float64 if cfg.dtype == "float64" else torch.float32).eps / 2
        return (kappa + m * u) * weight + m * u * merged.b_O.abs()

    def _check_encoder_ranges(self, target: S.EncoderLayerSpec, X: torch.Tensor) -> None:
        """maps="relu": the values the encoder U's ReLU maps read must be in their ranges."""
        if self.value_bound is None:
            return
        from attnsim.simulator import reference as R

        V = self.value_bound
        for name, norm in (("norm1", target.norm1), ("norm2", target.norm2)):
            if not EPS_RANGE[0] <= norm.eps <= EPS_RANGE[1]:
                raise ValueError(
                    f"the target's {name}.eps = {norm.eps:g} is outside [{EPS_RANGE[0]:g}, "
                    f"{EPS_RANGE[1]:g}], the range this U's ReLU 1/sqrt covers (maps='relu')"
                )

        def check(what: str, values: torch.Tensor) -> None:
            top = float(values.abs().max())
            if not top <= V:
                raise ValueError(
                    f"{what} reach |{top:.4g}|, beyond the value bound {V:g} this U "
                    "(maps='relu') was built for; build with a larger value_bound"
                )

        check("X", X)
        pre = bool(target.norm_first)
        a = R.layer_norm(target.norm1, X) if pre else X
        self._check_logits(target.attention.merged(), a)
        z1 = X + R.attention(target.attention, a)
        check("X + attention", z1)
        u = R.layer_norm(target.norm2 if pre else target.norm1, z1)
        ffn = target.ffn
        check("the feed-forward pre-activations", u @ ffn.W1 + ffn.b1)
        check("the sum after the feed-forward block", (z1 if pre else u) + R.feed_forward(ffn, u))

    def _check_logits(self, merged: S.MergedAttention, X: torch.Tensor) -> None:
        """maps="relu": every score a query sees must lie within the build's logit bound."""
        if self.logit_bound is None:
            return
        from attnsim.simulator import reference as R

        s = R.scores(merged, X)
        n = X.shape[0]
        seen = torch.ones(n, n, dtype=torch.bool)
        if merged.causal:
            seen = torch.tril(seen)
        top = float(s[:, seen].abs().max())
        if not top <= self.logit_bound:
            raise ValueError(
                f"the target's attention scores on this X reach |{top:.4g}|, beyond the logit "
                f"bound {self.logit_bound:g} this U (maps='relu') was built for: its ReLU exp "
                "covers only that range; build with a larger logit_bound"
            )

    @property
    def max_n(self) -> int:
        return self.layout.N

    @property
    def max_d(self) -> int:
        return self.layout.D

    @property
    def max_heads(self) -> int:
        return self.layout.H

    # -- targets -----------------------------------------------------------------------------
    @property
    def is_encoder(self) -> bool:
        return self.layout.F > 0

    def _target(self, target: Target, causal: bool | None):
        """The target as a spec (AttentionSpec/MergedAttention or EncoderLayerSpec)."""
        if isinstance(target, nn.Module):
            target = S.from_torch(target, causal=bool(causal))
        if isinstance(target, S.EncoderLayerSpec):
            if not self.is_encoder:
                raise ValueError(
                    "this U simulates attention layers; build one with layer='encoder' for full "
                    "encoder layers"
                )
            self._check_encoder(target)
            return target
        if not isinstance(target, (S.AttentionSpec, S.MergedAttention)):
            raise TypeError(
                f"simulate expects an AttentionSpec, a MergedAttention, an EncoderLayerSpec or a "
                f"torch.nn.MultiheadAttention / TransformerEncoderLayer, got "
                f"{type(target).__name__}"
            )
        if self.is_encoder:
            raise ValueError(
                "this U simulates encoder layers; give an EncoderLayerSpec or a "
                "torch.nn.TransformerEncoderLayer (or build a U with layer='attention')"
            )
        return target

    def _check_encoder(self, target: S.EncoderLayerSpec) -> None:
        ffn = target.ffn
        if ffn.d_mlp > self.layout.F:
            raise ValueError(
                f"target's feed-forward width is {ffn.d_mlp}, but this U was built for at most "
                f"{self.layout.F}; build a U with a larger max_ff"
            )
        if ffn.activation.value == "maxmin":
            raise NotImplementedError(
                "the encoder U simulates relu, gelu and gelu_tanh feed-forward blocks; maxmin "
                "is not built yet"
            )
        if target.norm1 is None or target.norm2 is None:
            raise NotImplementedError(
                "the encoder U simulates layers with both LayerNorms (as torch's "
                "TransformerEncoderLayer has); a layer without them is not built yet"
            )

    def _merged(self, target: Target, causal: bool | None) -> S.MergedAttention:
        target = self._target(target, causal)
        attention = target.attention if isinstance(target, S.EncoderLayerSpec) else target
        merged = attention.merged()
        if merged.n_heads > self.max_heads or merged.d_model > self.max_d:
            raise ValueError(
                f"target has {merged.n_heads} heads and d={merged.d_model}, but this U was "
                f"built for at most {self.max_heads} heads and d <= {self.max_d}; build a "
                "larger U with simulator.build(max_n, max_d, max_heads)"
            )
        return merged

    def _check_x(self, X: Any, d: int) -> torch.Tensor:
        X = torch.as_tensor(X, dtype=torch.float64)
        if X.ndim != 2 or X.shape[1] != d:
            raise ValueError(f"X must have shape (n, {d}), got {tuple(X.shape)}")
        n = X.shape[0]
        if not 1 <= n <= self.max_n:
            raise ValueError(
                f"X has n={n} rows, but this U was built for 1 <= n <= {self.max_n}; build a "
                "larger U"
            )
        if not torch.isfinite(X).all():
            i, c = (int(v) for v in torch.nonzero(~torch.isfinite(X))[0])
            raise ValueError(f"X[{i}, {c}] = {float(X[i, c])} is not finite")
        return X

    def encode(self, target: Target, X: Any, *, causal: bool | None = None) -> np.ndarray:
        """Writes <T, X> into U's input sequence (see :mod:`attnsim.simulator.layout`)."""
        spec_ = self._target(target, causal)
        merged = self._merged(spec_, causal)
        X = self._check_x(X, merged.d_model)
        A_aug, W_aug = merged.augmented()
        is_causal = merged.causal if causal is None else bool(causal)
        if not isinstance(spec_, S.EncoderLayerSpec):
            self._check_logits(
                merged if causal is None else dataclasses.replace(merged, causal=is_causal), X
            )
        seq = self.layout.encode(
            A_aug.numpy(), W_aug.numpy(), merged.b_O.numpy(), X.numpy(), is_causal
        )
        if isinstance(spec_, S.EncoderLayerSpec):
            self._check_encoder_ranges(spec_, X)
            self._encode_encoder(seq, spec_, merged.d_model)
        return seq

    def _encode_encoder(self, seq: np.ndarray, target: S.EncoderLayerSpec, d: int) -> None:
        lay = self.layout
        pre = bool(target.norm_first)
        unused = None
        slots = (
            (target.norm1, unused, target.norm2)
            if not pre
            else (target.norm1, target.norm2, unused)
        )
        if not pre:
            slots = (unused, target.norm1, target.norm2)
        for k, norm in enumerate(slots):
            if norm is None:
                seq[lay.lnpos(k, "eps")] = 1.0  # gain 0: the slot's output is 0, never inf
                continue
            for c in range(d):
                seq[lay.lnpos(k, "gain", c)] = float(norm.weight[c])
                seq[lay.lnpos(k, "bias", c)] = float(norm.bias[c])
            seq[lay.lnpos(k, "eps")] = float(norm.eps)
        act = target.ffn.activation.value
        seq[lay.flagpos_named("norm_first")] = 1.0 if pre else 0.0
        seq[lay.flagpos_named(act)] = 1.0
        for c in range(d):
            seq[lay.colvpos(c)] = 1.0
        ffn = target.ffn
        for c in range(d):
            for m in range(ffn.d_mlp):
                seq[lay.w1pos(c, m)] = float(ffn.W1[c, m])
                seq[lay.w2pos(m, c)] = float(ffn.W2[m, c])
            seq[lay.b2pos(c)] = float(ffn.b2[c])
        for m in range(ffn.d_mlp):
            seq[lay.b1pos(m)] = float(ffn.b1[m])

    def simulate(self, target: Target, X: Any, *, causal: bool | None = None) -> torch.Tensor:
        """Runs U on <T, X> and returns T(X) as an ``(n, d)`` float64 tensor.

        Args:
            target: an AttentionSpec / MergedAttention, or a torch.nn.MultiheadAttention.
            X: the input, shape ``(n, d)``.
            causal: for a torch module, whether to apply a causal mask (torch passes masks
                at call time); for specs, overrides the spec's flag when given.

        Raises:
            ValueError: sizes beyond the build, non-finite values, or an output that
                overflowed (scores too large for exp).
        """
        return self.simulate_batch([(target, X)], causal=causal)[0]

    def simulate_batch(
        self, items: Sequence[tuple[Target, Any]], *, causal: bool | None = None
    ) -> list[torch.Tensor]:
        """Simulates several (target, X) pairs in one forward pass."""
        seqs, shapes = [], []
        for target, X in items:
            target = self._target(target, causal)
            merged = self._merged(target, causal)
            seqs.append(self.encode(target, X, causal=causal))
            shapes.append((torch.as_tensor(X).shape[0], merged.d_model))
        out = self.model.run(np.stack(seqs), check=False)
        results = []
        for row, (n, d) in zip(out, shapes):
            idx = self.layout.output_positions(n, d)
            Y = torch.tensor(np.asarray(row, dtype=np.float64)[idx], dtype=torch.float64)
            if not torch.isfinite(Y).all():
                raise ValueError(
                    "U's output is not finite: the target's scores are too large for exp in "
                    f"{self.model.config.dtype} (|score| must stay below about "
                    f"{'700' if self.model.config.dtype == 'float64' else '88'})"
                )
            results.append(Y)
        return results

    def interpret(self, target: Target, X: Any, *, causal: bool | None = None) -> torch.Tensor:
        """The same computation by the RASP interpreter (U's program, not its weights)."""
        target = self._target(target, causal)
        merged = self._merged(target, causal)
        seq = self.encode(target, X, causal=causal)
        out = interpret.evaluate(self.program, seq[None, :])[0]
        n, d = torch.as_tensor(X).shape[0], merged.d_model
        idx = self.layout.output_positions(n, d)
        return torch.tensor(np.asarray(out, dtype=np.float64)[idx], dtype=torch.float64)

    def report(self) -> SimulatorReport:
        """Layers, heads per layer, widths, parameters and sequence length."""
        return SimulatorReport(
            **self.model.report().resources(),
            max_n=self.max_n,
            max_d=self.max_d,
            max_heads=self.max_heads,
            max_ff=self.layout.F,
            sequence_length=self.layout.length,
            input_length=self.layout.input_length,
            build_seconds=self._seconds,
        )


def build(
    max_n: int,
    max_d: int,
    max_heads: int = 1,
    *,
    layer: str = "attention",
    max_ff: int | None = None,
    attention: str = "hard",
    maps: str = "native",
    logit_bound: float = 50.0,
    value_bound: float = 20.0,
    map_tolerance: float = 1e-6,
    dtype: torch.dtype = torch.float64,
) -> UniversalSimulator:
    """Builds U for targets with n <= max_n, d <= max_d and at most max_heads heads.

    Args:
        max_n: the most rows of X.
        max_d: the largest model width d.
        max_heads: the most attention heads.
        layer: "attention" (a multi-head attention layer) or "encoder" (a full
            TransformerEncoderLayer: attention, residuals, LayerNorms before or after, and a
            ReLU/GELU feed-forward block).
        max_ff: the largest feed-forward width (encoder only; default 2 * max_d).
        attention: U's own attention: "hard" (average-hard) or "softmax".
        maps: "native" (exp, 1/x, rsqrt, gelu as declared elementwise units, exact) or
            "relu" (ReLU units only: exp, 1/x and rsqrt piecewise linear with certified
            relative error bounds, gelu with an absolute one; see ``map_bounds`` and, for
            attention targets, ``error_bound``).
        logit_bound: maps="relu": the largest |score| of a target on its X. exp is realised
            on [-logit_bound, logit_bound] and 1/Z on the row sums that range allows;
            ``simulate`` refuses targets beyond it.
        value_bound: maps="relu", encoder: the largest |entry| of X, of the sums after each
            residual, and of the feed-forward pre-activations (1/sqrt is realised on
            [1e-6, value_bound^2 + 2] and gelu on [-value_bound, value_bound]); LayerNorm
            eps must lie in [1e-6, 1]. ``simulate`` checks these on the target first.
        map_tolerance: maps="relu": the relative error allowed to each map. The ReLU widths
            grow as ``logit_bound / sqrt(map_tolerance)`` (about 35,000 units for exp and
            52,000 for 1/Z at 50 and 1e-6).
        dtype: torch.float64 or torch.float32.

    Returns:
        A UniversalSimulator with ``simulate``, ``encode``, ``interpret`` and ``report``.
    """
    if layer not in ("attention", "encoder"):
        raise ValueError(f"layer must be 'attention' or 'encoder', got {layer!r}")
    if maps not in ("native", "relu"):
        raise ValueError(f"maps must be 'native' or 'relu', got {maps!r}")
    map_ranges = None
    if maps == "relu":
        if not (math.isfinite(logit_bound) and 0 < logit_bound <= 700):
            raise ValueError(f"logit_bound must be in (0, 700], got {logit_bound!r}")
        if not (math.isfinite(value_bound) and value_bound > 0):
            raise ValueError(f"value_bound must be positive and finite, got {value_bound!r}")
        B = float(logit_bound)
        # scores within [-B, B]; masked ones sit near -10^4, where the ReLU exp is exactly 0.
        # A row sum Z lies in [e^-B (1 - t), max_n e^B (1 + t)]; positions outside P use 1.
        map_ranges = {EXP: (-B, B), INV_Z: (math.exp(-B) / 2.0, 2.0 * max_n * math.exp(B))}
        if layer == "encoder":
            # LayerNorm: var + eps (+1 outside X) within [EPS_RANGE[0], V^2 + 2]; the
            # feed-forward pre-activations within [-V, V]
            V = float(value_bound)
            for name in ("ln_input", "ln_middle", "ln_output"):
                map_ranges[f"{name}_rsqrt"] = (EPS_RANGE[0], V * V + EPS_RANGE[1] + 1.0)
            map_ranges["ffn_pre"] = (-V, V)
    start = time.perf_counter()
    tiny = 1e-300 if dtype == torch.float64 else 1e-37
    if layer == "encoder":
        from attnsim.simulator.encoder import encoder_program

        layout = Layout(max_n, max_d, max_heads, max_ff if max_ff is not None else 2 * max_d)
        program = encoder_program(layout, tiny=tiny)
    else:
        if max_ff is not None:
            raise ValueError("max_ff applies to layer='encoder' only")
        layout = Layout(max_n, max_d, max_heads)
        program = universal_program(layout, tiny=tiny)
    model = compile_program(
        program,
        vocab=None,
        max_seq_len=layout.length,
        fixed_length=True,
        attention=attention,
        maps=maps,
        map_tolerance=map_tolerance,
        map_ranges=map_ranges,
        map_error="relative",
        dtype=dtype,
        # heads average exponentials spanning up to e^(+-700) (float64) or e^(+-88)
        value_scale=math.exp(700.0 if dtype == torch.float64 else 88.0),
    )
    return UniversalSimulator(
        layout,
        program,
        model,
        time.perf_counter() - start,
        logit_bound=float(logit_bound) if maps == "relu" else None,
        value_bound=float(value_bound) if maps == "relu" and layer == "encoder" else None,
    )


__all__ = ["UniversalSimulator", "SimulatorReport", "build", "universal_program", "math"]
