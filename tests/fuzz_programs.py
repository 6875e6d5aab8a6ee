"""Random RASP programs from the whole language, and the differential check against the oracle.

``random_case(rng)`` draws a :class:`FuzzCase`: a program, the compile settings (vocabulary,
``max_seq_len``, causal, fixed length) and a few random inputs. The program is built from
Python source, one binding per line, so ``case.source()`` is a runnable reproducer. Programs
are *not* restricted to what the compiler handles: every S-op and selector kind of
``attnsim.rasp.expr`` is drawn, with categorical values of several types (ints, strings,
bools, floats, tuples, None) and numerical values, including programs that the interpreter
rejects on some inputs (a categorical aggregate over distinct values, a comparison of a
string with a number, a map that raises).

``check_case(case, attention)`` compiles the program and runs it against
``attnsim.rasp.evaluate`` on every input; the :class:`Outcome` is one of

- ``agreed``: compiled, ran, equal outputs (numbers within ``REL_TOL``/``ABS_TOL``);
- ``agreed_by_error``: as ``agreed``, but on at least one input both the interpreter and the
  compiled model raised (a clear error);
- ``refused``: a clear compile error, or a clear run-time refusal (a failed run-time check)
  where the interpreter had an answer: no value, so never a wrong one;
- ``disagreement``: the compiled model returned a value that differs from the interpreter's,
  or returned a value where the interpreter raised;
- ``unclear_error``: an exception that is not a clear error (see :func:`is_clear_error`).

>>> import random
>>> case = random_case(random.Random(0))
>>> isinstance(case.program, rasp.SOp) and len(case.inputs) == INPUTS_PER_CASE
True
>>> check_case(case, "hard").status in STATUSES
True
"""

from __future__ import annotations

import collections
import dataclasses
import math
import random
import time
import traceback
from typing import Any

from attnsim import rasp
from attnsim.compiler import compile_program

REL_TOL = ABS_TOL = 1e-9  # numerical outputs: "exact up to float rounding" (README, Exactness)
INPUTS_PER_CASE = 4
MIN_CLEAR_MESSAGE = 20  # characters: shorter messages do not say what was wrong
STATUSES = ("agreed", "agreed_by_error", "refused", "disagreement", "unclear_error")

# -- functions, as source text (evaluated once, so a reproducer prints exactly what ran) ------
# each entry: (source, output kind); input kinds are the dictionary keys
CAT_MAPS: dict[str, list[tuple[str, str]]] = {
    "int": [
        ("lambda x: x + 1", "int"),
        ("lambda x: x - 1", "int"),
        ("lambda x: x % 3", "int"),
        ("lambda x: 2 * x", "int"),
        ("lambda x: min(x, 3)", "int"),
        ("lambda x: abs(x - 2)", "int"),
        ("lambda x: x // 2", "int"),
        ("lambda x: -x", "int"),
        ("lambda x: 10 // x", "int"),  # raises on 0
        ("lambda x: None if x == 1 else x", "int"),  # None: a categorical "no value"
        ("lambda x: x > 1", "bool"),
        ("lambda x: x % 2 == 0", "bool"),
        ("lambda x: 'abc'[x % 3]", "str"),
        ("lambda x: str(x)", "str"),
        ("lambda x: (x, x % 2)", "tuple"),
        ("lambda x: x / 2", "float"),
    ],
    "str": [
        ("lambda x: x.upper()", "str"),
        ("lambda x: x + '!'", "str"),
        ("lambda x: min(x, 'b')", "str"),
        ("lambda x: len(x)", "int"),
        ("lambda x: ord(x[0]) % 3", "int"),
        ("lambda x: x == 'a'", "bool"),
        ("lambda x: x < 'b'", "bool"),
    ],
    "bool": [
        ("lambda x: int(x)", "int"),
        ("lambda x: not x", "bool"),
        ("lambda x: 'yes' if x else 'no'", "str"),
    ],
    "float": [
        ("lambda x: round(x)", "int"),
        ("lambda x: x * 2", "float"),
        ("lambda x: x > 0", "bool"),
    ],
    "mixed": [
        ("lambda x: repr(x)", "str"),
        ("lambda x: x is None", "bool"),
        ("lambda x: isinstance(x, str)", "bool"),
    ],
    "tuple": [
        ("lambda x: x[0]", "mixed"),
        ("lambda x: len(x)", "int"),
    ],
}
CAT_PAIRS: dict[tuple[str, str], list[tuple[str, str]]] = {
    ("int", "int"): [
        ("lambda x, y: x + y", "int"),
        ("lambda x, y: x - y", "int"),
        ("lambda x, y: max(x, y)", "int"),
        ("lambda x, y: x * y % 5", "int"),
        ("lambda x, y: x // y", "int"),  # raises on y == 0
        ("lambda x, y: x == y", "bool"),
        ("lambda x, y: (x, y)", "tuple"),
    ],
    ("str", "str"): [
        ("lambda x, y: x + y", "str"),
        ("lambda x, y: x < y", "bool"),
        ("lambda x, y: max(x, y)", "str"),
    ],
    ("int", "str"): [
        ("lambda x, y: y * (x % 3)", "str"),
        ("lambda x, y: str(x) == y", "bool"),
    ],
    ("bool", "bool"): [
        ("lambda x, y: x and y", "bool"),
        ("lambda x, y: x != y", "bool"),
    ],
    ("bool", "int"): [("lambda x, y: y if x else 0", "int")],
}
NUM_LAMBDAS = [  # opaque numerical maps: need a finite value set to compile
    "lambda x: x * x - 1",
    "lambda x: max(x, 0.5)",
    "lambda x: math.floor(x)",
    "lambda x: x % 3",
    "lambda x: math.sqrt(x)",  # raises below 0 (the interpreter says so)
]
NAMED_MAPS = ["exp", "log", "sqrt", "reciprocal", "relu", "rsqrt", "gelu", "gelu_tanh"]
NUM_TO_CAT = [
    ("lambda x: x > 0", "bool"),
    ("lambda x: int(x) % 3", "int"),
    ("lambda x: round(x, 1)", "float"),
]
PREDICATES = {  # custom Select predicates (key, query) -> bool
    "int": ["lambda k, q: (k + q) % 2 == 0", "lambda k, q: abs(k - q) <= 1"],
    "str": ["lambda k, q: k[:1] == q[:1]"],
    "any": ["lambda k, q: k != q", "lambda k, q: repr(k) < repr(q)"],
}
COMPARISONS = [c.name for c in rasp.Comparison]  # all eight, TRUE and FALSE included
CAT_KINDS = ("int", "str", "bool", "float", "mixed", "tuple")


