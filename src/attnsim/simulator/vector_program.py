"""U in the vector layout, as a RASP program over vector tokens.

It reads the sequence of :mod:`attnsim.simulator.vector_layout` (token channels, parameters
as torch stores them) and computes every product of the target itself. Every selector but
one depends only on positions (a gather or a sum whose table is fixed at build time); the
one that is not picks the largest score of a row, as in the scalar layout.

The attention part (``a`` = the rows the attention reads, at X(i)):

1. QKV(i, r, t) gathers row a~_i = [a_i, 1] and weight row r of W_t with its bias
   (two heads); MLP: the dot product ``q/k/v[i, r] = a~_i . w~_t,r`` (D + 1 bilinear units);
   MASK(h) multiplies its column flags by the scale;
2. ROW(i, t, h) gathers the D dot products of row i back into one vector (one head per
   column: the transpose) and head h's column mask ``M_h`` (times the scale for Q); MLP:
   ``Q_i scale M_h``, ``K_i M_h``, ``V_i M_h`` (head h's columns only);
3. P(i, j, h) gathers those rows of query i and key j, the padding bit of key j and the
   causal flag; MLP: ``s = sum_c (Q_ic scale M_hc) K_jc M_hc`` (the same bits as without
   the second mask, which is 0 or 1 where the first factor is 0 or not);
4. the row maximum over unmasked keys (one max head) and the row sum Z, each computed
   once per row at RM(i, h) and read back at P(i, j, h) (one gather each), ``e = exp(s -
   m)``, ``1/Z`` and ``p V_j M_h``, as in the scalar layout;

(the layout puts the heads outermost in ROW and P, so each column of Q, K and V at P is 0
outside the N^2 positions of its head: storage that keeps each row's non-zero span holds
1/H of what a row over all of P would);
5. X(i) sums ``p V_j M_h`` over keys and heads: o_i, the heads' outputs side by side;
6. OUT(i, k) gathers o~_i and row k of out_proj.weight with b_O[k]: ``y[i, k] = o~_i . w~_k``.

The encoder layer wraps it at the rows X(i) (same equations as the scalar layout's
``encoder_program``): LayerNorm of a row vector in two passes (mean, then the mean of the
squared deviations over the d real columns), the residual sums, and the feed-forward block:
HID(i, m) computes ``act(u~_i . w1~_m)`` (relu, gelu, gelu_tanh or maxmin, chosen by flags),
X(i) gathers the F hidden values of its row (one head per unit), OUT(i, k) computes
``h~_i . w2~_k``, and the result returns to the rows (one head per column). Finally OUT(i, k)
picks column k of its row's result (one head per column), which is where the codec reads it.

>>> from attnsim.simulator.vector_layout import VectorLayout
>>> vector_program(VectorLayout(1, 2, 1), score_bound=1e4).label
'U_vector'
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from attnsim.rasp import expr as E
from attnsim.rasp import gathers
from attnsim.simulator.programs import EXP, INV_Z, PHI_EXP, ROW_MAX, SCORE, mask_offset, tree_sum
from attnsim.simulator.vector_layout import VectorLayout

__all__ = ["vector_program"]


@dataclass(frozen=True, eq=False)
class _Tab:
    """A table over the positions: ``default`` except ``values`` at ``at`` (ascending)."""

    default: float
    at: np.ndarray
    values: np.ndarray

    def key(self) -> bytes:
        """A digest of its bits (equal digests are compared in full)."""
        h = hashlib.blake2b(digest_size=16)
        h.update(np.float64(self.default).tobytes())
        h.update(self.at.tobytes())
        h.update(self.values.tobytes())
        return h.digest()

    def same(self, other: _Tab) -> bool:
        """Bit for bit the same table."""
        return (
            np.float64(self.default).view(np.int64) == np.float64(other.default).view(np.int64)
            and np.array_equal(self.at, other.at)
            and np.array_equal(self.values.view(np.int64), other.values.view(np.int64))
        )


class _Builder:
    """Position tables and gathers over one layout (tables held sparse: a default and the
    positions of one role, never an array over every position)."""

    def __init__(self, lay: VectorLayout) -> None:
        self.lay = lay
        self.coords = lay.coords
        self.L = lay.length
        self.ch = [E.token_channel(c) for c in range(lay.width)]
        self.sfx = ""  # the layer's suffix of every name: "" for the first, "/L1", ...
        self._tables: dict[bytes, list[tuple[_Tab, E.SOp]]] = {}  # digest -> tables
        self._roles: dict[str, tuple] = {}  # role -> its positions and their coordinates

    def n(self, name: str) -> str:
        """``name`` in the current layer."""
        return name + self.sfx

    def table(self, name: str, tab: _Tab) -> E.SOp:
        """A numerical S-op of the position alone (one S-op per distinct table: the layers
        of a stack share theirs)."""
        same = self._tables.setdefault(tab.key(), [])
        for other, sop in same:
            if other.same(tab):
                return sop
        sop = gathers.sparse_table(self.L, tab.default, tab.at, tab.values).named(name)
        same.append((tab, sop))
        return sop

    def coords_of(self, role: str) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """The positions playing ``role`` and their coordinates, one int array each."""
        c = self.coords[role]
        where = np.flatnonzero(c[:, 0] >= 0)
        return where, tuple(c[where].T)

    def at(self, role: str, fn: Callable[..., int | float], default: float = -1.0) -> _Tab:
        """fn(*coords) at the positions playing ``role``, ``default`` elsewhere (the
        coordinates as Python ints, read once per role)."""
        got = self._roles.get(role)
        if got is None:
            c = self.coords[role]
            where = np.flatnonzero(c[:, 0] >= 0)
            got = self._roles[role] = (where, [tuple(r) for r in c[where].tolist()])
        where, rows = got
        return _tab(default, where, [fn(*r) for r in rows])

    def gather(self, name: str, src: _Tab, sops: Sequence[E.SOp]) -> list[E.SOp]:
        """Each position reads ``sops`` at position ``src[p]`` (-1: nothing, 0 read): one
        head for all of them."""
        sel = gathers.reader(self.table(f"src_{name}", src)).named(self.n(f"sel_{name}"))
        return [
            E.numerical(E.Aggregate(sel, s, default=0)).named(self.n(f"{name}{k}"))
            for k, s in enumerate(sops)
        ]

    def gather_one(self, name: str, src: _Tab, sop: E.SOp) -> E.SOp:
        return self.gather(name, src, [sop])[0].named(self.n(name))


def _tab(default: float, at: np.ndarray | Sequence[int], values: Sequence[float]) -> _Tab:
    """The table ``default`` except ``values`` at the ascending positions ``at``, the
    entries whose bits are the default's left out.

    >>> t = _tab(-1.0, [2, 5, 7], [3.0, -1.0, 4.0])
    >>> t.at.tolist(), t.values.tolist()
    ([2, 7], [3.0, 4.0])
    """
    at = np.asarray(at, dtype=np.int64).reshape(-1)
    vals = np.asarray(values, dtype=np.float64).reshape(-1)
    keep = vals.view(np.int64) != np.float64(default).view(np.int64)
    return _Tab(float(default), at[keep], vals[keep])


def _dot(xs: Sequence[E.SOp], ys: Sequence[E.SOp]) -> E.SOp:
    return tree_sum([x * y for x, y in zip(xs, ys)])


def vector_program(lay: VectorLayout, score_bound: float) -> E.SOp:
    """U's program in the vector layout: attention (``lay.F == 0``) or an encoder layer.

    Args:
        lay: the layout (build sizes).
        score_bound: the largest |score| of a target on its X (declared on the score S-op,
            which the max head needs, and checked at run time).
    """
    b = _Builder(lay)
    if lay.F:
        return _encoder(b, score_bound)
    y = _attention(b, [b.ch[c] for c in range(lay.D)], score_bound)
    return y.named("U_vector")


def _attention(b: _Builder, rows: list[E.SOp], score_bound: float, ell: int = 0) -> E.SOp:
    """The attention part of layer ``ell``: reads the rows ``rows`` (D S-ops at X(i));
    returns y at OUT."""
    lay, ch, D, H, B = b.lay, b.ch, b.lay.D, b.lay.H, b.lay.B
    valid = ch[B]  # at X(i): 1 for a real row, 0 for padding

    # 1. QKV(i, r, t): a~_i . w~_t,r
    xa = b.gather("qkv_x", b.at("QKV", lambda i, r, t: lay.xpos(i)), [*rows, valid])
    wa = b.gather("qkv_w", b.at("QKV", lambda i, r, t: lay.wpos(t, r, ell)), [*ch[:D], ch[B]])
    qkv = _dot(xa, wa).named(b.n("qkv"))
    if lay.modern:
        qkv = _rotary(b, xa, qkv, ell)
    # MASK(h): the head's columns times the score scale: 1/sqrt(d_head) read off the
    # one-hot HDIM flags (a linear form with constant weights), plus the spec's own scale
    # entry (0 for the standard one)
    masks = [lay.maskpos(h, ell) for h in range(H)]  # (ascending)
    own = b.gather_one(
        "scale_own", _tab(-1, masks, [lay.parampos(ell)] * H), ch[lay.param("scale")]
    )
    dims = b.gather("hdim", _tab(-1, masks, [lay.hdimpos(h, ell) for h in range(H)]), ch[:D])
    scale = own
    for c in range(D):
        scale = scale + dims[c] * (1.0 / math.sqrt(c + 1))
    scale = scale.named(b.n("scale"))
    smask = [(ch[c] * scale).named(b.n(f"smask{c}")) for c in range(D)]

    # 2. ROW(i, t, h): the D dot products of row i back into one vector (one head per
    # column), times head h's columns (the scaled ones for Q: t = 0)
    row = [
        b.gather_one(f"row{c}", b.at("ROW", lambda i, t, h, c=c: lay.qkv(i, c, t)), qkv)
        for c in range(D)
    ]
    sm = b.gather(
        "row_sm", b.at("ROW", lambda i, t, h: lay.maskpos(h, ell) if t == 0 else -1), smask
    )
    um = b.gather("row_m", b.at("ROW", lambda i, t, h: lay.maskpos(h, ell) if t else -1), ch[:D])
    rowm = [(row[c] * (sm[c] + um[c])).named(b.n(f"row_head{c}")) for c in range(D)]

    # 3. P(i, j, h)
    q = b.gather("p_q", b.at("P", lambda i, j, h: lay.rowpos(i, 0, h)), rowm)
    k = b.gather("p_k", b.at("P", lambda i, j, h: lay.rowpos(j, 1, h)), rowm)
    v = b.gather("p_v", b.at("P", lambda i, j, h: lay.rowpos(j, 2, h)), rowm)
    # the padding bit of key j, read from X(j) (1 minus its 1 in channel B): a gather's
    # output has its own direction, so no constant enters the exponent below (whose rounding,
    # mask_offset * 2^-53, would show in the softmax), and it is 0 where nothing is read
    # (outside P), so that the max head's keys outside P stay small
    x_pad = (1 - valid).named(b.n("x_pad"))
    pad = b.gather_one("p_pad", b.at("P", lambda i, j, h: lay.xpos(j)), x_pad)
    if lay.modern:  # Linformer (flag): projected keys and values, k of them
        k, v, pad = _linformer(b, qkv, k, v, pad, ell)
    causal = b.gather_one(
        "p_causal", b.at("P", lambda i, j, h: lay.parampos(ell)), ch[lay.param("causal")]
    )
    score = E.numerical(_dot(q, k).named(b.n(SCORE)), value_range=(-score_bound, score_bound))
    future = b.table("future", b.at("P", lambda i, j, h: float(j > i), 0.0))
    masked = (pad + causal * future).named(b.n("masked"))

    # 4. softmax over the row (i, h): max over unmasked keys, exponentials, sum, 1/Z; the
    # max and the sum once per row, at RM(i, h), then read back at the row's N positions
    # (a head whose N^2 H queries each read their row's N keys would hold N^3 H keys)
    nrows = lay.N * H
    centre = nrows // 2
    row_k = b.table("row_key", b.at("P", lambda i, j, h: i * H + h - centre, nrows - centre))
    row_q = b.table("row_query", b.at("RM", lambda i, h: i * H + h - centre, nrows - centre + 1))
    sel_row = E.Select(row_k, row_q, E.Comparison.EQ).named(b.n("sel_row"))
    zero = b.table("zero", _tab(0.0, [], []))
    unmasked = (sel_row & E.Select(masked, zero, E.Comparison.EQ)).named(b.n("sel_row_unmasked"))
    m_row = E.numerical(
        E.Aggregate(E.SelectMax(unmasked, score).named(b.n("sel_max")), score, default=0)
    ).named(b.n("row_max_rm"))
    at_rm = b.at("P", lambda i, j, h: lay.rmpos(i, h))
    m = b.gather_one("p_max", at_rm, m_row).named(b.n(ROW_MAX))
    e = E.exp(score - m - masked * mask_offset(score_bound)).named(b.n(EXP))
    eps = None
    if lay.modern:  # linear attention where the target has it (flags)
        # the keys a query sees: a padded key may also be a future one (masked is 2 there)
        seen = ((1 - pad) * (1 - causal * future)).named(b.n("seen"))
        e, eps = _linear(b, row, um, seen, e, ell)
    Z = b.gather_one("p_z", at_rm, E.SumAggregate(sel_row, e).named(b.n("Z_rm"))).named(b.n("Z"))
    not_p = b.table("not_p", b.at("P", lambda i, j, h: 0.0, 1.0))
    if eps is not None:
        Z = (Z + eps).named(b.n("Z_eps"))
    inv_z = E.reciprocal(Z + not_p).named(b.n(INV_Z))
    pv = [((e * v[c]) * inv_z).named(b.n(f"pv{c}")) for c in range(D)]

    # 5. X(i): o_i = sum over keys and heads
    o_k = b.table("o_key", b.at("P", lambda i, j, h: i, -1.0))
    o_q = b.table("o_query", b.at("X", lambda i: i, -2.0))
    sel_o = E.Select(o_k, o_q, E.Comparison.EQ).named(b.n("sel_o"))
    o = [E.SumAggregate(sel_o, pv[c]).named(b.n(f"o{c}")) for c in range(D)]

    # 6. OUT(i, k): y = o~_i . w~_k (row k of out_proj.weight, b_O[k])
    og = b.gather("out_o", b.at("OUT", lambda i, k: lay.xpos(i)), [*o, valid])
    wo = b.gather("out_w", b.at("OUT", lambda i, k: lay.opos(k, ell)), [*ch[:D], ch[B]])
    return _dot(og, wo).named(b.n("y"))


def _rotary(b: _Builder, xa: list[E.SOp], qkv: E.SOp, ell: int) -> E.SOp:
    """At QKV(i, r, t), t < 2: ``q cos + s p sin`` with ``p`` the dot product of row i with
    the weight row of r's partner in rotate_half, ``s`` = -1 on a head's first half of
    columns and 1 on its second, cos and sin read from ROT(r) (one head per row i: channel
    i holds cos[i, .], channel N + i sin[i, .]). Values (t = 2) stay as they are."""
    lay, ch, D, N, B = b.lay, b.ch, b.lay.D, b.lay.N, b.lay.B
    wp = b.gather(
        "rot_w",
        b.at("QKV", lambda i, r, t: lay.wrotpos(t, r, ell) if t < 2 else -1),
        [*ch[:D], ch[B]],
    )
    partner = _dot(xa, wp).named(b.n("rot_partner"))
    got = [
        b.gather(
            f"rot{i}",
            b.at("QKV", lambda i2, r, t, i=i: lay.rotpos(r, ell) if i2 == i and t < 2 else -1),
            [ch[i], ch[N + i], ch[B]],
        )
        for i in range(N)
    ]
    is_v = b.table("qkv_is_v", b.at("QKV", lambda i, r, t: float(t == 2), 0.0))
    cos = (tree_sum([g[0] for g in got]) + is_v).named(b.n("rot_cos"))
    sin = tree_sum([g[1] for g in got]).named(b.n("rot_sin"))
    sign = (1 - 2 * tree_sum([g[2] for g in got])).named(b.n("rot_sign"))
    return (qkv * cos + sign * (partner * sin)).named(b.n("qkv_rot"))


def _linformer(
    b: _Builder, qkv: E.SOp, k: list[E.SOp], v: list[E.SOp], pad: E.SOp, ell: int
) -> tuple[list[E.SOp], list[E.SOp], E.SOp]:
    """Linformer (PARAM2 flag): at KP(m, r, t) the sum over rows j of E[m, j] K[j, r]
    (t = 0) or F[m, j] V[j, r] (t = 1), one head per row j reading QKV(j, r, 1 + t); at
    ROWP(m, t, h) the row K'_m or V'_m (one head per column) on head h's columns; at P(i, j,
    h) the keys, values and
    padding bits (key j is there when j < k) of the projected rows where the flag is set,
    the usual ones where it is not (``f * new + (1 - f) * old``, exact for a 0/1 flag)."""
    lay, ch, D, N, B = b.lay, b.ch, b.lay.D, b.lay.N, b.lay.B
    coef = b.gather("kp_coef", b.at("KP", lambda m, r, t: lay.lpos(t, m, ell)), ch[:N])
    terms = [
        b.gather_one(f"kp_row{j}", b.at("KP", lambda m, r, t, j=j: lay.qkv(j, r, 1 + t)), qkv)
        for j in range(N)
    ]
    proj = _dot(coef, terms).named(b.n("kp"))
    rowp = [
        b.gather_one(f"rowp{c}", b.at("ROWP", lambda m, t, h, c=c: lay.kppos(m, c, t)), proj)
        for c in range(D)
    ]
    um = b.gather("rowp_m", b.at("ROWP", lambda m, t, h: lay.maskpos(h, ell)), ch[:D])
    rowp = [(rowp[c] * um[c]).named(b.n(f"rowp_head{c}")) for c in range(D)]
    kl = b.gather("p_kl", b.at("P", lambda i, j, h: lay.rowppos(j, 0, h)), rowp)
    vl = b.gather("p_vl", b.at("P", lambda i, j, h: lay.rowppos(j, 1, h)), rowp)
    l_pad = (1 - ch[B]).named(b.n("l_pad"))
    pad_l = b.gather_one("p_lpad", b.at("P", lambda i, j, h: lay.lpos(0, j, ell)), l_pad)
    on = b.gather_one(
        "p_linformer", b.at("P", lambda i, j, h: lay.param2pos(ell)), ch[lay.param2("linformer")]
    )
    off = (1 - on).named(b.n("linformer_off"))
    k = [(on * kl[c] + off * k[c]).named(b.n(f"p_k_eff{c}")) for c in range(D)]
    v = [(on * vl[c] + off * v[c]).named(b.n(f"p_v_eff{c}")) for c in range(D)]
    return k, v, (on * pad_l + off * pad).named(b.n("p_pad_eff"))


def _linear(
    b: _Builder, row: list[E.SOp], um: list[E.SOp], seen: E.SOp, e_exp: E.SOp, ell: int
) -> tuple[E.SOp, E.SOp]:
    """Linear attention (PARAM2 flags): at ROW(i, t, h), t < 2, the feature map ``phi`` of
    Q_i and K_i (relu, or elu + 1 = ``relu(x) + exp(x - relu(x))``) on head h's columns
    (``um``: the mask where t > 0; the plain one is gathered here for t = 0); at P(i, j, h)
    the weight ``phi(Q_i) . phi(K_j)``, times ``seen`` (0 for a masked key).
    Returns the weight U uses (``linear * that + (1 - linear) * e_exp``, exact for a 0/1
    flag) and the term added to the row sum (``linear * linear_eps``)."""
    lay, ch, D = b.lay, b.ch, b.lay.D
    (elu,) = b.gather(
        "row_phi",
        b.at("ROW", lambda i, t, h: lay.param2pos(ell) if t < 2 else -1),
        [ch[lay.param2("phi_elu")]],
    )
    um0 = b.gather(
        "row_m0", b.at("ROW", lambda i, t, h: lay.maskpos(h, ell) if t == 0 else -1), ch[:D]
    )
    phi = []
    for c in range(D):
        pos = E.relu(row[c]).named(b.n(f"row_pos{c}"))
        neg = E.exp(row[c] - pos).named(b.n(f"{PHI_EXP}{c}"))  # exp(min(x, 0)) <= 1
        phi_c = (pos + elu * neg).named(b.n(f"row_phi{c}"))
        phi.append((phi_c * (um0[c] + um[c])).named(b.n(f"row_phi_head{c}")))
    qp = b.gather("p_qphi", b.at("P", lambda i, j, h: lay.rowpos(i, 0, h)), phi)
    kp = b.gather("p_kphi", b.at("P", lambda i, j, h: lay.rowpos(j, 1, h)), phi)
    e_lin = _dot(qp, kp)
    e_lin = (e_lin * seen).named(b.n("e_linear"))
    at_p = b.at("P", lambda i, j, h: lay.param2pos(ell))
    linear, eps = b.gather("p_linear", at_p, [ch[lay.param2(k)] for k in ("linear", "linear_eps")])
    e = (linear * e_lin + (1 - linear) * e_exp).named(b.n("e_weight"))
    return e, (linear * eps).named(b.n("linear_eps"))


def _to_rows(b: _Builder, name: str, sop: E.SOp, n_cols: int, src: Callable) -> list[E.SOp]:
    """At X(i): the values of ``sop`` at positions src(i, c), c < n_cols (one head each)."""
    return [
        b.gather_one(f"{name}{c}", b.at("X", lambda i, c=c: src(i, c)), sop) for c in range(n_cols)
    ]


def _encoder(b: _Builder, score_bound: float) -> E.SOp:
    """The encoder layers (``lay.F > 0``), one after the other; the result at OUT(i, k)."""
    lay, ch, D = b.lay, b.ch, b.lay.D
    # the d real columns and 1/d, shared by the layers
    colv = b.gather("colv", b.at("X", lambda i: lay.colvpos), ch[:D])
    not_x = b.table("not_x", b.at("X", lambda i: 0.0, 1.0))
    inv_d = E.reciprocal(tree_sum(colv) + not_x).named("inv_d")
    x = ch[:D]
    for ell in range(lay.layers):
        b.sfx = f"/L{ell}" if ell else ""
        x = _encoder_layer(b, x, ell, (colv, not_x, inv_d), score_bound)
    # OUT(i, k) picks column k of its row's result (head c serves the positions of column c)
    where, (out_i, out_k) = b.coords_of("OUT")
    got = []
    for c in range(D):
        mine = out_k == c
        src = _tab(-1.0, where[mine], [lay.xpos(i) for i in out_i[mine].tolist()])
        got.append(b.gather_one(f"result{c}", src, x[c]))
    return tree_sum(got).named("U_vector_encoder")


def _encoder_layer(
    b: _Builder, x: list[E.SOp], ell: int, shared: tuple, score_bound: float
) -> list[E.SOp]:
    """Encoder layer ``ell`` on the rows ``x`` (D S-ops at X(i)); returns its output rows."""
    lay, ch, D, F, B = b.lay, b.ch, b.lay.D, b.lay.F, b.lay.B
    colv, not_x, inv_d = shared
    at_x = b.at("X", lambda i: lay.parampos(ell))
    pre = b.gather_one("pre", at_x, ch[lay.param("norm_first")])
    if lay.modern:  # each norm slot's kind: centring or not, there or not
        names = ("centre_input", "centre_middle", "centre_output", "on_input", "on_middle")
        names += ("on_output",)
        kinds = b.gather(
            "norm_kind", b.at("X", lambda i: lay.param2pos(ell)), [ch[lay.param2(k)] for k in names]
        )
        kind = dict(zip(names, kinds))

    def layer_norm(z: list[E.SOp], slot: int, name: str) -> list[E.SOp]:
        gain = b.gather(f"{name}_gain", b.at("X", lambda i: lay.lnpos(slot, 0, ell)), ch[:D])
        bias = b.gather(f"{name}_bias", b.at("X", lambda i: lay.lnpos(slot, 1, ell)), ch[:D])
        eps = b.gather_one(f"{name}_eps", at_x, ch[lay.param(f"eps_{name[3:]}")])
        mean = (tree_sum(z) * inv_d).named(b.n(f"{name}_mean"))
        if lay.modern:  # an RMSNorm does not centre (0 * mean = 0)
            mean = (mean * kind[f"centre_{name[3:]}"]).named(b.n(f"{name}_mean_used"))
        cen = [((z[c] - mean) * colv[c]).named(b.n(f"{name}_centred{c}")) for c in range(D)]
        var = (_dot(cen, cen) * inv_d).named(b.n(f"{name}_var"))
        r = E.rsqrt(var + eps + not_x).named(b.n(f"{name}_rsqrt"))
        out = [((cen[c] * gain[c]) * r + bias[c]).named(b.n(f"{name}{c}")) for c in range(D)]
        if not lay.modern:
            return out
        on = kind[f"on_{name[3:]}"]  # a slot with no norm passes z on (on * out + off * z)
        off = (1 - on).named(b.n(f"{name}_off"))
        return [(on * out[c] + off * z[c]).named(b.n(f"{name}_or_not{c}")) for c in range(D)]

    ln_in = layer_norm(x, 0, "ln_input")
    a = [(x[c] + pre * (ln_in[c] - x[c])).named(b.n(f"attn_in{c}")) for c in range(D)]
    y = _attention(b, a, score_bound, ell)
    y_row = _to_rows(b, "y_row", y, D, lay.outpos)
    z1 = [(x[c] + y_row[c]).named(b.n(f"z1_{c}")) for c in range(D)]
    u = layer_norm(z1, 1, "ln_middle")

    # the feed-forward block: HID(i, m), then the hidden row at X(i), then OUT(i, k)
    valid = ch[B]
    ug = b.gather("hid_u", b.at("HID", lambda i, m: lay.xpos(i)), [*u, valid])
    w1 = b.gather("hid_w", b.at("HID", lambda i, m: lay.w1pos(m, ell)), [*ch[:D], ch[B]])
    pre_act = _dot(ug, w1).named(b.n("ffn_pre"))
    at_hid = b.at("HID", lambda i, m: lay.parampos(ell))
    flags = b.gather(
        "hid_flag", at_hid, [ch[lay.param(f)] for f in ("relu", "gelu", "gelu_tanh", "maxmin")]
    )
    partner = b.gather_one(
        "ffn_partner",
        b.at("HID", lambda i, m: lay.hidpos(i, m ^ 1) if (m ^ 1) < F else -1),
        pre_act,
    )
    even = b.table("ffn_even", b.at("HID", lambda i, m: float(m % 2 == 0), 0.0))
    up = E.relu(pre_act - partner).named(b.n("ffn_pair_relu"))
    maxmin = (even * (partner + up) + (1 - even) * (pre_act - up)).named(b.n("ffn_maxmin"))
    act = (
        flags[0] * E.relu(pre_act)
        + flags[1] * E.gelu(pre_act).named(b.n("ffn_gelu"))
        + flags[2] * E.gelu_tanh(pre_act).named(b.n("ffn_gelu_tanh"))
        + flags[3] * maxmin
    ).named(b.n("ffn_act"))
    if lay.modern:
        act = _gated(b, ug, pre_act, act, ell)
    h_row = _to_rows(b, "h_row", act, F, lay.hidpos)
    hg = b.gather("out_h", b.at("OUT", lambda i, k: lay.xpos(i)), [*h_row, valid])
    w2 = b.gather("out_w2", b.at("OUT", lambda i, k: lay.w2pos(k, ell)), [*ch[:F], ch[B]])
    f = _dot(hg, w2).named(b.n("ffn"))
    f_row = _to_rows(b, "f_row", f, D, lay.outpos)

    z2 = [(u[c] + f_row[c] + pre * (z1[c] - u[c])).named(b.n(f"z2_{c}")) for c in range(D)]
    ln_out = layer_norm(z2, 2, "ln_output")
    return [(ln_out[c] + pre * (z2[c] - ln_out[c])).named(b.n(f"out{c}")) for c in range(D)]


def _gated(b: _Builder, ug: list[E.SOp], pre_act: E.SOp, act: E.SOp, ell: int) -> E.SOp:
    """At HID(i, m): the silu and identity activations (PARAM2 flags), then a GLU's product
    with ``u~_i . w3~_m`` where the target is gated (times 1 where it is not).

    silu is computed as ``relu(x) - |x| e / (1 + e)`` with ``e = exp(-|x|)`` (that is
    ``x sigmoid(x)``): every step stays finite for any finite x."""
    lay, ch, D, B = b.lay, b.ch, b.lay.D, b.lay.B
    at = b.at("HID", lambda i, m: lay.param2pos(ell))
    silu_on, ident_on, gated = b.gather(
        "hid_flag2", at, [ch[lay.param2(k)] for k in ("silu", "identity", "gated")]
    )
    pos = E.relu(pre_act).named(b.n("ffn_pos"))
    mag = (pos + E.relu(0 - pre_act)).named(b.n("ffn_abs"))
    e = E.exp(0 - mag).named(b.n("ffn_exp"))
    sig = E.reciprocal(1 + e).named(b.n("ffn_sig_inv"))  # 1 / (1 + e) in [1/2, 1]
    silu = (pos - mag * (e * sig)).named(b.n("ffn_silu"))
    act = (act + silu_on * silu + ident_on * pre_act).named(b.n("ffn_act2"))
    w3 = b.gather("hid_w3", b.at("HID", lambda i, m: lay.w3pos(m, ell)), [*ch[:D], ch[B]])
    up = _dot(ug, w3).named(b.n("ffn_up"))
    gate = (gated * up + (1 - gated)).named(b.n("ffn_gate"))
    return (act * gate).named(b.n("ffn_gated"))
