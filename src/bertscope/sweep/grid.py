"""A sweep's grid: typed axes, checked once, split into groups that share a row structure.

The grid is the Cartesian product of its axes. Structural axes (the base model, precision,
optimizer, checkpointing, dropout, masked-LM-only) change which rows an iteration has, so
each combination is a `Group`; so do micro-batches > 1 (gradient-accumulation rows) and, in
masked-LM-only runs, sequences > 1 (the MLM gather). Inside a group the numeric axes
(`NUM_AXES`: model dimensions, batch, seq, micro-batches) span an N-d array: each axis's
values lie along its own dimension, so a formula that reads batch and seq only is evaluated
on a (1, .., nb, ns, 1) array and broadcasts to the rest (`ModelView`, `RunView`: the size
fields of `ModelConfig` and `RunConfig` as such arrays; the analytic producer runs on them
unchanged). Devices and hardware knobs multiply every group.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bertscope.config import (
    MODEL_LIMITS,
    Attention,
    Checkpoint,
    Family,
    ModelConfig,
    Optimizer,
    Positions,
    Precision,
)
from bertscope.errors import MAX_SIZE, BertscopeError, parse_enum
from bertscope.perf.efficiency import DeviceProfile
from bertscope.perf.roofline import Knobs
from bertscope.sweep.tokens import Axis, TokenSpace

DIM_AXES: tuple[str, ...] = ("layers", "hidden", "heads", "ffn", "vocab")
"""Model dimensions a sweep may vary (None on the grid: each base model's own)."""
NUM_AXES: tuple[str, ...] = (*DIM_AXES, "batch", "seq", "micro_batches")
"""The numeric axes, in the order of a group's N-d array."""
STRUCTURAL: tuple[str, ...] = ("precision", "optimizer", "checkpoint", "dropout",
                               "masked_lm_only", "attention", "fused")
"""Axes that change which rows an iteration has: each combination is a `Group`."""
LAYOUT_SIZES: tuple[str, ...] = ("dp", "tp", "pp")
"""Distributed layout sizes (with `zero`, the stage): any above 1 makes a multi-device point."""
LAYOUT_AXES: tuple[str, ...] = (*LAYOUT_SIZES, "zero")
"""Axes of a distributed layout: data-, tensor- and pipeline-parallel sizes, ZeRO stage."""
KNOB_AXES: tuple[str, ...] = ("gemm_peak", "bandwidth", "overhead", "memory")
"""Hardware what-ifs: multipliers of each device's figures (`perf.Knobs`)."""
MODEL_FIELD = {"layers": "num_layers", "hidden": "hidden", "heads": "heads",
                "ffn": "intermediate", "vocab": "vocab_size"}
_LIMITS = {**{a: MODEL_LIMITS[f] for a, f in MODEL_FIELD.items()},
           "batch": 2**31, "seq": 2**24, "micro_batches": 2**20,
           "dp": 2**20, "tp": 2**20, "pp": 2**20}


def _ints(name: str, values: Sequence[int]) -> tuple[int, ...]:
    out = tuple(dict.fromkeys(values))  # order kept, repeats dropped
    if not out:
        raise BertscopeError(f"axis {name} is empty; give at least one value")
    for v in out:
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise BertscopeError(f"axis {name}: values must be positive integers, got {v!r}")
        if v > _LIMITS[name]:
            raise BertscopeError(f"axis {name}: {v} exceeds the supported maximum "
                                 f"{_LIMITS[name]:,}")
    return tuple(int(v) for v in out)


def _nonempty(name: str, values: Sequence[Any]) -> tuple[Any, ...]:
    out = tuple(dict.fromkeys(values))
    if not out:
        raise BertscopeError(f"axis {name} is empty; give at least one value")
    return out


@dataclass(frozen=True, kw_only=True)
class Grid:
    """The axes of a sweep; every value checked on construction. Model dimensions left None
    take each base model's own (`ffn`, when only `hidden` is swept, keeps the model's
    FFN-to-hidden ratio)."""

    models: tuple[ModelConfig, ...]
    devices: tuple[DeviceProfile, ...]
    layers: tuple[int, ...] | None = None
    hidden: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None
    ffn: tuple[int, ...] | None = None
    vocab: tuple[int, ...] | None = None
    batch: tuple[int, ...] = (8,)
    seq: tuple[int, ...] = (128,)
    micro_batches: tuple[int, ...] = (1,)
    precision: tuple[Precision, ...] = (Precision.FP32,)
    optimizer: tuple[Optimizer, ...] = (Optimizer.ADAM,)
    checkpoint: tuple[Checkpoint, ...] = (Checkpoint.NONE,)
    dropout: tuple[bool, ...] = (True,)
    masked_lm_only: tuple[bool, ...] = (False,)
    attention: tuple[Attention, ...] = (Attention.EAGER,)
    fused: tuple[bool, ...] = (False,)
    """Predict as `perf.fuse` runs the table (memory-bound chains and the optimizer fused)."""
    dp: tuple[int, ...] = (1,)
    """Data-parallel replicas (above 1: a multi-device point, `sweep.multi`)."""
    tp: tuple[int, ...] = (1,)
    """Tensor-parallel ranks."""
    pp: tuple[int, ...] = (1,)
    """Pipeline stages."""
    zero: tuple[int, ...] = (0,)
    """ZeRO stage (0-3) over the data-parallel replicas."""
    gemm_peak: tuple[float, ...] = (1.0,)
    bandwidth: tuple[float, ...] = (1.0,)
    overhead: tuple[float, ...] = (1.0,)
    memory: tuple[float, ...] = (1.0,)

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "models", _nonempty("models", self.models))
        put(self, "devices", _nonempty("devices", self.devices))
        for name in NUM_AXES:
            values = getattr(self, name)
            if values is not None:
                put(self, name, _ints(name, values))
        put(self, "precision", tuple(parse_enum(Precision, p, "precision")
                                     for p in _nonempty("precision", self.precision)))
        put(self, "optimizer", tuple(parse_enum(Optimizer, o, "optimizer")
                                     for o in _nonempty("optimizer", self.optimizer)))
        put(self, "attention", tuple(parse_enum(Attention, x, "attention")
                                     for x in _nonempty("attention", self.attention)))
        ckpt = tuple(parse_enum(Checkpoint, c, "checkpoint")
                     for c in _nonempty("checkpoint", self.checkpoint))
        if Checkpoint.SELECTIVE in ckpt:
            raise BertscopeError("checkpoint selective is modelled by the distributed model "
                                 "only; sweep none and/or full")
        put(self, "checkpoint", ckpt)
        for name in ("dropout", "masked_lm_only", "fused"):
            values = _nonempty(name, getattr(self, name))
            if not all(isinstance(v, bool) for v in values):
                raise BertscopeError(f"axis {name}: values must be true or false")
            put(self, name, values)
        no_mlm = [m.name for m in self.models if not m.has_mlm_head]
        if True in self.masked_lm_only and no_mlm:
            raise BertscopeError(f"masked_lm_only applies to models with a masked-LM head "
                                 f"(BERT, RoBERTa, ALBERT), not {', '.join(no_mlm)}")
        for name in LAYOUT_SIZES:
            put(self, name, _ints(name, getattr(self, name)))
        zeros = _nonempty("zero", self.zero)
        if not all(isinstance(z, int | np.integer) and not isinstance(z, bool)
                   and 0 <= z <= 3 for z in zeros):
            raise BertscopeError(f"axis zero: stages are 0, 1, 2 or 3, got {list(zeros)}")
        put(self, "zero", tuple(int(z) for z in zeros))
        layouts = itertools.product(self.dp, self.tp, self.pp, self.zero)
        if True in self.fused and any(c != (1, 1, 1, 0) for c in layouts):
            raise BertscopeError("fused execution is not modelled for multi-device points "
                                 "(dp, tp, pp or zero); sweep --fused off with them")
        for name in KNOB_AXES:
            values = _nonempty(name, getattr(self, name))
            for v in values:
                Knobs(**{name: v})  # the one check of a multiplier
            put(self, name, tuple(float(v) for v in values))
        if self.size > MAX_SIZE:
            raise BertscopeError(f"the grid has {self.size:.3g} configurations, beyond "
                                 f"{MAX_SIZE:,}; narrow an axis")

    @property
    def size(self) -> int:
        """Configurations in the grid (before those a model cannot run are skipped)."""
        n = len(self.models) * len(self.devices)
        for name in (*NUM_AXES, *STRUCTURAL, *LAYOUT_AXES, *KNOB_AXES):
            values = getattr(self, name)
            n *= len(values) if values is not None else 1
        return n

    def knob_sets(self) -> list[Knobs]:
        """Every combination of the knob axes."""
        return [Knobs(gemm_peak=g, bandwidth=b, overhead=o, memory=m) for g in self.gemm_peak
                for b in self.bandwidth for o in self.overhead for m in self.memory]

    def groups(self) -> Iterator[Group]:
        """The grid split into groups that share one row structure."""
        for model in self.models:
            values = {name: np.asarray(getattr(self, name) or (_model_value(model, name),),
                                       dtype=float) for name in NUM_AXES}
            for prec, opt, ckpt, drop, masked, attn, fused in itertools.product(
                    self.precision, self.optimizer, self.checkpoint, self.dropout,
                    self.masked_lm_only, self.attention, self.fused):
                for part in _splits(values, masked):
                    yield Group(model=model, precision=prec, optimizer=opt,
                                checkpointing=ckpt is Checkpoint.FULL, dropout=drop,
                                masked_lm_only=masked, attention=attn, fused=fused,
                                values=part,
                                ffn_ratio=self.ffn is None and self.hidden is not None)


