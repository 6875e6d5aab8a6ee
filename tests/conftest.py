"""Test-wide settings: one torch thread (the models are small; threads only contend)."""

import importlib.util

import pytest
import torch

torch.set_num_threads(1)

# the tracr-class fuzzer needs tracr-pypi (the bench extra); without it, its doctest collection
# would fail at import (tests/test_tracr_differential.py skips itself)
collect_ignore = [] if importlib.util.find_spec("tracr") else ["fuzz_tracr.py"]


@pytest.fixture
def uncompiled_jit(monkeypatch):
    """Executor "jit" with the compile left out: the feature-major pass it would hand to
    inductor runs uncompiled in its place (seconds saved per compile), for tests of what
    surrounds the compile (a benchmark's bookkeeping, a script's smoke run);
    tests/test_jit.py and the device tests compile for real."""
    from attnsim.model import fused

    def uncompiled(cfg, prepared, inputs):
        E, layers, patterns = prepared

        def run(*tensors):
            values = tensors[1] if len(inputs) == 2 else None
            with torch.no_grad():
                return fused._whole(cfg, E, layers, patterns, tensors[0], values)

        return run, []

    monkeypatch.setattr(fused, "_compile", uncompiled)
