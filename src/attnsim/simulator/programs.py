"""U as RASP programs: the attention part, the attention layer and the encoder layer.

Each program reads U's input sequence laid out by :class:`~attnsim.simulator.layout.Layout`
(one real number per position) and writes T(X)[i, c] at the X position (i, c). Every
selector but one depends only on positions (its tables are computed from the layout at build
time, so every head is a fixed gather or a fixed sum); the one that is not picks the largest
score of a row.

The attention part (``attention_program``), positions and regions as in the layout:

1. attention: R and V positions gather a row of X and a column of A~_h or W~_h;
   MLP: q = x~_i A~_h and v = x~_j W~_h (bilinear units);
2. attention: each P(i, j, h) gathers q[i,h,:], x_j, v[j,h,:], the padding bit of j and the
   causal flag; MLP: S = q . x~_j (bilinear) and the causal mask bit;
3. attention: m = the largest S over the row's unmasked keys (one ``SelectMax`` head);
   MLP: e = exp(S - m - M (pad_j + causal [j > i])) (an exp unit; masked keys give 0);
4. attention: Z = sum_j e over the row (i, h), at least 1; MLP: 1/Z and e * v;
5. MLP: p v = (e v) / Z;
6. attention: each X position (i, c) sums p v over j and h; MLP: picks component c and adds
   b_O.

The encoder layer (``encoder_program``) wraps it; one program serves post-norm and pre-norm
layers and the ReLU, GELU, tanh-GELU and MaxMin activations: flags in the sequence choose. With
``pre`` the norm_first flag:

```
a  = X + pre * (LN_input(X) - X)        # pre-norm: LN1(X); post-norm: X
z1 = X + Attention(a)                   # the attention part, reading a
u  = LN_middle(z1)                      # post-norm: LN1; pre-norm: LN2
f  = FFN(u) = act(u W1 + b1) W2 + b2    # act = relu, gelu, gelu_tanh or maxmin, by flags
z2 = u + f + pre * (z1 - u)             # post-norm: u + f; pre-norm: z1 + f
out = LN_output(z2) + pre * (z2 - LN_output(z2))   # post-norm: LN2(z2); pre-norm: z2
```

LayerNorm at X position (i, c), in two passes over the row's valid columns (the columns
marked valid in the sequence): the mean (one head), then the variance as the mean of the
squared deviations (one head; no cancellation, as ``mean(z^2) - mean^2`` would have), then
``(z - mean) * gain * rsqrt(var + eps) + bias``; padded columns stay exactly 0 throughout.
The feed-forward block uses scratch positions HID(i, m): each gathers row i of u, column m
of W1, b1[m] and row m of W2, computes ``act(pre_m) * W2[m, :]``, and X position (i, c)
sums those over m and keeps component c. MaxMin (GroupSort-2: units (2k, 2k+1) become their
max and min) is the one activation that reads two units: HID(i, m) also gathers pre_(m ^ 1)
from HID(i, m ^ 1) and forms the max or min with one ReLU (see ``_maxmin``).

>>> from attnsim.simulator.layout import Layout
>>> program(Layout(2, 2, 1), score_bound=1e4).label, program(Layout(2, 2, 1, 4), 1e4).label
('U', 'U_encoder')
"""

from __future__ import annotations

import math

from attnsim.rasp import expr as E
from attnsim.rasp import gathers
from attnsim.simulator.config import DEFAULT_SCORE_BOUND, EPS_RANGE, SimulatorConfig
from attnsim.simulator.layout import FLAG_NAMES, Layout

__all__ = [
    "attention_program",
    "encoder_program",
    "maxmin_partner",
    "program",
    "universal_program",
    "EXP",
    "EXP_HI",
    "INV_Z",
    "PHI_EXP",
    "linear_z_range",
    "ROW_MAX",
    "SCORE",
]

EXP, INV_Z = "e", "inv_Z"  # labels of the exponentials and of 1/Z (maps and their bounds)
PHI_EXP = "phi_exp"  # linear attention's exp(min(x, 0)) in phi = elu + 1, one per column
SCORE, ROW_MAX = "score", "row_max"  # labels of the target's scores and of their row maxima
# exp reads s - m, m the row maximum found by a hard head (within its tolerance 0.25 below
# the true maximum, plus rounding): every exponent of an unmasked key is <= EXP_HI
EXP_HI = 1.0


def program(layout: Layout, score_bound: float) -> E.SOp:
    """U's program for ``layout``: the encoder layer when ``layout.F > 0``, else attention.

    Args:
        layout: the sequence layout (build sizes).
        score_bound: the largest |score| of a target on its X (see ``attention_program``).
    """
    if layout.F:
        return encoder_program(layout, score_bound=score_bound)
    return universal_program(layout, score_bound=score_bound)


