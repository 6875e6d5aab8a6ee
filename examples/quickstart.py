"""The README example: compile a RASP program, run a matrix program compiled, then simulate
an attention layer with U."""

import numpy as np
import torch

import attnsim
from attnsim import rasp

hist = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ))
model = attnsim.compile_program(hist, vocab=["a", "b", "c"], max_seq_len=40)  # real weights
assert model.run(list("abcab")) == [2, 2, 1, 2, 2]

T = attnsim.matrix.transpose(2, 3)  # a matrix program (RASP), any shape
M = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
print(attnsim.matrix.apply.transpose(M, backend="compiled"))
assert np.array_equal(attnsim.matrix.apply.transpose(M, backend="compiled"), np.transpose(M))

U = attnsim.simulator.build(4, 4, 2)  # one U for n, d <= 4, heads <= 2
mha = torch.nn.MultiheadAttention(4, 2, batch_first=True, dtype=torch.float64).eval()
X = torch.randn(3, 4, dtype=torch.float64)
with torch.no_grad():
    error = (U.simulate(mha, X) - mha(X, X, X)[0]).abs().max()
print(f"max |U - torch| = {error:.2e}")
assert error < 1e-12

layer = torch.nn.TransformerEncoderLayer(
    4, 2, 8, dropout=0.0, batch_first=True, dtype=torch.float64
)
enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
S = attnsim.simulator.build(4, 4, 2, layer="encoder", n_layers=2)  # a whole stack, one pass
with torch.no_grad():
    error = (S.simulate(enc, X) - enc(X[None])[0]).abs().max()
print(f"max |U - torch| for a 2-layer encoder stack = {error:.2e}")
assert error < 1e-12
