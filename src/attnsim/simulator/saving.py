"""The saved form of a universal simulator: ``simulator.json`` beside its compiled model.

A directory written by ``UniversalSimulator.save`` holds the compiled model
(``model.safetensors`` + ``model.json``, written by ``CompiledModel.save``) and
``simulator.json``: the format tag, the build config (``SimulatorConfig.to_json``), the
layout that config gives (stored to catch a damaged or mixed directory) and the build time.
Everything is data; nothing is unpickled or run.

>>> import json, tempfile
>>> from pathlib import Path
>>> from attnsim.simulator.config import SimulatorConfig
>>> path = Path(tempfile.mkdtemp())
>>> write_meta(path, SimulatorConfig(2, 2), 1.5)
>>> sorted(json.loads((path / SAVE_FILE).read_text()))
['build_seconds', 'config', 'format', 'layout']
>>> read_meta(path)[0] == SimulatorConfig(2, 2)
True
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attnsim.simulator.config import SimulatorConfig
from attnsim.simulator.layout import Layout
from attnsim.simulator.vector_layout import VectorLayout

__all__ = ["SAVE_FILE", "SAVE_FORMAT", "check_model", "read_meta", "write_meta"]

SAVE_FORMAT = "attnsim-simulator/1"  # the "format" of simulator.json
SAVE_FILE = "simulator.json"  # beside the compiled model's model.json and model.safetensors
KEYS = {"format", "config", "layout", "build_seconds"}


def layout_json(layout: Layout | VectorLayout) -> dict[str, int]:
    """The layout's sizes and lengths, as stored."""
    out = {
        "N": layout.N,
        "D": layout.D,
        "H": layout.H,
        "F": layout.F,
        "length": layout.length,
        "input_length": layout.input_length,
    }
    if isinstance(layout, VectorLayout):
        out["width"] = layout.width
        out["layers"] = layout.layers
    return out


def write_meta(path: Path, config: SimulatorConfig, build_seconds: float) -> None:
    """Writes ``simulator.json`` into the directory ``path``."""
    meta = {
        "format": SAVE_FORMAT,
        "config": config.to_json(),
        "layout": layout_json(config.layout),
        "build_seconds": float(build_seconds),
    }
    (Path(path) / SAVE_FILE).write_text(json.dumps(meta, indent=1))


def read_meta(path: Path) -> tuple[SimulatorConfig, float]:
    """Reads and checks the ``simulator.json`` of the directory ``path``.

    Returns:
        The build config and the build time in seconds.

    Raises:
        FileNotFoundError: ``path`` is not a directory, or has no ``simulator.json``.
        ValueError: the file is not what ``save`` wrote (the message says what is wrong).
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(
            f"{path} is not a directory; pass the directory UniversalSimulator.save wrote"
        )
    meta_path = path / SAVE_FILE
    if not meta_path.is_file():
        raise FileNotFoundError(
            f"{meta_path} is missing, so {path} holds no saved simulator (a partial save, or "
            "another kind of checkpoint); write one with UniversalSimulator.save(directory)"
        )

    def damaged(what: str) -> ValueError:
        return ValueError(
            f"{meta_path} {what}; it is not what UniversalSimulator.save wrote: save the "
            "simulator again"
        )

    try:
        meta: Any = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise damaged(f"is not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise damaged(f"holds a JSON {type(meta).__name__}, not an object")
    if meta.get("format") != SAVE_FORMAT:
        raise damaged(f"has format {meta.get('format')!r}, expected {SAVE_FORMAT!r}")
    if set(meta) != KEYS:
        raise damaged(f"has the keys {sorted(meta)}, expected {sorted(KEYS)}")
    try:
        config = SimulatorConfig.from_json(meta["config"])
    except (TypeError, ValueError) as exc:
        raise damaged(f"has an invalid 'config' ({exc})") from None
    if meta["layout"] != layout_json(config.layout):
        raise damaged(
            f"has the layout {meta['layout']}, but its config gives {layout_json(config.layout)}"
        )
    seconds = meta["build_seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        raise damaged(f"has build_seconds {seconds!r}, expected a number >= 0")
    return config, float(seconds)


def check_model(path: Path, config: SimulatorConfig, model: Any) -> None:
    """Raises a ValueError unless the loaded compiled ``model`` is the one ``config``
    describes (the sequence it reads, numerical tokens, its dtype)."""
    layout = config.layout
    problems = []
    if model.max_seq_len != layout.length or not model.fixed_length:
        problems.append(
            f"the model reads {model.max_seq_len} positions, the layout {layout.length}"
        )
    if config.is_vector:
        if model.config.token_width != layout.width:
            problems.append(
                f"the model reads tokens of width {model.config.token_width}, the layout "
                f"{layout.width}"
            )
    elif model.vocab is not None or not model.numerical_tokens:
        problems.append("the model does not read numerical tokens")
    if model.config.dtype != config.dtype_name:
        problems.append(f"the model is {model.config.dtype}, the config {config.dtype_name}")
    if problems:
        raise ValueError(
            f"{path}: the compiled model does not fit {SAVE_FILE} ({'; '.join(problems)}); the "
            "directory mixes files of two saves: save the simulator again"
        )
