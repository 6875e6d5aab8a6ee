"""Options and targets taken only as they are: flags must be bools, modules their own class.

A flag read by its truth value runs ``causal="False"`` causally; a subclass of a torch module
read by its base class is simulated as the base class. Both are refused now: every boolean
flag of the simulator API and the compiler options goes through one check
(``attnsim.values.check_bool``), and a module whose class (or a module it calls) redefines
what the torch class computes, or carries forward hooks, needs ``trust_subclass=True``.
The oracles: the torch module itself (``nn.MultiheadAttention`` with and without a causal
mask, the base class with the same weights) and the exact error wording.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from torch import nn

from attnsim import library
from attnsim.compiler import CompileOptions, compile_program
from attnsim.matrix import apply, programs
from attnsim.simulator import (
    adapters,
    checks,
    exact_modules,
    sampling,
    sampling_decoder,
    stack,
    universal,
    verify,
)
from attnsim.simulator import spec as S
from attnsim.simulator.config import SimulatorConfig
from attnsim.values import check_bool

F64 = torch.float64


@pytest.fixture(scope="module")
def U():
    return universal.build(2, 2, 1)


def _mha(seed: int = 0) -> nn.MultiheadAttention:
    torch.manual_seed(seed)
    return nn.MultiheadAttention(2, 1, dtype=F64).eval()


def _X() -> torch.Tensor:
    return torch.randn(2, 2, dtype=F64, generator=torch.Generator().manual_seed(5))


def _torch_out(module: nn.MultiheadAttention, X: torch.Tensor, causal: bool) -> torch.Tensor:
    mask = torch.triu(torch.ones(2, 2, dtype=torch.bool), 1) if causal else None
    with torch.no_grad():
        return module(X, X, X, attn_mask=mask, need_weights=False)[0]


# -- flags -----------------------------------------------------------------------------------

NOT_BOOLS = ["False", "True", 0, 1, None, 1.0, "yes", [True]]


@pytest.mark.parametrize("bad", NOT_BOOLS[:2] + [0, 1])
def test_simulate_refuses_a_causal_that_is_not_a_bool(U, bad):
    mha, X = _mha(), _X()
    for call in (U.simulate, U.encode, U.interpret):
        with pytest.raises(
            TypeError, match=f"^causal must be True or False, got {type(bad).__name__}"
        ):
            call(mha, X, causal=bad)
    with pytest.raises(TypeError, match="^causal must be True or False"):
        U.simulate_batch([(mha, X)], causal=bad)
    with pytest.raises(TypeError, match="^causal must be True or False"):
        checks.prepare(SimulatorConfig(2, 2, layout_kind="scalar"), mha, X, bad)


def test_simulate_batch_of_no_pairs_is_empty_and_of_a_bare_pair_is_refused(U):
    mha, X = _mha(), _X()
    assert U.simulate_batch([]) == []
    with pytest.raises(TypeError, match=r"list of \(target, X\) pairs.*simulate\(target, X\)"):
        U.simulate_batch((mha, X))  # one pair, not a list of them
    (got,) = U.simulate_batch([(mha, X)])
    assert torch.allclose(got, _torch_out(mha, X, False), atol=1e-9, rtol=0)


def test_simulate_with_real_and_numpy_bools_matches_torch(U):
    mha, X = _mha(), _X()
    for flag in (True, False, np.bool_(True), np.bool_(False)):
        got = U.simulate(mha, X, causal=flag)
        want = _torch_out(mha, X, bool(flag))
        assert torch.allclose(got, want, atol=1e-9, rtol=0), flag
    assert not torch.allclose(_torch_out(mha, X, True), _torch_out(mha, X, False))


def test_error_bound_refuses_a_string_causal():
    V = universal.build(2, 2, 1, layout="scalar")
    with pytest.raises(TypeError, match="^causal must be True or False, got str 'False'$"):
        V.error_bound(_mha(), _X(), causal="False")


FLAG_CALLS = {
    "from_torch causal": (lambda v: adapters.from_torch(_mha(), causal=v), "from_torch causal"),
    "from_torch trust_subclass": (
        lambda v: adapters.from_torch(_mha(), trust_subclass=v),
        "trust_subclass",
    ),
    "from_torch_stack causal": (
        lambda v: stack.from_torch_stack(_encoder(), causal=v),
        "from_torch causal",
    ),
    "from_torch_stack trust_subclass": (
        lambda v: stack.from_torch_stack(_encoder(), trust_subclass=v),
        "trust_subclass",
    ),
    "with_causal": (
        lambda v: stack.EncoderStackSpec(
            (sampling.random_encoder_layer(1, 2, seed=0),)
        ).with_causal(v),
        "causal",
    ),
    "random_attention bias": (lambda v: sampling.random_attention(1, 2, seed=0, bias=v), "bias"),
    "random_attention causal": (
        lambda v: sampling.random_attention(1, 2, seed=0, causal=v),
        "causal",
    ),
    "random_encoder_layer layer_norm": (
        lambda v: sampling.random_encoder_layer(1, 2, seed=0, layer_norm=v),
        "layer_norm",
    ),
    "random_encoder_layer norm_first": (
        lambda v: sampling.random_encoder_layer(1, 2, seed=0, norm_first=v),
        "EncoderLayerSpec.norm_first",
    ),
    "random_decoder_layer gated": (
        lambda v: sampling_decoder.random_decoder_layer(1, 2, 4, seed=0, gated=v),
        "gated",
    ),
    "random_decoder_layer rotary": (
        lambda v: sampling_decoder.random_decoder_layer(1, 2, 4, seed=0, rotary=v),
        "rotary",
    ),
    "AttentionSpec causal": (
        lambda v: S.AttentionSpec(
            *[torch.ones(1, 2, 1, dtype=F64)] * 3, torch.ones(1, 1, 2, dtype=F64), causal=v
        ),  # fmt: skip
        "AttentionSpec.causal",
    ),
    "CompileOptions causal": (lambda v: CompileOptions(causal=v), "causal"),
    "CompiledModel.run check": (lambda v: _length_model().run(["a", "b"], check=v), "check"),
    "run_with_cache check": (
        lambda v: _length_model().run_with_cache(["a", "b"], check=v)[0],
        "check",
    ),
    "matrix run check": (
        lambda v: apply.run(programs.scale(2.0), [1.0, 2.0], backend="compiled", check=v),
        "check",
    ),
    "matrix inverse check": (lambda v: apply.inverse([[2.0]], check=v), "check"),
    "compile_program fixed_length": (
        lambda v: compile_program(
            library.make_length(), vocab="ab", max_seq_len=2, fixed_length=v
        ),  # fmt: skip
        "fixed_length",
    ),
}


@functools.cache
def _length_model():
    return compile_program(library.make_length(), vocab="ab", max_seq_len=2)


def _encoder() -> nn.TransformerEncoder:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(2, 1, 4, dropout=0.0, dtype=F64)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()


@pytest.mark.parametrize("name", list(FLAG_CALLS))
@pytest.mark.parametrize("bad", ["False", 1, None])
def test_every_flag_refuses_what_is_not_a_bool(name, bad):
    call, where = FLAG_CALLS[name]
    with pytest.raises(TypeError, match=f"^{where} must be True or False, got "):
        call(bad)


@pytest.mark.parametrize("name", list(FLAG_CALLS))
def test_every_flag_takes_a_numpy_bool_as_the_bool(name):
    call, _ = FLAG_CALLS[name]
    assert _same(call(np.bool_(False)), call(False))


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    if hasattr(a, "run"):  # a compiled model
        return a.run(["a", "b"]) == b.run(["a", "b"])
    if isinstance(a, stack.EncoderStackSpec):
        return all(_same(x, y) for x, y in zip(a.layers, b.layers))
    if hasattr(a, "__dataclass_fields__"):
        return all(_same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    return type(a) is type(b) and a == b


def test_verify_refuses_a_progress_that_is_not_a_bool(U):
    with pytest.raises(TypeError, match="^progress must be True or False, got str 'no'$"):
        verify.verify(U, targets=1, progress="no")


def test_saved_state_dict_refuses_a_string_norm_first(tmp_path):
    layer = nn.TransformerEncoderLayer(2, 1, 4, dropout=0.0, norm_first=True, dtype=F64)
    torch.save(layer.state_dict(), tmp_path / "enc.pt")
    saved = adapters.read_layer(tmp_path / "enc.pt")
    with pytest.raises(TypeError, match="^norm_first must be True or False, got str 'False'$"):
        saved.module(heads=1, activation="relu", norm_first="False")
    rebuilt = saved.module(heads=1, activation="relu", norm_first=np.bool_(True))
    assert rebuilt.norm_first is True
    X = torch.randn(3, 2, dtype=F64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.allclose(rebuilt(X), layer.eval()(X), atol=1e-12)


def test_check_bool_is_the_compilers_check():
    assert check_bool(np.bool_(True), "x") is True
    with pytest.raises(TypeError, match=r"^causal must be True or False, got str 'yes'$"):
        CompileOptions(causal="yes")
    assert CompileOptions(causal=np.bool_(True)).causal is True


# -- targets taken by their own class ----------------------------------------------------------


class DoubledMHA(nn.MultiheadAttention):
    """Computes twice the base class's output."""

    def forward(self, *args, **kwargs):
        out, weights = super().forward(*args, **kwargs)
        return 2 * out, weights