def rounding_vocab(rng: random.Random) -> list[float]:
    """2 to 5 distinct floats that numerical comparisons lose to rounding: a base of size
    1e-12 to 1e15, neighbours a few ulps, or a relative 1e-12 to 0.5, away, sometimes a
    small integer (the compiler must prove its comparisons for them, or refuse them)."""
    base = rng.uniform(1.0, 10.0) * 10.0 ** rng.randint(-12, 15) * rng.choice([1, -1])
    out = {base}
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(["ulps", "relative", "relative", "integer"])
        if kind == "ulps":
            out.add(base + rng.randint(-8, 8) * math.ulp(base))
        elif kind == "relative":
            out.add(base * (1.0 + rng.choice([1e-12, 1e-9, 1e-7, 1e-3, 0.5])))
        else:
            out.add(float(rng.randint(-5, 5)))
    if len(out) < 2:
        out.add(2.0 * base)
    return sorted(out)


# vocabularies: (name, weight, make(rng), token kind)
VOCABS = [
    ("small ints", 4, lambda r: list(range(r.randint(2, 5))), "int"),
    ("signed ints", 1, lambda r: sorted(r.sample(range(-3, 7), r.randint(2, 4))), "int"),
    ("strings", 3, lambda r: ["a", "b", "c", "dd", "e"][: r.randint(2, 5)], "str"),
    ("floats", 1, lambda r: [0.5, 1.5, -2.0, 3.25][: r.randint(2, 4)], "float"),
    ("bools", 1, lambda r: [False, True], "bool"),
    ("mixed", 0.5, lambda r: ["a", 1, 2.5][: r.randint(2, 3)], "mixed"),
    ("with None", 0.5, lambda r: [None, 1, 2][: r.randint(2, 3)], "mixed"),
    ("real-valued (vocab=None)", 1.5, lambda r: None, "real"),
    ("rounding floats", 1, rounding_vocab, "float"),
]


@dataclasses.dataclass(frozen=True)
class FuzzCase:
    """One random program with its compile settings and inputs."""

    program: rasp.SOp
    lines: tuple[str, ...]  # Python source, one binding per line; the last is the program
    kinds: tuple[str, ...]  # the kind of each line's value: "num", "sel" or a CAT_KINDS one
    vocab: list | None
    vocab_kind: str  # the VOCABS name
    max_seq_len: int
    causal: bool
    fixed_length: bool
    inputs: list[list]
    features: frozenset[str]  # constructs used (for coverage counts)
    # softmax mode's value_scale (the documented contract: values up to this much larger
    # than the smallest relevant one); the rounding vocabularies hold values up to 1e15
    value_scale: float = 1.0

    def source(self, attention: str = "hard") -> str:
        """A runnable reproducer: the program, the compile call and the comparison."""
        body = "\n".join(self.lines)
        return (
            "import math\nfrom attnsim import rasp\nfrom attnsim.compiler import compile_program\n"
            f"{body}\nprogram = {self.lines[-1].split(' = ', 1)[0]}\n"
            f"model = compile_program(program, vocab={self.vocab!r}, "
            f"max_seq_len={self.max_seq_len}, causal={self.causal}, "
            f"fixed_length={self.fixed_length}, attention={attention!r}"
            + (f", value_scale={self.value_scale!r}" if self.value_scale != 1.0 else "")
            + ")\n"
            f"xs = {self.inputs[0]!r}\n"
            f"print(rasp.evaluate(program, xs, causal={self.causal}), model.run(xs))"
        )


