"""Model and run configuration: typed, validated on construction, presets, HF config.json loader.

Sizes follow Hugging Face's names where a user would compare (`hidden`, `heads`,
`intermediate`, `vocab_size`, `max_positions`); the presets reproduce the published
checkpoints' config.json files exactly, so parameter counts match Hugging Face's.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from bertscope.errors import (
    BertscopeError,
    check_positive_ints,
    expect,
    is_positive_int,
    parse_enum,
)
from bertscope.io import read_text


class Family(StrEnum):
    """Encoder family: decides the embedding layout, weight sharing and pretraining heads."""

    BERT = "bert"
    ROBERTA = "roberta"
    ALBERT = "albert"


class Activation(StrEnum):
    """Feed-forward activation (Hugging Face `hidden_act` names)."""

    GELU = "gelu"
    GELU_NEW = "gelu_new"
    GELU_FAST = "gelu_fast"
    GELU_PYTORCH_TANH = "gelu_pytorch_tanh"
    RELU = "relu"
    SILU = "silu"


class Precision(StrEnum):
    """Numeric precision of a training run.

    `fp16` and `bf16` mean mixed precision: 16-bit activations, weights and gradients with
    fp32 master weights and fp32 optimizer state (Micikevicius et al. 2018; ZeRO's 16 bytes
    per parameter for Adam, Rajbhandari et al. 2020, section 3.1).
    """

    FP32 = "fp32"
    TF32 = "tf32"
    """fp32 tensors with matmuls on TF32 tensor cores (NVIDIA Ampere and newer;
    `torch.backends.cuda.matmul.allow_tf32 = True`): fp32 everywhere but the GEMM rate."""
    FP16 = "fp16"
    BF16 = "bf16"

    @property
    def act_bytes(self) -> int:
        """Bytes per activation / working weight / gradient element."""
        return 4 if self in (Precision.FP32, Precision.TF32) else 2

    @property
    def mixed(self) -> bool:
        """True for 16-bit mixed precision (fp32 master weights kept)."""
        return self in (Precision.FP16, Precision.BF16)


class Optimizer(StrEnum):
    """Optimizer of the update step. `sgd` is SGD with momentum (one fp32 state per weight)."""

    SGD = "sgd"
    ADAM = "adam"
    ADAMW = "adamw"
    LAMB = "lamb"

    @property
    def states(self) -> int:
        """fp32 state tensors kept per parameter (momentum; or Adam's m and v)."""
        return 1 if self is Optimizer.SGD else 2


class Attention(StrEnum):
    """How the attention core (scores, scale, mask, softmax, dropout, context) runs."""

    EAGER = "eager"
    """Separate kernels, as eager PyTorch and Hugging Face's BertSelfAttention run it: the
    s x s score tensor is written and read by each of scale, mask, softmax and dropout."""
    FUSED_SOFTMAX = "fused-softmax"
    """Scale, mask, softmax and dropout in one kernel between the two batched GEMMs (as
    Megatron-LM's and apex's fused softmax): the scores are read once and written once."""
    SDPA = "sdpa"
    """One fused attention kernel (torch's scaled_dot_product_attention on its flash or
    memory-efficient path; FlashAttention, Dao et al. 2022): the score matrix never reaches
    memory; backward recomputes it from Q, K and the saved softmax statistics."""


class HostAllocator(StrEnum):
    """How host memory is allocated while measuring on a CPU (bertscope.measure.allocator)."""

    KEEP = "keep"
    """Freed memory stays in the process (glibc tuned with mallopt): no page faults on reuse,
    as with a caching allocator."""
    SYSTEM = "system"
    """The C library's defaults, untouched."""


class Checkpoint(StrEnum):
    """Activation recomputation (Korthikanti et al. 2022). The analytic op model and the
    profiler run `none` or `full` (`RunConfig.checkpointing`); the distributed model all three."""

    NONE = "none"
    """Keep every activation backward needs."""
    SELECTIVE = "selective"
    """Recompute the attention core (scores, softmax, dropout, context): drops the 5as/h term."""
    FULL = "full"
    """Keep each layer's input only; rerun the layer's forward in backward."""

    @property
    def code(self) -> int:
        """The mode's integer code in arrays of layouts (its declaration order: 0 none,
        1 selective, 2 full)."""
        return list(Checkpoint).index(self)


MODEL_LIMITS = {"num_layers": 10_000, "hidden": 2**20, "heads": 2**16, "intermediate": 2**22,
                "vocab_size": 2**24, "max_positions": 2**24, "type_vocab_size": 2**16}
"""Largest model sizes accepted (a few orders of magnitude beyond the largest published
Transformers: GPT-3 96 layers, hidden 12,288; PaLM vocab 256k); bigger is refused in one line."""


@dataclass(kw_only=True, slots=True, frozen=True)
class ModelConfig:
    """An encoder Transformer (BERT, RoBERTa or ALBERT) as its sizes.

    Raises `BertscopeError` (a ValueError) on construction when the sizes are invalid.
    """

    name: str
    """Preset or user-given name, used in reports."""
    family: Family
    """BERT (MLM + NSP heads), RoBERTa (MLM only), ALBERT (factorized embeddings, MLM + SOP)."""
    num_layers: int
    """Encoder layers L."""
    hidden: int
    """Hidden size h."""
    heads: int
    """Attention heads a; head size is h / a."""
    intermediate: int
    """Feed-forward inner size (4h in BERT)."""
    vocab_size: int
    """Vocabulary size V."""
    max_positions: int
    """Position-embedding rows (RoBERTa's 514 includes its 2-row padding offset)."""
    type_vocab_size: int = 2
    """Token-type (segment) embedding rows."""
    embedding_size: int | None = None
    """ALBERT's factorized embedding size E (None: embeddings are h wide)."""
    share_layers: bool = False
    """ALBERT's cross-layer parameter sharing: one set of layer weights used L times."""
    activation: Activation = Activation.GELU
    """Feed-forward activation."""
    position_offset: int = 0
    """Position rows unusable for tokens (RoBERTa: padding_idx + 1 = 2)."""

    def __post_init__(self) -> None:
        check_positive_ints(self, ("num_layers", "hidden", "heads", "intermediate",
                                   "vocab_size", "max_positions", "type_vocab_size"),
                            f"model {self.name!r}: ", limits=MODEL_LIMITS)
        if self.embedding_size is not None and (
            not is_positive_int(self.embedding_size) or self.embedding_size > 2**20
        ):
            raise BertscopeError(f"model {self.name!r}: embedding_size must be a positive "
                                 f"integer or None, got {self.embedding_size!r}")
        if self.hidden % self.heads:
            raise BertscopeError(f"model {self.name!r}: hidden size {self.hidden} is not "
                                 f"divisible by {self.heads} heads; pick heads that divide it")
        object.__setattr__(self, "family", parse_enum(Family, self.family, "family"))
        object.__setattr__(self, "activation",
                           parse_enum(Activation, self.activation, "activation"))
        if self.position_offset < 0 or self.position_offset >= self.max_positions:
            raise BertscopeError(f"model {self.name!r}: position_offset {self.position_offset} "
                                 f"must be in [0, max_positions)")

    @property
    def head_dim(self) -> int:
        """Size of one attention head, h / a."""
        return self.hidden // self.heads

    @property
    def emb(self) -> int:
        """Embedding width: E for ALBERT, h otherwise."""
        return self.embedding_size if self.embedding_size is not None else self.hidden

    @property
    def max_seq(self) -> int:
        """Longest sequence the position embeddings allow."""
        return self.max_positions - self.position_offset

    @property
    def has_pooler_head(self) -> bool:
        """BERT (NSP) and ALBERT (SOP) pretrain a sentence-level head on the pooled [CLS]."""
        return self.family is not Family.ROBERTA


@dataclass(kw_only=True, slots=True, frozen=True)
class RunConfig:
    """One training iteration's settings (one optimizer step)."""

    batch: int
    """Sequences per micro-batch."""
    seq: int
    """Tokens per sequence."""
    precision: Precision = Precision.FP32
    """fp32, or mixed fp16/bf16 (fp32 master weights and optimizer state)."""
    optimizer: Optimizer = Optimizer.ADAM
    """Optimizer of the update step."""
    dropout: bool = True
    """Dropout layers on (training as published) or off."""
    checkpointing: bool = False
    """Full activation checkpointing per encoder layer: only layer inputs are kept and each
    layer's forward is recomputed in backward (rows with phase `recompute`)."""
    micro_batches: int = 1
    """Gradient accumulation: micro-batches per optimizer step."""
    masked_lm_only: bool = False
    """Run the MLM head on the masked 15% of positions only (NVIDIA's BERT) instead of every
    position (Hugging Face's BertForPreTraining)."""
    attention: Attention = Attention.EAGER
    """How the attention core runs (eager kernels, a fused softmax, or one fused kernel)."""

    def __post_init__(self) -> None:
        check_positive_ints(self, ("batch", "seq", "micro_batches"),
                            limits={"batch": 2**31, "micro_batches": 2**20})
        object.__setattr__(self, "precision", parse_enum(Precision, self.precision, "precision"))
        object.__setattr__(self, "optimizer", parse_enum(Optimizer, self.optimizer, "optimizer"))
        object.__setattr__(self, "attention", parse_enum(Attention, self.attention,
                                                         "attention"))

    @property
    def tokens(self) -> int:
        """Tokens per optimizer step: batch * seq * micro_batches."""
        return self.batch * self.seq * self.micro_batches

    def check(self, model: ModelConfig) -> None:
        """Raise if this run does not fit the model (sequence longer than its positions)."""
        if self.seq > model.max_seq:
            raise BertscopeError(f"seq {self.seq} exceeds {model.name}'s {model.max_seq} "
                                 f"positions; use --seq {model.max_seq} or less")


@dataclass(kw_only=True, slots=True, frozen=True)
class Job:
    """A model and the run that trains it: the pair every op table describes, checked once
    here (the sequence must fit the model's positions), then carried typed (`OpTable.job`)."""

    model: ModelConfig
    """The model's sizes and family."""
    run: RunConfig
    """The iteration's settings."""

    def __post_init__(self) -> None:
        if not isinstance(self.model, ModelConfig) or not isinstance(self.run, RunConfig):
            raise BertscopeError(f"Job needs a ModelConfig and a RunConfig, got "
                                 f"{type(self.model).__name__} and {type(self.run).__name__}")
        self.run.check(self.model)

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """{"model": ..., "run": ...} with enums as their values (JSON-ready)."""
        return {"model": config_dict(self.model), "run": config_dict(self.run)}

    @classmethod
    def from_dict(cls, doc: Any, origin: str = "job") -> Job:
        """The job `as_dict` wrote (e.g. a saved result's meta), validated again."""
        if not isinstance(doc, dict):
            raise BertscopeError(f"{origin}: expected an object with model and run, got "
                                 f"{type(doc).__name__}")
        return cls(model=from_dict(ModelConfig, doc.get("model"), f"{origin}: model"),
                   run=from_dict(RunConfig, doc.get("run"), f"{origin}: run"))


T = TypeVar("T")


def config_dict(cfg: ModelConfig | RunConfig) -> dict[str, Any]:
    """A config's fields as a plain dict, enums as their values (JSON-ready)."""
    return {f.name: _plain(getattr(cfg, f.name)) for f in fields(cfg)}


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, StrEnum) else value


