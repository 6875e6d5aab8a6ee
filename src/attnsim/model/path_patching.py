"""Path patching on a compiled model, and the checks of its circuit that use it.

Ablating the edge A -> B of a :class:`~attnsim.model.circuit.Circuit` gives B, in place of
what A adds to the stream B reads, what A added in a run on another input (resample
ablation: the corrupted input; or nothing: zero ablation), every other edge as it is. The
forward pass runs node by node on the reference weights (``Attention.head_result`` for a
head whose query, key and value inputs may differ, the unit ranges of the component table
for the MLPs), so any edge the forward pass allows can be ablated, in the circuit or not.

:func:`check` ablates every edge outside the circuit at once (*faithful*: no output may
change) and every circuit edge alone (*minimal*: some output must change, or the edge is
reported as redundant with the reason). The node-by-node pass must also decode as the
model does: the component table accounts for everything the weights add.

Shapes (glossary): batch, pos (BOS included), d_model.

>>> from attnsim import compile_program, library
>>> m = compile_program(library.make_hist(), vocab="abc", max_seq_len=4)
>>> run_ablated(m, m.circuit(), [list("aab")], [list("abc")], [("L0H0", "L0 MLP relu 0-8")])
[[1, 1, 1]]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from attnsim.model.circuit import Circuit, Node
from attnsim.model.report import Component

__all__ = [
    "MIXED",
    "CircuitCheck",
    "check",
    "decode_patched",
    "resample_pairs",
    "run_ablated",
    "same_output",
]


# -- path patching ---------------------------------------------------------------------------


def _embed_parts(model, ids: torch.Tensor, vals: torch.Tensor) -> dict[str, torch.Tensor]:
    """What the token and the positional embedding write, ``[batch, pos, d_model]`` each."""
    net = model.model
    tok = net.W_E[ids]
    if vals is not None and net.cfg.numerical_tokens:
        tok = tok + vals.to(net.dtype)[..., None] * net.W_E_num
    if net.cfg.token_width:
        tok = tok + vals.to(net.dtype) @ net.W_E_vec
    pos = net.W_pos[: ids.shape[1]].expand_as(tok)
    return {"embed": tok, "pos_embed": pos}


def _forward(
    model,
    circuit: Circuit,
    ids: torch.Tensor,
    vals: torch.Tensor,
    ablate: dict[str, dict[str, torch.Tensor]],
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The forward pass node by node: ``(each sender's output, the readout's stream)``.

    ``ablate[receiver][sender]`` is what the receiver reads from that sender instead of the
    sender's output in this run.
    """
    outs = _embed_parts(model, ids, vals)
    stream = outs["embed"] + outs["pos_embed"]
    if not any(n.name == "pos_embed" for n in circuit.nodes):
        outs.pop("pos_embed")  # the table has no positional row: no edge may ablate it
    if not any(n.name == "embed" for n in circuit.nodes):
        outs.pop("embed")

    def read(name: str) -> torch.Tensor:
        got = ablate.get(name)
        if not got:
            return stream
        x = stream.clone()
        for s, value in got.items():
            x += value - outs[s]
        return x

    senders = [n for n in circuit.nodes if n.writes and n.site in ("attn", "mlp")]
    qkv = circuit.granularity == "qkv"
    for li in range(circuit.n_layers):
        block = model.model.blocks[li]
        for site in ("attn", "mlp"):
            added = torch.zeros_like(stream)
            for n in senders:
                if n.layer != li or n.site != site:
                    continue
                if site == "attn":
                    xs = [read(f"{n.name}.{k}") for k in "qkv"] if qkv else [read(n.name)] * 3
                    out = block.attn.head_result(*xs, n.start)
                else:
                    out = model._contribution(read(n.name), _as_component(n))
                outs[n.name] = out
                added += out
            stream = stream + added
    return outs, read("output")


def _as_component(n: Node) -> Component:
    return Component(n.site, n.layer, n.kind, n.start, n.stop, n.labels)


