"""Module states the adapters once read past without a word, so that U would have simulated
another function than the module computes: an encoder layer's activation replaced after it
was built (torch's fast path keeps the one it was built with), hooks torch calls on every
module, a LLaMA-shaped layer's hooks, extra parts, other activations and dropout in training
mode, and modules in float16 or bfloat16 (a note, since U computes in float64). The oracle
is the torch module's own output."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnsim.simulator import adapters, verify
from attnsim.simulator.reference import reference

F64 = torch.float64


def _layer(activation, replaced):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(
        4, 2, 8, dropout=0.0, batch_first=True, activation=activation, dtype=F64
    ).eval()
    layer.activation = replaced
    return layer


@pytest.mark.parametrize("built, replaced", [("relu", nn.GELU()), ("gelu", F.relu)])
def test_an_activation_replaced_after_the_layer_was_built_is_refused(built, replaced):
    layer = _layer(built, replaced)
    X = torch.randn(5, 4, dtype=F64, generator=torch.Generator().manual_seed(1)) * 3
    with torch.no_grad():  # the fast path (batched, eval, no gradients) and the slow one
        fast, slow = layer(X[None])[0], layer(X)
    assert not torch.allclose(fast, slow, atol=1e-3)  # the module computes two functions
    with pytest.raises(ValueError, match="was replaced after the layer was built"):
        adapters.from_torch(layer)
    same = _layer(built, nn.ReLU() if built == "relu" else nn.GELU())  # the same kind: read
    with torch.no_grad():
        want = same(X[None])[0]
    assert torch.allclose(reference(adapters.from_torch(same), X), want, atol=1e-12)


def test_hooks_on_every_module_are_refused():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(4, 2, dtype=F64).eval()
    doubled = torch.nn.modules.module.register_module_forward_hook(
        lambda m, i, o: (2 * o[0], o[1]) if isinstance(m, nn.MultiheadAttention) else None
    )
    try:
        with pytest.raises(TypeError, match="with forward hooks"):
            adapters.from_torch(mha)
        assert adapters.from_torch(mha, trust_subclass=True).n_heads == 2
    finally:
        doubled.remove()
    assert adapters.from_torch(mha).n_heads == 2


class _Cfg:
    num_attention_heads = 2
    num_key_value_heads = 2
    hidden_act = "silu"
    rope_parameters = {"rope_theta": 100.0}
    attention_dropout = 0.0


class _Norm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(4, dtype=F64))
        self.variance_epsilon = 1e-6


class _Att(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg
        for n in "qkvo":
            setattr(self, f"{n}_proj", nn.Linear(4, 4, bias=False, dtype=F64))


class _MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(4, 6, bias=False, dtype=F64)
        self.up_proj = nn.Linear(4, 6, bias=False, dtype=F64)
        self.down_proj = nn.Linear(6, 4, bias=False, dtype=F64)
        self.act_fn = nn.SiLU()


class _Layer(nn.Module):
    def __init__(self, cfg=None):
        super().__init__()
        self.self_attn, self.mlp = _Att(cfg or _Cfg()), _MLP()
        self.input_layernorm, self.post_attention_layernorm = _Norm(), _Norm()


def test_a_llama_shaped_layer_is_read_as_it_is_or_refused():
    plain = _Layer().eval()
    assert adapters.from_torch(plain).attention.n_heads == 2
    hooked = _Layer().eval()
    hooked.mlp.register_forward_hook(lambda m, i, o: 2 * o)
    with pytest.raises(TypeError, match="forward hooks on its _MLP"):
        adapters.from_torch(hooked)
    assert adapters.from_torch(hooked, trust_subclass=True).attention.n_heads == 2
    qwen = _Layer().eval()
    qwen.self_attn.q_norm, qwen.self_attn.k_norm = _Norm(), _Norm()
    with pytest.raises(ValueError, match="self_attn.q_norm, self_attn.k_norm, which LLaMA"):
        adapters.from_torch(qwen)
    gelu = _Layer().eval()
    gelu.mlp.act_fn = nn.GELU(approximate="tanh")
    with pytest.raises(ValueError, match="mlp.act_fn is GELU"):
        adapters.from_torch(gelu)

    class Gemma(_Cfg):
        hidden_activation = "gelu_pytorch_tanh"

    with pytest.raises(ValueError, match="uses 'gelu_pytorch_tanh'"):
        adapters.from_torch(_Layer(Gemma()).eval())

    class Dropping(_Cfg):
        attention_dropout = 0.5

    with pytest.raises(ValueError, match="training mode with attention_dropout"):
        adapters.from_torch(_Layer(Dropping()).train())
    assert adapters.from_torch(_Layer(Dropping()).eval()).attention.n_heads == 2

    class Scaled(_Cfg):
        rope_parameters = None
        rope_scaling = {"rope_type": "llama3", "factor": 8.0}

    with pytest.raises(ValueError, match="rotary embeddings are of kind 'llama3'"):
        adapters.from_torch(_Layer(Scaled()).eval())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_low_precision_module_gets_a_note(dtype):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, dtype=dtype).eval()
    X = torch.randn(5, 8, dtype=dtype)
    with torch.no_grad():
        gap = float(
            (reference(adapters.from_torch(layer), X.double()) - layer(X).double()).abs().max()
        )
    assert gap > 1e-5  # the module's own rounding
    (note,) = verify.reference_notes(layer)
    assert str(dtype) in note and "float64" in note
    assert verify.reference_notes(layer.double()) == []
