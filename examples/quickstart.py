"""The README example: compile a RASP program, then simulate an attention layer with U."""

import torch

from attnsim import rasp
from attnsim.compiler import compile_program
from attnsim.simulator import universal

hist = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ))
model = compile_program(hist, vocab=["a", "b", "c"], max_seq_len=40)  # real weights
assert model.run(list("abcab")) == [2, 2, 1, 2, 2]

U = universal.build(4, 4, 2)  # one U for n, d <= 4, heads <= 2
mha = torch.nn.MultiheadAttention(4, 2, batch_first=True, dtype=torch.float64).eval()
X = torch.randn(3, 4, dtype=torch.float64)
with torch.no_grad():
    error = (U.simulate(mha, X) - mha(X, X, X)[0]).abs().max()
print(f"max |U - torch| = {error:.2e}")
assert error < 1e-12
