"""The digests that tie a checkpoint's tables and tensors together (SHA-256, no torch pickle).

:func:`digest` is the one hash: :func:`attnsim.model.onnx_export.fingerprint` uses it for an
exported graph, :mod:`attnsim.model.checkpoint` for ``model.json`` (one digest per table and
per tensor, so a refusal names what changed) and ``attnsim.simulator.saving`` for
``simulator.json``.

>>> tables = table_digests({"vocab": ["a", "b"], "digest": {}})
>>> list(tables), len(tables["vocab"])
(['vocab'], 64)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import torch

__all__ = ["DIGEST_KEY", "digest", "make_digest", "table_digests", "tensor_digests"]

DIGEST_KEY = "digest"  # the key of model.json that records the digest of the others
DIGEST_VERSION = b"attnsim-checkpoint-digest-v1"
TABLE_NAMES = {  # what each table of model.json is, for messages
    "format": "the format tag",
    "config": "the model config",
    "residual": "the residual directions",
    "vocab": "the vocabulary",
    "numerical_tokens": "the numerical-token flag",
    "max_seq_len": "the longest input",
    "fixed_length": "the fixed-length flag",
    "output": "the output decoding",
    "guards": "the run-time checks",
    "report": "the report",
    "plan": "the execution plan",
    "storage": "the sparse storage layout",
    "head_patterns": "the heads' patterns",
}


def digest(version: bytes, parts: Iterable[str], tensors: Mapping[str, torch.Tensor]) -> str:
    """A SHA-256 (hex) of ``version``, the text ``parts`` in order and ``tensors`` by name.

    Each tensor enters as its name, dtype, shape and bytes, so two mappings share a digest
    only when they hold the same tensors bit for bit.

    Args:
        version: a tag naming what is hashed (a change of scheme changes every digest).
        parts: texts, each ended by a NUL byte.
        tensors: name -> tensor (any device; hashed in name order).

    Returns:
        64 hex digits.

    >>> a = digest(b"v1", ["x"], {"w": torch.zeros(2)})
    >>> a == digest(b"v1", ["x"], {"w": torch.zeros(2)}), a == digest(b"v1", ["x"], {})
    (True, False)
    """
    h = hashlib.sha256(version)
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    for name in sorted(tensors):
        t = tensors[name].detach()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.cpu().contiguous().numpy().reshape(-1).view("uint8").data)
    return h.hexdigest()


def _json_text(value: Any) -> str:
    # one text per JSON value: keys sorted, no spaces (as written and as read back)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def table_digests(meta: Mapping[str, Any]) -> dict[str, str]:
    """The digest of each table of a ``model.json`` (its JSON form), the digest key aside."""
    return {
        k: digest(DIGEST_VERSION, [k, _json_text(v)], {})
        for k, v in meta.items()
        if k != DIGEST_KEY
    }


def tensor_digests(tensors: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """The digest of each tensor of a ``model.safetensors`` (its name, dtype, shape, bytes)."""
    return {k: digest(DIGEST_VERSION, [], {k: t}) for k, t in tensors.items()}


def make_digest(meta: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> dict:
    """The ``"digest"`` entry that :meth:`CompiledModel.save` writes: per table and per tensor.

    ``meta`` is taken in its JSON form (tuples as lists), as ``checkpoint.read_meta`` sees it.
    """
    return {
        "tables": table_digests(json.loads(json.dumps(meta))),
        "tensors": tensor_digests(tensors),
    }
