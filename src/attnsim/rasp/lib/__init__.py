"""The classic RASP programs, by family: :mod:`~attnsim.rasp.lib.tracr` (tracr's ``lib``),
:mod:`~attnsim.rasp.lib.original` (the original RASP paper's library) and
:mod:`~attnsim.rasp.lib.registry` (``PROGRAMS``, ready-to-run instances), with the helpers
they share in :mod:`~attnsim.rasp.lib.common`. :mod:`attnsim.rasp.library` re-exports them
all under one name.
"""
