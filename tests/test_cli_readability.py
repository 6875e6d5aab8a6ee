"""The command line's public face: a fast start, whole tables, clear prompts and progress.

Each test names the point of the issue "The public face" it checks (A: start-up; B1-B10:
readability). Output is checked through a pipe (capsys, or a subprocess with stdout piped)
and at an 80-column terminal (a rich console forced to be one), where it matters.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import rich.console

from attnsim import library
from attnsim.cli import _output, build_parser, main
from attnsim.cli import report as report_cmd
from attnsim.rasp.text import Runtime, run_repl
from attnsim.rasp.text import repl as repl_module

CORPUS = Path(__file__).parent / "rasp_files"
ROOT = Path(__file__).resolve().parents[1]
ELLIPSIS = "…"


def _terminal(width: int = 80) -> rich.console.Console:
    """A console that behaves as a terminal of ``width`` columns, printing into a buffer."""
    return rich.console.Console(
        file=io.StringIO(), width=width, force_terminal=True, color_system=None
    )


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, COLUMNS="80", **extra)
    src = str(ROOT / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _imported(args: list[str]) -> set[str]:
    """Top-level packages ``python -X importtime ARGS`` imports (its stdout piped)."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        env=_env(),
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    names = set()
    for line in run.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


# -- A: a fast start -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        ["info", "--list"],
        ["rasp", str(CORPUS / "sort.rasp")],
        ["simulate", "--help"],
        ["report", "matrix", "--help"],
    ],
    ids=["help", "version", "info-list", "rasp-file", "simulate-help", "report-help"],
)
def test_a_start_without_heavy_imports(args):
    """A: building the parser and running a RASP file import neither torch nor matplotlib."""
    imported = _imported(["-m", "attnsim", *args])
    assert "attnsim.cli" in imported  # the measurement saw the CLI
    heavy = {"torch", "matplotlib", "matplotlib.pyplot", "safetensors"}
    assert not imported & heavy, sorted(imported & heavy)
    assert not any(m.startswith(("attnsim.compiler", "attnsim.simulator")) for m in imported)


def test_a_the_parsers_copy_of_the_limits_is_the_librarys():
    from attnsim.cli import rasp_text
    from attnsim.rasp.text import limits

    assert rasp_text.DEFAULT_MAX_STEPS == limits.Limits().max_steps
    assert rasp_text.DEFAULT_MAX_VALUE_DIGITS == limits.Limits().max_value_digits


def test_a_help_does_not_load_the_rasp_parser():
    imported = _imported(["-m", "attnsim", "--help"])
    assert "lark" not in imported and "attnsim.rasp.text.parser" not in imported


def test_a_rich_only_where_a_table_is_drawn():
    """A: rich is not imported for --help (tables import it when they draw)."""
    assert "rich" not in _imported(["-m", "attnsim", "--help"])


# -- B1: tables keep their headers and names ----------------------------------------------


def test_b1_report_matrix_through_a_pipe_keeps_every_header(capsys, monkeypatch):
    from attnsim.report import matrix_table as mt

    monkeypatch.setenv("COLUMNS", "80")
    assert main(["report", "matrix", "--op", "transpose", "--output", "-"]) == 0
    out = capsys.readouterr().out
    assert ELLIPSIS not in out
    titles, _ = mt.table_cells([])
    header = next(line for line in out.splitlines() if line.startswith("| operation"))
    assert [c.strip() for c in header.split("|")[1:-1]] == titles
    assert "| transpose (h=2) " in out


def test_b1_a_wide_table_at_an_80_column_terminal_keeps_every_header():
    from attnsim.report import matrix_table as mt

    titles, cells = mt.table_cells(mt.matrix_rows([mt.Case("transpose", (2, 3), heads=2)]))
    console = _terminal(80)
    _output.print_table("matrix", titles, cells, console=console)
    out = console.file.getvalue()
    assert ELLIPSIS not in out
    for title in titles:
        assert f" {title} " in out  # whole, on one line
    assert "(1, 2)" in out  # the authors' heads per layer, in one piece