def _model_value(m: ModelConfig, axis: str) -> int:
    if axis in MODEL_FIELD:
        return int(getattr(m, MODEL_FIELD[axis]))
    return {"batch": 8, "seq": 128, "micro_batches": 1}[axis]


def _splits(values: dict[str, np.ndarray], masked: bool) -> Iterator[dict[str, np.ndarray]]:
    """The axis values split where the row structure changes: micro-batches 1 vs more, and
    (masked-LM-only) sequence 1 vs longer."""
    micro = values["micro_batches"]
    seq = values["seq"]
    for mpart in (micro[micro == 1], micro[micro > 1]):
        if not mpart.size:
            continue
        sparts = (seq[seq == 1], seq[seq > 1]) if masked else (seq,)
        for spart in sparts:
            if spart.size:
                yield {**values, "micro_batches": mpart, "seq": spart}


@dataclass(frozen=True, kw_only=True)
class Group:
    """Configurations sharing one row structure: a base model, the structural run settings,
    and the numeric axes' values (floats: products stay exact to 2^53 and never overflow)."""

    model: ModelConfig
    precision: Precision
    optimizer: Optimizer
    checkpointing: bool
    dropout: bool
    masked_lm_only: bool
    values: dict[str, np.ndarray] = field(repr=False)
    attention: Attention = Attention.EAGER
    fused: bool = False
    ffn_ratio: bool = False
    """FFN size follows hidden at the base model's ratio (hidden swept, ffn not)."""

    @property
    def shape(self) -> tuple[int, ...]:
        """The group's N-d array shape (one dimension per numeric axis)."""
        return tuple(len(self.values[a]) for a in NUM_AXES)

    @property
    def size(self) -> int:
        """Configurations in the group (per device and knob set)."""
        return math.prod(self.shape)

    def axis(self, name: str) -> np.ndarray:
        """An axis's values shaped to broadcast along its own dimension."""
        shape = [1] * len(NUM_AXES)
        shape[NUM_AXES.index(name)] = -1
        return self.values[name].reshape(shape)

    def column(self, name: str) -> np.ndarray:
        """A numeric axis as the configurations see it, over the group's full shape (the FFN
        size follows hidden when `ffn_ratio`)."""
        values = ModelView(self).intermediate if name == "ffn" else self.axis(name)
        return np.broadcast_to(values, self.shape)

    def views(self, *, tokens: bool = False) -> tuple[ModelView, RunView]:
        """The model and run configs of the group, size fields as broadcasting arrays (with
        `tokens`, batch and seq as `sweep.tokens.Axis` values: `RunView`)."""
        return ModelView(self), RunView(self, tokens=tokens)

    def valid(self) -> np.ndarray:
        """Configurations a model can run (heads divide hidden, the sequence fits the
        positions), as a boolean array of the group's shape."""
        m, run = self.views()
        base = self.model
        ok = m.intermediate >= 1
        if base.head_size is None:
            ok = ok & (m.hidden % m.heads == 0)
        ok = ok & (m.heads % m.kv_groups == 0)
        if base.family is Family.VIT:
            ok = ok & (run.seq == m.max_positions)
        elif base.family.positions is not Positions.RELATIVE:
            ok = ok & (run.seq <= m.max_positions - m.position_offset)
        return np.broadcast_to(ok, self.shape)


