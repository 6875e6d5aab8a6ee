"""``attnsim suite build`` and ``check`` end to end, in process, on three programs.

The files are checked against independent oracles: the data set's outputs against the
interpreter, the checkpoint against a fresh compile (same outputs, same circuit), the
clean/corrupted pairs against the inputs (equal lengths, different inputs). A damaged item
must fail ``check``.
"""

import json
import re

import pytest

from attnsim.cli import main
from attnsim.compiler import compile_program
from attnsim.model.checks import RunTimeCheckError
from attnsim.model.compiled import CompiledModel
from attnsim.rasp import interpret
from attnsim.report import suite

PROGRAMS = ["make_hist", "make_frac_prevs", "transpose"]
REFUSED: set[str] = set()  # programs whose model refuses every input: none today
FILES = [
    "program.py",
    "meta.json",
    "model/model.json",
    "model/model.safetensors",
    "components.json",
    "components.txt",
    "circuit.json",
    "circuit_lens.json",
    "dataset.json",
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("suite")
    assert main(["suite", "build", str(root), *PROGRAMS, "--per-length", "3", "--quiet"]) == 0
    return root


def test_build_writes_the_documented_layout(built):
    index = json.loads((built / "suite.json").read_text())
    assert index == {"format": suite.FORMAT, "programs": sorted(PROGRAMS)}
    for name in PROGRAMS:
        for f in FILES:
            assert (built / name / f).is_file(), (name, f)
        meta = json.loads((built / name / "meta.json").read_text())
        p = suite.PROGRAMS[name]
        assert meta["vocab"] == (None if p.vocab is None else list(p.vocab))
        assert meta["max_seq_len"] == p.max_seq_len
        assert meta["attention"] == "softmax"
        if meta["lens"] is None:  # TransformerLens missing, or a model it cannot run
            assert meta["lens_note"].startswith(("not written", "not exportable"))
        else:
            assert (built / name / "lens.pt").is_file()
        for g in ("component", "qkv"):
            assert meta["checks"][g]["faithful"] and meta["checks"][g]["ok"]
    assert "def make_hist" in (built / "make_hist" / "program.py").read_text()
    assert "def transpose" in (built / "transpose" / "program.py").read_text()


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_files_agree_with_the_interpreter_and_a_fresh_compile(built, name):
    p = suite.PROGRAMS[name]
    data = json.loads((built / name / "dataset.json").read_text())
    xs, ys = data["inputs"], data["outputs"]
    assert len(xs) >= 3
    program = p.factory()
    for x, y in zip(xs, ys):
        want = interpret.evaluate(program, x)
        assert want == pytest.approx(y) if p.vocab is None else want == y
    for a, b in data["pairs"]:
        assert len(xs[a]) == len(xs[b]) and xs[a] != xs[b]
    fresh = compile_program(
        program, vocab=p.vocab, max_seq_len=p.max_seq_len, fixed_length=p.fixed_length
    )
    loaded = CompiledModel.load(built / name / "model")
    assert loaded.run(xs[0]) == fresh.run(xs[0])
    circuits = json.loads((built / name / "circuit.json").read_text())
    assert circuits["qkv"] == loaded.circuit("qkv").to_dict()
    # a fresh compile has the same edges (automatic labels, "map_21", may be numbered anew)
    edges = [(e["sender"], e["receiver"]) for e in circuits["qkv"]["edges"]]
    assert edges == [e.pair for e in fresh.circuit("qkv").edges]
    lens = json.loads((built / name / "circuit_lens.json").read_text())
    assert lens["component"] == loaded.circuit().lens_edges()


def test_check_passes_and_prints_a_summary(built, capsys):
    assert main(["suite", "check", str(built)]) == 0
    out = capsys.readouterr().out
    for name in PROGRAMS:
        assert name in out
    assert "FAILED" not in out
    assert main(["suite", "check", str(built), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == sorted(PROGRAMS) and all(r["ok"] for r in rows)


def test_check_catches_a_damaged_item(built, tmp_path, capsys):
    import shutil

    copy = tmp_path / "s"
    shutil.copytree(built, copy)
    data_path = copy / "make_hist" / "dataset.json"
    data = json.loads(data_path.read_text())
    data["outputs"][0] = [99] * len(data["outputs"][0])
    data_path.write_text(json.dumps(data))
    circ = copy / "transpose" / "circuit.json"
    c = json.loads(circ.read_text())
    c["component"]["edges"] = c["component"]["edges"][1:]
    circ.write_text(json.dumps(c))
    assert main(["suite", "check", str(copy), "--json"]) == 1
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["make_frac_prevs"]["ok"]
    assert "written [99" in rows["make_hist"]["problems"][0]
    assert rows["transpose"]["problems"] == [
        "circuit.json (component) is not the checkpoint's circuit"
    ]


@pytest.mark.parametrize(
    "edit, problem",
    [
        (lambda d: d.update(outputs=d["outputs"][:1]), r"inputs but 1 outputs; one each"),
        (lambda d: d.pop("pairs"), r"expected an object with the lists inputs, outputs, pairs"),
        (lambda d: d.update(pairs=[[0, 10**6]]), r"the pair \[0, 1000000\] is not two indices"),
    ],
)
def test_check_names_a_dataset_cut_short_or_malformed(built, tmp_path, capsys, edit, problem):
    import shutil

    copy = tmp_path / "s"
    shutil.copytree(built, copy)
    data_path = copy / "make_hist" / "dataset.json"
    data = json.loads(data_path.read_text())
    edit(data)
    data_path.write_text(json.dumps(data))
    assert main(["suite", "check", str(copy), "--json"]) == 1
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert re.search(problem, rows["make_hist"]["problems"][0]), rows["make_hist"]
    (copy / "suite.json").write_text(json.dumps({"format": suite.FORMAT, "programs": "ab"}))
    assert main(["suite", "check", str(copy)]) == 2
    assert "'programs' is not a list of program names" in capsys.readouterr().err


def test_mistakes_are_one_line_errors(tmp_path, capsys):
    assert main(["suite", "build", str(tmp_path / "x"), "make_hits"]) == 2
    err = capsys.readouterr().err
    assert "unknown program(s) make_hits" in err and "--list" in err
    assert main(["suite", "check", str(tmp_path)]) == 2
    assert "has no suite.json" in capsys.readouterr().err
    assert main(["suite", "build", str(tmp_path / "x"), "make_hist", "--per-length", "1"]) == 2
    assert "--per-length must be at least 2 (a clean and a corrupted input" in (
        capsys.readouterr().err
    )
    # names after the options are names too; an unknown option is the subcommand's error
    assert main(["suite", "build", str(tmp_path / "y"), "--per-length", "1", "make_hist"]) == 2
    assert "--per-length must be at least 2" in capsys.readouterr().err
    assert main(["suite", "build", str(tmp_path / "y"), "make_hist", "--bogus"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnsim suite build: error: unrecognized arguments: --bogus"), err
    assert main(["suite", "build", "--list", str(tmp_path)]) == 0
    listed = capsys.readouterr().out.split()
    assert listed == sorted(suite.PROGRAMS) and "inverse" in listed and "sort" in listed


@pytest.mark.slow
def test_the_whole_library_builds_and_checks(tmp_path):
    """``make bench``: every library and matrix program, built and re-checked."""
    root = tmp_path / "all"
    assert main(["suite", "build", str(root), "--per-length", "3", "--quiet"]) == 0
    assert main(["suite", "check", str(root), "--quiet"]) == 0
    index = json.loads((root / "suite.json").read_text())
    assert index["programs"] == sorted(set(suite.PROGRAMS) - REFUSED)


def test_a_program_the_model_refuses_is_skipped_with_the_reason(tmp_path, capsys, monkeypatch):
    # a model whose run-time checks refuse every input (no library program does today)
    def refuse(self, *args, **kwargs):
        raise RunTimeCheckError("run-time check failed: refused for the test")

    monkeypatch.setattr(CompiledModel, "run", refuse)
    root = tmp_path / "d"
    assert main(["suite", "build", str(root), "make_dyck2_ptf", "--per-length", "2"]) == 0
    out = capsys.readouterr().out
    assert "skipped: make_dyck2_ptf: no input passes" in out and "run-time check" in out
    assert json.loads((root / "suite.json").read_text())["programs"] == []
