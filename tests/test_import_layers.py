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
    # tracr's import layout (attnsim.tracr.rasp.rasp, .compiler.compiling, .compiler.lib)
    "tracr": {"rasp", "compiler", "model", "library", "values"},
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
    "model": {
        "torch",
        "numpy",
        "safetensors",
        "transformer_lens",
        "onnx",
        "onnxruntime",
        "networkx",  # optional, imported lazily by Circuit.as_networkx
    },
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


MAX_LINES = 600
LONG_ALLOWED = {"rasp/expr.py"}  # the language file: one place for every expression kind


def test_no_module_is_too_long():
    long = [
        f"{p.relative_to(SRC)} ({n} lines)"
        for p in sorted(SRC.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_LINES
        and str(p.relative_to(SRC)) not in LONG_ALLOWED
    ]
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _top_level_imports(path: Path, known: set[str]) -> set[str]:
    """attnsim modules a module imports when it is loaded (imports inside functions are
    lazy and cannot close a cycle at import time)."""
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in known else node.module)
        elif isinstance(node, ast.If):  # `if TYPE_CHECKING:` blocks do not run
            continue
    return {m for m in out if m in known}


def test_no_import_cycles():
    paths = {_module_name(p): p for p in SRC.rglob("*.py")}
    known = set(paths)
    graph = {m: _top_level_imports(p, known) - {m} for m, p in paths.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for nxt in sorted(graph[m]):
            # a package's __init__ importing its own submodules is not a cycle
            if nxt.startswith(m + ".") and paths[m].name == "__init__.py":
                continue
            assert state.get(nxt) != 1, "import cycle: " + " -> ".join([*stack, m, nxt])
            if nxt not in state:
                visit(nxt, [*stack, m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
