"""Benchmark suites for circuit discovery: compiled models with their ground-truth circuits.

A suite is a folder with one subfolder per program (the layout is in
docs/interpretability.md): the program's source, its vocabulary and length, the checkpoint
(attnsim's own, and TransformerLens's when transformer-lens is installed and the model
exports), the component table, the circuit at granularities "component" and "qkv", and a
data set of inputs with their outputs and clean/corrupted pairs. :func:`build_item` writes
one program, :func:`check_item` re-verifies one: the files are what the model gives, every
output equals the interpreter's, and every circuit is faithful and minimal
(:func:`attnsim.model.circuit.check`).

>>> sorted(PROGRAMS)[:3]
['bias_add', 'contains', 'count']
"""

from __future__ import annotations

import inspect
import json
import random
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnsim.compiler import compile_program
from attnsim.matrix import programs as mp
from attnsim.model import circuit as circuits
from attnsim.model import path_patching
from attnsim.model.checks import RunTimeCheckError
from attnsim.model.compiled import CompiledModel
from attnsim.rasp import expr as E
from attnsim.rasp import interpret, library

__all__ = [
    "FORMAT",
    "PROGRAMS",
    "ItemCheck",
    "NoInputsError",
    "SuiteProgram",
    "build_item",
    "check_item",
    "sample_inputs",
]

FORMAT = "attnsim-suite/1"
GRANULARITIES = circuits.GRANULARITIES


@dataclass(frozen=True)
class SuiteProgram:
    """A program a suite can hold: how to build it and what inputs it takes."""

    name: str
    kind: str  # "library" or "matrix"
    factory: Callable[[], E.SOp]
    vocab: tuple | None  # None: real-valued tokens
    max_seq_len: int
    fixed_length: bool
    source: Callable[[], str]  # the program's Python source


def _library_source(name: str) -> str:
    fn = getattr(library, name)
    call = inspect.getsource(library.PROGRAMS[name].factory).strip()
    return f"# registry entry (attnsim.rasp.lib.registry)\n# {call}\n\n" + textwrap.dedent(
        inspect.getsource(fn)
    )


def _matrix_source(builder: str, args: tuple) -> str:
    fn = getattr(mp, builder)
    call = f"attnsim.matrix.programs.{builder}{args if len(args) != 1 else f'({args[0]})'}"
    return f"# {call}\n\n" + textwrap.dedent(inspect.getsource(fn))


def _matrix(name: str, builder: str, args: tuple, length: int) -> SuiteProgram:
    return SuiteProgram(
        name,
        "matrix",
        lambda: getattr(mp, builder)(*args),
        None,
        length,
        True,
        lambda: _matrix_source(builder, args),
    )


PROGRAMS: dict[str, SuiteProgram] = {
    name: SuiteProgram(
        name,
        "library",
        entry.factory,
        tuple(entry.vocab),
        entry.max_seq_len,
        False,
        lambda name=name: _library_source(name),
    )
    for name, entry in library.PROGRAMS.items()
}
PROGRAMS.update(
    {
        p.name: p
        for p in [
            _matrix("transpose", "transpose", (2, 3), 6),
            _matrix("matmul", "matmul", (2, 2, 2), mp.matmul_input_length(2, 2, 2)),
            _matrix("softmax", "softmax", (2, 3), 6),
            _matrix("relu", "relu", (), 4),
            _matrix("maxmin", "maxmin", (), 4),
            _matrix("bias_add", "bias_add", (2, 2), 6),
            _matrix("det", "det", (2,), 4),
            _matrix("inverse", "inverse", (2,), 4),
        ]
    }
)


