"""Refactors change no behaviour: the compiled weights of a fixed set of models are pinned.

``tests/data/weight_hashes.json`` records, for every library program, every matrix program at
two shapes, the tasks, and U(4, 4, 2) in both layer kinds, the SHA-256 of the model's weights
(every tensor's name, shape, dtype and bytes, in name order) and of its residual basis (the
direction labels in order). A change that alters any of them fails here; one that changes
weights on purpose regenerates the table with

    python tests/test_weight_hashes.py --write

and says why in its commit.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

TABLE = Path(__file__).parent / "data" / "weight_hashes.json"


def fresh_build(build: Callable):
    """Runs ``build`` with RASP's expression counter at a fixed start, then restores it.

    Default labels (``map_17``) come from a process-wide counter, so the same program built
    after other work gets other labels; a fixed start far above any other expression's
    number makes each case's labels (and so its basis order) the same in every process.
    """
    from attnsim.rasp import expr

    saved = expr._ids
    expr._ids = itertools.count(10**12)
    try:
        return build()
    finally:
        expr._ids = saved


def weight_hash(model) -> dict[str, str]:
    """{"weights": sha256 of every tensor, "residual": sha256 of the basis labels}."""
    state = model.model.state_dict()
    cfg = model.config
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        if ".attn.W_" in name:  # a layer's own heads, padded to the model's (the pinned form)
            t = _padded_heads(t, name, cfg.n_heads, cfg.d_head)
        if ".mlp.W_bil_" in name:  # a layer's own bilinear units, padded likewise
            t = _padded_units(t, name.endswith("_out"), cfg.d_bilinear)
        h.update(f"{name}|{tuple(t.shape)}|{t.dtype}|".encode())
        h.update(t.numpy().tobytes())
    r = hashlib.sha256("\n".join(model.residual).encode())
    return {"weights": h.hexdigest(), "residual": r.hexdigest()}


def _padded_heads(t, name: str, n_heads: int, d_head: int):
    import torch

    shape = (n_heads, d_head, t.shape[2]) if name.endswith("W_O") else (n_heads, t.shape[1], d_head)
    out = torch.zeros(shape, dtype=t.dtype)
    if name.endswith("W_O"):
        out[: t.shape[0], : t.shape[1]] = t
    else:
        out[: t.shape[0], :, : t.shape[2]] = t
    return out.contiguous()


def _padded_units(t, rows: bool, width: int):
    import torch

    shape = (width, t.shape[1]) if rows else (t.shape[0], width)
    out = torch.zeros(shape, dtype=t.dtype)
    out[: t.shape[0], : t.shape[1]] = t
    return out.contiguous()


def _library() -> dict[str, Callable]:
    from attnsim.compiler import compile_program
    from attnsim.rasp import library

    out = {}
    for name, entry in library.PROGRAMS.items():
        out[f"library/{name}"] = lambda e=entry: compile_program(
            e.factory(), vocab=e.vocab, max_seq_len=e.max_seq_len
        )
    return out


def _matrix() -> dict[str, Callable]:
    from attnsim.compiler import compile_program
    from attnsim.matrix import layout, programs

    def fixed(program, length):  # as attnsim.matrix.apply compiles (without its cache)
        return compile_program(program, vocab=None, max_seq_len=length, fixed_length=True)

    def compiled(program_name, args, *arrays):
        length = layout.pack(*[np.zeros(s) for s in arrays]).shape[-1]
        return lambda: fixed(getattr(programs, program_name)(*args), length)

    out = {}
    for r, c in ((2, 3), (3, 3)):
        out[f"matrix/transpose/{r}x{c}"] = compiled("transpose", (r, c), (r, c))
        out[f"matrix/softmax/{r}x{c}"] = compiled("softmax", (r, c), (r, c))
        out[f"matrix/bias_add/{r}x{c}"] = compiled("bias_add", (r, c), (r, c), (c,))
    for r, k, c in ((2, 3, 2), (3, 3, 3)):
        length = programs.matmul_input_length(r, k, c)
        out[f"matrix/matmul/{r}x{k}x{c}"] = lambda r=r, k=k, c=c, n=length: fixed(
            programs.matmul(r, k, c), n
        )
    for n in (4, 6):
        out[f"matrix/relu/{n}"] = lambda n=n: fixed(programs.relu(), n)
        out[f"matrix/maxmin/{n}"] = lambda n=n: fixed(programs.maxmin(), n)
        out[f"matrix/scale/{n}"] = lambda n=n: fixed(programs.scale(2.5), n)
    for n in (2, 3):
        for name in ("det", "inverse", "inverse_residual", "singular_flag"):
            out[f"matrix/{name}/{n}"] = compiled(name, (n,), (n, n))
    return out


def _tasks() -> dict[str, Callable]:
    from attnsim.compiler import compile_program
    from attnsim.tasks import match2, parity

    pairs = [(0, False), (0, True), (1, False), (1, True)]
    return {
        "tasks/match2/5": lambda: compile_program(
            match2.match2(5), vocab=list(range(5)), max_seq_len=4, fixed_length=True
        ),
        "tasks/parity/5": lambda: compile_program(
            parity.parity(), vocab=[0, 1], max_seq_len=5, fixed_length=True
        ),
        "tasks/k_parity/5": lambda: compile_program(
            parity.k_parity(), vocab=pairs, max_seq_len=5, fixed_length=True
        ),
    }


def _simulator() -> dict[str, Callable]:
    from attnsim import simulator

    out = {
        f"simulator/U(4,4,2)/{layer}": (
            lambda layer=layer: simulator.build(4, 4, 2, layer=layer, layout="scalar").model
        )
        for layer in ("attention", "encoder")
    }
    for layer in ("attention", "encoder", "decoder"):
        out[f"simulator/U(4,4,2)/{layer}/vector"] = lambda layer=layer: (
            simulator.build(4, 4, 2, layer=layer, layout="vector").model
        )
    return out


def cases() -> dict[str, Callable]:
    return {**_library(), **_matrix(), **_tasks(), **_simulator()}


def _recorded() -> dict:
    return json.loads(TABLE.read_text())


CASES = cases()


def test_table_covers_every_case():
    assert sorted(_recorded()) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_weights_unchanged(name):
    expected = _recorded()[name]
    assert weight_hash(fresh_build(CASES[name])) == expected, (
        f"{name}: the compiled weights changed; if on purpose, run "
        "`python tests/test_weight_hashes.py --write` and say why in the commit"
    )


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_weight_hashes.py --write")
    table = {name: weight_hash(fresh_build(build)) for name, build in sorted(CASES.items())}
    TABLE.parent.mkdir(exist_ok=True)
    TABLE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(table)} hashes to {TABLE}")
