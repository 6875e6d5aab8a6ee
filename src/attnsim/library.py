"""The classic RASP programs: tracr's library and the original RASP paper's library.

This module re-exports :mod:`attnsim.rasp.library`, so that ``from attnsim import library``
works the way ``from tracr.compiler import lib`` does.

>>> from attnsim import library, rasp
>>> rasp.evaluate(library.make_reverse(rasp.tokens), list("abc"))
['c', 'b', 'a']
"""

from attnsim.rasp import library as _library
from attnsim.rasp.library import *  # noqa: F403 - the same names, under attnsim.library

__all__ = list(_library.__all__)
