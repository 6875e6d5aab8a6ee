"""tracr's ``tracr.rasp`` package: the language is the module :mod:`attnsim.tracr.rasp.rasp`."""