def mask_offset(score_bound: float) -> float:
    """What a masked key's exponent is lowered by: with |s|, |m| <= score_bound its exponent
    is then <= -2000, where exp is exactly 0 in float64 and float32 and the ReLU exp (ramping
    to 0 one unit below -2 logit_bound >= -701) is too."""
    return 2.0 * float(score_bound) + 2000.0


def _static(layout: Layout, name: str, fn) -> E.SOp:
    """A numerical S-op of the position alone: fn(roles) -> number (roles: role -> coords)."""
    table = [fn(layout.roles(p)) for p in range(layout.length)]
    return gathers.position_table(table).named(name)  # one float64 array


def _gather(src: E.SOp, name: str) -> E.Selector:
    """Each query reads the key at the position ``src`` holds (a position-only gather)."""
    return gathers.reader(src).named(name)


def universal_program(layout: Layout, score_bound: float = DEFAULT_SCORE_BOUND) -> E.SOp:
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
    # q[i,h,b] at R positions, v[j,h,c] at V positions
    t = tree_sum([(1 - row_pad) * gm[D]] + [gx[a] * gm[a] for a in range(D)]).named("qv")

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
    score = tree_sum([gq[D] * (1 - pad)] + [gq[a] * gxj[a] for a in range(D)])
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
    ys = [agg(_gather(src_b, "sel_b"), tok, "b_O")]  # b_O[c] at X positions (i, c)
    for c in range(D):
        onehot = _static(layout, f"is_col{c}", lambda r, c=c: float("X" in r and r["X"][1] == c))
        ys.append(E.SumAggregate(sel_out, pv[c]).named(f"sum_pv{c}") * onehot)
    return tree_sum(ys).named("U")


def encoder_program(layout: Layout, score_bound: float = DEFAULT_SCORE_BOUND) -> E.SOp:
    """The encoder-layer U as a RASP program over numerical tokens (``layout.F > 0``).

    ``score_bound``: the largest |score| of the target's attention (see ``attention_program``).
    """
    if not layout.F:
        raise ValueError("encoder_program needs a layout with a feed-forward width F > 0")
    D = layout.D
    tok = E.numerical(E.tokens)

    def agg(sel, sop, name):
        return E.numerical(E.Aggregate(sel, sop, default=0)).named(name)

    def at_x(fn, name):
        """A gather at X positions (i, c) of the token at fn(i, c)."""
        src = _static(layout, f"src_{name}", lambda r: fn(*r["X"]) if "X" in r else -1)
        return agg(_gather(src, f"sel_{name}"), tok, name)

    def at_hid(fn, name):
        src = _static(layout, f"src_{name}", lambda r: fn(*r["HID"]) if "HID" in r else -1)
        return agg(_gather(src, f"sel_{name}"), tok, name)

    not_x = _static(layout, "not_x", lambda r: float("X" not in r))
    flags = {f: at_x(lambda i, c, f=f: layout.flagpos_named(f), f"{f}@x") for f in FLAG_NAMES}
    pre = flags["norm_first"]
    colv = at_x(lambda i, c: layout.colvpos(c), "col_valid")
    is_col = [
        _static(layout, f"is_col{c}", lambda r, c=c: float("X" in r and r["X"][1] == c))
        for c in range(D)
    ]

    # the row's valid columns: same row (static) and a valid key column (read from the input)
    row_k = _static(layout, "x_row_key", lambda r: r["X"][0] if "X" in r else -1)
    row_q = _static(layout, "x_row_query", lambda r: r["X"][0] if "X" in r else -2)
    one = _static(layout, "one", lambda r: 1.0)
    sel_row = (
        E.Select(row_k, row_q, E.Comparison.EQ) & E.Select(colv, one, E.Comparison.EQ)
    ).named("sel_valid_row")

    sel_self = E.Select(E.indices, E.indices, E.Comparison.EQ).named("sel_self")

    def layer_norm(z: E.SOp, slot: int, name: str, self_read: bool = True) -> E.SOp:
        gain = at_x(lambda i, c: layout.lnpos(slot, "gain", c), f"{name}_gain")
        bias = at_x(lambda i, c: layout.lnpos(slot, "bias", c), f"{name}_bias")
        eps = at_x(lambda i, c: layout.lnpos(slot, "eps"), f"{name}_eps")
        mean = agg(sel_row, z, f"{name}_mean")
        # z read by a head beside the mean's (each position reads itself): both heads round
        # z's linear form alike, so a constant row centres to exactly 0, not to a rounding
        # error that 1/sqrt(eps) would magnify (tokens are one number already)
        if self_read:
            z = agg(sel_self, z, f"{name}_z")
        # two passes: centre first, then the mean of the squares (no cancellation, var >= 0)
        centred = (z - mean).named(f"{name}_centred")
        var = agg(sel_row, centred * centred, f"{name}_var")
        # outside X nothing is selected (var = 0, eps = 0): add 1 there to stay finite
        r = E.rsqrt(var + eps + not_x).named(f"{name}_rsqrt")
        return ((centred * gain) * r + bias).named(name)

    x = tok
    a = (x + pre * (layer_norm(x, 0, "ln_input", self_read=False) - x)).named("attn_input")
    z1 = (x + attention_program(layout, a, score_bound)).named("z1")
    u = layer_norm(z1, 1, "ln_middle")

    # feed-forward at HID(i, m)
    gu = [
        agg(
            _gather(
                _static(
                    layout,
                    f"src_u{c}",
                    lambda r, c=c: layout.xpos(r["HID"][0], c) if "HID" in r else -1,
                ),
                f"sel_u{c}",
            ),
            u,
            f"u{c}",
        )
        for c in range(D)
    ]
    w1 = [at_hid(lambda i, m, c=c: layout.w1pos(c, m), f"w1_{c}") for c in range(D)]
    w2 = [at_hid(lambda i, m, c=c: layout.w2pos(m, c), f"w2_{c}") for c in range(D)]
    b1 = at_hid(lambda i, m: layout.b1pos(m), "b1")
    hid_flags = {
        f: at_hid(lambda i, m, f=f: layout.flagpos_named(f), f"{f}@hid")
        for f in ("relu", "gelu", "gelu_tanh")
    }
    pre_act = tree_sum([b1] + [gu[c] * w1[c] for c in range(D)]).named("ffn_pre")
    act = (
        hid_flags["relu"] * E.relu(pre_act)
        + hid_flags["gelu"] * E.gelu(pre_act).named("ffn_gelu")
        + hid_flags["gelu_tanh"] * E.gelu_tanh(pre_act).named("ffn_gelu_tanh")
        + _maxmin(layout, pre_act, at_hid)
    ).named("ffn_act")
    hw = [(act * w2[c]).named(f"ffn_hw{c}") for c in range(D)]
    hid_k = _static(layout, "hid_row_key", lambda r: r["HID"][0] if "HID" in r else -1)
    sel_hid = E.Select(hid_k, row_q, E.Comparison.EQ).named("sel_hidden_row")
    f = [at_x(lambda i, c: layout.b2pos(c), "b2")]
    f += [E.SumAggregate(sel_hid, hw[c]).named(f"ffn_sum{c}") * is_col[c] for c in range(D)]
    f = tree_sum(f).named("ffn")

    z2 = (u + f + pre * (z1 - u)).named("z2")
    ln_out = layer_norm(z2, 2, "ln_output")
    return (ln_out + pre * (z2 - ln_out)).named("U_encoder")


