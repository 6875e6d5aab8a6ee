"""The universal simulator U: one compiled transformer, fixed weights, any attention layer.

``build(N, D, H)`` writes U as a RASP program over real-valued tokens and compiles it once.
``U.simulate(target, X)`` lays the target's parameters and X into one sequence
(:mod:`attnsim.simulator.layout`), runs the transformer, and reads T(X) back. Nothing runs
between its layers, and its weights do not depend on the target: the same U serves every
target with n <= N, d <= D and at most H heads.

The program (positions and regions as in the layout; every selector but one depends only on
positions, so every head is a fixed gather or a fixed sum, and the one that is not picks the
largest score of a row):

1. attention: R and V positions gather a row of X and a column of A~_h or W~_h;
   MLP: q = x~_i A~_h and v = x~_j W~_h (bilinear units);
2. attention: each P(i, j, h) gathers q[i,h,:], x_j, v[j,h,:], the padding bit of j and the
   causal flag; MLP: S = q . x~_j (bilinear) and the causal mask bit;
3. attention: m = the largest S over the row's unmasked keys (one ``SelectMax`` head);
   MLP: e = exp(S - m - M (pad_j + causal [j > i])) (an exp unit; masked keys give 0);
4. attention: Z = sum_j e over the row (i, h), at least 1; MLP: 1/Z and e * v;
5. MLP: p v = (e v) / Z;
6. attention: each X position (i, c) sums p v over j and h; MLP: picks component c and adds
   b_O. The output is read at the X positions.

The shift m of step 3 is *bounded*, not exact: a hard head averages the scores within its
tolerance (0.25) of the row maximum (a softmax head weights them), so m lies up to 0.25 below
it. The output stays exact, as softmax is invariant to any shift of a row; what the shift
buys is that every exponent is at most about 0 and every row sum Z is in [1, n e^0.25], for
any row of scores within the score bound (1e4 in float64 by default), however far it is
shifted. U's transformer checks at run time what it relies on (the scores' range; with
maps="relu", the input range of every ReLU map) and ``simulate`` raises, naming the
quantity and the bound, when a target leaves it; no Python reference runs on that path.

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
from attnsim.model import memory
from attnsim.model.compiled import CompiledModel, Resources
from attnsim.rasp import expr as E
from attnsim.rasp import interpret
from attnsim.simulator import spec as S
from attnsim.simulator.layout import Layout

EPS_RANGE = (1e-6, 1.0)  # maps="relu", encoder: the LayerNorm eps a build accepts
LN_SLOT_NAMES = {  # the encoder U's LayerNorm slots, in the target's terms
    "ln_input": "before the attention: norm1 of a pre-norm layer",
    "ln_middle": "after the attention: norm1 of a post-norm layer, norm2 of a pre-norm one",
    "ln_output": "after the feed-forward block: norm2 of a post-norm layer",
}
EXP, INV_Z = "e", "inv_Z"  # labels of the exponentials and of 1/Z (maps and their bounds)
SCORE, ROW_MAX = "score", "row_max"  # labels of the target's scores and of their row maxima
# the default bound on |score| (every score of the target on its X, masked keys included),
# and the largest one a build accepts, by dtype: beyond 1e6 a float64 score carries an
# absolute rounding error (|s| * 2^-53 and more) that shows in exp at the 1e-9 level; float32
# is also limited by the max head's precision (see ``max_score_bound``)
SCORE_BOUND = {torch.float64: 1.0e4, torch.float32: 1.0e3}
SCORE_LIMIT = {torch.float64: 1.0e6, torch.float32: 1.0e4}
LOGIT_LIMIT = 350.0  # maps="relu": exp is realised down to e^(-2 logit_bound) > 0
# exp reads s - m, m the row maximum found by a hard head (within its tolerance 0.25 below
# the true maximum, plus rounding): every exponent of an unmasked key is <= EXP_HI
EXP_HI = 1.0


def mask_offset(score_bound: float) -> float:
    """What a masked key's exponent is lowered by: with |s|, |m| <= score_bound its exponent
    is then <= -2000, where exp is exactly 0 in float64 and float32 and the ReLU exp (ramping
    to 0 one unit below -2 logit_bound >= -701) is too."""
    return 2.0 * float(score_bound) + 2000.0


def _static(layout: Layout, name: str, fn) -> E.SOp:
    """A numerical S-op of the position alone: fn(roles) -> number (roles: role -> coords)."""
    table = [fn(layout.roles(p)) for p in range(layout.length)]
    return E.numerical(E.Map(lambda p, t=table: t[p], E.indices, simplify=False)).named(name)


def _gather(src: E.SOp, name: str) -> E.Selector:
    return E.Select(E.indices, src, E.Comparison.EQ).named(name)


def universal_program(layout: Layout, score_bound: float = SCORE_BOUND[torch.float64]) -> E.SOp:
    """U as a RASP program over numerical tokens laid out by ``layout``.

    Args:
        layout: the sequence layout (build sizes).
        score_bound: the largest |score| of a target on its X (declared on the score S-op,
            which the max head needs, and checked at run time).
    """
    return attention_program(layout, E.numerical(E.tokens), score_bound)


def attention_program(layout: Layout, x_source: E.SOp, score_bound: float) -> E.SOp:
    """The attention part of U: reads X from ``x_source`` at the X positions.

    ``x_source`` is the tokens for an attention layer, or a computed S-op (a layer norm of
    the tokens, say) inside an encoder layer. The output is T(X)[i, c] at X position (i, c).
    The softmax is shifted by each row's maximum score over its unmasked keys (one
    ``SelectMax`` head), so that every exponent is at most about 0 and every row sum at
    least 1: any row of scores within ``+-score_bound`` works, however far it is shifted.
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
    # a padding key's constant feature is 0 (its other features are): it scores exactly 0
    score = gq[D] * (1 - pad)
    for a in range(D):
        score = score + gq[a] * gxj[a]
    score = E.numerical(score.named(SCORE), value_range=(-score_bound, score_bound))
    future = _static(layout, "future", lambda r: float("P" in r and r["P"][1] > r["P"][0]))
    masked = (pad + flag * future).named("masked")  # 0, 1 or 2 (padding and future)

    # row ids of P(i, j, h): (i, h), centred on 0 (smaller magnitudes in the max head's
    # quadratic score); keys and queries outside P get two values no P row has
    rows = layout.N * layout.H
    centre = rows // 2

    def row(r, missing):
        return r["P"][0] * layout.H + r["P"][2] - centre if "P" in r else missing

    row_k = _static(layout, "row_key", lambda r: row(r, rows - centre))
    row_q = _static(layout, "row_query", lambda r: row(r, rows - centre + 1))
    sel_row = E.Select(row_k, row_q, E.Comparison.EQ).named("sel_row")

    # layer 3: m = the largest score over the row's unmasked keys (a causal row always has
    # its diagonal key, and key 0 is never padding), then the exponentials e = exp(s - m),
    # exactly 0 for masked keys
    zero = _static(layout, "zero", lambda r: 0.0)
    unmasked = (sel_row & E.Select(masked, zero, E.Comparison.EQ)).named("sel_row_unmasked")
    m = E.numerical(E.Aggregate(E.SelectMax(unmasked, score).named("sel_max"), score, default=0))
    m = m.named(ROW_MAX)
    e = E.exp(score - m - masked * mask_offset(score_bound)).named(EXP)

    # layer 4: row sums Z over keys j (Z >= 1: the maximal key has e >= 1), then 1/Z, e * v
    Z = E.SumAggregate(sel_row, e).named("Z")
    # positions outside P sum nothing (Z = 0): add 1 there so every value stays finite
    not_p = _static(layout, "not_p", lambda r: float("P" not in r))
    inv_z = E.reciprocal(Z + not_p).named(INV_Z)
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
        score_bound: float = SCORE_BOUND[torch.float64],
    ):
        self.layout = layout
        self.program = program
        self.model = model
        self._seconds = seconds
        # maps="relu": exp is certified on exponents s - max >= -2 logit_bound
        self.logit_bound = logit_bound
        self.value_bound = value_bound  # maps="relu", encoder: the ReLU maps' value scale
        self.score_bound = score_bound  # the largest |score| of a target U accepts

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

        U computes ``e_j = exp(s_j - m)`` with ``m`` its row maximum, so ``Z >= 1``. With
        maps="relu" every exponential whose exponent is at least ``-2 logit_bound`` is within
        a relative ``eps_e`` (the per-map bound, times ``e^eps_s`` for the rounding of the
        exponent: ``eps_s = 2 (2 d + 6) u max |x~_i| |A~_h| |x~_j|``, which grows with the
        size of the scores, shifted or not) and any other one, below
        ``delta = e^(-2 logit_bound)``, within ``delta`` absolutely; 1/Z is within a relative
        ``eps_r`` (all 0 for native maps). So ``Z`` is within a relative
        ``eps_z = eps_e + n delta``, each weight of a key in the certified range within a
        relative ``kappa = (1 + eps_e)(1 + eps_r) / (1 - eps_z) - 1`` of the true one, and
        any other weight within ``delta' = delta (1 + eps_r) / (1 - eps_z)`` absolutely: in
        exact arithmetic ``|error[i, c]| <= kappa W[i, c] + delta' V[i, c]`` with
        ``W[i, c] = sum_h sum_j p_hij |v_hjc|`` and ``V[i, c] = sum_h sum_j |v_hjc|`` (keys
        the query sees). Rounding adds the standard worst case for sums of ``m`` terms,
        ``m u`` (``u`` the unit roundoff, ``m`` the widest ReLU map plus d_model plus the
        sequence length), of ``W + |b_O|``. So the bound is
        ``(kappa + m u) W + delta' V + m u |b_O|``.

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
        absv = R.values(merged, X).abs()  # [h, n, d]
        weight = (R.pattern(merged, X) @ absv).sum(dim=0)  # [n, d]
        bounds = self.map_bounds
        cfg = self.model.config
        u = torch.finfo(torch.float64 if cfg.dtype == "float64" else torch.float32).eps / 2
        n = X.shape[0]
        # the exponents s - m carry the rounding of the scores: |s| and |m| are at most
        # |x~_i| |A~_h| |x~_j| summed, and a bilinear form over d + 1 features (then the
        # subtraction of m and the exponent's linear form) rounds by (2 d + 6) u of that;
        # counted twice, for the float64 reference U is compared with
        A_aug, _ = merged.augmented()
        Xt = torch.cat([X, torch.ones(n, 1, dtype=X.dtype)], dim=1).abs()  # [n, d + 1]
        size = float((Xt @ A_aug.abs() @ Xt.T).max())  # the largest |x~_i| |A~_h| |x~_j|
        eps_s = 2.0 * (2 * merged.d_model + 6) * u * size
        eps_e = (1.0 + bounds.get(EXP, 0.0)) * math.exp(eps_s) - 1.0
        eps_r = bounds.get(INV_Z, 0.0)
        delta = 0.0 if self.logit_bound is None else math.exp(-2.0 * self.logit_bound)
        eps_z = eps_e + n * delta
        kappa = (1.0 + eps_e) * (1.0 + eps_r) / (1.0 - eps_z) - 1.0
        seen = torch.ones(n, n, dtype=torch.float64)
        if merged.causal:
            seen = torch.tril(seen)
        below = delta * (1.0 + eps_r) / (1.0 - eps_z) * (seen @ absv).sum(dim=0)  # [n, d]
        m = cfg.d_mlp + cfg.d_model + self.layout.length
        return (kappa + m * u) * weight + below + m * u * merged.b_O.abs()

    def _check_norm_eps(self, target: S.EncoderLayerSpec) -> None:
        """maps="relu", encoder: each LayerNorm's eps must lie in the range U's 1/sqrt covers
        for a constant row (variance 0)."""
        if self.value_bound is None:
            return
        for name, norm in (("norm1", target.norm1), ("norm2", target.norm2)):
            if not EPS_RANGE[0] <= norm.eps <= EPS_RANGE[1]:
                raise ValueError(
                    f"the target's {name}.eps = {norm.eps:g} is outside [{EPS_RANGE[0]:g}, "
                    f"{EPS_RANGE[1]:g}], the range this U's ReLU 1/sqrt covers (maps='relu')"
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
        seq = self.layout.encode(
            A_aug.numpy(), W_aug.numpy(), merged.b_O.numpy(), X.numpy(), is_causal
        )
        if isinstance(spec_, S.EncoderLayerSpec):
            self._check_norm_eps(spec_)
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
            ValueError: sizes beyond the build, non-finite values, or a value U's own
                run-time checks find outside the range it was built for (a score beyond
                ``score_bound``; with maps="relu", a LayerNorm variance or a feed-forward
                pre-activation beyond what ``value_bound`` covers): the message names the
                quantity, where it occurs, the bound and what to build instead.
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
        out = self._run(np.stack(seqs))  # [batch, length]
        results = []
        for row, (n, d) in zip(out, shapes):
            Y = row[torch.from_numpy(self.layout.output_positions(n, d))]
            if not torch.isfinite(Y).all():  # not expected once the checks have passed
                raise ValueError(
                    "U's output is not finite although its run-time checks passed; this is "
                    "a defect of U: please report the target and X"
                )
            results.append(Y)
        return results

    def _run(self, seqs: np.ndarray) -> torch.Tensor:
        """Runs U's transformer on encoded sequences ``[batch, length]`` and returns its
        numerical output at every position ``[batch, length]`` (float64), after U's
        compiled run-time checks (the guards the compiler placed on the values U's maps and
        its max head rely on) have passed."""
        model = self.model
        ids, vals = model.encode(seqs)
        checks = [g for g in model.guards if not getattr(g, "on_block", False)]
        streams: dict[int, torch.Tensor | None] = {g.stage: None for g in checks}
        with torch.no_grad():
            resid = model.model(ids, vals, streams=streams)  # [batch, 1 + length, d_model]
        for g in checks:
            self._check(g, self._read(streams[g.stage][:, 1:], g.form))
        if any(getattr(g, "on_block", False) for g in model.guards):
            model._check_blocks(resid)  # categorical blocks: U has none today
        return self._read(resid[:, 1:], model.output.form).to(torch.float64)

    def _read(self, resid: torch.Tensor, form) -> torch.Tensor:
        index = self._residual_index
        acc = torch.zeros(resid.shape[:-1], dtype=resid.dtype)
        for direction, w in form:
            acc = acc + w * resid[..., index[direction]]
        return acc

    @property
    def _residual_index(self) -> dict[str, int]:
        got = getattr(self, "_index", None)
        if got is None:
            got = self._index = {d: i for i, d in enumerate(self.model.residual)}
        return got

    def _check(self, guard, vals: torch.Tensor) -> None:
        """Raises a ValueError that names the quantity, where, the bound and what to do when
        a guarded value (``vals``: ``[batch, length]``) leaves what U was built for."""
        if guard.value_range is not None:
            lo, hi = guard.value_range
            slack = 1e-9 * max(1.0, abs(lo) if math.isfinite(lo) else 1.0, abs(hi))
            bad = (vals < lo - slack) | (vals > hi + slack) | ~torch.isfinite(vals)
        elif guard.integer:
            bad = (vals - vals.round()).abs() > 1e-6 * vals.abs().clamp(min=1)
            lo = hi = math.nan
        else:
            allowed = torch.tensor(guard.allowed, dtype=vals.dtype)
            bad = (vals[..., None] - allowed).abs().amin(dim=-1) > 1e-6 * vals.abs().clamp(min=1)
            lo = hi = math.nan
        if not bool(bad.any()):
            return
        b, p = (int(x) for x in torch.nonzero(bad)[0])
        raise ValueError(self._range_message(guard.label, p, float(vals[b, p]), lo, hi, b))

    def _range_message(self, label: str, p: int, v: float, lo: float, hi: float, b: int) -> str:
        roles = self.layout.roles(p)
        which = f" (target {b} of the batch)" if b else ""
        dtype = self.model.config.dtype
        if label == SCORE and "P" in roles:
            i, j, h = roles["P"]
            return (
                f"the target's attention score of query row {i} and key row {j} in head {h} "
                f"is {v:.6g}{which}, beyond +-{self.score_bound:g}, the score bound this U was "
                f"built for (scores of masked keys count too); build U with a larger "
                f"score_bound (at most {max_score_bound(self.layout, _torch_dtype(dtype)):g} "
                f"for this build in {dtype}) or scale the target's scores down"
            )
        if label.endswith("_rsqrt") and self.value_bound is not None:
            slot = label[: -len("_rsqrt")]
            where = f" for row {roles['X'][0]}" if "X" in roles else ""
            return (
                f"LayerNorm '{slot}' ({LN_SLOT_NAMES.get(slot, 'a LayerNorm')}): the variance "
                "plus eps of the values it normalises is "
                f"{v:.6g}{where}{which}, outside [{lo:g}, {hi:g}], the range this U's ReLU "
                f"1/sqrt covers (maps='relu', value_bound {self.value_bound:g}: entries up to "
                f"about +-{self.value_bound:g}); build U with a larger value_bound"
            )
        if label.startswith("ffn_") and self.value_bound is not None:
            where = ""
            if "HID" in roles:
                where = f" for row {roles['HID'][0]} and hidden unit {roles['HID'][1]}"
            return (
                f"the feed-forward pre-activations reach {v:.6g}{where}{which}, beyond the "
                f"value bound {self.value_bound:g} this U (maps='relu') was built for: its "
                "ReLU gelu covers only [-value_bound, value_bound]; build U with a larger "
                "value_bound"
            )
        bounds = f"[{lo:g}, {hi:g}]" if math.isfinite(hi) else "its planned values"
        return (
            f"U's run-time check on {label!r} failed: {v:.6g} at sequence position {p}{which} "
            f"is outside {bounds}; U would be wrong here. This is not expected for any target "
            "within the build's bounds: please report the target and X"
        )

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
    score_bound: float | None = None,
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
        logit_bound: maps="relu": U shifts each row of scores by its maximum, and exp is
            realised on exponents in [-2 logit_bound, 1] (those of every row whose scores lie
            within logit_bound of some centre, anywhere within the score bound); a key further
            below its row's maximum gets a weight within e^(-2 logit_bound) absolutely, which
            ``error_bound`` counts. 1/Z is realised on [1/2, 2 e max_n]. At most 350.
        value_bound: maps="relu", encoder: the scale of the values the ReLU maps read:
            1/sqrt is realised on [1e-6, value_bound^2 + 2] (a LayerNorm's variance plus
            eps: rows with entries up to about value_bound) and gelu on [-value_bound,
            value_bound] (the feed-forward pre-activations); LayerNorm eps must lie in
            [1e-6, 1]. U checks these values while it runs and refuses a target beyond them.
        map_tolerance: maps="relu": the relative error allowed to each map. The ReLU widths
            grow as ``logit_bound / sqrt(map_tolerance)`` (about 35,000 units for exp at 50
            and 1e-6; 1/Z needs about 1,000).
        dtype: torch.float64 or torch.float32.
        score_bound: the largest |score| of a target on its X (every query-key pair of every
            head, masked keys included) that U accepts: U checks it while it runs. Default
            1e4 in float64 (at most 1e6) and 1e3 in float32 (at most what
            ``max_score_bound`` allows for the build: 8191 for (4, 4, 2), 511 for
            (8, 8, 4)).

    Returns:
        A UniversalSimulator with ``simulate``, ``encode``, ``interpret`` and ``report``.
    """
    if layer not in ("attention", "encoder"):
        raise ValueError(f"layer must be 'attention' or 'encoder', got {layer!r}")
    if maps not in ("native", "relu"):
        raise ValueError(f"maps must be 'native' or 'relu', got {maps!r}")
    if dtype not in SCORE_BOUND:
        raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
    if layer == "encoder":
        layout = Layout(max_n, max_d, max_heads, max_ff if max_ff is not None else 2 * max_d)
    else:
        if max_ff is not None:
            raise ValueError("max_ff applies to layer='encoder' only")
        layout = Layout(max_n, max_d, max_heads)
    # refuse a size that cannot fit before building U's program: its position tables and
    # every attention layer grow with the sequence length (the latter with its square)
    memory.check_fits(
        memory.attention_bytes(layout.length + 1, 1, 8 if dtype == torch.float64 else 4),
        f"building U for max_n={max_n}, max_d={max_d}, max_heads={max_heads} (a sequence of "
        f"{layout.length:,} positions)",
        "lower max_n, max_d or max_heads: attention over the sequence grows with its square",
    )
    limit = max_score_bound(layout, dtype)
    if score_bound is None:
        score_bound = min(SCORE_BOUND[dtype], limit)
    if not (isinstance(score_bound, (int, float)) and 0 < score_bound <= limit):
        raise ValueError(
            f"score_bound must be in (0, {limit:g}] for this build in {_dtype_name(dtype)} "
            f"(the precision of its max head and of exp), got {score_bound!r}"
            + ("; use dtype=torch.float64 for larger scores" if dtype == torch.float32 else "")
        )
    score_bound = float(score_bound)
    map_ranges = None
    if maps == "relu":
        if not (math.isfinite(logit_bound) and 0 < logit_bound <= LOGIT_LIMIT):
            raise ValueError(f"logit_bound must be in (0, {LOGIT_LIMIT:g}], got {logit_bound!r}")
        if not (math.isfinite(value_bound) and value_bound > 0):
            raise ValueError(f"value_bound must be positive and finite, got {value_bound!r}")
        B = float(logit_bound)
        # exponents s - m of unmasked keys lie in [-2B, EXP_HI] whenever the row's scores
        # are within B of some centre (below -2B the ReLU exp stays within e^-2B, which
        # error_bound counts); masked ones sit at or below -2000, where it is exactly 0.
        # A row sum Z lies in [1 - t, max_n e^EXP_HI (1 + t)]; positions outside P use 1.
        map_ranges = {EXP: (-2.0 * B, EXP_HI), INV_Z: (0.5, 2.0 * max_n * math.exp(EXP_HI))}
        if layer == "encoder":
            # LayerNorm: var + eps (+1 outside X) within [EPS_RANGE[0], V^2 + 2]; the
            # feed-forward pre-activations within [-V, V]
            V = float(value_bound)
            for name in ("ln_input", "ln_middle", "ln_output"):
                map_ranges[f"{name}_rsqrt"] = (EPS_RANGE[0], V * V + EPS_RANGE[1] + 1.0)
            map_ranges["ffn_pre"] = (-V, V)
    start = time.perf_counter()
    if layer == "encoder":
        from attnsim.simulator.encoder import encoder_program

        program = encoder_program(layout, score_bound=score_bound)
    else:
        program = universal_program(layout, score_bound=score_bound)
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
        # softmax mode: a large inverse temperature keeps every leaked weight below the
        # smallest number (e^-700 in float64, e^-88 in float32), as hard attention would
        value_scale=math.exp(700.0 if dtype == torch.float64 else 88.0),
    )
    return UniversalSimulator(
        layout,
        program,
        model,
        time.perf_counter() - start,
        logit_bound=float(logit_bound) if maps == "relu" else None,
        value_bound=float(value_bound) if maps == "relu" and layer == "encoder" else None,
        score_bound=score_bound,
    )


def max_score_bound(layout: Layout, dtype: torch.dtype) -> float:
    """The largest score bound a build of this layout accepts in ``dtype``.

    The max head scores a key ``G * base + s`` with ``G`` the power of two
    ``>= 4 (score_bound + 1)`` and ``base`` a quadratic form in the centred row ids (at most
    ``r`` in size): its terms reach ``M = G (4 r^2 + 6)``, and the head must still resolve
    ``s`` to well within its tolerance, ``2 M u <= 1/2`` (``u`` the unit roundoff), so that
    the row maximum it finds stays within ``EXP_HI`` of the true one. In float64 that is
    never the limit (``SCORE_LIMIT`` is: exp of a score carries its absolute rounding).

    >>> lay = Layout(4, 4, 2)
    >>> max_score_bound(lay, torch.float32), max_score_bound(lay, torch.float64)
    (8191.0, 1000000.0)
    """
    rows = layout.N * layout.H
    r = rows - rows // 2 + 1  # the largest |row id| (the values outside P included)
    u = torch.finfo(dtype).eps / 2
    gain = 2.0 ** math.floor(math.log2(0.25 / (u * (4 * r * r + 6))))
    return min(SCORE_LIMIT[dtype], gain / 4.0 - 1.0)


def _torch_dtype(name: str) -> torch.dtype:
    return torch.float64 if name == "float64" else torch.float32


def _dtype_name(dtype: torch.dtype) -> str:
    return "float64" if dtype == torch.float64 else "float32"


__all__ = [
    "UniversalSimulator",
    "SimulatorReport",
    "build",
    "max_score_bound",
    "universal_program",
]
