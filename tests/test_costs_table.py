"""The runtime's numbers live in one table (attnsim.model.costs): no execution module
defines a number of its own at module level, and every entry of the table is read; and no
execution module keeps state between calls at module level (a cache, a counter): what a run
keeps lives with the runtime or the model it belongs to."""

import ast
import re
from pathlib import Path

import attnsim.model.costs as costs

MODEL = Path(costs.__file__).parent

# the modules that run models beyond the definition, and the definition itself
EXECUTION = sorted(
    p
    for p in MODEL.glob("*.py")
    if re.match(
        r"(runtime|fused|plans|plan_\w+|sparse\w*|store|block_rows|head_parts|projection|"
        r"stream|hard|transformer|liveness|zero_rows|positions|memory)\.py$",
        p.name,
    )
)
# module-level numbers that are facts, not choices
FACTS = {("stream.py", "_HUGE")}  # a huge page's size


def _is_number(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp):
        return _is_number(node.left) and _is_number(node.right)
    if isinstance(node, ast.UnaryOp):
        return _is_number(node.operand)
    return False


def _bindings(path: Path):
    """``(name, value)`` of each name bound at the top level of ``path``."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        yield from ((t.id, value) for t in targets if isinstance(t, ast.Name))


def module_numbers(path: Path) -> list[str]:
    """Names bound to a number at the top level of ``path``."""
    return [name for name, value in _bindings(path) if _is_number(value)]


def test_the_scan_sees_execution_modules_and_numbers(tmp_path):
    assert {"runtime.py", "fused.py", "plan_core.py", "sparse_ops.py"} <= {
        p.name for p in EXECUTION
    }
    f = tmp_path / "m.py"
    f.write_text("A = 1 << 3\nB: float = -0.5\nC = 'x'\nD = (1, 2)\ndef g():\n    E = 3\n")
    assert module_numbers(f) == ["A", "B"]


def test_execution_modules_read_their_numbers_from_the_table():
    own = [
        f"{p.name}: {name}"
        for p in EXECUTION
        for name in module_numbers(p)
        if (p.name, name) not in FACTS
    ]
    assert not own, f"numbers outside attnsim.model.costs: {own}"


def test_every_entry_of_the_table_is_read():
    table = module_numbers(Path(costs.__file__))
    assert len(table) >= 30
    sources = "\n".join(p.read_text() for p in MODEL.glob("*.py") if p.name != "costs.py")
    unread = [n for n in table if not re.search(rf"\b{n}\b", sources)]
    assert not unread, f"entries nothing reads: {unread}"


_MUTABLE = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)


def module_state(path: Path) -> list[str]:
    """Names bound at the top level of ``path`` to a mutable container (a literal or a
    comprehension, or a call of dict, list, set, defaultdict or OrderedDict)."""
    made = ("dict", "list", "set", "defaultdict", "OrderedDict")
    return [
        name
        for name, value in _bindings(path)
        if name != "__all__"
        and (
            isinstance(value, _MUTABLE)
            or (isinstance(value, ast.Call) and getattr(value.func, "id", None) in made)
        )
    ]


def test_the_state_scan_sees_containers(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(
        "__all__ = ['g']\nA: dict = {}\nB = [1]\nC = (1, 2)\nD = set()\nE = 'x'\n"
        "def g():\n    F = {}\n"
    )
    assert module_state(f) == ["A", "B", "D"]


def test_execution_modules_keep_no_state_at_module_level():
    kept = [f"{p.name}: {name}" for p in EXECUTION for name in module_state(p)]
    assert not kept, f"module-level containers in execution modules: {kept}"
