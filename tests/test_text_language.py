"""Syntax, precedence, semantics and errors of the textual RASP language."""

from __future__ import annotations

import pytest

from attnsim.rasp.text import RASPTextError, Runtime, evaluate_text, is_incomplete, parse
from attnsim.rasp.text.errors import OpError


def ev(expr: str, xs=None, setup: str = ""):
    rt = Runtime()
    if setup:
        rt.run(setup)
    value = rt.eval(expr)
    return value if isinstance(value, str) else rt.values(value, xs)


# -- precedence follows the original grammar (earlier alternatives bind tighter) -----------
@pytest.mark.parametrize(
    "expr, want",
    [
        ("2 + 3 * 4", 14),
        ("2 ^ 3 ^ 2", 64),  # left-associative power
        ("-2 ^ 2", 4),  # unary minus binds tighter than ^
        ("7 % 2 * 3", 1),  # % is below * and /: 7 % (2 * 3)
        ("2 * 7 % 4", 2),
        ("10 - 2 - 3", 5),
        ("not 1 == 0", False),  # (not 1) == 0 -> False == 0 -> True? no: False == 0 is True
        ("True or False and False", False),  # (True or False) and False
        ("1 if False else 2 if True else 3", 2),
        ("1 + 1 in [2]", True),  # in binds loosest
        ("2 ^ 0.5", 2**0.5),
        ("7 / 2", 3.5),
        ("[x * x for x in range(4)]", [0, 1, 4, 9]),
        ("{k: v for k, v in zip([1, 2], [3, 4])}", {1: 3, 2: 4}),
        ("len([1, 2, 3])", 3),
        ('"ab"[1]', "b"),
        ("{1: 2}[1]", 2),
        ("range(1, 7, 2)", [1, 3, 5]),
        ("round(2.5)", 2),
        ("abs(-3)", 3),
    ],
)
def test_atom_expressions(expr, want):
    got = ev(expr)
    if expr == "not 1 == 0":
        want = True  # (not 1) == 0 is False == 0, which Python says is True
    assert got == want
    assert type(got) is type(want)


def test_unary_not_binds_tighter_than_comparison():
    # (not tokens_int) == 0, not (tokens_int == 0)
    assert ev("not tokens_int == 0", [0, 2]) == [False, True]


# -- s-op semantics --------------------------------------------------------------------
def test_select_tests_key_op_query():
    # keys with index < 1: only key 0, for every query
    m = ev("select(indices, 1, <)", "abc")
    assert m == [[True, False, False]] * 3
    # 1 > query index: only query 0 selects, every key
    m = ev("select(1, indices, >)", "abc")
    assert m == [[True, True, True], [False] * 3, [False] * 3]


def test_aggregate_is_the_mean_with_the_original_types():
    assert ev("aggregate(select(indices, indices, <=), tokens_int)", [2, 4, 9]) == [2, 3.0, 5.0]
    # an empty selection gives 0 (an int), a single one the value itself
    assert ev("aggregate(select(indices, indices, <), tokens_int)", [2, 4, 9]) == [0, 2, 3.0]
    assert ev('aggregate(select(indices, 5, ==), tokens, "-")', "ab") == ["-", "-"]
    assert ev("aggregate(select(indices, 0, ==), tokens_bool)", [1, 0]) == [True, True]


def test_arithmetic_on_an_aggregate_past_2_53_raises_rather_than_round():
    agg = "a = aggregate(select(indices, indices, ==), tokens_int); "
    rt = Runtime()
    rt.run(agg + "b = a ^ 34 % 10; c = a ^ 53; d = tokens_int ^ 34 % 10;")
    # the original's ints: 3 ^ 34 is 16677181699666569 (last digit 9); float64 holds
    # 16677181699666568, so the aggregate's arithmetic is refused, not rounded
    with pytest.raises(OpError, match="16677181699666569 .*float64 rounds"):
        rt.values("b", [3, 2])
    assert rt.values("d", [3, 2]) == [3**34 % 10, 2**34 % 10]  # categorical: exact ints
    assert rt.values("c", [2, 1]) == [2**53, 1]  # a power of two float64 holds
    assert ev("aggregate(select(indices, indices, ==), tokens_int) ^ 2 % 7", [3, 5]) == [2, 4]


