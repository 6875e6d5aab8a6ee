"""``import attnsim`` asks torch for huge pages on large tensors (THP_MEM_ALLOC_ENABLE, read
by torch at its first allocation), without importing torch, and keeps a value the user
set."""

import os
import subprocess
import sys

CODE = (
    "import os, sys, attnsim; print(os.environ.get('THP_MEM_ALLOC_ENABLE'), 'torch' in sys.modules)"
)


def _run(env: dict) -> str:
    got = subprocess.run(
        [sys.executable, "-c", CODE], env=env, capture_output=True, text=True, check=True
    )
    return got.stdout.strip()


def test_import_sets_it_before_torch():
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    assert _run(env) == "1 False"


def test_a_users_setting_is_kept():
    assert _run({**os.environ, "THP_MEM_ALLOC_ENABLE": "0"}) == "0 False"
