"""The vector layout of U's sequence: one real vector per position, parameters as torch stores
them.

The scalar layout (:mod:`attnsim.simulator.layout`) follows the paper: one real number per
position, so the sequence is as long as the target's parameter count. Here every position
holds a token of ``W = max(D, F, 10) + 1`` real channels, and the target enters as torch
stores it: X row by row, the rows of ``in_proj_weight`` (W_q, W_k, W_v) and of
``out_proj.weight``, ``linear1.weight`` and ``linear2.weight``; each row's bias entry sits in
the last channel ``B = W - 1``, where X's rows hold a 1 (0 for padding rows), so that one dot
product over the channels gives ``x . w + b``. Nothing is multiplied before U sees it.

For a build of sizes (N, D, H, F) (F = 0: an attention layer) and a stack of ``layers``
encoder layers (1 unless asked), in order:

```
 input regions (where the codec writes; channel c < W of the position's token)
 COLV      1       encoder: 1 in the d real columns (flags)
 X(i)      N       X[i, :d], 1 in channel B for the n real rows (0: padding)
 then one block per layer:
 PARAM     1       causal, scale*, norm_first, relu, gelu, gelu_tanh, maxmin, eps x 3
 WQKV(t,r) 3D      row r of W_q, W_k, W_v (t = 0, 1, 2), its bias in channel B
 WO(k)     D       row k of out_proj.weight, b_O[k] in channel B
 MASK(h)   H       1 in the columns of head h (flags)
 HDIM(h)   H       1 in channel d_head - 1 (a flag: U's score scale is 1/sqrt(d_head))
 encoder (F > 0):
 LN(s, g)  6       gain (g = 0) and bias (g = 1) of the three LayerNorm slots
 W1(m)     F       row m of linear1.weight, b1[m] in channel B
 W2(k)     D       row k of linear2.weight, b2[k] in channel B
 decoder (``modern``: layer="decoder"):
 PARAM2    1       silu, identity, gated, centre x 3, on x 3 (the norm slots' kinds),
                   linear, phi_elu, linear_eps (linear attention)
 W3(m)     F       row m of a GLU's linear branch (W3^T, LLaMA's up_proj), b3[m] in B
 WROT(t,r) 2D      rotary: row partner(r) of W_q, W_k (t = 0, 1), its bias in B
 ROT(r)    D       rotary: cos[i, r mod d_head] in channel i and sin[i, r mod d_head] in
                   channel N + i (i < N); 1 in B on a head's first half of columns (flags)
 LE(m)     N       Linformer: row m of E in channels j < N, 1 in B for m < k (flags)
 LF(m)     N       Linformer: row m of F in channels j < N
 scratch roles (each reads and writes its own residual directions, so roles share
 positions freely; all start at position 0)
 QKV(i,r,t) 3ND    q, k or v [i, r]: one dot product of a row of X~ and a weight row
 ROW(i,t,h) 3NH    the rows Q_i, K_i, V_i, gathered back from QKV (one head per column),
                   times head h's columns (Q_i also times the score scale)
 P(i,j,h)   N^2 H  one (query, key, head): score, softmax weight, weighted value
 RM(i,h)    NH     one (query, head): the row's maximum score and its sum Z
 X(i)       N      the row-wise work: o_i, z1, the LayerNorms, the FFN's hidden row
 OUT(i,k)   ND     y[i, k] = o~_i . row k of W_O (and the FFN's output, and the result)
 HID(i,m)   NF     the FFN's hidden unit m of row i
 KP(m,r,t)  2ND    decoder: Linformer's projected keys (t = 0) and values (t = 1), entry r
 ROWP(m,t,h) 2NH  decoder: the projected rows K'_m and V'_m, times head h's columns
```

(*) the score scale entry is 0 for the standard 1/sqrt(d_head), which U computes from the
HDIM flags; a spec with another scale has it there.

The roles of a head coordinate (ROW, P, ROWP) put the heads outermost: a row of U's stream
that holds one column of Q, K or V there is 0 outside the positions of the head owning
that column (a target's columns each belong to one head), so storage that keeps each
row's non-zero span holds N^2 of the N^2 H positions of P per column, not all of them.

The sequence is ``max(input, 3ND, N^2 H, 3NH, NF)`` positions long (input = 1 + N + layers
(1 + 4D + 2H [+ 6 + F + D] [decoder: + 1 + F + 3D + 2N])): it grows like n (d + d_ff), not like
the parameter count, and the token width like max(d, d_ff) (a decoder's: max(d, d_ff, 2n,
12)).
The scratch roles serve every layer of a stack (each layer's values have their own
directions).

>>> lay = VectorLayout(2, 4, 2)
>>> lay.width, lay.length, lay.qkv(1, 3, 2), lay.ppos(1, 0, 1)
(11, 24, 23, 6)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["VectorLayout", "PARAM_CHANNELS", "PARAM2_CHANNELS"]

# channels of the PARAM position
PARAM_CHANNELS = (
    "causal",
    "scale",
    "norm_first",
    "relu",
    "gelu",
    "gelu_tanh",
    "maxmin",
    "eps_input",
    "eps_middle",
    "eps_output",
)
# channels of the PARAM2 position (decoder layouts): the gate's activations, whether the
# feed-forward is gated, and per norm slot (input, middle, output) whether it centres (a
# LayerNorm; 0: an RMSNorm) and whether it is there at all
PARAM2_CHANNELS = (
    "silu",
    "identity",
    "gated",
    "centre_input",
    "centre_middle",
    "centre_output",
    "on_input",
    "on_middle",
    "on_output",
    "linear",  # linear attention (0: softmax)
    "phi_elu",  # its feature map: elu + 1 (0: relu)
    "linear_eps",  # its normaliser's eps (an entry of the spec)
    "linformer",  # keys and values projected along the sequence
)


@dataclass(frozen=True)
class VectorLayout:
    """The vector-token sequence of a U built for sizes (N, D, H, F); see the module text."""

    N: int
    D: int
    H: int
    F: int = 0
    layers: int = 1  # a stack of encoder layers (F > 0) when more than 1
    modern: bool = False  # decoder layers: RMSNorm, gated feed-forwards, rotary (F > 0)

    def __post_init__(self) -> None:
        if self.modern and not self.F:
            raise ValueError("a decoder layout (modern=True) needs a feed-forward width F > 0")
        if not isinstance(self.layers, int) or isinstance(self.layers, bool) or self.layers < 1:
            raise ValueError(f"VectorLayout.layers must be a positive int, got {self.layers!r}")
        if self.layers > 1 and not self.F:
            raise ValueError("a stack of layers (layers > 1) is a stack of encoder layers: F > 0")
        for name in ("N", "D", "H"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"VectorLayout.{name} must be a positive int, got {v!r}")
        if not isinstance(self.F, int) or isinstance(self.F, bool) or self.F < 0:
            raise ValueError(f"VectorLayout.F must be an int >= 0, got {self.F!r}")

    # -- widths -----------------------------------------------------------------------------
    @property
    def width(self) -> int:
        """Channels per token."""
        modern = max(2 * self.N, len(PARAM2_CHANNELS)) if self.modern else 0
        return max(self.D, self.F, len(PARAM_CHANNELS), modern) + 1

    @property
    def B(self) -> int:  # noqa: N802 - the bias channel, B in the docs
        """The bias channel: rows of X hold 1 there, weight rows their bias."""
        return self.width - 1

    def param(self, name: str) -> int:
        """The channel of a PARAM entry."""
        return PARAM_CHANNELS.index(name)

    def param2(self, name: str) -> int:
        """The channel of a PARAM2 entry (decoder layouts)."""
        return PARAM2_CHANNELS.index(name)

    # -- input positions (``layer``: which layer of a stack the parameters are of) ----------
    colvpos = 0  # encoder: the d real columns (shared by the layers of a stack)

    def xpos(self, i: int) -> int:
        return 1 + i

    @property
    def block(self) -> int:
        """Positions of one layer's parameters."""
        D, H, F = self.D, self.H, self.F
        modern = 1 + F + 3 * D + 2 * self.N if self.modern else 0
        return 1 + 4 * D + 2 * H + (6 + F + D if F else 0) + modern

    def parampos(self, layer: int = 0) -> int:
        return 1 + self.N + layer * self.block

    def wpos(self, t: int, r: int, layer: int = 0) -> int:
        return self.parampos(layer) + 1 + t * self.D + r

    def opos(self, k: int, layer: int = 0) -> int:
        return self.parampos(layer) + 1 + 3 * self.D + k

    def maskpos(self, h: int, layer: int = 0) -> int:
        return self.parampos(layer) + 1 + 4 * self.D + h

    def hdimpos(self, h: int, layer: int = 0) -> int:
        return self.parampos(layer) + 1 + 4 * self.D + self.H + h

    def lnpos(self, slot: int, kind: int, layer: int = 0) -> int:
        return self.parampos(layer) + 1 + 4 * self.D + 2 * self.H + 2 * slot + kind

    def w1pos(self, m: int, layer: int = 0) -> int:
        return self.parampos(layer) + 7 + 4 * self.D + 2 * self.H + m

    def w2pos(self, k: int, layer: int = 0) -> int:
        return self.parampos(layer) + 7 + 4 * self.D + 2 * self.H + self.F + k

    def param2pos(self, layer: int = 0) -> int:
        return self.parampos(layer) + 7 + 4 * self.D + 2 * self.H + self.F + self.D

    def w3pos(self, m: int, layer: int = 0) -> int:
        return self.param2pos(layer) + 1 + m

    def wrotpos(self, t: int, r: int, layer: int = 0) -> int:
        return self.param2pos(layer) + 1 + self.F + t * self.D + r

    def rotpos(self, r: int, layer: int = 0) -> int:
        return self.param2pos(layer) + 1 + self.F + 2 * self.D + r

    def lpos(self, t: int, m: int, layer: int = 0) -> int:
        """Row m of Linformer's E (t = 0) or F (t = 1)."""
        return self.param2pos(layer) + 1 + self.F + 3 * self.D + t * self.N + m

    def kppos(self, m: int, r: int, t: int) -> int:
        return (t * self.N + m) * self.D + r

    def rowppos(self, m: int, t: int, h: int = 0) -> int:
        return (h * 2 + t) * self.N + m

    @property
    def input_length(self) -> int:
        return 1 + self.N + self.layers * self.block

    # -- scratch positions ------------------------------------------------------------------
    def qkv(self, i: int, r: int, t: int) -> int:
        return (t * self.N + i) * self.D + r

    def rowpos(self, i: int, t: int, h: int = 0) -> int:
        return (h * 3 + t) * self.N + i

    def ppos(self, i: int, j: int, h: int) -> int:
        return (h * self.N + i) * self.N + j

    def rmpos(self, i: int, h: int) -> int:
        return h * self.N + i

    def outpos(self, i: int, k: int) -> int:
        return i * self.D + k

    def hidpos(self, i: int, m: int) -> int:
        return i * self.F + m

    @property
    def length(self) -> int:
        """Positions in the sequence (BOS not counted)."""
        N, D, H, F = self.N, self.D, self.H, self.F
        return max(self.input_length, 3 * N * D, N * N * H, 3 * N * H, N * D, N * F)

    def regions(self) -> list[tuple[str, int, int, str]]:
        """``(name, first position, positions, what)`` of every input region and scratch
        role, in order."""
        N, D, H, F = self.N, self.D, self.H, self.F
        out = [("COLV", self.colvpos, 1, "the d real columns (flags)")] if F else []
        out.append(("X", self.xpos(0), N, "rows of X (1 in channel B)"))
        for layer in range(self.layers):
            tag = f"{layer}" if self.layers > 1 else ""
            out += [
                (f"PARAM{tag}", self.parampos(layer), 1, "causal, scale, flags, eps"),
                (f"WQKV{tag}", self.wpos(0, 0, layer), 3 * D, "rows of in_proj_weight, bias in B"),
                (f"WO{tag}", self.opos(0, layer), D, "rows of out_proj.weight, b_O in B"),
                (f"MASK{tag}", self.maskpos(0, layer), H, "columns of each head (flags)"),
                (f"HDIM{tag}", self.hdimpos(0, layer), H, "d_head of each head (one-hot flags)"),
            ]
            if F:
                out += [
                    (f"LN{tag}", self.lnpos(0, 0, layer), 6, "gain and bias of 3 LayerNorm slots"),
                    (f"W1{tag}", self.w1pos(0, layer), F, "rows of linear1.weight, b1 in B"),
                    (f"W2{tag}", self.w2pos(0, layer), D, "rows of linear2.weight, b2 in B"),
                ]
            if self.modern:
                out += [
                    (f"PARAM2{tag}", self.param2pos(layer), 1, "gate, norm kinds (flags)"),
                    (f"W3{tag}", self.w3pos(0, layer), F, "rows of a GLU's W3, b3 in B"),
                    (f"WROT{tag}", self.wrotpos(0, 0, layer), 2 * D, "rotary partner rows"),
                    (f"ROT{tag}", self.rotpos(0, layer), D, "rotary cos, sin by column"),
                    (f"LE{tag}", self.lpos(0, 0, layer), N, "Linformer's E by row"),
                    (f"LF{tag}", self.lpos(1, 0, layer), N, "Linformer's F by row"),
                ]
        out += [
            ("QKV", 0, 3 * N * D, "scratch: one dot product each"),
            ("ROW", 0, 3 * N * H, "scratch: Q_i, K_i, V_i by head"),
            ("P", 0, N * N * H, "scratch: (query, key, head)"),
            ("RM", 0, N * H, "scratch: (query, head): max, sum"),
            ("OUT", 0, N * D, "scratch: y[i, k], the result"),
        ]
        if F:
            out.append(("HID", 0, N * F, "scratch: hidden unit (i, m)"))
        if self.modern:
            out.append(("KP", 0, 2 * N * D, "scratch: Linformer's projections"))
            out.append(("ROWP", 0, 2 * N * H, "scratch: projected rows by head"))
        return out

    def diagram(self) -> str:
        """A one-line-per-region text picture of the layout.

        >>> print(VectorLayout(1, 2, 1).diagram().splitlines()[1])
            X [     1 ..      1]  1 positions  rows of X (1 in channel B)
        """
        lines = [f"tokens of {self.width} channels (B = {self.B}), {self.length} positions"]
        for name, s, k, what in self.regions():
            lines.append(f"{name:>5} [{s:>6} .. {s + k - 1:>6}]  {k} positions  {what}")
        return "\n".join(lines)

    def roles(self, p: int) -> dict[str, tuple[int, ...]]:
        """The scratch roles position ``p`` plays, with its coordinates in each.

        >>> VectorLayout(2, 4, 2).roles(5)
        {'QKV': (1, 1, 0), 'ROW': (1, 2, 0), 'P': (0, 1, 1), 'OUT': (1, 1)}
        """
        return {
            role: tuple(int(v) for v in c[p])
            for role, c in self.coords.items()
            if 0 <= p < self.length and c[p, 0] >= 0
        }

    # -- per-position coordinates of each role (-1 where a position does not play it) -------
    @cached_property
    def coords(self) -> dict[str, np.ndarray]:
        """Role -> ``[length, k]`` int array of each position's coordinates in that role
        (all -1 where it does not play it): X (i), QKV (i, r, t), ROW (i, t, h), P (i, j, h),
        RM (i, h), OUT (i, k), HID (i, m)."""
        L, N, D, H, F = self.length, self.N, self.D, self.H, self.F

        def role(shape: tuple[int, ...], pos) -> np.ndarray:
            out = np.full((L, len(shape)), -1, dtype=np.int64)
            grid = np.stack(np.meshgrid(*[np.arange(s) for s in shape], indexing="ij"), -1)
            grid = grid.reshape(-1, len(shape))
            out[pos(*grid.T)] = grid
            return out

        roles = {
            "X": role((N,), lambda i: 1 + i),
            "QKV": role((N, D, 3), lambda i, r, t: (t * N + i) * D + r),
            "ROW": role((N, 3, H), lambda i, t, h: (h * 3 + t) * N + i),
            "P": role((N, N, H), lambda i, j, h: (h * N + i) * N + j),
            "RM": role((N, H), lambda i, h: h * N + i),
            "OUT": role((N, D), lambda i, k: i * D + k),
        }
        if F:
            roles["HID"] = role((N, F), lambda i, m: i * F + m)
        if self.modern:
            roles["KP"] = role((N, D, 2), lambda m, r, t: (t * N + m) * D + r)
            roles["ROWP"] = role((N, 2, H), lambda m, t, h: (h * 2 + t) * N + m)
        return roles