def from_dict(kind: type[T], doc: Any, origin: str) -> T:
    """A config dataclass (ModelConfig, RunConfig, an efficiency model, ...) from the dict of
    its fields (`config_dict`'s form); unknown fields refused, missing ones take their defaults
    (or fail validation if they have none)."""
    if not isinstance(doc, dict):
        raise BertscopeError(f"{origin}: expected an object, got {type(doc).__name__}")
    known = {f.name for f in fields(kind)}  # type: ignore[arg-type]
    unknown = sorted(set(doc) - known)
    if unknown:
        raise BertscopeError(f"{origin}: no field {', '.join(map(repr, unknown))}; fields: "
                             f"{', '.join(sorted(known))}")
    try:
        return kind(**doc)
    except (TypeError, BertscopeError) as e:  # a required field missing, or a bad value
        raise BertscopeError(f"{origin}: {e}") from None


def _bert(name: str, layers: int, hidden: int, heads: int) -> ModelConfig:
    return ModelConfig(name=name, family=Family.BERT, num_layers=layers, hidden=hidden,
                       heads=heads, intermediate=4 * hidden, vocab_size=30522,
                       max_positions=512)


def _roberta(name: str, layers: int, hidden: int, heads: int) -> ModelConfig:
    return ModelConfig(name=name, family=Family.ROBERTA, num_layers=layers, hidden=hidden,
                       heads=heads, intermediate=4 * hidden, vocab_size=50265,
                       max_positions=514, type_vocab_size=1, position_offset=2)


