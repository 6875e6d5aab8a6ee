"""``attnsim rasp`` and ``attnsim repl``, called in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from attnsim.cli import main
from attnsim.rasp.text import Runtime, run_repl

CORPUS = Path(__file__).parent / "rasp_files"


def test_rasp_prints_each_sop_on_the_example(capsys):
    assert main(["rasp", str(CORPUS / "sort.rasp")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "     s-op: ascending" in out
    assert " \t Example: ascending([5, 2, 7, 2, 1]) = [1, 2, 2, 5, 7] (ints)" in out


def test_eval_json_prints_one_list_on_the_last_line(capsys):
    assert (
        main(
            [
                "rasp",
                str(CORPUS / "transpose_square.rasp"),
                "--eval",
                "Transpose()([1,2,3,4])",
                "--json",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    assert json.loads(lines[-1]) == [1, 3, 2, 4]
    assert lines[0] == "Transpose()([1,2,3,4]) = [1, 3, 2, 4] (ints)"


def test_eval_of_an_sop_uses_the_example_and_example_option(capsys):
    assert main(["rasp", str(CORPUS / "reverse.rasp"), "--eval", "reverse", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == list("edcba")
    assert (
        main(
            [
                "rasp",
                str(CORPUS / "reverse.rasp"),
                "--example",
                '"xyz"',
                "--eval",
                "reverse",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == list("zyx")


def test_user_mistakes_exit_2_without_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.rasp"
    bad.write_text("x = 1;\ny = select(indices, 0, =);\n")
    assert main(["rasp", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2:24: unexpected '='" in err
    assert "Traceback" not in err
    assert main(["rasp", str(tmp_path / "missing.rasp")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["rasp", str(CORPUS / "sort.rasp"), "--eval", "sortt"]) == 2
    assert "unknown name 'sortt'" in capsys.readouterr().err


def test_compile_reports_a_missing_compiler_or_checks_the_model(capsys):
    try:
        import attnsim.compiler as compiler  # noqa: F401

        has = hasattr(compiler, "compile_program")
    except ImportError:
        has = False
    code = main(["rasp", str(CORPUS / "hist.rasp"), "--compile", "hist", "--max-seq-len", "5"])
    captured = capsys.readouterr()
    if not has:
        assert code == 2
        assert "--compile needs attnsim.compiler" in captured.err
    else:
        assert code == 0, captured.out + captured.err
        assert "compiled == interpreted: yes" in captured.out


def test_compile_against_the_compiler():
    compiler = pytest.importorskip("attnsim.compiler")
    if not hasattr(compiler, "compile_program"):
        pytest.skip("attnsim.compiler.compile_program is not available yet")
    assert (
        main(["rasp", str(CORPUS / "reverse.rasp"), "--compile", "reverse", "--vocab", "a,b,c,d,e"])
        == 0
    )


def test_repl_reads_multiline_statements_and_survives_errors():
    lines = iter(
        [
            "def f(a) {",
            "  return a + 1;",
            "}",
            "x = f(tokens_int);",
            "set example [1, 2]",
            "x;",
            "nope;",
            "quit",
        ]
    )
    out: list[str] = []
    assert (
        run_repl(Runtime(echo=True, out=out.append), read=lambda p: next(lines), banner=False) == 0
    )
    assert "     console function: f(a)" in out
    assert " \t Example: out([1, 2]) = [2, 3] (ints)" in out
    assert any(line.startswith("<stdin>:1:1: unknown name 'nope'") for line in out)


def test_repl_command_runs_files_first(monkeypatch, capsys, tmp_path):
    feed = iter(["ascending;"])

    def fake_input(prompt):
        try:
            return next(feed)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", fake_input)
    monkeypatch.setenv("ATTNSIM_RASP_HISTORY", str(tmp_path / "history"))
    assert main(["repl", str(CORPUS / "sort.rasp")]) == 0
    out = capsys.readouterr().out
    assert " \t Example: out([5, 2, 7, 2, 1]) = [1, 2, 2, 5, 7] (ints)" in out


def test_a_run_time_check_under_compile_gives_no_python_only_advice(capsys, monkeypatch):
    # the non-finite check's message ends with advice for Python callers (check=False),
    # which the command line cannot follow: it is left out, the rest of the message kept
    from attnsim.model import checks
    from attnsim.model.compiled import CompiledModel

    message = None

    def refuse(self, *args, **kwargs):
        nonlocal message
        try:
            checks.check_finite(torch.full((1, 2, 1), float("inf")), None, 1)
        except checks.RunTimeCheckError as exc:
            message = str(exc)
            raise
        raise AssertionError("the check did not refuse inf")

    monkeypatch.setattr(CompiledModel, "run", refuse)
    code = main(["rasp", str(CORPUS / "hist.rasp"), "--compile", "hist", "--max-seq-len", "5"])
    err = capsys.readouterr().err
    assert code == 2 and "check=False" in message
    assert "a value is not finite" in err and "check=False" not in err, err


def test_eval_json_keeps_every_entry_of_a_dict_whose_keys_read_alike(tmp_path, capsys):
    f = tmp_path / "d.rasp"
    f.write_text('d = {1: 2, "1": 3};\n')
    assert main(["rasp", str(f), "--eval", "d", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == [[[1, 2], ["1", 3]]]
    assert main(["rasp", str(f), "--eval", "{1: 2, 2: 3}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == [{"1": 2, "2": 3}]
