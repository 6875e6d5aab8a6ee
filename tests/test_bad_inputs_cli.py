"""Bad inputs to the command line: each ends in one clear error line or the right result.

Two tables, both calling ``attnsim.cli.main(argv)`` in-process. ``ERRORS``: a row does one
bad thing and expects a non-zero status, no traceback, and a message matching a pattern (the
wording is part of the contract: what was expected, what arrived, what to do, naming the
flag). ``RESULTS``: a row that looks risky but is valid, checked against an independent
oracle (the torch module itself). ``{d}`` in an argv stands for a folder of test files.
"""

from __future__ import annotations

import json
import os
import pickle
import re
from pathlib import Path

import pytest
import torch

from attnsim.cli import main

# what each test file holds (written once per module by the ``files`` fixture)
RASP_FILES = {
    "s.rasp": "set example [1, 2];\ns = sort(tokens_int, tokens_int);\n",
    "loop.rasp": "for i in range(10^8) { x = i; }\n",
    "comp.rasp": "x = [i for i in range(10^8)];\n",
    "pow.rasp": "x = 9^99999999;\n",
    "square.rasp": "x = 2; for i in range(100) { x = x * x; }\n",
    "repeat.rasp": 'x = "ab" * 1000000000;\n',
    "literal.rasp": "x = " + "9" * 5000 + ";\n",
    "recurse.rasp": "def f(n) { return f(n + 1); } x = f(1);\n",
    "small_loop.rasp": "x = 0; for i in range(20) { x = x + i; }\n",
    "syntax.rasp": "x = 1;\ny = select(indices, 0, =);\n",
    "load_binary.rasp": 'load "binary";\n',
    "format.rasp": 'x = "%0999999999d" % 1;\n',
}

SIM = ["simulate", "--max-n", "2"]
SD_FACTS = ["--layer-norm-eps", "1e-5", "--no-add-zero-attn"]  # what a state_dict cannot tell

