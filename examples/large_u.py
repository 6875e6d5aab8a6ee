"""A larger U in sparse storage: one BERT-shaped encoder layer of width 32 over 32 tokens.

Its input sequence is 4,096 positions of 129 channels. The dense weights of such a U would
exceed 256 MiB, so ``build`` keeps only its non-zero weights and runs a residual stream of
the directions alive at each stage (``storage="auto"``; ``storage="sparse"`` asks for it at
any size). The result is compared with ``torch.nn.TransformerEncoderLayer``.

Run: ``python examples/large_u.py``: about 2 s on two idle cores (measured: 2.3 s, with
Python's start-up); longer when those cores are busy with other work. The MiniLM-sized
layer (n = 12, d = 384, 12 heads, feed-forward 1,536) is the same call with those sizes; it
took 18 s to build on two cores, as measured by ``benchmarks/simulator_layouts.py``.
"""

from __future__ import annotations

import torch

import attnsim


def main() -> None:
    torch.manual_seed(0)
    n, d, heads, d_ff = 32, 32, 4, 128
    U = attnsim.simulator.build(n, d, heads, layer="encoder", max_ff=d_ff)
    net = U.model.model
    print(f"input: {U.layout.length:,} positions of {U.layout.width} channels")
    print(f"storage: {U.model.storage}, d_model {U.model.config.d_model:,}")
    layer = torch.nn.TransformerEncoderLayer(
        d, heads, d_ff, dropout=0.0, activation="gelu", batch_first=True, dtype=torch.float64
    ).eval()
    X = torch.randn(n, d, dtype=torch.float64)
    with torch.no_grad():
        want = layer(X[None])[0]
    got = U.simulate(layer, X)
    err = float((got - want).abs().max() / want.abs().max())
    peak = U.model.runtime.peak_columns  # (the last planned call's)
    print(f"directions alive at once: at most {peak:,} of {net.cfg.d_model:,}")
    print(f"max relative error vs torch: {err:.1e}")
    assert U.model.storage == "sparse"
    assert err <= 1e-9


if __name__ == "__main__":
    main()
