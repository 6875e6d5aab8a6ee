"""Bad inputs to the command line, round 2: each is the right result or one clear error.

Each test calls ``attnsim.cli.main(argv)`` in-process (the piped prompt: a subprocess) and
checks the exit status and the exact wording, or the result against an independent oracle
(the saved torch module, the RASP interpreter, a list's own indexing).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnsim.cli import build_parser, main
from attnsim.rasp.text import Runtime

ROOT = Path(__file__).resolve().parents[1]
SIM = ["simulate", "--max-n", "2"]
GIB = 2**30


def _x(n: int, d: int, seed: int = 0) -> torch.Tensor:
    # the CLI's X: randn(n, d) from a generator seeded with --seed
    return torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _error(argv: list[str], capsys) -> str:
    """The one error line of a run that must fail with status 2 (no traceback, no bug)."""
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == 2, (status, out, err)
    assert "Traceback" not in out + err and "internal error" not in err, err
    return err


# -- 1. a user's mistake is never an "internal error" ----------------------------------------


def test_a_text_file_as_module_is_not_a_torch_file(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("hello world\n")
    err = _error([*SIM, "--module", str(f)], capsys)
    assert err == (
        f"attnsim simulate: error: --module {f}: cannot be loaded: it is not a file written "
        f"by torch.save (neither a zip archive nor a pickle)\n"
    )


def test_a_state_dict_of_meta_tensors_is_refused(tmp_path, capsys):
    f = tmp_path / "meta.pt"
    torch.save(torch.nn.MultiheadAttention(4, 2, device="meta").state_dict(), f)
    err = _error([*SIM, "--module", str(f), "--heads", "2"], capsys)
    assert err == (
        f"attnsim simulate: error: --module {f}: in_proj_weight is a meta tensor (a shape "
        f"without values: the layer was built on device='meta' and never given weights); "
        f"save the state_dict of a layer whose weights are set\n"
    )


def test_a_state_dict_of_complex_weights_is_refused(tmp_path, capsys):
    f = tmp_path / "complex.pt"
    mha = torch.nn.MultiheadAttention(4, 2)
    torch.save({k: v.to(torch.complex64) for k, v in mha.state_dict().items()}, f)
    err = _error([*SIM, "--module", str(f), "--heads", "2"], capsys)
    assert err == (
        f"attnsim simulate: error: --module {f}: in_proj_weight holds complex numbers "
        f"(torch.complex64); the weights of a layer U simulates are real, and a conversion "
        f"would keep only their real parts: save real weights\n"
    )


@pytest.mark.parametrize("layer", ["attention", "encoder", "decoder"])
def test_a_huge_width_is_refused_before_anything_is_allocated(layer, capsys, monkeypatch):
    from attnsim.model import memory
    from attnsim.simulator import sampling, sampling_decoder

    def drawn(*args, **kwargs):
        raise AssertionError("the random target was drawn before the size was checked")

    for module, name in (
        (sampling, "random_attention"),
        (sampling, "random_encoder_layer"),
        (sampling_decoder, "random_decoder_layer"),
    ):
        monkeypatch.setattr(module, name, drawn)
    monkeypatch.setattr(memory, "available_memory", lambda: 16 * GIB)
    err = _error([*SIM, "--max-d", "100000", "--layer", layer], capsys)
    m = re.fullmatch(
        r"attnsim simulate: error: U for --max-n 2 --max-d 100000 --max-heads 1 reads a "
        r"sequence of ([\d,]+) positions; running it needs at least ([\d.]+) GiB of memory, "
        r"more than the 16\.0 GiB available; use smaller --max-n, --max-d or --max-heads\n",
        err,
    )
    assert m, err
    # the target's four [d, d] projections alone: 4 * 10^10 float64 values
    assert float(m.group(2)) * GIB >= 4 * 100_000**2 * 8


# -- 2. a state_dict's reconstruction says what it assumed, and flags set it ---------------


@pytest.fixture(scope="module")
def eps_layer(tmp_path_factory):
    d = tmp_path_factory.mktemp("eps")
    torch.manual_seed(5)
    enc = torch.nn.TransformerEncoderLayer(
        4, 2, 6, dropout=0.0, layer_norm_eps=0.3, dtype=torch.float64
    ).eval()
    torch.save(enc.state_dict(), d / "enc.pt")
    return enc, d / "enc.pt"


def _encoder_argv(path: Path) -> list[str]:
    argv = [*SIM, "--module", str(path), "--heads", "2", "--activation", "relu"]
    return [*argv, "--no-norm-first", "--no-add-zero-attn"]


def test_a_state_dict_run_needs_every_fact_it_cannot_tell(eps_layer, capsys):
    enc, path = eps_layer
    err = _error(_encoder_argv(path), capsys)
    assert err == (
        f"attnsim simulate: error: --module {path} is a state_dict of an "
        "nn.TransformerEncoderLayer, which does not record its LayerNorm eps; pass "
        "--layer-norm-eps EPS (torch's default is 1e-05)\n"
    )


def test_a_state_dict_run_prints_each_fact_and_its_source(eps_layer, capsys):
    enc, path = eps_layer
    assert main([*_encoder_argv(path), "--layer-norm-eps", "1e-5"]) == 0
    out = capsys.readouterr().out.splitlines()
    start = out.index(f"--module {path}: the layer simulated, fact by fact:")
    assert out[start + 1 : start + 11] == [
        "  heads           2  (--heads)",
        "  activation      relu  (--activation)",
        "  norm_first      False  (--no-norm-first)",
        "  layer_norm_eps  1e-05  (--layer-norm-eps)",
        "  add_zero_attn   False  (--no-add-zero-attn)",
        "  bias            True  (the file)",
        "  causal mask     False  (no --causal)",
        "  dropout         off  (simulated in eval mode)",
        "  batch_first     either  (X is one sequence [n, d])",
        "  T(X), U's output and the error below are those of this layer",
    ]
    assert out[start + 11] == "T(X) (plain torch, the layer above):"


def test_the_eps_flag_decides_and_gives_the_saved_layer(eps_layer, capsys):
    enc, path = eps_layer
    want = enc(_x(2, 4)).detach()  # the saved layer, eps 0.3
    assert main([*_encoder_argv(path), "--layer-norm-eps", "1e-5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["target"]["facts"]["layer_norm_eps"] == {
        "value": "1e-05",
        "from": "--layer-norm-eps",
    }
    got = torch.tensor(out["simulated"], dtype=torch.float64)
    assert not torch.allclose(got, want, atol=1e-6)  # eps matters: another eps, another layer
    assert main([*_encoder_argv(path), "--layer-norm-eps", "0.3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["target"]["facts"]["layer_norm_eps"] == {"value": "0.3", "from": "--layer-norm-eps"}
    got = torch.tensor(out["simulated"], dtype=torch.float64)
    assert torch.allclose(got, want, rtol=1e-9, atol=1e-12)


@pytest.fixture(scope="module")
def zero_attn(tmp_path_factory):
    d = tmp_path_factory.mktemp("zero")
    mha = torch.nn.MultiheadAttention(4, 2, add_zero_attn=True, dtype=torch.float64)
    torch.save(mha.state_dict(), d / "sd.pt")
    torch.save(mha, d / "module.pt")
    return d


def test_add_zero_attn_is_refused_where_it_is_known(zero_attn, capsys):
    said = (
        "built with add_zero_attn=True, which appends an all-zero key and value to every "
        "sequence: a position that is not part of X, and U does not simulate it; save a layer "
        "built with add_zero_attn=False\n"
    )
    sd, module = zero_attn / "sd.pt", zero_attn / "module.pt"
    err = _error([*SIM, "--module", str(sd), "--heads", "2", "--add-zero-attn"], capsys)
    assert err == "attnsim simulate: error: --add-zero-attn: an attention " + said
    err = _error([*SIM, "--module", str(module)], capsys)
    assert err == f"attnsim simulate: error: --module {module} holds an attention " + said
    err = _error([*SIM, "--module", str(module), "--no-add-zero-attn"], capsys)
    assert err == (
        f"attnsim simulate: error: --no-add-zero-attn disagrees with --module {module}: its "
        f"attention has add_zero_attn = True; leave the flag out or pass --add-zero-attn\n"
    )
    err = _error([*SIM, "--add-zero-attn"], capsys)
    assert err == (
        "attnsim simulate: error: --add-zero-attn/--no-add-zero-attn applies only to a "
        "--module state_dict; leave it out for random targets\n"
    )


def test_a_plain_mha_state_dict_runs_as_the_saved_layer(tmp_path, capsys):
    torch.manual_seed(6)
    mha = torch.nn.MultiheadAttention(4, 2, dtype=torch.float64).eval()
    torch.save(mha.state_dict(), tmp_path / "sd.pt")
    argv = [*SIM, "--module", str(tmp_path / "sd.pt"), "--heads", "2", "--no-add-zero-attn"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["target"]["facts"]["add_zero_attn"] == {
        "value": "False",
        "from": "--no-add-zero-attn",
    }
    X = _x(2, 4)
    want = mha(X, X, X, need_weights=False)[0].detach()
    assert torch.allclose(torch.tensor(out["simulated"], dtype=torch.float64), want, atol=1e-12)


# -- 3. help and messages that say what the code does --------------------------------------


def _help(command: str, capsys) -> str:
    assert main([command, "--help"]) == 0
    return " ".join(capsys.readouterr().out.split())


def test_verify_help_does_not_speak_of_a_module(capsys):
    text = _help("verify", capsys)
    assert "--module" not in text and "module's" not in text
    assert "largest width d U serves (default 4)" in text
    assert "--module's d" in _help("simulate", capsys)


def test_simulate_offers_only_the_layers_it_takes(capsys):
    text = _help("simulate", capsys)
    assert "attention, encoder, decoder:" in text and "llama" not in text
    err = _error([*SIM, "--layer", "llama"], capsys)
    assert err == (
        "attnsim simulate: error: argument --layer: invalid choice: 'llama' (choose from "
        "'attention', 'encoder', 'decoder') (see 'attnsim simulate --help')\n"
    )
    # verify still draws one kind of decoder layer
    assert build_parser().parse_args(["verify", "--layer", "llama"]).layer == "llama"


def test_an_activation_the_build_does_not_read_is_refused_before_building(capsys, monkeypatch):
    from attnsim.simulator import universal

    def built(*args, **kwargs):
        raise AssertionError("U was built before the flags were checked")

    monkeypatch.setattr(universal, "build", built)
    err = _error([*SIM, "--layer", "encoder", "--activation", "silu"], capsys)
    assert err == (
        "attnsim simulate: error: the target has the silu activation, which this U does not "
        "read; build U with --layer decoder (vector layout) for today's layers\n"
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_an_output_that_cannot_be_written_is_refused_before_the_work(capsys, monkeypatch):
    from attnsim.report import matrix_table as mt

    def work(*args, **kwargs):
        raise AssertionError("the work ran before the output was checked")

    monkeypatch.setattr(mt, "matrix_rows", work)
    err = _error(["report", "matrix", "--op", "transpose", "--output", "/dev/full"], capsys)
    assert err == (
        "attnsim report: error: --output /dev/full: cannot be written (No space left on "
        "device); choose another path\n"
    )


def test_a_missing_key_names_the_file_once(tmp_path, capsys):
    f = tmp_path / "partial.pt"
    torch.save({"in_proj_weight": torch.zeros(12, 4)}, f)
    err = _error([*SIM, "--module", str(f), "--heads", "2", "--no-add-zero-attn"], capsys)
    assert err.count(str(f)) == 1, err
    assert err.startswith(
        f"attnsim simulate: error: --module {f}: the weights do not fit a MultiheadAttention: "
    )
    assert 'Missing key(s) in state_dict: "out_proj.weight"' in err


def test_compile_prints_values_as_a_file_run_does(tmp_path, capsys):
    pytest.importorskip("attnsim.compiler")
    prog = tmp_path / "mean.rasp"
    prog.write_text(
        "set example [1, 2, 3];\ny = aggregate(select(indices, indices, <), tokens_int);\n"
    )
    rt = Runtime()
    rt.run_file(prog)
    typed = rt.values("y")  # the interpreter's values, with the original's int/float types
    assert [type(v) for v in typed] == [int, int, float] and typed == [0, 1, 1.5]
    assert main(["rasp", str(prog), "--compile", "y"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2:5] == [
        "interpreted: [0, 1, 1.5]",  # as the file run shows y: [0, 1, 1.5] (floats)
        "compiled:    [0, 1, 1.5]",
        "compiled == interpreted: yes",
    ]


# -- 4. a checkpoint is its folder -----------------------------------------------------------


def test_loading_model_json_says_to_load_its_folder(tmp_path):
    pytest.importorskip("attnsim.compiler")
    from attnsim import rasp
    from attnsim.compiler import compile_program
    from attnsim.model.compiled import CompiledModel

    model = compile_program(rasp.Map(lambda x: x + 1, rasp.tokens), vocab=[1, 2], max_seq_len=2)
    folder = tmp_path / "ckpt"
    model.save(folder)
    with pytest.raises(FileNotFoundError) as info:
        CompiledModel.load(folder / "model.json")
    assert str(info.value) == (
        f"{folder / 'model.json'} is a file; a checkpoint is the folder CompiledModel.save "
        f"wrote (with model.json and its weights): load the folder {folder}"
    )
    assert CompiledModel.load(folder).run([2, 1]) == model.run([2, 1])


# -- 5. textual RASP: bounded output, whole numbers, list semantics, confined loads --------


def test_what_one_statement_prints_is_bounded(tmp_path, capsys):
    prog = tmp_path / "double.rasp"
    prog.write_text("x = [1];\nfor i in range(30) { x = x + x; }\n")
    status = main(["rasp", str(prog), "--max-output-chars", "1000"])
    out, err = capsys.readouterr()
    assert status == 2 and "Traceback" not in err
    first, loop = out.split("\n", 1)
    assert first == "     list: x = [1]"  # the first statement, whole
    assert len(loop) <= 1000 + 1  # the loop, one statement: what fits, then a newline
    assert loop.startswith("     list: x = [1, 1]\n")
    assert err == (
        f"attnsim rasp: error: {prog}:2:22: this statement printed more than 1,000 "
        f"characters, so its output is cut there\n"
        "    for i in range(30) { x = x + x; }\n"
        "                         ^\n"
        "  print less (assign without printing inside loops, turn examples off), or raise the "
        "limit with --max-output-chars\n"
    )


def test_the_output_limit_is_the_librarys_default():
    from attnsim.cli import rasp_text
    from attnsim.rasp.text import limits

    assert rasp_text.DEFAULT_MAX_OUTPUT_CHARS == limits.Limits().max_output_chars


def test_a_long_number_in_an_error_is_shortened_and_says_its_length(tmp_path, capsys):
    prog = tmp_path / "big.rasp"
    prog.write_text("x = 10^400;\ny = [1, 2][x];\n")
    err = _error(["rasp", str(prog)], capsys)
    assert err.splitlines()[0] == (
        f"attnsim rasp: error: {prog}:2:5: index 10000000000000000...00000 (401 digits) is "
        f"out of range for a list of length 2"
    )
    assert not re.search(r"\d{41}", err)


@pytest.mark.parametrize("i", [5, 100, -6])
def test_an_sop_index_outside_the_input_is_an_error_as_for_a_list(i, tmp_path, capsys):
    prog = tmp_path / "idx.rasp"
    prog.write_text(f"y = tokens[{i}];\n")
    with pytest.raises(IndexError):  # the oracle: a list of the 5 example tokens
        list("hello")[i]
    err = _error(["rasp", str(prog)], capsys)
    assert err.splitlines()[0] == (
        f"attnsim rasp: error: {prog}:1:1: y cannot be shown on the running example: "
        f"tokens[{i}]: index {i} is out of range for an input of length 5"
    )
    rt = Runtime()
    rt.run("y = tokens[0];")  # inside the input: the token there
    assert rt.values("y") == ["h"] * 5


@pytest.mark.parametrize("i", [0, 4, -1, -5])
def test_an_sop_index_inside_the_input_is_the_lists_item(i):
    rt = Runtime()
    rt.run(f"y = tokens[{i}];")
    assert rt.values("y", "hello") == [list("hello")[i]] * 5
    if i in (4, -5):  # outside "abc"
        with pytest.raises(Exception, match=rf"tokens\[{i}\]: index {i} is out of range for an"):
            rt.values("y", "abc")


def _load_files(tmp_path: Path) -> Path:
    (tmp_path / "lib.rasp").write_text("z = 1;\n")
    sub = tmp_path / "prog"
    (sub / "deeper").mkdir(parents=True)
    (sub / "deeper" / "inner.rasp").write_text("w = 2;\n")
    (sub / "up.rasp").write_text('load "../lib";\n')
    (sub / "abs.rasp").write_text(f'load "{tmp_path / "lib"}";\n')
    (sub / "down.rasp").write_text('load "deeper/inner";\nv = w;\n')
    return sub


@pytest.mark.parametrize("name, shown", [("up.rasp", '"../lib"'), ("abs.rasp", None)])
def test_load_stays_in_the_programs_folder(name, shown, tmp_path, capsys):
    sub = _load_files(tmp_path)
    shown = shown or f'"{tmp_path / "lib"}"'
    err = _error(["rasp", str(sub / name)], capsys)
    assert err == (
        f"attnsim rasp: error: {sub / name}:1:6: load {shown} reaches outside the program's "
        f"folder '{sub.resolve()}' (to '{(tmp_path / 'lib.rasp').resolve()}')\n"
        f"    load {shown};\n"
        f"         ^\n"
        "  a program loads only files in its own folder and below; copy the file there, or "
        "allow it with --allow-load-outside\n"
    )
    assert main(["rasp", str(sub / name), "--allow-load-outside", "--eval", "z"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "z = 1"


def test_load_below_the_programs_folder_is_allowed(tmp_path, capsys):
    sub = _load_files(tmp_path)
    assert main(["rasp", str(sub / "down.rasp"), "--eval", "v"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "v = 2"


def test_an_empty_vocab_item_is_refused_and_an_empty_token_can_be_given(tmp_path, capsys):
    prog = tmp_path / "p.rasp"
    prog.write_text('set example "hello";\ns = tokens;\n')
    err = _error(["rasp", str(prog), "--compile", "s", "--vocab", "h,e,l,,o"], capsys)
    assert err == (
        "attnsim rasp: error: --vocab 'h,e,l,,o': item 4 is empty (two commas in a row, or "
        'one at an end); remove the extra comma, or write "" for the empty string as a token\n'
    )
    from attnsim.cli.rasp_text import _vocab_tokens

    assert _vocab_tokens('h,e,"",l, o') == ["h", "e", "", "l", "o"]


@pytest.mark.parametrize("flag", ["--eval", "--compile", "--example"])
def test_an_empty_eval_compile_or_example_is_refused(flag, tmp_path, capsys):
    prog = tmp_path / "p.rasp"
    prog.write_text("s = tokens;\n")
    err = _error(["rasp", str(prog), flag, ""], capsys)
    assert err.startswith(f"attnsim rasp: error: {flag} '' is empty; give one, e.g. {flag} ")


def test_a_piped_prompt_prints_only_what_the_statements_print():
    run = subprocess.run(
        [sys.executable, "-m", "attnsim", "repl"],
        input="set example [1, 2];\nx = tokens_int + 1;\n",
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    lines: list[str] = []
    want = Runtime(echo=True, out=lines.append)  # the oracle: the same statements, echoed
    want.run("set example [1, 2];\nx = tokens_int + 1;\n", "<stdin>")
    assert run.stdout.splitlines() == lines
    assert ">>" not in run.stdout and "RASP (attnsim)" not in run.stdout


def _piped(text: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attnsim", "repl"],
        input=text,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
        timeout=120,
    )


@pytest.mark.parametrize(
    "text, where, why",
    [
        ("set example [1, 2];\nx = tokens_int + \n", "<stdin>:2:", "ends in the middle"),
        ("def f(a) {\n return a;\n", "<stdin>:2:", "expected '}'"),
    ],
)
def test_a_piped_prompt_ending_in_a_statement_says_so_and_fails(text, where, why):
    # as attnsim rasp on the same text: the statement is not dropped in silence
    run = _piped(text)
    assert run.returncode == 2, run.stdout + run.stderr
    assert where in run.stdout and why in run.stdout, run.stdout


def test_a_piped_prompt_names_the_input_line_and_fails_after_a_failed_statement():
    run = _piped("set example [1, 2];\nx = tokens_int + 1;\n\ny = x +* 2;\nz = x - 1;\n")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "<stdin>:4:8: unexpected '*'" in run.stdout, run.stdout
    assert "s-op: z" in run.stdout  # the statements after it still run


# -- 6. "raised by attnsim" is read from module names, not folder names ---------------------


def test_a_user_function_in_a_folder_named_attnsim_is_not_attnsim(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import fuzz_programs as fp
    finally:
        sys.path.pop(0)
    folder = tmp_path / "attnsim" / "tests"
    folder.mkdir(parents=True)
    (folder / "user_code.py").write_text(
        "def fail():\n    raise TypeError('a user function failed with a long enough message')\n"
    )
    spec = importlib.util.spec_from_file_location("user_code", folder / "user_code.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        module.fail()
    except TypeError as exc:
        assert not fp.raised_by_attnsim(exc) and not fp.is_clear_error(exc)
    from attnsim import rasp

    try:
        rasp.Map(1, rasp.tokens)
    except TypeError as exc:
        assert fp.raised_by_attnsim(exc) and fp.is_clear_error(exc)


# -- 7. what the CLI prints reads at 80 columns ----------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [["info", "make_shuffle_dyck"], ["info", "--list"], ["info", "make_sort_freq"]],
    ids=["info-shuffle-dyck", "info-list", "info-sort-freq"],
)
def test_info_reads_at_80_columns(argv, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(argv) == 0
    wide = capsys.readouterr().out
    monkeypatch.setenv("COLUMNS", "80")
    assert main(argv) == 0
    narrow = capsys.readouterr().out
    assert max(len(line) for line in narrow.splitlines()) <= 80
    assert narrow != wide or max(len(line) for line in wide.splitlines()) <= 80
    # the same words in the same order: lines go on, nothing is cut (labels' ids aside)
    assert re.sub(r"#\d+", "#", narrow).split() == re.sub(r"#\d+", "#", wide).split()


@pytest.mark.parametrize(
    "argv",
    [
        [*SIM, "--max-d", "2", "--layer", "encoder"],
        ["verify", "--max-n", "3", "--max-d", "4", "--max-heads", "2", "--targets", "2"],
    ],
    ids=["simulate-encoder", "verify"],
)
def test_simulate_and_verify_read_at_80_columns(argv, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(argv) == 0
    out = capsys.readouterr().out
    # every line fits, but for a list longer than a line: it stays whole, on a line of its
    # own with its label (tests/test_cli_readability.py, B2)
    long = [line for line in out.splitlines() if len(line) > 80]
    assert all(re.fullmatch(r"  heads per layer \[(\d+, )+\d+\]", line) for line in long), long
    assert "max relative error" in out and "parameters=" in out


@pytest.mark.parametrize(
    "command",
    [[], ["simulate"], ["verify"], ["rasp"], ["repl"], ["info"], ["report"], ["report", "matrix"]],
    ids=lambda c: " ".join(c) or "attnsim",
)
def test_help_reads_at_80_columns_with_flags_whole(command, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main([*command, "--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80, [x for x in lines if len(x) > 80]
    assert not [x for x in lines if re.search(r"\w-$", x)]  # no flag split at a hyphen


def test_a_reader_that_leaves_ends_the_run_quietly(capsys, monkeypatch):
    from attnsim.cli import info

    def gone(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(info, "run", gone)
    assert main(["info", "--list"]) == 141  # as a shell reports SIGPIPE
    assert capsys.readouterr().err == ""  # not "cannot open: Broken pipe"
