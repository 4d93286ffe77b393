"""The reference PyTorch models, one module per architecture: `encoder` (BERT, RoBERTa,
ALBERT), `decoder` (GPT-2, Llama), `t5`, `vit`, on the shared building blocks of `layers`.

Every op the analytic model counts runs inside a submodule whose qualified name says its
`Sublayer`; a family's spec (`bertscope.families`) names its model's builder, layer class
and module-path -> sublayer map, and `build_model` builds any family's model from it.
"""

from __future__ import annotations

from torch import nn

from bertscope.config import ModelConfig, RunConfig
from bertscope.families import resolve
from bertscope.measure.models.encoder import EncoderForPretraining, EncoderLayer
from bertscope.measure.models.layers import (
    DROPOUT_PROB,
    INIT_STD,
    layer_index,
    make_activation,
    module_sublayer,
)


def build_model(model: ModelConfig, run: RunConfig) -> nn.Module:
    """The reference model of `model`'s family for a run (its spec's `reference`): dropout,
    checkpointing, MLM rows and the attention kernels from `run`."""
    built: nn.Module = resolve(model.family.spec.reference)(model, run)
    return built


__all__ = [
    "DROPOUT_PROB",
    "INIT_STD",
    "EncoderForPretraining",
    "EncoderLayer",
    "build_model",
    "layer_index",
    "make_activation",
    "module_sublayer",
]
