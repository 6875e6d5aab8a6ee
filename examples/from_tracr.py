"""A tracr script, unchanged but for its package prefix (``tracr`` -> ``attnsim.tracr``):
the tracr README's example, compiled by attnsim's exact compiler."""

from attnsim.tracr.compiler import compiling, lib
from attnsim.tracr.rasp import rasp

# --- the tracr README's example, as written there ---------------------------------------------
program = lib.make_length()
model = compiling.compile_rasp_to_model(
    program,
    vocab={1, 2, 3},
    max_seq_len=5,
    compiler_bos="BOS",
)
out = model.apply(["BOS", 1, 2, 3])
print(out.decoded)
assert out.decoded == ["BOS", 3, 3, 3]


# --- the README's hand-written version, called with keywords ----------------------------------
def make_length():
    all_true_selector = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE)
    return rasp.SelectorWidth(all_true_selector)


compiled_model = compiling.compile_rasp_to_model(
    program=make_length(),
    vocab={1, 2, 3},
    max_seq_len=5,
    compiler_bos="BOS",
)
assert compiled_model.apply(["BOS", 1, 2, 3]).decoded == ["BOS", 3, 3, 3]

# --- and with string tokens, as the issue shows it --------------------------------------------
model = compiling.compile_rasp_to_model(
    program, vocab={"a", "b", "c"}, max_seq_len=5, compiler_bos="BOS"
)
assert model.apply(["BOS", "a", "b", "c"]).decoded == ["BOS", 3, 3, 3]

# --- a program of one's own, with tracr's None semantics --------------------------------------
prev = lib.shift_by(1, rasp.tokens)  # None at position 0
loud = rasp.Map(lambda t: t.upper(), prev)  # not called on None: None stays None
assert loud(["a", "b", "c"]) == [None, "A", "B"]  # tracr's evaluator gives the same
model = compiling.compile_rasp_to_model(
    loud, vocab={"a", "b", "c"}, max_seq_len=5, compiler_bos="BOS"
)
out = model.apply(["BOS", "a", "b", "c"])
print(
    out.decoded,
    "| layers:",
    model.model_config.num_layers,
    "| residual:",
    len(model.residual_labels),
    "directions",
)
assert out.decoded == ["BOS", None, "A", "B"]