class NamedMHA(nn.MultiheadAttention):
    """Only a constructor and a new method: computes the base class's function."""

    def __init__(self, *args, tag: str = "t", **kwargs):
        super().__init__(*args, **kwargs)
        self.tag = tag

    def describe(self) -> str:
        return f"{self.tag}: {self.embed_dim}"

    def extra_repr(self) -> str:
        return f"tag={self.tag}"

    def __getstate__(self):
        return super().__getstate__()


class CalledMHA(nn.MultiheadAttention):
    """Changes the call itself (not forward)."""

    def __call__(self, *args, **kwargs):
        out, weights = super().__call__(*args, **kwargs)
        return out + 1.0, weights


def _copy_into(cls, src: nn.MultiheadAttention) -> nn.MultiheadAttention:
    out = cls(2, 1, dtype=F64).eval()
    out.load_state_dict(src.state_dict())
    return out


def test_a_subclass_that_redefines_forward_is_refused(U):
    base = _mha(1)
    doubled, X = _copy_into(DoubledMHA, base), _X()
    assert torch.allclose(_torch_out(doubled, X, False), 2 * _torch_out(base, X, False))
    with pytest.raises(
        TypeError,
        match=r"^the module is a DoubledMHA, a subclass of torch.nn.MultiheadAttention that "
        r"redefines forward; U computes MultiheadAttention's own function .* "
        r"from_torch\(module, trust_subclass=True\)",
    ):
        U.simulate(doubled, X)
    # said to compute the base class's function: simulated as the base class (the oracle)
    spec = adapters.from_torch(doubled, trust_subclass=True)
    assert torch.allclose(U.simulate(spec, X), _torch_out(base, X, False), atol=1e-9, rtol=0)


