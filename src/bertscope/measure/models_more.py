"""The reference model of each family beyond the encoders (whose model is `models.py`):
which class builds it and which of its modules run as layers."""

from __future__ import annotations

from torch import nn

from bertscope.config import Attention, Family, ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.measure.models import DROPOUT_PROB, ENCODER_FAMILIES, EncoderLayer
from bertscope.measure.models_t5 import T5Block, T5ForPretraining
from bertscope.measure.models_vit import ViTForClassification, ViTLayer

LAYER_TYPES: tuple[type[nn.Module], ...] = (EncoderLayer, ViTLayer, T5Block)
"""Module classes of the reference models that run as one layer of a stack."""

REFERENCE_FAMILIES = (*ENCODER_FAMILIES, Family.T5, Family.VIT)
"""The families with a reference PyTorch model."""


def build_other(model: ModelConfig, run: RunConfig) -> nn.Module:
    """The reference model of a family other than the encoders (`models.build_model`
    dispatches here): dropout, checkpointing and the attention kernels from `run`."""
    dropout = DROPOUT_PROB if run.dropout else 0.0
    if model.family is Family.VIT:
        return ViTForClassification(model, dropout=dropout, checkpointing=run.checkpointing,
                                    sdpa=run.attention is Attention.SDPA)
    if model.family is Family.T5:
        if run.attention is Attention.SDPA:
            raise BertscopeError("the reference T5 runs eager attention (its position bias "
                                 "is added to the scores); drop --attention sdpa")
        return T5ForPretraining(model, dropout=dropout, checkpointing=run.checkpointing)
    have = ", ".join(f.value for f in REFERENCE_FAMILIES)
    raise BertscopeError(f"model {model.name!r}: family {model.family.value!r} has no "
                         f"reference PyTorch model yet; measured: {have}")


__all__ = ["LAYER_TYPES", "REFERENCE_FAMILIES", "build_other"]
