"""Run-time checks: where the compiled model could differ from the interpreter, it raises.

A compiled model computes on one-hot blocks and linear forms; three things the interpreter
does cannot be written in weights, so the model checks for them when it runs (on by default
in ``CompiledModel.run``) and raises the interpreter's error instead of answering wrongly:

- a categorical ``Aggregate`` that selects several distinct values: the interpreter raises,
  the model would hold a mixture (every categorical aggregate's block must be one-hot);
- a function that raises on a value (``lambda x: 10 // x`` at 0), or a numerical map that
  gives a non-number: the interpreter raises, the model would give None or 0 (those values,
  or combinations of values, may not occur);
- None (no value, from an empty categorical aggregate) reaching a numerical map, a selector
  or a numerical aggregate that treats None otherwise than the model does: the model reads
  None as 0 and never selects by it (the S-op may not be None there). A categorical map of
  None is None in both, without calling the function (tracr's semantics).

The checks read the final residual stream: each S-op's directions are written only by the
S-op itself, so they are complete there.

>>> from attnsim import rasp
>>> from attnsim.compiler import compile_program
>>> others = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.NEQ)
>>> pick = rasp.Aggregate(others, rasp.tokens).named("pick")
>>> model = compile_program(pick, vocab="abc", max_seq_len=3)
>>> model.run("ab")
['b', 'a']
>>> try:
...     model.run("abc")
... except ValueError as exc:
...     print(str(exc)[:100])
run-time check failed: categorical Aggregate 'pick' would average several distinct values ('b', 'c')
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from attnsim.compiler import scheduling, tracing
from attnsim.compiler.lowering import LoweredProgram, Rep, UnsupportedError
from attnsim.compiler.value_inference import MAX_TABLE, ValueInference, as_read, call_function
from attnsim.model.compiled import GuardSpec
from attnsim.rasp import expr as E
from attnsim.values import is_numeric

MIXTURE_ADVICE = (
    "a categorical aggregate must select one value (make the selector select one key, or "
    "annotate the aggregate numerical to take the mean)"
)
NONE_ADVICE = (
    "give the Aggregate that can select nothing a default (Aggregate(..., default=...)) so "
    "that the value is never None"
)

_RAISED = object()


@dataclasses.dataclass(frozen=True)
class _Placed:
    """A lowered program with the stages its schedule gives."""

    low: LoweredProgram
    sched: scheduling.Schedule

    def block(self, sop: E.SOp) -> Rep | None:
        return self.low.block_of(sop.uid)

    def stage(self, r: Rep) -> int:
        return self.sched.stage(r.after)


def runtime_guards(
    graph: tracing.Graph,
    vi: ValueInference,
    lowered: LoweredProgram,
    sched: scheduling.Schedule,
) -> list[GuardSpec]:
    """Every run-time check of a scheduled program: the lowering's value checks (at the
    stages the schedule gives), then the block checks above, in dependency order.

    Raises:
        NotImplementedError: an S-op that holds no value but None where a check needs one.
    """
    planned = [dataclasses.replace(g.spec, stage=sched.stage(g.after)) for g in lowered.guards]
    out = _dedupe(planned)
    low = _Placed(lowered, sched)
    combined = _combined_leaves(graph)
    for uid in graph.order:
        node = graph.nodes[uid]
        if isinstance(node, E.Aggregate):
            out.extend(_aggregate_guards(node, vi, low))
        elif isinstance(node, (E.Map, E.SequenceMap)):
            out.extend(_function_guards(node, vi, low))
        elif isinstance(node, E.Select):
            out.extend(_select_guards(node, vi, low, combined.get(uid)))
    return out


def _combined_leaves(graph: tracing.Graph) -> dict[int, str]:
    """Selects under a SelectorNot or SelectorOr, with the label of the outermost one."""
    out: dict[int, str] = {}
    for uid in reversed(graph.order):  # outermost first
        node = graph.nodes[uid]
        if not isinstance(node, (E.SelectorNot, E.SelectorOr)) or uid in out:
            continue
        stack = list(node.children)
        while stack:
            c = stack.pop()
            if isinstance(c, E.Select):
                out.setdefault(c.uid, node.label)
            elif isinstance(c, E.Selector):
                out.setdefault(c.uid, node.label)
                stack.extend(c.children)
    return out


def _dedupe(guards: list[GuardSpec]) -> list[GuardSpec]:
    seen = set()
    out = []
    for g in guards:
        key = (g.form, g.stage, g.allowed, g.integer, g.value_range, g.cancellation, g.relative)
        if key not in seen:
            seen.add(key)
            out.append(g)
    return out


def _spec(low: _Placed, label: str, r: Rep, **kw: Any) -> GuardSpec:
    return GuardSpec(
        label, (), low.stage(r), dims=tuple(r.dims), names=tuple(repr(v) for v in r.values), **kw
    )


def _not_none(low: _Placed, sop: E.SOp, reason: str) -> list[GuardSpec]:
    r = low.block(sop)
    if r is None:
        return []
    if not r.dims:  # no value but None: the check would fail at every position
        raise UnsupportedError(
            f"{sop.label!r} holds no value but None at any position, and {reason}; {NONE_ADVICE}"
        )
    return [_spec(low, sop.label, r, none_ok=False, reason=f"{reason}; {NONE_ADVICE}")]


def _aggregate_guards(e: E.Aggregate, vi: ValueInference, low: _Placed) -> list:
    numeric = E.is_numerical(e) or e.reduction == "sum"
    if not numeric:
        r = low.low.reps.get(e.uid)
        if r is None or r.kind != "cat" or len(r.dims) < 2:
            return []  # one value (or none) cannot be mixed
        return [_spec(low, e.label, r, one_hot=True, reason=MIXTURE_ADVICE)]
    if not E.is_numerical(e.sop) and vi.may_be_none(e.sop):
        return _not_none(
            low,
            e.sop,
            f"the values aggregated by {e.label!r} are numerical but {e.sop.label!r} holds "
            "None (the interpreter refuses it; the compiled model would read 0)",
        )
    return []


def _call(f: Any, *args: Any) -> Any:
    try:
        return f(*args)
    except Exception as exc:
        return (_RAISED, exc)


def _call_map(e: E.Map | E.SequenceMap, args: tuple) -> Any:
    """The map's value as the interpreter computes it: None where an argument is None (the
    function is not called), else the function on the values as the interpreter passes them."""
    if any(a is None for a in args):
        return None
    try:
        return call_function(e, args)
    except Exception as exc:
        return (_RAISED, exc)


def _raised(out: Any) -> bool:
    return isinstance(out, tuple) and len(out) == 2 and out[0] is _RAISED


def _mismatch(e: E.Map | E.SequenceMap, args: tuple, got: Any, numeric: bool) -> str | None:
    """Why the model differs from the interpreter on ``args`` (None when it does not).

    ``got`` is the interpreter's value (``_call_map``). The model gives ``f(*args)`` where no
    argument is None and the function returns a value. Where one is None it gives None
    without calling the function, as the interpreter does, except that a numerical S-op
    cannot hold None: the interpreter raises there, and the model would read it as 0.
    """
    shown = ", ".join(repr(a) for a in args)
    if _raised(got):
        exc = got[1]
        return f"the function of {e.label!r} raised {type(exc).__name__}: {exc} on ({shown})"
    if numeric and any(a is None for a in args):
        return (
            f"S-op {e.label!r} is numerical but holds the value None (an input is None: "
            f"({shown})); numerical S-ops need numbers; {NONE_ADVICE}"
        )
    if numeric and not is_numeric(got):
        return (
            f"S-op {e.label!r} is numerical but holds the value {got!r} (its function on "
            f"({shown})); numerical S-ops need numbers (annotate it categorical, or map the "
            "value to a number first)"
        )
    return None


def _function_guards(e: E.Map | E.SequenceMap, vi: ValueInference, low: _Placed) -> list[GuardSpec]:
    """Forbids the input combinations where the model's map differs from the interpreter's."""
    inputs = [e.inner] if isinstance(e, E.Map) else list(e.sops)
    numeric = E.is_numerical(e)
    blocks = [low.block(s) for s in inputs]
    if any(b is None for b in blocks):
        # sums, products and quotients of numbers: no function is called, but a numerical
        # S-op cannot hold None (the interpreter raises), where the model would read 0
        out = _form_guards(e, vi, low, numeric) if isinstance(e, E.Map) else []
        for s in inputs if numeric else ():
            if not E.is_numerical(s) and vi.may_be_none(s):
                reason = f"the numerical S-op {e.label!r} cannot hold None (the interpreter raises)"
                out.extend(_not_none(low, s, reason))
        return out
    choices = []
    for s, b in zip(inputs, blocks):
        none = not E.is_numerical(s) and vi.may_be_none(s)
        choices.append([*range(len(b.values)), *([-1] if none else [])])
    total = 1
    for c in choices:
        total *= len(c)
    if total > MAX_TABLE:  # too many to list: at least keep None away where it can arrive
        return [
            g
            for s, c in zip(inputs, choices)
            if -1 in c
            for g in _not_none(low, s, f"{e.label!r} is too large to check on None")
        ]
    forbidden = []
    for combo in itertools.product(*choices):
        args = tuple(None if k < 0 else b.values[k] for b, k in zip(blocks, combo))
        problem = _mismatch(e, args, _call_map(e, args), numeric)
        if problem is not None:
            forbidden.append((combo, problem))
    if not forbidden:
        return []
    for s, b in zip(inputs, blocks):
        if not b.dims:  # no value but None: every position is a forbidden combination
            raise UnsupportedError(
                f"{s.label!r} holds no value but None at any position, and "
                f"{forbidden[0][1]}; a compiled model cannot answer there"
            )
    return [
        GuardSpec(
            e.label,
            (),
            max(low.stage(b) for b in blocks),
            dims=tuple(d for b in blocks for d in b.dims),
            names=tuple(repr(v) for b in blocks for v in b.values),
            sizes=tuple(len(b.dims) for b in blocks),
            forbidden=tuple(forbidden),
        )
    ]


def _form_guards(e: E.Map, vi: ValueInference, low: _Placed, numeric: bool) -> list[GuardSpec]:
    """A map of a number with a finite value set: its value may not be one it fails on."""
    r = low.low.reps.get(e.inner.uid)
    vals = vi.values(e.inner)
    if r is None or r.kind != "num" or vals is None or len(vals) > MAX_TABLE:
        return []
    if not all(is_numeric(v) for v in vals):
        return []  # the model reads this S-op as a number: every value must be one
    op = e._op
    if op is not None and op.numpy_fn is not None and E.is_numerical(e.inner):
        return []  # a named numerical op: the interpreter computes it with numpy, no raise
    good, problems = [], []
    for v in vals:
        problem = _mismatch(e, (as_read(v),), _call_map(e, (v,)), numeric)
        (problems if problem is not None else good).append(problem or v)
    if not problems:
        return []
    return [
        GuardSpec(
            e.label,
            tuple(sorted(r.form.items())),
            low.stage(r),
            allowed=tuple(float(v) for v in good if is_numeric(v)),
            reason=f"the interpreter raises there: {problems[0]}",
        )
    ]


def _select_guards(
    e: E.Select, vi: ValueInference, low: _Placed, combined: str | None
) -> list[GuardSpec]:
    pred = e.predicate
    if pred in (E.Comparison.TRUE, E.Comparison.FALSE):
        return []
    sides = [(e.keys, True), (e.queries, False)]
    if not any(not E.is_numerical(s) and vi.may_be_none(s) for s, _ in sides):
        return []
    table = low.block(e.keys) is not None and low.block(e.queries) is not None
    out: list[GuardSpec] = []
    for s, is_key in sides:
        if E.is_numerical(s) or not vi.may_be_none(s):
            continue
        other = e.queries if is_key else e.keys
        ovals = vi.values(other)
        if combined is not None:
            problem = (
                f"selector {combined!r} combines {e.label!r} with not/or, and the compiled "
                "model reads None there as a value that no predicate holds for"
            )
        elif not table or ovals is None:
            problem = f"selector {e.label!r} compares it with a number, where None would count as 0"
        else:
            problem = None
            candidates = list(ovals) + ([None] if vi.may_be_none(other) else [])
            for v in candidates:
                args = (None, v) if is_key else (v, None)
                got = _call(pred, *args)
                if _raised(got):
                    exc = got[1]
                    problem = (
                        f"the interpreter raises there: the function of {e.label!r} raised "
                        f"{type(exc).__name__}: {exc} on ({args[0]!r}, {args[1]!r})"
                    )
                    break
                if got:
                    problem = (
                        f"the interpreter's selector {e.label!r} selects on None "
                        f"(key {args[0]!r}, query {args[1]!r}), a compiled model never does"
                    )
                    break
        if problem is not None:
            out.extend(_not_none(low, s, problem))
    return out
