"""tracr's compiled-model types, answered by attnsim's exact compiled model.

:class:`AssembledTransformerModel` wraps a :class:`attnsim.model.compiled.CompiledModel`
(``.compiled``) with tracr's interface: ``apply(["BOS", ...])`` gives an
:class:`AssembledTransformerModelOutput` with ``decoded``, ``unembedded``, ``residuals``,
``layer_outputs``, ``attn_logits``, ``transformer_output`` and ``input_embeddings`` (numpy
arrays where tracr gives jax arrays). Glossary: B = 1 (one sequence), T = positions with BOS
(and any trailing PAD), D = d_model, H = heads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from attnsim.model.compiled import CompiledModel
from attnsim.tracr.transformer import encoder

__all__ = ["AssembledTransformerModel", "AssembledTransformerModelOutput", "TransformerConfig"]


@dataclasses.dataclass
class TransformerConfig:
    """tracr's model configuration, read from the compiled model's ``ModelConfig``."""

    num_heads: int  # heads per attention layer
    num_layers: int  # layers (an attention and an MLP sublayer each)
    key_size: int  # d_head
    mlp_hidden_size: int  # d_mlp
    dropout_rate: float = 0.0  # always 0: the weights are exact
    activation_function: Callable = torch.relu  # the MLPs' ReLU
    layer_norm: bool = False  # never: the residual stream is read as it is
    causal: bool = False  # attention masked to earlier positions


@dataclasses.dataclass
class AssembledTransformerModelOutput:
    """What ``apply`` gives, in tracr's names."""

    decoded: list  # [T]: BOS, then one value per position (None: no value, or a PAD)
    unembedded: np.ndarray  # [B, T]: output ids (categorical; -1 for none) or values
    layer_outputs: list  # per sublayer: what it adds to the residual stream, [B, T, D]
    residuals: list  # per sublayer: the residual stream after it, [B, T, D]
    attn_logits: list  # per attention layer: the scores, [B, H, T, T]
    transformer_output: np.ndarray  # [B, T, D]: the final residual stream
    input_embeddings: np.ndarray  # [B, T, D]: token and position embeddings


@dataclasses.dataclass
class AssembledTransformerModel:
    """A compiled model with tracr's interface (see the module docstring).

    Attributes:
        compiled: attnsim's model, which computes every answer.
        model_config: tracr's configuration fields.
        residual_labels: the residual stream's direction labels, in order.
        input_encoder: tokens (BOS, the vocabulary, PAD) to ids.
        output_encoder: output ids to values (categorical) or values as they are (numerical).
        params: the weights by name, as numpy arrays.
    """

    compiled: CompiledModel
    model_config: TransformerConfig
    residual_labels: list
    input_encoder: encoder.CategoricalEncoder
    output_encoder: encoder.Encoder
    params: dict

    def get_compiled_model(self) -> torch.nn.Module:
        """The PyTorch module that computes the residual stream."""
        return self.compiled.model

    def apply(self, tokens: Sequence[Any]) -> AssembledTransformerModelOutput:
        """Runs the model on ``[BOS, token, ...]`` (trailing PAD tokens allowed).

        Args:
            tokens: BOS first, then the input tokens, then optionally PAD tokens.

        Returns:
            The decoded output and the model's activations.

        Raises:
            ValueError: no BOS first, an unknown token, a too long input, a PAD before a
                token, or a failed run-time check (a ``RunTimeCheckError``).
        """
        tokens = list(tokens)
        self.input_encoder.encode(tokens)  # BOS first, known tokens, length (tracr's checks)
        pad = self.input_encoder.pad_token
        body = tokens[1:]
        n_pad = 0
        while body and body[-1] == pad and n_pad < len(tokens):
            body.pop()
            n_pad += 1
        if pad in body:
            raise ValueError(
                f"the PAD token {pad!r} is followed by a token at position "
                f"{body.index(pad) + 1}; PAD may only end the input"
            )
        out, cache = self.compiled.run_with_cache([body])
        out = out[0]
        n_layers = self.compiled.config.n_layers

        def grown(x: torch.Tensor) -> np.ndarray:  # [B, t, ...] -> [B, T, ...]: PAD rows 0
            a = x.detach().cpu().numpy()
            if n_pad:
                shape = (a.shape[0], n_pad, *a.shape[2:])
                a = np.concatenate([a, np.zeros(shape, a.dtype)], axis=1)
            return a

        residuals, layer_outputs, attn_logits = [], [], []
        before = cache["hook_embed"]
        for layer in range(n_layers):
            for hook in ("hook_resid_mid", "hook_resid_post"):
                after = cache[f"blocks.{layer}.{hook}"]
                residuals.append(grown(after))
                layer_outputs.append(grown(after - before))
                before = after
            scores = cache[f"blocks.{layer}.attn.hook_attn_scores"].detach().cpu().numpy()
            t = scores.shape[-1] + n_pad
            full = np.zeros((*scores.shape[:2], t, t), scores.dtype)
            full[..., : scores.shape[-2], : scores.shape[-1]] = scores
            attn_logits.append(full)
        decoded = [tokens[0], *out, *([None] * n_pad)]
        if isinstance(self.output_encoder, encoder.CategoricalEncoder):
            ids = self.output_encoder.encoding_map
            unembedded = np.array([[-1] + [ids.get(v, -1) if v is not None else -1 for v in out]])
        else:
            unembedded = np.array([[0.0] + [float(v) for v in out]])
        if n_pad:
            fill = -1 if unembedded.dtype.kind == "i" else 0.0
            unembedded = np.concatenate([unembedded, np.full((1, n_pad), fill)], axis=1)
        return AssembledTransformerModelOutput(
            decoded=decoded,
            unembedded=unembedded,
            layer_outputs=layer_outputs,
            residuals=residuals,
            attn_logits=attn_logits,
            transformer_output=grown(before),
            input_embeddings=grown(cache["hook_embed"]),
        )
