"""Random programs built with tracr's own classes, and the differential check against tracr.

``random_case(rng)`` draws a :class:`TracrCase`: a program built with ``tracr.rasp.rasp``
(tracr-pypi), written as Python source one binding per line (``case.source()`` is a runnable
reproducer), with its vocabulary, ``max_seq_len`` and a few random inputs. The functions,
predicates and vocabularies are those of ``tests/fuzz_programs.py``; the constructs are
tracr's: its operator sugar (``x + 1`` and ``x < 2`` are Maps, ``a + b`` a SequenceMap, ``&``
on two Selects a simplified Select with a combined predicate), ``Map``'s fusing of maps
(named ones too), ``numerical``/``categorical``/``annotate``, ``Full`` keys and queries,
``ConstantSOp``/``ConstantSelector``, and aggregates whose default is None.

``check_case(case, attention)`` evaluates the program with tracr's ``rasp.evaluate``
(``DefaultRASPEvaluator``), converts it with ``attnsim.rasp.from_tracr``, evaluates it with
attnsim's interpreter, compiles it with ``attnsim.compile_program`` and runs the model. The
:class:`fuzz_programs.Outcome` status is one of :data:`STATUSES`:

- ``agreed``: on every input the interpreter and the model give tracr's values;
- ``agreed_by_error``: as ``agreed``, but on some input tracr and attnsim all raised;
- ``tracr_raised``: on some input tracr raised and attnsim answered (attnsim is more
  lenient: it compares None with values, takes a categorical aggregate of equal strings);
  the model then gives the interpreter's value;
- ``refused``: a clear compile error, or a clear run-time refusal where tracr answered;
- ``stricter``: attnsim's interpreter raised a clear error where tracr answered and no value
  of the tracr program is None (a categorical aggregate over several different numbers,
  which tracr averages);
- ``tracr_mean``: a value difference on an input where tracr's evaluator averages a
  categorical ``Aggregate`` whose query selects several keys: tracr's mean of equal ints is a
  float (``str`` of it is ``'2.0'``, attnsim's ``'2'``, as tracr's compiled model gives);
  docs/tracr.md lists it;
- ``numerical_default``: a value difference on an input where a numerical ``Aggregate`` with
  tracr's default None selects nothing: tracr's evaluator gives None, attnsim 0 (tracr's
  compiler refuses such an aggregate: a numerical default must be 0); docs/tracr.md lists it;
- ``disagreement``: a value that differs from tracr's, no None involved;
- ``unclear_error``: an exception that is not a clear error (``fuzz_programs.is_clear_error``).

Values compare as tracr's evaluator and Python compare them: numbers (bools included, since
tracr's mean of one selected True is True and attnsim's numerical value is 1.0) within
``fuzz_programs.REL_TOL``, None only with None, strings and tuples exactly.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import random
import time
from typing import Any

from absl import logging as absl_logging
from tracr.rasp import rasp as tr

from attnsim import rasp
from attnsim.compiler import compile_program
from tests import fuzz_programs as fp

absl_logging.set_verbosity(absl_logging.ERROR)  # tracr warns on SequenceMap(f, x, x)

STATUSES = (
    "agreed",
    "agreed_by_error",
    "tracr_raised",
    "refused",
    "stricter",
    "tracr_mean",
    "numerical_default",
    "disagreement",
    "unclear_error",
)
_WORST = {s: i for i, s in enumerate(STATUSES)}
INPUTS_PER_CASE = fp.INPUTS_PER_CASE
COMPARISONS = [c.name for c in tr.Comparison]  # all eight
# the fuzzer's vocabularies but the one holding None, which attnsim refuses as a token (None
# is "no value"): it would only add compile refusals
VOCABS = [v for v in fp.VOCABS if v[0] != "with None"]
NUM_MAPS = [  # numerical maps, as tracr programs write them (a Map annotated numerical)
    "lambda x: x * 2 + 1",
    "lambda x: x / 2",
    "lambda x: -x",
    "lambda x: abs(x)",
    "lambda x: x * x",
    *fp.NUM_LAMBDAS,
]


@dataclasses.dataclass(frozen=True)
class TracrCase:
    """One random tracr program with its compile settings and inputs."""

    program: Any  # a tracr SOp
    lines: tuple[str, ...]
    vocab: list | None
    vocab_kind: str
    max_seq_len: int
    fixed_length: bool
    inputs: list[list]
    features: frozenset[str]

    def source(self) -> str:
        """A runnable reproducer: the tracr program, its conversion and the three values."""
        body = "\n".join(self.lines)
        return (
            "import math\nfrom tracr.rasp import rasp\nimport attnsim\n"
            f"{body}\nprogram = {self.lines[-1].split(' = ', 1)[0]}\n"
            "converted = attnsim.rasp.from_tracr(program)\n"
            f"model = attnsim.compile_program(converted, vocab={self.vocab!r}, "
            f"max_seq_len={self.max_seq_len}, fixed_length={self.fixed_length})\n"
            f"xs = {self.inputs[0]!r}\n"
            "print(rasp.evaluate(program, xs), attnsim.rasp.evaluate(converted, xs), "
            "model.run(xs))"
        )


class _Gen(fp.Choices):
    """Builds one tracr program bottom-up; every node is a line of source, evaluated as made."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        names, weights = zip(*[(v[0], v[1]) for v in VOCABS])
        name = rng.choices(names, weights)[0]
        _, _, make, kind = next(v for v in VOCABS if v[0] == name)
        self.vocab_name, self.vocab, self.token_kind = name, make(rng), kind
        self.max_seq_len = rng.randint(1, 6)
        self.lines: list[str] = []
        self.env: dict[str, Any] = {"rasp": tr, "math": math}
        self.kinds: dict[str, str] = {}
        self.features: set[str] = set()
        self.uses_fixed_shape = False

    def emit(self, src: str, kind: str, feature: str) -> str:
        name = f"v{len(self.lines)}"
        u = self.rng.random()
        if u < 0.08:
            src = f"({src}).named('n{len(self.lines)}')"
            self.features.add("named")
        elif u < 0.1 and kind != "sel":
            enc = "NUMERICAL" if kind == "num" else "CATEGORICAL"
            src = f"rasp.annotate({src}, encoding=rasp.Encoding.{enc})"
            self.features.add("annotate encoding")
        self.env[name] = eval(src, self.env)  # noqa: S307 - our own generated source
        self.lines.append(f"{name} = {src}")
        self.kinds[name] = kind
        self.features.add(feature)
        return name

    # -- categorical S-ops ---------------------------------------------------------------------
    def cat(self, depth: int, want: str | None = None) -> str:
        got = self.reuse(want) if want else None
        if got:
            return got
        if depth <= 0 or self.rng.random() < 0.2:
            return self.leaf(want)
        k = want or self.rng.choice(["int", "int", "str", "bool"])
        d = depth - 1
        options: list[tuple[float, Any]] = [
            (3, lambda: self.cat_map(depth, k)),
            (2, lambda: self.cat_pair(depth, k)),
            (2.5, lambda: self.cat_aggregate(depth, k)),
        ]
        if k in ("int", "bool", "float"):
            options.append((0.6, lambda: self.num_to_cat(d, k)))
        if k == "int":
            r = self.rng
            options += [
                (
                    2,
                    lambda: self.emit(f"rasp.SelectorWidth({self.sel(d)})", "int", "SelectorWidth"),
                ),
                (
                    1,
                    lambda: self.emit(
                        f"{self.cat(d, 'int')} + {r.randint(1, 3)}", "int", "sugar +"
                    ),
                ),
                (
                    0.5,
                    lambda: self.emit(
                        f"{r.randint(1, 3)} - {self.cat(d, 'int')}", "int", "sugar r-"
                    ),
                ),
                (
                    0.7,
                    lambda: self.emit(
                        f"{self.cat(d, 'int')} * {r.choice([2, -1])}", "int", "sugar *"
                    ),
                ),
                (
                    1,
                    lambda: self.emit(
                        f"{self.cat(d, 'int')} + {self.cat(d, 'int')}", "int", "sugar a + b"
                    ),
                ),
                (
                    1,
                    lambda: self.emit(
                        f"{self.cat(d, 'int')} - {self.cat(d, 'int')}", "int", "sugar a - b"
                    ),
                ),
                (
                    1,
                    lambda: self.emit(
                        f"rasp.LinearSequenceMap({self.cat(d, 'int')}, {self.cat(d, 'int')}, "
                        f"{r.choice([1, 2, -1])}, {r.choice([1, 3, -2])})",
                        "int",
                        "LinearSequenceMap (categorical)",
                    ),
                ),
            ]
        if k == "bool":
            r = self.rng
            op = r.choice(["==", "!=", "<", "<=", ">", ">="])
            options += [
                (
                    1.5,
                    lambda: self.emit(
                        f"({self.cat(d, 'int')} {op} {r.randint(0, 3)})", "bool", "sugar comparison"
                    ),
                ),
                (0.7, lambda: self.emit(f"~{self.cat(d, 'bool')}", "bool", "sugar ~")),
                (0.4, lambda: self.emit(f"rasp.sop_not({self.cat(d, 'bool')})", "bool", "sop_not")),
                (
                    0.8,
                    lambda: self.emit(
                        f"({self.cat(d, 'bool')} {r.choice('&|')} {self.cat(d, 'bool')})",
                        "bool",
                        "sugar a & b",
                    ),
                ),
                (0.4, lambda: self.emit(f"({self.cat(d, 'bool')} & True)", "bool", "sugar a & c")),
            ]
        return self.pick(options)()

    def leaf(self, want: str | None) -> str:
        r = self.rng
        tk = self.token_kind
        if want is None or want == tk:
            if tk != "real" and r.random() < 0.6:
                return self.emit("rasp.tokens", tk, "tokens")
        want = want or r.choice(["int", "int", "str", "bool"])
        L = self.max_seq_len
        if want == "int":
            return self.pick(
                [
                    (4, lambda: self.emit("rasp.indices", "int", "indices")),
                    (1.5, lambda: self.emit("rasp.length", "int", "length")),
                    (1, lambda: self.emit(f"rasp.Full({r.randint(-1, 3)})", "int", "Full")),
                    (0.5, lambda: self.constant_sop([r.randint(0, 3) for _ in range(L)], "int")),
                ]
            )()
        if want == "str":
            return self.pick(
                [
                    (1, lambda: self.emit(f"rasp.Full({r.choice('ab')!r})", "str", "Full")),
                    (0.5, lambda: self.constant_sop([r.choice("abc") for _ in range(L)], "str")),
                    (
                        2,
                        lambda: self.emit(
                            "rasp.Map(lambda x: 'abc'[x % 3], rasp.indices)", "str", "Map"
                        ),
                    ),
                ]
            )()
        if want == "bool":
            return self.pick(
                [
                    (1, lambda: self.emit("rasp.Full(True)", "bool", "Full")),
                    (
                        2,
                        lambda: self.emit(
                            "rasp.Map(lambda x: x % 2 == 0, rasp.indices)", "bool", "Map"
                        ),
                    ),
                ]
            )()
        if want == "float":
            return self.emit("rasp.Map(lambda x: x / 2, rasp.indices)", "float", "Map")
        if want == "tuple":
            return self.emit(
                "rasp.SequenceMap(lambda x, y: (x, y), rasp.indices, rasp.length)",
                "tuple",
                "SequenceMap",
            )
        return self.emit("rasp.Map(lambda x: None if x == 0 else x, rasp.indices)", "mixed", "Map")

    def constant_sop(self, values: list, kind: str) -> str:
        self.uses_fixed_shape = True
        check = self.rng.random() < 0.5
        return self.emit(f"rasp.ConstantSOp({values!r}, check_length={check})", kind, "ConstantSOp")

    def cat_map(self, depth: int, want: str) -> str:
        r = self.rng
        froms = [k for k, fs in fp.CAT_MAPS.items() if any(o == want for _, o in fs)]
        x = self.cat(depth - 1, r.choice(froms))
        fs = fp.CAT_MAPS.get(self.kinds[x], fp.CAT_MAPS["mixed"])
        f, out = r.choice([f for f in fs if f[1] == want] or fs)
        u = r.random()
        if u < 0.5:  # tracr's default: fuses a Map of a Map (a named one too)
            return self.emit(f"rasp.Map({f}, {x})", out, "Map")
        return self.emit(f"rasp.Map({f}, {x}, simplify={u < 0.6})", out, "Map")

    def cat_pair(self, depth: int, want: str) -> str:
        pairs = [(ks, f) for ks, fs in fp.CAT_PAIRS.items() for f in fs if f[1] == want]
        if not pairs:
            return self.cat_map(depth, want)
        (ka, kb), (f, out) = self.rng.choice(pairs)
        a, b = self.cat(depth - 1, ka), self.cat(depth - 1, kb)
        return self.emit(f"rasp.SequenceMap({f}, {a}, {b})", out, "SequenceMap")

    def cat_aggregate(self, depth: int, want: str) -> str:
        r = self.rng
        vals = self.cat(depth - 1, want)
        if r.random() < 0.5:  # a gather: one key per query
            target = self.cat(depth - 1, "int")
            sel = self.emit(
                f"rasp.Select(rasp.indices, {target}, rasp.Comparison.EQ)", "sel", "Select"
            )
            feature = "Aggregate categorical (one key)"
        else:
            sel = self.sel(depth - 1)
            feature = "Aggregate categorical (any selector)"
        default = r.choice([None, None, {"int": 0, "str": "'z'", "bool": False}.get(want)])
        d = "" if default is None else f", default={default}"
        return self.emit(f"rasp.Aggregate({sel}, {vals}{d})", want, feature)

    def num_to_cat(self, depth: int, want: str) -> str:
        fs = [f for f, k in fp.NUM_TO_CAT if k == want] or ["lambda x: x > 0"]
        x = self.num(depth)
        out = "bool" if fs[0] == "lambda x: x > 0" and want != "float" else want
        return self.emit(
            f"rasp.categorical(rasp.Map({self.rng.choice(fs)}, {x}))",
            out,
            "Map numerical -> categorical",
        )

    # -- numerical S-ops -----------------------------------------------------------------------
    def num(self, depth: int) -> str:
        got = self.reuse("num")
        if got:
            return got
        if depth <= 0 or self.rng.random() < 0.15:
            return self.num_leaf()
        r = self.rng
        d = depth - 1
        x = lambda: self.num(d)  # noqa: E731
        return self.pick(
            [
                (
                    3,
                    lambda: self.emit(
                        f"rasp.numerical(rasp.Map({r.choice(NUM_MAPS)}, {x()}))",
                        "num",
                        "Map (numerical)",
                    ),
                ),
                (
                    1,
                    lambda: self.emit(
                        f"rasp.numerical({x()} + {r.choice([1, 0.5])})",
                        "num",
                        "sugar + (numerical)",
                    ),
                ),
                (
                    1.5,
                    lambda: self.emit(
                        f"rasp.numerical({x()} + {x()})", "num", "sugar a + b (numerical)"
                    ),
                ),
                (
                    0.7,
                    lambda: self.emit(
                        f"rasp.numerical({x()} - {x()})", "num", "sugar a - b (numerical)"
                    ),
                ),
                (
                    1,
                    lambda: self.emit(
                        f"rasp.numerical(rasp.LinearSequenceMap({x()}, {x()}, "
                        f"{r.choice([1, 0.5, -2])}, {r.choice([1, 3, -1])}))",
                        "num",
                        "LinearSequenceMap (numerical)",
                    ),
                ),
                (
                    1,
                    lambda: self.emit(
                        f"rasp.numerical({x()} * {x()})", "num", "sugar a * b (numerical)"
                    ),
                ),
                (
                    0.5,
                    lambda: self.emit(
                        f"rasp.numerical(rasp.SequenceMap(lambda x, y: max(x, y), {x()}, {x()}))",
                        "num",
                        "SequenceMap (numerical)",
                    ),
                ),
                (3, lambda: self.num_aggregate(d)),
                (
                    1,
                    lambda: self.emit(
                        f"rasp.numerical(rasp.SelectorWidth({self.sel(d)}))",
                        "num",
                        "SelectorWidth (numerical)",
                    ),
                ),
                (1.5, lambda: self.cat_to_num(d)),
            ]
        )()

    def num_leaf(self) -> str:
        r = self.rng
        L = self.max_seq_len
        opts: list[tuple[float, Any]] = [
            (2, lambda: self.emit("rasp.numerical(rasp.indices)", "num", "indices (numerical)")),
            (0.7, lambda: self.emit("rasp.numerical(rasp.length)", "num", "length (numerical)")),
            (
                0.5,
                lambda: self.emit(
                    f"rasp.numerical(rasp.Full({r.choice([1, 2.5, -1])}))",
                    "num",
                    "Full (numerical)",
                ),
            ),
        ]
        if r.random() < 0.1:
            self.uses_fixed_shape = True
            vals = [r.choice([0, 1, 2.5]) for _ in range(L)]
            return self.emit(
                f"rasp.numerical(rasp.ConstantSOp({vals!r}))", "num", "ConstantSOp (numerical)"
            )
        if self.token_kind in ("int", "float", "bool", "real"):
            opts.append(
                (4, lambda: self.emit("rasp.numerical(rasp.tokens)", "num", "tokens (numerical)"))
            )
        return self.pick(opts)()

    def num_aggregate(self, depth: int) -> str:
        r = self.rng
        if r.random() < 0.3:  # a numerical gather on integer values
            sel = self.emit(
                f"rasp.Select({self.num_leaf()}, {self.num_leaf()}, rasp.Comparison.EQ)",
                "sel",
                "Select numerical",
            )
        else:
            sel = self.sel(depth)
        vals = self.num(depth) if r.random() < 0.7 else self.cat(depth, r.choice(["int", "bool"]))
        default = r.choice([None, 0, 0, 1, -1, 2.5])  # None: tracr gives None on no selection
        d = "" if default is None else f", default={default}"
        feature = f"Aggregate numerical (default {'None' if default is None else 'given'})"
        return self.emit(f"rasp.numerical(rasp.Aggregate({sel}, {vals}{d}))", "num", feature)

    def cat_to_num(self, depth: int) -> str:
        r = self.rng
        x = self.cat(depth, r.choice(["int", "int", "bool", "str"]))
        fs = [f for f, o in fp.CAT_MAPS.get(self.kinds[x], []) if o in ("int", "float", "bool")]
        f = r.choice(fs) if fs and r.random() < 0.8 else "lambda x: x"
        return self.emit(
            f"rasp.numerical(rasp.Map({f}, {x}))", "num", "Map categorical -> numerical"
        )

    # -- selectors -----------------------------------------------------------------------------
    def sel(self, depth: int) -> str:
        got = self.reuse("sel")
        if got:
            return got
        if depth <= 0:
            return self.select(0)
        d = depth - 1
        return self.pick(
            [
                (5, lambda: self.select(depth)),
                (
                    1.2,
                    lambda: self.emit(f"{self.sel(d)} & {self.sel(d)}", "sel", "sugar selector &"),
                ),
                (1, lambda: self.emit(f"{self.sel(d)} | {self.sel(d)}", "sel", "sugar selector |")),
                (0.8, lambda: self.emit(f"~{self.sel(d)}", "sel", "sugar selector ~")),
                (0.5, lambda: self.same_inputs_pair(d)),
                (
                    0.4,
                    lambda: self.emit(
                        f"rasp.SelectorAnd({self.sel(d)}, rasp.SelectorNot({self.sel(d)}))",
                        "sel",
                        "SelectorAnd, SelectorNot",
                    ),
                ),
                (
                    0.3,
                    lambda: self.emit(
                        f"rasp.SelectorOr({self.sel(d)}, {self.sel(d)})", "sel", "SelectorOr"
                    ),
                ),
                (
                    0.3,
                    lambda: self.emit(
                        f"rasp.selector_and({self.sel(d)}, {self.sel(d)}, simplify=False)",
                        "sel",
                        "selector_and (simplify=False)",
                    ),
                ),
                (0.3, lambda: self.constant_selector()),
            ]
        )()

    def same_inputs_pair(self, depth: int) -> str:
        """Two Selects that tracr's & and | simplify into one Select: the same keys and queries,
        or a Full on one side (whose fill tracr bakes into the predicate)."""
        r = self.rng
        kind = r.choice(["int", "str"])
        k, q = self.cat(depth, kind), self.cat(depth, kind)
        p1, p2 = (f"rasp.Comparison.{r.choice(COMPARISONS)}" for _ in range(2))
        a = self.emit(f"rasp.Select({k}, {q}, {p1})", "sel", "Select")
        if r.random() < 0.5:
            fill = r.choice([0, 1, 2]) if kind == "int" else r.choice(["'a'", "'b'"])
            full = self.emit(f"rasp.Full({fill})", kind, "Full")
            b = self.emit(
                f"rasp.Select({full}, {q}, {p2})"
                if r.random() < 0.5
                else f"rasp.Select({k}, {full}, {p2})",
                "sel",
                "Select on Full",
            )
        else:
            b = self.emit(f"rasp.Select({k}, {q}, {p2})", "sel", "Select")
        return self.emit(f"{a} {r.choice('&|')} {b}", "sel", "simplified selector pair")

    def constant_selector(self) -> str:
        L = self.max_seq_len
        m = [[self.rng.random() < 0.4 for _ in range(L)] for _ in range(L)]
        self.uses_fixed_shape = True
        return self.emit(f"rasp.ConstantSelector({m!r})", "sel", "ConstantSelector")

    def select(self, depth: int) -> str:
        r = self.rng
        cmp = r.choice(COMPARISONS)
        pred = f"rasp.Comparison.{cmp}"
        u = r.random()
        if u < 0.12:
            k, q = self.num(depth - 1), self.num(depth - 1)
            feature = "Select numerical"
        elif u < 0.2:
            ka, kb = r.sample(["int", "str", "bool"], 2)
            k, q = self.cat(depth - 1, ka), self.cat(depth - 1, kb)
            feature = "Select mixed kinds"
        elif u < 0.3:
            kind = r.choice(["int", "str"])
            k, q = self.cat(depth - 1, kind), self.cat(depth - 1, kind)
            pred = r.choice(fp.PREDICATES[kind] + fp.PREDICATES["any"])
            cmp = "lambda"
            feature = "Select custom predicate"
        elif u < 0.36:
            tk = self.token_kind if self.token_kind != "real" else "float"
            k = q = self.emit("rasp.tokens", tk, "tokens")
            feature = "Select tokens"
        else:
            kind = r.choice(["int", "int", "int", "str", "bool"])
            k, q = self.cat(depth - 1, kind), self.cat(depth - 1, kind)
            feature = "Select categorical"
        self.features.add(f"Comparison {cmp}")
        return self.emit(f"rasp.Select({k}, {q}, {pred})", "sel", feature)


