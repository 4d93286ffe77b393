"""`FamilySpec`: everything bertscope knows about one model family, in one frozen record.

A spec is data at the ground floor of the package: it imports nothing of bertscope but
`errors`, so `bertscope.family` (and through it `config`) can read it. The code a spec names
(the analytic producer, the reference PyTorch model, the Hugging Face config reader, ...) is held
as an import path, `"package.module:attribute"`, resolved on use (`resolve`): the analytic
model reaches its producer without the registry importing the producers, and torch and
transformers load only when something is measured.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from bertscope.errors import BertscopeError


class Architecture(StrEnum):
    """How a family's Transformer stacks are arranged."""

    ENCODER = "encoder"
    """Bidirectional encoder stack (BERT, RoBERTa, ALBERT, ViT)."""
    DECODER = "decoder"
    """Causal decoder stack (GPT, Llama)."""
    ENCODER_DECODER = "encoder-decoder"
    """An encoder stack and a decoder stack with cross-attention (T5)."""


class Positions(StrEnum):
    """How a family encodes token positions."""

    LEARNED = "learned"
    """A learned absolute position-embedding table (BERT, GPT-2, ViT)."""
    ROTARY = "rotary"
    """Rotary embeddings applied to queries and keys in every layer (Llama)."""
    RELATIVE = "relative"
    """Relative positions: a bucketed position bias added to the attention scores (T5), or
    sinusoid encodings of the relative distances projected in every layer (Transformer-XL,
    XLNet); the sequence is not bounded by a position table."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FamilySpec:
    """One model family: its layout properties and the code that models, measures and reads
    it. Fields ending in a path are `"module:attribute"` strings (`resolve`)."""

    name: str
    """The `Family` value (`"bert"`), as configs and op tables spell it."""
    model_types: tuple[str, ...]
    """Hugging Face `model_type` values whose config.json this family reads."""

    # --- layout properties ------------------------------------------------------------
    architecture: Architecture
    """Encoder, decoder or encoder-decoder."""
    pre_norm: bool
    """Normalization before each sublayer (and once after the stack), not after the
    residual add (BERT's post-norm)."""
    rms_norm: bool
    """RMSNorm (no mean, no bias: Llama's LlamaRMSNorm, T5's T5LayerNorm) instead of
    LayerNorm."""
    positions: Positions
    """How positions are encoded."""
    bias: bool
    """Linear layers (and norms) carry biases."""
    fused_qkv: bool
    """Q, K and V come from one projection (GPT-2's c_attn Conv1D) rather than three."""
    mlm_head: bool
    """Pretrains with a masked-LM head (BERT, RoBERTa, ALBERT)."""
    pooler_head: bool
    """Pretrains a sentence-level head on the pooled first token (BERT's NSP, ALBERT's
    SOP)."""
    dropout: bool
    """Its published layers have dropout (Llama has none)."""
    factorized_embedding: bool
    """Embeddings E wide projected to h by a linear, even when E == h (ALBERT)."""
    special_ids: tuple[int, ...] = ()
    """Vocabulary ids synthetic masked-LM data never draws, the mask token last (the
    encoders'; empty where the batch maker draws otherwise)."""

    # --- the analytic model (no torch) ------------------------------------------------
    producer: str
    """Path of `(ModelConfig, RunConfig) -> list[Block]`: one iteration's rows in
    execution order."""
    layout: str
    """Path of the parameter layout, `(ModelConfig, pretraining) -> GroupLayout`."""
    config_reader: str | None
    """Path of `(config.json dict, origin, name) -> ModelConfig` (`hf_config`); None for a
    family with no Hugging Face config.json (Transformer-XL, removed from transformers 5)."""

    # --- measurement (torch) ----------------------------------------------------------
    reference: str
    """Path of `(ModelConfig, RunConfig) -> nn.Module`: the reference PyTorch model."""
    reference_layer: str
    """Path of the reference model's layer class (the profiler numbers its calls)."""
    reference_sublayer: str
    """Path of `module path -> Sublayer` for the reference model."""
    batch: str
    """Path of `(ModelConfig, RunConfig, seed, device, hf) -> forward keyword arguments`:
    one seeded synthetic micro-batch (for the reference model, or for the Hugging Face
    model when `hf`)."""

    # --- the Hugging Face model (`--hf`) ----------------------------------------------
    hf_class: str | None
    """The transformers class profiled with `--hf` (`"BertForPreTraining"`); None where
    transformers has none (the `hf_*` fields are then None too and `--hf` is refused)."""
    hf_config: str | None
    """Path of `(ModelConfig, dropout) -> transformers config` (no download)."""
    hf_patterns: str | None
    """Path of its module-path -> sublayer patterns (first match wins)."""
    hf_layers: str | None
    """Regex (re.search) of the module paths that run as its layers."""
    hf_sentence_label: str | None = None
    """The Hugging Face forward's keyword for the sentence-level head's labels (BERT's
    `next_sentence_label`, ALBERT's `sentence_order_label`)."""
    hf_loss_type: str | None = None
    """`loss_type` to set on the built model where its class name does not say it (GPT-2's
    LM head is a causal LM)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name in PATH_FIELDS:
                path = getattr(self, f.name)
                if path is None and f.name in OPTIONAL_PATHS:
                    continue
                module, _, attr = str(path).partition(":")
                if not module or not attr:
                    raise BertscopeError(f"family {self.name!r}: {f.name} {path!r} is not "
                                     f"'module:attribute'")


PATH_FIELDS = frozenset({"producer", "layout", "config_reader", "reference", "reference_layer",
                         "reference_sublayer", "batch", "hf_config", "hf_patterns"})
"""The `FamilySpec` fields that hold an import path."""
OPTIONAL_PATHS = frozenset({"config_reader", "hf_config", "hf_patterns"})
"""Path fields a family without a Hugging Face model leaves None."""


def resolve(path: str) -> Any:
    """The object an import path `"module:attribute"` names (the module imported on first
    use)."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


__all__ = ["OPTIONAL_PATHS", "PATH_FIELDS", "Architecture", "FamilySpec", "Positions", "resolve"]
