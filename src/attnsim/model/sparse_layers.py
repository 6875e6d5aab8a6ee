"""The layers of a sparse model (:mod:`attnsim.model.sparse`) as coordinate lists: the data
the sparse executor's operations (:mod:`attnsim.model.sparse_ops`) are built from."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["OnTheCpu", "SparseHeads", "SparseLayer", "SparseUnits"]


@dataclass
class SparseHeads:
    """One layer's heads as coordinate lists (see :func:`heads_from_ir`)."""

    n_heads: int
    qk: torch.Tensor  # [T, 3] int64: head, query direction, key direction
    qk_w: torch.Tensor  # [T]
    ov: torch.Tensor  # [T', 3] int64: head, source direction, destination direction
    ov_w: torch.Tensor  # [T']


@dataclass
class SparseUnits:
    """One kind of MLP unit as coordinate lists: ``inputs`` (and ``gate`` or ``b``) ``[T,
    2]`` (unit, direction) with weights, ``outputs`` ``[T, 2]`` (unit, direction)."""

    kind: str  # "relu", "bilinear" or a declared function ("exp", "gelu", ...)
    n_units: int
    inputs: torch.Tensor
    inputs_w: torch.Tensor
    second: torch.Tensor  # bilinear: the b form; declared: the gate; relu: empty
    second_w: torch.Tensor
    outputs: torch.Tensor
    outputs_w: torch.Tensor


@dataclass
class SparseLayer:
    heads: SparseHeads
    units: list[SparseUnits]


class OnTheCpu:
    """Where a model in sparse storage runs: on the CPU only (its rows are paged with Linux's
    madvise), in the dtype it was compiled in; ``to`` leaves it there and refuses another
    device or a dtype, saying what to do instead. How it runs is its runtime's: setting an
    ``executor`` on the model is refused (it would be silently ignored).

    >>> OnTheCpu().to("cpu").__class__.__name__
    'OnTheCpu'
    """

    def to(self, device):
        if isinstance(device, torch.dtype):
            raise ValueError(
                f"a model in sparse storage keeps the dtype it was compiled in, not {device}: "
                "compile it with dtype=... to change it"
            )
        if not isinstance(device, (str, torch.device)):
            raise TypeError(f"to() takes a device (say 'cpu'), got {type(device).__name__}")
        if torch.device(device).type != "cpu":
            raise ValueError(
                f"a model in sparse storage runs on the CPU only, not on {device}: compile "
                "it with storage='dense' (or move model.to_dense()) to run it there"
            )
        return self

    def __setattr__(self, name: str, value) -> None:
        if name == "executor":  # called as a module, the model runs its definition
            raise AttributeError(
                "a model in sparse storage has no executor: run it through "
                "attnsim.model.runtime.Runtime(model, executor=...), or set "
                "CompiledModel.executor (its runtime is CompiledModel.runtime)"
            )
        object.__setattr__(self, name, value)
