"""One universal simulator U for a whole torch.nn.TransformerEncoder stack.

U is built once, for stacks of up to three encoder layers of width 8 over up to 5 tokens,
and reads each target's parameters as torch stores them (the vector layout). The same U
then simulates a two-layer and a three-layer stack, each in one forward pass, and the
result is compared with torch.

Run: ``python examples/encoder_stack.py``.
"""

from __future__ import annotations

import torch

import attnsim


def main() -> None:
    torch.manual_seed(0)
    U = attnsim.simulator.build(5, 8, 2, layer="encoder", max_ff=16, n_layers=3)
    print(U.report())
    print("input sequence:", U.layout.length, "positions of", U.layout.width, "channels")
    X = torch.randn(4, 8, dtype=torch.float64)
    for n_layers, activation in ((2, "relu"), (3, "gelu")):
        layer = torch.nn.TransformerEncoderLayer(
            8, 2, 16, dropout=0.0, activation=activation, batch_first=True, dtype=torch.float64
        )
        stack = torch.nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False).eval()
        with torch.no_grad():
            want = stack(X[None])[0]
        got = U.simulate(stack, X)
        err = float((got - want).abs().max() / want.abs().max())
        print(f"{n_layers} layers ({activation}): max relative error vs torch {err:.1e}")
        assert err <= 1e-9


if __name__ == "__main__":
    main()