def random_case(rng: random.Random, max_depth: int = 4) -> TracrCase:
    """A random tracr program, its compile settings and inputs."""
    g = _Gen(rng)
    depth = rng.randint(1, max_depth)
    if rng.random() < 0.45:
        g.num(depth)
    else:
        g.cat(depth)
    fixed = g.uses_fixed_shape or rng.random() < 0.05
    g.features.add(f"vocab: {g.vocab_name}")
    inputs = fp.random_inputs(rng, g.vocab, g.max_seq_len, INPUTS_PER_CASE, fixed_length=fixed)
    return TracrCase(
        program=g.env[f"v{len(g.lines) - 1}"],
        lines=tuple(g.lines),
        vocab=g.vocab,
        vocab_kind=g.vocab_name,
        max_seq_len=g.max_seq_len,
        fixed_length=fixed,
        inputs=inputs,
        features=frozenset(g.features),
    )


# -- comparison -----------------------------------------------------------------------------------
def same(a: Any, b: Any) -> bool:
    """``a`` (attnsim's value) equals ``b`` (tracr's), as Python compares RASP values."""
    if a is None or b is None:
        return a is None and b is None
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and (math.isnan(b) or not math.isfinite(b))
        if math.isinf(a) or math.isinf(b):
            return a == b
        return math.isclose(a, b, rel_tol=fp.REL_TOL, abs_tol=fp.ABS_TOL)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def same_row(got: list, expected: list) -> bool:
    return len(got) == len(expected) and all(same(a, b) for a, b in zip(got, expected))


