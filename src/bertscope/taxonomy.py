"""The taxonomy every producer of op tables shares: phases, sublayers, categories, roles.

All three are `StrEnum`s, so a DataFrame column of them compares equal to plain strings
(`df.category == "gemm"`) and exports as text, while code names them as enum members.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np

from bertscope.bounded import loads_toml
from bertscope.errors import BertscopeError, expect, parse_enum
from bertscope.io import read_text
from bertscope.lazyre import Regex


class Phase(StrEnum):
    """When in the iteration an op runs."""

    FORWARD = "forward"
    BACKWARD_DATA = "backward_data"
    """Gradient with respect to activations (inputs)."""
    BACKWARD_WEIGHT = "backward_weight"
    """Gradient with respect to parameters."""
    BACKWARD = "backward"
    """Backward, where a producer cannot tell data- from weight-gradient work."""
    RECOMPUTE = "recompute"
    """Forward work rerun in backward by activation checkpointing."""
    OPTIMIZER = "optimizer"
    COMMUNICATION = "communication"

    @property
    def is_backward(self) -> bool:
        """True for any backward phase."""
        return self in (Phase.BACKWARD, Phase.BACKWARD_DATA, Phase.BACKWARD_WEIGHT)

    @property
    def family(self) -> PhaseFamily:
        """The coarse phase: recompute is forward work run again (same kernels, same
        shapes), so it belongs to the forward family; every backward phase to backward."""
        return _PHASE_FAMILY[self]


class PhaseFamily(StrEnum):
    """Phases as the efficiency and fusion models group them (`Phase.family`)."""

    FORWARD = "forward"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"
    COMMUNICATION = "communication"


_PHASE_FAMILY = {
    Phase.FORWARD: PhaseFamily.FORWARD,
    Phase.RECOMPUTE: PhaseFamily.FORWARD,
    Phase.BACKWARD: PhaseFamily.BACKWARD,
    Phase.BACKWARD_DATA: PhaseFamily.BACKWARD,
    Phase.BACKWARD_WEIGHT: PhaseFamily.BACKWARD,
    Phase.OPTIMIZER: PhaseFamily.OPTIMIZER,
    Phase.COMMUNICATION: PhaseFamily.COMMUNICATION,
}


class SublayerGroup(StrEnum):
    """Coarse sublayers, as the paper's breakdowns group them."""

    EMBEDDING = "embedding"
    ATTENTION_LINEAR = "attention linear"
    ATTENTION_CORE = "attention core"
    FEED_FORWARD = "feed-forward"
    ADD_NORM = "add & norm"
    HEADS = "pretraining heads"
    LOSS = "loss"
    OPTIMIZER = "optimizer"
    OTHER = "other"


