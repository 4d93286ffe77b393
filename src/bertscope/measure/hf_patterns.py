"""Hugging Face module paths -> op-table sublayers, one pattern table per model (first match
wins); each family's spec names its table (`FamilySpec.hf_patterns`).

Hugging Face runs the attention core (scores, softmax, context) inline in its self-attention
module, so that module's scope is an attention-core scope: its ops are split by category and
order (see `attribution.py`). ALBERT adds the attention residual inline in its attention
module, so that add is counted in the attention context there.

T5 runs the attention core inline in `SelfAttention` (an attention-core scope, split by
category and order as HF's BERT's) and in `EncDecAttention` (all cross-attention core);
each `layer.N` adds its residual inline (counted in that sublayer's add & norm); a stack's
one `dropout` module runs after its embedding and after its final norm (both counted as
embedding). ViT's layer adds both residuals inline and calls one dropout module twice
(counted as the feed-forward's add & norm).
"""

from __future__ import annotations

from bertscope.measure.attribution import ATTN_CORE, compile_patterns
from bertscope.taxonomy import Sublayer

S = Sublayer

ENCODER = compile_patterns([
    (r"(^|\.)embeddings$|embedding_hidden_mapping_in$", Sublayer.EMBEDDING),
    (r"attention\.(self\.)?(query|key|value)$", Sublayer.QKV),
    (r"attention\.self$", ATTN_CORE),
    (r"albert_layers\.\d+\.attention$", ATTN_CORE),
    (r"attention\.output\.dense$|albert_layers\.\d+\.attention\.dense$",
     Sublayer.ATTN_OUTPUT),
    (r"attention\.output$|attention\.(LayerNorm|output_dropout)$", Sublayer.ATTN_ADD_NORM),
    (r"intermediate\.dense$|albert_layers\.\d+\.ffn$", Sublayer.FFN1),
    (r"intermediate\.intermediate_act_fn$|albert_layers\.\d+\.activation$",
     Sublayer.FFN_ACT),
    (r"layer\.\d+\.output\.dense$|ffn_output$", Sublayer.FFN2),
    (r"layer\.\d+\.output$|full_layer_layer_norm$|albert_layers\.\d+$",
     Sublayer.FFN_ADD_NORM),
    (r"(^|\.)(cls\.predictions|lm_head|predictions)$", Sublayer.MLM_HEAD),
    (r"(^|\.)(pooler|cls\.seq_relationship|sop_classifier)$", Sublayer.NSP_HEAD),
])
"""BERT/RoBERTa and ALBERT module names -> sublayer."""
GPT2 = compile_patterns([
    (r"transformer\.(wte|wpe|drop)$", Sublayer.EMBEDDING),
    (r"\.ln_1$", Sublayer.ATTN_ADD_NORM),
    (r"\.attn\.c_attn$", Sublayer.QKV),
    (r"\.attn\.c_proj$", Sublayer.ATTN_OUTPUT),
    (r"\.attn\.attn_dropout$", Sublayer.ATTN_SOFTMAX),
    (r"\.attn\.resid_dropout$", Sublayer.ATTN_ADD_NORM),
    (r"\.h\.\d+\.attn$", ATTN_CORE),
    (r"\.ln_2$", Sublayer.FFN_ADD_NORM),
    (r"\.mlp\.c_fc$", Sublayer.FFN1),
    (r"\.mlp\.act$", Sublayer.FFN_ACT),
    (r"\.mlp\.c_proj$", Sublayer.FFN2),
    (r"\.mlp\.dropout$", Sublayer.FFN_ADD_NORM),
    (r"transformer\.ln_f$", Sublayer.FINAL_NORM),
    (r"(^|\.)lm_head$", Sublayer.LM_HEAD),
])
"""GPT2LMHeadModel: attention core (and the head split) inline in GPT2Attention."""
LLAMA = compile_patterns([
    (r"model\.embed_tokens$", Sublayer.EMBEDDING),
    (r"model\.rotary_emb$", Sublayer.ROTARY),
    (r"\.input_layernorm$", Sublayer.ATTN_ADD_NORM),
    (r"\.self_attn\.(q|k|v)_proj$", Sublayer.QKV),
    (r"\.self_attn\.o_proj$", Sublayer.ATTN_OUTPUT),
    (r"\.self_attn$", ATTN_CORE),
    (r"\.post_attention_layernorm$", Sublayer.FFN_ADD_NORM),
    (r"\.mlp\.gate_proj$", Sublayer.FFN_GATE),
    (r"\.mlp\.up_proj$", Sublayer.FFN1),
    (r"\.mlp\.down_proj$", Sublayer.FFN2),
    (r"\.mlp(\.act_fn)?$", Sublayer.FFN_ACT),
    (r"model\.norm$", Sublayer.FINAL_NORM),
    (r"(^|\.)lm_head$", Sublayer.LM_HEAD),
])
"""LlamaForCausalLM: rotary application and the core inline in LlamaAttention, the gating
product inline in LlamaMLP."""

