"""Export to TransformerLens: what refuses to export, and the round trip on library programs.

The round trip needs the optional ``lens`` extra (``pip install 'attnsim[lens]'``); without it
those tests are skipped. The refusal tests run everywhere.
"""

import pytest
import torch

from attnsim.compiler import compile_program
from attnsim.model import export
from attnsim.rasp import expr as E
from attnsim.rasp import library


def _lens():
    """Skips unless a TransformerLens with HookedTransformer (versions 2 and 3) is installed."""
    tl = pytest.importorskip("transformer_lens")
    try:
        from transformer_lens import HookedTransformer  # noqa: F401
    except ImportError:
        pytest.skip(f"TransformerLens {getattr(tl, '__version__', '?')} has no HookedTransformer")


ROUND_TRIP = [
    "make_length",
    "make_hist",
    "make_reverse",
    "make_sort_unique",
    "make_pair_balance",
    "sort",
    "shift_by",
    "detect_pattern",
    "make_count",
    "make_frac_prevs",
]


def _compile(name: str, attention: str = "softmax", **kw):
    entry = library.PROGRAMS[name]
    return compile_program(
        entry.factory(), vocab=entry.vocab, max_seq_len=entry.max_seq_len, attention=attention, **kw
    )


def test_hard_attention_is_refused_with_advice():
    with pytest.raises(ValueError, match=r"attention='hard'.*attention='softmax'"):
        export.check_exportable(_compile("make_hist", attention="hard"))


def test_numerical_tokens_are_refused():
    program = E.numerical(E.tokens) * 2 + 1
    model = compile_program(program, vocab=None, max_seq_len=3, attention="softmax")
    with pytest.raises(ValueError, match="real-valued tokens"):
        export.check_exportable(model)


def test_bilinear_units_are_refused():
    x = E.numerical(E.Map(lambda t: t, E.tokens))
    model = compile_program(E.numerical(x * x), vocab=[1, 2, 3], max_seq_len=3, attention="softmax")
    if model.config.d_bilinear == 0:
        pytest.skip("this product compiled to ReLU units; nothing bilinear to refuse")
    with pytest.raises(ValueError, match="bilinear units"):
        export.check_exportable(model)


def test_not_a_model():
    with pytest.raises(TypeError, match="expected a CompiledModel"):
        export.check_exportable("model")


def test_lens_config_mirrors_the_model():
    model = _compile("sort")
    c = export.lens_config(model)
    cfg = model.config
    assert (c["n_layers"], c["d_model"], c["n_ctx"], c["d_vocab"]) == (
        cfg.n_layers,
        cfg.d_model,
        cfg.n_ctx,
        cfg.d_vocab,
    )
    assert c["d_vocab_out"] == cfg.d_model and c["attention_dir"] == "bidirectional"
    assert c["dtype"] == torch.float64


@pytest.mark.parametrize("name", ROUND_TRIP)
def test_round_trip_matches_attnsim(name):
    _lens()
    entry = library.PROGRAMS[name]
    model = _compile(name)
    lens = export.to_transformer_lens(model)
    want = model.run(entry.example)
    assert export.run_lens(lens, model, entry.example) == want
    # the residual streams agree closely, not just the decoded outputs
    ids, vals = model.encode([entry.example])
    with torch.no_grad():
        got = lens(ids, return_type="logits")
    ref = model.forward(ids, vals)
    assert torch.allclose(got, ref, atol=1e-9, rtol=1e-9)
    # and the attention patterns of every active head (attnsim caches zeros for heads with
    # zero weights, which it skips; TransformerLens computes them)
    _, cache = lens.run_with_cache(ids)
    _, ours = model.run_with_cache([entry.example], check=False)
    for layer, block in enumerate(model.model.blocks):
        heads = block.attn.active_heads()
        key = f"blocks.{layer}.attn.hook_pattern"
        assert torch.allclose(cache[key][:, heads], ours[key][:, heads], atol=1e-9)


def test_round_trip_batch_and_causal():
    _lens()
    entry = library.PROGRAMS["make_frac_prevs"]
    model = compile_program(
        entry.factory(), vocab=entry.vocab, max_seq_len=6, attention="softmax", causal=True
    )
    lens = export.to_transformer_lens(model)
    assert lens.cfg.attention_dir == "causal"
    xs = [list("abaa"), list("bbab"), list("aaaa")]
    assert export.run_lens(lens, model, xs) == model.run(xs)


def test_a_compressed_model_of_hard_attention_is_refused_with_advice():
    import attnsim

    m = compile_program(library.make_hist(), vocab="ab", max_seq_len=4)
    small = attnsim.compress(m, d=m.config.d_model - 2)
    with pytest.raises(ValueError, match="attention='softmax'"):
        small.to_transformer_lens()


@pytest.mark.parametrize("name, d", [("make_hist", 12), ("make_length", 8)])
def test_a_compressed_model_round_trips_through_transformer_lens(name, d):
    _lens()
    import attnsim
    from attnsim.model import compress as C

    m = _compile(name)
    small = attnsim.compress(m, d=d)
    lens = small.to_transformer_lens()
    assert lens.cfg.d_model == d and lens.cfg.d_vocab_out == m.config.d_model
    inputs = C.default_inputs(m, per_length=3)
    for xs in inputs:  # the oracle: the compressed model's own forward, and its decode
        assert small.run_lens(lens, xs) == small.run(xs), xs
    ids, _ = m.encode(inputs[-1:])
    with torch.no_grad():
        got = lens(ids, return_type="logits")
        want = small.model(ids, None) @ small.readout
    assert float((got - want).abs().max()) < 1e-9
    assert lens.attnsim_hook_labels == export.hook_labels(m)
    assert lens.attnsim_circuit["component"] == m.circuit("component").lens_edges()
    with pytest.raises(ValueError, match="decode must be"):
        small.run_lens(lens, inputs[0], decode="soft")
