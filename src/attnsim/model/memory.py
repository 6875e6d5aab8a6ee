"""Memory estimates: refuse a model that cannot fit before allocating any of it.

A model's weights are known from its config alone (the module is built on PyTorch's "meta"
device, which allocates nothing), and running it holds ``[pos, pos]`` attention scores per
head. Both are compared with this machine's memory, so that an impossible size ends in an
error that says how much was asked for and what to lower, not in the allocator's message.

>>> from attnsim.model.config import ModelConfig
>>> cfg = ModelConfig(n_layers=1, d_model=4, n_heads=1, d_head=1, d_mlp=2, d_bilinear=0,
...                   n_ctx=3, d_vocab=2)
>>> weight_bytes(cfg)
448
>>> try:
...     check_fits(10**18, "a model of 10^18 bytes", "lower max_seq_len")
... except ModelTooLargeError as exc:
...     print(str(exc)[:50])
a model of 10^18 bytes needs about 931322574.6 GiB
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from attnsim.model.config import ModelConfig
from attnsim.model.transformer import HEAD_CHUNK_VALUES, Transformer

GIB = float(1 << 30)


class ModelTooLargeError(MemoryError, ValueError):
    """A requested size does not fit in this machine's memory (the message has the estimate)."""


def weight_shapes(cfg: ModelConfig) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Every weight's name, shape and dtype for ``cfg``, without allocating them."""
    with torch.device("meta"):
        model = Transformer(cfg)
    return {k: (tuple(v.shape), v.dtype) for k, v in model.state_dict().items()}


def weight_bytes(cfg: ModelConfig, shapes: dict | None = None) -> int:
    """Bytes of the weights of a model with config ``cfg`` (``shapes``: its
    :func:`weight_shapes`, where the caller has them)."""
    total = 0
    for shape, dtype in (weight_shapes(cfg) if shapes is None else shapes).values():
        n = 1
        for s in shape:
            n *= s
        total += n * dtype.itemsize
    return total


def attention_bytes(n_ctx: int, n_heads: int, itemsize: int) -> int:
    """Working memory of one attention layer on one full-length sequence in the dense
    forward: scores, selection and pattern of one chunk of heads (heads run in chunks of
    about 2^25 values, at least one head each).

    >>> attention_bytes(100, 4, 8) == 3 * 4 * 100 * 100 * 8  # all four heads in one chunk
    True
    >>> attention_bytes(10_000, 50, 8) == 3 * 10_000 ** 2 * 8  # one head at a time
    True
    """
    per_chunk = max(1, HEAD_CHUNK_VALUES // max(1, n_ctx * n_ctx))
    return 3 * min(n_heads, per_chunk) * n_ctx * n_ctx * itemsize


def memory_limit() -> int:
    """This machine's memory in bytes (the container's limit where one is set)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation now (None when it cannot be read).

    Less than :func:`memory_limit` by what is in use: the kernel's ``MemAvailable``, or the
    free physical pages where that cannot be read.
    """
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def gib(n: float) -> str:
    """Bytes as GiB, for messages."""
    return f"{n / GIB:.1f} GiB"


def fits(needed: int) -> bool:
    """Whether ``needed`` bytes pass :func:`check_fits`.

    >>> fits(1024), fits(10**18)
    (True, False)
    """
    return needed <= memory_limit()


def check_fits(needed: int, what: str, advice: str) -> None:
    """Raises ModelTooLargeError when ``needed`` bytes exceed this machine's memory.

    Args:
        needed: the estimate, in bytes.
        what: what needs it ("compiling with max_seq_len=1000000").
        advice: what to lower.
    """
    limit = memory_limit()
    if needed > limit:
        raise ModelTooLargeError(
            f"{what} needs about {gib(needed)}, more than this machine's "
            f"{gib(limit)} of memory; {advice}"
        )


def check_available(needed: int, what: str, advice: str, basis: str = "") -> None:
    """Raises ModelTooLargeError when ``needed`` bytes exceed the memory available now (the
    kernel's ``MemAvailable``; this machine's memory where that cannot be read). The message
    gives the estimate (and its ``basis``, in parentheses), what is available, this
    machine's memory and ``advice``.

    >>> try:
    ...     check_available(10**18, "a model of 10^18 bytes", "make it smaller")
    ... except ModelTooLargeError as exc:
    ...     print(str(exc)[:56])
    a model of 10^18 bytes needs about 931322574.6 GiB, more
    """
    limit = memory_limit()
    have = available_memory()
    have = limit if have is None else min(have, limit)
    if needed > have:
        raise ModelTooLargeError(
            f"{what} needs about {gib(needed)}{f' ({basis})' if basis else ''}, more than the "
            f"{gib(have)} of memory available now (this machine has {gib(limit)}); {advice}"
        )


def release_free() -> bool:
    """Hands the C allocator's free pages back to the system (glibc's ``malloc_trim``):
    after a large build, the freed program and compiler tables would otherwise stay in the
    process's resident memory, on top of the forward pass that follows. True where it ran
    (Linux with glibc); elsewhere nothing is done.

    >>> isinstance(release_free(), bool)
    True
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    return True
