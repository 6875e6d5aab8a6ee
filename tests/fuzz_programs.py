"""Random well-typed RASP programs that the compiler is meant to handle (for differential tests).

``random_program(rng)`` returns ``(program, vocab, max_seq_len)``. Categorical S-ops take small
integer values; categorical aggregates always select at most one key and carry a default, so
no value is ever None; numerical S-ops feed only the operations defined on real numbers.
"""

from __future__ import annotations

import random

from attnsim import rasp

C = rasp.Comparison
CAT_FUNCS = [
    ("x+1", lambda x: x + 1),
    ("x-1", lambda x: x - 1),
    ("x%3", lambda x: x % 3),
    ("2x", lambda x: 2 * x),
    ("min(x,3)", lambda x: min(x, 3)),
    ("|x-2|", lambda x: abs(x - 2)),
    ("x>1", lambda x: int(x > 1)),
]
PAIR_FUNCS = [
    ("x+y", lambda x, y: x + y),
    ("x-y", lambda x, y: x - y),
    ("max", lambda x, y: max(x, y)),
    ("x*y%5", lambda x, y: (x * y) % 5),
    ("x==y", lambda x, y: int(x == y)),
]
COMPARISONS = [C.EQ, C.LT, C.LEQ, C.GT, C.GEQ, C.NEQ, C.TRUE]


class _Gen:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.vocab = list(range(rng.randint(2, 5)))
        self.max_seq_len = rng.randint(3, 8)

    def cat(self, depth: int) -> rasp.SOp:
        r = self.rng
        if depth <= 0 or r.random() < 0.25:
            return r.choice([rasp.tokens, rasp.indices])
        k = r.randrange(5)
        if k == 0:
            name, f = r.choice(CAT_FUNCS)
            return rasp.Map(f, self.cat(depth - 1), simplify=False)
        if k == 1:
            name, f = r.choice(PAIR_FUNCS)
            return rasp.SequenceMap(f, self.cat(depth - 1), self.cat(depth - 1))
        if k == 2:
            # a gather: at most one key selected, so the categorical aggregate is defined
            target = self.cat(depth - 1)
            sel = rasp.Select(rasp.indices, target, C.EQ)
            if r.random() < 0.5:
                sel = sel & self.selector(depth - 1)
            return rasp.Aggregate(sel, self.cat(depth - 1), default=0)
        if k == 3:
            return rasp.SelectorWidth(self.selector(depth - 1))
        return rasp.Map(r.choice(CAT_FUNCS)[1], rasp.tokens, simplify=False)

    def selector(self, depth: int) -> rasp.Selector:
        r = self.rng
        k = r.randrange(6)
        if depth <= 0 or k < 3:
            return rasp.Select(self.cat(depth - 1), self.cat(depth - 1), r.choice(COMPARISONS))
        if k == 3:
            return self.selector(depth - 1) & self.selector(depth - 1)
        if k == 4:
            return self.selector(depth - 1) | self.selector(depth - 1)
        return ~self.selector(depth - 1)

    def num_int(self, depth: int) -> rasp.SOp:
        """An integer-valued numerical S-op (usable in numerical EQ selects)."""
        r = self.rng
        k = r.randrange(4)
        if depth <= 0 or k == 0:
            return rasp.numerical(rasp.Map(lambda x: x, r.choice([rasp.indices, rasp.tokens])))
        if k == 1:
            return rasp.numerical(rasp.SelectorWidth(self.selector(depth - 1)))
        if k == 2:
            return rasp.numerical(rasp.Map(r.choice(CAT_FUNCS)[1], self.cat(depth - 1)))
        return self.num_int(depth - 1) + self.num_int(depth - 1)

    def num(self, depth: int) -> rasp.SOp:
        r = self.rng
        if depth <= 0:
            return self.num_int(0)
        k = r.randrange(8)
        if k == 0:
            return self.num_int(depth - 1)
        if k == 1:
            return rasp.numerical(rasp.Aggregate(self.selector(depth - 1), self.num(depth - 1)))
        if k == 2:
            return rasp.SumAggregate(self.selector(depth - 1), self.num(depth - 1))
        if k == 3:
            return self.num(depth - 1) * self.num(depth - 1)
        if k == 4:
            return self.num(depth - 1) * r.choice([2, -1, 0.5]) + r.choice([0, 1, -3])
        if k == 5:
            return self.num(depth - 1) - self.num(depth - 1)
        if k == 6:
            q, kk = self.num_int(depth - 1), self.num_int(depth - 1)
            sel = rasp.Select(kk, q, C.EQ)
            return rasp.numerical(
                rasp.Aggregate(sel, self.num(depth - 1), default=r.choice([0, 2]))
            )
        return rasp.numerical(
            rasp.Aggregate(self.selector(depth - 1), self.num(depth - 1), default=-1)
        )


def random_program(rng: random.Random, max_depth: int = 5):
    """A random program, its vocabulary and max_seq_len."""
    g = _Gen(rng)
    depth = rng.randint(1, max_depth)
    prog = g.num(depth) if rng.random() < 0.5 else g.cat(depth)
    return prog, g.vocab, g.max_seq_len


def random_inputs(rng: random.Random, vocab, max_seq_len, count: int = 4):
    """Random token sequences (one length per batch) for a program."""
    n = rng.randint(1, max_seq_len)
    return [[rng.choice(vocab) for _ in range(n)] for _ in range(count)]