class ModelView:
    """`ModelConfig`'s fields for a group: sizes as arrays over the group's axes, structure
    (family, activation, sharing) as the base model's."""

    def __init__(self, g: Group) -> None:
        base = g.model
        self.name = base.name
        self.family: Family = base.family
        self.activation = base.activation
        self.share_layers = base.share_layers
        self.position_offset = base.position_offset
        self.max_positions = float(base.max_positions)
        self.type_vocab_size = float(base.type_vocab_size)
        self.num_layers = g.axis("layers")
        self.hidden = g.axis("hidden")
        self.heads = g.axis("heads")
        self.vocab_size = g.axis("vocab")
        self.intermediate = (np.round(g.axis("hidden") * base.intermediate / base.hidden)
                             if g.ffn_ratio else g.axis("ffn"))
        self.embedding_size = base.embedding_size
        self.emb = float(base.embedding_size) if base.embedding_size is not None else self.hidden
        self.head_size = base.head_size
        self.head_dim = self.hidden // self.heads if base.head_size is None else base.head_size
        self.has_pooler_head = base.has_pooler_head
        # grouped-query attention keeps the base model's query heads per key/value head
        self.kv_groups = base.kv_groups
        self.kv_heads = base.kv_heads
        self.kv_head_count = self.heads // self.kv_groups
        self.tie_word_embeddings = base.tie_word_embeddings
        self.gated_ffn = base.gated_ffn
        self.relative_buckets = base.relative_buckets
        self.image_size, self.patch_size = base.image_size, base.patch_size
        self.channels, self.patches = base.channels, base.patches
        self.decoder_layers = base.decoder_layers
        self.decoder_layer_count = (0 if not base.decoder_layer_count else self.num_layers
                                    if base.decoder_layers is None
                                    else float(base.decoder_layers))


