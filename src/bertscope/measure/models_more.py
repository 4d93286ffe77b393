"""The reference models of T5 and ViT (one file each, `models_t5.py`, `models_vit.py`):
which class builds each for a run (the profiler reaches them through `families.MEASURED`)."""

from __future__ import annotations

from torch import nn

from bertscope.config import Attention, Checkpoint, Family, ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.measure.models import DROPOUT_PROB
from bertscope.measure.models_t5 import T5ForPretraining
from bertscope.measure.models_vit import ViTForClassification


def build_other(model: ModelConfig, run: RunConfig) -> nn.Module:
    """The reference model of a family other than the encoders (`models.build_model`
    dispatches here): dropout, checkpointing and the attention kernels from `run`."""
    dropout = DROPOUT_PROB if run.dropout else 0.0
    full = run.checkpoint is Checkpoint.FULL
    if model.family is Family.VIT:
        return ViTForClassification(model, dropout=dropout, checkpointing=full,
                                    sdpa=run.attention is Attention.SDPA)
    if model.family is Family.T5:
        if run.attention is Attention.SDPA:
            raise BertscopeError("the reference T5 runs eager attention (its position bias "
                                 "is added to the scores); drop --attention sdpa")
        return T5ForPretraining(model, dropout=dropout, checkpointing=full)
    raise BertscopeError(f"model {model.name!r}: family {model.family.value!r} has no "
                         f"reference PyTorch model here; see measure/families.py")


__all__ = ["build_other"]