def run_ablated(
    model,
    circuit: Circuit,
    xs: Sequence[Sequence[Any]],
    source: Sequence[Sequence[Any]] | None,
    pairs: Iterable[tuple[str, str]],
) -> list:
    """Decoded outputs of a batch with the edges ``pairs`` ablated (path patching).

    Args:
        model: the :class:`CompiledModel` the circuit is of (dense weights).
        circuit: its circuit (:meth:`CompiledModel.circuit`); its nodes name the senders and
            receivers, and its granularity says whether a head's inputs are apart.
        xs: a batch of equal-length inputs.
        source: inputs of the same shape (resample ablation: every ablated edge carries what
            its sender wrote on ``source``), or None (zero ablation: it carries nothing).
        pairs: ``(sender, receiver)`` node names, any the forward pass allows
            (:meth:`Circuit.possible_pairs`), in the circuit or not.

    Returns:
        The outputs ``[batch][pos]``; a categorical position that no longer decodes to one
        value (a mixture) is :data:`MIXED`.

    Raises:
        ValueError: a pair the forward pass does not allow, or ``source`` of another shape.
    """
    ids, vals = model.encode(xs)
    allowed = set(circuit.possible_pairs())
    pairs = list(pairs)
    bad = [p for p in pairs if p not in allowed]
    if bad:
        raise ValueError(
            f"cannot ablate {bad[:3]}: an edge runs from a node that writes the stream to one "
            "that reads it later (Circuit.possible_pairs lists them)"
        )
    with torch.no_grad():
        if source is None:
            src = None
        else:
            sids, svals = model.encode(source)
            if sids.shape != ids.shape:
                raise ValueError(
                    f"the source inputs must have the shape of xs {tuple(ids.shape)}, "
                    f"got {tuple(sids.shape)} (BOS included)"
                )
            src, _ = _forward(model, circuit, sids, svals, {})
        return _ablated(model, circuit, (ids, vals), src, pairs)


def _ablated(model, circuit: Circuit, enc, src: dict | None, pairs) -> list:
    """Decoded outputs of the encoded inputs ``enc`` with ``pairs`` ablated to ``src`` (the
    senders' outputs on the corrupted inputs; None: zero)."""
    ablate: dict[str, dict[str, torch.Tensor]] = {}
    zero = torch.zeros(1, dtype=model.model.dtype)
    for s, r in pairs:
        ablate.setdefault(r, {})[s] = zero if src is None else src[s]
    with torch.no_grad():
        _, resid = _forward(model, circuit, *enc, ablate)
    return decode_patched(model, resid)


MIXED = "<mixed>"  # a categorical output that decodes to no single value


def decode_patched(model, resid: torch.Tensor) -> list:
    """The outputs of a patched run's final stream; a categorical position that decodes to
    no single value (a mixture no input gives) is :data:`MIXED`, not an error.

    >>> import torch
    >>> from attnsim import compile_program, library, rasp
    >>> m = compile_program(library.make_reverse(rasp.tokens), vocab="ab", max_seq_len=2)
    >>> ids, _ = m.encode(["ab"])
    >>> with torch.no_grad():
    ...     resid = m.model(ids)
    >>> decode_patched(m, resid)
    [['b', 'a']]
    >>> resid[0, 1, m._index[m.output.dims[0]]] = 0.5  # half 'a', half 'b'
    >>> resid[0, 1, m._index[m.output.dims[1]]] = 0.5
    >>> decode_patched(m, resid)[0][0]
    '<mixed>'
    """
    try:
        return model._decode(resid)
    except ValueError:  # RunTimeCheckError: some row is a mixture; decode row by row
        out = []
        for b in range(resid.shape[0]):
            try:
                out.append(model._decode(resid[b : b + 1])[0])
            except ValueError:
                row = []
                for i in range(1, resid.shape[1]):
                    try:
                        row.append(model._decode(resid[b : b + 1, [0, i]])[0][0])
                    except ValueError:
                        row.append(MIXED)
                out.append(row)
        return out


