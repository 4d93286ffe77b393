"""Model families: the `Family` enum, built from the family specs (`bertscope.families`),
and each family's layout properties read from its spec (re-exported by `bertscope.config`)."""

from __future__ import annotations

from enum import StrEnum

from bertscope.families import SPECS
from bertscope.families import spec as family_spec
from bertscope.families.spec import Architecture, FamilySpec, Positions
from bertscope.families.transformer_xl import MemoryFields


class FamilyBase(StrEnum):
    """A model family's properties, read from its spec: the members are `Family`'s, one per
    spec in `bertscope.families.SPECS`."""

    @property
    def spec(self) -> FamilySpec:
        """Everything bertscope knows about the family (`bertscope.families`)."""
        return family_spec(self.value)

    @property
    def architecture(self) -> Architecture:
        """Encoder, decoder or encoder-decoder."""
        return self.spec.architecture

    @property
    def pre_norm(self) -> bool:
        """Normalization before each sublayer (and once after the stack), not after the
        residual add (BERT's post-norm)."""
        return self.spec.pre_norm

    @property
    def rms_norm(self) -> bool:
        """RMSNorm (no mean, no bias) instead of LayerNorm."""
        return self.spec.rms_norm

    @property
    def positions(self) -> Positions:
        """How positions are encoded."""
        return self.spec.positions

    @property
    def bias(self) -> bool:
        """Linear layers (and norms) carry biases."""
        return self.spec.bias

    @property
    def fused_qkv(self) -> bool:
        """Q, K and V come from one projection rather than three."""
        return self.spec.fused_qkv

    @property
    def mlm_head(self) -> bool:
        """Pretrains with a masked-LM head."""
        return self.spec.mlm_head

    @property
    def pooler_head(self) -> bool:
        """Pretrains a sentence-level head on the pooled first token."""
        return self.spec.pooler_head

    @property
    def dropout(self) -> bool:
        """Its published layers have dropout."""
        return self.spec.dropout

    @property
    def factorized_embedding(self) -> bool:
        """Embeddings projected from E to h by a linear (ALBERT)."""
        return self.spec.factorized_embedding


Family = FamilyBase("Family", [(name.upper().replace("-", "_"), name) for name in SPECS],  # type: ignore[misc]
                    module=__name__, qualname="Family")
Family.__doc__ = """Model family: decides the layer layout (norm placement and kind,
positions, biases, fused or separate Q/K/V), weight sharing and the pretraining heads and
objective; one member per family spec (`Family.BERT`, `Family.GPT2`, ...). Sizes that vary
within a family are `ModelConfig` fields."""

__all__ = ["Architecture", "Family", "FamilyBase", "MemoryFields", "Positions"]