class Sublayer(StrEnum):
    """Where in the model an op belongs."""

    EMBEDDING = "embedding"
    QKV = "qkv"
    ATTN_SCORE = "attn_score"
    ATTN_SOFTMAX = "attn_softmax"
    ATTN_CONTEXT = "attn_context"
    ROTARY = "rotary"
    """Rotary position embedding applied to queries and keys (Su et al. 2021; Llama)."""
    REL_POS_BIAS = "rel_pos_bias"
    """T5's relative position bias: a bucketed (heads x s x s) bias added to the scores."""
    # Transformer-XL / XLNet
    REL_POS = "rel_pos"
    """Relative positional encodings (Transformer-XL, Dai et al. 2019; XLNet): the sinusoid
    table of the relative distances, its projection W_r, the position scores (with the r_r
    bias) and the relative shift that aligns them with the content scores."""
    MEMORY = "memory"
    """Segment-level recurrence (Transformer-XL, XLNet): the previous segment's cached hidden
    states concatenated before the keys and values (no gradient through them) and the copy
    that caches this segment's for the next."""
    QUERY_STREAM = "query_stream"
    """XLNet's query stream attention beyond what it shares with the content stream: the
    target-mapping products and its content and segment scores, softmax and context (its
    projections, position terms, norms and feed-forward are the shared sublayers')."""
    ATTN_FUSED = "attn_fused"
    """A fused attention kernel: scores, softmax and context in one (SDPA, FlashAttention).
    (Not `attn_core`: that scope tag marks a whole attention module whose ops the trace
    attribution splits into score, softmax and context.)"""
    ATTN_OUTPUT = "attn_output"
    ATTN_ADD_NORM = "attn_add_norm"
    CROSS_QKV = "cross_qkv"
    """Encoder-decoder (T5) cross-attention: the query projection of the decoder state and
    the key/value projections of the encoder output."""
    CROSS_CORE = "cross_core"
    """Cross-attention scores, softmax and context."""
    CROSS_OUTPUT = "cross_output"
    CROSS_ADD_NORM = "cross_add_norm"
    FFN_GATE = "ffn_gate"
    """The gate projection of a gated feed-forward (SwiGLU in Llama, gated GELU in T5 v1.1);
    the gating product is in `ffn_act`."""
    FFN1 = "ffn1"
    FFN_ACT = "ffn_act"
    FFN2 = "ffn2"
    FFN_ADD_NORM = "ffn_add_norm"
    PATCH_EMBED = "patch_embed"
    """ViT's patch embedding (a p x p, stride-p convolution: a GEMM over flattened patches)
    and its class token."""
    FINAL_NORM = "final_norm"
    """The normalization after the last layer of a pre-norm stack (GPT-2, Llama, T5, ViT)."""
    MLM_HEAD = "mlm_head"
    NSP_HEAD = "nsp_head"
    LM_HEAD = "lm_head"
    """A causal or sequence-to-sequence language-model head (GPT, Llama, T5): hidden to
    vocabulary logits."""
    CLS_HEAD = "cls_head"
    """An image classifier on the class token (ViT)."""
    LOSS = "loss"
    OPTIMIZER = "optimizer"
    OTHER = "other"

    @property
    def group(self) -> SublayerGroup:
        """The coarse group this sublayer belongs to."""
        return _GROUP[self]


_GROUP = {
    Sublayer.EMBEDDING: SublayerGroup.EMBEDDING,
    Sublayer.QKV: SublayerGroup.ATTENTION_LINEAR,
    Sublayer.ATTN_OUTPUT: SublayerGroup.ATTENTION_LINEAR,
    Sublayer.ATTN_SCORE: SublayerGroup.ATTENTION_CORE,
    Sublayer.ATTN_SOFTMAX: SublayerGroup.ATTENTION_CORE,
    Sublayer.ATTN_CONTEXT: SublayerGroup.ATTENTION_CORE,
    Sublayer.ATTN_FUSED: SublayerGroup.ATTENTION_CORE,
    Sublayer.ROTARY: SublayerGroup.ATTENTION_CORE,
    Sublayer.REL_POS_BIAS: SublayerGroup.ATTENTION_CORE,
    Sublayer.REL_POS: SublayerGroup.ATTENTION_CORE,
    Sublayer.MEMORY: SublayerGroup.ATTENTION_LINEAR,
    Sublayer.QUERY_STREAM: SublayerGroup.ATTENTION_CORE,
    Sublayer.CROSS_QKV: SublayerGroup.ATTENTION_LINEAR,
    Sublayer.CROSS_OUTPUT: SublayerGroup.ATTENTION_LINEAR,
    Sublayer.CROSS_CORE: SublayerGroup.ATTENTION_CORE,
    Sublayer.CROSS_ADD_NORM: SublayerGroup.ADD_NORM,
    Sublayer.FFN_GATE: SublayerGroup.FEED_FORWARD,
    Sublayer.PATCH_EMBED: SublayerGroup.EMBEDDING,
    Sublayer.FINAL_NORM: SublayerGroup.ADD_NORM,
    Sublayer.LM_HEAD: SublayerGroup.HEADS,
    Sublayer.CLS_HEAD: SublayerGroup.HEADS,
    Sublayer.FFN1: SublayerGroup.FEED_FORWARD,
    Sublayer.FFN_ACT: SublayerGroup.FEED_FORWARD,
    Sublayer.FFN2: SublayerGroup.FEED_FORWARD,
    Sublayer.ATTN_ADD_NORM: SublayerGroup.ADD_NORM,
    Sublayer.FFN_ADD_NORM: SublayerGroup.ADD_NORM,
    Sublayer.MLM_HEAD: SublayerGroup.HEADS,
    Sublayer.NSP_HEAD: SublayerGroup.HEADS,
    Sublayer.LOSS: SublayerGroup.LOSS,
    Sublayer.OPTIMIZER: SublayerGroup.OPTIMIZER,
    Sublayer.OTHER: SublayerGroup.OTHER,
}