# -- checking --------------------------------------------------------------------------------


def same_output(a: Sequence, b: Sequence, tol: float = 1e-6) -> bool:
    """Whether two decoded outputs are equal (numbers within ``tol``, relative and absolute).

    >>> same_output([1.0, "a", None], [1.0 + 1e-9, "a", None]), same_output([1], [2])
    (True, False)
    """
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, float) or isinstance(y, float):
            if x is None or y is None or isinstance(x, str) or isinstance(y, str):
                return False
            if not (math.isnan(x) and math.isnan(y)) and not math.isclose(
                x, y, rel_tol=tol, abs_tol=tol
            ):
                return False
        elif x != y:
            return False
    return True


def resample_pairs(inputs: Sequence[Sequence[Any]], rounds: int = 2) -> list[tuple[list, list]]:
    """Clean/corrupted pairs for resample ablation: each input with ``rounds`` others of its
    length (the next ones in order, cyclically), deterministic.

    >>> resample_pairs(["ab", "ba", "c"], rounds=1)
    [(['a', 'b'], ['b', 'a']), (['b', 'a'], ['a', 'b'])]
    """
    by_len: dict[int, list[list]] = {}
    for x in inputs:
        by_len.setdefault(len(x), []).append(list(x))
    out = []
    for group in by_len.values():
        n = len(group)
        for i, x in enumerate(group):
            for k in range(1, min(rounds, n - 1) + 1):
                out.append((x, group[(i + k) % n]))
    return out


@dataclass(frozen=True)
class CircuitCheck:
    """What ablation showed about a circuit (see :func:`check`).

    Attributes:
        granularity: the circuit's.
        pairs: clean/corrupted pairs run.
        faithful: ablating every edge outside the circuit changed no output.
        outside: how many edges that was.
        unfaithful: the first outputs that changed: ``(clean input, corrupted, want, got)``.
        necessary: the circuit edges whose ablation alone changed some output.
        redundant: ``(sender, receiver, reason)`` for the others.
        matches_model: the node-by-node forward pass decodes as the model does (the
            component table accounts for everything the weights add).
    """

    granularity: str
    pairs: int
    faithful: bool
    outside: int
    unfaithful: tuple
    necessary: tuple[tuple[str, str], ...]
    redundant: tuple[tuple[str, str, str], ...]
    matches_model: bool

    @property
    def ok(self) -> bool:
        """Faithful, and every circuit edge necessary or reported with a reason."""
        return self.faithful and self.matches_model and all(r for *_, r in self.redundant)

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {
            "granularity": self.granularity,
            "pairs": self.pairs,
            "faithful": self.faithful,
            "outside": self.outside,
            "unfaithful": [
                list(map(list, u[:2])) + [list(u[2]), list(u[3])] for u in self.unfaithful
            ],  # fmt: skip
            "necessary": [list(p) for p in self.necessary],
            "redundant": [list(r) for r in self.redundant],
            "matches_model": self.matches_model,
            "ok": self.ok,
        }


def _batched(pairs: Sequence[tuple[list, list]]) -> list[tuple[list, list]]:
    """The pairs as batches of one length."""
    by_len: dict[int, tuple[list, list]] = {}
    for x, s in pairs:
        b = by_len.setdefault(len(x), ([], []))
        b[0].append(x)
        b[1].append(s)
    return list(by_len.values())


