"""Model configs from Hugging Face `config.json` files: the keys each supported model_type
uses, and every key that changes the architecture honoured or refused. A family's spec names
its reader here (`FamilySpec.config_reader`); `from_hf_config` finds it by `model_type`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bertscope.bounded import read_json
from bertscope.config import Activation, Family, ModelConfig
from bertscope.errors import BertscopeError, expect, parse_enum
from bertscope.families import by_model_type, resolve

Reader = Callable[[dict[str, Any], str, str], ModelConfig]
"""(the parsed config.json, its path for messages, the model's name) -> ModelConfig."""


def from_hf_config(path: str | Path) -> ModelConfig:
    """Build a ModelConfig from a Hugging Face `config.json` (a file or a folder holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    raw = read_json(p, missing="give a preset name (see `bertscope models`) or a path to a "
                               "Hugging Face config.json", fix="give a Hugging Face config.json")
    if not isinstance(raw, dict):
        raise BertscopeError(f"{p}: expected a JSON object, got {type(raw).__name__}")
    o = str(p)
    kind = expect(raw, "model_type", str, o)
    try:
        spec = by_model_type(kind)
    except BertscopeError as e:
        raise BertscopeError(f"{p}: {e}") from None
    reader: Reader = resolve(spec.config_reader)
    name = expect(raw, "_name_or_path", str, o, "", nullable=True) or p.parent.name or p.stem
    return reader(raw, o, name)


def require(raw: dict[str, Any], keys: tuple[str, ...], origin: str) -> None:
    """Refuse a config.json that lacks any of `keys`."""
    missing = [k for k in keys if k not in raw]
    if missing:
        raise BertscopeError(f"{origin}: missing {', '.join(missing)}")


def refuse_unmodelled(raw: dict[str, Any], modelled: dict[str, Any], origin: str) -> None:
    """Refuse keys that change the architecture to something bertscope does not model:
    `modelled` maps each such key to the one value (or tuple of values) modelled."""
    for key, ok in modelled.items():
        allowed = ok if isinstance(ok, tuple) else (ok,)
        if key in raw and raw[key] is not None and raw[key] not in allowed:
            raise BertscopeError(f"{origin}: {key} = {raw[key]!r} is not modelled (only "
                                 f"{' or '.join(map(repr, allowed))}); remove it or use a "
                                 f"supported config")


_ENCODER_UNMODELLED: dict[str, Any] = {"is_decoder": False, "add_cross_attention": False,
                                       "position_embedding_type": "absolute"}
"""config.json keys that change an encoder's architecture, with the one value bertscope
models: any other value is refused (never silently ignored)."""


def read_encoder(raw: dict[str, Any], o: str, name: str) -> ModelConfig:
    """BERT, RoBERTa and ALBERT config.json files."""
    family = Family(by_model_type(raw["model_type"]).name)
    refuse_unmodelled(raw, _ENCODER_UNMODELLED, o)
    require(raw, ("num_hidden_layers", "hidden_size", "num_attention_heads",
                  "intermediate_size", "vocab_size", "max_position_embeddings"), o)
    if family is Family.ALBERT and expect(raw, "inner_group_num", int, o, 1) != 1:
        raise BertscopeError(f"{o}: inner_group_num {raw['inner_group_num']} is not supported "
                             f"(only 1, as in every published ALBERT)")
    groups = expect(raw, "num_hidden_groups", int, o, 1)
    if family is Family.ALBERT and groups != 1:
        raise BertscopeError(f"{o}: num_hidden_groups {groups} is not supported (only 1, "
                             f"full cross-layer sharing, as in every published ALBERT)")
    vocab = expect(raw, "vocab_size", int, o)
    pad = expect(raw, "pad_token_id", int, o, 1, nullable=True)
    if family is Family.ROBERTA and (pad is None or not 0 <= pad < vocab):
        raise BertscopeError(f"{o}: pad_token_id: RoBERTa needs a token id in [0, "
                             f"vocab_size {vocab}), got {pad!r}")
    return ModelConfig(
        name=name,
        family=family,
        num_layers=expect(raw, "num_hidden_layers", int, o),
        hidden=expect(raw, "hidden_size", int, o),
        heads=expect(raw, "num_attention_heads", int, o),
        intermediate=expect(raw, "intermediate_size", int, o),
        vocab_size=vocab,
        max_positions=expect(raw, "max_position_embeddings", int, o),
        type_vocab_size=expect(raw, "type_vocab_size", int, o, 2),
        embedding_size=(expect(raw, "embedding_size", int, o, None, nullable=True)
                        if family is Family.ALBERT else None),
        share_layers=family is Family.ALBERT and groups == 1,
        activation=parse_enum(Activation, expect(raw, "hidden_act", str, o, "gelu"),
                              "hidden_act", o),
        position_offset=(pad + 1) if family is Family.ROBERTA else 0,
    )


_GPT2_MODELLED: dict[str, Any] = {
    "add_cross_attention": False, "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False}
"""GPT-2 config.json keys that change the architecture, with the values modelled."""


def read_gpt2(raw: dict[str, Any], o: str, name: str) -> ModelConfig:
    """GPT-2 config.json files (openai-community/gpt2 and its sizes; n_inner null is 4h)."""
    refuse_unmodelled(raw, _GPT2_MODELLED, o)
    require(raw, ("n_layer", "n_embd", "n_head", "vocab_size"), o)
    h = expect(raw, "n_embd", int, o)
    inner = expect(raw, "n_inner", int, o, None, nullable=True)
    positions = expect(raw, "n_positions", int, o, None, nullable=True)
    if positions is None:
        positions = expect(raw, "n_ctx", int, o)
    return ModelConfig(
        name=name, family=Family.GPT2, num_layers=expect(raw, "n_layer", int, o), hidden=h,
        heads=expect(raw, "n_head", int, o), intermediate=inner if inner is not None else 4 * h,
        vocab_size=expect(raw, "vocab_size", int, o), max_positions=positions,
        type_vocab_size=1,
        activation=parse_enum(Activation, expect(raw, "activation_function", str, o,
                                                 "gelu_new"), "activation_function", o),
        tie_word_embeddings=expect(raw, "tie_word_embeddings", bool, o, True))


_LLAMA_MODELLED: dict[str, Any] = {"attention_bias": False, "mlp_bias": False,
                                   "pretraining_tp": 1, "attention_dropout": (0, 0.0)}
"""Llama config.json keys that change the architecture (or add work), with the values
modelled; `rope_scaling` only changes the rotary frequencies, not the work, and is accepted."""


def read_llama(raw: dict[str, Any], o: str, name: str) -> ModelConfig:
    """Llama config.json files (meta-llama/Llama-2-*-hf, Meta-Llama-3-*)."""
    refuse_unmodelled(raw, _LLAMA_MODELLED, o)
    require(raw, ("num_hidden_layers", "hidden_size", "num_attention_heads",
                  "intermediate_size", "vocab_size", "max_position_embeddings"), o)
    heads = expect(raw, "num_attention_heads", int, o)
    h = expect(raw, "hidden_size", int, o)
    head_dim = expect(raw, "head_dim", int, o, None, nullable=True)
    return ModelConfig(
        name=name, family=Family.LLAMA, num_layers=expect(raw, "num_hidden_layers", int, o),
        hidden=h, heads=heads,
        kv_heads=expect(raw, "num_key_value_heads", int, o, heads, nullable=True) or heads,
        head_size=head_dim if head_dim not in (None, h // heads) else None,
        intermediate=expect(raw, "intermediate_size", int, o),
        vocab_size=expect(raw, "vocab_size", int, o),
        max_positions=expect(raw, "max_position_embeddings", int, o), type_vocab_size=1,
        gated_ffn=True,
        activation=parse_enum(Activation, expect(raw, "hidden_act", str, o, "silu"),
                              "hidden_act", o),
        tie_word_embeddings=expect(raw, "tie_word_embeddings", bool, o, False))


_T5_UNMODELLED: dict[str, Any] = {"is_encoder_decoder": True, "is_decoder": False}
"""T5 config.json keys that would make another model than the encoder-decoder modelled."""


def _t5_ffn(raw: dict[str, Any], o: str) -> tuple[bool, Activation]:
    """`feed_forward_proj` as Hugging Face reads it: "ACT" or "gated-ACT" (v1.1's
    "gated-gelu" is the tanh approximation, gelu_new, for backward compatibility)."""
    proj = expect(raw, "feed_forward_proj", str, o, "relu")
    parts = proj.split("-")
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
        raise BertscopeError(f"{o}: feed_forward_proj {proj!r} is not 'ACT' or 'gated-ACT'")
    act = "gelu_new" if proj == "gated-gelu" else parts[-1]
    return len(parts) == 2, parse_enum(Activation, act, "feed_forward_proj", o)


def read_t5(raw: dict[str, Any], o: str, name: str) -> ModelConfig:
    """T5 (v1.0 and v1.1) config.json files: T5ForConditionalGeneration's sizes. A head
    untied from the embedding (`tie_word_embeddings: false`, v1.1) is modelled as the
    published checkpoints have it: a separate LM head, no h^-0.5 scaling."""
    refuse_unmodelled(raw, _T5_UNMODELLED, o)
    require(raw, ("d_model", "num_layers", "num_heads", "d_ff", "vocab_size"), o)
    layers = expect(raw, "num_layers", int, o)
    decoder = expect(raw, "num_decoder_layers", int, o, None, nullable=True)
    gated, act = _t5_ffn(raw, o)
    return ModelConfig(
        name=name, family=Family.T5, num_layers=layers,
        decoder_layers=None if decoder in (None, layers) else decoder,
        hidden=expect(raw, "d_model", int, o), heads=expect(raw, "num_heads", int, o),
        head_size=expect(raw, "d_kv", int, o, 64), intermediate=expect(raw, "d_ff", int, o),
        vocab_size=expect(raw, "vocab_size", int, o),
        max_positions=expect(raw, "n_positions", int, o, 512), type_vocab_size=1,
        relative_buckets=expect(raw, "relative_attention_num_buckets", int, o, 32),
        gated_ffn=gated, activation=act,
        tie_word_embeddings=expect(raw, "tie_word_embeddings", bool, o, True))


_VIT_UNMODELLED: dict[str, Any] = {"qkv_bias": True,
                                   "problem_type": "single_label_classification"}
"""ViT config.json keys with the one value modelled: biased Q/K/V projections, a softmax
cross-entropy over the classes (not BCE or regression). `encoder_stride` sizes only
ViTForMaskedImageModeling's decoder and the pooler keys only ViTModel's pooler, neither of
which the image classifier runs."""


def read_vit(raw: dict[str, Any], o: str, name: str) -> ModelConfig:
    """ViT config.json files: ViTForImageClassification's sizes; the classes are the
    config's labels (`id2label`, else `num_labels`, else Hugging Face's default 2)."""
    refuse_unmodelled(raw, _VIT_UNMODELLED, o)
    require(raw, ("hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size"), o)
    labels = expect(raw, "id2label", dict, o, None, nullable=True)
    classes = len(labels) if labels else expect(raw, "num_labels", int, o, 2)
    image, patch = expect(raw, "image_size", int, o, 224), expect(raw, "patch_size", int, o, 16)
    if patch <= 0 or image % patch:
        raise BertscopeError(f"{o}: image_size {image} is not a multiple of patch_size {patch}")
    return ModelConfig(
        name=name, family=Family.VIT, num_layers=expect(raw, "num_hidden_layers", int, o),
        hidden=expect(raw, "hidden_size", int, o),
        heads=expect(raw, "num_attention_heads", int, o),
        intermediate=expect(raw, "intermediate_size", int, o), vocab_size=classes,
        max_positions=(image // patch) ** 2 + 1, type_vocab_size=1, image_size=image,
        patch_size=patch, channels=expect(raw, "num_channels", int, o, 3),
        tie_word_embeddings=False,
        activation=parse_enum(Activation, expect(raw, "hidden_act", str, o, "gelu"),
                              "hidden_act", o))


_XLNET_MODELLED: dict[str, Any] = {"attn_type": "bi", "bi_data": False, "untie_r": True,
                                   "same_length": False, "clamp_len": (-1, None),
                                   "reuse_len": (None, 0)}
"""XLNet config.json keys that change the work, with the values modelled (the published
checkpoints': bidirectional attention, one direction of data, per-layer relative biases)."""

XLNET_MEM_LEN = 384
"""The pretraining memory length where config.json leaves `mem_len` null (the published
checkpoints do): zihangdai/xlnet README's pretraining command, --mem_len=384."""


def read_xlnet(raw: dict[str, Any], o: str, name: str) -> ModelConfig:
    """XLNet config.json files (xlnet/xlnet-{base,large}-cased): XLNetLMHeadModel's sizes;
    `mem_len` null (as published) is the pretraining's 384."""
    refuse_unmodelled(raw, _XLNET_MODELLED, o)
    require(raw, ("d_model", "n_layer", "n_head", "d_inner", "vocab_size"), o)
    h, heads = expect(raw, "d_model", int, o), expect(raw, "n_head", int, o)
    d_head = expect(raw, "d_head", int, o, None, nullable=True)
    if d_head is not None and heads > 0 and d_head * heads != h:
        raise BertscopeError(f"{o}: d_head {d_head} x n_head {heads} must equal d_model {h}")
    mem = expect(raw, "mem_len", int, o, None, nullable=True)
    return ModelConfig(
        name=name, family=Family.XLNET, num_layers=expect(raw, "n_layer", int, o), hidden=h,
        heads=heads, intermediate=expect(raw, "d_inner", int, o),
        vocab_size=expect(raw, "vocab_size", int, o), max_positions=512, type_vocab_size=2,
        mem_len=XLNET_MEM_LEN if mem is None else mem,
        activation=parse_enum(Activation, expect(raw, "ff_activation", str, o, "gelu"),
                              "ff_activation", o))


__all__ = ["Reader", "from_hf_config", "read_encoder", "read_gpt2", "read_llama", "read_t5",
           "read_vit", "read_xlnet", "refuse_unmodelled", "require"]