def test_b1_library_names_in_full_at_an_80_column_terminal():
    console = _terminal(80)
    from attnsim.cli import demo

    assert demo.library_demo(console) == 0
    out = console.file.getvalue()
    assert ELLIPSIS not in out
    assert "┃ program" in out  # it fits: a rich table
    for name in library.PROGRAMS:  # each name whole, in the first column
        assert re.search(rf"│ {name} +│", out), name
    assert max(len(line) for line in out.splitlines()) <= 80


def test_b1_library_names_in_full_through_a_pipe():
    run = subprocess.run(
        [sys.executable, "-m", "attnsim", "demo", "--library"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert ELLIPSIS not in run.stdout
    first = {line.split("|")[1].strip() for line in run.stdout.splitlines() if "|" in line}
    assert set(library.PROGRAMS) <= first
    # each name can be typed into `attnsim info`
    for name in library.PROGRAMS:
        assert main(["info", name, "--json"]) == 0


# -- B2: report lines are not broken mid-list ----------------------------------------------


def test_b2_simulate_report_lines_stay_whole(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["simulate", "--max-n", "4", "--max-d", "4", "--max-heads", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    line = next(x for x in out if "heads per layer [" in x)
    assert line.endswith("]"), line  # the whole list on its line
    assert re.search(r"heads per layer \[(\d+, )+\d+\]$", line)


def test_b2_verify_report_lines_stay_whole(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    assert (
        main(["verify", "--max-n", "3", "--max-d", "4", "--max-heads", "2", "--targets", "2"]) == 0
    )
    out = capsys.readouterr().out.splitlines()
    line = next(x for x in out if "heads per layer [" in x)
    assert re.search(r"heads per layer \[(\d+, )+\d+\]$", line), line
    assert any(x.startswith("2 targets: max relative error") and "failures 0" in x for x in out)


def test_b2_print_lines_does_not_rewrap():
    console = _terminal(40)
    text = "heads per layer: [" + ", ".join(["13"] * 20) + "]"
    _output.print_lines(text, console=console)
    assert console.file.getvalue() == text + "\n"


# -- B3: report matrix never overwrites the full table with a partial one -----------------


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A folder with docs/matrix-resources.md (the full table), as the working folder."""
    (tmp_path / "docs").mkdir()
    doc = tmp_path / "docs" / "matrix-resources.md"
    doc.write_text("the full table\n")
    monkeypatch.chdir(tmp_path)
    return doc


def test_b3_a_partial_run_leaves_the_full_table(project, capsys):
    assert main(["report", "matrix", "--op", "transpose"]) == 0
    out, err = capsys.readouterr()
    assert project.read_text() == "the full table\n"
    assert "--op transpose ran 7 of" in err and "left as it is" in err
    assert "--output PATH" in err
    assert "| transpose " in out  # the table is still shown


def test_b3_a_partial_run_refuses_the_default_document(project, capsys):
    status = main(["report", "matrix", "--op", "transpose", "--output", str(project)])
    err = capsys.readouterr().err
    assert status == 2
    assert project.read_text() == "the full table\n"
    assert err.startswith("attnsim report: error: --output ")
    assert "is the full table of every case" in err and "choose another --output" in err


def test_b3_a_partial_run_writes_where_asked_and_says_where(project, capsys, tmp_path):
    assert main(["report", "matrix", "--op", "transpose", "--output", "part.md"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {(tmp_path / 'part.md').resolve()}" in out  # the resolved path
    assert (tmp_path / "part.md").read_text().count("| transpose |") == 6


def test_b3_a_full_run_outside_the_project_says_what_to_do(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no docs/ here: refused before any work
    assert main(["report", "matrix"]) == 2
    err = capsys.readouterr().err
    assert "run from the project root, or pass --output PATH" in err


def test_b3_the_source_trees_document_is_protected():
    assert (ROOT / report_cmd.DEFAULT_MATRIX_DOC).resolve() in report_cmd._protected_docs()


# -- B4: `attnsim rasp` without a file -----------------------------------------------------


def test_b4_rasp_without_a_file_through_a_pipe_says_how(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("x = 1;\n"))
    assert main(["rasp"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnsim rasp: error: no FILE given, and the input is not a terminal")
    assert "attnsim rasp prog.rasp" in err and "attnsim repl" in err


def test_b4_rasp_without_a_file_does_not_hang():
    run = subprocess.run(
        [sys.executable, "-m", "attnsim", "rasp"],
        capture_output=True,
        text=True,
        env=_env(),
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert run.returncode == 2
    assert "attnsim repl" in run.stderr and "Traceback" not in run.stderr


def test_b4_rasp_without_a_file_at_a_terminal_starts_the_prompt(capsys, monkeypatch, tmp_path):
    from attnsim.cli import rasp_text

    monkeypatch.setenv("ATTNSIM_RASP_HISTORY", str(tmp_path / "history"))
    monkeypatch.setattr(rasp_text, "_stdin_is_terminal", lambda: True)
    lines = iter(["set example [1, 2]", "x = tokens_int + 1;"])

    def read(prompt: str) -> str:
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", read)
    assert main(["rasp"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("RASP (attnsim)")
    assert "x([1, 2]) = [2, 3] (ints)" in out


def test_b4_rasp_options_without_a_file_are_refused(capsys):
    assert main(["rasp", "--eval", "x"]) == 2
    assert "--eval needs a program: give the .rasp file" in capsys.readouterr().err


# -- B5: the REPL hints at a missing ';' on the line where it is missing -------------------


def test_b5_repl_hints_at_the_missing_semicolon_on_its_line():
    events: list[str] = []
    lines = iter(["x = tokens_int + 1", "y = x;", "exit"])

    def read(prompt: str) -> str:
        line = next(lines)
        events.append(f"read {line}")
        return line

    rt = Runtime(echo=True, out=events.append)
    assert run_repl(rt, read=read, banner=False) == 0
    # the hint comes as soon as the line without ';' is entered, before the next line
    i = events.index("read x = tokens_int + 1")
    assert events[i + 1] == repl_module._GOES_ON
    assert events[i + 2] == "read y = x;"
    error = events[i + 3].splitlines()
    assert error[0] == "<stdin>:1:19: missing ';' at the end of this line"
    assert error[1] == "    x = tokens_int + 1"
    assert error[2] == "    " + " " * 18 + "^"  # just after the last character of line 1


def test_b5_no_hint_for_a_statement_that_is_still_open():
    assert not repl_module.lacks_semicolon("x = select(tokens, tokens,")
    assert not repl_module.lacks_semicolon("def f(a) {")
    assert repl_module.lacks_semicolon("y = x + 2  # a comment")


def test_b5_a_file_error_points_at_the_line_without_semicolon(tmp_path, capsys):
    f = tmp_path / "p.rasp"
    f.write_text("x = tokens_int + 1\n\n# a comment\ny = x;\n")
    assert main(["rasp", str(f)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"attnsim rasp: error: {f}:1:19: missing ';' at the end of this line"


# -- B6: --vocab keeps its order -----------------------------------------------------------


@pytest.mark.parametrize(
    "vocab, shown",
    [("7,5,2,1,3", "[7, 5, 2, 1, 3]"), ("3,1,2,5,7", "[3, 1, 2, 5, 7]"), (None, "[5, 2, 7, 1]")],
)
def test_b6_vocab_keeps_the_users_order(vocab, shown, capsys):
    argv = ["rasp", str(CORPUS / "sort.rasp"), "--compile", "ascending"]
    argv += ["--vocab", vocab] if vocab else []
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    # the compiled model's own vocabulary (the order of its token directions)
    assert f"vocab:       {shown}" in out
    assert "compiled == interpreted: yes" in out


def test_b6_vocab_order_reaches_the_model(monkeypatch):
    from attnsim import compiler
    from attnsim.cli import rasp_text

    seen = {}
    real = compiler.compile_program

    def spy(program, **kw):
        seen["vocab"] = kw["vocab"]
        return real(program, **kw)

    monkeypatch.setattr(compiler, "compile_program", spy)
    assert rasp_text.run_rasp is not None
    argv = ["rasp", str(CORPUS / "sort.rasp"), "--compile", "ascending", "--vocab", "7,5,2,7,1"]
    assert main(argv) == 0
    assert seen["vocab"] == [7, 5, 2, 1]  # duplicates dropped, order kept


# -- B7: info --json is consistent ---------------------------------------------------------


@pytest.mark.parametrize("name", list(library.PROGRAMS))
def test_b7_info_json_lists_match_the_layer_counts(name, capsys):
    from attnsim.compiler import compile_program

    assert main(["info", name, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    a = info["analysis"]
    assert len(a["heads_per_layer"]) == len(a["mlps_per_layer"]) == a["n_layers"]
    assert a["mlps_before_layer_1"] + sum(a["mlps_per_layer"]) == a["n_mlps"]
    assert sum(a["heads_per_layer"]) == a["n_heads"] == len(a["attention"])
    c = info["compiled"]
    entry = library.PROGRAMS[name]
    model = compile_program(entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len)
    want = json.loads(json.dumps(model.report().resources()))
    precision = c.pop("precision")  # the dtype and why (unnamed S-ops' labels vary)
    assert c == want  # the compiled model's own report
    assert precision.split(":")[0] == model.report().precision.split(":")[0]
    assert len(c["heads_per_layer"]) == c["layers"]
    assert sum(1 for h in c["heads_per_layer"] if h) == c["attention_layers"]


def test_b7_make_hist_has_one_entry_per_layer(capsys):
    assert main(["info", "make_hist", "--json"]) == 0
    a = json.loads(capsys.readouterr().out)["analysis"]
    assert (a["n_layers"], a["heads_per_layer"], a["mlps_per_layer"]) == (1, [1], [0])


# -- B8: help shows defaults ---------------------------------------------------------------


def _subparsers(parser):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                for inner, subsub in _subparsers(sub):
                    yield f"{name} {inner}", subsub


def test_b8_every_option_with_a_default_shows_it():
    parser = build_parser()
    commands = dict(_subparsers(parser))
    for name in ("simulate", "verify", "rasp", "info", "report matrix", "report simulator"):
        sub = commands[name]
        formatter = sub._get_formatter()
        for action in sub._actions:
            d = action.default
            if not action.option_strings or action.help is None:
                continue
            if any(d is v for v in (None, False, True)) or d == "==SUPPRESS==":
                continue
            text = formatter._get_help_string(action)
            assert "default" in text.lower(), (name, action.option_strings, text)


@pytest.mark.parametrize(
    "argv, shown",
    [
        (["simulate", "--help"], ["(default: native)", "(default: hard)", "(default: 0)"]),
        (["verify", "--help"], ["(default: 100)", "(default: native)"]),
        (["report", "matrix", "--help"], ["(default: 8)", "none with --op"]),
        (["rasp", "--help"], ["(default 10,000,000", "in order of appearance"]),
        (["info", "--help"], ["(default: the program's example input)"]),
    ],
)
def test_b8_help_text_names_defaults(argv, shown, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one line per option
    assert main(argv) == 0
    out = capsys.readouterr().out
    for s in shown:
        assert s in out, (s, out)


# -- B9: errors name the flags the user can set ---------------------------------------------

PYTHON_ADVICE = re.compile(
    r"simulator\.build\(|check=False|dtype=|\b(max_n|max_d|max_heads|max_ff|score_bound|"
    r"logit_bound|map_tolerance|value_bound|max_seq_len)\b"
)


@pytest.fixture(scope="module")
def loud_module(tmp_path_factory):
    """A saved MultiheadAttention whose attention scores exceed U's default bound."""
    import torch

    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(4, 2, dtype=torch.float64)
    with torch.no_grad():
        m.in_proj_weight.mul_(300)
    path = tmp_path_factory.mktemp("loud") / "mha.pt"
    torch.save(m, path)
    return path


def test_b9_a_score_beyond_the_bound_names_the_flag(loud_module, capsys):
    status = main(["simulate", "--module", str(loud_module), "--max-n", "3"])
    err = capsys.readouterr().err
    assert status == 2
    assert "pass a larger --score-bound" in err
    assert not PYTHON_ADVICE.search(err), err
    # and the flag it names does the job
    assert (
        main(
            [
                "simulate",
                "--module",
                str(loud_module),
                "--max-n",
                "3",
                "--score-bound",
                "1e6",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["relative_error"] < 1e-9


def test_b9_a_float32_build_names_the_flags(capsys):
    argv = ["verify", "--float32", "--max-n", "8", "--max-d", "8", "--max-heads", "4"]
    assert main([*argv, "--score-bound", "1000", "--targets", "1"]) == 2
    err = capsys.readouterr().err
    assert "--score-bound must be in (0, 511]" in err
    assert "leave --float32 out" in err
    assert not PYTHON_ADVICE.search(err), err


def test_b9_flags_only_where_the_command_has_them():
    from attnsim.cli import cli_words

    msg = "input length 9 exceeds the model's max_seq_len=8; build a larger U"
    assert cli_words(msg, frozenset({"--max-seq-len", "--max-n"})) == (
        "input length 9 exceeds the model's --max-seq-len 8; pass a larger --max-n"
    )
    assert cli_words(msg, frozenset()) == msg  # no such flags: unchanged


# -- B10: progress on long commands ----------------------------------------------------------


def _stage_lines(err: str, prefix: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(prefix + ": ")]


def test_b10_report_matrix_shows_one_line_per_case_through_a_pipe(capsys):
    assert main(["report", "matrix", "--op", "transpose", "--output", "-"]) == 0
    lines = _stage_lines(capsys.readouterr().err, "attnsim report matrix")
    assert len(lines) == 7
    assert re.fullmatch(
        r"attnsim report matrix: \[1/7\] compiling transpose 2x2\.\.\. done in \d+\.\d s", lines[0]
    )


def test_b10_verify_and_simulate_show_their_stages(capsys):
    assert main(["verify", "--max-n", "2", "--max-d", "2", "--targets", "2", "--json"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)  # stdout stays clean JSON
    lines = _stage_lines(err, "attnsim verify")
    assert re.fullmatch(r".*building U\(2,2,1\)\.\.\. done in \d+\.\d s", lines[0])
    assert re.fullmatch(r".*simulating 2 random targets\.\.\. done in \d+\.\d s", lines[1])
    argv = ["simulate", "--max-n", "2", "--max-d", "2", "--maps", "relu"]
    assert main([*argv, "--map-tolerance", "1e-2", "--logit-bound", "5"]) == 0
    lines = _stage_lines(capsys.readouterr().err, "attnsim simulate")
    assert "building U(2,2,1) with ReLU maps... done in" in lines[0]


def test_b10_report_simulator_shows_each_build(capsys):
    assert main(["report", "simulator", "--builds", "2,2,1", "3,2,1"]) == 0
    lines = _stage_lines(capsys.readouterr().err, "attnsim report simulator")
    assert [x.split("...")[0] for x in lines] == [
        "attnsim report simulator: [1/2] building U(2,2,1)",
        "attnsim report simulator: [2/2] building U(3,2,1)",
    ]


def test_b10_report_all_counts_its_stages(tmp_path, monkeypatch):
    from attnsim.report import plots, report_cli

    monkeypatch.setattr(plots, "relu_maps_supported", lambda: False)  # the slow part
    labels: list[str] = []
    programs, layouts = [("make_hist", "hard")], ["make_reverse"]
    report_cli.write_report(
        tmp_path, programs=programs, layouts=layouts, builds=[(2, 2, 1)], progress=labels.append
    )
    assert len(labels) == report_cli.report_stages(programs, layouts)
    assert labels[0].startswith("compiling make_hist")


def test_b10_a_terminal_gets_a_bar_not_lines():
    err = io.StringIO()
    with _output.Progress("attnsim x", total=2, file=err, terminal=True) as bar:
        bar.step("one")
        bar.step("two")
    assert "done in" not in err.getvalue()


def test_b10_a_failed_stage_says_so(capsys):
    err = io.StringIO()
    with pytest.raises(ValueError):
        with _output.Progress("attnsim x", file=err, clock=iter(range(9)).__next__) as bar:
            bar.step("building")
            raise ValueError("no")
    assert err.getvalue() == "attnsim x: building... failed after 1.0 s\n"