class Category(StrEnum):
    """What kind of work an op is; says whether it is compute- or memory-bound by nature."""

    GEMM = "gemm"
    BATCHED_GEMM = "batched_gemm"
    SOFTMAX = "softmax"
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"
    """Root-mean-square normalization (Zhang & Sennrich 2019; Llama, T5's T5LayerNorm)."""
    BATCHNORM = "batchnorm"
    """Batch, group and instance normalization (CNNs in traces)."""
    CONVOLUTION = "convolution"
    """A convolution kernel (cuDNN, CUTLASS) as a trace records it. Compute-bound by nature,
    but its rows carry no GEMM shape: an analytic producer writes a convolution that is a
    GEMM (ViT's stride-p patch embedding) as a GEMM row."""
    DROPOUT = "dropout"
    ACTIVATION = "activation"
    ELEMENTWISE = "elementwise"
    EMBEDDING = "embedding"
    REDUCTION = "reduction"
    LOSS = "loss"
    OPTIMIZER = "optimizer"
    COMMUNICATION = "communication"
    DATA_MOVEMENT = "data_movement"
    OTHER = "other"

    @property
    def is_gemm(self) -> bool:
        """GEMM or batched GEMM: compute-bound by nature. The one GEMM test; arrays of
        categories use `gemm_mask`."""
        return self in _GEMMS

    @property
    def is_normalization(self) -> bool:
        """Layer-, RMS- or batch-norm: what fusion and the study group as normalization."""
        return self in NORMALIZATIONS


_GEMMS = frozenset({Category.GEMM, Category.BATCHED_GEMM})
NORMALIZATIONS = frozenset({Category.LAYERNORM, Category.RMSNORM, Category.BATCHNORM})
"""The normalization categories (`Category.is_normalization`)."""


def gemm_mask(categories: Any) -> np.ndarray:
    """Per row, `Category.is_gemm` of a column of categories (enum members or their string
    values, as a table read back from a file holds them)."""
    return np.isin(np.asarray(categories, dtype=object), [c.value for c in _GEMMS])


def phase_families(phases: Any) -> np.ndarray:
    """Per row, `Phase.family` of a column of phases (members or strings), as strings; the
    result has the column's shape (a sweep passes one phase per row as a column vector)."""
    arr = np.asarray(phases, dtype=object)
    return np.asarray([_PHASE_FAMILY[Phase(p)].value for p in arr.ravel()],
                      dtype=object).reshape(arr.shape)


class TensorSplit(StrEnum):
    """Role of a row under Megatron-style tensor parallelism (Shoeybi et al. 2019, section 3):
    how t ranks divide its work. The producer that knows the model labels it, so consumers
    (the distributed model) never read op names."""

    COLUMN = "column"
    """A GEMM whose weight is split by output features (Q, K, V, FFN1, MLM decoder): forward
    splits N, data gradient K, weight gradient M."""
    ROW = "row"
    """A GEMM whose weight is split by input features (attention output, FFN2): forward
    splits K, both gradients N; its output is summed over ranks."""
    SPLIT = "split"
    """Work between a column- and a row-parallel GEMM, divided with them along heads, FFN
    width or vocabulary (attention core, activation, vocabulary-parallel loss; batched GEMMs
    split their batch of heads)."""
    REPLICATED = "replicated"
    """Every rank does it whole (layernorm, residual adds, hidden dropout, biases of
    row-parallel GEMMs); sequence parallelism divides it inside the layer stack. The default
    for rows no producer labelled."""


