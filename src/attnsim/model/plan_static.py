"""Which residual directions and heads are static: the analysis every execution plan starts
from (see :mod:`attnsim.model.plans`). A direction is static when its value at every position
is the same for every input of a length; a head whose queries and keys read static
directions only has a pattern the length alone decides. The analysis reads which weights are
non-zero, nothing else: :func:`static_flow` is the one analysis, of what each sublayer reads
and writes, which the dense weights (:func:`analysis`) and the sparse storage
(``SparseTransformer._analysis``) describe each in their own terms.
"""

from __future__ import annotations

import torch

from attnsim.model.config import AttentionMode
from attnsim.model.patterns import head_keys

__all__ = [
    "analysis",
    "static_flow",
    "static_directions",
    "static_heads",
    "known_patterns",
    "pattern_keys",
]


def known_patterns(model) -> tuple:
    """Per layer and head, the keys the compiler wrote down for the model's heads
    (:class:`attnsim.model.patterns.StaticPattern` or None), where the plans may use them: hard
    attention, weights unchanged since (``model.head_patterns``); else ``()``.

    >>> from attnsim import compile_program, library, rasp
    >>> m = compile_program(library.shift_by(1, rasp.tokens), vocab="ab", max_seq_len=4)
    >>> [[p.kind for p in layer if p is not None] for layer in known_patterns(m.model)]
    [['table']]
    """
    if model.cfg.attention is not AttentionMode.HARD:
        return ()
    return getattr(model, "head_patterns", ())


