"""The hard-attention rule (``score >= max - tolerance``) lives in attnsim.model.hard alone:
the function against a direct numpy oracle, and a scan of the sources for the rule written
out anywhere else."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

from attnsim.ir import blocks as B
from attnsim.model.config import ModelConfig
from attnsim.model.hard import hard_selection, hard_threshold

SRC = Path(__file__).resolve().parents[1] / "src" / "attnsim"
HOME = "model/hard.py"
# the numpy twin: the ir layer sits below the model and imports no torch (see the ladder in
# tests/test_import_layers.py), so it keeps its own line, checked against the torch one below
NUMPY_TWIN = {"ir/blocks.py": 1}
INF = float("-inf")


def oracle(scores: np.ndarray, tolerance: float, axis: int = -1) -> np.ndarray:
    """Key by key: selected when no key of its row beats it by more than the tolerance."""
    s = np.moveaxis(np.asarray(scores, dtype=np.float64), axis, -1)
    out = np.zeros(s.shape, dtype=bool)
    for idx in np.ndindex(*s.shape[:-1]):
        row = s[idx]
        best = max(row.tolist())
        out[idx] = [float(x) >= best - tolerance for x in row.tolist()]
    return np.moveaxis(out, -1, axis)


CASES = {
    "ties": [[2.0, 2.0, 1.0], [0.5, 0.5, 0.5]],
    "within": [[1.0, 1.1, 0.0], [1.0, 0.75, 0.7499]],
    "masked": [[INF, 3.0, 2.8], [1.0, INF, INF]],
    "all masked": [[INF, INF, INF], [0.0, INF, 0.0]],
    "all equal": [[7.0, 7.0, 7.0, 7.0], [-3.0, -3.0, -3.0, -3.0]],
    "negative": [[-10.0, -10.2, -10.3], [-1e6, -1e6 - 0.25, -1e6 - 0.5]],
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_selection_matches_the_oracle(name, dtype):
    s = torch.tensor(CASES[name], dtype=dtype)
    tol = 0.25
    want = oracle(s.numpy(), tol)  # (every max - tol here is exact in float32 too)
    np.testing.assert_array_equal(hard_selection(s, tol).numpy(), want)
    # the same selection from given maxima, and written in place as 1.0 / 0.0
    best = s.amax(dim=-1, keepdim=True)
    np.testing.assert_array_equal(hard_selection(s, tol, best=best).numpy(), want)
    t = s.clone()
    got = hard_selection(t, tol, inplace=True)
    assert got is t and got.dtype == dtype
    np.testing.assert_array_equal(got.numpy(), want.astype(np.float64))


def test_every_row_selects_its_best_key_and_all_masked_rows_select_all():
    gen = torch.Generator().manual_seed(0)
    s = torch.randn(50, 9, generator=gen, dtype=torch.float64).round(decimals=1)
    s[s < -1.0] = INF
    s[3] = INF
    got = hard_selection(s, 0.25)
    np.testing.assert_array_equal(got.numpy(), oracle(s.numpy(), 0.25))
    assert bool(got.any(dim=-1).all())  # a mean over at least one key: never 0 / 0
    assert bool(got[3].all())


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_selection_along_any_dimension(dim):
    gen = torch.Generator().manual_seed(dim + 5)
    s = torch.randint(0, 4, (3, 4, 5), generator=gen).double() * 0.2
    got = hard_selection(s, 0.25, dim=dim)
    np.testing.assert_array_equal(got.numpy(), oracle(s.numpy(), 0.25, axis=dim))
    t = s.clone()
    np.testing.assert_array_equal(
        hard_selection(t, 0.25, dim=dim, inplace=True).numpy(), got.numpy().astype(float)
    )


def test_tolerance_zero_selects_exact_ties_only():
    s = torch.tensor([[1.0, 1.0, 1.0 - 1e-12]], dtype=torch.float64)
    assert hard_selection(s, 0.0).tolist() == [[True, True, False]]


def test_threshold():
    best = torch.tensor([1.0, INF, -2.0], dtype=torch.float64)
    assert hard_threshold(best, 0.25).tolist() == [0.75, INF, -2.25]
    b = best.clone()
    assert hard_threshold(b, 0.25, inplace=True) is b and b.tolist() == [0.75, INF, -2.25]


@pytest.mark.parametrize("tol", [-0.25, float("nan"), float("inf"), "0.25", None, True])
def test_bad_tolerance_is_refused(tol):
    with pytest.raises(ValueError, match="tolerance must be a finite number >= 0"):
        hard_selection(torch.zeros(2, 2), tol)


def test_integer_scores_are_refused():
    with pytest.raises(TypeError, match="floating point"):
        hard_selection(torch.zeros(2, 2, dtype=torch.long), 0.25)


def test_the_numpy_twin_agrees():
    """ir.blocks' hard head (numpy) selects as hard_selection does, at the model's tolerance."""
    assert B.HARD_TOLERANCE == ModelConfig.hard_tolerance
    head = B.Head("h", (("q", "k", 1.0),), (("v", "out", 1.0),))
    gen = np.random.default_rng(3)
    for _ in range(20):
        n = 6
        s = {
            "q": gen.integers(0, 3, n).astype(float),
            "k": gen.integers(-2, 3, n) * 0.125,
            "v": gen.normal(size=n),
        }
        for causal in (False, True):
            scores = head.scores(s, causal)
            chosen = hard_selection(torch.from_numpy(scores), B.HARD_TOLERANCE).numpy()
            pattern = chosen / chosen.sum(axis=1, keepdims=True)
            np.testing.assert_array_equal(head.apply(s, causal)["out"], pattern @ s["v"])


# --------------------------------------------------------------------------------------
# the scan: the rule written out anywhere but its home
# --------------------------------------------------------------------------------------


def _mentions(node: ast.AST, word: str) -> bool:
    return word in ast.unparse(node).lower()


def _is_max_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return name in ("amax", "max", "maximum")


def rule_sites(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, text)`` of each place the rule (or its threshold) is written out: a
    subtraction of a tolerance, an in-place subtraction or comparison method call on one,
    a comparison against ``max(...) - something``, or a ``.ge``/``.ge_`` call."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
            if _mentions(node.right, "tolerance"):
                out.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            args = [*node.args, *(k.value for k in node.keywords)]
            if attr in ("sub", "sub_", "subtract") and any(_mentions(a, "tol") for a in args):
                out.append((node.lineno, ast.unparse(node)))
            elif attr in ("ge", "ge_", "greater_equal"):
                out.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if (
                    isinstance(side, ast.BinOp)
                    and isinstance(side.op, ast.Sub)
                    and _is_max_call(side.left)
                ):
                    out.append((node.lineno, ast.unparse(node)))
    by_line: dict[int, str] = {}
    for line, text in out:  # one site per line (the comparison and its threshold)
        if len(text) > len(by_line.get(line, "")):
            by_line[line] = text
    return sorted(by_line.items())


def scan(src: Path) -> dict[str, list[tuple[int, str]]]:
    found = {}
    for path in sorted(src.rglob("*.py")):
        sites = rule_sites(ast.parse(path.read_text()))
        if sites:
            found[str(path.relative_to(src))] = sites
    return found


def test_the_scan_finds_the_rule_written_out():
    """The scan sees each way the rule was written before it moved to one function."""
    written = [
        "chosen = scores >= scores.amax(dim=-1, keepdim=True) - cfg.hard_tolerance",
        "threshold = scores.amax(dim=2, keepdim=True).sub_(cfg.hard_tolerance)",
        "w = scores.ge_(threshold)",
        "cut = best - tolerance",
        "ok = second < top - self.tolerance",
        "c = s >= s.max(axis=1, keepdims=True) - tol",
        "c = torch.ge(s, t)",
    ]
    for line in written:
        assert rule_sites(ast.parse(line)), line
    for line in ("gap > cfg.hard_tolerance", "x = 1 - tol", "y = s.amax(dim=1) + 1.0"):
        assert not rule_sites(ast.parse(line)), line


def test_the_rule_lives_in_one_function():
    found = scan(SRC)
    assert HOME in found, "the scan no longer sees the rule at its home"
    home = {text for _, text in found.pop(HOME)}
    assert home <= {
        "best.sub_(tolerance)",
        "best - tolerance",
        "scores.ge_(threshold)",
    }, home
    for path, count in NUMPY_TWIN.items():
        assert len(found.pop(path, [])) == count, path
    assert not found, "the hard-attention rule written out outside attnsim.model.hard:\n" + (
        "\n".join(f"{p}:{line}: {text}" for p, sites in found.items() for line, text in sites)
    )


def test_in_place_selection_leaves_scores_autograd_keeps():
    """Asked to select in place, the rule keeps scores that autograd records: the same 0/1
    values as a new tensor, and the gradient through them zero."""
    scores = torch.tensor([[1.0, 1.1, 0.0], [2.0, INF, 2.0]], dtype=torch.float64)
    want = hard_selection(scores.clone(), 0.25, inplace=True)
    leaf = scores.clone().requires_grad_(True)
    got = hard_selection(leaf * 1.0, 0.25, inplace=True)
    assert torch.equal(got, want) and got.dtype == torch.float64
    (got * torch.where(leaf.isinf(), 0.0, leaf)).sum().backward()
    assert torch.equal(leaf.grad, want)  # the selection's own gradient is zero
    with torch.no_grad():  # nothing recorded: in place
        s = leaf * 1.0
        assert hard_selection(s, 0.25, inplace=True) is s


@pytest.mark.parametrize("executor", ["dense", "plan", "fused", "auto", "jit"])
def test_gradients_reach_numerical_tokens_through_hard_heads(executor):
    """The definition and every executor give the gradient of a hard head's output with
    respect to numerical token values: against central differences (a prefix mean is
    linear in the values while the selection stays, float64)."""
    from attnsim import rasp
    from attnsim.compiler import compile_program
    from attnsim.model.runtime import Runtime

    prefix = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ)
    program = rasp.numerical(rasp.Aggregate(prefix, rasp.numerical(rasp.tokens), default=0))
    m = compile_program(program, vocab=[0, 1, 2], max_seq_len=5, causal=True)
    ids, vals = m.encode([[1, 2, 0, 1, 2], [0, 2, 1, 1, 0]])
    rt = Runtime(m.model, executor)
    weights = torch.linspace(-1.0, 2.0, m.model.cfg.d_model, dtype=torch.float64)

    def loss(v):
        return (rt(ids, v) * weights).sum()

    x = vals.clone().requires_grad_(True)
    loss(x).backward()
    eps = 1e-3
    numeric = torch.zeros_like(vals)
    with torch.no_grad():
        for i in range(vals.shape[0]):
            for j in range(vals.shape[1]):
                up, down = vals.clone(), vals.clone()
                up[i, j] += eps
                down[i, j] -= eps
                numeric[i, j] = (loss(up) - loss(down)) / (2 * eps)
    assert torch.allclose(x.grad, numeric, atol=1e-7)
    assert bool((numeric[:, 1:] != 0).all())
