"""tracr's ``tracr.transformer`` package: :mod:`~attnsim.tracr.transformer.encoder`."""