class Issuer(StrEnum):
    """Who issues a row's op: the framework's own code (a module's forward, the autograd
    engine's nodes, the optimizer), or mixed precision from inside another op. A host model
    counts framework work between ops per launch of the first kind only."""

    FRAMEWORK = "framework"
    """Issued by framework code between ops (Python, module hooks, the autograd engine).
    The default for rows no producer labelled."""
    AUTOCAST = "autocast"
    """A cast mixed precision inserts, with no framework code of its own around it:
    torch.autocast's casts, issued by the dispatcher inside the op that needs them
    (aten::linear casting its fp32 weight, bias and input to 16 bits), and in backward the
    casts of gradients back to the dtype of what they are the gradient of (a cast weight's,
    a loss upcast to fp32, a 16-bit branch added to an fp32 residual)."""


class PipelineStage(StrEnum):
    """Role of a row under pipeline parallelism: which part of the model's stages holds it."""

    FIRST = "first"
    """The embeddings, on the first stage."""
    STACK = "stack"
    """The repeated layers, divided among the stages. The default for rows no producer
    labelled."""
    LAST = "last"
    """Heads, loss and the tied embedding's gradient sum, on the last stage."""


@dataclass(frozen=True, slots=True)
class Pattern:
    """One row of the name -> category table."""

    regex: Regex
    category: Category
    note: str = ""
    phase: Phase | None = None
    """For kernels of an op that computes both gradients (a convolution's backward): the
    backward phase a kernel matching this row computes (`wgrad` kernels the weight
    gradient); applied only when the launching op runs in a backward phase."""


def _parse_patterns(text: str, origin: str, *, check: bool = True) -> tuple[Pattern, ...]:
    doc = loads_toml(text, origin)
    rows = doc.get("pattern")
    if not isinstance(rows, list) or not rows:
        raise BertscopeError(f"{origin}: expected [[pattern]] tables with regex and category")
    out = []
    for i, row in enumerate(rows, 1):
        where = f"{origin}: pattern {i}"
        if not isinstance(row, dict):
            raise BertscopeError(f"{where}: expected a table of regex and category, got "
                                 f"{type(row).__name__}")
        note = expect(row, "note", str, where, "")
        phase_name = expect(row, "phase", str, where, "")
        pattern, name = expect(row, "regex", str, where), expect(row, "category", str, where)
        try:
            regex = Regex(pattern, check=check)
            category = Category(name)
        except re.error as e:
            raise BertscopeError(f"{origin}: pattern {i}: bad regex ({e})") from None
        except ValueError:
            cats = ", ".join(c.value for c in Category)
            raise BertscopeError(f"{origin}: pattern {i}: unknown category "
                                 f"{row['category']!r}; use one of {cats}") from None
        phase = parse_enum(Phase, phase_name, "phase", where) if phase_name else None
        if phase is not None and not phase.is_backward:
            raise BertscopeError(f"{where}: phase: expected a backward phase, got {phase}")
        out.append(Pattern(regex, category, note, phase))
    return tuple(out)


@cache
def builtin_patterns() -> tuple[Pattern, ...]:
    """The built-in ordered pattern table (`bertscope/data/patterns.toml`)."""
    text = (files("bertscope") / "data" / "patterns.toml").read_text(encoding="utf-8")
    return _parse_patterns(text, "patterns.toml", check=False)  # compiled where reached


def load_patterns(path: str | Path) -> tuple[Pattern, ...]:
    """A user pattern file (same shape as the built-in one)."""
    p = Path(path)
    text = read_text(p, missing="give the path of a TOML file of [[pattern]] rows")
    return _parse_patterns(text, str(p))


class Classifier:
    """Maps op/kernel names to categories by the ordered pattern table (first match wins),
    with user patterns tried before the built-in ones. Results are cached per name."""

    def __init__(self, extra: Sequence[Pattern] = ()) -> None:
        self.extra = tuple(extra)
        self.patterns = (*self.extra, *builtin_patterns())
        self._cache: dict[str, Category] = {}
        self._match: dict[str, Pattern | None] = {}

    def __call__(self, name: str) -> Category:
        """The category of `name`; `Category.OTHER` when no pattern matches."""
        hit = self._cache.get(name)
        if hit is None:
            row = self.match(name)
            hit = self._cache[name] = row.category if row is not None else Category.OTHER
        return hit

    def match(self, name: str) -> Pattern | None:
        """The row that decides `name`'s category: the user's patterns first, then a
        torch.compile kernel by the ops it fuses (`fused_kernel`), then the built-in table;
        None when nothing matches (an unknown name)."""
        if name in self._match:
            return self._match[name]
        hit = next((p for p in self.extra if p.regex.search(name)), None)
        if hit is None:
            hit = fused_kernel(name)
        if hit is None:
            hit = next((p for p in self.patterns[len(self.extra):] if p.regex.search(name)),
                       None)
        self._match[name] = hit
        return hit


