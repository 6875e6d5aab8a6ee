"""Shared checks of the documentation figures' drawing scripts (``docs/img/*.py``)."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path


def run_script(script: Path, out: Path) -> tuple[bytes, tuple[int, int]]:
    """Runs a drawing script writing ``out``; returns the PNG's bytes and its size."""
    done = subprocess.run(
        [sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return data, struct.unpack(">II", data[16:24])  # the IHDR chunk
