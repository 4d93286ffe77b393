"""Model and run configuration: typed, validated on construction, presets, HF config.json loader.

Sizes follow Hugging Face's names where a user would compare (`hidden`, `heads`,
`intermediate`, `vocab_size`, `max_positions`); the presets reproduce the published
checkpoints' config.json files exactly, so parameter counts match Hugging Face's.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import IntEnum, StrEnum
from numbers import Integral
from typing import Any, TypeVar

from bertscope.errors import (
    BertscopeError,
    check_positive_ints,
    is_positive_int,
    parse_enum,
    shown,
)

# Model families and their layout properties live in `bertscope.family` (re-exported here).
from bertscope.family import Architecture, Family, MemoryFields, Positions
from bertscope.packing import Packing, check_lengths, parse_lengths, real_tokens
from bertscope.packing import sequences as micro_batch_sequences
from bertscope.recipes import Recipe, defaults, field_names


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

    `fp16` and `bf16` mean mixed precision as torch.autocast runs it (`autocast`): fp32
    parameters, gradients and optimizer state, 16-bit activations, and each linear's weight
    cast to 16 bits as it is used (its gradient cast back to fp32); `RunConfig.weight_cast`
    chooses other stacks' policies (a 16-bit model with fp32 masters, `WeightCast`). The
    memory model counts ZeRO's 16 bytes per parameter for Adam (Rajbhandari et al. 2020,
    section 3.1), which the fp32 weights, fp32 gradients and two fp32 states also add up to.
    """

    FP32 = "fp32"
    TF32 = "tf32"
    """fp32 tensors with matmuls on TF32 tensor cores (NVIDIA Ampere and newer;
    `torch.backends.cuda.matmul.allow_tf32 = True`): fp32 everywhere but the GEMM rate."""
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"  # TE-style: linear GEMMs in FP8 with cast/amax rows (analytic/fp8.py), bf16 else

    @property
    def act_bytes(self) -> int:
        """Bytes per activation / working weight / gradient element."""
        return 4 if self in (Precision.FP32, Precision.TF32) else 2

    @property
    def autocast(self) -> bool:
        """True where torch.autocast's casts are rows of the iteration (fp16, bf16): fp32
        weights cast per use in forward, their 16-bit gradients cast back in backward, fp32
        gradients into the optimizer. fp8 (Transformer Engine) casts in its own rows."""
        return self in (Precision.FP16, Precision.BF16)

    @property
    def mixed(self) -> bool:
        """True for 16-bit mixed precision (fp32 master weights kept)."""
        return self in (Precision.FP16, Precision.BF16, Precision.FP8)


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


class WeightCast(StrEnum):
    """When the 16-bit (or fp8) copies of fp32 master weights are made in mixed precision
    (`RunConfig.weight_cast`); nothing to cast in fp32 or tf32."""

    PER_MICRO_BATCH = "per_micro_batch"
    """torch.autocast: every micro-batch's forward casts each fp32 weight it uses to 16 bits
    and its backward casts the 16-bit gradient back to fp32 (the `eager` recipe; fp8: the
    weights' FP8 casts run in every micro-batch)."""
    PER_STEP = "per_step"
    """A 16-bit model with fp32 master weights (apex AMP O2): one copy kernel per optimizer
    step writes the 16-bit weights from the fp32 ones; micro-batches cast no weights and the
    gradients stay 16-bit (fp8: the FP8 weight casts run once per step, Transformer Engine's
    first-micro-batch caching)."""
    KEPT = "kept"
    """16-bit weights kept beside fp32 main parameters and fp32 main gradients
    (Megatron-Core with a precision-aware optimizer): the optimizer's update writes the
    16-bit weights itself, no cast kernel; 2 bytes per parameter more than autocast's 16
    (Megatron's 18 for bf16 parameters with fp32 gradients)."""


class HostAllocator(StrEnum):
    """How host memory is allocated while measuring on a CPU (bertscope.measure.allocator)."""

    KEEP = "keep"
    """Freed memory stays in the process (glibc tuned with mallopt): no page faults on reuse,
    as with a caching allocator."""
    SYSTEM = "system"
    """The C library's defaults, untouched."""