class Choices:
    """What both program generators (this one and ``tests/fuzz_tracr.py``'s) share: reusing a
    node and a weighted choice, drawn from ``self.rng``; ``self.kinds`` maps a variable to its
    kind and ``self.features`` records what was drawn."""

    rng: random.Random
    kinds: dict[str, str]
    features: set[str]

    def reuse(self, want: str) -> str | None:
        """Sometimes an existing node of the wanted kind (programs are DAGs, not only trees)."""
        pool = [v for v, k in self.kinds.items() if k == want]
        if pool and self.rng.random() < 0.1:
            self.features.add("shared node")
            return self.rng.choice(pool)
        return None

    def pick(self, options: list[tuple[float, Any]]) -> Any:
        weights, fns = zip(*options)
        return self.rng.choices(fns, weights)[0]


class _Gen(Choices):
    """Builds one program bottom-up; every node is a line of source, evaluated as it is made."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        names, weights = zip(*[(v[0], v[1]) for v in VOCABS])
        name = rng.choices(names, weights)[0]
        _, _, make, kind = next(v for v in VOCABS if v[0] == name)
        self.vocab_name, self.vocab, self.token_kind = name, make(rng), kind
        self.max_seq_len = rng.randint(2, 7)
        self.lines: list[str] = []
        self.env: dict[str, Any] = {"rasp": rasp, "math": math}
        self.kinds: dict[str, str] = {}  # variable -> kind ("num", a CAT_KINDS one, "sel")
        self.features: set[str] = set()
        self.uses_fixed_shape = False  # a ConstantSOp or ConstantSelector of max_seq_len

    # -- bookkeeping ---------------------------------------------------------------------------
    def emit(self, src: str, kind: str, feature: str) -> str:
        name = f"v{len(self.lines)}"
        if kind != "sel" and self.rng.random() < 0.08:
            src = f"({src}).named('n{len(self.lines)}')"
            self.features.add("named")
        self.env[name] = eval(src, self.env)  # noqa: S307 - our own generated source
        self.lines.append(f"{name} = {src}")
        self.kinds[name] = kind
        self.features.add(feature)
        return name

    # -- categorical S-ops ---------------------------------------------------------------------
    def cat(self, depth: int, want: str | None = None) -> str:
        """A categorical S-op; of kind ``want`` if given (int, str or bool)."""
        got = self.reuse(want) if want else None
        if got:
            return got
        if depth <= 0 or self.rng.random() < 0.2:
            return self.cat_leaf(want)
        r = self.rng
        kinds = [want] if want else ["int", "int", "str", "bool"]
        k = r.choice(kinds)
        options: list[tuple[float, Any]] = [
            (3, lambda: self.cat_map(depth, k)),
            (2, lambda: self.cat_pair(depth, k)),
            (2.5, lambda: self.cat_aggregate(depth, k)),
            (0.6, lambda: self.num_to_cat(depth, k)),
        ]
        if k == "int":
            options += [
                (
                    2,
                    lambda: self.emit(
                        f"rasp.SelectorWidth({self.sel(depth - 1)})", "int", "SelectorWidth"
                    ),
                ),
                (1, lambda: self.int_sugar(depth)),
                (0.5, lambda: self.nary(depth)),
                (
                    0.3,
                    lambda: self.emit(
                        f"rasp.Aggregate({self.sel(depth - 1)}, {self.cat(depth - 1, 'int')}, "
                        "reduction='sum')",
                        "float",
                        "Aggregate sum (categorical encoding)",
                    ),
                ),
            ]
        if k == "bool":
            options.append((1.5, lambda: self.bool_sugar(depth)))
        return self.pick(options)()

    def cat_leaf(self, want: str | None) -> str:
        r = self.rng
        tk = self.token_kind
        if want is None or want == tk:
            if tk != "real" and r.random() < 0.6:
                return self.emit("rasp.tokens", tk, "tokens")
            if tk == "real" and r.random() < 0.05:  # real tokens used categorically
                return self.emit("rasp.tokens", "float", "tokens (categorical, real-valued)")
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
                            "rasp.Map(lambda x: 'abc'[x % 3], rasp.indices)",
                            "str",
                            "Map (categorical)",
                        ),
                    ),
                ]
            )()
        return self.pick(
            [
                (1, lambda: self.emit("rasp.Full(True)", "bool", "Full")),
                (
                    2,
                    lambda: self.emit(
                        "rasp.Map(lambda x: x % 2 == 0, rasp.indices)", "bool", "Map (categorical)"
                    ),
                ),
            ]
        )()

    def constant_sop(self, values: list, kind: str) -> str:
        check = self.rng.random() < 0.5
        self.uses_fixed_shape = True
        return self.emit(f"rasp.ConstantSOp({values!r}, check_length={check})", kind, "ConstantSOp")

    def cat_map(self, depth: int, want: str) -> str:
        """A categorical Map whose output kind is ``want`` from any input kind that has one."""
        r = self.rng
        froms = [k for k, fs in CAT_MAPS.items() if any(o == want for _, o in fs)]
        src_kind = r.choice(froms)
        x = (
            self.cat(depth - 1, src_kind)
            if src_kind in ("int", "str", "bool")
            else self.any_cat(depth - 1, src_kind)
        )
        kind_of_x = self.kinds[x]
        fs = CAT_MAPS.get(kind_of_x, CAT_MAPS["mixed"])
        outs = [f for f in fs if f[1] == want] or fs
        f, out = r.choice(outs)
        simplify = r.random() < 0.3
        return self.emit(f"rasp.Map({f}, {x}, simplify={simplify})", out, "Map (categorical)")

    def any_cat(self, depth: int, kind: str) -> str:
        """A categorical S-op of a kind the generator reaches only through tokens or maps."""
        if kind == self.token_kind:
            return self.emit("rasp.tokens", kind, "tokens")
        if kind == "tuple":
            a, b = self.cat(depth, "int"), self.cat(depth, "int")
            return self.emit(
                f"rasp.SequenceMap(lambda x, y: (x, y), {a}, {b})",
                "tuple",
                "SequenceMap (categorical)",
            )
        if kind == "float":
            return self.emit(
                f"rasp.Map(lambda x: x / 2, {self.cat(depth, 'int')})", "float", "Map (categorical)"
            )
        return self.emit(
            f"rasp.Map(lambda x: None if x == 0 else x, {self.cat(depth, 'int')})",
            "mixed",
            "Map (categorical)",
        )

    def cat_pair(self, depth: int, want: str) -> str:
        r = self.rng
        pairs = [(ks, f) for ks, fs in CAT_PAIRS.items() for f in fs if f[1] == want]
        if not pairs:
            return self.cat_map(depth, want)
        (ka, kb), (f, out) = r.choice(pairs)
        a, b = self.cat(depth - 1, ka), self.cat(depth - 1, kb)
        return self.emit(f"rasp.SequenceMap({f}, {a}, {b})", out, "SequenceMap (categorical)")

    def nary(self, depth: int) -> str:
        a, b, c = (self.cat(depth - 1, "int") for _ in range(3))
        return self.emit(
            f"rasp.SequenceMap(lambda x, y, z: x + y - z, {a}, {b}, {c})",
            "int",
            "SequenceMap (3 inputs)",
        )

    def int_sugar(self, depth: int) -> str:
        r = self.rng
        a = self.cat(depth - 1, "int")
        return self.pick(
            [
                (2, lambda: self.emit(f"{a} + {r.randint(1, 3)}", "int", "operator (categorical)")),
                (
                    1,
                    lambda: self.emit(
                        f"{a} * {r.choice([2, -1])}", "int", "operator (categorical)"
                    ),
                ),
                (1, lambda: self.emit(f"{a} % {r.randint(2, 3)}", "int", "operator (categorical)")),
                (
                    1.5,
                    lambda: self.emit(
                        f"{a} - {self.cat(depth - 1, 'int')}",
                        "int",
                        "LinearSequenceMap (categorical)",
                    ),
                ),
                (
                    1.5,
                    lambda: self.emit(
                        f"rasp.LinearSequenceMap({a}, {self.cat(depth - 1, 'int')}, "
                        f"{r.choice([1, 2, -1])}, "
                        f"{r.choice([1, 3, -2])})",
                        "int",
                        "LinearSequenceMap (categorical)",
                    ),
                ),
            ]
        )()

    def bool_sugar(self, depth: int) -> str:
        r = self.rng
        op = r.choice(["==", "!=", "<", "<=", ">", ">="])
        return self.pick(
            [
                (
                    2,
                    lambda: self.emit(
                        f"({self.cat(depth - 1, 'int')} {op} {self.cat(depth - 1, 'int')})",
                        "bool",
                        "operator comparison",
                    ),
                ),
                (
                    1,
                    lambda: self.emit(
                        f"({self.cat(depth - 1, 'int')} {op} {r.randint(0, 3)})",
                        "bool",
                        "operator comparison",
                    ),
                ),
                (1, lambda: self.emit(f"~{self.cat(depth - 1, 'bool')}", "bool", "operator logic")),
                (
                    1,
                    lambda: self.emit(
                        f"({self.cat(depth - 1, 'bool')} {r.choice('&|')} "
                        f"{self.cat(depth - 1, 'bool')})",
                        "bool",
                        "operator logic",
                    ),
                ),
            ]
        )()

    def cat_aggregate(self, depth: int, want: str) -> str:
        r = self.rng
        vals = self.cat(depth - 1, want)
        if r.random() < 0.5:  # a gather: one key per query, always defined
            target = self.cat(depth - 1, "int")
            sel = self.emit(
                f"rasp.Select(rasp.indices, {target}, rasp.Comparison.EQ)", "sel", "Select EQ"
            )
            if r.random() < 0.3:
                sel = self.emit(f"{sel} & {self.sel(depth - 1)}", "sel", "SelectorAnd")
            feature = "Aggregate categorical (one key)"
        else:  # any selector: several distinct values make the interpreter raise
            sel = self.sel(depth - 1)
            feature = "Aggregate categorical (any selector)"
        default = r.choice([None, None, {"int": 0, "str": "'z'", "bool": False}.get(want, None)])
        d = "" if default is None else f", default={default}"
        return self.emit(f"rasp.Aggregate({sel}, {vals}{d})", want, feature)

    def num_to_cat(self, depth: int, want: str) -> str:
        fs = [f for f, k in NUM_TO_CAT if k == want]
        if not fs:
            return self.cat_map(depth, want)
        x = self.num(depth - 1)
        return self.emit(
            f"rasp.categorical(rasp.Map({self.rng.choice(fs)}, {x}))",
            want,
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
                    2,
                    lambda: self.emit(
                        f"{x()} * {r.choice([2, -1, 0.5, 3])} + {r.choice([0, 1, -3, 0.25])}",
                        "num",
                        "affine (numerical)",
                    ),
                ),
                (
                    0.5,
                    lambda: self.emit(f"{x()} / {r.choice([2, -4])}", "num", "affine (numerical)"),
                ),
                (0.5, lambda: self.emit(f"-{x()}", "num", "affine (numerical)")),
                (2.5, lambda: self.named_map(d)),
                (0.5, lambda: self.emit(f"abs({x()})", "num", "abs")),
                (0.5, lambda: self.emit(f"{x()} ** 2", "num", "square")),
                (0.4, lambda: self.emit(f"{r.choice([1, 2])} / {x()}", "num", "scaled reciprocal")),
                (
                    1,
                    lambda: self.emit(
                        f"rasp.numerical(rasp.Map({r.choice(NUM_LAMBDAS)}, {x()}))",
                        "num",
                        "Map (numerical, opaque)",
                    ),
                ),
                (1.5, lambda: self.emit(f"{x()} + {x()}", "num", "LinearSequenceMap (numerical)")),
                (1, lambda: self.emit(f"{x()} - {x()}", "num", "LinearSequenceMap (numerical)")),
                (
                    1,
                    lambda: self.emit(
                        f"rasp.numerical(rasp.LinearSequenceMap({x()}, {x()}, "
                        f"{r.choice([1, 0.5, -2])}, "
                        f"{r.choice([1, 3, -1])}))",
                        "num",
                        "LinearSequenceMap (numerical)",
                    ),
                ),
                (1.5, lambda: self.emit(f"{x()} * {x()}", "num", "SequenceMap product")),
                (0.3, lambda: self.emit(f"{x()} / {x()}", "num", "SequenceMap division")),
                (
                    0.5,
                    lambda: self.emit(
                        f"rasp.numerical(rasp.SequenceMap(lambda x, y: max(x, y), {x()}, {x()}))",
                        "num",
                        "SequenceMap (numerical, opaque)",
                    ),
                ),
                (3, lambda: self.num_aggregate(d)),
                (
                    1.5,
                    lambda: self.emit(
                        f"rasp.SumAggregate({self.sel(d)}, {x()}{self.num_default()})",
                        "num",
                        "SumAggregate",
                    ),
                ),
                (
                    1,
                    lambda: self.emit(
                        f"rasp.numerical(rasp.SelectorWidth({self.sel(d)}))",
                        "num",
                        "SelectorWidth (numerical)",
                    ),
                ),
                (1.5, lambda: self.cat_to_num(d)),
                (
                    0.3,
                    lambda: self.emit(
                        f"rasp.numerical({x()}, "
                        f"value_range=({r.choice([-5, 0])}, {r.choice([3, 50])}))",
                        "num",
                        "value_range",
                    ),
                ),
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
            (
                0.3,
                lambda: self.emit(
                    "rasp.numerical(rasp.ConstantSOp("
                    f"{[r.choice([0, 1, 2.5]) for _ in range(L)]!r}, "
                    f"check_length={r.random() < 0.5}))",
                    "num",
                    "ConstantSOp (numerical)",
                ),
            ),
        ]
        tk = self.token_kind
        if tk in ("int", "float", "bool", "real"):
            opts.append(
                (4, lambda: self.emit("rasp.numerical(rasp.tokens)", "num", "tokens (numerical)"))
            )
        else:  # a numerical view of string or mixed tokens: the interpreter raises
            opts.append(
                (0.3, lambda: self.emit("rasp.numerical(rasp.tokens)", "num", "tokens (numerical)"))
            )
        out = self.pick(opts)()
        if self.lines[-1].startswith(f"{out} = rasp.numerical(rasp.ConstantSOp"):
            self.uses_fixed_shape = True
        return out

    def num_default(self) -> str:
        d = self.rng.choice([None, None, 0, 1, -1, 2.5])
        return "" if d is None else f", default={d}"

    def named_map(self, depth: int) -> str:
        name = self.rng.choice(NAMED_MAPS)
        x = self.num(depth)
        if name in ("log", "sqrt", "rsqrt") and self.rng.random() < 0.7:
            x = self.emit(f"{x} ** 2 + 1", "num", "square")  # mostly inside the domain
        if name == "exp" and self.rng.random() < 0.5:
            x = self.emit(f"rasp.relu({x}) * -1", "num", "named map relu")  # mostly <= 0
        return self.emit(f"rasp.{name}({x})", "num", f"named map {name}")

    def num_aggregate(self, depth: int) -> str:
        r = self.rng
        if r.random() < 0.3:  # a numerical EQ select on integer values (a "numerical gather")
            q, k = self.num_leaf(), self.num_leaf()
            sel = self.emit(f"rasp.Select({k}, {q}, rasp.Comparison.EQ)", "sel", "Select numerical")
        else:
            sel = self.sel(depth)
        vals = self.num(depth) if r.random() < 0.7 else self.cat(depth, r.choice(["int", "bool"]))
        feature = (
            "Aggregate mean (numerical)"
            if self.kinds[vals] == "num"
            else "Aggregate mean of categorical values"
        )
        return self.emit(
            f"rasp.numerical(rasp.Aggregate({sel}, {vals}{self.num_default()}))", "num", feature
        )

    def cat_to_num(self, depth: int) -> str:
        r = self.rng
        k = r.choice(["int", "int", "bool", "str"])
        x = self.cat(depth, k)
        fs = [f for f, o in CAT_MAPS.get(self.kinds[x], []) if o in ("int", "float", "bool")]
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
        return self.pick(
            [
                (5, lambda: self.select(depth)),
                (
                    1.2,
                    lambda: self.emit(
                        f"{self.sel(depth - 1)} & {self.sel(depth - 1)}", "sel", "SelectorAnd"
                    ),
                ),
                (
                    1,
                    lambda: self.emit(
                        f"{self.sel(depth - 1)} | {self.sel(depth - 1)}", "sel", "SelectorOr"
                    ),
                ),
                (0.8, lambda: self.emit(f"~{self.sel(depth - 1)}", "sel", "SelectorNot")),
                (
                    0.3,
                    lambda: self.emit(
                        f"rasp.SelectorAnd({self.sel(depth - 1)}, "
                        f"rasp.SelectorNot({self.sel(depth - 1)}))",
                        "sel",
                        "SelectorAnd",
                    ),
                ),
                (0.3, lambda: self.constant_selector()),
            ]
        )()

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
        if u < 0.12:  # numerical keys and queries
            k, q = self.num(depth - 1), self.num(depth - 1)
            feature = "Select numerical"
        elif u < 0.22:  # keys and queries of different kinds: ordering may be undefined
            ka, kb = r.sample(["int", "str", "bool"], 2)
            k, q = self.cat(depth - 1, ka), self.cat(depth - 1, kb)
            feature = "Select mixed kinds"
        elif u < 0.3:
            kind = r.choice(["int", "str"])
            k, q = self.cat(depth - 1, kind), self.cat(depth - 1, kind)
            pred = r.choice(PREDICATES[kind] + PREDICATES["any"])
            cmp = "lambda"
            feature = "Select custom predicate"
        elif u < 0.36:
            k = q = self.emit(
                "rasp.tokens", self.token_kind if self.token_kind != "real" else "float", "tokens"
            )
            feature = "Select tokens"
        else:
            kind = r.choice(["int", "int", "int", "str", "bool"])
            k, q = self.cat(depth - 1, kind), self.cat(depth - 1, kind)
            feature = "Select categorical"
        self.features.add(f"Comparison {cmp}")
        return self.emit(f"rasp.Select({k}, {q}, {pred})", "sel", feature)

    def rounding_compare(self, depth: int) -> str:
        """A SelectorWidth or numerical mean over a numerical comparison of the tokens, the
        programs the rounding vocabularies are drawn for (``rounding_vocab``)."""
        r = self.rng
        t = self.emit("rasp.numerical(rasp.tokens)", "num", "tokens (numerical)")

        def side() -> str:  # the token direction itself, or a computed copy of it
            if r.random() < 0.25:
                return self.emit(f"rasp.numerical(rasp.Map(lambda x: x, {t}))", "num", "Map")
            return t

        cmp = r.choice(["EQ", "LT", "LEQ", "GT", "GEQ", "NEQ"])
        self.features.add(f"Comparison {cmp}")
        sel = self.emit(
            f"rasp.Select({side()}, {side()}, rasp.Comparison.{cmp})", "sel", "Select numerical"
        )
        if r.random() < 0.25:
            sel = self.emit(f"{sel} & {self.sel(depth - 1)}", "sel", "SelectorAnd")
        if r.random() < 0.5:
            return self.emit(f"rasp.SelectorWidth({sel})", "int", "SelectorWidth")
        return self.emit(
            f"rasp.numerical(rasp.Aggregate({sel}, {t}{self.num_default()}))",
            "num",
            "Aggregate mean (numerical)",
        )


def random_case(rng: random.Random, max_depth: int = 4) -> FuzzCase:
    """A random program of the whole language, compile settings and inputs."""
    g = _Gen(rng)
    depth = rng.randint(1, max_depth)
    u = rng.random()
    if g.vocab_name == "rounding floats" and u < 0.6:
        g.rounding_compare(depth)
    elif u < 0.45:
        g.num(depth)
    else:
        g.cat(depth)
    causal = rng.random() < 0.3
    fixed = rng.random() < (0.5 if g.uses_fixed_shape else 0.05)
    g.features.add("causal" if causal else "non-causal")
    if fixed:
        g.features.add("fixed_length")
    g.features.add(f"vocab: {g.vocab_name}")
    inputs = random_inputs(rng, g.vocab, g.max_seq_len, fixed_length=fixed)
    return FuzzCase(
        program=g.env[f"v{len(g.lines) - 1}"],
        lines=tuple(g.lines),
        kinds=tuple(g.kinds.values()),
        vocab=g.vocab,
        vocab_kind=g.vocab_name,
        max_seq_len=g.max_seq_len,
        causal=causal,
        fixed_length=fixed,
        inputs=inputs,
        features=frozenset(g.features),
        value_scale=_value_scale(g.vocab) if g.vocab_name == "rounding floats" else 1.0,
    )


def _value_scale(vocab: list) -> float:
    """The softmax value_scale of a rounding vocabulary: its largest size (at least 1)."""
    return max([1.0] + [abs(float(v)) for v in vocab])


def random_inputs(
    rng: random.Random, vocab, max_seq_len: int, count: int = INPUTS_PER_CASE, fixed_length=False
) -> list[list]:
    """``count`` token sequences of random lengths (real numbers when ``vocab`` is None)."""
    out = []
    for _ in range(count):
        n = max_seq_len if fixed_length else rng.randint(1, max_seq_len)
        if vocab is None:
            row = [rng.choice([rng.randint(-3, 4), round(rng.uniform(-3, 3), 2)]) for _ in range(n)]
        else:
            row = [rng.choice(vocab) for _ in range(n)]
        out.append(row)
    return out


# -- clear errors -------------------------------------------------------------------------------
CLEAR_TYPES = (NotImplementedError, ValueError, TypeError)
# texts that Python, numpy or torch raise on their own: they name no RASP construct
LIBRARY_TEXTS = (
    "could not broadcast",
    "operands could not be broadcast",
    "setting an array element",
    "invalid literal for int()",
    "could not convert",
    "unsupported operand type",
    "not supported between instances",
    "object of type",
    "is not subscriptable",
    "object is not iterable",
    "must be real number",
    "math domain error",
    "cannot convert float",
    "values to unpack",
    "index out of range",
    "truth value of an array",
    "mat1 and mat2",
    "expected scalar type",
    "is not in list",
    "unexpected keyword argument",
    "required positional argument",
    "positional argument",
    "unhashable type",
    "arrays must have the same",
    "zero-size array",
    "() argument must be",
    "() arg ",
)


def _is_library_text(msg: str) -> bool:
    """Whether ``msg`` *is* a generic library text (not one quoted inside a project message)."""
    return any(0 <= msg.find(t) < 20 for t in LIBRARY_TEXTS)


def is_clear_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a clear error: it says what was wrong, in the project's terms.

    Clear means all of: the type is NotImplementedError (the compiler's UnsupportedError),
    ValueError (RASPEvaluationError included) or TypeError; it was raised by attnsim itself
    (the innermost traceback frame lies in the attnsim package, so it did not leak from numpy,
    torch or a user's function); its message has at least ``MIN_CLEAR_MESSAGE`` characters;
    and it is not one of the generic texts that Python, numpy and torch raise (LIBRARY_TEXTS;
    quoted inside a project message, as in "the function of 'f' raised TypeError: ...", such
    a text is fine).
    Everything else (KeyError, IndexError, AttributeError, AssertionError, RuntimeError,
    ZeroDivisionError, a numpy error text) is unclear.
    """
    if not isinstance(exc, CLEAR_TYPES):
        return False
    if type(exc).__module__.split(".")[0] in ("numpy", "torch"):
        return False
    msg = str(exc).strip()
    if len(msg) < MIN_CLEAR_MESSAGE or _is_library_text(msg):
        return False
    return raised_by_attnsim(exc)


