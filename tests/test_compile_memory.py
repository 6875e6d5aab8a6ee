"""Compile-time memory: what is charged, and what is held once.

A long program is refused only for arrays it would really make: dense attention scores,
or a static selector evaluated at full length (``[pos, pos]`` masks). A static S-op that
reads no selector is a ``[pos]`` array, held once (the program's table, the evaluator's
value and the embedding column are the same array), so programs with hundreds of position
tables over hundreds of thousands of positions (the universal simulator's) compile.
"""

from __future__ import annotations

import numpy as np
import pytest

from attnsim import rasp
from attnsim.compiler import compile_program, options, tracing, value_inference
from attnsim.model.memory import ModelTooLargeError
from attnsim.rasp import gathers

C = rasp.Comparison
LONG = 200_000  # [LONG, LONG] bool masks would take 80 GB
HUGE = 10**6  # and 2 TB here: more than any machine this runs on


def _mixed(length: int) -> rasp.SOp:
    """A mean over a static EQ selector of a position table times the tokens."""
    tab = gathers.position_table(np.arange(length) % 7)
    vals = rasp.numerical(tab * rasp.numerical(rasp.tokens))
    sel = rasp.Select(rasp.indices, rasp.indices, C.EQ)
    return rasp.numerical(rasp.Aggregate(sel, vals, default=0))


def test_a_long_program_without_static_selectors_compiles_in_sparse_storage():
    prog = _mixed(LONG)
    m = compile_program(prog, vocab=[0, 1, 2], max_seq_len=LONG, storage="sparse")
    for x in ([1, 2, 0, 2, 1, 1, 2, 2, 2], [2] * 20, [0]):
        assert m.run(x) == rasp.evaluate(prog, x)


def test_dense_storage_still_charges_its_scores():
    with pytest.raises(ModelTooLargeError, match=r"attention over 1000001 positions"):
        compile_program(_mixed(HUGE), vocab=[0, 1], max_seq_len=HUGE, storage="dense")


def test_a_static_selector_is_charged_where_it_is_evaluated():
    width = rasp.SelectorWidth(rasp.Select(rasp.indices, rasp.indices, C.LT))
    graph = tracing.trace(width)
    opts = options.resolve(None, {"fixed_length": True})
    vi = value_inference.infer(graph, ("a",), 6, opts)
    assert vi.static_values(width) == [0, 1, 2, 3, 4, 5]  # small: evaluated
    big = value_inference.ValueInference(("a",), HUGE, causal=False, fixed_length=True)
    with pytest.raises(ModelTooLargeError, match=r"static selector .*\(\[1000000, 1000000\] masks"):
        big.static_values(width)
    # a static S-op that reads no selector is evaluated at any length
    assert big.static_values(rasp.indices + 1)[-1] == HUGE


def test_a_position_table_is_held_once():
    table = np.linspace(-1.0, 1.0, 1000)
    tab = gathers.position_table(table)
    vi = value_inference.ValueInference(None, 1000, causal=False, fixed_length=True)
    got = vi.static_array(tab)
    assert np.array_equal(got, table)
    assert not got.flags.writeable  # shared: nothing may write into it
    again = vi.static_array(tab)
    assert np.shares_memory(got, again)
    # the interpreter reads the same values (and copies where it reads other positions)
    assert rasp.evaluate(tab, ["a"] * 3) == table[:3].tolist()
    shifted = rasp.numerical(rasp.Aggregate(gathers.reader(rasp.indices + 1), tab, default=0))
    assert rasp.evaluate(shifted, ["a"] * 4) == [*table[1:4].tolist(), 0.0]


def test_release_free_is_a_no_op_without_glibc(monkeypatch):
    """Where the C library has no malloc_trim (not glibc), nothing is done and False is
    returned; on this machine (glibc) it runs and resident memory does not grow."""
    import ctypes
    import sys

    from attnsim.model import memory

    def no_libc(*a, **k):
        raise OSError("libc.so.6: cannot open shared object file")

    with monkeypatch.context() as m:
        m.setattr(ctypes, "CDLL", no_libc)
        assert memory.release_free() is False
    if not sys.platform.startswith("linux"):
        return  # the rest reads /proc and needs glibc

    def rss_kib() -> int:
        with open("/proc/self/status") as f:
            return next(int(x.split()[1]) for x in f if x.startswith("VmRSS"))

    blocks = [bytearray(1 << 16) for _ in range(2000)]  # 128 MiB of small heap blocks
    del blocks[::2]
    before = rss_kib()
    assert memory.release_free() is True
    assert rss_kib() <= before