def test_integer_and_float_typing():
    rt = Runtime()
    rt.run("a = tokens_int + 1; b = tokens_int / 1; c = round(tokens_float); d = length ^ 0.5;")
    vals = {k: rt.values(k, [1, 2, 3, 4]) for k in "abcd"}
    assert [type(v) for v in vals["a"]] == [int] * 4
    assert [type(v) for v in vals["b"]] == [float] * 4
    assert [type(v) for v in vals["c"]] == [int] * 4
    assert vals["d"] == [2.0] * 4 and type(vals["d"][0]) is float


def test_elementwise_operators_on_sops():
    xs = [3, -1, 4]
    assert ev("tokens_int % 2", xs) == [1, 1, 0]
    assert ev("-tokens_int", xs) == [-3, 1, -4]
    assert ev("tokens_int ^ 2", xs) == [9, 1, 16]
    assert ev("abs(tokens_int)", xs) == [3, 1, 4]
    assert ev("indicator(tokens_int > 0)", xs) == [1, 0, 1]
    assert ev("tokens_int != 4", xs) == [True, True, False]
    assert ev('"x" if tokens_int > 0 else "y"', xs) == ["x", "y", "x"]
    assert ev("tokens_int in [3, 4]", xs) == [True, False, True]
    assert ev("4 in tokens_int", xs) == [True] * 3
    # over the always-true selector, as the original's, whatever a program binds to full_s
    rebound = "full_s = select(indices, indices, ==);"
    assert ev("4 in tokens_int", xs, rebound) == [True] * 3
    assert ev("f(1)", xs, "def f(full_s) { return 4 in tokens_int; }") == [True] * 3
    assert ev('tokens_str + "!"', xs) == ["3!", "-1!", "4!"]
    assert ev("tokens_int[1]", xs) == [-1] * 3
    assert ev("(tokens_int > 0) and (tokens_int < 4)", xs) == [True, False, False]


def test_selector_logic():
    m = ev("not (select(indices, indices, <=) and select(indices, 0, >))", "abc")
    assert m == [[True, True, True], [True, False, True], [True, False, False]]


def test_functions_scopes_and_multi_assignment():
    rt = Runtime()
    rt.run(
        """
        offset = 10;
        def f(a, b) { c = a + b + offset; return c, c * 2; }
        x, y = f(1, 2);
        p, q = [5, 6];
        def fact(n) { return 1 if n == 0 else n * fact(n - 1); }
        z = fact(5);
        """
    )
    assert (rt.get("x"), rt.get("y"), rt.get("p"), rt.get("q"), rt.get("z")) == (13, 26, 5, 6, 120)
    with pytest.raises(RASPTextError, match="unknown name 'c'"):
        rt.run("c;")


def test_for_loop_binds_in_the_current_scope():
    rt = Runtime()
    rt.run("total = 0; for a, b in [[1, 2], [3, 4]] { total = total + a * b; }")
    assert rt.get("total") == 14 and rt.get("a") == 3


def test_load_exports_public_names_only(tmp_path):
    (tmp_path / "lib.rasp").write_text("_secret = 3; def g(x) { return x + _secret; } pub = 1;")
    (tmp_path / "main.rasp").write_text('load "lib";\nv = g(1);\n')
    rt = Runtime()
    rt.run_file(tmp_path / "main.rasp")
    assert rt.get("v") == 4 and rt.get("pub") == 1
    with pytest.raises(RASPTextError, match="unknown name '_secret'"):
        rt.get("_secret")


def test_library_fixes_and_names():
    assert evaluate_text('m = mark_first_instance(tokens, "a");', "m", "baba") == [
        False,
        True,
        False,
        False,
    ]
    assert evaluate_text("a = average(tokens_int);", "a", [1, 2]) == [1.5, 1.5]
    assert evaluate_text('h = has_focus(select(tokens, "z", ==));', "h", "za") == [True, True]


def test_set_example_forms():
    rt = Runtime()
    rt.run('xs = [1, 2]; set example xs\nset s-op example "ab"\nset selector example [7]')
    assert rt.seq_example == "ab" and rt.sel_example == [7]
    rt.run("set example [4, 5, 6]; examples off; s-op examples on; full seq display on")
    assert rt.example == [4, 5, 6] and rt.show_seq_examples and not rt.show_sel_examples
    assert rt.full_seq_display