def pattern_keys(
    pattern, n: int, causal: bool, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(offsets [n + 1], keys [nnz])`` int64 tensors on ``device``: a pattern's keys for
    every query of an input of ``n`` positions (:func:`attnsim.model.patterns.head_keys`).

    >>> from attnsim.model.patterns import StaticPattern
    >>> pattern_keys(StaticPattern.equality([0.0, 1.0], [0.0, 1.0]), 3, False)[1].tolist()
    [0, 1, 2]
    """
    offsets, keys = head_keys(pattern, n, causal)
    return torch.from_numpy(offsets).to(device), torch.from_numpy(keys).to(device)


def _reads(w: torch.Tensor) -> torch.Tensor:
    """Rows (residual directions) a weight ``[d_model, width]`` reads: ``[d_model]`` bool."""
    return w.abs().sum(dim=1) > 0


def _writes(w: torch.Tensor) -> torch.Tensor:
    """Columns a weight ``[width, d_model]`` writes: ``[d_model]`` bool."""
    return w.abs().sum(dim=0) > 0


def static_flow(static: torch.Tensor, layers, hard: bool) -> dict:
    """The static analysis, for either storage: which directions are static after each
    stage, from ``static [d_model]`` (the embedding's) and, per layer, what its sublayers
    read and write (``layers``: ``(heads, groups)`` each; ``heads``: ``(head, qk, v,
    writes)``, the directions its queries and keys read, its values read and it writes,
    each a list of ints; ``groups``, per kind of unit: ``(reads, writes)``,
    ``reads(static)`` ``[units]`` bool, the units that read static directions only, and
    ``writes(units)`` the directions those units write, an index tensor).

    Returns ``masks`` (``[2 * n_layers + 1]``: entry 2l before layer l's attention, 2l + 1
    before its MLP, the last the final stream), per layer the static ``heads`` (queries
    and keys read static directions only) and, with ``hard``, the ``partial`` ones (they
    read some static direction), and per layer and kind of unit the static ``units``.

    >>> flow = static_flow(torch.tensor([True, False]), [([(0, [0], [0], [0])], [])], True)
    >>> flow["heads"], [m.tolist() for m in flow["masks"]]
    ([[0]], [[True, False], [True, False], [True, False]])
    """
    masks, heads, partial, units = [static.clone()], [], [], []
    for layer_heads, groups in layers:
        found, some, dynamic, on = [], [], torch.zeros_like(static), static.tolist()
        for h, qk, v, writes in layer_heads:
            pattern = [on[c] for c in qk]
            if all(pattern):
                found.append(h)
            elif hard and any(pattern):
                some.append(h)
            if not (all(pattern) and all(on[c] for c in v)):
                dynamic[list(writes)] = True
        static = static & ~dynamic
        masks.append(static.clone())
        heads.append(found)
        partial.append(some)
        layer_units, dynamic = [], torch.zeros_like(static)
        for reads, writes in groups:
            ok = reads(static)
            layer_units.append(ok)
            if not bool(ok.all()):
                dynamic[writes(torch.nonzero(~ok).flatten())] = True
        static = static & ~dynamic
        masks.append(static.clone())
        units.append(layer_units)
    return {"masks": masks, "heads": heads, "partial": partial, "units": units}


def analysis(transformer) -> dict:
    """:func:`static_flow` of a dense model, read from which of its weights are non-zero.

    >>> from attnsim import compile_program, library, rasp
    >>> m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    >>> analysis(m.model)["partial"]  # hist's head: tokens, and BOS's static score
    [[0]]
    """
    with torch.no_grad():
        W_E = transformer.W_E
        static = transformer.W_E_num == 0
        if transformer.cfg.token_width:  # vector tokens write their channels' directions
            static = static & (transformer.W_E_vec == 0).all(dim=0)
        if W_E.shape[0] > 1:  # every non-BOS token row writes the same (usually nothing)
            static = static & (W_E[1:] == W_E[1:2]).all(dim=0)
        layers = [(_heads(b.attn), _groups(b.mlp)) for b in transformer.blocks]
        hard = transformer.cfg.attention is AttentionMode.HARD
        return static_flow(static, layers, hard)


def _heads(a):
    def at(mask: torch.Tensor) -> list[int]:
        return torch.nonzero(mask).flatten().tolist()

    for h in a.active_heads().tolist():
        qk = _reads(a.W_Q[h]) | _reads(a.W_K[h])
        yield h, at(qk), at(_reads(a.W_V[h])), at(_writes(a.W_O[h]))


def _groups(mlp) -> list:
    out = []
    for w_in, w_out, *gates in _mlp_units(mlp):
        reads = w_in.abs() > 0  # [d_model, units]
        for g in gates:
            reads = reads | (g.abs() > 0)
        out.append(
            (
                lambda static, r=reads: (static[:, None] | ~r).all(dim=0),
                lambda units, w=w_out: _writes(w[units]),
            )
        )
    return out


def static_directions(transformer) -> list[torch.Tensor]:
    """The static residual directions before each sublayer: ``[2 * n_layers + 1]`` masks
    ``[d_model]`` (entry 2l: before layer l's attention; 2l + 1: before its MLP; the last:
    the final stream).

    >>> from attnsim import compile_program, library, rasp
    >>> m = compile_program(library.make_reverse(rasp.tokens), vocab="ab", max_seq_len=4)
    >>> [int(mask.sum()) for mask in static_directions(m.model)][-1], m.config.d_model
    (26, 30)
    """
    return analysis(transformer)["masks"]


def _mlp_units(mlp) -> list[tuple[torch.Tensor, ...]]:
    """(W_in, W_out, gates...) of each kind of unit an MLP holds."""
    units = [(mlp.W_in, mlp.W_out)]
    if mlp.W_bil_a.shape[1]:
        units.append((mlp.W_bil_a, mlp.W_bil_out, mlp.W_bil_b))
    for kind in mlp.native_kinds:
        units.append(
            (
                getattr(mlp, f"W_{kind}_in"),
                getattr(mlp, f"W_{kind}_out"),
                getattr(mlp, f"W_{kind}_gate"),
            )
        )
    return units


def static_heads(transformer) -> tuple[tuple[int, ...], ...]:
    """For each layer, the active heads whose queries and keys read static directions only
    (their pattern depends on the input's length alone).

    >>> from attnsim import compile_program, library, rasp
    >>> m = compile_program(library.make_reverse(rasp.tokens), vocab="ab", max_seq_len=4)
    >>> static_heads(m.model)  # length (layer 0) and the reversing gather (layer 3)
    ((0,), (), (), (0,))
    """
    return tuple(tuple(hs) for hs in analysis(transformer)["heads"])
