"""tracr's import layout over attnsim: a tracr script runs after changing its package prefix.

``from tracr.rasp import rasp`` becomes ``from attnsim.tracr.rasp import rasp``, and
``from tracr.compiler import compiling, lib`` becomes
``from attnsim.tracr.compiler import compiling, lib``; the programs are attnsim's own
expressions, so they also compile with :func:`attnsim.compile_program`. docs/tracr.md lists
what still differs from tracr, and why.

>>> from attnsim.tracr.compiler import compiling, lib
>>> model = compiling.compile_rasp_to_model(lib.make_length(), {1, 2, 3}, 5, compiler_bos="BOS")
>>> model.apply(["BOS", 1, 2, 3]).decoded
['BOS', 3, 3, 3]
"""
