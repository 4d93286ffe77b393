"""Transformer-XL (Dai et al. 2019): a post-norm causal decoder with segment-level recurrence
(each layer attends over `mem_len` cached hidden states of the previous segment, without
gradients through them), relative positional encodings (a sinusoid table of the key
positions projected in every layer, the r_w / r_r biases and the relative shift), ReLU
feed-forward layers and an adaptive input and adaptive softmax over large vocabularies
(Baevski & Auli 2019; Grave et al. 2017).

The layout is the authors' PyTorch code (github.com/kimiyoung/transformer-xl,
`pytorch/mem_transformer.py`: `RelPartialLearnableDecoderLayer`, `AdaptiveEmbedding`,
`ProjectedAdaptiveLogSoftmax`), post-norm as its default `pre_lnorm=False`. Hugging Face
transformers 5 no longer has the model, so there is no `--hf` and no config.json reader.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from numbers import Integral
from typing import Any

from bertscope.errors import BertscopeError, shown
from bertscope.families.spec import Architecture, FamilySpec, Positions

SPEC = FamilySpec(
    name="transformer-xl",
    model_types=(),
    architecture=Architecture.DECODER,
    pre_norm=False,
    rms_norm=False,
    positions=Positions.RELATIVE,
    bias=True,
    fused_qkv=True,
    mlm_head=False,
    pooler_head=False,
    dropout=True,
    factorized_embedding=False,
    producer="bertscope.analytic.transformer_xl:txl_blocks",
    layout="bertscope.analytic.transformer_xl:txl_layout",
    config_reader=None,
    reference="bertscope.measure.models.transformer_xl:build_txl",
    reference_layer="bertscope.measure.models.transformer_xl:TxlLayer",
    reference_sublayer="bertscope.measure.models.transformer_xl:txl_sublayer",
    batch="bertscope.measure.models.transformer_xl:txl_inputs",
    hf_class=None,
    hf_config=None,
    hf_patterns=None,
    hf_layers=None,
)
"""Transformer-XL's spec."""


@dataclass(kw_only=True, slots=True, frozen=True)
class MemoryFields:
    """`ModelConfig`'s Transformer-XL and XLNet fields (its base class): the memory, the
    adaptive input and softmax, XLNet's partial prediction; checked by `check_memory_fields`."""

    mem_len: int = 0
    """States of the previous segment each layer caches and attends over with the current
    segment's, without gradients through them (Dai et al. 2019, section 3.2; XLNet too);
    0: none."""
    cutoffs: tuple[int, ...] = ()
    """Vocabulary cutoffs of the adaptive input and softmax (Baevski & Auli 2019; Grave et
    al. 2017): ids below cutoffs[0] form the head cluster, each next range a tail cluster
    (empty: one full softmax)."""
    div_val: int = 1
    """Cluster i's embedding width is h / div_val^i (1: one h-wide table)."""
    cluster_shares: tuple[float, ...] = ()
    """The share of tokens (inputs and targets alike) in each tail cluster, one per cutoff;
    a tail cluster's softmax runs on its share only (the presets assume Zipf's law,
    `presets.zipf_shares`)."""
    partial_prediction: int = 6
    """XLNet's K: seq // K tokens predicted per sequence (6: Yang et al. 2019, App. A.3)."""
    tie_projs: bool = True
    """The tail clusters' softmax projections are the adaptive input's (WikiText-103's
    `tie_projs`), not their own (One Billion Word's)."""

    @property
    def cluster_ends(self) -> tuple[int, ...]:
        """The adaptive clusters' bounds: 0, the cutoffs, the vocabulary."""
        return (0, *self.cutoffs, self.vocab_size)  # type: ignore[attr-defined]

    def check_memory_fields(self, limits: dict[str, int]) -> None:
        """Raise `BertscopeError` unless the fields are whole and in range (lists read from
        JSON become tuples) and set on Transformer-XL only (mem_len on XLNet too;
        `ModelConfig.__post_init__`)."""
        m: Any = self
        name = f"model {m.name!r}"
        for key in ("cutoffs", "cluster_shares"):
            v = getattr(m, key)
            if not isinstance(v, list | tuple):
                raise BertscopeError(f"{name}: {key} must be a list, got {shown(v)}")
            object.__setattr__(m, key, tuple(v))
        for key, low in (("mem_len", 0), ("div_val", 1), ("partial_prediction", 1)):
            v = getattr(m, key)
            if isinstance(v, bool) or not isinstance(v, Integral) or not low <= v <= limits[key]:
                raise BertscopeError(f"{name}: {key} must be an integer in [{low}, "
                                     f"{limits[key]}], got {shown(v)}")
        if not isinstance(m.tie_projs, bool):
            raise BertscopeError(f"{name}: tie_projs must be true or false (a bool), got "
                                 f"{shown(m.tie_projs)}")
        ends = (0, *m.cutoffs, m.vocab_size)
        if not all(isinstance(c, Integral) and not isinstance(c, bool) for c in m.cutoffs) \
                or any(a >= b for a, b in itertools.pairwise(ends)):
            raise BertscopeError(f"{name}: cutoffs must rise strictly between 0 and vocab_size "
                                 f"{m.vocab_size}, got {shown(m.cutoffs)}")
        shares = m.cluster_shares
        if len(shares) != len(m.cutoffs) or not all(
                isinstance(p, int | float) and not isinstance(p, bool) and 0 <= p <= 1
                for p in shares) or sum(shares) > 1:
            raise BertscopeError(f"{name}: cluster_shares needs one share in [0, 1] per cutoff "
                                 f"({len(m.cutoffs)}), summing to at most 1, got {shown(shares)}")
        if m.hidden // m.div_val ** len(m.cutoffs) < 1:
            raise BertscopeError(f"{name}: hidden {m.hidden} / div_val^{len(m.cutoffs)} leaves "
                                 f"the last cluster no width; lower div_val")
        if str(m.family) not in (SPEC.name, "xlnet") and m.mem_len:
            raise BertscopeError(f"{name}: mem_len applies to Transformer-XL and XLNet only")
        if str(m.family) != SPEC.name and (m.cutoffs or m.div_val != 1):
            raise BertscopeError(f"{name}: cutoffs and div_val apply to Transformer-XL only")


__all__ = ["SPEC", "MemoryFields"]