# (id, argv, pattern the stderr must match)
ERRORS = [
    # -- layouts and stacks ------------------------------------------------------------------
    (
        "n-layers-zero",
        [*SIM, "--n-layers", "0"],
        r"cannot build U: --n-layers must be a positive int \(the layers of a stack\), got 0",
    ),
    (
        "stack-without-encoder",
        [*SIM, "--n-layers", "2"],
        r"--n-layers 2 builds U for a stack of encoder layers: it needs --layer encoder and "
        r"--layout vector",
    ),
    (
        "stack-in-the-scalar-layout",
        ["verify", "--layer", "encoder", "--n-layers", "2", "--layout", "scalar"],
        r"it needs --layer encoder and --layout vector",
    ),
    (
        "unknown-layout",
        [*SIM, "--layout", "diagonal"],
        r"invalid choice: 'diagonal' \(choose from 'vector', 'scalar'\)",
    ),
    # -- simulate --module: the file and the flags must agree ----------------------------
    (
        "state-dict-without-heads",
        [*SIM, "--module", "{d}/mha2.pt"],
        r"state_dict of an nn\.MultiheadAttention, which does not record its number of "
        r"heads or whether its attention adds a zero key \(add_zero_attn\); pass --heads H "
        r"\(H divides d = 4: 1, 2, 4\); --no-add-zero-attn",
    ),
    (
        "heads-not-a-divisor",
        [*SIM, "--module", "{d}/mha2.pt", "--heads", "3", "--no-add-zero-attn"],
        r"--heads 3 does not divide the width d = 4 of --module .*; pass one of 1, 2, 4",
    ),
    (
        "heads-disagree-with-module",
        [*SIM, "--module", "{d}/mha2_module.pt", "--heads", "1"],
        r"--heads 1 disagrees with --module .*heads = 2; leave the flag out or pass --heads 2",
    ),
    (
        "encoder-state-dict-without-activation",
        [*SIM, "--module", "{d}/enc.pt", "--heads", "2", *SD_FACTS],
        r"does not record its activation or whether it is pre-norm; pass --activation "
        r"relu\|gelu\|gelu_tanh\|maxmin; --norm-first or --no-norm-first",
    ),
    (
        "activation-disagrees-with-module",
        [*SIM, "--module", "{d}/enc_module.pt", "--activation", "relu"],
        r"--activation relu disagrees with --module .*activation = gelu",
    ),
    (
        "norm-first-disagrees-with-module",
        [*SIM, "--module", "{d}/enc_module.pt", "--no-norm-first"],
        r"--no-norm-first disagrees with --module .*pass --norm-first",
    ),
    (
        "layer-disagrees-with-module",
        [*SIM, "--module", "{d}/enc_module.pt", "--layer", "attention"],
        r"--layer attention disagrees with --module .*TransformerEncoderLayer; leave --layer "
        r"out or pass --layer encoder",
    ),
    (
        "encoder-flag-for-attention-module",
        [*SIM, "--module", "{d}/mha2.pt", "--heads", "2", "--activation", "gelu"],
        r"--activation applies to encoder layers; --module .* holds an nn\.MultiheadAttention",
    ),
    (
        "module-with-nan-weights",
        [*SIM, "--module", "{d}/nan.pt", "--heads", "2"],
        r"in_proj_weight has 1 NaN or infinite entry",
    ),
    (
        "module-not-a-torch-file",
        [*SIM, "--module", "{d}/junk.pt"],
        r"--module .*junk\.pt: cannot be loaded",
    ),
    (
        "module-with-code-is-not-run",
        [*SIM, "--module", "{d}/code.pt"],
        r"cannot be loaded: .*no code from the file is run",
    ),
    (
        "module-file-missing",
        [*SIM, "--module", "{d}/missing.pt"],
        r"--module .*missing\.pt: No such file or directory",
    ),
    (
        "module-holds-a-list",
        [*SIM, "--module", "{d}/list.pt"],
        r"does not hold a state_dict or a module; save one with torch\.save",
    ),
    (
        "max-d-below-module-width",
        [*SIM, "--module", "{d}/mha2.pt", "--heads", "2", "--no-add-zero-attn", "--max-d", "2"],
        r"--max-d 2 is smaller than the 4 of --module .*; pass --max-d 4 or more",
    ),
    # -- simulate / verify: sizes and options that would be ignored ----------------------
    ("n-zero", [*SIM, "--n", "0"], r"--n must be >= 1, got 0"),
    ("n-above-max-n", [*SIM, "--n", "5"], r"--n 5 exceeds --max-n 2; pass --max-n 5"),
    ("max-heads-zero", [*SIM, "--max-heads", "0"], r"--max-heads must be >= 1, got 0"),
    ("max-d-negative", [*SIM, "--max-d", "-2"], r"--max-d must be >= 1, got -2"),
    (
        "max-ff-for-attention",
        [*SIM, "--max-ff", "3"],
        r"--max-ff applies only to whole layers \(--layer encoder or decoder\)",
    ),
    (
        "logit-bound-with-native-maps",
        [*SIM, "--logit-bound", "3"],
        r"--logit-bound applies only with --maps relu \(native maps are exact\)",
    ),
    (
        "logit-bound-nan",
        [*SIM, "--maps", "relu", "--logit-bound", "nan"],
        r"--logit-bound must be in \(0, 350\]",
    ),
    (
        # the CLI's limit is the build's: no "cannot build U: logit_bound must be ..." later
        "logit-bound-beyond-the-build",
        [*SIM, "--maps", "relu", "--logit-bound", "500"],
        r"^attnsim simulate: error: --logit-bound must be in \(0, 350\].*got 500\n$",
    ),
    (
        "score-bound-negative",
        [*SIM, "--score-bound", "-1"],
        r"--score-bound must be positive, got -1",
    ),
    (
        "value-bound-without-relu-maps",
        [*SIM, "--value-bound", "5"],
        r"--value-bound applies? only with --maps relu",
    ),
    (
        "map-tolerance-zero",
        [*SIM, "--maps", "relu", "--map-tolerance", "0"],
        r"--map-tolerance must be in \(0, 1\)",
    ),
    (
        "max-n-too-large-for-memory",
        ["simulate", "--max-n", "100000"],
        r"sequence of 10,000,000,000 positions; running it needs at least .* of memory, more "
        r"than the .* available; use smaller --max-n",
    ),
    (
        "max-n-not-a-number",
        ["simulate", "--max-n", "abc"],
        r"^attnsim simulate: error: argument --max-n: invalid int value: 'abc'",
    ),
    ("seed-negative", [*SIM, "--seed", "-1"], r"--seed must be in \[0, 2\^63 - 1\], got -1"),
    (
        "activation-for-attention-target",
        [*SIM, "--activation", "gelu"],
        r"--activation applies only to encoder layers; add --layer encoder",
    ),
    (
        "heads-do-not-divide-random-width",
        [*SIM, "--max-heads", "3"],
        r"width d = --max-d 4, which 3 heads do not divide",
    ),
    ("verify-no-targets", ["verify", "--targets", "0"], r"--targets must be >= 1, got 0"),
    (
        "verify-max-ff-for-attention",
        ["verify", "--max-ff", "2"],
        r"--max-ff applies only to whole layers",
    ),
    ("unknown-flag", [*SIM, "--bogus"], r"unrecognized arguments: --bogus"),
    ("unknown-command", ["frobnicate"], r"invalid choice: 'frobnicate'"),
    # -- rasp: options ---------------------------------------------------------------------
    (
        "json-without-eval",
        ["rasp", "{d}/s.rasp", "--json"],
        r"--json applies only with --eval EXPR; add --eval EXPR or leave --json out",
    ),
    (
        "vocab-without-compile",
        ["rasp", "{d}/s.rasp", "--vocab", "1,2"],
        r"--vocab applies only with --compile NAME",
    ),
    (
        "eval-and-compile",
        ["rasp", "{d}/s.rasp", "--compile", "s", "--eval", "s"],
        r"--eval and --compile are separate runs",
    ),
    (
        "max-seq-len-zero",
        ["rasp", "{d}/s.rasp", "--compile", "s", "--max-seq-len", "0"],
        r"--max-seq-len must be >= 1, got 0",
    ),
    (
        "max-seq-len-negative",
        ["rasp", "{d}/s.rasp", "--compile", "s", "--max-seq-len", "-5"],
        r"--max-seq-len must be >= 1, got -5",
    ),
    (
        "max-seq-len-too-large-for-memory",
        ["rasp", "{d}/s.rasp", "--compile", "s", "--max-seq-len", "10000000"],
        r"compiling with --max-seq-len 10,000,000 \(a positional embedding of 10,000,001 x "
        r".* float64 values\) needs at least .* of memory.*pass a smaller --max-seq-len",
    ),
    (
        "example-shorter-max-seq-len",
        ["rasp", "{d}/s.rasp", "--compile", "s", "--max-seq-len", "1"],
        r"the example has 2 tokens, more than --max-seq-len 1; pass --max-seq-len 2",
    ),
    (
        "token-outside-vocab",
        ["rasp", "{d}/s.rasp", "--compile", "s", "--vocab", "1,3"],
        r"the example \[1, 2\] has token\(s\) 2 outside --vocab 1,3; add them to --vocab",
    ),
    (
        "empty-vocab",
        ["rasp", "{d}/s.rasp", "--compile", "s", "--vocab", ","],
        r"--vocab ',' holds no tokens",
    ),
    (
        "compile-unknown-name",
        ["rasp", "{d}/s.rasp", "--compile", "nope"],
        r"unknown name 'nope'",
    ),
    (
        "nested-example",
        ["rasp", "{d}/s.rasp", "--example", "[[1, 2], [3]]", "--eval", "s"],
        r"--example \[\[1, 2\], \[3\]\]: the example must hold atoms \(numbers, strings, "
        r"bools\), but item 0 is the list \[1, 2\]",
    ),
    (
        "empty-example",
        ["rasp", "{d}/s.rasp", "--example", "[]", "--eval", "s"],
        r"--example \[\]: the example must not be empty",
    ),
    (
        "nested-input-in-eval",
        ["rasp", "{d}/s.rasp", "--eval", "s([[1], [2]])"],
        r"an s-op's input must hold atoms",
    ),
    ("max-steps-zero", ["rasp", "{d}/s.rasp", "--max-steps", "0"], r"--max-steps must be >= 1"),
    (
        "max-value-digits-not-a-number",
        ["rasp", "{d}/s.rasp", "--max-value-digits", "many"],
        r"argument --max-value-digits: invalid int value: 'many'",
    ),
    # -- rasp: files -----------------------------------------------------------------------
    (
        "rasp-file-missing",
        ["rasp", "{d}/missing.rasp"],
        r"cannot read '.*missing\.rasp': No such file or directory",
    ),
    ("rasp-file-is-a-folder", ["rasp", "{d}"], r"cannot read '.*': Is a directory"),
    (
        "rasp-file-not-utf8",
        ["rasp", "{d}/binary.rasp"],
        r"is not UTF-8 text: byte 0xff at offset 0 cannot be decoded",
    ),
    (
        "rasp-file-with-nul-bytes",
        ["rasp", "{d}/nul.rasp"],
        r"holds NUL bytes \(offset 6\): it is a binary file",
    ),
    (
        "rasp-load-of-binary-file",
        ["rasp", "{d}/load_binary.rasp"],
        r"load_binary\.rasp:1:6: '.*binary\.rasp' is not UTF-8 text",
    ),
    ("rasp-syntax-error", ["rasp", "{d}/syntax.rasp"], r"syntax\.rasp:2:24: unexpected '='"),
    # -- rasp: untrusted programs are bounded ----------------------------------------------
    (
        "for-loop-over-huge-range",
        ["rasp", "{d}/loop.rasp"],
        r"loop\.rasp:1:10: range with 100000000 items takes more steps than the \d+ left of "
        r"the budget \(10000000\); raise it with --max-steps",
    ),
    (
        "comprehension-over-huge-range",
        ["rasp", "{d}/comp.rasp"],
        r"range with 100000000 items takes more steps",
    ),
    (
        "huge-power",
        ["rasp", "{d}/pow.rasp"],
        r"9 \^ 99999999 would have about 95424250 digits, more than the limit of 4300; "
        r"raise it with --max-value-digits",
    ),
    (
        "repeated-squaring",
        ["rasp", "{d}/square.rasp"],
        r"the product would have about \d+ digits, more than the limit of 4300",
    ),
    (
        "huge-string-repeat",
        ["rasp", "{d}/repeat.rasp"],
        r"repeating a string or list of 2000000000 items takes more steps",
    ),
    (
        "huge-number-literal",
        ["rasp", "{d}/literal.rasp"],
        r"the number literal has 5000 digits, more than the limit of 4300",
    ),
    ("string-formatting", ["rasp", "{d}/format.rasp"], r"'%' takes numbers"),
    (
        "endless-recursion",
        ["rasp", "{d}/recurse.rasp"],
        r"the program nests too deeply \(recursion",
    ),
    (
        "step-budget-from-the-flag",
        ["rasp", "{d}/small_loop.rasp", "--max-steps", "60"],
        r"small_loop\.rasp:1:\d+: the run used up its budget of 60 steps",
    ),
    # -- report and info -------------------------------------------------------------------
    (
        "report-output-folder-missing",
        ["report", "matrix", "--op", "transpose", "--output", "{d}/no/such/m.md"],
        r"--output .*m\.md: the folder .*no/such does not exist; create it",
    ),
    (
        "report-output-is-a-folder",
        ["report", "matrix", "--op", "transpose", "--output", "{d}"],
        r"--output .*: is a folder; give a file path",
    ),
    (
        "report-unknown-op",
        ["report", "matrix", "--op", "transposee"],
        r"unknown operation\(s\) \['transposee'\]; choose from",
    ),
    (
        "report-all-out-is-a-file",
        ["report", "all", "--out", "{d}/s.rasp"],
        r"--out .*s\.rasp: is a file; give a folder",
    ),
    (
        "report-all-cost-json-missing",
        ["report", "all", "--out", "{d}/out", "--cost-json", "{d}/none.json"],
        r"--cost-json .*none\.json: no such file",
    ),
    (  # read before the report's minutes of work, named in the message
        "report-all-cost-json-not-json",
        ["report", "all", "--out", "{d}/out", "--cost-json", "{d}/binary.rasp"],
        r"--cost-json .*binary\.rasp is not a simulator_cost\.json .*utf-8",
    ),
    (
        "report-all-cost-json-no-rows",
        ["report", "all", "--out", "{d}/out", "--cost-json", "{d}/rows.json"],
        r"--cost-json .*rows\.json is not a simulator_cost\.json .*row 0 lacks 4 of the 5 keys",
    ),
    (
        "report-build-malformed",
        ["report", "simulator", "--builds", "1,2"],
        r"a build is N,D,H \(three integers",
    ),
    (
        "report-build-too-large",
        ["report", "simulator", "--builds", "100000,4,1"],
        r"the build 100000,4,1 reads a sequence of .* positions; running it needs at least",
    ),
    ("info-unknown-program", ["info", "make_hsit"], r"unknown program 'make_hsit'; did you"),
    (
        "info-token-outside-vocab",
        ["info", "make_hist", "--input", "a z"],
        r"token 'z' is not in this program's vocabulary",
    ),
    (
        "info-list-with-a-program",
        ["info", "--list", "make_hist"],
        r"--list lists every program, so the program name 'make_hist' would be ignored; leave it "
        r"out",
    ),
]


