"""Which residual directions and heads are static: the analysis every execution plan starts
from (see :mod:`attnsim.model.plans`). A direction is static when its value at every position
is the same for every input of a length; a head whose queries and keys read static
directions only has a pattern the length alone decides. The analysis reads which weights are
non-zero, nothing else.
"""

from __future__ import annotations

import torch

from attnsim.model.config import AttentionMode
from attnsim.model.patterns import head_keys

__all__ = ["static_directions", "static_heads", "known_patterns", "pattern_keys"]


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


def static_directions(transformer) -> list[torch.Tensor]:
    """The static residual directions before each sublayer: ``[2 * n_layers + 1]`` masks
    ``[d_model]`` (entry 2l: before layer l's attention; 2l + 1: before its MLP; the last:
    the final stream).

    >>> from attnsim import compile_program, library, rasp
    >>> m = compile_program(library.make_reverse(rasp.tokens), vocab="ab", max_seq_len=4)
    >>> [int(mask.sum()) for mask in static_directions(m.model)][-1], m.config.d_model
    (26, 30)
    """
    with torch.no_grad():
        d = transformer.cfg.d_model
        W_E = transformer.W_E
        static = transformer.W_E_num == 0
        if transformer.cfg.token_width:  # vector tokens write their channels' directions
            static = static & (transformer.W_E_vec == 0).all(dim=0)
        if W_E.shape[0] > 1:  # every non-BOS token row writes the same (usually nothing)
            static = static & (W_E[1:] == W_E[1:2]).all(dim=0)
        out = [static]
        for block in transformer.blocks:
            a = block.attn
            dynamic = torch.zeros(d, dtype=torch.bool, device=W_E.device)
            for h in a.active_heads().tolist():
                pattern_static = bool((static | ~(_reads(a.W_Q[h]) | _reads(a.W_K[h]))).all())
                values_static = bool((static | ~_reads(a.W_V[h])).all())
                if not (pattern_static and values_static):
                    dynamic |= _writes(a.W_O[h])
            static = static & ~dynamic
            out.append(static)
            dynamic = torch.zeros(d, dtype=torch.bool, device=W_E.device)
            for w_in, w_out, *gates in _mlp_units(block.mlp):
                reads = w_in.abs() > 0  # [d_model, units]
                for g in gates:
                    reads = reads | (g.abs() > 0)
                unit_static = (static[:, None] | ~reads).all(dim=0)  # [units]
                if not bool(unit_static.all()):
                    dynamic |= _writes(w_out[~unit_static])
            static = static & ~dynamic
            out.append(static)
        return out


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
    masks = static_directions(transformer)
    out = []
    with torch.no_grad():
        for layer, block in enumerate(transformer.blocks):
            static, a = masks[2 * layer], block.attn
            out.append(
                tuple(
                    h
                    for h in a.active_heads().tolist()
                    if bool((static | ~(_reads(a.W_Q[h]) | _reads(a.W_K[h]))).all())
                )
            )
    return tuple(out)