class _Recorder(tr.DefaultRASPEvaluator):
    """tracr's evaluator, remembering the value of every expression it evaluates."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[int, tuple[Any, Any]] = {}

    def evaluate(self, expr, xs):
        if id(expr) not in self.values:
            self.values[id(expr)] = (expr, super().evaluate(expr, xs))
        return self.values[id(expr)][1]


def _recorded(program: Any, xs: list) -> list[tuple[Any, Any]]:
    rec = _Recorder()
    try:
        rec.evaluate(program, xs)
    except Exception:  # noqa: BLE001 - the values evaluated before the error still count
        pass
    return list(rec.values.values())


def holds_none(program: Any, xs: list) -> bool:
    """Whether some S-op of the tracr ``program`` holds None on ``xs`` (in tracr's evaluator)."""
    return any(
        isinstance(e, tr.SOp) and any(v is None for v in vals) for e, vals in _recorded(program, xs)
    )


def empty_numerical_default(program: Any, xs: list) -> bool:
    """Whether a numerical ``Aggregate`` of ``program`` whose default is None (tracr's) selects
    nothing for some query on ``xs``: tracr's evaluator gives None there, attnsim 0."""
    recorded = _recorded(program, xs)
    values = {id(e): vals for e, vals in recorded}
    for e, _ in recorded:
        if not isinstance(e, tr.Aggregate) or e.default is not None:
            continue
        held = list(e.annotations)
        if "encoding" in held and e.annotations["encoding"] == tr.Encoding.NUMERICAL:
            if any(not any(map(bool, row)) for row in values.get(id(e.selector), [])):
                return True
    return False


def averages_categorical(program: Any, xs: list) -> bool:
    """Whether tracr's evaluator takes the mean of several selected values of a categorical
    ``Aggregate`` of ``program`` on ``xs`` (attnsim takes one value or raises)."""
    recorded = _recorded(program, xs)
    values = {id(e): vals for e, vals in recorded}
    for e, _ in recorded:
        if not isinstance(e, tr.Aggregate):
            continue
        held = list(e.annotations)  # only held keys: a lookup would store tracr's default
        if "encoding" in held and e.annotations["encoding"] == tr.Encoding.NUMERICAL:
            continue
        rows = values.get(id(e.selector), [])
        if any(sum(map(bool, row)) > 1 for row in rows):
            return True
    return False


def tracr_evaluate(program: Any, xs: list) -> tuple[Any, BaseException | None]:
    """tracr's value of ``program`` on ``xs`` (``rasp.evaluate``), or the error it raised."""
    try:
        return list(tr.evaluate(program, xs)), None
    except Exception as exc:  # noqa: BLE001 - tracr's errors are its answer
        return None, exc


# -- one case ------------------------------------------------------------------------------------
def check_case(case: TracrCase, attention: str = "hard") -> fp.Outcome:
    """Compares tracr's evaluator, attnsim's interpreter and the compiled model on ``case``."""
    out = fp.Outcome("agreed")

    def note(status: str, reason: str, detail: dict) -> None:
        if _WORST[status] > _WORST[out.status]:
            out.status, out.reason, out.detail = status, reason, detail

    try:
        program = rasp.from_tracr(case.program)
    except Exception as exc:  # noqa: BLE001
        note("unclear_error", "from_tracr: " + fp.describe(exc), {"error": fp.describe(exc)})
        return out
    start = time.perf_counter()
    try:
        model = compile_program(
            program,
            vocab=case.vocab,
            max_seq_len=case.max_seq_len,
            fixed_length=case.fixed_length,
            attention=attention,
        )
        compile_exc = None
        out.compiled = True
    except Exception as exc:  # noqa: BLE001
        model, compile_exc = None, exc
    out.compile_seconds = time.perf_counter() - start
    if compile_exc is not None and not fp.is_clear_error(compile_exc):
        note("unclear_error", "compile: " + fp.describe(compile_exc), {})
    for xs in case.inputs:
        want, tracr_exc = tracr_evaluate(case.program, xs)
        detail: dict[str, Any] = {
            "input": xs,
            "tracr": want if tracr_exc is None else fp.describe(tracr_exc),
        }
        try:
            got, interp_exc = rasp.evaluate(program, xs), None
            detail["interpreter"] = got
        except Exception as exc:  # noqa: BLE001
            got, interp_exc = None, exc
            detail["interpreter"] = fp.describe(exc)
        ran, run_exc = None, None
        if model is not None:
            start = time.perf_counter()
            try:
                ran = model.run(xs)
                detail["model"] = ran
            except Exception as exc:  # noqa: BLE001
                run_exc = exc
                detail["model"] = fp.describe(exc)
            out.run_seconds += time.perf_counter() - start
        if interp_exc is not None and not fp.is_clear_error(interp_exc):
            note("unclear_error", "interpreter: " + fp.describe(interp_exc), detail)
            continue
        if run_exc is not None and not fp.is_clear_error(run_exc):
            note("unclear_error", "run: " + fp.describe(run_exc), detail)
            continue
        if model is not None and run_exc is None and interp_exc is None and not same_row(ran, got):
            note("disagreement", "model differs from the interpreter", detail)
            continue
        if model is not None and run_exc is None and interp_exc is not None:
            note("disagreement", "model returned a value where the interpreter raised", detail)
            continue
        if tracr_exc is not None:
            if interp_exc is None:
                note("tracr_raised", "tracr: " + type(tracr_exc).__name__, detail)
            else:
                out.inputs_agreed_by_error += 1
                note("agreed_by_error", "", detail)
            continue
        if compile_exc is not None:
            note("refused", "compile: " + fp.error_category(compile_exc), {})
        differs = None
        if interp_exc is not None:
            differs = ("stricter", "interpreter raised: " + fp.error_category(interp_exc))
        elif not same_row(got, want):
            differs = ("disagreement", "interpreter differs from tracr")
        elif model is not None and run_exc is not None:
            note("refused", "run: " + fp.error_category(run_exc), detail)
        elif model is not None and not same_row(ran, want):
            differs = ("disagreement", "model differs from tracr")
        else:
            out.inputs_agreed += 1
        if differs is not None:
            status, reason = differs
            if status == "disagreement" and empty_numerical_default(case.program, xs):
                status = "numerical_default"
            elif status == "disagreement" and averages_categorical(case.program, xs):
                status = "tracr_mean"
            note(status, reason, detail)
    return out


@dataclasses.dataclass
class Tally:
    """Counts over many cases (and a few examples of each bad outcome)."""

    drawn: int = 0
    compiled: int = 0
    statuses: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    reasons: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    features: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    seconds: float = 0.0
    examples: list = dataclasses.field(default_factory=list)
    max_examples: int = 20

    def add(self, case: TracrCase, outcome: fp.Outcome) -> None:
        self.drawn += 1
        self.compiled += outcome.compiled
        self.statuses[outcome.status] += 1
        self.features.update(case.features)
        if outcome.status not in ("agreed", "agreed_by_error"):
            self.reasons[f"{outcome.status}: {outcome.reason[:120]}"] += 1
        if (
            outcome.status in ("tracr_mean", "numerical_default", "disagreement", "unclear_error")
            and len(self.examples) < self.max_examples
        ):
            self.examples.append(
                {
                    "status": outcome.status,
                    "reason": outcome.reason,
                    "detail": fp._jsonable(outcome.detail),
                    "source": case.source(),
                }
            )

    def count(self, status: str) -> int:
        return self.statuses[status]


def fuzz(n_programs: int, seed: int, attention: str = "hard") -> Tally:
    """Draws ``n_programs`` tracr cases from ``seed`` and checks each one."""
    rng = random.Random(seed)
    tally = Tally()
    start = time.perf_counter()
    for _ in range(n_programs):
        case = random_case(rng)
        tally.add(case, check_case(case, attention))
    tally.seconds = time.perf_counter() - start
    return tally
