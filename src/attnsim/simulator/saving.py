"""The saved form of a universal simulator: ``simulator.json`` beside its compiled model.

A directory written by ``UniversalSimulator.save`` holds the compiled model
(``model.safetensors`` + ``model.json``, written by ``CompiledModel.save``) and
``simulator.json``: the format tag, the build config (``SimulatorConfig.to_json``), the
layout that config gives (stored to catch a damaged or mixed directory), the build time and
a digest (``attnsim.model.digests.digest``, the hash compiled checkpoints use) of each of
those tables and of the ``model.json`` beside it, which records the digest of every weight.
Loading
refuses, with a :class:`~attnsim.model.checkpoint.DamagedCheckpointError`, a table edited
after saving or a compiled model from another save; a ``simulator.json`` without a digest
(written before simulators carried one) loads only with ``check=False``.
Everything is data; nothing is unpickled or run.

>>> import json, tempfile
>>> from pathlib import Path
>>> from attnsim.simulator.config import SimulatorConfig
>>> path = Path(tempfile.mkdtemp())
>>> _ = (path / "model.json").write_text("{}")  # the compiled model's, in a real save
>>> write_meta(path, SimulatorConfig(2, 2), 1.5)
>>> sorted(json.loads((path / SAVE_FILE).read_text()))
['build_seconds', 'config', 'digest', 'format', 'layout']
>>> read_meta(path)[0] == SimulatorConfig(2, 2)
True
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attnsim.model import checkpoint, digests
from attnsim.simulator import layouts
from attnsim.simulator.config import SimulatorConfig
from attnsim.simulator.layout import Layout
from attnsim.simulator.vector_layout import VectorLayout

__all__ = ["SAVE_FILE", "SAVE_FORMAT", "check_digest", "check_model", "read_meta", "write_meta"]

SAVE_FORMAT = "attnsim-simulator/1"  # the "format" of simulator.json
SAVE_FILE = "simulator.json"  # beside the compiled model's model.json and model.safetensors
KEYS = {"format", "config", "layout", "build_seconds"}
DIGEST_KEY = "digest"  # per table of simulator.json, and of the model.json beside it
MODEL_FILE = "model.json"
_DIGEST_VERSION = b"attnsim-simulator-digest-v1"


def _digests(path: Path, meta: dict) -> dict[str, str]:
    """The digest of each table of ``meta`` and of the directory's ``model.json`` (its bytes:
    it records the digests of the weights)."""
    out = {
        k: digests.digest(_DIGEST_VERSION, [k, json.dumps(v, sort_keys=True)], {})
        for k, v in meta.items()
        if k != DIGEST_KEY
    }
    try:
        model_text = (path / MODEL_FILE).read_bytes().hex()
    except OSError:
        model_text = ""  # no model.json: CompiledModel.load says so
    out[MODEL_FILE] = digests.digest(_DIGEST_VERSION, [MODEL_FILE, model_text], {})
    return out


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
    """Writes ``simulator.json`` into the directory ``path``, after the compiled model
    (its digest covers the ``model.json`` there)."""
    meta = {
        "format": SAVE_FORMAT,
        "config": config.to_json(),
        "layout": layout_json(config.layout),
        "build_seconds": float(build_seconds),
    }
    meta[DIGEST_KEY] = _digests(Path(path), json.loads(json.dumps(meta)))
    (Path(path) / SAVE_FILE).write_text(json.dumps(meta, indent=1))


def read_meta(path: Path) -> tuple[SimulatorConfig, float]:
    """Reads and checks the ``simulator.json`` of the directory ``path``.

    Returns:
        The build config and the build time in seconds (:func:`check_digest` checks the
        digest, once the model has loaded).

    Raises:
        FileNotFoundError: ``path`` is not a directory, or has no ``simulator.json``.
        DamagedCheckpointError: (a ValueError) the file is not what ``save`` wrote (the
            message says what is wrong).
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
        return checkpoint.DamagedCheckpointError(
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
    if set(meta) - {DIGEST_KEY} != KEYS:
        raise damaged(f"has the keys {sorted(meta)}, expected {sorted(KEYS | {DIGEST_KEY})}")
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


def check_digest(path: Path, check: bool = True) -> None:
    """Refuses a ``simulator.json`` whose tables, or the ``model.json`` beside it, are not
    the ones its digest records.

    Args:
        path: the saved simulator's directory (``read_meta`` has checked its file).
        check: False accepts a file without a digest, or whose digest does not match.

    Raises:
        DamagedCheckpointError: with ``check``: no digest, or a table or the model.json
            that differs from the one saved (named, with what to do).
    """
    if not check:
        return
    path = Path(path)
    where = path / SAVE_FILE
    meta = json.loads(where.read_text())
    recorded = meta.get(DIGEST_KEY)
    if recorded is None:
        raise checkpoint.DamagedCheckpointError(
            f"unchecked simulator: {where} records no digest of its tables and its compiled "
            "model (it was saved before simulators carried one, or the digest was removed); "
            "if you trust these files, load them with UniversalSimulator.load(path, "
            "check=False) and save the simulator again to record one"
        )
    found = _digests(path, {k: v for k, v in meta.items() if k != DIGEST_KEY})
    if not isinstance(recorded, dict):
        recorded = {}
    changed = sorted(k for k in set(found) | set(recorded) if found.get(k) != recorded.get(k))
    if changed:
        names = ", ".join(repr(k) for k in changed)
        what = (
            " (the compiled model is not the one saved with it: the directory mixes files "
            "of two saves, or model.json was edited)"
            if MODEL_FILE in changed
            else ""
        )
        raise checkpoint.DamagedCheckpointError(
            f"damaged simulator: in {where}, {names}: not as saved (its digest records other "
            f"contents){what}; save the simulator again; UniversalSimulator.load(path, "
            "check=False) skips this check"
        )


def check_model(path: Path, config: SimulatorConfig, model: Any) -> None:
    """Raises a ValueError unless the loaded compiled ``model`` is the one ``config``
    describes (the sequence it reads, numerical tokens, its dtype)."""
    layout = config.layout
    problems = []
    if model.max_seq_len != layout.length or not model.fixed_length:
        problems.append(
            f"the model reads {model.max_seq_len} positions, the layout {layout.length}"
        )
    problems += layouts.of(config).model_problems(config, model)
    if model.config.dtype != config.dtype_name:
        problems.append(f"the model is {model.config.dtype}, the config {config.dtype_name}")
    if problems:
        raise ValueError(
            f"{path}: the compiled model does not fit {SAVE_FILE} ({'; '.join(problems)}); the "
            "directory mixes files of two saves: save the simulator again"
        )
