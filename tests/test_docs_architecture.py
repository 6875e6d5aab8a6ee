"""docs/architecture.md cannot go stale silently: its picture draws, and what it names exists.

The page writes paths in backticks (``compiler/tracing.py``, relative to ``src/attnsim``, or
``tests/...`` from the repository root), code names as ``package.module.name`` (such as
``compiler.tracing.trace``) and members as ``Class.member`` (``CompiledModel.run``). Each is
looked up in the source with ``ast``, without importing anything.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from tests.figures import run_script

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "attnsim"
PAGE = ROOT / "docs" / "architecture.md"
SCRIPT = ROOT / "docs" / "img" / "architecture.py"
FROM_ROOT = ("tests/", "benchmarks/", "docs/", "examples/", "src/")
PACKAGES = ("rasp", "ir", "compiler", "model", "matrix", "tasks", "simulator", "report", "cli")
QUALIFIED = re.compile(r"(" + "|".join(PACKAGES) + r")(\.\w+)+")


def _code_spans() -> list[str]:
    return re.findall(r"`([^`\n]+)`", PAGE.read_text())


def _paths() -> list[str]:
    return sorted({s for s in _code_spans() if re.fullmatch(r"[\w./-]+(\.py|/)", s)})


def _qualified() -> list[str]:
    names = set()
    for s in _code_spans():
        head = s.split("(")[0]
        if QUALIFIED.fullmatch(head) and not head.endswith(".py"):
            names.add(head)
    return sorted(names)


def _members() -> list[str]:
    return sorted({s for s in _code_spans() if re.fullmatch(r"[A-Z]\w*\.[a-z_]\w*", s)})


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _defined(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Names a module or class body defines: defs, classes, assignments, imports."""
    out: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out[n.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                out[(a.asname or a.name).split(".")[0]] = node
    return out


def _members_of(cls: ast.ClassDef) -> set[str]:
    """A class's methods, class attributes and fields, and the ``self.x`` it assigns."""
    names = set(_defined(cls.body))
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
    return names


def _module_file(parts: list[str]) -> Path | None:
    base = SRC.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _resolve(name: str) -> str | None:
    """None if ``name`` (``package.module.name[.member]``) exists, else what is missing."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        path = _module_file(parts[:i])
        if path is not None:
            break
    else:
        return f"no module for {name}"
    rest = parts[i:]
    if not rest:
        return None
    defined = _defined(_tree(path).body)
    if rest[0] not in defined:
        return f"{path.relative_to(SRC)} defines no {rest[0]!r}"
    if len(rest) == 1:
        return None
    cls = defined[rest[0]]
    if len(rest) > 2 or not isinstance(cls, ast.ClassDef):
        return f"{name}: {rest[0]} is not a class with members"
    if rest[1] not in _members_of(cls):
        return f"{path.relative_to(SRC)}: class {rest[0]} has no {rest[1]!r}"
    return None


@cache
def _classes() -> dict[str, list[ast.ClassDef]]:
    out: dict[str, list[ast.ClassDef]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, []).append(node)
    return out


def test_the_drawing_script_writes_a_png(tmp_path):
    _, size = run_script(SCRIPT, tmp_path / "architecture.png")
    assert size == (1600, 700)


def test_the_page_shows_the_committed_picture():
    assert "](img/architecture.png)" in PAGE.read_text()
    assert (ROOT / "docs" / "img" / "architecture.png").is_file()


def test_the_page_names_paths():
    assert len(_paths()) > 20, "the page should name the modules it describes"


@pytest.mark.parametrize("path", _paths())
def test_every_path_exists(path):
    base = ROOT if path.startswith(FROM_ROOT) else SRC
    assert (base / path).exists(), f"docs/architecture.md names {path}, not under {base}"


@pytest.mark.parametrize("name", _qualified())
def test_every_qualified_name_exists(name):
    problem = _resolve(name)
    assert problem is None, f"docs/architecture.md names {name}: {problem}"


@pytest.mark.parametrize("name", _members())
def test_every_class_member_exists(name):
    cls, member = name.split(".")
    found = _classes().get(cls)
    assert found, f"docs/architecture.md names {name}: no class {cls} under src/attnsim"
    assert any(member in _members_of(c) for c in found), (
        f"docs/architecture.md names {name}: class {cls} has no {member!r}"
    )
