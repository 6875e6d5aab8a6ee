"""Builds without the cyclic garbage collector's passes.

A large compile keeps millions of small objects alive (forms, terms, S-ops) and frees
almost none of them in cycles: Python's collector still walks all of them on each of its
full passes, about a fifth of the MiniLM-shaped simulator's build (2.1 of 11 s, 8 passes,
measured with ``gc.callbacks``). Objects are still freed by their reference counts; only
cycles wait until the collector runs again, after the build.

>>> import gc
>>> @paused
... def f():
...     return gc.isenabled()
>>> f(), gc.isenabled()
(False, True)
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def paused(fn: F) -> F:
    """``fn`` with the cyclic collector off while it runs (and as it was after, also when
    ``fn`` raises; nested calls leave it off until the outermost returns). The collector
    is process-wide: other threads run without it meanwhile."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was:
                gc.enable()

    return run  # type: ignore[return-value]