def _albert(name: str, layers: int, hidden: int, heads: int) -> ModelConfig:
    return ModelConfig(name=name, family=Family.ALBERT, num_layers=layers, hidden=hidden,
                       heads=heads, intermediate=4 * hidden, vocab_size=30000,
                       max_positions=512, embedding_size=128, share_layers=True,
                       activation=Activation.GELU_NEW)


# The published checkpoints' config.json values (google-research/bert README for the
# compact models: bert_uncased_L-{2,4,4,8}_H-{128,256,512,512}; bert-base/large-uncased;
# FacebookAI/roberta-*; albert/albert-*-v2).
PRESETS: dict[str, ModelConfig] = {
    m.name: m
    for m in (
        _bert("bert-tiny", 2, 128, 2),
        _bert("bert-mini", 4, 256, 4),
        _bert("bert-small", 4, 512, 8),
        _bert("bert-medium", 8, 512, 8),
        _bert("bert-base", 12, 768, 12),
        _bert("bert-large", 24, 1024, 16),
        _roberta("roberta-base", 12, 768, 12),
        _roberta("roberta-large", 24, 1024, 16),
        _albert("albert-base-v2", 12, 768, 12),
        _albert("albert-large-v2", 24, 1024, 16),
        _albert("albert-xlarge-v2", 24, 2048, 16),
        _albert("albert-xxlarge-v2", 12, 4096, 64),
    )
}


