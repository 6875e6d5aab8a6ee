"""Test-wide settings: one torch thread (the models are small; threads only contend)."""

import importlib.util

import torch

torch.set_num_threads(1)

# the tracr-class fuzzer needs tracr-pypi (the bench extra); without it, its doctest collection
# would fail at import (tests/test_tracr_differential.py skips itself)
collect_ignore = [] if importlib.util.find_spec("tracr") else ["fuzz_tracr.py"]
