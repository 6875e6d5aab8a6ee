"""The ground-truth circuit of a compiled model, and path patching to check it.

Circuit-discovery methods (ACDC, attribution patching, edge pruning) are scored on edges:
which component's output feeds which component's input. A compiled model knows them: the
component table (:meth:`CompiledModel.components`, recorded by the compiler) says which
residual directions every head, MLP unit range, embedding and the readout reads and writes,
and the residual stream is a sum, so an edge A -> B is there exactly where B reads a
direction that A writes. Nothing here reads the weights to find the edges; the weights only
check them (:func:`check`).

Nodes, in the order of the forward pass: ``embed`` (the token embedding, with the BOS
marker), ``pos_embed`` (the positional embedding and the static S-ops folded into it), every
active head ``L{l}H{h}``, every MLP group (``L{l} MLP relu 0-16``: a range of units of one
kind that computes one expression) and ``output`` (the readout). At granularity "qkv" each
head also has three receiving nodes, ``L{l}H{h}.q``, ``.k`` and ``.v``, its query, key and
value inputs, each joined to the head by an internal edge. An edge is labelled with the
directions it carries and the RASP expressions they belong to.

Path patching (:mod:`attnsim.model.path_patching`) checks a circuit: ablating every edge
outside it changes no output (faithful), ablating any one of its edges changes some output
or the edge is reported as redundant with the reason (minimal).

>>> from attnsim import compile_program, library
>>> model = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
>>> for e in model.circuit().edges:
...     print(e.sender, "->", e.receiver, e.labels)
embed -> L0H0 ('tokens',)
embed -> L0 MLP relu 0-8 ('tokens',)
L0H0 -> L0 MLP relu 0-8 ('hist',)
L0 MLP relu 0-8 -> output ('hist',)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from attnsim.model.report import Component

__all__ = ["FORMAT", "GRANULARITIES", "Circuit", "Edge", "Node", "build"]

FORMAT = "attnsim-circuit/1"
GRANULARITIES = ("component", "qkv")
SEPARATORS = ":@^_#"  # what may follow a label in a direction's name ("hist:3", "x@inv")
SIDES = {"query": "q", "key": "k", "value": "v"}
LENS_INPUTS = {"q": "hook_q_input", "k": "hook_k_input", "v": "hook_v_input"}


@dataclass(frozen=True)
class Node:
    """A node of the circuit: a component that writes the residual stream, a head's input
    (granularity "qkv") or the readout.

    Attributes:
        name: ``embed``, ``pos_embed``, ``L1H0``, ``L1H0.q``, ``L0 MLP relu 0-8``, ``output``.
        site: "embed", "attn", "mlp" or "output".
        layer: the block, -1 for the embeddings and the readout.
        kind: "tokens"/"static" (embed), "head" or "q"/"k"/"v" (a head's input), the unit
            kind (mlp), "readout".
        start: the first head or unit of the component; stop: one past the last.
        labels: the RASP expressions the component computes.
        reads: the residual directions it reads (none for an embedding).
        writes: the residual directions it writes (none for a head's input or the readout).
    """

    name: str
    site: str
    layer: int
    kind: str
    start: int
    stop: int
    labels: tuple[str, ...]
    reads: tuple[str, ...]
    writes: tuple[str, ...]

    @property
    def head(self) -> str:
        """The node that writes for this one: a head's input belongs to the head."""
        return self.name.split(".")[0] if self.kind in ("q", "k", "v") else self.name

    def to_dict(self) -> dict:
        """JSON-ready: tuples become lists."""
        d = dict(vars(self))
        for key in ("labels", "reads", "writes"):
            d[key] = list(d[key])
        return d


@dataclass(frozen=True)
class Edge:
    """``sender -> receiver``: the receiver reads ``directions`` that the sender writes.

    ``labels`` are the RASP expressions those directions belong to (an expression the
    compiler made for the sender, such as a selector's key encoding, is named by the
    sender's labels). ``internal`` marks the edge from a head's input to the head
    (granularity "qkv"): it is part of the head, not of the residual stream, and is not
    ablated.
    """

    sender: str
    receiver: str
    directions: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    internal: bool = False

    @property
    def pair(self) -> tuple[str, str]:
        return (self.sender, self.receiver)

    def to_dict(self) -> dict:
        """JSON-ready: tuples become lists."""
        return {
            "sender": self.sender,
            "receiver": self.receiver,
            "directions": list(self.directions),
            "labels": list(self.labels),
            "internal": self.internal,
        }


@dataclass(frozen=True)
class Circuit:
    """Nodes in the order of the forward pass and the edges between them.

    Attributes:
        granularity: "component" or "qkv".
        n_layers: the model's blocks (the readout's hook names the last one).
        nodes: the nodes, senders before their receivers.
        edges: the edges, by receiver in node order, then sender.
    """

    granularity: str
    n_layers: int
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    _by_name: dict = field(default=None, init=False, repr=False, compare=False)

    def node(self, name: str) -> Node:
        """The node called ``name`` (a KeyError naming the nodes if there is none)."""
        if self._by_name is None:
            object.__setattr__(self, "_by_name", {n.name: n for n in self.nodes})
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(
                f"no node {name!r} in this circuit; its nodes are "
                + ", ".join(n.name for n in self.nodes)
            ) from None

    def pairs(self) -> list[tuple[str, str]]:
        """The ``(sender, receiver)`` pairs of the circuit's residual (not internal) edges."""
        return [e.pair for e in self.edges if not e.internal]

    def possible_pairs(self) -> list[tuple[str, str]]:
        """Every ``(sender, receiver)`` pair the forward pass allows: the sender writes to the
        stream before the receiver reads it. The circuit's edges are some of them."""
        out = []
        for r in self.nodes:
            if r.site == "embed" or r.kind == "head" and self.granularity == "qkv":
                continue
            for s in self.nodes:
                if s.writes and _order(s, self.n_layers) < _order(r, self.n_layers):
                    out.append((s.name, r.name))
        return out

    def to_dict(self) -> dict:
        """JSON-ready (see :meth:`from_dict`)."""
        return {
            "format": FORMAT,
            "granularity": self.granularity,
            "n_layers": self.n_layers,
            "nodes": [n.to_dict() for n in self.nodes],
            "edges": [e.to_dict() for e in self.edges],
        }

    def to_json(self) -> str:
        """The circuit as JSON text (:meth:`to_dict`)."""
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, d: dict) -> Circuit:
        """The inverse of :meth:`to_dict`.

        Raises:
            ValueError: ``d`` is not a circuit of this format.
        """
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"expected a circuit of format {FORMAT!r}, got {got!r}")
        nodes = tuple(
            Node(**{**n, **{k: tuple(n[k]) for k in ("labels", "reads", "writes")}})
            for n in d["nodes"]
        )
        edges = tuple(
            Edge(
                e["sender"],
                e["receiver"],
                tuple(e["directions"]),
                tuple(e["labels"]),
                bool(e.get("internal", False)),
            )
            for e in d["edges"]
        )
        return cls(d["granularity"], int(d["n_layers"]), nodes, edges)

    def as_networkx(self):
        """A ``networkx.DiGraph``: node attributes as :class:`Node`, edge attributes
        ``directions``, ``labels`` and ``internal``.

        Raises:
            ImportError: networkx is not installed (it is not a dependency of attnsim).

        >>> from attnsim import compile_program, library
        >>> c = compile_program(library.make_hist(), vocab="ab", max_seq_len=4).circuit()
        >>> g = c.as_networkx()  # doctest: +SKIP
        >>> sorted(g.successors("L0H0"))  # doctest: +SKIP
        ['L0 MLP relu 0-8']
        """
        try:
            import networkx as nx
        except ImportError as exc:
            raise ImportError(
                "Circuit.as_networkx needs the package 'networkx' (pip install networkx); "
                "to_json() and lens_edges() work without it"
            ) from exc
        g = nx.DiGraph(granularity=self.granularity)
        for n in self.nodes:
            g.add_node(n.name, **n.to_dict())
        for e in self.edges:
            g.add_edge(
                e.sender,
                e.receiver,
                directions=list(e.directions),
                labels=list(e.labels),
                internal=e.internal,
            )
        return g

    def lens_edges(self) -> list[dict]:
        """The edges in TransformerLens hook names, the form circuit-discovery tools read.

        Each edge is a dict ``sender``, ``sender_index``, ``receiver``, ``receiver_index``,
        ``labels``, ``internal``. Senders are ``hook_embed``, ``hook_pos_embed``,
        ``blocks.{l}.attn.hook_result`` (index ``[None, None, h]``: ``[:, :, h]``, with
        ``use_attn_result``) and ``blocks.{l}.hook_mlp_out``; receivers
        ``blocks.{l}.hook_attn_in`` (granularity "component"; ``use_attn_in``) or
        ``blocks.{l}.hook_q_input``/``hook_k_input``/``hook_v_input`` ("qkv";
        ``use_split_qkv_input``), ``blocks.{l}.hook_mlp_in`` (``use_hook_mlp_in``) and
        ``blocks.{L-1}.hook_resid_post`` (the readout). TransformerLens has one MLP per layer:
        the MLP groups of a layer become one node, their edges merge. An index ``None``
        means the whole activation.

        >>> from attnsim import compile_program, library
        >>> c = compile_program(library.make_hist(), vocab="ab", max_seq_len=4).circuit()
        >>> [(e["sender"], e["receiver"], e["receiver_index"]) for e in c.lens_edges()][:2]
        [('hook_embed', 'blocks.0.hook_attn_in', [None, None, 0]), ('hook_embed', \
'blocks.0.hook_mlp_in', None)]
        """
        merged: dict[tuple, dict] = {}
        for e in self.edges:
            s, si = self._lens_hook(self.node(e.sender), sending=True)
            r, ri = self._lens_hook(self.node(e.receiver), sending=False)
            key = (s, json.dumps(si), r, json.dumps(ri))
            got = merged.setdefault(
                key,
                {
                    "sender": s,
                    "sender_index": si,
                    "receiver": r,
                    "receiver_index": ri,
                    "labels": [],
                    "internal": e.internal,
                },
            )
            got["labels"] = list(dict.fromkeys(got["labels"] + list(e.labels)))
        return list(merged.values())

    def _lens_hook(self, n: Node, sending: bool) -> tuple[str, list | None]:
        if n.site == "embed":
            return ("hook_embed" if n.kind == "tokens" else "hook_pos_embed"), None
        if n.site == "output":
            return f"blocks.{self.n_layers - 1}.hook_resid_post", None
        if n.site == "mlp":
            return f"blocks.{n.layer}.hook_mlp_{'out' if sending else 'in'}", None
        index = [None, None, n.start]
        if n.kind in LENS_INPUTS:
            return f"blocks.{n.layer}.{LENS_INPUTS[n.kind]}", index
        if sending or self.granularity == "qkv":
            return f"blocks.{n.layer}.attn.hook_result", index
        return f"blocks.{n.layer}.hook_attn_in", index

    def __str__(self) -> str:
        lines = [f"circuit ({self.granularity}): {len(self.nodes)} nodes, {len(self.edges)} edges"]
        for e in self.edges:
            tag = " (internal)" if e.internal else ""
            lines.append(f"  {e.sender} -> {e.receiver}: {', '.join(e.labels)}{tag}")
        return "\n".join(lines)


