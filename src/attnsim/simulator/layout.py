"""Where everything lives in U's input sequence: one real number per position.

For a build of sizes (N, D, H) and D' = D + 1 (the constant-1 feature of X~ = [X, 1]):

```
 region   count        holds                                   written by
 X        N*D          X[i, a] at i*D + a (zero padded);        codec.pack (input)
                       T(X)[i, c] is read back from here        U's last layer (output)
 A        H*D'*D'      A~_h[a, b] (scores: X~ A~_h X~^T)        codec.pack
 W        H*D'*D       W~_h[a, c] (values: X~ W~_h)             codec.pack
 B        D            b_O[c]                                   codec.pack
 PAD      N            1 where row j >= n (padding), else 0     codec.pack
 FLAG     1            1 if the target is causal                codec.pack
 encoder layouts (F > 0) go on with:
 LN       3*(2D+1)     per LayerNorm slot: gain[D], bias[D], eps codec.pack
 FLAGS    5            norm_first, relu, gelu, gelu_tanh,       codec.pack
                       maxmin
 COLV     D            1 for the target's d real columns        codec.pack
 W1, B1   D*F, F       W1[c, m] at c*F + m, b1[m]               codec.pack
 W2, B2   F*D, D       W2[m, c] at m*D + c, b2[c]               codec.pack
 R        N*H*D'       scratch: q[i,h,b] = (X~ A~_h)[i, b]      layers 1-2
 V        N*H*D        scratch: v[j,h,c] = (X~ W~_h)[j, c]      layers 1-2
 P        N*N*H        scratch: one (query i, key j, head h)    layers 2-5
 HID      N*F          scratch: one (row i, hidden unit m)      encoder FFN
```

The scratch roles reuse positions from the start of the sequence (R, then V; P from 0): a
position keeps its input token and, separately, the directions of each role it plays.

Every scratch position's role and coordinates are known at compile time, so all the index
arithmetic is static (computed into the positional embedding). This module is the geometry
only; :mod:`attnsim.simulator.codec` writes a target and X into it and reads T(X) back.

>>> lay = Layout(2, 2, 1)
>>> lay.length, lay.xpos(1, 0), sorted(lay.roles(lay.ppos(1, 0, 0)))
(24, 2, ['P', 'R', 'X'])
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

INPUT_ROLES = ("X", "A", "W", "B", "PAD", "FLAG")
ENCODER_ROLES = ("LN", "FLAGS", "COLV", "W1", "B1", "W2", "B2")
SCRATCH_ROLES = ("R", "V", "P", "HID")
# the three LayerNorm slots of an encoder layer (see programs.py) and the flags
LN_SLOTS = ("input", "middle", "output")
FLAG_NAMES = ("norm_first", "relu", "gelu", "gelu_tanh", "maxmin")


@dataclass(frozen=True)
class Layout:
    """The sequence layout of a universal simulator built for sizes (N, D, H).

    The input regions come one after the other. The scratch roles R, V and P reuse positions
    (a position can be, say, an A entry, an R slot and a P slot at once: each role reads and
    writes its own residual directions); R and V never share a position. The sequence is as
    long as the longest of: the input, R followed by V, and P.
    """

    N: int
    D: int
    H: int
    F: int = 0  # the feed-forward width of an encoder layer (0: attention only)

    def __post_init__(self) -> None:
        for name in ("N", "D", "H"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"Layout.{name} must be a positive int, got {v!r}")
        if not isinstance(self.F, int) or self.F < 0:
            raise ValueError(f"Layout.F must be an int >= 0, got {self.F!r}")

    @property
    def input_roles(self) -> tuple[str, ...]:
        return INPUT_ROLES + (ENCODER_ROLES if self.F else ())

    @property
    def Dp(self) -> int:  # noqa: N802 - D' in the docs
        return self.D + 1

    @cached_property
    def sizes(self) -> dict[str, int]:
        N, D, H, Dp = self.N, self.D, self.H, self.Dp
        return {
            "X": N * D,
            "A": H * Dp * Dp,
            "W": H * Dp * D,
            "B": D,
            "PAD": N,
            "FLAG": 1,
            "R": N * H * Dp,
            "V": N * H * D,
            "P": N * N * H,
            "LN": 3 * (2 * D + 1),
            "FLAGS": len(FLAG_NAMES),
            "COLV": D,
            "W1": D * self.F,
            "B1": self.F,
            "W2": self.F * D,
            "B2": D,
            "HID": N * self.F,
        }

    @cached_property
    def starts(self) -> dict[str, int]:
        out, pos = {}, 0
        for r in self.input_roles:
            out[r] = pos
            pos += self.sizes[r]
        out["R"] = 0
        out["V"] = self.sizes["R"]
        out["P"] = 0
        out["HID"] = 0
        return out

    @property
    def input_length(self) -> int:
        """Positions that carry the target and X."""
        return sum(self.sizes[r] for r in self.input_roles)

    @property
    def length(self) -> int:
        """Positions in U's input (BOS not counted)."""
        return max(
            self.input_length,
            self.sizes["R"] + self.sizes["V"],
            self.sizes["P"],
            self.sizes["HID"],  # the feed-forward's scratch (N F, from position 0)
        )

    def region(self, role: str) -> slice:
        """The positions of an input region (``"X"``, ``"A"``, ...) as a slice of the sequence."""
        return slice(self.starts[role], self.starts[role] + self.sizes[role])

    # -- positions ---------------------------------------------------------------------------
    def xpos(self, i: int, a: int) -> int:
        return self.starts["X"] + i * self.D + a

    def apos(self, h: int, a: int, b: int) -> int:
        return self.starts["A"] + (h * self.Dp + a) * self.Dp + b

    def wpos(self, h: int, a: int, c: int) -> int:
        return self.starts["W"] + (h * self.Dp + a) * self.D + c

    def bpos(self, c: int) -> int:
        return self.starts["B"] + c

    def padpos(self, j: int) -> int:
        return self.starts["PAD"] + j

    def flagpos(self) -> int:
        return self.starts["FLAG"]

    def rpos(self, i: int, h: int, b: int) -> int:
        return self.starts["R"] + (i * self.H + h) * self.Dp + b

    def vpos(self, j: int, h: int, c: int) -> int:
        return self.starts["V"] + (j * self.H + h) * self.D + c

    def ppos(self, i: int, j: int, h: int) -> int:
        return self.starts["P"] + (i * self.N + j) * self.H + h

    def lnpos(self, slot: int, what: str, c: int = 0) -> int:
        """LayerNorm slot ``slot``: "gain"[c], "bias"[c] or "eps"."""
        base = self.starts["LN"] + slot * (2 * self.D + 1)
        return base + {"gain": c, "bias": self.D + c, "eps": 2 * self.D}[what]

    def flagpos_named(self, name: str) -> int:
        return self.starts["FLAGS"] + FLAG_NAMES.index(name)

    def colvpos(self, c: int) -> int:
        return self.starts["COLV"] + c

    def w1pos(self, c: int, m: int) -> int:
        return self.starts["W1"] + c * self.F + m

    def b1pos(self, m: int) -> int:
        return self.starts["B1"] + m

    def w2pos(self, m: int, c: int) -> int:
        return self.starts["W2"] + m * self.D + c

    def b2pos(self, c: int) -> int:
        return self.starts["B2"] + c

    def hidpos(self, i: int, m: int) -> int:
        return self.starts["HID"] + i * self.F + m

    # -- roles -------------------------------------------------------------------------------
    @cached_property
    def _role_table(self) -> list[dict[str, tuple[int, ...]]]:
        table: list[dict[str, tuple[int, ...]]] = [dict() for _ in range(self.length)]
        N, D, H, Dp = self.N, self.D, self.H, self.Dp
        entries = {
            "X": [(i, a) for i in range(N) for a in range(D)],
            "A": [(h, a, b) for h in range(H) for a in range(Dp) for b in range(Dp)],
            "W": [(h, a, c) for h in range(H) for a in range(Dp) for c in range(D)],
            "B": [(c,) for c in range(D)],
            "PAD": [(j,) for j in range(N)],
            "FLAG": [()],
            "R": [(i, h, b) for i in range(N) for h in range(H) for b in range(Dp)],
            "V": [(j, h, c) for j in range(N) for h in range(H) for c in range(D)],
            "P": [(i, j, h) for i in range(N) for j in range(N) for h in range(H)],
        }
        if self.F:
            entries["HID"] = [(i, m) for i in range(N) for m in range(self.F)]
        for role, coords in entries.items():
            for k, c in enumerate(coords):
                table[self.starts[role] + k][role] = c
        return table

    def roles(self, p: int) -> dict[str, tuple[int, ...]]:
        """The roles of position ``p`` and its coordinates in each."""
        return self._role_table[p]

    def role(self, p: int) -> str:
        """The input region of position ``p`` ("" for a scratch-only position)."""
        for r in self.input_roles:
            if r in self._role_table[p]:
                return r
        return ""

    def diagram(self) -> str:
        """A one-line-per-region text picture of the layout."""
        lines = []
        for r in self.input_roles + SCRATCH_ROLES[: 4 if self.F else 3]:
            s, k = self.starts[r], self.sizes[r]
            lines.append(f"{r:>5} [{s:>6} .. {s + k - 1:>6}]  {k} positions")
        return "\n".join(lines)
