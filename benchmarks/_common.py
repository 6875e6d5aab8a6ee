"""What every benchmark script records about its run, and how it writes its JSON.

The scripts run as ``python benchmarks/NAME.py``, so this folder is on the import path.

>>> run = Run()
>>> sorted(run.machine())[:3]
['cpus', 'load_average_at_start', 'numpy']
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import numpy as np


class Run:
    """Started when created: the load average then, and the seconds since, for the JSON."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.load_at_start = list(os.getloadavg())

    def machine(self) -> dict:
        """Python, numpy and torch versions, CPUs, torch threads, load at start, seconds."""
        meta = {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "cpus": os.cpu_count(),
            "load_average_at_start": self.load_at_start,
            "seconds": time.perf_counter() - self.started,
        }
        try:
            import torch

            meta.update(torch=torch.__version__, torch_threads=torch.get_num_threads())
        except ImportError:  # the interpreter benchmark does not need torch
            pass
        return meta


def write_json(path: Path, payload: dict) -> None:
    """Writes ``payload`` (indented, newline-terminated), creating the folder, and says so."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path}")
