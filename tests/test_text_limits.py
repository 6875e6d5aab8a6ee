"""The textual RASP runtime's limits: a step budget and a digit limit, with clear errors.

Oracles: Python's own integers (a result within the limits is exact), and the corpus
(every file runs far inside the default budget).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from attnsim.rasp.text import RASPTextError, Runtime, run_repl
from attnsim.rasp.text.limits import Budget, LimitError, Limits

CORPUS = Path(__file__).parent / "rasp_files"
TEXT_PACKAGE = Path(__file__).parents[1] / "src" / "attnsim" / "rasp" / "text"


@pytest.mark.parametrize(
    "source, pattern",
    [
        ("for i in range(10^8) { x = i; }", r"range with 100000000 items takes more steps"),
        ("x = [i for i in range(10^8)];", r"range with 100000000 items takes more steps"),
        ("x = range(10^30);", r"range with 10{30} items takes more steps"),
        ("x = 9^99999999;", r"9 \^ 99999999 would have about 95424250 digits"),
        ("x = [0] * 10^9;", r"repeating a string or list of 1000000000 items"),
        ('x = "ab"; for i in range(40) { x = x + x; }', r"joining strings or lists of \d+ items"),
        ("x = tokens_int ^ 99999; y = x([9, 9]);", r"9 \^ 99999 would have about 95423 digits"),
        ("def f(n) { return f(n + 1); } x = f(1);", r"nests too deeply"),
        ("x = round(10.0 ^ 300 * 10.0 ^ 300);", r"cannot round"),
    ],
    ids=[
        "loop",
        "comprehension",
        "range-beyond-ssize",
        "power",
        "list-repeat",
        "doubling",
        "sop-power",
        "recursion",
        "round-infinity",
    ],
)
def test_unbounded_work_is_refused_with_its_location(source, pattern):
    with pytest.raises(RASPTextError, match=pattern) as info:
        Runtime().run(source, "t.rasp")
    assert str(info.value).startswith("t.rasp:1:")


def test_results_within_the_limits_are_exact():
    rt = Runtime(limits=Limits(max_value_digits=7000))
    rt.run("x = 2 ^ 20000; y = 0; for i in range(1000) { y = y + i; }")
    assert rt.get("x") == 2**20000  # 6,021 digits: over the default, within this limit
    assert rt.get("y") == sum(range(1000))
    with pytest.raises(RASPTextError, match="more than the limit of 4300"):
        Runtime().run("x = 2 ^ 20000;")


def test_the_budget_is_per_call_and_counts_steps():
    rt = Runtime(limits=Limits(max_steps=200))
    for _ in range(5):  # each run has its own budget
        rt.run("x = [i for i in range(50)];")
    with pytest.raises(RASPTextError, match="used up its budget of 200 steps"):
        rt.run("y = 0; for i in range(50) { y = y + i; }")


def test_every_corpus_file_runs_far_inside_the_default_budget():
    limit = Limits().max_steps
    for path in sorted(CORPUS.glob("*.rasp")):
        rt = Runtime(echo=True, out=lambda line: None)
        rt.run_file(path)
        assert rt._budget.used < limit / 1000, path.name


def test_limits_say_what_is_wrong():
    with pytest.raises(ValueError, match="max_steps must be a positive integer, got 0"):
        Limits(max_steps=0)
    with pytest.raises(TypeError, match="limits must be a Limits, got int"):
        Runtime(limits=5)
    budget = Budget(Limits(max_steps=3))
    budget.charge(3)
    with pytest.raises(LimitError, match="--max-steps"):
        budget.charge(1)


def test_the_language_never_reaches_eval_or_exec():
    for path in TEXT_PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("eval", "exec", "compile", "__import__"), path


def test_ctrl_c_in_the_repl_stops_the_statement_not_the_session(monkeypatch):
    lines = iter(["x = 1;", "y = 2;", "exit"])
    out: list[str] = []
    rt = Runtime(echo=True, out=out.append)
    real = Runtime.run

    def run(self, source, filename="<string>", directory=None):
        if source.startswith("x"):
            raise KeyboardInterrupt
        return real(self, source, filename, directory)

    monkeypatch.setattr(Runtime, "run", run)
    assert run_repl(rt, read=lambda prompt: next(lines), banner=False) == 0
    assert out == ["interrupted", "     value: y =  2"]
