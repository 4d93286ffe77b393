"""Hugging Face T5ForConditionalGeneration and ViTForImageClassification as profiling
targets (`hf.py` holds the encoders'): their configs from a ModelConfig (no download) and
their module paths -> op-table sublayers.

T5 runs the attention core inline in `SelfAttention` (an attention-core scope, split by
category and order as HF's BERT's) and in `EncDecAttention` (all cross-attention core);
each `layer.N` adds its residual inline (counted in that sublayer's add & norm); a stack's
one `dropout` module runs after its embedding and after its final norm (both counted as
embedding). ViT's layer adds both residuals inline and calls one dropout module twice
(counted as the feed-forward's add & norm).
"""

from __future__ import annotations

import re
from typing import Any

from bertscope.config import Activation, Family, ModelConfig
from bertscope.measure.attribution import ATTN_CORE, Patterns, compile_patterns
from bertscope.taxonomy import Sublayer

S = Sublayer

PATTERNS: dict[Family, Patterns] = {
    Family.T5: compile_patterns([
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
    ]),
    Family.VIT: compile_patterns([
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
    ]),
}
"""Module-path patterns -> sublayer per family, first match wins."""

LAYERS = re.compile(r"((encoder|decoder)\.block\.\d+|vit\.layers\.\d+)$")
"""Paths of the modules that run as layers: T5's encoder then decoder blocks, ViT's layers."""


def hf_config_more(m: ModelConfig, dropout: float) -> Any:
    """The transformers config of `m` (T5 or ViT), eager attention, dropout `dropout`."""
    import transformers

    if m.family is Family.T5:
        act = m.activation.value
        ffn = ("gated-gelu" if m.activation is Activation.GELU_NEW else f"gated-{act}") \
            if m.gated_ffn else act
        return transformers.T5Config(
            vocab_size=m.vocab_size, d_model=m.hidden, d_kv=m.head_dim, d_ff=m.intermediate,
            num_layers=m.num_layers, num_decoder_layers=m.decoder_layer_count,
            num_heads=m.heads, relative_attention_num_buckets=m.relative_buckets,
            feed_forward_proj=ffn, tie_word_embeddings=m.tie_word_embeddings,
            dropout_rate=dropout, decoder_start_token_id=0, pad_token_id=0,
            attn_implementation="eager")
    return transformers.ViTConfig(
        hidden_size=m.hidden, num_hidden_layers=m.num_layers, num_attention_heads=m.heads,
        intermediate_size=m.intermediate, hidden_act=m.activation.value,
        image_size=m.image_size, patch_size=m.patch_size, num_channels=m.channels,
        num_labels=m.vocab_size, qkv_bias=True, hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout, attn_implementation="eager")


def hf_model_more(m: ModelConfig, dropout: float) -> Any:
    """T5ForConditionalGeneration or ViTForImageClassification for `m`, randomly
    initialised."""
    import transformers

    kind = (transformers.T5ForConditionalGeneration if m.family is Family.T5
            else transformers.ViTForImageClassification)
    return kind(hf_config_more(m, dropout))


__all__ = ["LAYERS", "PATTERNS", "hf_config_more", "hf_model_more"]
