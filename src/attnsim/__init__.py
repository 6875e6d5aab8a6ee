"""attnsim: programming transformers exactly.

RASP programs (``attnsim.rasp``), an exact compiler to PyTorch weights
(``attnsim.compile_program``), matrix programs (``attnsim.matrix``), Match2 and k-PARITY
(``attnsim.tasks``) and the universal simulator of attention (``attnsim.simulator.build``).

Only the language is imported eagerly; the compiler, the simulator and the rest load on first
use, so ``import attnsim`` does not import torch.

>>> import attnsim
>>> hist = attnsim.rasp.SelectorWidth(
...     attnsim.rasp.Select(attnsim.rasp.tokens, attnsim.rasp.tokens, attnsim.rasp.Comparison.EQ)
... )
>>> attnsim.compile_program(hist, vocab=["a", "b"], max_seq_len=4).run(list("aba"))
[2, 1, 2]
"""

import importlib
import os

# Large tensors in huge pages where the system offers them (Linux with transparent huge
# pages in "madvise" mode): U's stream and its temporaries take tens of megabytes each, and
# their first touch costs one page fault per 2 MiB instead of per 4 KiB (the MiniLM-shaped
# U simulates 2-3x faster so). PyTorch reads this once, at its first allocation, so it takes
# effect only when attnsim is imported before torch; THP_MEM_ALLOC_ENABLE=0 in the
# environment keeps torch's default. Elsewhere it does nothing.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

from attnsim import rasp  # noqa: E402

__version__ = "0.1.0"

# public name -> (module, attribute or None for the module itself), loaded on first access
_LAZY = {
    "compile_program": ("attnsim.compiler.pipeline", "compile_program"),
    "CompiledModel": ("attnsim.model.compiled", "CompiledModel"),
    "compress": ("attnsim.model.compress", "compress"),
    "compiler": ("attnsim.compiler", None),
    "model": ("attnsim.model", None),
    "matrix": ("attnsim.matrix", None),
    "tasks": ("attnsim.tasks", None),
    "simulator": ("attnsim.simulator", None),
    "library": ("attnsim.rasp.library", None),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'attnsim' has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = importlib.import_module(module)
    return value if attr is None else getattr(value, attr)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["rasp", "__version__", *_LAZY]
