"""The attention rule, in one place: a hard head selects the keys whose score is within
its tolerance of the row's best score, ``score >= max - tolerance``, and averages them
(:func:`mix` also gives softmax's weights, ``softmax(beta * scores)``).

Every executor (the dense reference, the plans, the feature-major and the sparse forward,
the ONNX graph) selects keys through :func:`hard_selection`; the certificates that bound how
far a score may move without changing the selection compare against :func:`hard_threshold`.
A test reads the sources and fails where the rule is written out anywhere else. (The numpy
reference of :mod:`attnsim.ir.blocks` keeps its own line: that layer imports no torch.)

>>> s = torch.tensor([[1.0, 1.1, 0.0], [2.0, float("-inf"), 2.0]], dtype=torch.float64)
>>> hard_selection(s, 0.25).tolist()
[[True, True, False], [True, False, True]]
"""

from __future__ import annotations

import math
import numbers

import torch

from attnsim.model.config import AttentionMode, ModelConfig
from attnsim.model.costs import HEAD_CHUNK_VALUES

__all__ = ["HEAD_CHUNK_VALUES", "hard_selection", "hard_threshold", "mix"]


def hard_threshold(best: torch.Tensor, tolerance: float, *, inplace: bool = False) -> torch.Tensor:
    """The lowest score a hard head selects, ``best - tolerance``, for row maxima ``best``
    (``inplace``: written into ``best``).

    >>> hard_threshold(torch.tensor([1.0, float("-inf")]), 0.25).tolist()
    [0.75, -inf]
    """
    return best.sub_(tolerance) if inplace else best - tolerance


def hard_selection(
    scores: torch.Tensor,
    tolerance: float,
    *,
    dim: int = -1,
    best: torch.Tensor | None = None,
    inplace: bool = False,
) -> torch.Tensor:
    """The keys a hard head selects: ``scores >= max - tolerance`` along ``dim``, as a bool
    tensor of ``scores``' shape.

    Args:
        scores: the scores, keys along ``dim`` (masked keys ``-inf``: never selected unless
            every key of the row is masked, when all are, as ``-inf >= -inf``).
        tolerance: the head's tolerance (``ModelConfig.hard_tolerance``), a number >= 0.
        dim: the keys' dimension.
        best: the row maxima where the caller has them already (a ragged layout, or the
            maximum over several windows), broadcasting against ``scores``; by default
            ``scores.amax(dim, keepdim=True)``.
        inplace: write the selection into ``scores`` as 1.0 / 0.0 (its dtype) and return
            ``scores``: no second tensor of the scores' size (the dense and feature-major
            forwards; the maxima are computed first, so the result is the same). Where
            autograd records the scores, the same 1.0 / 0.0 values as a new tensor.

    Raises:
        ValueError: ``tolerance`` is not a finite number >= 0.
        TypeError: ``scores`` is not a floating-point tensor.

    >>> s = torch.tensor([[3.0, 3.0, 2.9], [0.0, 0.25, -1.0]])
    >>> hard_selection(s, 0.25).tolist()  # ties and keys within the tolerance: selected
    [[True, True, True], [True, True, False]]
    >>> hard_selection(s, 0.25, inplace=True) is s, s.tolist()
    (True, [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    """
    if (
        isinstance(tolerance, bool)
        or not isinstance(tolerance, numbers.Real)
        or not math.isfinite(tolerance)
        or tolerance < 0
    ):
        raise ValueError(
            f"hard attention's tolerance must be a finite number >= 0, got {tolerance!r}"
        )
    if not scores.is_floating_point():
        raise TypeError(f"hard attention's scores must be floating point, got {scores.dtype}")
    # scores that autograd keeps (gradients asked for through them) are not overwritten: the
    # selection is then a new 0/1 tensor (its gradient is zero wherever it is defined)
    as_values = inplace
    inplace = inplace and not (scores.requires_grad and torch.is_grad_enabled())
    if best is None:  # the maxima are a new tensor: in place, where the scores are too
        threshold = hard_threshold(scores.amax(dim=dim, keepdim=True), tolerance, inplace=inplace)
    else:
        threshold = hard_threshold(best, tolerance)
    if inplace:
        return scores.ge_(threshold)
    chosen = scores >= threshold
    return chosen.to(scores.dtype) if as_values else chosen


def mix(cfg: ModelConfig, scores: torch.Tensor, v: torch.Tensor, need_pattern: bool = False):
    """``(pattern, z)``: attention weights from ``scores [..., query, key]`` and the mixed
    values ``z = pattern @ v`` (``v [..., key, width]``), as every dense head computes them.
    Hard attention: the mean over the keys within the tolerance of the row's best score, as
    one product that sums their values and (a column of ones) counts them, then one
    division; without ``need_pattern`` the scores become the 0/1 selection in place and the
    pattern is None. Softmax: ``softmax(beta * scores)``.

    >>> from attnsim.model.config import ModelConfig
    >>> cfg = ModelConfig(n_layers=1, d_model=1, n_heads=1, d_head=1, d_mlp=0, d_bilinear=0,
    ...                   n_ctx=3, d_vocab=2)
    >>> scores = torch.tensor([[1.0, 1.1, 0.0]], dtype=torch.float64)  # keys 0, 1 within 0.25
    >>> v = torch.tensor([[2.0], [4.0], [8.0]], dtype=torch.float64)
    >>> mix(cfg, scores, v)[1].tolist()
    [[3.0]]
    """
    if cfg.attention is AttentionMode.HARD:
        chosen = hard_selection(scores, cfg.hard_tolerance, inplace=not need_pattern)
        if need_pattern:
            chosen = chosen.to(v.dtype)
        ones = torch.ones(*v.shape[:-1], 1, dtype=v.dtype, device=v.device)
        zc = torch.matmul(chosen, torch.cat([v, ones], dim=-1))
        count = zc[..., -1:]
        return (chosen / count if need_pattern else None), zc[..., :-1] / count
    pattern = torch.softmax(cfg.beta * scores, dim=-1)
    return pattern, torch.matmul(pattern, v)