class _Code:
    """Unpickling this would create a folder: the test checks that it never happens."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bad_inputs")
    for name, text in RASP_FILES.items():
        (d / name).write_text(text)
    (d / "binary.rasp").write_bytes(b"\xff\xfe\x00 not text")
    (d / "nul.rasp").write_bytes(b"x = 1;\x00\n")
    (d / "rows.json").write_text('{"results": [{"max_n": 2}]}')
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(4, 2, dtype=torch.float64)
    torch.save(mha.state_dict(), d / "mha2.pt")
    torch.save(mha, d / "mha2_module.pt")
    enc = torch.nn.TransformerEncoderLayer(
        4, 2, 5, dropout=0.0, activation="gelu", norm_first=True, dtype=torch.float64
    )
    torch.save(enc.state_dict(), d / "enc.pt")
    torch.save(enc, d / "enc_module.pt")
    bad = {k: v.clone() for k, v in mha.state_dict().items()}
    bad["in_proj_weight"][0, 0] = float("nan")
    torch.save(bad, d / "nan.pt")
    (d / "junk.pt").write_bytes(b"\x00\x01 not a torch file")
    (d / "code.pt").write_bytes(pickle.dumps(_Code(str(d / "code_ran"))))
    torch.save([1, 2], d / "list.pt")
    return d


def _argv(argv: list[str], d: Path) -> list[str]:
    return [a.replace("{d}", str(d)) for a in argv]


@pytest.mark.parametrize("argv, pattern", [r[1:] for r in ERRORS], ids=[r[0] for r in ERRORS])
def test_bad_input_ends_in_one_clear_error(argv, pattern, files, capsys):
    status = main(_argv(argv, files))
    out, err = capsys.readouterr()
    assert status != 0
    assert "Traceback" not in out + err
    assert err.startswith("attnsim"), err
    assert re.search(pattern, err), err
    assert not (files / "code_ran").exists()  # nothing in a --module file is executed
    # the advice names the command's flags, not Python calls or keyword arguments
    message = err.splitlines()[-1] if "error:" not in err.splitlines()[0] else err
    assert not PYTHON_ADVICE.search(message), err


# what a message written for Python callers looks like ("build a larger U with
# simulator.build(max_n, ...)", "pass check=False", "use dtype=torch.float64")
PYTHON_ADVICE = re.compile(
    r"simulator\.build\(|check=False|dtype=|\b(max_n|max_d|max_heads|max_ff|score_bound|"
    r"logit_bound|value_bound|map_tolerance|max_seq_len|max_steps|layer_norm_eps)\b"
)


def test_the_error_table_is_large_and_its_ids_unique():
    ids = [r[0] for r in ERRORS]
    assert len(ids) >= 30 and len(set(ids)) == len(ids)


# -- valid but risky: the right result, against the torch module itself ----------------------


def _x(n: int, d: int, seed: int = 0) -> torch.Tensor:
    # the CLI's X: randn(n, d) from a generator seeded with --seed
    return torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _mha_oracle(d: Path) -> torch.Tensor:
    mha = torch.load(d / "mha2_module.pt", weights_only=False).eval()
    X = _x(2, 4)
    return mha(X, X, X, need_weights=False)[0]


def _encoder_oracle(d: Path) -> torch.Tensor:
    enc = torch.load(d / "enc_module.pt", weights_only=False).eval()
    return enc(_x(2, 4))  # unbatched: [seq, d]


RESULTS = [
    # a state_dict with the right --heads: the 2-head layer, not a 1-head one
    (
        "state-dict-with-heads",
        [*SIM, "--module", "{d}/mha2.pt", "--heads", "2", "--no-add-zero-attn"],
        _mha_oracle,
    ),
    # a whole module records its heads: no flag needed
    ("whole-module-reads-its-heads", [*SIM, "--module", "{d}/mha2_module.pt"], _mha_oracle),
    (
        "encoder-state-dict-with-every-fact",
        [*SIM, "--module", "{d}/enc.pt", "--heads", "2", "--activation", "gelu", "--norm-first"]
        + SD_FACTS,
        _encoder_oracle,
    ),
    (
        "encoder-module-reads-activation-and-norm",
        [*SIM, "--module", "{d}/enc_module.pt"],
        _encoder_oracle,
    ),
]


@pytest.mark.parametrize("argv, oracle", [r[1:] for r in RESULTS], ids=[r[0] for r in RESULTS])
def test_risky_but_valid_input_gives_the_right_result(argv, oracle, files, capsys):
    assert main(_argv([*argv, "--json"], files)) == 0
    out = json.loads(capsys.readouterr().out)
    want = oracle(files).detach()
    got = torch.tensor(out["simulated"], dtype=torch.float64)
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=1e-9, atol=1e-12), (got, want)
    # and a 1-head reading of the same weights would have been a different layer
    if "mha2" in argv[4]:
        one = torch.nn.MultiheadAttention(4, 1, dtype=torch.float64).eval()
        one.load_state_dict(torch.load(files / "mha2.pt", weights_only=True))
        X = _x(2, 4)
        assert not torch.allclose(one(X, X, X)[0], want, atol=1e-6)


# -- Ctrl-C and unexpected errors ----------------------------------------------------------


def test_ctrl_c_ends_in_one_line_and_status_130(files, capsys, monkeypatch):
    from attnsim.rasp.text import Runtime

    def interrupted(self, path):
        raise KeyboardInterrupt

    monkeypatch.setattr(Runtime, "run_file", interrupted)
    assert main(["rasp", str(files / "s.rasp")]) == 130
    out, err = capsys.readouterr()
    assert err == "attnsim rasp: interrupted (Ctrl-C)\n" and "Traceback" not in out


def test_a_bug_prints_a_short_line_and_debug_shows_the_traceback(files, capsys, monkeypatch):
    from attnsim.rasp.text import Runtime

    def broken(self, path):
        raise RuntimeError("an internal invariant failed")

    monkeypatch.setattr(Runtime, "run_file", broken)
    assert main(["rasp", str(files / "s.rasp")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines() == [
        "attnsim rasp: internal error: RuntimeError: an internal invariant failed",
        "  this is a bug in attnsim; rerun with --debug to see the traceback",
    ]
    with pytest.raises(RuntimeError, match="an internal invariant failed"):
        main(["rasp", str(files / "s.rasp"), "--debug"])


def test_help_returns_0_without_exiting(capsys):
    assert main(["simulate", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--heads" in out and "does not record" in out.replace("\n", " ")
