"""The reference model of each family beyond the encoders (whose model is `models.py`):
which class builds it and which of its modules run as layers."""

from __future__ import annotations

from torch import nn

from bertscope.config import Attention, Family, ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.measure.models import DROPOUT_PROB, ENCODER_FAMILIES, EncoderLayer
from bertscope.measure.models_vit import ViTForClassification, ViTLayer

LAYER_TYPES: tuple[type[nn.Module], ...] = (EncoderLayer, ViTLayer)
"""Module classes of the reference models that run as one layer of a stack."""

REFERENCE_FAMILIES = (*ENCODER_FAMILIES, Family.VIT)
"""The families with a reference PyTorch model."""


def build_other(model: ModelConfig, run: RunConfig) -> nn.Module:
    """The reference model of a family other than the encoders (`models.build_model`
    dispatches here): dropout, checkpointing and the attention kernels from `run`."""
    if model.family is Family.VIT:
        return ViTForClassification(model, dropout=DROPOUT_PROB if run.dropout else 0.0,
                                    checkpointing=run.checkpointing,
                                    sdpa=run.attention is Attention.SDPA)
    have = ", ".join(f.value for f in REFERENCE_FAMILIES)
    hf = " (profile its Hugging Face model with --hf)" if model.family is Family.T5 else ""
    raise BertscopeError(f"model {model.name!r}: family {model.family.value!r} has no "
                         f"reference PyTorch model yet{hf}; measured: {have}")


__all__ = ["LAYER_TYPES", "REFERENCE_FAMILIES", "build_other"]
