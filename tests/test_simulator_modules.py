"""The simulator package's shape: no import cycle between its modules, none of them too long."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "attnsim" / "simulator"
MAX_LINES = 600


def _imports(path: Path) -> set[str]:
    """The simulator modules ``path`` imports (anywhere in it, functions included)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "attnsim.simulator":  # from attnsim.simulator import spec
                names = [f"attnsim.simulator.{a.name}" for a in node.names]
            else:
                names = [node.module]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["attnsim", "simulator"] and len(parts) > 2:
                module = parts[2]
                if (PACKAGE / f"{module}.py").exists():
                    out.add(module)
    return out


def test_no_import_cycles():
    graph = {p.stem: _imports(p) - {p.stem} for p in PACKAGE.glob("*.py")}
    graph.pop("__init__")  # it loads the others lazily, by name
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            assert state.get(nxt) != 1, f"import cycle: {' -> '.join(path + [node, nxt])}"
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


def test_modules_stay_short():
    long = {
        p.name: n
        for p in PACKAGE.glob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}; split them"
