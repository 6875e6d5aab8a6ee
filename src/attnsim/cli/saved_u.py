"""``--u DIR`` and ``--save-u DIR``: U built once, saved, and loaded by later commands.

A loaded U is the one that runs: every build flag given beside ``--u`` must agree with the
configuration U was built for (a flag that disagrees is refused, naming U's value), and the
flags left out are filled from it, so that a random target or a ``--module`` check reads
U's sizes. Loading checks every table and weight against the digests saved with U
(``UniversalSimulator.load``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from attnsim.cli import LibraryError, UserError, _output

__all__ = [
    "larger",
    "check_flags",
    "load",
    "loaded",
    "fill",
    "fits",
    "check_save_dir",
    "save",
    "origin",
    "describe",
]

# the build flags a saved U fixes: (argparse dest, flag, U's value from its config)
_FLAGS = (
    ("max_n", "--max-n", lambda c: c.max_n),
    ("max_d", "--max-d", lambda c: c.max_d),
    ("max_heads", "--max-heads", lambda c: c.max_heads),
    ("max_ff", "--max-ff", lambda c: c.max_ff if c.is_encoder else None),
    ("layer", "--layer", lambda c: c.layer.value),
    ("attention", "--attention", lambda c: c.attention.value),
    ("maps", "--maps", lambda c: c.maps.value),
    ("layout", "--layout", lambda c: c.layout_kind.value),
    ("n_layers", "--n-layers", lambda c: c.n_layers),
    ("score_bound", "--score-bound", lambda c: c.score_bound),
    ("logit_bound", "--logit-bound", lambda c: c.relu_logit_bound),
    ("map_tolerance", "--map-tolerance", lambda c: c.map_tolerance if _relu(c) else None),
    ("value_bound", "--value-bound", lambda c: c.value_bound if _relu(c, "encoder") else None),
)


def _relu(config, layer: str | None = None) -> bool:
    return config.maps.value == "relu" and layer in (None, config.layer.value)


def check_flags(args: argparse.Namespace) -> None:
    """Refuses ``--u`` with ``--save-u`` (nothing is built to save).

    >>> try:
    ...     check_flags(argparse.Namespace(u="a", save_u="b"))
    ... except UserError as exc:
    ...     print(str(exc)[:39])
    --save-u saves a U this command builds;
    """
    if args.u is not None and args.save_u is not None:
        raise UserError(
            "--save-u saves a U this command builds; with --u nothing is built: leave one out"
        )


def load(args: argparse.Namespace):
    """``(U, seconds)``: the U saved in ``args.u``, checked, and the seconds loading took.

    Raises:
        UserError: the folder is missing or not a folder, its files are missing or damaged,
            or a build flag given disagrees with the U saved there.
    """
    from attnsim.simulator.universal import UniversalSimulator

    path = Path(args.u)
    if not path.exists():
        raise UserError(f"--u {path}: no such folder; save a U there first with --save-u {path}")
    if not path.is_dir():
        raise UserError(f"--u {path}: is a file; give the folder a U was saved into")
    if not (path / "simulator.json").is_file():
        raise UserError(
            f"--u {path}: holds no saved U (no simulator.json); save one there with --save-u"
        )
    start = time.perf_counter()
    try:
        U = UniversalSimulator.load(path)
    except (FileNotFoundError, ValueError, TypeError) as exc:
        raise UserError(f"--u {path}: {exc}") from None
    except MemoryError as exc:
        raise LibraryError(f"--u {path}: {exc}") from None
    seconds = time.perf_counter() - start
    _agree(args, U.config, path)
    return U, seconds


def _agree(args: argparse.Namespace, config, path: Path) -> None:
    """Refuses a build flag given that disagrees with ``config`` (U's)."""
    for dest, flag, of in _FLAGS:
        given, have = getattr(args, dest, None), of(config)
        if given is not None and given != have:
            shown = f"{flag} {have}" if have is not None else f"no {flag}"
            typed = getattr(args, "layer_flag", None) if dest == "layer" else None
            raise UserError(
                f"{typed or f'{flag} {given}'} disagrees with the U in {path}, built with "
                f"{shown}; leave {flag} out (the saved U decides) or build another U (leave "
                "--u out)"
            )
    if args.float32 and config.dtype_name != "float32":
        raise UserError(
            f"--float32 disagrees with the U in {path}, built in {config.dtype_name}; leave "
            "--float32 out or build another U (leave --u out)"
        )


def fits(args: argparse.Namespace, config, path: Path) -> None:
    """Refuses a ``--module`` target that the saved U cannot read: another layer kind, or
    sizes (``args``' max_d, max_heads, max_ff, from the file) beyond U's."""
    if args.layer != config.layer.value and not (
        args.layer == "encoder" and config.layer.value == "decoder"
    ):
        raise UserError(
            f"--module {args.module} holds {_an(args.layer)} {args.layer} layer; the U in "
            f"{path} simulates {config.layer.value} layers: build a U for it (leave --u out)"
        )
    for dest, flag, of in _FLAGS[1:4]:
        need, have = getattr(args, dest), of(config)
        if need is not None and have is not None and need > have:
            raise UserError(
                f"--module {args.module} needs {flag} {need}; the U in {path} was built with "
                f"{flag} {have}: build a U for it (leave --u out, or save one with "
                f"--save-u DIR {flag} {need})"
            )


def _an(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def larger(args: argparse.Namespace, flag: str, rest: str = "") -> str:
    """The advice for a target larger than U: pass ``flag`` (a U built here), or, with
    ``--u``, build a larger U than the saved one.

    >>> larger(argparse.Namespace(u=None), "--max-n 5")
    'pass --max-n 5'
    >>> larger(argparse.Namespace(u="u_dir"), "--max-n 5")
    'the U in u_dir is smaller: build one with --max-n 5 (leave --u out)'
    """
    if args.u is None:
        return f"pass {flag}{rest}"
    return f"the U in {args.u} is smaller: build one with {flag} (leave --u out){rest}"


def fill(args: argparse.Namespace, config) -> None:
    """Sets every build flag to the value the saved U was built with.

    >>> from attnsim.simulator.config import SimulatorConfig
    >>> args = argparse.Namespace()
    >>> fill(args, SimulatorConfig(3, 4, 2, layer="encoder"))
    >>> args.max_n, args.max_ff, args.layer, args.layout, args.float32
    (3, 8, 'encoder', 'vector', False)
    """
    for dest, _, of in _FLAGS:
        setattr(args, dest, of(config))
    args.float32 = config.dtype_name == "float32"


def check_save_dir(args: argparse.Namespace) -> None:
    """Checks before U is built that ``--save-u`` names a folder that can be written
    (new, empty, or holding a saved U, which is replaced).

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> (folder / "notes.txt").write_text("mine")
    4
    >>> try:
    ...     check_save_dir(argparse.Namespace(save_u=str(folder)))
    ... except UserError as exc:
    ...     print(str(exc).split(": ", 1)[1][:40])
    the folder holds other files; give a new
    """
    if args.save_u is None:
        return
    path = Path(args.save_u)
    if path.exists() and not path.is_dir():
        raise UserError(f"--save-u {path}: is a file; give a new or empty folder")
    if path.is_dir() and any(path.iterdir()) and not (path / "simulator.json").exists():
        raise UserError(
            f"--save-u {path}: the folder holds other files; give a new or empty folder (or "
            "one a U was saved into, to replace it)"
        )
    args.replaces_u = (path / "simulator.json").exists()
    parent = path.parent if str(path.parent) else Path(".")
    if not path.exists() and not parent.is_dir():
        raise UserError(
            f"--save-u {path}: the folder {parent} does not exist; create it or choose another"
        )


def save(U, args: argparse.Namespace) -> float | None:
    """Saves U into ``args.save_u`` (when given); the seconds it took."""
    if args.save_u is None:
        return None
    start = time.perf_counter()
    try:
        U.save(args.save_u)
    except OSError as exc:
        raise UserError(f"--save-u {args.save_u}: {exc.strerror or exc}") from None
    return time.perf_counter() - start


def loaded(args: argparse.Namespace, prefix: str):
    """``(U, seconds)`` loaded from ``--u`` (its flags checked and filled), or None."""
    if args.u is None:
        return None
    with _output.Progress(prefix) as bar:
        bar.step(f"loading U from {args.u}")
        got = load(args)
    if not args.module:
        fill(args, got[0].config)
    return got


def origin(args: argparse.Namespace, U, got: tuple | None, saved: float | None) -> dict:
    """Where U came from: built (and saved) here, or loaded from --u (``got``: what
    :func:`loaded` gave); with the seconds."""
    return {
        "loaded_from": None if got is None else str(args.u),
        "load_seconds": None if got is None else got[1],
        "build_seconds": U.report().build_seconds,
        "saved_to": None if saved is None else str(args.save_u),
        "save_seconds": saved,
        "replaced_saved_u": bool(saved is not None and getattr(args, "replaces_u", False)),
    }


def describe(origin: dict) -> str:
    """One line: where U came from, and the seconds its build, load or save took.

    >>> describe({"loaded_from": "u_dir", "load_seconds": 2.6, "build_seconds": 16.6})
    'U loaded from u_dir in 2.6 s (built in 16.6 s when saved)'
    """
    built = origin["build_seconds"]
    built = "" if built is None else f"{built:.1f} s"
    if origin["loaded_from"] is not None:
        when = f" (built in {built} when saved)" if built else ""
        return f"U loaded from {origin['loaded_from']} in {origin['load_seconds']:.1f} s{when}"
    text = f"U built in {built}" if built else "U built"
    if origin["saved_to"] is not None:
        saved = f"{origin['saved_to']} in {origin['save_seconds']:.1f} s"
        if origin.get("replaced_saved_u"):
            saved += ", replacing the U saved there"
        text += f", saved into {saved} (--u reads it)"
    return text