# --- torch.compile (Inductor) kernels: classified by the ops they fuse ---------------------

_INDUCTOR = re.compile(r"^triton_(poi|red|per|for|tem)_(?:fused_)?(\w*?)_?(\d+)$")
"""Inductor's kernel names: triton_<kind>_fused_<op>_<op>..._<n>, or triton_<kind>_<n> without
descriptive names (kind: poi pointwise, red looped reduction, per persistent reduction, for
foreach, tem template)."""
_FUSED_RANK: tuple[Category, ...] = (
    Category.BATCHED_GEMM, Category.GEMM, Category.CONVOLUTION, Category.LOSS,
    Category.SOFTMAX, Category.LAYERNORM, Category.RMSNORM, Category.BATCHNORM,
    Category.DROPOUT, Category.ACTIVATION, Category.EMBEDDING, Category.OPTIMIZER,
    Category.REDUCTION, Category.ELEMENTWISE, Category.DATA_MOVEMENT)
"""Which fused op names a kernel's category: the first of these any of its ops has (a
layernorm fused with its residual add is layernorm work)."""
_KIND_DEFAULT = {"poi": Category.ELEMENTWISE, "red": Category.REDUCTION,
                 "per": Category.REDUCTION, "for": Category.OPTIMIZER, "tem": Category.GEMM}
"""An Inductor kernel whose ops are all unknown: its kind's category."""


@cache
def aten_category(op: str) -> Category:
    """The category the ATen rows of the built-in table (those anchored at `^aten::`) give
    `aten::<op>`; `Category.OTHER` when none matches."""
    name = "aten::" + op
    return next((p.category for p in builtin_patterns()
                 if p.regex.pattern.startswith("^aten::") and p.regex.search(name)),
                Category.OTHER)


def fused_ops(name: str) -> tuple[str, ...]:
    """The ATen ops an Inductor kernel name says it fuses, in order
    (`triton_per_fused_add_native_layer_norm_5` -> add, native_layer_norm): the words after
    `fused_` split greedily into the longest runs that name an op the ATen rows of the
    pattern table know (`aten_category`); words no run covers are kept one by one. () for a
    name that is not an Inductor kernel."""
    m = _INDUCTOR.match(name)
    if m is None:
        return ()
    words: list[str] = []
    for w in m.group(2).split("_"):  # an empty word: the next one had a leading underscore
        if words and words[-1] == "_":
            words[-1] += w
        else:
            words.append(w or "_")
    out: list[str] = []
    i = 0
    while i < len(words):
        for j in range(len(words), i, -1):  # the longest run of words that names an op
            run = "_".join(words[i:j])
            if aten_category(run) is not Category.OTHER:
                out.append(run)
                i = j
                break
        else:
            if words[i] != "_":
                out.append(words[i])
            i += 1
    return tuple(out)


def fused_kernel(name: str) -> Pattern | None:
    """The row deciding an Inductor kernel's category from its fused ops (see
    `_FUSED_RANK`), its note listing them; None for other names."""
    m = _INDUCTOR.match(name)
    if m is None:
        return None
    ops = fused_ops(name)
    cats = {aten_category(op) for op in ops}
    cat = next((c for c in _FUSED_RANK if c in cats), _KIND_DEFAULT[m.group(1)])
    if m.group(1) == "tem" and not cat.is_gemm:
        cat = Category.GEMM  # a GEMM template with a fused epilogue
    return Pattern(Regex(re.escape(name)), cat, "fuses: " + ", ".join(ops))


__all__ = ["NORMALIZATIONS", "Category", "Classifier", "Pattern", "Phase", "PhaseFamily",
           "PipelineStage", "Regex", "Sublayer", "SublayerGroup", "TensorSplit", "aten_category",
           "builtin_patterns", "fused_kernel", "fused_ops", "gemm_mask", "load_patterns",
           "phase_families"]
