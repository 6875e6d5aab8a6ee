"""tracr's ``tracr.compiler`` package: :mod:`~attnsim.tracr.compiler.compiling` (the
compiler's call), :mod:`~attnsim.tracr.compiler.lib` (tracr's programs) and
:mod:`~attnsim.tracr.compiler.assemble` (the compiled model's types)."""
