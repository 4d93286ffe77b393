"""XLNet (Yang et al. 2019): a post-norm bidirectional stack with two-stream relative
self-attention (content and query streams), Transformer-XL's sinusoidal relative positions
and segment memory, segment encodings, pretrained by permutation language modelling with
partial prediction (Hugging Face XLNetLMHeadModel)."""

from __future__ import annotations

from bertscope.families.spec import Architecture, FamilySpec, Positions

SPEC = FamilySpec(
    name="xlnet",
    model_types=("xlnet",),
    architecture=Architecture.ENCODER,
    pre_norm=False,
    rms_norm=False,
    positions=Positions.RELATIVE,
    bias=False,
    fused_qkv=False,
    mlm_head=False,
    pooler_head=False,
    dropout=True,
    factorized_embedding=False,
    producer="bertscope.analytic.xlnet:xlnet_blocks",
    layout="bertscope.analytic.xlnet:xlnet_layout",
    config_reader="bertscope.hf_config:read_xlnet",
    reference="bertscope.measure.models.xlnet:build_xlnet",
    reference_layer="bertscope.measure.models.xlnet:XLNetLayer",
    reference_sublayer="bertscope.measure.models.xlnet:xlnet_sublayer",
    batch="bertscope.measure.data:permutation_lm_inputs",
    hf_class="XLNetLMHeadModel",
    hf_config="bertscope.measure.hf_weights:xlnet_config",
    hf_patterns="bertscope.measure.hf_patterns:XLNET",
    hf_layers=r"transformer\.layer\.\d+$",
)
"""XLNet's spec."""

__all__ = ["SPEC"]
