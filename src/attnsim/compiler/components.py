"""Ground truth for interpretability: which head or unit range computes which RASP expression.

Runs after scheduling. Every block the lowering made carries a name: a head is named by the
Aggregate or SelectorWidth it serves (merged heads are ``"a+b"``), a unit by a base and a
counter (``"base/k"``), where the base is a label or a direction derived from one
(``"label:value"``, ``"label@empty"``, ``"label^2"``, ``"label_2"``). This module maps the
names back to the labels of the traced program:

1. a head name is split at ``+`` into a sequence of known labels (a label may hold ``+``);
2. a unit base resolves to the longest known label that equals it or is followed in it by a
   separator (``: @ ^ _ #``);
3. a label the lowering made for an expression of its own (the width behind a sum, a joint
   key of an Or selector, ``1/x`` behind a division) belongs to the expressions that read
   what it writes (followed through the residual directions).

A name none of these resolves is reported in :attr:`Table.unresolved` (tests require it empty).

>>> from attnsim import rasp
>>> from attnsim.compiler import compile_program
>>> hist = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ))
>>> model = compile_program(hist.named("hist"), vocab=["a", "b"], max_seq_len=4)
>>> [c.name for c in model.components() if "hist" in c.labels]
['L0H0', 'L0 MLP relu 0-8', 'output']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from attnsim.compiler import tracing
from attnsim.compiler.lowering import LoweredProgram
from attnsim.ir.blocks import BilinearUnit, Layer, NativeUnit
from attnsim.model.compiled import Component
from attnsim.rasp import expr as E

SEPARATORS = ":@^_#"
BOS_DIRECTIONS = ("bos", "notbos")  # written by every token row of W_E (assembly)


@dataclass(frozen=True)
class Table:
    """The component rows and the names that could not be mapped to a program label."""

    rows: tuple[Component, ...]
    unresolved: tuple[str, ...]


@dataclass
class _Block:
    site: str
    layer: int
    kind: str
    index: int
    raw: tuple[str, ...]  # the (possibly internal) labels named by the block
    reads: tuple[tuple[str, tuple[str, ...]], ...]
    writes: tuple[str, ...]


def build(graph: tracing.Graph, low: LoweredProgram, layers: Sequence[Layer]) -> Table:
    """The ground-truth table of a compiled program (see the module docstring)."""
    out_rep = low.output
    by_label = {graph.labels[u]: graph.nodes[u] for u in graph.order}
    known = set(low.labels.values()) | set(by_label)
    unresolved: list[str] = []
    blocks = _blocks(layers, known, unresolved)
    embed = _embed_blocks(low, known, unresolved)
    out_label = graph.labels[graph.output.uid]
    out_dirs = tuple(out_rep.dims) if out_rep.kind == "cat" else tuple(sorted(out_rep.form))
    owners = _Owners(by_label, blocks + embed, out_dirs, out_label)
    rows: list[Component] = []

    static = sorted({lb for b in embed if b.kind == "static" for lb in owners.of_all(b.raw)})
    for kind in ("tokens", "static"):
        part = [b for b in embed if b.kind == kind]
        if not part:
            continue
        labels = sorted({lb for b in part for lb in owners.of_all(b.raw)})
        if kind == "static":
            labels = static
        ops = tuple(f"{_kind(by_label.get(lb))} '{lb}' (embedded)" for lb in labels)
        writes = tuple(d for b in part for d in b.writes)
        if kind == "tokens":  # the token embedding also marks BOS and the other positions
            writes = tuple(d for d in BOS_DIRECTIONS if d in low.residual) + writes
        rows.append(
            Component(
                "embed",
                -1,
                kind,
                0,
                0,
                tuple(labels),
                ops,
                (),
                writes,
                "hook_embed",
            )
        )
    for b in blocks:
        if b.site != "attn":
            continue
        labels = owners.of_all(b.raw)
        ops = _head_ops(b.raw, labels, by_label, graph.labels)
        rows.append(
            Component(
                "attn",
                b.layer,
                "head",
                b.index,
                b.index + 1,
                tuple(labels),
                ops,
                b.reads,
                b.writes,
                f"blocks.{b.layer}.attn.hook_z",
            )
        )
    hows: dict[str, str] = {}  # label -> how its first realisation was made
    for r in low.realisations:
        hows.setdefault(r.label, r.how)
    for group in _unit_groups([b for b in blocks if b.site == "mlp"], owners):
        first = group[0]
        labels = owners.of_all(first.raw)
        ops = tuple(_unit_op(lb, first.raw, by_label, hows) for lb in labels)
        reads: dict[str, None] = {}
        writes: dict[str, None] = {}
        for b in group:
            reads.update(dict.fromkeys(b.reads[0][1]))
            writes.update(dict.fromkeys(b.writes))
        rows.append(
            Component(
                "mlp",
                first.layer,
                first.kind,
                first.index,
                group[-1].index + 1,
                tuple(labels),
                ops,
                (("input", tuple(sorted(reads))),),
                tuple(sorted(writes)),
                _unit_hook(first),
            )
        )
    rows.append(
        Component(
            "output",
            -1,
            "readout",
            0,
            0,
            (out_label,),
            (f"{_kind(graph.output)} '{out_label}' (read out: {out_rep.kind})",),
            (("output", out_dirs),),
            (),
            f"blocks.{len(layers) - 1}.hook_resid_post" if layers else "hook_embed",
        )
    )
    for b in blocks + embed:
        for raw in b.raw:
            if not owners.of(raw):
                unresolved.append(f"{raw} ({_place(b)})")
    return Table(tuple(rows), tuple(dict.fromkeys(unresolved)))


# -- naming ----------------------------------------------------------------------------------


def split_head_name(name: str, known: set[str], max_parts: int | None = None) -> list[str] | None:
    """Splits a (merged) head name ``"a+b"`` into known labels; None if no split works.
    ``max_parts``: the most ``+``-separated parts any known label has (found when None).

    >>> split_head_name("x+y+z", {"x", "y+z", "y"})
    ['x', 'y+z']
    """
    if max_parts is None:
        max_parts = max((label.count("+") + 1 for label in known), default=1)
    parts = name.split("+")
    n = len(parts)
    best: list[list[str] | None] = [None] * (n + 1)
    best[n] = []
    for i in range(n - 1, -1, -1):
        labels = ["+".join(parts[i:j]) for j in range(i + 1, min(n, i + max_parts) + 1)]
        for j in range(i + len(labels), i, -1):  # the longest label first
            rest = best[j]
            if rest is not None and labels[j - i - 1] in known:
                best[i] = [labels[j - i - 1]] + rest
                break
    return best[0]


def resolve_base(base: str, known: set[str]) -> str | None:
    """The longest known label that is ``base`` or a prefix of it followed by a separator.

    >>> resolve_base("sort@empty_2", {"sort", "so"})
    'sort'
    >>> resolve_base("1/x", {"x"}) is None
    True
    """
    if base in known:
        return base
    best = None
    for i, ch in enumerate(base):
        if ch in SEPARATORS and base[:i] in known:
            best = base[:i]
    return best


def _unit_base(name: str) -> str:
    return name.rsplit("/", 1)[0]


def _resolve(base: str, known: set[str], unresolved: list[str], where: str) -> str:
    got = resolve_base(base, known)
    return base if got is None else got  # an unknown base is followed through its readers


def _blocks(layers: Sequence[Layer], known: set[str], unresolved: list[str]) -> list[_Block]:
    out: list[_Block] = []
    max_parts = max((label.count("+") + 1 for label in known), default=1)
    for li, layer in enumerate(layers):
        for hi, h in enumerate(layer.heads):
            raw = split_head_name(h.name, known, max_parts)
            if raw is None:
                unresolved.append(f"head name {h.name!r} (layer {li} head {hi})")
                raw = [h.name]
            reads = (
                ("query", tuple(sorted({q for q, _, _ in h.qk}))),
                ("key", tuple(sorted({k for _, k, _ in h.qk}))),
                ("value", tuple(sorted({s for s, _, _ in h.ov}))),
            )
            writes = tuple(sorted({d for _, d, _ in h.ov}))
            out.append(_Block("attn", li, "head", hi, tuple(raw), reads, writes))
        units: list[tuple[str, int, object]] = [("relu", i, u) for i, u in enumerate(layer.relu)]
        units += [("bilinear", i, u) for i, u in enumerate(layer.bilinear)]
        slot: dict[str, int] = {}
        for u in layer.native:
            units.append((u.kind, slot.get(u.kind, 0), u))
            slot[u.kind] = slot.get(u.kind, 0) + 1
        for kind, ui, u in units:
            base = _unit_base(u.name)
            raw = _resolve(base, known, unresolved, f"layer {li} {kind} unit {ui}")
            if isinstance(u, BilinearUnit):
                forms = u.a + u.b
            elif isinstance(u, NativeUnit):
                forms = u.inputs + u.gate
            else:
                forms = u.inputs
            reads = (("input", tuple(sorted({d for d, _ in forms}))),)
            writes = tuple(sorted({d for d, _ in u.outputs}))
            out.append(_Block("mlp", li, kind, ui, (raw,), reads, writes))
    return out


def _embed_blocks(low: LoweredProgram, known: set[str], unresolved: list[str]) -> list[_Block]:
    out = []
    for d in low.token_dims:
        out.append(_Block("embed", -1, "tokens", 0, (_resolve(d, known, [], ""),), (), (d,)))
    if low.numerical_token_dir is not None:
        d = low.numerical_token_dir
        out.append(_Block("embed", -1, "tokens", 0, (_resolve(d, known, [], ""),), (), (d,)))
    for d in low.token_channel_dirs.values():
        out.append(_Block("embed", -1, "tokens", 0, (_resolve(d, known, [], ""),), (), (d,)))
    for d in low.static_embed:
        out.append(_Block("embed", -1, "static", 0, (_resolve(d, known, [], ""),), (), (d,)))
    return out


class _Owners:
    """Maps a (possibly internal) label to the program labels it serves."""

    def __init__(self, by_label: dict, blocks: list[_Block], out_dirs: tuple, out_label: str):
        self.by_label = by_label
        self.blocks = blocks
        self.out_dirs = set(out_dirs)
        self.out_label = out_label
        self.memo: dict[str, tuple[str, ...]] = {}
        # label -> the directions its blocks write: one set shared by the labels of a block
        # (a head serving hundreds of labels writes hundreds of directions), a new one only
        # where a label has several blocks
        self.writes: dict[str, frozenset[str]] = {}
        self.readers: dict[str, list[_Block]] = {}
        self._blocks_reading: dict[int, tuple[frozenset, list[_Block]]] = {}
        for b in blocks:
            ws = frozenset(b.writes)
            for r in b.raw:
                had = self.writes.get(r)
                self.writes[r] = ws if had is None or had == ws else had | ws
            for d in {d for _, ds in b.reads for d in ds}:
                self.readers.setdefault(d, []).append(b)

    def _reading(self, written: frozenset) -> list[_Block]:
        """The blocks that read any of ``written``, in the order of the sorted directions
        (once per set: the labels of a block share theirs)."""
        got = self._blocks_reading.get(id(written))
        if got is None or got[0] is not written:
            found = {id(b): b for d in sorted(written) for b in self.readers.get(d, ())}
            got = self._blocks_reading[id(written)] = (written, list(found.values()))
        return got[1]

    def of(self, raw: str, seen: frozenset = frozenset()) -> tuple[str, ...]:
        if raw in self.by_label:
            return (raw,)
        if raw in self.memo:
            return self.memo[raw]
        if raw in seen:
            return ()
        seen = seen | {raw}
        written = self.writes.get(raw, frozenset())
        got: dict[str, None] = {}
        for b in self._reading(written):
            if raw in b.raw:
                continue
            for other in b.raw:
                got.update(dict.fromkeys(self.of(other, seen)))
        if written & self.out_dirs:
            got[self.out_label] = None
        result = tuple(got)
        if not seen - {raw}:  # only a complete (top-level) answer is memoised
            self.memo[raw] = result
        return result

    def of_all(self, raws: Sequence[str]) -> list[str]:
        got: dict[str, None] = {}
        for r in raws:
            got.update(dict.fromkeys(self.of(r)))
        return list(got)


def _unit_groups(blocks: list[_Block], owners: _Owners) -> list[list[_Block]]:
    """Consecutive units of one layer and kind that serve the same labels."""
    groups: list[list[_Block]] = []
    for b in blocks:
        last = groups[-1][-1] if groups else None
        if (
            last is not None
            and (last.layer, last.kind, last.index + 1) == (b.layer, b.kind, b.index)
            and last.raw == b.raw
        ):
            groups[-1].append(b)
        else:
            groups.append([b])
    return groups


def _unit_hook(b: _Block) -> str:
    if b.kind == "relu":
        return f"blocks.{b.layer}.mlp.hook_post"
    if b.kind == "bilinear":
        return f"blocks.{b.layer}.mlp.hook_bilinear"
    return f"blocks.{b.layer}.mlp.hook_{b.kind}"


def _place(b: _Block) -> str:
    if b.site == "embed":
        return f"embedding {b.writes[0]}"
    return f"layer {b.layer} {b.kind} {b.index}"


# -- descriptions ----------------------------------------------------------------------------


def _kind(node: E.RASPExpr | None) -> str:
    return "expression" if node is None else type(node).__name__


def _selector_text(sel: E.Selector, labels: dict[int, str]) -> str:
    name = labels.get(sel.uid, sel.label)
    if isinstance(sel, E.Select):
        pred = getattr(sel.predicate, "name", getattr(sel.predicate, "__name__", "predicate"))
        keys = labels.get(sel.keys.uid, sel.keys.label)
        queries = labels.get(sel.queries.uid, sel.queries.label)
        return f"Select '{name}' (keys={keys}, queries={queries}, {pred})"
    parts = [_selector_text(c, labels) for c in sel.children if isinstance(c, E.Selector)]
    inner = ", ".join(parts)
    if isinstance(sel, E.SelectMax):
        inner += f", score={labels.get(sel.score.uid, sel.score.label)}"
    return f"{type(sel).__name__} '{name}' ({inner})"


def _head_ops(raw: Sequence[str], labels: Sequence[str], by_label: dict, names: dict) -> tuple:
    ops: list[str] = []
    sels: dict[str, None] = {}
    for r in raw:
        node = by_label.get(r)
        if isinstance(node, (E.Aggregate, E.SelectorWidth)):
            sels[_selector_text(node.selector, names)] = None
            ops.append(f"{type(node).__name__} '{r}'")
        elif isinstance(node, E.LengthType):
            ops.append(f"length '{r}' (the width of Select(TRUE))")
    for lb in labels:
        if lb not in raw:
            node = by_label.get(lb)
            if isinstance(node, (E.Aggregate, E.SelectorWidth)):
                sels[_selector_text(node.selector, names)] = None
            ops.append(f"{_kind(node)} '{lb}' (its selector width)")
    return tuple(sels) + tuple(ops)


def _unit_op(label: str, raw: Sequence[str], by_label: dict, hows: dict[str, str]) -> str:
    node = by_label.get(label)
    how = [hows[label]] if label in hows else []
    text = f"{_kind(node)} '{label}'"
    if raw and raw[0] != label:
        # the compiler's own expression (its label carries a fresh uid): named by its role
        return text + " (an intermediate the compiler adds for it)"
    if isinstance(node, E.Aggregate):
        text += " (its default or sum)"
    elif isinstance(node, (E.SelectorWidth, E.LengthType)):
        text += " (read-out of the head's 1/(w+1))"
    elif how:
        text += f" ({how[0]})"
    return text
