"""Compiling and building U run with the cyclic garbage collector paused, and leave it as
they found it, also when they raise."""

import gc

import pytest

from attnsim import compile_program, library, rasp
from attnsim.compiler.collector import paused


def test_compile_leaves_the_collector_as_it_was():
    seen = []

    @paused
    def probe():
        seen.append(gc.isenabled())
        return compile_program(library.make_length(), vocab="ab", max_seq_len=3)

    assert probe().run([["a", "b"]]) == [[2, 2]]
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        compile_program(library.make_length(), vocab="ab", max_seq_len=3)
        assert not gc.isenabled()  # off before, off after
    finally:
        gc.enable()


def test_a_failed_compile_turns_the_collector_back_on():
    bad = rasp.numerical(rasp.Map(lambda x: float("nan") if x == "a" else 1.0, rasp.tokens))
    with pytest.raises(ValueError):
        compile_program(bad, vocab="ab", max_seq_len=3)
    assert gc.isenabled()
