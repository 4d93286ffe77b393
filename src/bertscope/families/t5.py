"""T5 (Raffel et al. 2020): a pre-norm encoder-decoder with RMSNorm (T5LayerNorm), a
bucketed relative position bias and no biases, pretrained by span corruption (Hugging Face
T5ForConditionalGeneration)."""

from __future__ import annotations

from bertscope.families.spec import Architecture, FamilySpec, Positions

SPEC = FamilySpec(
    name="t5",
    model_types=("t5",),
    architecture=Architecture.ENCODER_DECODER,
    pre_norm=True,
    rms_norm=True,
    positions=Positions.RELATIVE,
    bias=False,
    fused_qkv=False,
    mlm_head=False,
    pooler_head=False,
    dropout=True,
    factorized_embedding=False,
    producer="bertscope.analytic.t5:t5_blocks",
    layout="bertscope.analytic.t5:t5_layout",
    config_reader="bertscope.hf_config:read_t5",
    reference="bertscope.measure.models.t5:build_t5",
    reference_layer="bertscope.measure.models.t5:T5Block",
    reference_sublayer="bertscope.measure.models.t5:t5_sublayer",
    batch="bertscope.measure.data:seq2seq_inputs",
    hf_class="T5ForConditionalGeneration",
    hf_config="bertscope.measure.hf_weights:t5_config",
    hf_patterns="bertscope.measure.hf_patterns:T5",
    hf_layers=r"(encoder|decoder)\.block\.\d+$",
)
"""T5's spec."""

__all__ = ["SPEC"]
