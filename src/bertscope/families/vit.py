"""ViT (Dosovitskiy et al. 2021): a pre-norm encoder over image patches and a class token,
learned positions, biased linears and LayerNorm, trained as an image classifier (Hugging
Face ViTForImageClassification)."""

from __future__ import annotations

from bertscope.families.spec import Architecture, FamilySpec, Positions

SPEC = FamilySpec(
    name="vit",
    model_types=("vit",),
    architecture=Architecture.ENCODER,
    pre_norm=True,
    rms_norm=False,
    positions=Positions.LEARNED,
    bias=True,
    fused_qkv=False,
    mlm_head=False,
    pooler_head=False,
    dropout=True,
    factorized_embedding=False,
    producer="bertscope.analytic.vit:vit_blocks",
    layout="bertscope.analytic.vit:vit_layout",
    config_reader="bertscope.hf_config:read_vit",
    reference="bertscope.measure.models.vit:build_vit",
    reference_layer="bertscope.measure.models.vit:ViTLayer",
    reference_sublayer="bertscope.measure.models.layers:encoder_sublayer",
    batch="bertscope.measure.data:image_inputs",
    hf_class="ViTForImageClassification",
    hf_config="bertscope.measure.hf_weights:vit_config",
    hf_patterns="bertscope.measure.hf_patterns:VIT",
    hf_layers=r"vit\.layers\.\d+$",
)
"""ViT's spec."""

__all__ = ["SPEC"]