_HF_FAMILY = {"bert": Family.BERT, "roberta": Family.ROBERTA, "albert": Family.ALBERT}


def from_hf_config(path: str | Path) -> ModelConfig:
    """Build a ModelConfig from a Hugging Face `config.json` (a file or a folder holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    text = read_text(p, missing="give a preset name (see `bertscope models`) or a path to a "
                              "Hugging Face config.json")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise BertscopeError(f"{p}: not valid JSON ({e.msg} at line {e.lineno}); "
                             f"give a Hugging Face config.json") from None
    if not isinstance(raw, dict):
        raise BertscopeError(f"{p}: expected a JSON object, got {type(raw).__name__}")
    o = str(p)
    kind = expect(raw, "model_type", str, o)
    if kind not in _HF_FAMILY:
        raise BertscopeError(f"{p}: model_type {kind!r} is not supported; "
                             f"supported: {', '.join(_HF_FAMILY)}")
    family = _HF_FAMILY[kind]
    _refuse_unmodelled(raw, o)
    missing = [k for k in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                           "intermediate_size", "vocab_size", "max_position_embeddings")
               if k not in raw]
    if missing:
        raise BertscopeError(f"{p}: missing {', '.join(missing)}")
    if family is Family.ALBERT and expect(raw, "inner_group_num", int, o, 1) != 1:
        raise BertscopeError(f"{p}: inner_group_num {raw['inner_group_num']} is not supported "
                             f"(only 1, as in every published ALBERT)")
    groups = expect(raw, "num_hidden_groups", int, o, 1)
    if family is Family.ALBERT and groups != 1:
        raise BertscopeError(f"{p}: num_hidden_groups {groups} is not supported (only 1, "
                             f"full cross-layer sharing, as in every published ALBERT)")
    vocab = expect(raw, "vocab_size", int, o)
    pad = expect(raw, "pad_token_id", int, o, 1, nullable=True)
    if family is Family.ROBERTA and (pad is None or not 0 <= pad < vocab):
        raise BertscopeError(f"{p}: pad_token_id: RoBERTa needs a token id in [0, "
                             f"vocab_size {vocab}), got {pad!r}")
    name = expect(raw, "_name_or_path", str, o, "", nullable=True) or p.parent.name or p.stem
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


_UNMODELLED: dict[str, Any] = {"is_decoder": False, "add_cross_attention": False,
                               "position_embedding_type": "absolute"}
"""config.json keys that change the architecture, with the one value bertscope models: any
other value is refused (never silently ignored)."""


def _refuse_unmodelled(raw: dict[str, Any], origin: str) -> None:
    for key, modelled in _UNMODELLED.items():
        if key in raw and raw[key] not in (modelled, None):
            raise BertscopeError(f"{origin}: {key} = {raw[key]!r} is not modelled (only "
                                 f"{modelled!r}); remove it or use a supported config")


def get_model(name_or_path: str | Path) -> ModelConfig:
    """A preset by name, or a Hugging Face config.json by path.

    Unknown names raise with the closest preset names suggested.
    """
    key = str(name_or_path)
    if key in PRESETS:
        return PRESETS[key]
    p = Path(key)
    if p.suffix == ".json" or p.is_dir() or p.exists() or "/" in key:
        return from_hf_config(p)
    close = difflib.get_close_matches(key, list(PRESETS), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else "see `bertscope models`"
    raise BertscopeError(f"unknown model {key!r}; {hint}")


def with_changes(model: ModelConfig, **changes: Any) -> ModelConfig:
    """A copy of `model` with some sizes changed (validated again)."""
    known = {f.name for f in fields(model)}
    bad = sorted(set(changes) - known)
    if bad:
        raise BertscopeError(f"unknown model field(s) {', '.join(bad)}")
    return replace(model, **changes)


__all__ = [
    "PRESETS",
    "Activation",
    "Attention",
    "Checkpoint",
    "Family",
    "HostAllocator",
    "Job",
    "ModelConfig",
    "Optimizer",
    "Precision",
    "RunConfig",
    "config_dict",
    "from_dict",
    "from_hf_config",
    "get_model",
    "with_changes",
]
