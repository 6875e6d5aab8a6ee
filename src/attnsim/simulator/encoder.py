"""U for a full encoder layer: attention, residuals, LayerNorms and the feed-forward block.

One program serves post-norm and pre-norm layers and the ReLU, GELU and tanh-GELU
activations: flags in the sequence choose. With ``pre`` the norm_first flag:

```
a  = X + pre * (LN_input(X) - X)        # pre-norm: LN1(X); post-norm: X
z1 = X + Attention(a)                   # the attention part of U, reading a
u  = LN_middle(z1)                      # post-norm: LN1; pre-norm: LN2
f  = FFN(u) = act(u W1 + b1) W2 + b2    # act = relu, gelu or gelu_tanh, by flags
z2 = u + f + pre * (z1 - u)             # post-norm: u + f; pre-norm: z1 + f
out = LN_output(z2) + pre * (z2 - LN_output(z2))   # post-norm: LN2(z2); pre-norm: z2
```

LayerNorm at X position (i, c), in two passes over the row's valid columns (the columns
marked valid in the sequence): the mean (one head), then the variance as the mean of the
squared deviations (one head; no cancellation, as ``mean(z^2) - mean^2`` would have), then
``(z - mean) * gain * rsqrt(var + eps) + bias``; padded columns stay exactly 0 throughout.
The feed-forward block uses scratch positions HID(i, m): each gathers row i of u, column m
of W1, b1[m] and row m of W2, computes ``act(pre_m) * W2[m, :]``, and X position (i, c)
sums those over m and keeps component c.
"""

from __future__ import annotations

from attnsim.rasp import expr as E
from attnsim.simulator.layout import FLAG_NAMES, Layout
from attnsim.simulator.universal import _gather, _static, attention_program


def encoder_program(layout: Layout, score_bound: float = 1.0e4) -> E.SOp:
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
    pre_act = b1
    for c in range(D):
        pre_act = pre_act + gu[c] * w1[c]
    pre_act = pre_act.named("ffn_pre")
    act = (
        hid_flags["relu"] * E.relu(pre_act)
        + hid_flags["gelu"] * E.gelu(pre_act).named("ffn_gelu")
        + hid_flags["gelu_tanh"] * E.gelu_tanh(pre_act).named("ffn_gelu_tanh")
    ).named("ffn_act")
    hw = [(act * w2[c]).named(f"ffn_hw{c}") for c in range(D)]
    hid_k = _static(layout, "hid_row_key", lambda r: r["HID"][0] if "HID" in r else -1)
    sel_hid = E.Select(hid_k, row_q, E.Comparison.EQ).named("sel_hidden_row")
    f = at_x(lambda i, c: layout.b2pos(c), "b2")
    for c in range(D):
        f = f + E.SumAggregate(sel_hid, hw[c]).named(f"ffn_sum{c}") * is_col[c]
    f = f.named("ffn")

    z2 = (u + f + pre * (z1 - u)).named("z2")
    ln_out = layer_norm(z2, 2, "ln_output")
    return (ln_out + pre * (z2 - ln_out)).named("U_encoder")
