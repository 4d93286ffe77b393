"""GPT-2 (Radford et al. 2019; the GPT-3 sizes, Brown et al. 2020): a pre-norm causal
decoder with learned positions, biased linears, LayerNorm and one fused Q/K/V projection
(Hugging Face GPT2LMHeadModel)."""

from __future__ import annotations

from bertscope.families.spec import Architecture, FamilySpec, Positions

SPEC = FamilySpec(
    name="gpt2",
    model_types=("gpt2",),
    architecture=Architecture.DECODER,
    pre_norm=True,
    rms_norm=False,
    positions=Positions.LEARNED,
    bias=True,
    fused_qkv=True,
    mlm_head=False,
    pooler_head=False,
    dropout=True,
    factorized_embedding=False,
    producer="bertscope.analytic.decoder:decoder_blocks",
    layout="bertscope.analytic.decoder:decoder_layout",
    config_reader="bertscope.hf_config:read_gpt2",
    reference="bertscope.measure.models.decoder:build_decoder",
    reference_layer="bertscope.measure.models.decoder:DecoderLayer",
    reference_sublayer="bertscope.measure.models.decoder:decoder_sublayer",
    batch="bertscope.measure.data:causal_lm_inputs",
    hf_class="GPT2LMHeadModel",
    hf_config="bertscope.measure.hf_weights:hf_config",
    hf_patterns="bertscope.measure.hf_patterns:GPT2",
    hf_layers=r"transformer\.h\.\d+$",
    hf_loss_type="ForCausalLM",
)
"""GPT-2's spec."""

__all__ = ["SPEC"]
