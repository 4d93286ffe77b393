"""Hugging Face counterparts of the reference models (`models/`): the transformers config
of a `ModelConfig` (`hf_config`; T5's `t5_config`, ViT's `vit_config`), and the map from our
parameter names to HF's that copies HF weights in (transformers is an optional extra,
imported only by the config builders).

`load_hf_state_dict(ours, BertForPreTraining(hf_config(cfg)))` makes the two models compute
the same losses to float rounding (the cross-checks in the tests rely on it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from bertscope.config import Activation, Family, ModelConfig
from bertscope.errors import BertscopeError, parse_enum
from bertscope.measure.models.encoder import layer_norm_eps, pad_id
from bertscope.measure.models.layers import INIT_STD

if TYPE_CHECKING:
    from bertscope.measure.models.encoder import EncoderForPretraining

_HF_LAYER = {  # our path inside a layer -> HF's (BERT/RoBERTa, ALBERT)
    "attn.q": ("attention.self.query", "attention.query"),
    "attn.k": ("attention.self.key", "attention.key"),
    "attn.v": ("attention.self.value", "attention.value"),
    "attn.out": ("attention.output.dense", "attention.dense"),
    "attn_norm.norm": ("attention.output.LayerNorm", "attention.LayerNorm"),
    "ffn.fc1": ("intermediate.dense", "ffn"),
    "ffn.fc2": ("output.dense", "ffn_output"),
    "ffn_norm.norm": ("output.LayerNorm", "full_layer_layer_norm"),
}
_HF_TOP = {  # our module path -> HF's, per family
    Family.BERT: {"embeddings": "bert.embeddings", "mlm.dense": "cls.predictions.transform.dense",
                  "mlm.norm": "cls.predictions.transform.LayerNorm",
                  "mlm.decoder": "cls.predictions.decoder", "nsp.pooler": "bert.pooler.dense",
                  "nsp.classifier": "cls.seq_relationship"},
    Family.ROBERTA: {"embeddings": "roberta.embeddings", "mlm.dense": "lm_head.dense",
                     "mlm.norm": "lm_head.layer_norm", "mlm.decoder": "lm_head.decoder"},
    Family.ALBERT: {"embeddings": "albert.embeddings",
                    "embeddings.project": "albert.encoder.embedding_hidden_mapping_in",
                    "mlm.dense": "predictions.dense", "mlm.norm": "predictions.LayerNorm",
                    "mlm.decoder": "predictions.decoder", "nsp.pooler": "albert.pooler",
                    "nsp.classifier": "sop_classifier.classifier"},
}
_HF_EMB = {"word": "word_embeddings", "position": "position_embeddings",
           "token_type": "token_type_embeddings", "norm": "LayerNorm"}


def hf_param_name(cfg: ModelConfig, name: str) -> str:
    """The Hugging Face parameter name matching one of ours (`layers.0.attn.q.weight` ->
    `bert.encoder.layer.0.attention.self.query.weight`)."""
    module, _, leaf = name.rpartition(".")
    parts = module.split(".")
    if parts[0] == "layers":
        albert = cfg.family is Family.ALBERT
        inner = _HF_LAYER[".".join(parts[2:])][1 if albert else 0]
        prefix = ("albert.encoder.albert_layer_groups.0.albert_layers.0" if albert
                  else f"{cfg.family.value}.encoder.layer.{parts[1]}")
        return f"{prefix}.{inner}.{leaf}"
    top = _HF_TOP[cfg.family]
    if module in top:
        return f"{top[module]}.{leaf}"
    if parts[0] == "embeddings" and len(parts) == 2:
        return f"{top['embeddings']}.{_HF_EMB[parts[1]]}.{leaf}"
    raise BertscopeError(f"no Hugging Face counterpart for parameter {name!r}")


@torch.no_grad()
def load_hf_state_dict(model: EncoderForPretraining, hf_model: nn.Module) -> None:
    """Copy the weights of the matching HF model (BertForPreTraining, RobertaForMaskedLM,
    AlbertForPreTraining) into `model`, every parameter; raises on any missing or misshapen."""
    hf = dict(hf_model.named_parameters(remove_duplicate=False))
    for name, p in model.named_parameters():  # tied decoder weight: listed once, as word
        key = hf_param_name(model.cfg, name)
        if key not in hf:
            raise BertscopeError(f"{type(hf_model).__name__} has no parameter {key!r} "
                                 f"(for {name!r}); is it the {model.cfg.family} model?")
        if hf[key].shape != p.shape:
            raise BertscopeError(f"{key}: shape {tuple(hf[key].shape)} != {name}: "
                                 f"{tuple(p.shape)}; build both from the same config")
        p.copy_(hf[key])
    decoder = hf[hf_param_name(model.cfg, "mlm.decoder.weight")]
    if not torch.equal(decoder, model.mlm.decoder.weight):
        raise BertscopeError(f"{type(hf_model).__name__}'s decoder weight is not tied to its "
                             f"word embeddings (tie_word_embeddings=False); ours always is")


def hf_config(cfg: ModelConfig, *, dropout: float = 0.0) -> Any:
    """The transformers config object (eager attention) of the HF model matching `cfg`."""
    import transformers  # optional dependency, only for cross-checks and the HF adapter

    common: dict[str, Any] = dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.heads, intermediate_size=cfg.intermediate,
        hidden_act=cfg.activation.value, max_position_embeddings=cfg.max_positions,
        type_vocab_size=cfg.type_vocab_size, layer_norm_eps=layer_norm_eps(cfg),
        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
        initializer_range=INIT_STD, pad_token_id=pad_id(cfg), attn_implementation="eager")
    match parse_enum(Family, cfg.family, "family"):
        case Family.BERT:
            return transformers.BertConfig(**common)
        case Family.ROBERTA:
            return transformers.RobertaConfig(**common, bos_token_id=0, eos_token_id=2)
        case Family.GPT2:
            return transformers.GPT2Config(
                vocab_size=cfg.vocab_size, n_positions=cfg.max_positions, n_embd=cfg.hidden,
                n_layer=cfg.num_layers, n_head=cfg.heads, n_inner=cfg.intermediate,
                activation_function=cfg.activation.value, resid_pdrop=dropout,
                embd_pdrop=dropout, attn_pdrop=dropout, initializer_range=INIT_STD,
                tie_word_embeddings=cfg.tie_word_embeddings, attn_implementation="eager",
                bos_token_id=cfg.vocab_size - 1, eos_token_id=cfg.vocab_size - 1)
        case Family.LLAMA:
            return transformers.LlamaConfig(
                vocab_size=cfg.vocab_size, hidden_size=cfg.hidden,
                intermediate_size=cfg.intermediate, num_hidden_layers=cfg.num_layers,
                num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_head_count,
                head_dim=cfg.head_dim, max_position_embeddings=cfg.max_positions,
                hidden_act=cfg.activation.value, initializer_range=INIT_STD,
                tie_word_embeddings=cfg.tie_word_embeddings, attn_implementation="eager",
                bos_token_id=min(1, cfg.vocab_size - 1), eos_token_id=min(2, cfg.vocab_size - 1))
        case Family.ALBERT:
            if not cfg.share_layers:
                raise BertscopeError("HF ALBERT always shares its layers; set share_layers")
            return transformers.AlbertConfig(**common, embedding_size=cfg.emb,
                                             num_hidden_groups=1, inner_group_num=1,
                                             classifier_dropout_prob=dropout)
    raise BertscopeError(f"no Hugging Face config for family {cfg.family!r}")


_DECODER_LAYER = {  # our path inside a layer -> (GPT-2's, Llama's)
    "attn_norm": ("ln_1", "input_layernorm"), "attn.qkv": ("attn.c_attn", None),
    "attn.q": (None, "self_attn.q_proj"), "attn.k": (None, "self_attn.k_proj"),
    "attn.v": (None, "self_attn.v_proj"), "attn.out": ("attn.c_proj", "self_attn.o_proj"),
    "ffn_norm": ("ln_2", "post_attention_layernorm"), "ffn.gate": (None, "mlp.gate_proj"),
    "ffn.fc1": ("mlp.c_fc", "mlp.up_proj"), "ffn.fc2": ("mlp.c_proj", "mlp.down_proj"),
}
_DECODER_TOP = {"embeddings.word": ("transformer.wte", "model.embed_tokens"),
                "embeddings.position": ("transformer.wpe", None),
                "final_norm": ("transformer.ln_f", "model.norm"),
                "lm_head": ("lm_head", "lm_head")}


def t5_config(m: ModelConfig, *, dropout: float = 0.0) -> Any:
    """The transformers T5Config of `m`, eager attention, dropout `dropout`."""
    import transformers

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


def vit_config(m: ModelConfig, *, dropout: float = 0.0) -> Any:
    """The transformers ViTConfig of `m` (biased Q/K/V), eager attention, dropout
    `dropout`."""
    import transformers

    return transformers.ViTConfig(
        hidden_size=m.hidden, num_hidden_layers=m.num_layers, num_attention_heads=m.heads,
        intermediate_size=m.intermediate, hidden_act=m.activation.value,
        image_size=m.image_size, patch_size=m.patch_size, num_channels=m.channels,
        num_labels=m.vocab_size, qkv_bias=True, hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout, attn_implementation="eager")


def xlnet_config(m: ModelConfig, *, dropout: float = 0.0) -> Any:
    """The transformers XLNetConfig of `m` (bidirectional, untied relative biases, its
    memory length), dropout `dropout`."""
    import transformers

    return transformers.XLNetConfig(
        vocab_size=m.vocab_size, d_model=m.hidden, n_layer=m.num_layers, n_head=m.heads,
        d_inner=m.intermediate, ff_activation=m.activation.value, mem_len=m.mem_len,
        dropout=dropout, initializer_range=INIT_STD, layer_norm_eps=1e-12)


def hf_decoder_param_name(cfg: ModelConfig, name: str) -> str:
    """The GPT2LMHeadModel / LlamaForCausalLM parameter name matching one of
    `DecoderForCausalLM`'s (`layers.0.attn.qkv.weight` -> `transformer.h.0.attn.c_attn.weight`)."""
    module, _, leaf = name.rpartition(".")
    parts = module.split(".")
    col = 1 if cfg.family is Family.LLAMA else 0
    hf: str | None
    if parts[0] == "layers":
        hf = _DECODER_LAYER.get(".".join(parts[2:]), (None, None))[col]
        prefix = "model.layers" if col else "transformer.h"
        hf = f"{prefix}.{parts[1]}.{hf}" if hf else None
    else:
        hf = _DECODER_TOP.get(module, (None, None))[col]
    if hf is None:
        raise BertscopeError(f"no Hugging Face counterpart for parameter {name!r}")
    return f"{hf}.{leaf}"


