"""``attnsim simulate --save-u DIR`` / ``--u DIR`` and ``attnsim verify --u DIR``: U built
once, loaded by later commands, with the same outputs to the bit; bad folders and flags that
disagree with the saved U are refused with a message.

The oracles: the same command with U built in the run (its JSON output), and plain torch
(the reference each JSON output carries).
"""

from __future__ import annotations

import json

import pytest
import torch

from attnsim.cli import main

SIZES = ["--max-n", "3", "--max-d", "4", "--max-heads", "2"]


def _json(argv, capsys) -> dict:
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _refused(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A U(3, 4, 2) saved by ``attnsim simulate --save-u``."""
    path = tmp_path_factory.mktemp("u") / "U"
    assert main(["simulate", *SIZES, "--save-u", str(path), "--json"]) == 0
    return path


def test_a_saved_u_gives_the_built_us_outputs(saved, capsys):
    built = _json(["simulate", *SIZES, "--seed", "3"], capsys)
    got = _json(["simulate", "--u", str(saved), "--seed", "3"], capsys)
    assert got["simulated"] == built["simulated"]  # to the bit
    assert got["reference"] == built["reference"]
    assert got["relative_error"] < 1e-12
    assert got["u"]["loaded_from"] == str(saved) and got["u"]["load_seconds"] >= 0
    assert got["u"]["build_seconds"] > 0  # the build's time, kept with the saved U
    assert built["u"]["loaded_from"] is None and built["u"]["saved_to"] is None
    # sizes come from the saved U: a random target of its d, n rows
    assert torch.tensor(got["simulated"]).shape == (3, 4)


def test_flags_that_agree_are_accepted_and_a_smaller_n_runs(saved, capsys):
    got = _json(
        ["simulate", "--u", str(saved), "--max-d", "4", "--layout", "vector", "--n", "2"], capsys
    )
    assert torch.tensor(got["simulated"]).shape == (2, 4)


def test_verify_reads_a_saved_u(saved, capsys):
    got = _json(["verify", "--u", str(saved), "--targets", "3"], capsys)
    assert got["count"] == 3 and not got["failures"]
    assert got["u"]["loaded_from"] == str(saved)


def test_text_output_says_where_u_came_from(saved, capsys):
    assert main(["simulate", "--u", str(saved)]) == 0
    assert f"U loaded from {saved} in" in capsys.readouterr().out


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--max-n", "5"], "--max-n 5 disagrees with the U in"),
        (["--max-heads", "1"], "--max-heads 1 disagrees"),
        (["--layout", "scalar"], "--layout scalar disagrees"),
        (["--layer", "encoder"], "--layer encoder disagrees"),
        (["--maps", "relu"], "--maps relu disagrees"),
        (["--float32"], "--float32 disagrees"),
        (["--attention", "softmax"], "--attention softmax disagrees"),
        (["--n-layers", "2"], "--n-layers 2 disagrees"),
    ],
)
def test_flags_that_disagree_with_the_saved_u_are_refused(saved, capsys, flags, said):
    assert said in _refused(["simulate", "--u", str(saved), *flags], capsys)


def test_bad_folders_are_refused(saved, tmp_path, capsys):
    assert "no such folder" in _refused(["simulate", "--u", str(tmp_path / "none")], capsys)
    (tmp_path / "file").write_text("x")
    assert "is a file" in _refused(["simulate", "--u", str(tmp_path / "file")], capsys)
    (tmp_path / "empty").mkdir()
    err = _refused(["simulate", "--u", str(tmp_path / "empty")], capsys)
    assert "holds no saved U" in err
    assert "--save-u saves a U" in _refused(
        ["simulate", "--u", str(saved), "--save-u", str(tmp_path / "x")], capsys
    )
    assert "is a file" in _refused(["simulate", *SIZES, "--save-u", str(tmp_path / "file")], capsys)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    err = _refused(["simulate", *SIZES, "--save-u", str(tmp_path / "other")], capsys)
    assert "holds other files" in err
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"  # nothing written
    err = _refused(["verify", *SIZES, "--save-u", str(tmp_path / "no" / "such")], capsys)
    assert "does not exist" in err


def test_a_damaged_saved_u_is_refused(saved, tmp_path, capsys):
    import shutil

    copy = tmp_path / "U"
    shutil.copytree(saved, copy)
    meta = json.loads((copy / "simulator.json").read_text())
    meta["config"]["max_n"] = 9  # another build's sizes over these weights
    (copy / "simulator.json").write_text(json.dumps(meta))
    err = _refused(["simulate", "--u", str(copy)], capsys)
    assert f"--u {copy}:" in err


def test_a_module_beyond_the_saved_u_is_refused(saved, tmp_path, capsys):
    torch.save(torch.nn.MultiheadAttention(8, 2, dtype=torch.float64), tmp_path / "wide.pt")
    err = _refused(["simulate", "--u", str(saved), "--module", str(tmp_path / "wide.pt")], capsys)
    assert "needs --max-d 8" in err and "built with --max-d 4" in err
    enc = torch.nn.TransformerEncoderLayer(4, 2, 6, dtype=torch.float64)
    torch.save(enc, tmp_path / "enc.pt")
    err = _refused(["simulate", "--u", str(saved), "--module", str(tmp_path / "enc.pt")], capsys)
    assert "holds an encoder layer" in err and "simulates attention layers" in err


def test_advice_for_a_target_larger_than_the_saved_u(saved, capsys):
    err = _refused(["simulate", "--u", str(saved), "--n", "5"], capsys)
    assert "is smaller: build one with --max-n 5 (leave --u out)" in err
    err = _refused(["simulate", "--u", str(saved), "--heads", "3"], capsys)
    assert "build one with --max-heads 3 (leave --u out)" in err
    err = _refused(["verify", "--u", str(saved), "--layer", "glu", "--targets", "1"], capsys)
    assert "--layer glu disagrees with the U in" in err


def test_saving_over_a_saved_u_says_so(tmp_path, capsys):
    path = tmp_path / "U"
    first = _json(["simulate", *SIZES, "--save-u", str(path)], capsys)
    assert first["u"]["replaced_saved_u"] is False
    again = _json(["simulate", "--max-n", "2", "--max-d", "2", "--save-u", str(path)], capsys)
    assert again["u"]["replaced_saved_u"] is True
    assert main(["simulate", "--max-n", "2", "--max-d", "2", "--save-u", str(path)]) == 0
    assert "replacing the U saved there" in capsys.readouterr().out
    got = _json(["simulate", "--u", str(path)], capsys)  # the last save is the one read
    assert torch.tensor(got["simulated"]).shape == (2, 2)


def test_a_module_the_saved_u_reads(saved, tmp_path, capsys):
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(4, 2, dtype=torch.float64)
    torch.save(mha, tmp_path / "mha.pt")
    got = _json(["simulate", "--u", str(saved), "--module", str(tmp_path / "mha.pt")], capsys)
    X = torch.tensor(got["reference"])  # the reference is torch's own module on X
    assert X.shape == (3, 4) and got["relative_error"] < 1e-12
