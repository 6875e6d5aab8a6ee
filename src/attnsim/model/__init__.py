"""The compiled transformer (PyTorch only; knows no RASP)."""

from attnsim.model.compiled import CompiledModel
from attnsim.model.config import ModelConfig
from attnsim.model.transformer import Transformer

__all__ = ["CompiledModel", "ModelConfig", "Transformer"]
