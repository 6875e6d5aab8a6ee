"""One interface for U's sequence layouts: how <T, X> is checked, written into U's input,
read back from U's output, which RASP program U runs over it, and what it costs.

:func:`of` gives the layout of a build (``SimulatorConfig.layout_kind``); everything that
depends on the layout goes through it, so :mod:`attnsim.simulator.universal` does not branch
on the layout, and a new layout is one class here (with its layout, codec and program
modules). The two layouts:

- :class:`Scalar`: the paper's, one real number per position, the attention merged into
  ``A_h`` and ``W_V,h W_O,h`` (:mod:`.layout`, :mod:`.checks`, :mod:`.codec`,
  :mod:`.programs`);
- :class:`Vector`: one vector per position holding T's parameters as torch stores them
  (:mod:`.vector_layout`, :mod:`.vector_codec`, :mod:`.vector_program`).

>>> from attnsim.simulator.config import SimulatorConfig
>>> [of(SimulatorConfig(2, 2, layout_kind=k)).name for k in ("scalar", "vector")]
['scalar', 'vector']
"""

from __future__ import annotations

from typing import Any

import torch

from attnsim.rasp import expr as E
from attnsim.simulator import checks, codec, programs, vector_codec, vector_program
from attnsim.simulator.config import LayoutKind, SimulatorConfig, memory_needed

__all__ = ["SequenceLayout", "Scalar", "Vector", "of"]


class SequenceLayout:
    """What a layout does for a build ``config`` (every method takes it).

    - ``prepare(config, target, X, causal)``: the target and X checked against the build
      (ValueError with the reason otherwise), as the layout's case;
    - ``pack(config, cases, prefix=False)``: U's input for a batch of cases, ``[batch,
      length]`` or ``[batch, length, width]`` (``prefix``: the first
      ``config.layout.input_length`` positions only, where every entry of a case lies);
    - ``unpack(config, out, cases)``: each case's T(X) ``(n, d)`` from U's output ``out``;
    - ``program(config)``: U's RASP program over that input;
    - ``cost(config, storage)``: the bytes building and running U are estimated to need;
    - ``model_problems(config, model)``: how a compiled model does not read this layout's
      input (empty: it does).

    >>> from attnsim.simulator import sampling
    >>> config = SimulatorConfig(2, 2)  # the vector layout
    >>> lay = of(config)
    >>> case = lay.prepare(config, sampling.random_attention(1, 2, seed=0), torch.ones(2, 2), None)
    >>> tuple(lay.pack(config, [case]).shape) == (1, config.layout.length, config.layout.width)
    True
    >>> lay.pack(config, [case], prefix=True).shape[1] == config.layout.input_length
    True
    """

    name = ""

    def prepare(self, config: SimulatorConfig, target: Any, X: Any, causal: bool | None):
        raise NotImplementedError(self._missing("prepare"))

    def pack(self, config: SimulatorConfig, cases: list, prefix: bool = False) -> torch.Tensor:
        raise NotImplementedError(self._missing("pack"))

    def unpack(self, config: SimulatorConfig, out: torch.Tensor, cases: list) -> list:
        raise NotImplementedError(self._missing("unpack"))

    def program(self, config: SimulatorConfig) -> E.SOp:
        raise NotImplementedError(self._missing("program"))

    def _missing(self, what: str) -> str:
        return (
            f"{type(self).__name__} does not define {what}: a layout implements every method "
            "of SequenceLayout (see Scalar and Vector)"
        )

    def cost(self, config: SimulatorConfig, storage: str = "auto") -> int:
        return memory_needed(config, storage)

    def model_problems(self, config: SimulatorConfig, model) -> list[str]:
        raise NotImplementedError(self._missing("model_problems"))


class Scalar(SequenceLayout):
    """The paper's layout: one real number per position."""

    name = LayoutKind.SCALAR.value

    def prepare(self, config, target, X, causal):
        return checks.prepare(config, target, X, causal)

    def pack(self, config, cases, prefix=False):
        seqs = codec.pack_batch(config.layout, cases)  # [batch, length]
        return seqs[:, : config.layout.input_length] if prefix else seqs

    def unpack(self, config, out, cases):
        return codec.unpack_output(config.layout, out, [c.shape for c in cases])

    def program(self, config):
        return programs.program(config.layout, config.score_bound)

    def model_problems(self, config, model):
        if model.vocab is not None or not model.numerical_tokens:
            return ["the model does not read numerical tokens"]
        return []


class Vector(SequenceLayout):
    """One vector per position, T's raw parameters."""

    name = LayoutKind.VECTOR.value

    def prepare(self, config, target, X, causal):
        return vector_codec.prepare(config, config.layout, target, X, causal)

    def pack(self, config, cases, prefix=False):
        return vector_codec.pack_batch(config.layout, cases, prefix)  # [batch, length, width]

    def unpack(self, config, out, cases):
        return [
            vector_codec.unpack_output(config.layout, row, *c.X.shape) for row, c in zip(out, cases)
        ]

    def program(self, config):
        return vector_program.vector_program(config.layout, config.score_bound)

    def model_problems(self, config, model):
        width = config.layout.width
        if model.config.token_width != width:
            return [
                f"the model reads tokens of width {model.config.token_width}, the layout {width}"
            ]
        return []


_LAYOUTS: dict[LayoutKind, SequenceLayout] = {
    LayoutKind.SCALAR: Scalar(),
    LayoutKind.VECTOR: Vector(),
}


def of(config: SimulatorConfig) -> SequenceLayout:
    """The layout of the build ``config``.

    >>> type(of(SimulatorConfig(2, 2, layout_kind="scalar"))).__name__
    'Scalar'
    """
    return _LAYOUTS[config.layout_kind]
