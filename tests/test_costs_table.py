"""The runtime's numbers live in one table (attnsim.model.costs): no execution module
defines a number of its own at module level, and every entry of the table is read."""

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


def module_numbers(path: Path) -> list[str]:
    """Names bound to a number at the top level of ``path``."""
    out = []
    for node in ast.parse(path.read_text()).body:
        targets = []
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if _is_number(value):
            out += [t.id for t in targets if isinstance(t, ast.Name)]
    return out


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
