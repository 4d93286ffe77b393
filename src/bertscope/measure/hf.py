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

from bertscope.config import Family, ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.measure.attribution import ATTN_CORE
from bertscope.measure.hf_more import LAYERS, PATTERNS, hf_model_more
from bertscope.measure.hf_weights import hf_config
from bertscope.measure.models import DROPOUT_PROB
from bertscope.taxonomy import Sublayer

# module-path patterns -> sublayer, first match wins (BERT/RoBERTa and ALBERT names)
_PATTERNS: list[tuple[re.Pattern[str], Sublayer | str]] = [
    (re.compile(p), s) for p, s in [
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
    ]
]
_LAYER = re.compile(r"(encoder\.layer\.\d+|albert_layers\.\d+)$")
_OTHER_FAMILIES = (Family.T5, Family.VIT)
"""Families whose Hugging Face model `hf_more.py` builds and maps."""


def hf_sublayer(m: ModelConfig) -> Any:
    """A module-path -> sublayer function for the Hugging Face model of `m`'s family."""
    patterns = PATTERNS.get(m.family, _PATTERNS)

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


def build_hf_model(m: ModelConfig, run: RunConfig) -> nn.Module:
    """BertForPreTraining / RobertaForMaskedLM / AlbertForPreTraining for `m`, randomly
    initialised (no download), eager attention, dropout and checkpointing as `run` says."""
    try:
        import transformers
    except ImportError:
        raise BertscopeError("--hf needs Hugging Face transformers: pip install "
                             "'bertscope[hf]'") from None
    if m.family in _OTHER_FAMILIES:
        model = hf_model_more(m, DROPOUT_PROB if run.dropout else 0.0)
        return _checkpointed(model) if run.checkpointing else model
    if m.family not in (Family.BERT, Family.ROBERTA, Family.ALBERT):
        raise BertscopeError(f"--hf profiling of family {m.family.value!r} is not supported "
                             f"yet; profile it without --hf")
    if run.masked_lm_only:
        raise BertscopeError("Hugging Face models compute MLM logits on every position; "
                             "drop --masked-lm-only with --hf")
    cfg = hf_config(m, dropout=DROPOUT_PROB if run.dropout else 0.0)
    kind = {Family.BERT: transformers.BertForPreTraining,
            Family.ROBERTA: transformers.RobertaForMaskedLM,
            Family.ALBERT: transformers.AlbertForPreTraining}[m.family]
    model = kind(cfg)
    return _checkpointed(model) if run.checkpointing else model


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


__all__ = ["build_hf_model", "hf_layers", "hf_sublayer"]