def _jsonable(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def sample_inputs(p: SuiteProgram, model: CompiledModel, per_length: int = 8, seed: int = 0):
    """Inputs the program is meant for, with their outputs: ``(inputs, outputs)``.

    Random inputs of every length from 1 to ``max_seq_len`` (``per_length`` drawn for each,
    duplicates dropped; a fixed-length program: ``4 * per_length`` of its one length), kept
    where the interpreter gives an output and the model's run-time checks pass (an input
    outside what the program is meant for, such as repeated keys for make_sort_unique, is
    dropped). Matrix programs draw well-conditioned real entries. Deterministic in ``seed``.

    Args:
        p: the program.
        model: its compiled model.
        per_length: inputs drawn per length.
        seed: the random seed.

    Returns:
        ``(inputs, outputs)``, the outputs the interpreter's.

    >>> p = PROGRAMS["make_hist"]
    >>> m = compile_program(p.factory(), vocab=p.vocab, max_seq_len=4)
    >>> xs, ys = sample_inputs(p, m, per_length=2)
    >>> xs[0], ys[0]
    (['d'], [1])
    """
    rng = random.Random(seed)
    program = p.factory()
    lengths = [p.max_seq_len] if p.fixed_length else range(1, model.max_seq_len + 1)
    count = 4 * per_length if p.fixed_length else per_length
    xs, ys, seen = [], [], set()
    for n in lengths:
        for _ in range(count):
            if p.vocab is None:
                x = [round(rng.uniform(-2, 2), 3) for _ in range(n)]
                if p.name in ("det", "inverse"):  # diagonally dominant: well conditioned
                    k = int(round(n**0.5))
                    for i in range(k):
                        x[i * k + i] = 3.0 + abs(x[i * k + i])
            else:
                x = [rng.choice(p.vocab) for _ in range(n)]
            key = repr(x)
            if key in seen:
                continue
            seen.add(key)
            try:
                want = interpret.evaluate(program, x)
                model.run(x)
            except (ValueError, TypeError, ZeroDivisionError, RunTimeCheckError, KeyError):
                continue
            xs.append(x)
            ys.append(_jsonable(want))
    return xs, ys


class NoInputsError(ValueError):
    """No sampled input is one the compiled model is known to run correctly."""


def _refusal(p: SuiteProgram, model: CompiledModel) -> str:
    """Why the model refuses the program's example input (the first line of the error)."""
    x = library.PROGRAMS[p.name].example if p.name in library.PROGRAMS else None
    try:
        model.run(x)
    except (ValueError, TypeError) as exc:
        return str(exc).splitlines()[0]
    return "every sampled input was refused"


def _compile(p: SuiteProgram, attention: str) -> CompiledModel:
    return compile_program(
        p.factory(),
        vocab=p.vocab,
        max_seq_len=p.max_seq_len,
        fixed_length=p.fixed_length,
        attention=attention,
    )


def _write_lens(model: CompiledModel, folder: Path) -> str | None:
    """Saves the TransformerLens export (``lens.pt``: its config and weights); the reason
    when there is none."""
    from attnsim.model import export

    try:
        export.check_exportable(model)
    except ValueError as exc:
        return f"not exportable: {exc}"
    try:
        lens = export.to_transformer_lens(model)
    except (ImportError, RuntimeError, TypeError) as exc:  # none, or a version that differs
        return f"not written: {exc}"
    import torch

    cfg = export.lens_config(model)
    cfg["dtype"] = str(cfg["dtype"]).replace("torch.", "")
    torch.save({"config": cfg, "state_dict": lens.state_dict()}, folder / "lens.pt")
    return None


def build_item(
    name: str,
    folder: str | Path,
    *,
    attention: str = "hard",
    per_length: int = 8,
    rounds: int = 2,
    seed: int = 0,
) -> dict:
    """Writes one program's suite item into ``folder`` and checks it.

    Args:
        name: a key of :data:`PROGRAMS`.
        folder: where to write (created).
        attention: "hard" or "softmax" (TransformerLens runs softmax models only).
        per_length: inputs drawn per length (:func:`sample_inputs`).
        rounds: corrupted inputs per clean input
            (:func:`attnsim.model.path_patching.resample_pairs`).
        seed: the random seed of the inputs.

    Returns:
        The item's summary (``meta.json``, with the check results).

    Raises:
        KeyError: an unknown program name (the message lists the known ones).
    """
    if name not in PROGRAMS:
        raise KeyError(f"unknown program {name!r}; known: {', '.join(sorted(PROGRAMS))}")
    p = PROGRAMS[name]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model = _compile(p, attention)
    xs, ys = sample_inputs(p, model, per_length, seed)
    if not xs:
        raise NoInputsError(
            f"{name}: no input passes both the interpreter and the model's run-time checks "
            f"(e.g. {_refusal(p, model)}); the compiled model cannot be checked"
        )
    index = {repr(x): i for i, x in enumerate(xs)}
    pairs = path_patching.resample_pairs(xs, rounds)
    (folder / "program.py").write_text(p.source())
    model.save(folder / "model")
    lens = _write_lens(model, folder)
    table = model.components()
    (folder / "components.json").write_text(json.dumps(table.to_list(), indent=1))
    (folder / "components.txt").write_text(str(table) + "\n")
    graphs = {g: model.circuit(g) for g in GRANULARITIES}
    (folder / "circuit.json").write_text(
        json.dumps({g: c.to_dict() for g, c in graphs.items()}, indent=1)
    )
    (folder / "circuit_lens.json").write_text(
        json.dumps({g: c.lens_edges() for g, c in graphs.items()}, indent=1)
    )
    dataset = {
        "inputs": xs,
        "outputs": ys,
        "pairs": [[index[repr(a)], index[repr(b)]] for a, b in pairs],
    }
    (folder / "dataset.json").write_text(json.dumps(dataset))
    meta = {
        "format": FORMAT,
        "name": name,
        "kind": p.kind,
        "vocab": None if p.vocab is None else list(p.vocab),
        "max_seq_len": p.max_seq_len,
        "fixed_length": p.fixed_length,
        "attention": attention,
        "lens": "lens.pt" if lens is None else None,
        "lens_note": lens,
        "inputs": len(xs),
        "pairs": len(pairs),
        "seed": seed,
    }
    meta["checks"] = {g: model.check_circuit(pairs, g).to_dict() for g in GRANULARITIES}
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


@dataclass(frozen=True)
class ItemCheck:
    """What :func:`check_item` found for one program."""

    name: str
    problems: tuple[str, ...]
    inputs: int
    pairs: int
    edges: dict  # granularity -> (circuit edges, necessary, redundant)

    @property
    def ok(self) -> bool:
        return not self.problems


def _dataset(path: Path, data: Any) -> tuple[list, list, list]:
    """``(inputs, outputs, input pairs)`` of a ``dataset.json``, or a ValueError naming it
    (a list cut short, a key missing, a pair of inputs it does not hold)."""
    keys = ("inputs", "outputs", "pairs")
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in keys):
        raise ValueError(f"{path}: expected an object with the lists {', '.join(keys)}")
    xs, ys = data["inputs"], data["outputs"]
    if len(xs) != len(ys):
        raise ValueError(f"{path}: {len(xs)} inputs but {len(ys)} outputs; one each")
    ok = lambda i: isinstance(i, int) and 0 <= i < len(xs)  # noqa: E731
    bad = [
        q for q in data["pairs"] if not (isinstance(q, list) and len(q) == 2 and all(map(ok, q)))
    ]
    if bad:
        raise ValueError(f"{path}: the pair {bad[0]!r} is not two indices of its inputs")
    return xs, ys, [(xs[a], xs[b]) for a, b in data["pairs"]]


