"""Differential fuzzing: compiled model == interpreter on random programs and inputs."""

from __future__ import annotations

import math
import random

import pytest

from attnsim import rasp
from attnsim.compiler import compile_program
from tests.fuzz_programs import random_inputs, random_program


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return False
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def run_fuzz(n_programs: int, seed: int, attention: str = "hard") -> tuple[int, int, list]:
    """Compiles random programs; returns (compiled, disagreements, examples)."""
    rng = random.Random(seed)
    compiled = disagreements = 0
    examples = []
    tries = 0
    while compiled < n_programs and tries < 20 * n_programs:
        tries += 1
        prog, vocab, L = random_program(rng)
        inputs = random_inputs(rng, vocab, L)
        try:
            expected = rasp.evaluate(prog, inputs)
        except (rasp.RASPEvaluationError, ValueError, ZeroDivisionError, OverflowError):
            continue
        try:
            model = compile_program(prog, vocab=vocab, max_seq_len=L, attention=attention)
        except NotImplementedError:
            continue
        compiled += 1
        try:
            got = model.run(inputs)
        except ValueError as exc:  # a run-time check fired: the model refused, not wrong
            if "run-time check" in str(exc):
                continue
            raise
        if not all(_same(a, b) for ra, rb in zip(got, expected) for a, b in zip(ra, rb)):
            disagreements += 1
            if len(examples) < 5:
                examples.append((prog.label, inputs[0], got[0], expected[0]))
    return compiled, disagreements, examples


@pytest.mark.parametrize("attention", ["hard", "softmax"])
def test_random_programs_agree_with_interpreter(attention):
    compiled, bad, examples = run_fuzz(
        150, seed=1 if attention == "hard" else 2, attention=attention
    )
    assert compiled == 150
    assert bad == 0, examples


# the 5,000-program sweep per mode is `benchmarks/compiler_fuzz.py --full` (make bench-full)
