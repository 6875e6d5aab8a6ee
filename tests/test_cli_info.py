"""``attnsim info`` and ``attnsim demo``, run in-process."""

import json
import re

import pytest
import rich.console

from attnsim import library
from attnsim.cli import demo, main


def test_info_text(capsys):
    assert main(["info", "make_reverse"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "make_reverse: sop in reverse order."
    assert out[1].startswith("program reverse: 2 attention layer(s), 2 head(s)")
    assert out[3].split() == ["1", "1", "2", "length"]
    assert out[4].split() == ["2", "1", "0", "reverse", "(Aggregate)"]
    assert out[-2] == "input:  ['a', 'b', 'c', 'd']"
    assert out[-1] == "output: ['d', 'c', 'b', 'a']"


def test_info_json_with_input(capsys):
    assert main(["info", "make_sort", "--input", "3 1 2 1", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["input"] == [3, 1, 2, 1]  # parsed to the vocabulary's integers
    assert info["output"] == [1, 1, 2, 3]
    assert info["analysis"]["n_layers"] == 2
    assert info["analysis"]["heads_per_layer"] == [1, 1]
    assert info["max_seq_len"] == library.PROGRAMS["make_sort"].max_seq_len


def test_info_causal(capsys):
    assert main(["info", "count", "--input", "a b a", "--causal", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["output"] == [1, 1, 2]


def test_info_list(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["info", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # one entry per program; a long summary goes on in indented lines (80 columns)
    entries: list[str] = []
    for line in lines:
        if line.startswith(" "):
            entries[-1] += " " + line.strip()
        else:
            entries.append(line)
    assert [entry.split()[0] for entry in entries] == list(library.PROGRAMS)
    assert max(len(line) for line in lines) <= 80
    hist = next(entry for entry in entries if entry.startswith("make_hist "))
    assert hist.split(None, 1)[1] == "How often each position's token occurs in the whole input."
    assert main(["info", "--list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["program"] for r in rows} == set(library.PROGRAMS)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["info", "make_hst"], r"unknown program 'make_hst'; did you mean make_hist"),
        (["info"], r"give a program name, or --list"),
        (["info", "make_hist", "--input", "a z"], r"token 'z' is not in this program's vocab"),
        (["info", "make_hist", "--input", "a " * 9], r"--input has 9 tokens, .* at most 8\n"),
        (["info", "make_hist", "--input", " "], r"--input is empty"),
    ],
)
def test_info_user_errors(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnsim info: error: ")
    assert re.search(message, err), err


def _rows(text: str, sep: str) -> dict[str, list[str]]:
    return {
        cells[0]: cells
        for line in text.splitlines()
        if line.count(sep) > 2 and (cells := [c.strip() for c in line.split(sep)[1:-1]])[0]
    }


def test_demo_lists_every_program(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["demo", "--library"]) == 0
    rows = _rows(capsys.readouterr().out, "|")  # not a terminal: a Markdown table
    assert set(rows) >= set(library.PROGRAMS)
    assert rows["sort_by_most_freq"] == [
        "sort_by_most_freq",
        "3",
        "2/1/1",
        "3",
        "a b b c c c",
        "c b a § § §",
    ]
    cells = rows["make_dyck1_ptf"]
    assert cells[1:3] == ["2", "1/1"] and cells[5] == "P P P T P T F F"


def test_library_demo_prints_brackets_verbatim():
    console = rich.console.Console(width=200, record=True, color_system=None, force_terminal=True)
    assert demo.library_demo(console) == 0
    text = console.export_text()
    assert "┃ program " in text  # a terminal wide enough: a rich table
    assert "( [ { ) ] }" in text  # not swallowed as rich markup


def test_info_says_which_dtype_and_why(capsys):
    assert main(["info", "make_hist", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["compiled"]["precision"].startswith("float32: ")
    assert main(["info", "make_frac_prevs"]) == 0
    out = capsys.readouterr().out
    # the compiled line and the lines it goes on in (indented, to fit 80 columns)
    line = " ".join(re.search(r"^compiled:.*(?:\n .*)*", out, re.M).group(0).split())
    assert "; float64: " in line and "fractions" in line
