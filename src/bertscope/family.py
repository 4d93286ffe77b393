"""Model families: the architectures bertscope models and each family's layout properties
(re-exported by `bertscope.config`)."""

from __future__ import annotations

from enum import StrEnum


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
    """A bucketed relative position bias added to the attention scores (T5)."""


class Family(StrEnum):
    """Model family: decides the layer layout (norm placement and kind, positions, biases,
    fused or separate Q/K/V), weight sharing and the pretraining heads and objective. Sizes
    that vary within a family are `ModelConfig` fields."""

    BERT = "bert"
    ROBERTA = "roberta"
    ALBERT = "albert"
    GPT2 = "gpt2"
    LLAMA = "llama"
    T5 = "t5"
    VIT = "vit"

    @property
    def architecture(self) -> Architecture:
        """Encoder, decoder or encoder-decoder."""
        if self in (Family.GPT2, Family.LLAMA):
            return Architecture.DECODER
        return Architecture.ENCODER_DECODER if self is Family.T5 else Architecture.ENCODER

    @property
    def pre_norm(self) -> bool:
        """Normalization before each sublayer (and once after the stack), not after the
        residual add (BERT's post-norm)."""
        return self not in (Family.BERT, Family.ROBERTA, Family.ALBERT)

    @property
    def rms_norm(self) -> bool:
        """RMSNorm (no mean, no bias: Llama's LlamaRMSNorm, T5's T5LayerNorm) instead of
        LayerNorm."""
        return self in (Family.LLAMA, Family.T5)

    @property
    def positions(self) -> Positions:
        """How positions are encoded."""
        if self is Family.LLAMA:
            return Positions.ROTARY
        return Positions.RELATIVE if self is Family.T5 else Positions.LEARNED

    @property
    def bias(self) -> bool:
        """Linear layers (and norms) carry biases (none in Llama and T5)."""
        return self not in (Family.LLAMA, Family.T5)

    @property
    def fused_qkv(self) -> bool:
        """Q, K and V come from one projection (GPT-2's c_attn Conv1D) rather than three."""
        return self is Family.GPT2


__all__ = ["Architecture", "Family", "Positions"]
