"""dtype="auto": float32 exactly where the compiler proves every value exact, else float64.

The oracle is the same program compiled in float64: on many random inputs of every length
the auto-chosen model must decode exactly the same outputs (and fail its run-time checks on
exactly the same inputs).
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
import torch

from attnsim import rasp
from attnsim.compiler import CompileOptions, compile_program
from attnsim.compiler import precision as P
from attnsim.model.compiled import Report
from attnsim.rasp import library
from attnsim.tasks import match2, parity

PAIRS = [(0, False), (0, True), (1, False), (1, True)]

# the library programs that compile in float32 at their registry lengths (the rest need
# float64: their numerical means average several keys, or, for make_reverse, the
# selector-width length is read as a number, whose float32 rounding no check tolerates)
FLOAT32_LIBRARY = {
    "make_length",
    "make_hist",
    "make_sort_unique",
    "make_sort",
    "make_sort_freq",
    "shift_by",
    "detect_pattern",
    "make_count_less_freq",
    "make_count",
    "make_nary_sequencemap",
    "sort",
    "sort_by_most_freq",
    "shift",
    "mark_first_instance",
    "mark_last_instance",
    "minimum",
    "maximum",
    "load_from_location",
}

# programs that compile at max_seq_len 40 and 80 in about a second or less
LONG = [
    name
    for name in library.PROGRAMS
    if name
    not in {
        "sort_by_most_freq",  # its selector table is too large there (in any dtype)
        "count",  # its mean reads values float rounding cannot tell apart (in any dtype)
        "make_sort_freq",
        "make_shuffle_dyck",
        "make_shuffle_dyck2",
        "make_dyck1_ptf",
        "make_dyck2_ptf",
        "make_dyck3_ptf",
        "sort",
    }
]


def _inputs(vocab, max_seq_len, fixed, per_length, seed):
    """Equal-length batches: every input where there are few, else ``per_length`` random."""
    rng = random.Random(seed)
    lengths = [max_seq_len] if fixed else range(1, max_seq_len + 1)
    for n in lengths:
        if len(vocab) ** n <= per_length:
            yield [list(t) for t in itertools.product(vocab, repeat=n)]
        else:
            yield [[rng.choice(vocab) for _ in range(n)] for _ in range(per_length)]


def _outcome(model, batch):
    try:
        return model.run(batch)
    except ValueError:  # a run-time check (or a refused input): per input, which one fails
        out = []
        for xs in batch:
            try:
                out.append(model.run(xs))
            except ValueError as exc:
                out.append(type(exc).__name__)
        return out


def _same_outputs(auto, f64, vocab, per_length, seed=0):
    assert auto.fixed_length == f64.fixed_length
    n = 0
    for batch in _inputs(list(vocab), f64.max_seq_len, f64.fixed_length, per_length, seed):
        got, want = _outcome(auto, batch), _outcome(f64, batch)
        assert got == want, (batch, got, want)
        n += len(batch)
    return n


def _compile(name, max_seq_len=None, **kw):
    e = library.PROGRAMS[name]
    return compile_program(
        e.factory(), vocab=e.vocab, max_seq_len=max_seq_len or e.max_seq_len, **kw
    )


@pytest.mark.parametrize("name", list(library.PROGRAMS))
def test_library_auto_matches_float64(name):
    auto, f64 = _compile(name), _compile(name, dtype=torch.float64)
    chosen = auto.report().dtype
    assert auto.model.dtype == (torch.float32 if chosen == "float32" else torch.float64)
    assert f64.model.dtype == torch.float64
    assert (chosen == "float32") == (name in FLOAT32_LIBRARY), auto.report().precision
    assert _same_outputs(auto, f64, library.PROGRAMS[name].vocab, per_length=48) > 48


# 40 is past float32's reach (28) already; 80 too, in `make bench` (a sweep: 26 s on CI)
@pytest.mark.parametrize("max_seq_len", [40, pytest.param(80, marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", LONG)
def test_library_auto_matches_float64_long(name, max_seq_len):
    auto = _compile(name, max_seq_len)
    f64 = _compile(name, max_seq_len, dtype="float64")
    # the selector width's steps are 1/(L (L + 1)) apart: too close for float32 beyond 28
    if auto.report().dtype == "float32":
        assert name in FLOAT32_LIBRARY
    _same_outputs(auto, f64, library.PROGRAMS[name].vocab, per_length=3, seed=max_seq_len)


def test_the_brief_programs_choose_float32():
    for name in ("make_hist", "make_length", "shift_by", "make_sort_unique", "detect_pattern"):
        assert _compile(name).report().dtype == "float32", name
    # make_reverse reads the length (a selector width) as a number: float64
    reason = _compile("make_reverse").report().dtype_reason
    assert reason.startswith("`length` is read as a number but carries float32 rounding")


def test_selector_width_gap_rule():
    # gaps 1/(L (L + 1)) must exceed 1e4 float32 epsilons (1.19e-3): L = 28 passes, 29 not
    assert _compile("make_length", 28).report().dtype == "float32"
    r = _compile("make_length", 29).report()
    assert r.dtype == "float64"
    assert r.dtype_reason == (
        "`length`: the selector width's 1/(w+1) is read by steps between values 0.00115 "
        "apart, not more than 10000 float32 epsilons x 1 (0.00119)"
    )
    # a selector over positions only needs no width: shift_by stays float32 at any length
    assert _compile("shift_by", 80).report().dtype == "float32"


def test_frac_prevs_and_softmax_choose_float64():
    r = _compile("make_frac_prevs").report()
    assert r.dtype == "float64"
    assert r.dtype_reason == "`frac_prevs` averages several keys (fractions such as 0.125)"
    assert r.precision.startswith("float64: `frac_prevs` averages several keys")
    for name in library.PROGRAMS:
        try:
            m = _compile(name, attention="softmax")
        except NotImplementedError:
            continue
        assert m.model.dtype == torch.float64, name
        assert m.report().dtype_reason == "softmax attention: its weights are not exact"


TASKS = {
    "match2": (lambda: match2.match2(5), list(range(5)), 4, "float32"),
    "parity": (parity.parity, [0, 1], 5, "float64"),
    "k_parity": (parity.k_parity, PAIRS, 5, "float64"),
}


@pytest.mark.parametrize("task", list(TASKS))
def test_tasks_auto_matches_float64(task):
    build, vocab, n, want = TASKS[task]
    auto = compile_program(build(), vocab=vocab, max_seq_len=n, fixed_length=True)
    f64 = compile_program(
        build(), vocab=vocab, max_seq_len=n, fixed_length=True, dtype=torch.float64
    )
    assert auto.report().dtype == want, auto.report().precision
    if want == "float64":
        assert "sums as a mean (a fraction) times a count" in auto.report().dtype_reason
    # every input of the fixed length
    assert _same_outputs(auto, f64, vocab, per_length=10**4) == len(vocab) ** n


def test_real_valued_program_chooses_float64():
    x = rasp.numerical(rasp.tokens)
    m = compile_program(rasp.numerical(x * 2 + 1), vocab=None, max_seq_len=4)
    assert m.model.dtype == torch.float64
    assert m.report().dtype_reason == "real-valued tokens (vocab=None)"
    # a finite vocabulary of non-integers: the numbers are not integers
    m = compile_program(rasp.numerical(x * 2), vocab=[0.5, 1.5], max_seq_len=4)
    assert m.report().dtype == "float64"
    assert "not an integer within 2^24" in m.report().dtype_reason


def test_integer_numerical_mean_of_one_key_is_float32():
    # each query reads one key (the previous position): integer means, exact in float32
    prev = rasp.Select(rasp.indices, rasp.indices - 1, rasp.Comparison.EQ)
    prog = rasp.numerical(rasp.Aggregate(prev, rasp.numerical(rasp.tokens), default=0))
    auto = compile_program(prog.named("prev"), vocab=[0, 3, 7], max_seq_len=6)
    f64 = compile_program(prog, vocab=[0, 3, 7], max_seq_len=6, dtype=torch.float64)
    assert auto.report().dtype == "float32", auto.report().precision
    _same_outputs(auto, f64, [0, 3, 7], per_length=10**3)


def test_report_shows_the_dtype():
    r = _compile("make_hist").report()
    assert r.dtype == "float32"
    assert r.dtype_reason == P.EXACT
    lines = str(r).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  dtype: "))
    shown = " ".join(lines[start].split())  # the line and its continuations (80 columns)
    for more in lines[start + 1 :]:
        if not more.startswith("    "):
            break
        shown += " " + " ".join(more.split())
    assert shown == f"dtype: float32: {P.EXACT}"
    d = r.to_dict()
    assert d["dtype"] == "float32" and Report(**d).precision == r.precision
    # a report saved before the field existed still loads, and shows no dtype line
    old = {k: v for k, v in d.items() if k not in ("dtype", "dtype_reason")}
    assert "dtype:" not in str(Report(**old))


def test_explicit_dtypes_keep_working():
    m = _compile("make_frac_prevs", dtype=torch.float32)  # asked for: allowed, not exact
    assert m.model.dtype == torch.float32
    assert m.report().dtype_reason.startswith(
        "as asked (dtype=float32); float32 is not proven exact: `frac_prevs` averages"
    )
    m = _compile("make_hist", dtype="float64")
    assert m.model.dtype == torch.float64
    assert m.report().dtype_reason.startswith("as asked (dtype=float64); float32 would be exact")
    assert _compile("make_hist", dtype="float32").model.dtype == torch.float32
    assert _compile("make_hist", dtype="auto").model.dtype == torch.float32
    assert CompileOptions().dtype == "auto"
    assert CompileOptions(dtype="float64").dtype is torch.float64
    # the same dtype as a string and a torch dtype is one value, not a clash
    opts = CompileOptions(dtype=torch.float32)
    assert _compile("make_hist", options=opts, dtype="float32").model.dtype == torch.float32


CHOICES = "torch.float64 or torch.float32, or one of the strings 'auto', 'float64', 'float32'"


@pytest.mark.parametrize(
    "bad, error",
    [
        ("half", ValueError),
        ("Float32", ValueError),
        (torch.float16, ValueError),
        (torch.int64, ValueError),
        (32, TypeError),
        (np.float32, TypeError),
        (None, TypeError),
    ],
)
def test_bad_dtypes_are_refused(bad, error):
    with pytest.raises(error, match="dtype must be " + CHOICES.replace(".", r"\.")):
        CompileOptions(dtype=bad)
    with pytest.raises(error, match="dtype must be " + CHOICES.replace(".", r"\.")):
        _compile("make_hist", dtype=bad)


def test_float32_weights_are_the_float64_ones_rounded():
    auto, f64 = _compile("make_sort_unique"), _compile("make_sort_unique", dtype="float64")
    assert auto.report().resources() == f64.report().resources()
    for (name, a), (_, b) in zip(auto.model.state_dict().items(), f64.model.state_dict().items()):
        assert a.dtype == torch.float32 and b.dtype == torch.float64
        assert torch.equal(a, b.float()), name  # the float64 weights, rounded once


def test_float32_selector_width_at_its_longest_length_decodes_every_width():
    # max_seq_len 28 is the longest float32 length of a selector width: a step's rounding
    # is relative to its input's whole range (an input far above a step's threshold gives
    # a large pre-activation that the step's two units cancel), not to the values near it
    m = _compile("make_length", 28)
    assert m.model.dtype == torch.float32
    xs = [["a"] * n for n in range(1, 29)]
    got = [m.run([x])[0] for x in xs]
    assert got == [[len(x)] * len(x) for x in xs]
    e = library.PROGRAMS["make_hist"]
    m = compile_program(e.factory(), vocab=e.vocab, max_seq_len=28)
    assert m.model.dtype == torch.float32
    xs = [[e.vocab[0]] * k + [e.vocab[1]] * (28 - k) for k in range(29)]
    assert m.run(xs) == rasp.evaluate(e.factory(), xs)