class Checkpoint(StrEnum):
    """Activation recomputation (Korthikanti et al. 2022): `RunConfig.checkpoint`. The analytic
    op model and the distributed model run all three; the profiler `none` and `full`."""

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


def setting(default: Any, help: str, *, flag: str | None = None, recipe: bool = False) -> Any:
    """A job field with its command-line help: `field(default=..., metadata=...)` that the
    command line (`cli.options`) and the sweep axes (`sweep.grid`) are generated from.
    `flag` names the option when it is not the field's name with dashes (`--sp`). `recipe`:
    the field's default is its recipe's (`recipes`; the field defaults to None, unset)."""
    return field(default=default, metadata={"help": help, "flag": flag, "recipe": recipe})


MODEL_LIMITS = {"num_layers": 10_000, "hidden": 2**20, "heads": 2**16, "intermediate": 2**22,
                "vocab_size": 2**24, "max_positions": 2**24, "type_vocab_size": 2**16,
                "kv_heads": 2**16, "head_size": 2**16, "decoder_layers": 10_000,
                "relative_buckets": 2**16, "image_size": 2**16, "patch_size": 2**16,
                "channels": 2**10, "mem_len": 2**24, "partial_prediction": 2**16,
                "div_val": 2**10}
"""Largest model sizes accepted (a few orders of magnitude beyond the largest published
Transformers: GPT-3 96 layers, hidden 12,288; PaLM vocab 256k); bigger is refused in one line."""