def raised_by_attnsim(exc: BaseException) -> bool:
    """Whether the innermost frame of ``exc``'s traceback runs code of the attnsim package.

    Read from the frame's module name (``attnsim`` or ``attnsim.*``), never from folder
    names: a checkout in a folder called ``attnsim`` holds numpy (in its virtual environment)
    and the tests too.
    """
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    name = tb.tb_frame.f_globals.get("__name__") or ""
    return name == "attnsim" or name.startswith("attnsim.")


def error_category(exc: BaseException) -> str:
    """A short category of an error message: its first item, labels and numbers removed."""
    msg = str(exc).strip()
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    if len(lines) > 1 and lines[0].startswith("cannot compile this program"):
        msg = lines[1].lstrip("- ")
    else:
        msg = lines[0] if lines else ""
    if ": " in msg and msg.split(": ", 1)[0].replace("_", "").replace("@", "").isalnum():
        msg = msg.split(": ", 1)[1]  # drop a leading "label: "
    words = []
    for w in msg.split():
        if w.startswith(("'", '"')) or any(c.isdigit() for c in w):
            w = "…"
        words.append(w)
    text = " ".join(words)
    return f"{type(exc).__name__}: {text[:80]}"


def describe(exc: BaseException) -> str:
    """Type, message and the innermost frame of an exception (for reports)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {str(exc)[:300]}{where}"


# -- comparison --------------------------------------------------------------------------------
def same(a: Any, b: Any) -> bool:
    """Equal RASP values: numbers within REL_TOL/ABS_TOL, bools only equal to bools.

    The model computes in floats, where ``0 * inf`` is NaN: a non-finite value of the
    interpreter (``inf``, ``-inf`` or NaN, from a real-valued input the compiler could not
    enumerate) may come out of the model as NaN; it must never come out finite. (``a`` is the
    model's value, ``b`` the interpreter's, as in :func:`same_row`.)"""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num):
        if isinstance(a, float) and math.isnan(a) and not math.isfinite(b):
            return True
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def same_row(got: list, expected: list) -> bool:
    return len(got) == len(expected) and all(same(a, b) for a, b in zip(got, expected))


# -- one case ------------------------------------------------------------------------------------
@dataclasses.dataclass
class Outcome:
    """What happened to one case: a status (STATUSES), a reason category and details."""

    status: str
    compiled: bool = False  # compiled, and then ran on the inputs
    reason: str = ""
    detail: dict = dataclasses.field(default_factory=dict)
    inputs_agreed: int = 0
    inputs_agreed_by_error: int = 0
    compile_seconds: float = 0.0
    run_seconds: float = 0.0  # the compiled model's runs (not the interpreter's)


def compile_case(case: FuzzCase, attention: str):
    """The compiled model of ``case`` with its settings (raises what the compiler raises)."""
    return compile_program(
        case.program,
        vocab=case.vocab,
        max_seq_len=case.max_seq_len,
        causal=case.causal,
        fixed_length=case.fixed_length,
        attention=attention,
        value_scale=case.value_scale,
    )


def check_case(case: FuzzCase, attention: str) -> Outcome:
    """Compiles ``case`` and compares the model with the interpreter on every input."""
    start = time.perf_counter()
    try:
        model = compile_case(case, attention)
    except Exception as exc:  # noqa: BLE001 - every exception is classified
        if is_clear_error(exc):
            return Outcome(
                "refused", False, "compile: " + error_category(exc), {"error": describe(exc)}
            )
        return Outcome(
            "unclear_error", False, "compile: " + describe(exc), {"error": describe(exc)}
        )
    out = Outcome("agreed", compiled=True, compile_seconds=time.perf_counter() - start)
    worst = {"agreed": 0, "agreed_by_error": 1, "refused": 2, "disagreement": 3, "unclear_error": 4}

    def note(status: str, reason: str, detail: dict) -> None:
        if worst[status] > worst[out.status]:
            out.status, out.reason, out.detail = status, reason, detail

    for xs in case.inputs:
        detail = {"input": xs}
        try:
            expected = rasp.evaluate(case.program, xs, causal=case.causal)
            oracle_exc = None
        except Exception as exc:  # noqa: BLE001
            expected, oracle_exc = None, exc
            detail["expected"] = describe(exc)
            if not is_clear_error(exc):
                note("unclear_error", "interpreter: " + describe(exc), detail)
                continue
        start = time.perf_counter()
        try:
            got = model.run(xs)
            run_exc = None
            detail["got"] = got
        except Exception as exc:  # noqa: BLE001
            got, run_exc = None, exc
            detail["got"] = describe(exc)
        out.run_seconds += time.perf_counter() - start
        if oracle_exc is None:
            detail["expected"] = expected
        if run_exc is not None and not is_clear_error(run_exc):
            note("unclear_error", "run: " + describe(run_exc), detail)
        elif oracle_exc is not None and run_exc is not None:
            out.inputs_agreed_by_error += 1
            note("agreed_by_error", "", detail)
        elif oracle_exc is not None:
            note("disagreement", "returned a value where the interpreter raised", detail)
        elif run_exc is not None:
            note("refused", "run: " + error_category(run_exc), detail)
        elif same_row(got, expected):
            out.inputs_agreed += 1
        else:
            note("disagreement", "different values", detail)
    return out


@dataclasses.dataclass
class Tally:
    """Counts over many cases (and a few examples of every bad outcome)."""

    drawn: int = 0
    compiled: int = 0  # compiled and ran on its inputs
    statuses: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    refusals: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    bad_reasons: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    features: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    not_evaluable: int = 0  # the interpreter raised on every input
    compile_seconds: float = 0.0
    run_seconds: float = 0.0
    examples: list = dataclasses.field(default_factory=list)
    max_examples: int = 20

    def add(self, case: FuzzCase, outcome: Outcome, attention: str) -> None:
        self.drawn += 1
        self.statuses[outcome.status] += 1
        self.features.update(case.features)
        self.compiled += outcome.compiled
        self.compile_seconds += outcome.compile_seconds
        self.run_seconds += outcome.run_seconds
        if outcome.inputs_agreed_by_error == len(case.inputs):
            self.not_evaluable += 1
        if outcome.status == "refused":
            self.refusals[outcome.reason] += 1
        if outcome.status in ("disagreement", "unclear_error"):
            self.bad_reasons[f"{outcome.status}: {outcome.reason[:120]}"] += 1
            if len(self.examples) < self.max_examples:
                self.examples.append(
                    {
                        "status": outcome.status,
                        "reason": outcome.reason,
                        "detail": _jsonable(outcome.detail),
                        "source": case.source(attention),
                    }
                )

    @property
    def disagreements(self) -> int:
        return self.statuses["disagreement"]

    @property
    def unclear_errors(self) -> int:
        return self.statuses["unclear_error"]


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else repr(x)
    return repr(x)


def fuzz(n_programs: int, seed: int, attention: str) -> Tally:
    """Draws ``n_programs`` cases from ``seed`` and checks each one in ``attention`` mode."""
    rng = random.Random(seed)
    tally = Tally()
    for _ in range(n_programs):
        case = random_case(rng)
        tally.add(case, check_case(case, attention), attention)
    return tally