def maxmin_partner(layout: Layout, i: int, m: int) -> int:
    """The position HID(i, m) reads its MaxMin partner's pre-activation from: HID(i, m ^ 1),
    or -1 (nothing: it reads 0) for the last unit of an odd F, which has no partner.

    That unpaired unit is always padding: a MaxMin target has an even ``d_mlp <= F``, so
    ``d_mlp <= F - 1``, and the unit's pre-activation and ``W2`` row are 0.

    >>> lay = Layout(2, 1, 1, 3)
    >>> [maxmin_partner(lay, 1, m) for m in range(3)] == [lay.hidpos(1, 1), lay.hidpos(1, 0), -1]
    True
    """
    k = m ^ 1
    return layout.hidpos(i, k) if k < layout.F else -1


def _maxmin(layout: Layout, pre_act: E.SOp, at_hid) -> E.SOp:
    """MaxMin (GroupSort-2) at HID(i, m), 0 unless the ``maxmin`` flag is set.

    With p the unit's own pre-activation and q its partner's (HID(i, m ^ 1), one fixed
    gather), r = relu(p - q); an even unit (the pair's first) takes max(p, q) = q + r, an odd
    one min(p, q) = p - r. Both are exact (ties give r = 0: q and p, equal), for any signs.
    The flag is gathered twice, by parity: an even unit reads it into ``maxmin_max``, an odd
    one into ``maxmin_min`` (the other reads nothing, 0), so one product selects each branch.
    Padding units (m >= d_mlp, d_mlp even) pair among themselves: p = q = 0, and so 0.
    """
    src = _static(
        layout,
        "src_ffn_partner",
        lambda r: maxmin_partner(layout, *r["HID"]) if "HID" in r else -1,
    )
    sel = _gather(src, "sel_ffn_partner")
    partner = E.numerical(E.Aggregate(sel, pre_act, default=0)).named("ffn_partner")
    r = E.relu(pre_act - partner).named("ffn_maxmin_relu")
    flag = layout.flagpos_named("maxmin")
    first = at_hid(lambda i, m: flag if m % 2 == 0 else -1, "maxmin_max@hid")
    second = at_hid(lambda i, m: flag if m % 2 else -1, "maxmin_min@hid")
    return (first * (partner + r) + second * (pre_act - r)).named("ffn_maxmin")


