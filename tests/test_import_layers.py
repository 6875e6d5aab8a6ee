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


def _module_name(path: Path, src: Path = SRC) -> str:
    rel = path.relative_to(src.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _module_imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The attnsim modules a module imports anywhere: at the top, inside functions and
    methods (lazy imports still tie the modules into one circle) and under ``if
    TYPE_CHECKING:``. ``from attnsim.model import plans`` is the module ``attnsim.model.plans``;
    ``from attnsim.model import Transformer`` the package ``attnsim.model``."""
    out = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1 packages
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in known else base)
    return {m for m in out if m in known}


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """attnsim module -> the attnsim modules it imports (see :func:`_module_imports`); a
    package's __init__ importing its own submodules is left out (loading a submodule loads
    its package first, so that edge closes no circle of its own)."""
    paths = {_module_name(p, src): p for p in src.rglob("*.py")}
    known = set(paths)
    graph = {}
    for m, p in paths.items():
        got = _module_imports(p, m, known)
        if p.name == "__init__.py":
            got = {t for t in got if not t.startswith(m + ".")}
        graph[m] = got
    return graph


def import_cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The circles of the graph: its strongly connected components of more than one module,
    and any module that imports itself (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = {frozenset([m]) for m, targets in graph.items() if m in targets}
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, targets = work[-1]
            for w in targets:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        cycles.add(frozenset(comp))
    return cycles


# circles still in the code, each as its set of modules: a new circle fails the test, and
# one that is broken must be taken out of this set (none are left)
KNOWN_CYCLES: set[frozenset[str]] = set()


def test_cycle_finder():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"d"}}
    assert import_cycles(graph) == {frozenset("abc"), frozenset("e")}
    assert import_cycles({"a": {"b"}, "b": set()}) == set()


def test_the_graph_reads_imports_inside_functions(tmp_path):
    pkg = tmp_path / "attnsim"
    (pkg / "model").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "model" / "__init__.py").write_text("from attnsim.model import a\n")
    (pkg / "model" / "a.py").write_text("from attnsim.model import b\n")
    (pkg / "model" / "b.py").write_text(
        "def f():\n    from attnsim.model.a import x\n    return x\n"
        "class C:\n    def g(self):\n        from . import c\n"
    )
    (pkg / "model" / "c.py").write_text("")
    graph = import_graph(pkg)
    assert graph["attnsim.model.b"] == {"attnsim.model.a", "attnsim.model.c"}
    assert graph["attnsim.model"] == set()  # a package's own submodules
    assert import_cycles(graph) == {frozenset({"attnsim.model.a", "attnsim.model.b"})}


def test_no_import_cycles():
    found = import_cycles(import_graph())
    new = found - KNOWN_CYCLES
    gone = KNOWN_CYCLES - found
    assert not new, "import cycles (imports inside functions count):\n" + "\n".join(
        " <-> ".join(sorted(c)) for c in sorted(new, key=sorted)
    )
    assert not gone, f"cycles broken, take them out of KNOWN_CYCLES: {sorted(map(sorted, gone))}"


# the definition (model/transformer.py) and the modules it imports run no executor: the
# runtime imports them, never the other way round
EXECUTION = {
    "attnsim.model.runtime",
    "attnsim.model.fused",
    "attnsim.model.plans",
    "attnsim.model.plan_core",
    "attnsim.model.plan_keys",
    "attnsim.model.plan_tables",
    "attnsim.model.plan_steps",
    "attnsim.model.plan_costs",
    "attnsim.model.sparse",
    "attnsim.model.sparse_ops",
    "attnsim.model.sparse_plans",
}


def _reached(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:  # everything the module loads, directly or not
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    return seen


def test_the_definition_imports_no_executor():
    graph = import_graph()
    loaded = _reached(graph, "attnsim.model.transformer")
    assert not loaded & EXECUTION, sorted(loaded & EXECUTION)
    assert "attnsim.model.transformer" in _reached(graph, "attnsim.model.runtime")
