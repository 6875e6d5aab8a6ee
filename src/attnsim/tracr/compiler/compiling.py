"""tracr's compiler call, ``compile_rasp_to_model``, answered by attnsim's exact compiler.

>>> from attnsim.tracr.compiler import compiling, lib
>>> model = compiling.compile_rasp_to_model(lib.make_hist(), {"a", "b"}, 4, compiler_bos="BOS")
>>> model.apply(["BOS", "a", "b", "a"]).decoded
['BOS', 2, 1, 2]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from attnsim.compiler import pipeline
from attnsim.model import codec
from attnsim.rasp import expr as E
from attnsim.tracr.compiler.assemble import AssembledTransformerModel, TransformerConfig
from attnsim.tracr.transformer import encoder
from attnsim.values import value_key

__all__ = ["COMPILER_BOS", "COMPILER_PAD", "compile_rasp_to_model"]

COMPILER_BOS = "compiler_bos"
COMPILER_PAD = "compiler_pad"


def compile_rasp_to_model(
    program: E.SOp,
    vocab: Iterable[Any],
    max_seq_len: int,
    causal: bool = False,
    compiler_bos: Any = COMPILER_BOS,
    compiler_pad: Any = COMPILER_PAD,
    mlp_exactness: int = 100,
) -> AssembledTransformerModel:
    """Compiles a RASP program to a transformer that computes it exactly (tracr's call).

    Args:
        program: the RASP S-op to compile.
        vocab: the input tokens (a set, as in tracr).
        max_seq_len: the longest input, BOS not counted.
        causal: a causally masked model (``length`` is then the prefix length).
        compiler_bos: the BOS token ``apply`` expects first; not in ``vocab``.
        compiler_pad: the PAD token ``apply`` accepts at the end; not in ``vocab``.
        mlp_exactness: accepted and ignored: attnsim's MLPs are exact (docs/tracr.md).

    Returns:
        An :class:`~attnsim.tracr.compiler.assemble.AssembledTransformerModel`.

    Raises:
        TypeError: ``program`` is not a RASP S-op.
        ValueError: the BOS or PAD token is in the vocabulary, or bad arguments.
        NotImplementedError: parts of the program cannot be compiled ("Unsupported RASP
            expressions", as tracr says), all listed.
    """
    del mlp_exactness  # tracr's approximation knob: attnsim's MLPs are exact
    if not isinstance(program, E.SOp):
        raise TypeError(
            f"compile_rasp_to_model expects a RASP SOp, got {type(program).__name__} "
            f"{program!r}; a selector is compiled as part of an Aggregate or SelectorWidth"
        )
    vocab = set(vocab)
    for token, what in ((compiler_bos, "BOS"), (compiler_pad, "PAD")):
        if token in vocab:
            raise ValueError(
                f"Compiler {what} token must not be present in the vocab. Found "
                f"'{token}' in {vocab}; pass another compiler_{what.lower()}"
            )
    ordered = sorted(vocab, key=lambda v: (type(v).__name__, v))
    try:
        compiled = pipeline.compile_program(
            program, vocab=ordered, max_seq_len=max_seq_len, causal=causal
        )
    except NotImplementedError as exc:
        raise NotImplementedError(f"Unsupported RASP expressions:\n{exc}") from exc
    cfg = compiled.config
    rows = codec.token_rows(compiled.vocab)  # the embedding's row of each token; BOS is 0
    ids = {compiler_bos: 0, **{t: rows[value_key(t)] for t in ordered}}
    ids[compiler_pad] = max(ids.values()) + 1  # no row: PAD positions are not run
    input_encoder = encoder.CategoricalEncoder(
        ids,
        enforce_bos=True,
        bos_token=compiler_bos,
        pad_token=compiler_pad,
        max_seq_len=max_seq_len + 1,
    )
    if compiled.output.kind == "cat":
        output_encoder: encoder.Encoder = encoder.CategoricalEncoder(
            {v: i for i, v in enumerate(compiled.output.values)}
        )
    else:
        output_encoder = encoder.NumericalEncoder()
    return AssembledTransformerModel(
        compiled=compiled,
        model_config=TransformerConfig(
            num_heads=cfg.n_heads,
            num_layers=cfg.n_layers,
            key_size=cfg.d_head,
            mlp_hidden_size=cfg.d_mlp,
            causal=cfg.causal,
        ),
        residual_labels=list(compiled.residual),
        input_encoder=input_encoder,
        output_encoder=output_encoder,
        params={k: v.detach().cpu().numpy() for k, v in compiled.model.state_dict().items()},
    )
