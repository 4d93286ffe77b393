"""Llama (Touvron et al. 2023): a pre-norm causal decoder with RMSNorm, rotary positions,
no biases, separate Q/K/V projections (grouped K/V) and a SwiGLU feed-forward (Hugging Face
LlamaForCausalLM)."""

from __future__ import annotations

from bertscope.families.spec import Architecture, FamilySpec, Positions

SPEC = FamilySpec(
    name="llama",
    model_types=("llama",),
    architecture=Architecture.DECODER,
    pre_norm=True,
    rms_norm=True,
    positions=Positions.ROTARY,
    bias=False,
    fused_qkv=False,
    mlm_head=False,
    pooler_head=False,
    dropout=False,
    factorized_embedding=False,
    producer="bertscope.analytic.decoder:decoder_blocks",
    layout="bertscope.analytic.decoder:decoder_layout",
    config_reader="bertscope.hf_config:read_llama",
    reference="bertscope.measure.models.decoder:build_decoder",
    reference_layer="bertscope.measure.models.decoder:DecoderLayer",
    reference_sublayer="bertscope.measure.models.decoder:decoder_sublayer",
    batch="bertscope.measure.data:causal_lm_inputs",
    hf_class="LlamaForCausalLM",
    hf_config="bertscope.measure.hf_weights:hf_config",
    hf_patterns="bertscope.measure.hf_patterns:LLAMA",
    hf_layers=r"model\.layers\.\d+$",
)
"""Llama's spec."""

__all__ = ["SPEC"]