def check_item(folder: str | Path) -> ItemCheck:
    """Re-verifies a suite item written by :func:`build_item`.

    The checkpoint loads and its component table and circuits are the ones written; the
    data set's outputs are the interpreter's and the model's; every circuit is faithful and
    each of its edges necessary or reported redundant with a reason, over the pairs written.

    Args:
        folder: the item's folder.

    Returns:
        An :class:`ItemCheck` (``problems`` empty when everything holds).

    Raises:
        FileNotFoundError: a file of the item is missing.
        ValueError: ``meta.json`` is not a suite item's.
    """
    folder = Path(folder)
    meta = json.loads((folder / "meta.json").read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(
            f"{folder / 'meta.json'}: expected a suite item of format {FORMAT!r}, "
            f"got {meta.get('format')!r}"
        )
    problems: list[str] = []
    model = CompiledModel.load(folder / "model")
    if json.loads((folder / "components.json").read_text()) != model.components().to_list():
        problems.append("components.json is not the checkpoint's component table")
    written = json.loads((folder / "circuit.json").read_text())
    data = json.loads((folder / "dataset.json").read_text())
    xs, ys, pairs = _dataset(folder / "dataset.json", data)
    p = PROGRAMS.get(meta["name"])
    if p is None:
        problems.append(f"unknown program {meta['name']!r}: outputs not checked")
    else:
        program = p.factory()
        for x, y in zip(xs, ys):
            want = _jsonable(interpret.evaluate(program, x))
            got = _jsonable(model.run(x))
            if not path_patching.same_output(want, y) or not path_patching.same_output(got, y):
                problems.append(f"input {x}: written {y}, interpreter {want}, model {got}")
                break
    edges = {}
    for g in GRANULARITIES:
        c = model.circuit(g)
        if written.get(g) != c.to_dict():
            problems.append(f"circuit.json ({g}) is not the checkpoint's circuit")
        got = model.check_circuit(pairs, g)
        if not got.faithful:
            problems.append(f"{g}: not faithful, e.g. {got.unfaithful[0]}")
        if not got.matches_model:
            problems.append(f"{g}: the node-by-node pass does not decode as the model")
        if not all(r for *_, r in got.redundant):
            problems.append(f"{g}: a redundant edge without a reason")
        edges[g] = (len(c.pairs()), len(got.necessary), len(got.redundant))
    return ItemCheck(meta["name"], tuple(problems), len(xs), len(pairs), edges)