# -- building --------------------------------------------------------------------------------


def _order(n: Node, n_layers: int) -> int:
    """Where a node reads or writes the stream: embeddings, then per layer heads then MLPs."""
    if n.site == "embed":
        return -1
    if n.site == "output":
        return 2 * n_layers
    return 2 * n.layer + (1 if n.site == "mlp" else 0)


def build(rows: Sequence[Component], n_layers: int, granularity: str = "component") -> Circuit:
    """The circuit of a component table (see the module docstring).

    Args:
        rows: the rows of :meth:`CompiledModel.components`.
        n_layers: the model's blocks.
        granularity: "component" (one node per head) or "qkv" (a head's query, key and
            value inputs apart).

    Returns:
        The :class:`Circuit`.

    Raises:
        ValueError: an unknown granularity.

    >>> rows = [Component("embed", -1, "tokens", 0, 0, ("tokens",), writes=("t:a",)),
    ...         Component("attn", 0, "head", 0, 1, ("x",), reads=(("query", ()),
    ...                   ("key", ()), ("value", ("t:a",))), writes=("x:a",)),
    ...         Component("output", -1, "readout", 0, 0, ("x",), reads=(("output", ("x:a",)),))]
    >>> [e.pair for e in build(rows, 1, "qkv").edges]
    [('embed', 'L0H0.v'), ('L0H0.q', 'L0H0'), ('L0H0.k', 'L0H0'), ('L0H0.v', 'L0H0'), \
('L0H0', 'output')]
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    nodes: list[Node] = []
    for c in rows:
        reads = tuple(sorted({d for _, ds in c.reads for d in ds}))
        if c.site == "embed":
            name = "embed" if c.kind == "tokens" else "pos_embed"
            nodes.append(Node(name, "embed", -1, c.kind, 0, 0, c.labels, (), c.writes))
        elif c.site == "attn" and granularity == "qkv":
            for side, dirs in c.reads:
                k = SIDES[side]
                nodes.append(
                    Node(f"{c.name}.{k}", "attn", c.layer, k, c.start, c.stop, c.labels,
                         tuple(dirs), ())
                )  # fmt: skip
            nodes.append(Node(c.name, "attn", c.layer, c.kind, c.start, c.stop, c.labels, (),
                              c.writes))  # fmt: skip
        else:
            writes = () if c.site == "output" else c.writes
            nodes.append(
                Node(c.name, c.site, c.layer, c.kind, c.start, c.stop, c.labels, reads, writes)
            )
    nodes = _merge_embeds(nodes)
    nodes.sort(key=lambda n: _order(n, n_layers))  # stable: the table's order within a place
    known = {lb for n in nodes for lb in n.labels}
    edges: list[Edge] = []
    for r in nodes:
        if r.kind == "head" and granularity == "qkv":
            for k in ("q", "k", "v"):
                edges.append(Edge(f"{r.name}.{k}", r.name, (), r.labels, internal=True))
            continue
        reads = set(r.reads)
        for s in nodes:
            if not s.writes or _order(s, n_layers) >= _order(r, n_layers):
                continue
            dirs = tuple(d for d in s.writes if d in reads)
            if dirs:
                labels = tuple(dict.fromkeys(lb for d in dirs for lb in _labels(d, s, known)))
                edges.append(Edge(s.name, r.name, dirs, labels))
    return Circuit(granularity, n_layers, tuple(nodes), tuple(edges))


def _merge_embeds(nodes: list[Node]) -> list[Node]:
    """One ``embed`` and one ``pos_embed`` node (the table may split an embedding in rows)."""
    out: list[Node] = []
    seen: dict[str, int] = {}
    for n in nodes:
        if n.site != "embed" or n.name not in seen:
            seen.setdefault(n.name, len(out))
            out.append(n)
            continue
        i = seen[n.name]
        old = out[i]
        out[i] = Node(
            old.name, "embed", -1, old.kind, 0, 0,
            tuple(dict.fromkeys(old.labels + n.labels)), (),
            tuple(dict.fromkeys(old.writes + n.writes)),
        )  # fmt: skip
    return out


def _labels(direction: str, sender: Node, known: set[str]) -> tuple[str, ...]:
    """The expression a direction belongs to: the longest label it starts with (followed by a
    separator), else the sender's own labels (a direction the compiler made for them)."""
    best = None
    if direction in known:
        best = direction
    else:
        for i, ch in enumerate(direction):
            if ch in SEPARATORS and direction[:i] in known:
                best = direction[:i]
    return (best,) if best is not None else sender.labels
