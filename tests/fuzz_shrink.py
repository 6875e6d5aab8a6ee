"""Shrinks a failing fuzz case to a small reproducer, for triage (not a test).

A case fails when ``check_case`` reports a disagreement or an unclear error. ``shrink`` keeps
the failure (the same status and the same kind of reason) while it

- replaces a binding by one of its inputs of the same kind, or by a leaf of that kind
  (``rasp.indices``, ``rasp.Full(1)``, ...), then drops bindings nothing reads;
- keeps only the failing input, drops positions, shortens ``max_seq_len`` and the vocabulary,
  turns off ``causal`` and ``fixed_length``.

Usage: python -m tests.fuzz_shrink [--programs N] [--seed S] [--attention hard]
(prints one shrunk reproducer per distinct failure signature).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import math
import random
import re

from attnsim import rasp
from tests import fuzz_programs as fp

VAR = re.compile(r"\bv(\d+)\b")
LEAVES = {
    "int": ["rasp.indices", "rasp.Full(0)", "rasp.Full(1)", "rasp.tokens"],
    "str": ["rasp.Full('a')", "rasp.tokens"],
    "bool": ["rasp.Full(True)", "rasp.Full(False)", "rasp.tokens"],
    "num": [
        "rasp.numerical(rasp.indices)",
        "rasp.numerical(rasp.Full(1))",
        "rasp.numerical(rasp.tokens)",
    ],
    "sel": [
        "rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.TRUE)",
        "rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.EQ)",
    ],
}


def _split(line: str) -> tuple[str, str]:
    name, expr = line.split(" = ", 1)
    return name, expr


def _rebuild(
    case: fp.FuzzCase, lines: list[str], kinds: list[str], **changes
) -> fp.FuzzCase | None:
    """The case with new program lines (aliases inlined, dead bindings dropped), or None."""
    alias: dict[str, str] = {}
    resolved, rkinds = [], []
    for line, kind in zip(lines, kinds):
        name, expr = _split(line)
        expr = VAR.sub(lambda m: alias.get(m.group(0), m.group(0)), expr)
        if VAR.fullmatch(expr):
            alias[name] = expr
            continue
        resolved.append(f"{name} = {expr}")
        rkinds.append(kind)
    program = _split(lines[-1])[0]
    program = alias.get(program, program)
    lines, kinds = resolved, rkinds
    keep = {program}
    for line in reversed(lines):
        name, expr = _split(line)
        if name in keep:
            keep.update(f"v{m}" for m in VAR.findall(expr))
    pairs = [(ln, k) for ln, k in zip(lines, kinds) if _split(ln)[0] in keep]
    last = next(j for j, (ln, _) in enumerate(pairs) if _split(ln)[0] == program)
    pairs = pairs[: last + 1]  # the program is the last binding
    env = {"rasp": rasp, "math": math}
    try:
        for ln, _ in pairs:
            exec(ln, env)  # noqa: S102 - our own generated source
    except Exception:  # noqa: BLE001 - an edit that does not build is simply not taken
        return None
    return dataclasses.replace(
        case,
        program=env[_split(pairs[-1][0])[0]],
        lines=tuple(ln for ln, _ in pairs),
        kinds=tuple(k for _, k in pairs),
        **changes,
    )


def signature(outcome: fp.Outcome) -> str:
    """What must stay the same while shrinking: the status and the kind of reason."""
    reason = outcome.reason
    if outcome.status == "unclear_error":
        reason = reason.split(":", 2)[0] + ":" + reason.split(":", 2)[1][:30]
    return f"{outcome.status}: {reason[:45]}"


def shrink(case: fp.FuzzCase, attention: str, max_checks: int = 3000) -> fp.FuzzCase:
    """A smaller case with the same failure signature as ``case``."""
    first = fp.check_case(case, attention)
    want = signature(first)
    checks = 0

    def fails(c: fp.FuzzCase | None) -> bool:
        nonlocal checks
        if c is None or checks >= max_checks:
            return False
        checks += 1
        return signature(fp.check_case(c, attention)) == want

    # one failing input
    bad = first.detail.get("input")
    if bad is not None and fails(dataclasses.replace(case, inputs=[bad])):
        case = dataclasses.replace(case, inputs=[bad])
    changed = True
    while changed and checks < max_checks:
        changed = False
        lines, kinds = list(case.lines), list(case.kinds)
        for i in range(len(lines) - 1, -1, -1):
            if i >= len(lines):
                continue
            name, expr = _split(lines[i])
            options = [f"v{m}" for m in VAR.findall(expr) if kinds[_index(lines, m)] == kinds[i]]
            options += [leaf for leaf in LEAVES.get(kinds[i], []) if leaf != expr]
            if ".named(" in expr:
                options.insert(0, re.sub(r"^\((.*)\)\.named\('n\d+'\)$", r"\1", expr))
            for opt in options:
                new = lines[:i] + [f"{name} = {opt}"] + lines[i + 1 :]
                cand = _rebuild(case, new, kinds)
                if fails(cand):
                    case, changed = cand, True
                    lines, kinds = list(case.lines), list(case.kinds)
                    break
        # settings and input
        row = case.inputs[0]
        tries = []
        for j in range(len(row)):
            tries.append({"inputs": [row[:j] + row[j + 1 :]]} if len(row) > 1 else None)
        if case.causal:
            tries.append({"causal": False})
        if case.fixed_length:
            tries.append({"fixed_length": False})
        if case.max_seq_len > len(row):
            tries.append({"max_seq_len": len(row)})
        if case.vocab is not None:
            for v in case.vocab:
                if v not in row and len(case.vocab) > 1:
                    tries.append({"vocab": [w for w in case.vocab if w != v]})
        for t in tries:
            if t is None:
                continue
            if case.fixed_length and "inputs" in t:
                t = {**t, "max_seq_len": len(t["inputs"][0]) or 1}
            cand = _rebuild(case, list(case.lines), list(case.kinds), **t)
            if fails(cand):
                case, changed = cand, True
                break
    return case


def _index(lines: list[str], m: str) -> int:
    for j, ln in enumerate(lines):
        if ln.startswith(f"v{m} = "):
            return j
    raise KeyError(m)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--attention", default="hard")
    parser.add_argument("--per-signature", type=int, default=3)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    seen: collections.Counter = collections.Counter()
    shrunk: dict[str, list[str]] = collections.defaultdict(list)
    for _ in range(args.programs):
        case = fp.random_case(rng)
        out = fp.check_case(case, args.attention)
        if out.status not in ("disagreement", "unclear_error"):
            continue
        small = shrink(case, args.attention)
        text = "\n".join(small.lines)
        key = signature(out) + " | " + text
        seen[key] += 1
        if seen[key] == 1 and len(shrunk[signature(out)]) < args.per_signature:
            shrunk[signature(out)].append(small.source(args.attention))
    for sig, sources in shrunk.items():
        print(f"#### {sig}")
        for s in sources:
            print(s.split("\n", 3)[3])
            print("----")
    print(f"{sum(seen.values())} failing programs, {len(seen)} distinct shrunk forms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