def check(model, circuit: Circuit, pairs: Sequence[tuple[Sequence, Sequence]]) -> CircuitCheck:
    """Checks a circuit by path patching over clean/corrupted pairs.

    *Faithful*: every edge the forward pass allows outside the circuit is ablated at once
    (resample ablation: it carries its sender's output on the corrupted input); every
    output must stay as it is on the clean input. *Minimal*: each circuit edge is ablated
    alone; an edge after which some output changes is necessary, the others are reported
    with the reason: what the sender writes into the directions the edge carries is the
    same on every clean and corrupted input (a positional or BOS direction under inputs of
    one length), or it differs but no output depends on the difference; and whether
    zero-ablating the edge changes an output.

    Args:
        model: a dense :class:`CompiledModel`.
        circuit: its circuit.
        pairs: ``(clean, corrupted)`` inputs of equal length each (:func:`resample_pairs`).

    Returns:
        A :class:`CircuitCheck`.

    Raises:
        ValueError: no pairs, or a pair of inputs of different lengths.
    """
    pairs = [(list(a), list(b)) for a, b in pairs]
    if not pairs:
        raise ValueError("check needs at least one (clean, corrupted) pair of inputs")
    bad = [(a, b) for a, b in pairs if len(a) != len(b)]
    if bad:
        raise ValueError(
            f"a clean and a corrupted input must have the same length, got {bad[0]}; "
            "resample_pairs(inputs) pairs inputs of one length"
        )
    runs = []  # per batch of one length: (inputs, encoded, senders' outputs on corrupted)
    with torch.no_grad():
        for xs, src in _batched(pairs):
            enc = model.encode(xs)
            runs.append((xs, enc, _forward(model, circuit, *model.encode(src), {})[0]))
    clean = [_ablated(model, circuit, enc, None, ()) for _, enc, _ in runs]
    matches = all(
        all(same_output(a, b) for a, b in zip(c, model.run(xs, check=False)))
        for c, (xs, _, _) in zip(clean, runs)
    )
    inside = set(circuit.pairs())
    outside = [p for p in circuit.possible_pairs() if p not in inside]
    unfaithful = []
    for c, (xs, enc, src), (_, corrupted) in zip(clean, runs, _batched(pairs)):
        got = _ablated(model, circuit, enc, src, outside)
        for x, s, want, g in zip(xs, corrupted, c, got):
            if not same_output(want, g) and len(unfaithful) < 5:
                unfaithful.append((tuple(x), tuple(s), tuple(want), tuple(g)))

    def changes(pair, zero: bool = False) -> bool:
        return any(
            not same_output(a, b)
            for c, (_, enc, src) in zip(clean, runs)
            for a, b in zip(c, _ablated(model, circuit, enc, None if zero else src, [pair]))
        )

    necessary, redundant = [], []
    for pair in circuit.pairs():
        if changes(pair):
            necessary.append(pair)
        else:
            redundant.append((*pair, _reason(model, circuit, pair, runs, changes(pair, True))))
    return CircuitCheck(
        circuit.granularity,
        len(pairs),
        not unfaithful,
        len(outside),
        tuple(unfaithful),
        tuple(necessary),
        tuple(redundant),
        matches,
    )


def _reason(model, circuit: Circuit, pair, runs, zero: bool) -> str:
    """Why ablating a circuit edge alone changed no output."""
    s, r = pair
    edge = next(e for e in circuit.edges if e.pair == pair)
    cols = torch.tensor([model._index[d] for d in edge.directions])
    varies = False
    with torch.no_grad():
        for _, enc, src in runs:
            a, _ = _forward(model, circuit, *enc, {})
            if not torch.allclose(a[s][..., cols], src[s][..., cols], rtol=0, atol=1e-9):
                varies = True
                break
    zero_text = (
        "zero-ablating it changes the output" if zero else "zero-ablating it changes no output"
    )
    dirs = ", ".join(edge.directions[:3]) + (" ..." if len(edge.directions) > 3 else "")
    if not varies:
        return (
            f"constant: what {s} writes into {dirs} is the same on every clean and corrupted "
            f"input (inputs of one length); {zero_text}"
        )
    return (
        f"masked: what {s} writes into {dirs} differs between the inputs, but no output "
        f"depends on the difference given the rest of the circuit; {zero_text}"
    )
