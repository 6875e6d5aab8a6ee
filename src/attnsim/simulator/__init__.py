"""The universal simulator U and its target side: the simulated layer T as data, and its oracle.

The modules, from the data to U:

- :mod:`~attnsim.simulator.spec`: the simulated layer as validated data
  (:class:`~attnsim.simulator.spec.AttentionSpec`, ``MergedAttention``, ``EncoderLayerSpec``,
  float64, immutable); :mod:`~attnsim.simulator.adapters`: specs from torch modules
  (``from_torch``) and saved layer files; :mod:`~attnsim.simulator.spec_modern`: RMSNorm,
  rotary embeddings; :mod:`~attnsim.simulator.llama`: LLaMA-shaped layers
  (``llama_layer``, ``from_llama``);
  :mod:`~attnsim.simulator.sampling`: random targets;
- :mod:`~attnsim.simulator.reference`: ``reference(spec, X)`` computes T(X) in plain torch;
- :mod:`~attnsim.simulator.config`: :class:`SimulatorConfig`, what a U is built for;
  :mod:`~attnsim.simulator.layout` and :mod:`~attnsim.simulator.codec`: where <T, X> lives
  in U's input, and the one place that packs it and reads T(X) back;
  :mod:`~attnsim.simulator.programs`: U as RASP programs;
- :func:`attnsim.simulator.build` (= :func:`attnsim.simulator.universal.build`): builds U, the
  universal simulator; :mod:`~attnsim.simulator.verify` checks it on random targets.

Everything past ``spec`` and ``reference`` is loaded on first use.

>>> import torch
>>> from attnsim.simulator import reference, sampling
>>> target = sampling.random_attention(2, 4, seed=0)
>>> X = torch.zeros(3, 4, dtype=torch.float64)
>>> tuple(reference.reference(target, X).shape)
(3, 4)
"""

import importlib

from attnsim.simulator import reference, spec

# public name -> (module, attribute or None for the module itself), loaded on first access
_LAZY = {
    "build": ("attnsim.simulator.universal", "build"),
    "UniversalSimulator": ("attnsim.simulator.universal", "UniversalSimulator"),
    "SimulatorConfig": ("attnsim.simulator.config", "SimulatorConfig"),
    "LayerKind": ("attnsim.simulator.config", "LayerKind"),
    "AttentionKind": ("attnsim.simulator.config", "AttentionKind"),
    "Maps": ("attnsim.simulator.config", "Maps"),
    "from_torch": ("attnsim.simulator.adapters", "from_torch"),
    "llama_layer": ("attnsim.simulator.llama", "llama_layer"),
    "from_llama": ("attnsim.simulator.llama", "from_llama"),
    "RMSNormSpec": ("attnsim.simulator.spec_modern", "RMSNormSpec"),
    "RotarySpec": ("attnsim.simulator.spec_modern", "RotarySpec"),
    **{
        name: (f"attnsim.simulator.{name}", None)
        for name in (
            "adapters",
            "checks",
            "codec",
            "config",
            "layout",
            "programs",
            "sampling",
            "sampling_decoder",
            "saving",
            "spec_modern",
            "llama",
            "universal",
            "verify",
        )
    },
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'attnsim.simulator' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    return value if attr is None else getattr(value, attr)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["reference", "spec", *_LAZY]