# -- display as the original REPL ------------------------------------------------------------
def test_repl_display_matches_the_original_format():
    out: list[str] = []
    rt = Runtime(echo=True, out=out.append)
    rt.run(
        'c = indices + 1; a = 3; s = "x"; show example\nlength; set example [1, 2]\n'
        "sel = select(indices, indices, <);"
    )
    assert out[0] == "     s-op: c"
    assert out[1] == ' \t Example: c("hello") = [1, 2, 3, 4, 5] (ints)'
    assert out[2] == "     value: a =  3"
    assert out[3] == '     value: s =  "x"'
    assert out[4:6] == ['\ts-op example: "hello"', '\tselector example: "hello"']
    assert out[6:8] == ["     s-op: out", ' \t Example: out("hello") = [5]*5 (ints)']
    assert out[8:] == [
        "     selector: sel",
        " \t Example:",
        " \t\t\t     1 2",
        " \t\t\t 1 |    ",
        " \t\t\t 2 | 1  ",
    ]


def test_display_failure_on_the_example_is_reported_with_its_location():
    rt = Runtime(echo=True, out=lambda line: None)
    with pytest.raises(RASPTextError) as info:
        rt.run("x = 1;\nf = tokens_int;")
    msg = str(info.value)
    assert msg.startswith("<string>:2:1: f cannot be shown on the running example")
    assert "invalid literal for int()" in msg and "set example" in msg


# -- errors ------------------------------------------------------------------------------
def error_of(source: str, filename: str = "prog.rasp") -> str:
    with pytest.raises(RASPTextError) as info:
        Runtime().run(source, filename)
    return str(info.value)


def test_syntax_error_names_the_place_the_text_and_what_was_expected():
    msg = error_of("a = 1;\nb = select(indices, 0, =);")
    lines = msg.splitlines()
    assert lines[0].startswith("prog.rasp:2:24: unexpected '='; expected ")
    assert "'=='" in lines[0] and "'<'" in lines[0]
    assert lines[1] == "    b = select(indices, 0, =);"
    assert lines[2] == "    " + " " * 23 + "^"


def test_missing_semicolon_and_unfinished_input():
    assert "did you forget a ';'" in error_of("a = 1\nb = 2;")
    msg = error_of("def f(x) {\n  return x;\n")
    assert "ends in the middle of a statement" in msg
    assert is_incomplete("def f(x) {") and not is_incomplete("x = 1;")


def test_unknown_name_suggests_close_names():
    msg = error_of("y = tokens_itn + 1;")
    assert msg.startswith("prog.rasp:1:5: unknown name 'tokens_itn'")
    assert "did you mean 'tokens_int'" in msg


def test_wrong_arity():
    msg = error_of("x = sort(tokens);")
    assert "wrong number of arguments for sort: expected 2 (seq, key), got 1" in msg
    assert "wrong number of arguments for selector_width" in error_of("selector_width();")


@pytest.mark.parametrize(
    "source, fragment",
    [
        ("x = select(indices, 0, ==) + 1;", "cannot apply + to a selector"),
        ("x = aggregate(tokens, tokens);", "aggregate expects a selector"),
        ("indices = 3;", "cannot assign to the reserved name 'indices'"),
        ("a, b = 1, 2, 3;", "expected 2 values to assign to a, b, got 3"),
        ("x = [1, 2][5];", "index 5 is out of range for a list of length 2"),
        ("x = range(1.5);", "range takes integers"),
        ("x = indicator(3);", "indicator expects an s-op"),
        ("x = 1 / 0;", "division by zero"),
        ('load "does_not_exist";', "cannot find the file"),
        ("x = 3(1);", "is not a function"),
        ("x = select(indices, 0, ==) and tokens;", "between a selector and"),
        ("x = tokens_int([]);", "non-empty input"),
    ],
)
def test_runtime_errors_say_what_went_wrong(source, fragment):
    msg = error_of(source)
    assert msg.startswith("prog.rasp:1:")
    assert fragment in msg


def test_user_text_is_never_executed_as_python():
    msg = error_of('x = __import__("os");')
    assert "unknown name '__import__'" in msg
    with pytest.raises(RASPTextError):
        parse("x = (lambda: 1)();")


def test_comments_and_whitespace_are_ignored():
    rt = Runtime()
    rt.run("# a comment\n  a =   1 ; # trailing\n\tb = a+1;")
    assert rt.get("b") == 2


def test_evaluation_errors_inside_sops_are_located():
    rt = Runtime()
    rt.run("z = 1 / (indices - 1);")
    with pytest.raises(RASPTextError, match="ZeroDivisionError"):
        rt.run("z([0, 0, 0]);")
