"""``attnsim simulate --module FILE`` on the files people save, and what the file records.

The oracle is the saved torch module itself, run in eval mode on the CLI's X.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from attnsim.cli import main
from attnsim.simulator import adapters


def _x(n: int, d: int) -> torch.Tensor:
    return torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def _simulated(argv, capsys) -> torch.Tensor:
    assert main(["simulate", "--max-n", "3", *argv, "--json"]) == 0
    return torch.tensor(json.loads(capsys.readouterr().out)["simulated"], dtype=torch.float64)


def test_what_a_file_records(tmp_path):
    enc = torch.nn.TransformerEncoderLayer(6, 3, 7, activation="gelu", dtype=torch.float64)
    torch.save(enc.state_dict(), tmp_path / "sd.pt")
    torch.save(enc, tmp_path / "module.pt")
    sd = adapters.read_layer(tmp_path / "sd.pt")
    assert (sd.kind, sd.d_model, sd.d_ff, sd.bias, sd.is_state_dict) == (
        "encoder",
        6,
        7,
        True,
        True,
    )
    assert (sd.heads, sd.activation, sd.norm_first, sd.layer_norm_eps) == (None,) * 4
    whole = adapters.read_layer(tmp_path / "module.pt")
    assert (whole.heads, whole.activation, whole.norm_first, whole.layer_norm_eps) == (
        3,
        "gelu",
        False,
        1e-5,
    )
    with pytest.raises(ValueError, match="does not record the number of heads"):
        sd.module()
    with pytest.raises(ValueError, match="heads=2 disagrees"):
        whole.module(heads=2)


def test_encoder_without_biases_and_with_tanh_gelu(tmp_path, capsys):
    torch.manual_seed(3)
    enc = torch.nn.TransformerEncoderLayer(
        4, 2, 5, dropout=0.0, bias=False, activation=torch.nn.GELU("tanh"), dtype=torch.float64
    ).eval()
    torch.save(enc.state_dict(), tmp_path / "sd.pt")
    torch.save(enc, tmp_path / "module.pt")
    want = enc(_x(3, 4)).detach()
    argv = ["--module", str(tmp_path / "sd.pt"), "--heads", "2", "--layer-norm-eps", "1e-5"]
    argv += ["--no-add-zero-attn", "--activation", "gelu_tanh", "--no-norm-first"]
    got = _simulated(argv, capsys)
    assert torch.allclose(got, want, rtol=1e-9, atol=1e-12)
    got = _simulated(["--module", str(tmp_path / "module.pt")], capsys)
    assert torch.allclose(got, want, rtol=1e-9, atol=1e-12)


def test_a_module_saved_in_training_mode_is_simulated_in_eval_mode(tmp_path, capsys):
    torch.manual_seed(4)
    mha = torch.nn.MultiheadAttention(4, 2, dropout=0.5, dtype=torch.float64)  # training
    torch.save(mha, tmp_path / "m.pt")
    X = _x(3, 4)
    want = mha.eval()(X, X, X)[0].detach()
    assert torch.allclose(_simulated(["--module", str(tmp_path / "m.pt")], capsys), want)


@pytest.mark.parametrize(
    "make, pattern",
    [
        (
            lambda: torch.nn.MultiheadAttention(4, 2, kdim=3).state_dict(),
            r"separate q/k/v projections \(kdim or vdim different from embed_dim\)",
        ),
        (
            lambda: torch.nn.MultiheadAttention(4, 2, add_bias_kv=True).state_dict(),
            r"unexpected keys bias_k, bias_v .*\(add_bias_kv=True is not supported\)",
        ),
        (
            lambda: torch.nn.TransformerEncoder(
                torch.nn.TransformerEncoderLayer(4, 2, 5), 2, enable_nested_tensor=False
            ).state_dict(),
            r"seems to hold a larger model \(layers layers\.0, layers\.1\): save one layer",
        ),
        (
            lambda: {"in_proj_weight": torch.zeros(5, 4), "out_proj.weight": torch.zeros(4, 4)},
            r"in_proj_weight has shape \(5, 4\); expected \[3 d, d\]",
        ),
    ],
    ids=["kdim", "add-bias-kv", "whole-encoder-stack", "bad-shape"],
)
def test_unsupported_files_are_refused(make, pattern, tmp_path, capsys):
    torch.save(make(), tmp_path / "f.pt")
    assert main(["simulate", "--module", str(tmp_path / "f.pt"), "--heads", "2"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1
    assert re.search(pattern, err), err
