"""Ground truth for interpretability: which head computes which RASP operation, checked by
activation patching against the interpreter.

Compile ``sort``, look up the head that computes ``target_pos`` (each token's place in the
sorted output), patch that head's output from a run on input B into a run on input A, and
compare with the interpreter run on A where ``target_pos`` takes B's values.
"""

import copy

from attnsim.compiler import compile_program
from attnsim.rasp import expr as E
from attnsim.rasp import interpret, library


def replace(program: E.RASPExpr, target: E.RASPExpr, values: list) -> E.RASPExpr:
    """``program`` with the expression ``target`` replaced by a constant sequence."""
    const = E.categorical(E.Map(lambda i: values[i], E.indices))
    done: dict[int, E.RASPExpr] = {}

    def rebuild(e: E.RASPExpr) -> E.RASPExpr:
        if e.uid == target.uid:
            return const
        if e.uid not in done:
            new, changed = copy.copy(e), False
            for key, val in vars(e).items():
                if isinstance(val, E.RASPExpr) and rebuild(val) is not val:
                    setattr(new, key, rebuild(val))
                    changed = True
                elif isinstance(val, (list, tuple)) and any(isinstance(v, E.RASPExpr) for v in val):
                    got = type(val)(rebuild(v) for v in val)
                    if any(a is not b for a, b in zip(got, val)):
                        setattr(new, key, got)
                        changed = True
            if changed:
                new._uid = next(E._ids)  # a new expression for the interpreter's memo
                new._annotations = dict(e._annotations)
            done[e.uid] = new if changed else e
        return done[e.uid]

    return rebuild(program)


def find(program: E.RASPExpr, label: str) -> E.RASPExpr:
    stack = [program]
    while stack:
        e = stack.pop()
        if e.label == label:
            return e
        stack.extend(e.children)
    raise KeyError(label)


entry = library.PROGRAMS["sort"]
program = entry.factory()
model = compile_program(program, vocab=entry.vocab, max_seq_len=entry.max_seq_len)
table = model.components()
print(table)

a, b = ["c", "a", "d", "b"], ["a", "b", "d", "c"]
(head,) = table.heads("target_pos")
print(f"\ntarget_pos is computed by {head.name} ({head.hook}, head {head.start})")
patched = model.run_patched(a, b, [head])
target = find(program, "target_pos")
want = interpret.evaluate(replace(program, target, interpret.evaluate(target, b)), a)
print(f"sort({a}) = {model.run(a)}; with target_pos from {b}: {patched} (interpreter: {want})")
assert patched == want and patched != model.run(a)