@torch.no_grad()
def load_hf_decoder_state(model: nn.Module, hf_model: nn.Module) -> None:
    """Copy the weights of GPT2LMHeadModel / LlamaForCausalLM into a `DecoderForCausalLM`
    of the same config (GPT-2's Conv1D weights are stored transposed); raises on any missing
    or misshapen parameter."""
    cfg: ModelConfig = model.cfg  # type: ignore[assignment]
    hf = dict(hf_model.named_parameters(remove_duplicate=False))
    for name, p in model.named_parameters():
        key = hf_decoder_param_name(cfg, name)
        if key not in hf:
            raise BertscopeError(f"{type(hf_model).__name__} has no parameter {key!r} "
                                 f"(for {name!r}); is it the {cfg.family} model?")
        src = hf[key]
        if cfg.family is Family.GPT2 and src.dim() == 2 and key.startswith("transformer.h."):
            src = src.t()  # Conv1D keeps (in, out)
        if src.shape != p.shape:
            raise BertscopeError(f"{key}: shape {tuple(src.shape)} != {name}: "
                                 f"{tuple(p.shape)}; build both from the same config")
        p.copy_(src)


__all__ = ["hf_config", "hf_decoder_param_name", "hf_param_name", "load_hf_decoder_state",
           "load_hf_state_dict", "t5_config", "vit_config"]