@dataclass(kw_only=True, slots=True, frozen=True)
class ModelConfig(MemoryFields):
    """A Transformer as its family and sizes (encoder, decoder or encoder-decoder); the
    Transformer-XL and XLNet fields are `MemoryFields`'.

    Raises `BertscopeError` (a ValueError) on construction when the sizes are invalid.
    """

    name: str
    """Preset or user-given name, used in reports."""
    family: Family
    """BERT (MLM + NSP heads), RoBERTa (MLM only), ALBERT (factorized embeddings, MLM + SOP)."""
    num_layers: int
    """Layers L of the (encoder or decoder) stack; T5: encoder layers."""
    hidden: int
    """Hidden size h."""
    heads: int
    """Attention (query) heads a; head size is h / a unless `head_size` says otherwise."""
    intermediate: int
    """Feed-forward inner size (4h in BERT; each of the two input projections of a gated
    feed-forward)."""
    vocab_size: int
    """Vocabulary size V: rows of the token embedding and columns of the language-model
    head. ViT has no tokens: its classifier's classes (Hugging Face `num_labels`)."""
    max_positions: int
    """Position-embedding rows (RoBERTa's 514 includes its 2-row padding offset; ViT: patches
    + 1 for the class token); for rotary and relative positions, the context trained for
    (Llama's max_position_embeddings; T5's n_positions), not enforced for relative ones."""
    type_vocab_size: int = 2
    """Token-type (segment) embedding rows (BERT, ALBERT; RoBERTa has 1; others none)."""
    embedding_size: int | None = None
    """ALBERT's factorized embedding size E (None: embeddings are h wide)."""
    share_layers: bool = False
    """ALBERT's cross-layer parameter sharing: one set of layer weights used L times."""
    activation: Activation = Activation.GELU
    """Feed-forward activation."""
    position_offset: int = 0
    """Position rows unusable for tokens (RoBERTa: padding_idx + 1 = 2)."""
    kv_heads: int | None = None
    """Key/value heads under grouped-query attention (Ainslie et al. 2023; Llama-2 70B and
    Llama-3: 8); None: one per query head."""
    head_size: int | None = None
    """Size of one attention head when it is not h / a (T5's d_kv: 128 in T5-3B and 11B)."""
    decoder_layers: int | None = None
    """T5: decoder layers (None: as many as the encoder's)."""
    tie_word_embeddings: bool = True
    """The language-model head reuses the token embedding matrix (BERT, GPT-2, T5 v1.0; not
    Llama-2 or T5 v1.1)."""
    gated_ffn: bool = False
    """Gated feed-forward: act(x W_gate) * (x W_up), then W_down (SwiGLU in Llama, gated GELU
    in T5 v1.1; Shazeer 2020)."""
    relative_buckets: int = 32
    """T5: relative-position buckets of the position bias."""
    image_size: int = 224
    """ViT: image height and width in pixels."""
    patch_size: int = 16
    """ViT: patch height and width in pixels."""
    channels: int = 3
    """ViT: image channels."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise BertscopeError(f"model name must be a string, got {shown(self.name)}")
        for key in ("share_layers", "tie_word_embeddings", "gated_ffn"):
            if not isinstance(getattr(self, key), bool):  # never a truthy string
                raise BertscopeError(f"model {shown(self.name)}: {key} must be true or false "
                                     f"(a bool), got {shown(getattr(self, key))}")
        if isinstance(self.position_offset, bool) or not isinstance(self.position_offset, int):
            raise BertscopeError(f"model {shown(self.name)}: position_offset must be an "
                                 f"integer, got {shown(self.position_offset)}")
        check_positive_ints(self, ("num_layers", "hidden", "heads", "intermediate",
                                   "vocab_size", "max_positions", "type_vocab_size",
                                   "relative_buckets", "image_size", "patch_size", "channels"),
                            f"model {self.name!r}: ", limits=MODEL_LIMITS)
        for key in ("kv_heads", "head_size", "decoder_layers"):
            v = getattr(self, key)
            if v is not None and (not is_positive_int(v) or v > MODEL_LIMITS[key]):
                raise BertscopeError(f"model {self.name!r}: {key} must be a positive integer "
                                     f"up to {MODEL_LIMITS[key]} or None, got {v!r}")
        if self.embedding_size is not None and (
            not is_positive_int(self.embedding_size) or self.embedding_size > 2**20
        ):
            raise BertscopeError(f"model {self.name!r}: embedding_size must be a positive "
                                 f"integer or None, got {self.embedding_size!r}")
        if self.head_size is None and self.hidden % self.heads:
            raise BertscopeError(f"model {self.name!r}: hidden size {self.hidden} is not "
                                 f"divisible by {self.heads} heads; pick heads that divide it")
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise BertscopeError(f"model {self.name!r}: {self.heads} query heads are not "
                                 f"divisible by {self.kv_heads} key/value heads")
        object.__setattr__(self, "family", parse_enum(Family, self.family, "family"))
        self._check_family()
        object.__setattr__(self, "activation",
                           parse_enum(Activation, self.activation, "activation"))
        self.check_memory_fields(MODEL_LIMITS)
        if self.position_offset < 0 or self.position_offset >= self.max_positions:
            raise BertscopeError(f"model {self.name!r}: position_offset {self.position_offset} "
                                 f"must be in [0, max_positions)")

    def _check_family(self) -> None:
        f, name = self.family, f"model {self.name!r}"
        if f is Family.VIT:
            if self.image_size % self.patch_size:
                raise BertscopeError(f"{name}: image_size {self.image_size} is not divisible "
                                     f"by patch_size {self.patch_size}")
            if self.max_positions != self.patches + 1:
                raise BertscopeError(f"{name}: a ViT has patches + 1 = {self.patches + 1} "
                                     f"positions, got max_positions {self.max_positions}")
        if self.decoder_layers is not None and f.architecture is not Architecture.ENCODER_DECODER:
            raise BertscopeError(f"{name}: decoder_layers applies to T5 only")
        if self.embedding_size is not None and not f.factorized_embedding:
            raise BertscopeError(f"{name}: embedding_size applies to ALBERT only")
        if self.share_layers and f is not Family.ALBERT:
            raise BertscopeError(f"{name}: share_layers applies to ALBERT only")

    @property
    def head_dim(self) -> int:
        """Size of one attention head: `head_size`, or h / a."""
        return self.head_size if self.head_size is not None else self.hidden // self.heads

    @property
    def kv_head_count(self) -> int:
        """Key/value heads: `kv_heads`, or one per query head."""
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def kv_groups(self) -> int:
        """Query heads per key/value head (1 without grouped-query attention)."""
        return self.heads // self.kv_head_count

    @property
    def decoder_layer_count(self) -> int:
        """Decoder layers of an encoder-decoder model (0 for the other architectures)."""
        if self.family.architecture is not Architecture.ENCODER_DECODER:
            return 0
        return self.decoder_layers if self.decoder_layers is not None else self.num_layers

    @property
    def stack_layers(self) -> int:
        """Layers of every stack (T5: the encoder's and the decoder's): what pipeline stages
        divide among themselves."""
        return self.num_layers + self.decoder_layer_count

    @property
    def patches(self) -> int:
        """ViT: patches per image, (image_size / patch_size)^2."""
        return (self.image_size // self.patch_size) ** 2

    @property
    def emb(self) -> int:
        """Embedding width: E for ALBERT, h otherwise."""
        return self.embedding_size if self.embedding_size is not None else self.hidden

    @property
    def max_seq(self) -> int:
        """Longest sequence the position embeddings allow."""
        return self.max_positions - self.position_offset

    @property
    def has_mlm_head(self) -> bool:
        """BERT, RoBERTa and ALBERT pretrain with a masked-LM head (the family's spec says)."""
        return self.family.mlm_head

    @property
    def has_pooler_head(self) -> bool:
        """BERT (NSP) and ALBERT (SOP) pretrain a sentence-level head on the pooled [CLS] (the
        family's spec says)."""
        return self.family.pooler_head


@dataclass(kw_only=True, slots=True, frozen=True)
class RunConfig:
    """One training iteration's settings on one device (one optimizer step). Every field is a
    command-line option of every command that takes a job and a sweep axis of the same name
    (`setting` gives its help)."""

    batch: int = setting(8, "Sequences per micro-batch.")
    """Sequences per micro-batch."""
    seq: int = setting(128, "Tokens per sequence.")
    """Tokens per sequence."""
    precision: Precision = setting(
        Precision.FP32, "fp32; tf32 (fp32 with TF32 matmuls, NVIDIA); mixed fp16/bf16 "
                        "(autocast, fp16 with loss scaling when measured); or fp8 "
                        "(Transformer Engine-style linear GEMMs).")
    """fp32, or mixed fp16/bf16 (fp32 master weights and optimizer state)."""
    optimizer: Optimizer = setting(Optimizer.ADAM, "Optimizer of the update step.")
    """Optimizer of the update step."""
    dropout: bool = setting(True, "Dropout layers on or off.")
    """Dropout layers on (training as published) or off."""
    checkpoint: Checkpoint = setting(
        Checkpoint.NONE, "Activation recomputation: none, selective (the attention core) or "
                         "full (each layer's forward rerun in backward).")
    """Activation recomputation (Korthikanti et al. 2022): `full` keeps only each layer's input
    and reruns its forward in backward; `selective` reruns the attention core only (scores,
    softmax, dropout, context), dropping its 5as/h bytes per token of saved activations; both
    add rows with phase `recompute`."""
    micro_batches: int = setting(1, "Micro-batches per optimizer step (gradient accumulation; "
                                    "pipeline micro-batches under pp > 1).")
    """Gradient accumulation: micro-batches per optimizer step (a pipeline's micro-batches)."""
    masked_lm_only: bool = setting(False, "MLM head on the 15% masked positions only "
                                          "(NVIDIA BERT).")
    """Run the MLM head on the masked 15% of positions only (NVIDIA's BERT) instead of every
    position (Hugging Face's BertForPreTraining)."""
    attention: Attention | None = setting(None, "Attention core: eager kernels, one fused "
                                                "softmax, or sdpa (one fused kernel, "
                                                "FlashAttention-style) (default: the "
                                                "recipe's).", recipe=True)
    """How the attention core runs (eager kernels, a fused softmax, or one fused kernel)."""
    decoder_seq: int | None = setting(None, "T5: target tokens per sequence, the decoder's "
                                            "length (default: --seq).")
    """Encoder-decoder models (T5): target tokens per sequence, the decoder's length (None:
    `seq`). T5's span-corruption pretraining used 512 input and 114 target tokens (Raffel et
    al. 2020, section 3.1.4 and its released gin configs)."""
    fusion: bool | None = setting(None, "Fuse chains of memory-bound ops and the optimizer "
                                        "step into single kernels (perf.kernel_fusion) "
                                        "(default: the recipe's).", recipe=True)
    """Chains of memory-bound ops (bias-GELU, bias-dropout-add-layernorm, ...) and the
    optimizer's per-tensor ops each run as one kernel, as fused training stacks do: the op
    table keeps its rows, the prediction fuses them (`perf.kernel_fusion.fuse`)."""
    chain_fusion: bool | None = setting(
        None, "With --fusion, fuse each chain of memory-bound ops too, as a fusing compiler "
              "does; --no-chain-fusion: the optimizer step only (default: the recipe's).",
        recipe=True)
    """Under `fusion`, whether each activation chain (scale-mask-softmax-dropout, dropout-add-
    layernorm, ...) is one kernel; False: only the optimizer step is (`perf.kernel_fusion`)."""
    recipe: Recipe = setting(Recipe.EAGER, "Training recipe whose defaults the job takes "
                                           "(data/recipes/NAME.toml); an option given "
                                           "explicitly overrides it.")
    """The training stack (`recipes.Recipe`) whose defaults fill the run fields left unset
    (None) and, where they apply, the layout's (`job.Job.build`)."""
    weight_cast: WeightCast | None = setting(
        None, "Mixed precision: when 16-bit weights are made from the fp32 masters: "
              "per_micro_batch (autocast), per_step (apex O2) or kept (beside fp32 main "
              "params, Megatron) (default: the recipe's).", recipe=True)
    """When the 16-bit (or fp8) weight copies are made (`WeightCast`); no effect in fp32."""
    fused_accumulation: bool | None = setting(
        None, "Gradient accumulation fused into the weight-gradient GEMM (fp32 main "
              "gradients; Megatron's gradient_accumulation_fusion) (default: the "
              "recipe's).", recipe=True)
    """Each linear's weight-gradient GEMM adds into an fp32 main gradient (reads and writes
    it) instead of writing a gradient a separate kernel adds up (Megatron-LM's
    gradient_accumulation_fusion)."""
    vocab_multiple: int | None = setting(
        None, "Vocabulary padded to a multiple of this so the embedding and head GEMMs are "
              "16-byte aligned (NVIDIA's BERT: 8, Megatron: 128); 1 keeps the model's own "
              "(default: the recipe's).", recipe=True)
    """The embedding and head are built with the vocabulary rounded up to a multiple of this
    (`analytic.families.model_blocks`): rows nobody looks up, GEMMs the tensor cores run at
    full width (`perf.gpu_gemm.alignment`)."""
    vocab_multiple_times_tp: bool | None = setting(
        None, "Pad the vocabulary to vocab_multiple x the tensor-parallel size (Megatron-LM's "
              "make_vocab_size_divisible_by x tp; default: the recipe's).", recipe=True)
    """With tensor-parallel size t, pad to `vocab_multiple` x t as Megatron-LM's
    `_vocab_size_with_padding` does (`analytic.families.vocab_multiple`)."""
    packing: Packing = setting(
        Packing.NONE, "How real sequence lengths (--seq-lengths) fill the batch x seq slots: "
                      "none (padded to --seq; only tokens/s counts real tokens), unpadded "
                      "(padding removed, varlen attention: flash_attn_varlen_func) or packed "
                      "(--seq-lengths is one row's sequences, block-diagonal attention).")
    """How the sequences fill the `batch x seq` slots (`packing.Packing`): padded, unpadded
    (variable-length kernels: token-wise work on the real tokens, attention sum L^2) or
    packed (rows of `seq` slots holding several sequences, block-diagonal attention; Krell,
    Kosec et al. 2021, arXiv:2107.02027)."""
    seq_lengths: str = setting(
        "", "Real sequence lengths joined by +, each L or LxN (N sequences of L tokens): "
            "\"64+128+320\". packed: one row's sequences (sum <= --seq); otherwise the "
            "lengths each sequence is drawn from, equally likely. Empty: every sequence "
            "fills --seq.")
    """Real sequence lengths (`packing.parse_lengths`): under `packed` one row's sequences
    (every row alike, sum <= seq); otherwise the distribution each sequence's length is drawn
    from, each listed length equally likely ("512x3+128": three in four sequences are 512
    tokens). Empty: every sequence fills `seq` (padded `batch x seq`, the default)."""

    def __post_init__(self) -> None:
        for name in ("batch", "seq", "micro_batches", "decoder_seq"):  # numpy ints: ints
            value = getattr(self, name)
            if isinstance(value, Integral) and not isinstance(value, bool):
                object.__setattr__(self, name, int(value))
        check_positive_ints(self, ("batch", "seq", "micro_batches"),
                            limits={"batch": 2**31, "micro_batches": 2**20})
        if self.decoder_seq is not None and (not is_positive_int(self.decoder_seq)
                                             or self.decoder_seq > 2**31):
            raise BertscopeError(f"decoder_seq must be a positive integer or None, got "
                                 f"{shown(self.decoder_seq)}")
        object.__setattr__(self, "precision", parse_enum(Precision, self.precision, "precision"))
        object.__setattr__(self, "recipe", parse_enum(Recipe, self.recipe, "recipe"))
        for name, value in recipe_run(self.recipe).items():  # unset fields: the recipe's
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        for name, enum in (("weight_cast", WeightCast), ("optimizer", Optimizer),
                           ("attention", Attention), ("checkpoint", Checkpoint)):
            object.__setattr__(self, name, parse_enum(enum, getattr(self, name), name))
        for name in ("dropout", "masked_lm_only", "fusion", "chain_fusion",
                     "fused_accumulation", "vocab_multiple_times_tp"):
            if not isinstance(getattr(self, name), bool):  # never a truthy string
                raise BertscopeError(f"{name} must be true or false (a bool), got "
                                     f"{shown(getattr(self, name))}")
        if not is_positive_int(self.vocab_multiple) or self.vocab_multiple > 2**16:
            raise BertscopeError(f"vocab_multiple must be a whole number from 1 to 65536, got "
                                 f"{shown(self.vocab_multiple)}")
        object.__setattr__(self, "packing", parse_enum(Packing, self.packing, "packing"))
        parse_lengths(self.seq_lengths)  # a bad spec refused in one line
        check_lengths(self.seq_lengths, self.seq, self.packing)

    @property
    def tokens(self) -> int:
        """Real tokens per optimizer step: batch * seq * micro_batches, or with `seq_lengths`
        the sequences' real lengths (`packing.real_tokens`: a micro-batch drawing from them
        unevenly counts their expectation, rounded), padding never counted."""
        return real_tokens(self) * self.micro_batches

    @property
    def sequences(self) -> int:
        """Sequences per optimizer step: batch * micro_batches, or under `packed` the
        sequences of every row (`packing.sequences`)."""
        return micro_batch_sequences(self) * self.micro_batches

    @property
    def target_seq(self) -> int:
        """The decoder's tokens per sequence of an encoder-decoder run (decoder_seq, or seq)."""
        return self.decoder_seq if self.decoder_seq is not None else self.seq

    def check(self, model: ModelConfig) -> None:
        """Raise if this run does not fit the model (sequence longer than its positions, a
        ViT's sequence other than its patches + 1, a decoder length without a decoder)."""
        fam = model.family
        if fam is Family.VIT and self.seq != model.max_seq:
            raise BertscopeError(f"{model.name} sees {model.patches} patches + a class token "
                                 f"per {model.image_size}px image; use --seq {model.max_seq}")
        if fam.positions is not Positions.RELATIVE and self.seq > model.max_seq:
            raise BertscopeError(f"seq {self.seq} exceeds {model.name}'s {model.max_seq} "
                                 f"positions; use --seq {model.max_seq} or less")
        if self.masked_lm_only and not model.has_mlm_head:
            raise BertscopeError(f"masked_lm_only applies to models with a masked-LM head "
                                 f"(BERT, RoBERTa, ALBERT), not {model.name}; leave it out")
        if self.decoder_seq is not None and fam.architecture is not Architecture.ENCODER_DECODER:
            raise BertscopeError(f"decoder_seq applies to encoder-decoder models (T5), not "
                                 f"{model.name}; leave it out")
        if fam is Family.XLNET and self.seq < model.partial_prediction:  # seq // K targets: 0
            raise BertscopeError(f"{model.name}: no token to predict; raise --seq to K or more")
        padded = fam in (Family.VIT, Family.XLNET, Family.TRANSFORMER_XL)  # or T5: no lengths
        if parse_lengths(self.seq_lengths) and (padded or model.decoder_layer_count):
            raise BertscopeError(f"seq_lengths applies to encoder and decoder-only language "
                                 f"models, not {model.name} (not modelled unpadded); leave it out")


def recipe_fields() -> tuple[str, ...]:
    """The run fields a recipe sets (declared `setting(..., recipe=True)`)."""
    return field_names(RunConfig)


def recipe_run(recipe: Recipe) -> dict[str, Any]:
    """The [run] defaults of `recipe`'s file, checked as `RunConfig` checks each field."""
    return defaults(recipe, RunConfig, "run")


T = TypeVar("T")


def config_dict(cfg: Any) -> dict[str, Any]:
    """A config's fields as a plain dict, enums as their values (JSON-ready)."""
    return {f.name: _plain(getattr(cfg, f.name)) for f in fields(cfg)}


def _plain(value: Any) -> Any:
    if isinstance(value, StrEnum):
        return value.value
    return int(value) if isinstance(value, IntEnum) else value


def from_dict(kind: type[T], doc: Any, origin: str) -> T:
    """A config dataclass (ModelConfig, RunConfig, an efficiency model, ...) from the dict of
    its fields (`config_dict`'s form); unknown fields refused, missing ones take their defaults
    (or fail validation if they have none)."""
    if not isinstance(doc, dict):
        raise BertscopeError(f"{origin}: expected an object, got {type(doc).__name__}")
    known = [f.name for f in fields(kind)]  # type: ignore[arg-type]
    unknown = [k for k in doc if k not in known]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), known, n=1, cutoff=0.6)
        # the closest field when there is one; the whole list (long) only when there is not
        hint = (f"; did you mean {close[0]!r}?" if close
                else f"; fields: {', '.join(sorted(known))}")
        raise BertscopeError(f"{origin}: no field {', '.join(map(shown, unknown[:3]))}{hint}")
    try:
        return kind(**doc)
    except (TypeError, BertscopeError) as e:  # a required field missing, or a bad value
        raise BertscopeError(f"{origin}: {e}") from None


def as_run(run: RunConfig | Mapping[str, Any] | None, origin: str = "run") -> RunConfig:
    """A public function's run argument as a `RunConfig`: one as is, a mapping of its fields
    (`{"batch": 8, "checkpoint": "full"}`: unknown names refused with the closest field
    named), or None for the defaults; anything else is refused in one line."""
    if run is None:
        return RunConfig()
    if isinstance(run, RunConfig):
        return run
    if isinstance(run, Mapping):
        return from_dict(RunConfig, dict(run), origin)
    raise BertscopeError(f"{origin}: expected a RunConfig or a dict of its fields, got "
                         f"{type(run).__name__} {shown(run)}")


__all__ = [
    "Activation",
    "Architecture",
    "Attention",
    "Checkpoint",
    "Family",
    "HostAllocator",
    "ModelConfig",
    "Optimizer",
    "Packing",
    "Positions",
    "Precision",
    "Recipe",
    "RunConfig",
    "WeightCast",
    "as_run",
    "config_dict",
    "from_dict",
    "recipe_fields",
    "recipe_run",
    "setting",
]