class RunView:
    """`RunConfig`'s fields for a group: batch, seq and micro-batches as arrays. With
    `tokens`, batch and seq are `sweep.tokens.Axis` values, so that rows reading only their
    product are computed on its distinct values (where that pays: `TokenSpace.of`)."""

    def __init__(self, g: Group, *, tokens: bool = False) -> None:
        self.batch: Any = g.axis("batch")
        self.seq: Any = g.axis("seq")
        space = TokenSpace.of(self.batch, self.seq) if tokens else None
        self.space = space
        if space is not None:
            self.batch, self.seq = Axis(self.batch, "batch", space), Axis(self.seq, "seq", space)
        self.micro_batches = g.axis("micro_batches")
        self.precision = g.precision
        self.optimizer = g.optimizer
        self.checkpointing = g.checkpointing
        self.dropout = g.dropout
        self.masked_lm_only = g.masked_lm_only
        self.attention = g.attention

    @property
    def tokens(self) -> np.ndarray:
        """Tokens per optimizer step."""
        return self.batch * self.seq * self.micro_batches

    @property
    def target_seq(self) -> Any:
        """An encoder-decoder's decoder length: `seq` (a sweep has no decoder-length axis)."""
        return self.seq


__all__ = ["DIM_AXES", "KNOB_AXES", "LAYOUT_AXES", "LAYOUT_SIZES", "MODEL_FIELD", "NUM_AXES",
           "STRUCTURAL", "Grid", "Group", "ModelView",
           "RunView"]
