"""Inputs of functions singular at 0 (1/x, 1/sqrt(x), log x) whose terms cancel to near 0.

Such a function's output carries its input's relative error, so an input summed from terms
of size 1 that cancel to 1e-12 is measured against its own size, not against 1: the
compiled sum of ``(t - mean) + 1e-12 t`` rounds otherwise than the interpreter's, and its
reciprocal was 9e-5 away from the interpreter's with no check firing. The oracle is the
interpreter (``rasp.evaluate``).
"""

from __future__ import annotations

import json
import math

import pytest

from attnsim import rasp
from attnsim.compiler import compile_program
from attnsim.model.checkpoint import DamagedCheckpointError
from attnsim.model.checks import RunTimeCheckError
from attnsim.model.compiled import CompiledModel

C = rasp.Comparison


def _program():
    t = rasp.numerical(rasp.tokens)
    mean = rasp.numerical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, C.TRUE), t))
    return rasp.reciprocal((t - mean) + t * 1e-12)


def test_an_input_that_cancels_to_near_zero_is_refused_and_others_are_exact():
    program = _program()
    m = compile_program(program, vocab=[1.0, 2.0, 3.0], max_seq_len=3)
    guards = [g for g in m.guards if g.relative]
    assert len(guards) == 1 and guards[0].cancellation is not None
    # t = 2 is the mean of [1, 2, 3]: the input there is 2e-12, from terms of size 4
    with pytest.raises(RunTimeCheckError, match="cancel"):
        m.run([1.0, 2.0, 3.0])
    for xs in ([3.0, 3.0, 1.0], [1.0, 3.0, 3.0], [2.0, 1.0]):
        want, got = rasp.evaluate(program, xs), m.run(xs)
        assert all(math.isclose(g, w, rel_tol=1e-12) for g, w in zip(got, want)), (xs, got)


def test_two_terms_with_exact_products_need_no_check():
    t = rasp.numerical(rasp.tokens)
    m = compile_program(rasp.reciprocal(t - 1), vocab=[1.0 + 2**-40, 3.0], max_seq_len=2)
    assert not any(g.relative for g in m.guards)
    assert m.run([1.0 + 2**-40, 3.0]) == rasp.evaluate(rasp.reciprocal(t - 1), [1.0 + 2**-40, 3.0])


def test_the_check_is_kept_by_a_checkpoint_and_a_damaged_one_is_refused(tmp_path):
    m = compile_program(_program(), vocab=[1.0, 2.0, 3.0], max_seq_len=3)
    back = CompiledModel.load(m.save(tmp_path / "m"))
    assert [g.relative for g in back.guards] == [g.relative for g in m.guards]
    with pytest.raises(RunTimeCheckError, match="cancel"):
        back.run([1.0, 2.0, 3.0])
    meta_file = tmp_path / "m" / "model.json"
    meta = json.loads(meta_file.read_text())
    for bad in ("yes", None):
        for g in meta["guards"]:
            if g.get("relative"):
                g["relative"] = bad
                if bad is None:
                    g["relative"] = True
                    del g["cancellation"]
        meta_file.write_text(json.dumps(meta))
        with pytest.raises(DamagedCheckpointError, match="relative|cancellation"):
            CompiledModel.load(tmp_path / "m", check=False)


def test_a_relative_check_without_a_limit_is_refused_when_made():
    from attnsim.model.checks import GuardSpec

    with pytest.raises(ValueError, match="relative but has no cancellation limit"):
        GuardSpec("x", (("x:0", 1.0),), 0, relative=True)
