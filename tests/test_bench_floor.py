"""The floor the simulator benchmark reports (benchmarks/_common.py: ``stream_floor``,
``machine_rates``), checked against the compiled model's component table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import attnsim
from attnsim import library, rasp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _common import machine_rates, stream_floor  # noqa: E402

PROGRAMS = {
    "make_hist": lambda: library.make_hist(),
    "make_sort_unique": lambda: library.make_sort_unique(rasp.tokens, rasp.tokens),
    "make_frac_prevs": lambda: library.make_frac_prevs(rasp.tokens == "a"),
}


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_stream_bytes_are_the_columns_each_sublayer_reads_and_writes(program):
    prog = PROGRAMS[program]()
    m = attnsim.compile_program(prog, vocab="abcd", max_seq_len=6)
    rates = {"bytes_per_second": 1e9, "flops_per_second": 1e9}
    got = stream_floor(m.model, 7, 0.0, rates)
    # the oracle: the directions the component table lists per sublayer
    want, layers = 0, m.config.n_layers
    for layer in range(layers):
        for site in ("attn", "mlp"):
            read, write = set(), set()
            for c in m.components().to_list():
                if c["site"] == site and c["layer"] == layer:
                    for _, dirs in c["reads"]:
                        read |= set(dirs)
                    write |= set(c["writes"])
            want += (len(read) + len(write)) * 7 * 8
    assert got["stream_bytes"] == want
    assert got["stream_bytes_per_layer"] == want / layers
    nonzero = sum(
        int(torch.count_nonzero(w))
        for b in m.model.blocks
        for name, w in b.mlp.named_parameters(recurse=False)
        if name.startswith("W_") and w.dim() >= 2
    )
    assert got["flops"] == 2.0 * nonzero * 7
    assert got["floor_seconds"] == max(got["bytes_seconds"], got["flops_seconds"])
    assert got["bytes_seconds"] == want / 1e9


def test_machine_rates_are_positive_and_finite():
    r = machine_rates(seconds=0.01)
    assert set(r) == {"bytes_per_second", "flops_per_second"}
    assert all(0 < v < float("inf") for v in r.values())