def test_a_subclass_that_changes_nothing_is_simulated_as_itself(U):
    named, X = _copy_into(NamedMHA, _mha(2)), _X()
    for causal in (False, True):
        got = U.simulate(named, X, causal=causal)
        assert torch.allclose(got, _torch_out(named, X, causal), atol=1e-9, rtol=0)


def test_a_subclass_that_redefines_the_call_is_refused(U):
    called, X = _copy_into(CalledMHA, _mha(6)), _X()
    assert not torch.allclose(_torch_out(called, X, False), _torch_out(_mha(6), X, False))
    with pytest.raises(TypeError, match="a subclass of torch.nn.MultiheadAttention that "
                       "redefines __call__"):  # fmt: skip
        U.simulate(called, X)


def test_a_forward_set_on_the_instance_or_a_hook_is_refused(U):
    X = _X()
    patched = _mha(3)
    patched.forward = lambda *a, **k: (torch.zeros(2, 2, dtype=F64), None)
    with pytest.raises(TypeError, match="redefines forward"):
        U.simulate(patched, X)
    hooked = _mha(4)
    hooked.register_forward_hook(lambda mod, args, out: (out[0] + 1.0, out[1]))
    assert not torch.allclose(_torch_out(hooked, X, False), _torch_out(_copy_into(
        nn.MultiheadAttention, hooked), X, False))  # fmt: skip
    with pytest.raises(TypeError, match=r"a torch.nn.MultiheadAttention with forward hooks"):
        U.simulate(hooked, X)
    pre = _mha(5)
    pre.register_forward_pre_hook(lambda mod, args: None)
    with pytest.raises(TypeError, match="with forward hooks"):
        adapters.from_torch(pre)
    assert adapters.from_torch(pre, trust_subclass=True).n_heads == 1


