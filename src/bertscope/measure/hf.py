"""Hugging Face models as profiling targets: build them from a config, map their module
paths to the op-table sublayers (transformers is an optional extra).

Hugging Face runs the attention core (scores, softmax, context) inline in its self-attention
module, so that module's scope is an attention-core scope: its ops are split by category and
order (see `attribution.py`). ALBERT adds the attention residual inline in its attention
module, so that add is counted in the attention context there.
"""

from __future__ import annotations

import re
from typing import Any

from torch import nn

from bertscope.config import Checkpoint, Family, ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.measure.attribution import ATTN_CORE, Patterns, compile_patterns
from bertscope.measure.hf_more import LAYERS, hf_model_more
from bertscope.measure.hf_more import PATTERNS as OTHER_PATTERNS
from bertscope.measure.hf_weights import hf_config
from bertscope.measure.models import DROPOUT_PROB
from bertscope.taxonomy import Sublayer

# module-path patterns -> sublayer, first match wins (BERT/RoBERTa and ALBERT names)
_ENCODER = compile_patterns([
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
# GPT2LMHeadModel: attention core (and the head split) inline in GPT2Attention
_GPT2 = compile_patterns([
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
# LlamaForCausalLM: rotary application and the core inline in LlamaAttention, the gating
# product inline in LlamaMLP
_LLAMA = compile_patterns([
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
PATTERNS: dict[Family, Patterns] = {Family.BERT: _ENCODER, Family.ROBERTA: _ENCODER,
                                    Family.ALBERT: _ENCODER, Family.GPT2: _GPT2,
                                    Family.LLAMA: _LLAMA, **OTHER_PATTERNS}
"""Family -> its Hugging Face module-path patterns (first match wins); T5's and ViT's from
`hf_more.py`."""
_LAYER = re.compile(r"(encoder\.layer\.\d+|albert_layers\.\d+|transformer\.h\.\d+"
                    r"|model\.layers\.\d+)$")
_OTHER_FAMILIES = (Family.T5, Family.VIT)
"""Families whose Hugging Face model `hf_more.py` builds and maps."""


def hf_sublayer(m: ModelConfig) -> Any:
    """A module-path -> sublayer function for the Hugging Face model of `m`'s family."""
    patterns = PATTERNS.get(m.family)
    if patterns is None:
        raise BertscopeError(f"--hf profiling of family {m.family.value!r} is not supported "
                             f"yet; profile it without --hf")

    def sublayer_of(name: str) -> Sublayer | str:
        if not name:
            return Sublayer.OTHER
        for pattern, sub in patterns:
            if pattern.search(name):
                return sub
        parent = name.rpartition(".")[0]
        return sublayer_of(parent) if parent else Sublayer.OTHER

    return sublayer_of


def hf_layers(model: nn.Module) -> list[nn.Module]:
    """The modules that run as encoder layers (ALBERT: its one shared layer)."""
    return [mod for name, mod in model.named_modules()
            if _LAYER.search(name) or LAYERS.search(name)]


HF_CLASSES: dict[Family, str] = {
    Family.BERT: "BertForPreTraining", Family.ROBERTA: "RobertaForMaskedLM",
    Family.ALBERT: "AlbertForPreTraining", Family.GPT2: "GPT2LMHeadModel",
    Family.LLAMA: "LlamaForCausalLM", Family.T5: "T5ForConditionalGeneration",
    Family.VIT: "ViTForImageClassification"}
"""Family -> the transformers class `--hf` profiles."""


def build_hf_model(m: ModelConfig, run: RunConfig) -> nn.Module:
    """The transformers model of `m`'s family (`HF_CLASSES`), randomly initialised (no
    download), eager attention, dropout and checkpointing as `run` says."""
    try:
        import transformers
    except ImportError:
        raise BertscopeError("--hf needs Hugging Face transformers: pip install "
                             "'bertscope[hf]'") from None
    if m.family in _OTHER_FAMILIES:
        model = hf_model_more(m, DROPOUT_PROB if run.dropout else 0.0)
        return _checkpointed(model) if (run.checkpoint is Checkpoint.FULL) else model
    if m.family not in HF_CLASSES:
        raise BertscopeError(f"--hf profiling of family {m.family.value!r} is not supported "
                             f"yet; profile it without --hf")
    if run.masked_lm_only:
        raise BertscopeError("Hugging Face models compute MLM logits on every position; "
                             "drop --masked-lm-only with --hf")
    cfg = hf_config(m, dropout=DROPOUT_PROB if run.dropout else 0.0)
    model = getattr(transformers, HF_CLASSES[m.family])(cfg)
    if m.family is Family.GPT2:  # its class name does not say "ForCausalLM"; the loss is that
        model.loss_type = "ForCausalLM"
    return _checkpointed(model) if (run.checkpoint is Checkpoint.FULL) else model


def _checkpointed(model: nn.Module) -> nn.Module:
    """`model` with Hugging Face's activation checkpointing of every layer turned on."""
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5
    kwargs = {"use_reentrant": False}
    try:
        if enable is not None:
            enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    except ValueError as e:
        raise BertscopeError(f"--checkpointing with --hf: {e}; profile the reference "
                             f"model (drop --hf) instead") from None
    return model


__all__ = ["HF_CLASSES", "PATTERNS", "build_hf_model", "hf_layers", "hf_sublayer"]