def linear_z_range(config: SimulatorConfig) -> tuple[float, float]:
    """maps="relu", decoder: the row sums ``Z = phi(q) . sum_j phi(k_j) + eps`` of linear
    attention U's 1/x covers: from the smallest eps U accepts (``EPS_RANGE``; Z >= eps)
    to ``max_n max_d (value_bound + 1)^2`` plus the largest, for features within
    ``value_bound + 1`` (phi(x) <= max(x, 0) + 1).

    >>> linear_z_range(SimulatorConfig(2, 2, layer="decoder", maps="relu", value_bound=3.0))
    (1e-06, 65.0)
    """
    V = config.value_bound
    return EPS_RANGE[0], config.max_n * config.max_d * (V + 1.0) ** 2 + EPS_RANGE[1]


def map_ranges(config: SimulatorConfig) -> dict[str, tuple[float, float]] | None:
    """maps="relu": the input range each ReLU map of U is realised on (by label, as the
    compiler's ``map_ranges`` takes them); None for native maps.

    >>> sorted(map_ranges(SimulatorConfig(2, 2, maps="relu")))
    ['e', 'inv_Z']
    """
    if config.relu_logit_bound is None:
        return None
    B = config.logit_bound
    # exponents s - m of unmasked keys lie in [-2B, EXP_HI] whenever the row's scores are
    # within B of some centre (below -2B the ReLU exp stays within e^-2B, which error_bound
    # counts); masked ones sit at or below -2000, where it is exactly 0. A row sum Z lies in
    # [1 - t, max_n e^EXP_HI (1 + t)]; positions outside P use 1.
    ranges = {EXP: (-2.0 * B, EXP_HI), INV_Z: (0.5, 2.0 * config.max_n * math.exp(EXP_HI))}
    if config.is_encoder:
        # LayerNorm: var + eps (+1 outside X) within [EPS_RANGE[0], V^2 + 2]; the
        # feed-forward pre-activations within [-V, V]
        V = config.value_bound
        for name in ("ln_input", "ln_middle", "ln_output"):
            ranges[f"{name}_rsqrt"] = (EPS_RANGE[0], V * V + EPS_RANGE[1] + 1.0)
        ranges["ffn_pre"] = (-V, V)
        if config.is_decoder:  # silu: exp(-|x|) and 1 / (1 + exp(-|x|))
            ranges["ffn_exp"] = (-V, 0.0)
            ranges["ffn_sig_inv"] = (1.0, 2.0)
            # linear attention: phi's exp(min(x, 0)) per column (below -V it ramps to 0,
            # within e^-V), and its row sums Z in the range linear_z_range gives
            for c in range(config.max_d):
                ranges[f"{PHI_EXP}{c}"] = (-V, 0.0)
            lo, hi = ranges[INV_Z]
            z_lo, z_hi = linear_z_range(config)
            ranges[INV_Z] = (min(lo, z_lo), max(hi, z_hi))
        if config.is_vector:  # 1 / d for the LayerNorm means (1 outside the rows)
            ranges["inv_d"] = (1.0, float(config.max_d))
    for ell in range(1, config.n_layers):  # a stack: the same maps in every layer
        ranges.update({f"{k}/L{ell}": v for k, v in list(ranges.items()) if "/" not in k})
    return ranges


def tree_sum(xs: list[E.SOp]) -> E.SOp:
    """``xs[0] + xs[1] + ...`` as a balanced tree of sums: the same linear form, term for
    term and in the same order, as the sum from the left, but each partial sum's form is
    copied log2(n) times instead of n times (a chain of 384 sums copies 74,000 terms).

    >>> from attnsim import rasp
    >>> x = rasp.numerical(rasp.Map(float, rasp.tokens))
    >>> parts = [x * k for k in (1.0, 2.0, 3.0, 4.0, 5.0)]
    >>> rasp.evaluate(tree_sum(parts), [[1, 2]])  # 15 x, as (x + 2x) + (3x + 4x) + 5x
    [[15.0, 30.0]]
    >>> tree_sum([])
    Traceback (most recent call last):
    ...
    ValueError: tree_sum needs at least one S-op to add, got none
    """
    xs = list(xs)
    if not xs:
        raise ValueError("tree_sum needs at least one S-op to add, got none")
    while len(xs) > 1:
        xs = [xs[i] + xs[i + 1] if i + 1 < len(xs) else xs[i] for i in range(0, len(xs), 2)]
    return xs[0]