T5 = compile_patterns([
    (r"(^|\.)shared$|embed_tokens$|(encoder|decoder)\.dropout$", S.EMBEDDING),
    (r"relative_attention_bias$", S.REL_POS_BIAS),
    (r"EncDecAttention\.(q|k|v)$", S.CROSS_QKV),
    (r"EncDecAttention\.o$", S.CROSS_OUTPUT),
    (r"EncDecAttention$", S.CROSS_CORE),
    (r"SelfAttention\.(q|k|v)$", S.QKV),
    (r"SelfAttention\.o$", S.ATTN_OUTPUT),
    (r"SelfAttention$", ATTN_CORE),
    (r"DenseReluDense\.wi_0$", S.FFN_GATE),
    (r"DenseReluDense\.(wi|wi_1)$", S.FFN1),
    (r"DenseReluDense\.wo$", S.FFN2),
    (r"DenseReluDense(\.act|\.dropout)?$", S.FFN_ACT),
    (r"decoder\.block\.\d+\.layer\.1(\.|$)", S.CROSS_ADD_NORM),
    (r"encoder\.block\.\d+\.layer\.1(\.|$)|decoder\.block\.\d+\.layer\.2(\.|$)",
     S.FFN_ADD_NORM),
    (r"block\.\d+\.layer\.0(\.|$)", S.ATTN_ADD_NORM),
    (r"final_layer_norm$", S.FINAL_NORM),
    (r"(^|\.)lm_head$", S.LM_HEAD),
])
"""T5ForConditionalGeneration."""

VIT = compile_patterns([
    (r"patch_embeddings$", S.PATCH_EMBED),
    (r"vit\.embeddings$", S.EMBEDDING),
    (r"attention\.(q_proj|k_proj|v_proj)$", S.QKV),
    (r"attention\.o_proj$", S.ATTN_OUTPUT),
    (r"layers\.\d+\.attention$", ATTN_CORE),
    (r"layernorm_before$", S.ATTN_ADD_NORM),
    (r"mlp\.fc1$", S.FFN1),
    (r"mlp\.activation_fn$", S.FFN_ACT),
    (r"mlp\.fc2$", S.FFN2),
    (r"layers\.\d+(\.layernorm_after|\.dropout)?$", S.FFN_ADD_NORM),
    (r"vit\.layernorm$", S.FINAL_NORM),
    (r"(^|\.)classifier$", S.CLS_HEAD),
])
"""ViTForImageClassification."""


XLNET = compile_patterns([
    (r"transformer\.(word_embedding|dropout)$", S.EMBEDDING),
    (r"rel_attn\.layer_norm$", S.ATTN_ADD_NORM),
    (r"\.rel_attn(\.dropout)?$", ATTN_CORE),
    (r"ff\.layer_1$", S.FFN1),
    (r"ff\.activation_function$", S.FFN_ACT),
    (r"ff\.layer_2$", S.FFN2),
    (r"\.ff(\.layer_norm|\.dropout)?$", S.FFN_ADD_NORM),
    (r"(^|\.)lm_loss$", S.LM_HEAD),
])
"""XLNetLMHeadModel: both streams' projections (einsums with (h, n, d) weights) and cores
run inline in XLNetRelativeAttention (an attention-core scope, split by category and
order); one dropout module serves the embeddings, the encodings and the output."""


__all__ = ["ENCODER", "GPT2", "LLAMA", "T5", "VIT", "XLNET"]
