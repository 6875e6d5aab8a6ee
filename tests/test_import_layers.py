"""The import ladder of docs/architecture: lower layers never import higher ones."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "attnsim"

# package -> the attnsim packages it may import (besides itself)
ALLOWED = {
    "rasp": set(),
    "ir": set(),
    "model": set(),
    "compiler": {"rasp", "ir", "model"},
    "matrix": {"rasp", "ir", "model", "compiler"},
    "tasks": {"rasp", "ir", "model", "compiler", "matrix"},
    "simulator": {"rasp", "ir", "model", "compiler", "matrix", "tasks"},
    "report": {"rasp", "ir", "model", "compiler", "matrix", "tasks", "simulator", "library"},
    "cli": {
        "rasp",
        "ir",
        "model",
        "compiler",
        "matrix",
        "tasks",
        "simulator",
        "report",
        "library",
        "__init__",
    },
    "library": {"rasp"},
    "__init__": {"rasp"},
    "__main__": {"cli"},
    "values": set(),  # value identity: the one leaf below every layer
}
# leaves below every layer: any module may import them
EVERYONE_MAY_IMPORT = {"values"}
THIRD_PARTY_IN_LEAVES = {
    "rasp": {"numpy", "lark"},
    "ir": {"numpy"},
    "values": {"numpy"},
    "model": {"torch", "numpy", "safetensors", "transformer_lens", "onnx", "onnxruntime"},
}


def _layer(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "attnsim":  # from attnsim import rasp -> attnsim.rasp
                out.update(f"attnsim.{a.name}" for a in node.names)
            else:
                out.add(node.module)
    return out


def test_every_module_respects_the_ladder():
    problems = []
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 20
    for path in files:
        layer = _layer(path)
        assert layer in ALLOWED, f"{path}: unknown layer {layer!r}; add it to the ladder"
        for mod in _imports(path):
            parts = mod.split(".")
            if parts[0] == "attnsim":
                target = parts[1] if len(parts) > 1 else "__init__"
                if target != layer and target not in ALLOWED[layer] | EVERYONE_MAY_IMPORT:
                    problems.append(f"{path.relative_to(SRC)} imports {mod}")
            elif layer in THIRD_PARTY_IN_LEAVES:
                import sys

                if (
                    parts[0] not in sys.stdlib_module_names
                    and parts[0] not in (THIRD_PARTY_IN_LEAVES[layer])
                ):
                    problems.append(f"{path.relative_to(SRC)} ({layer}) imports {mod}")
    assert not problems, "\n".join(problems)


def test_nothing_imports_the_cli():
    for path in SRC.rglob("*.py"):
        if _layer(path) in ("cli", "__main__"):
            continue
        assert not any(m.startswith("attnsim.cli") for m in _imports(path)), path
