"""tracr's input and output encoders: how tokens map to ids and output ids to values.

>>> enc = CategoricalEncoder({"BOS": 0, "a": 1, "b": 2}, enforce_bos=True, bos_token="BOS")
>>> enc.encode(["BOS", "b", "a"]), enc.decode([2, 1])
([0, 2, 1], ['b', 'a'])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["Encoder", "CategoricalEncoder", "NumericalEncoder"]


class Encoder:
    """What tracr's encoders provide: ``encode``, ``decode`` and the special tokens."""

    bos_token: Any = None
    pad_token: Any = None

    def encode(self, inputs: Sequence[Any]) -> list:
        """The encodings of ``inputs``."""
        raise NotImplementedError

    def decode(self, encodings: Sequence[Any]) -> list:
        """The values of ``encodings``."""
        raise NotImplementedError

    @property
    def bos_encoding(self) -> int | None:
        return None

    @property
    def pad_encoding(self) -> int | None:
        return None


class NumericalEncoder(Encoder):
    """A numerical output: values are their own encodings.

    >>> NumericalEncoder().decode([0.5, 2.0])
    [0.5, 2.0]
    """

    def encode(self, inputs: Sequence[Any]) -> list:
        return list(inputs)

    def decode(self, encodings: Sequence[Any]) -> list:
        return list(encodings)


class CategoricalEncoder(Encoder):
    """Values to integer ids (``encoding_map``) and back.

    Args:
        encoding_map: value -> id.
        enforce_bos: ``encode`` requires the first input to be ``bos_token``.
        bos_token: the beginning-of-sequence token, or None.
        pad_token: the padding token, or None.
        max_seq_len: the longest input ``encode`` accepts (BOS counted), or None.

    Raises:
        ValueError: ``enforce_bos`` without a ``bos_token``.
    """

    def __init__(
        self,
        encoding_map: Mapping[Any, int],
        enforce_bos: bool = False,
        bos_token: Any = None,
        pad_token: Any = None,
        max_seq_len: int | None = None,
    ) -> None:
        if enforce_bos and bos_token is None:
            raise ValueError("BOS token must be specified if enforcing BOS.")
        self.encoding_map = dict(encoding_map)
        self.enforce_bos = enforce_bos
        self.bos_token = bos_token
        self.pad_token = pad_token
        self._max_seq_len = max_seq_len

    def encode(self, inputs: Sequence[Any]) -> list[int]:
        """The ids of ``inputs``.

        Raises:
            ValueError: no BOS first (when enforced), an unknown token, or too long.
        """
        inputs = list(inputs)
        if self.enforce_bos and (not inputs or inputs[0] != self.bos_token):
            got = inputs[0] if inputs else "nothing"
            raise ValueError(
                "First input token must be BOS token. "
                f"Should be '{self.bos_token}', but was '{got}'."
            )
        missing = [x for x in inputs if x not in self.encoding_map]
        if missing:
            raise ValueError(
                f"Inputs {missing} not found in encoding {list(self.encoding_map)}; use only "
                "tokens of the vocabulary the model was compiled for"
            )
        if self._max_seq_len is not None and len(inputs) > self._max_seq_len:
            raise ValueError(
                f"inputs={inputs} are longer than the maximum sequence length {self._max_seq_len}"
            )
        return [self.encoding_map[x] for x in inputs]

    def decode(self, encodings: Sequence[int]) -> list:
        """The values of ``encodings``.

        Raises:
            ValueError: an id that is in no entry of ``encoding_map``.
        """
        back = {v: k for k, v in self.encoding_map.items()}
        missing = [e for e in encodings if e not in back]
        if missing:
            raise ValueError(f"Inputs {missing} not found in decoding map {list(back)}")
        return [back[e] for e in encodings]

    @property
    def vocab_size(self) -> int:
        return len(self.encoding_map)

    @property
    def bos_encoding(self) -> int | None:
        return None if self.bos_token is None else self.encoding_map[self.bos_token]

    @property
    def pad_encoding(self) -> int | None:
        return None if self.pad_token is None else self.encoding_map[self.pad_token]