class ScaledLinear(nn.Linear):
    def forward(self, x):
        return 3 * super().forward(x)


class LeakyReLU(nn.ReLU):
    def forward(self, x):
        return torch.where(x > 0, x, 0.1 * x)


class ShiftedNorm(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x) + 1.0


class NoisyDropout(nn.Dropout):
    def forward(self, x):
        return 2 * x


class EncoderWithSkip(nn.TransformerEncoderLayer):
    def _sa_block(self, x, *args, **kwargs):
        return torch.zeros_like(x)


def _layer(**parts) -> nn.TransformerEncoderLayer:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(4, 1, 8, dropout=0.0, dtype=F64).eval()
    for name, module in parts.items():
        setattr(layer, name, module)
    return layer


ENCODER_CASES = {
    "linear1": (
        lambda: _layer(linear1=ScaledLinear(4, 8, dtype=F64)),
        "its linear1 is a ScaledLinear, a subclass of torch.nn.Linear",
    ),  # fmt: skip
    "activation": (lambda: _layer(activation=LeakyReLU()), "its activation is a LeakyReLU"),
    "norm2": (lambda: _layer(norm2=ShiftedNorm(4, dtype=F64)), "its norm2 is a ShiftedNorm"),
    "dropout1": (lambda: _layer(dropout1=NoisyDropout(0.0)), "its dropout1 is a NoisyDropout"),
    "self_attn": (lambda: _layer(self_attn=DoubledMHA(4, 1, dtype=F64).eval()), "its self_attn is"),
    "the layer": (
        lambda: EncoderWithSkip(4, 1, 8, dropout=0.0, dtype=F64).eval(),
        "the module is a EncoderWithSkip, a subclass of torch.nn.TransformerEncoderLayer that "
        "redefines _sa_block",
    ),
}


@pytest.mark.parametrize("name", list(ENCODER_CASES))
def test_an_encoder_layer_with_a_changed_part_is_refused(name):
    make, message = ENCODER_CASES[name]
    layer = make()
    X = torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(4))
    plain = _layer()
    plain.load_state_dict(layer.state_dict())
    # the torch module computes something else than its base classes (with gradients on, so
    # that torch's fused eval path is off and each part's own forward runs)
    assert not torch.allclose(layer(X).detach(), plain(X).detach())
    with pytest.raises(TypeError, match="^" + message):
        adapters.from_torch(layer)
    assert isinstance(adapters.from_torch(layer, trust_subclass=True), S.EncoderLayerSpec)


def test_a_transformer_encoder_subclass_is_refused():
    class Reversed(nn.TransformerEncoder):
        def forward(self, src, *args, **kwargs):
            return super().forward(src.flip(0), *args, **kwargs)

    plain = _encoder()
    enc = Reversed(plain.layers[0], 2, enable_nested_tensor=False).eval()
    with pytest.raises(TypeError, match="a subclass of torch.nn.TransformerEncoder that redefin"):
        stack.from_torch_stack(enc)
    assert len(stack.from_torch_stack(enc, trust_subclass=True).layers) == 2
    with pytest.raises(TypeError, match="its linear2 is a ScaledLinear"):
        bad = _encoder()
        bad.layers[1].linear2 = ScaledLinear(4, 2, dtype=F64)
        stack.from_torch_stack(bad)


def test_check_exact_leaves_other_kinds_to_the_caller():
    exact_modules.check_exact("not a module", nn.ReLU, "x")  # no isinstance: not its business
    exact_modules.check_exact(nn.ReLU(), nn.ReLU, "x")
