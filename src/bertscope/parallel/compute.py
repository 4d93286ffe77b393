"""Per-device compute of a layout: op-table roles -> per-tp variants -> predicted times.

The analytic op table of one encoder layer plus the embedding and head sections is built once
per micro-batch size. Each row's roles say how tensor parallelism divides it (Megatron-LM,
Shoeybi et al. 2019): `Op.pp_stage` places it in a section (embeddings on the first pipeline
stage, the layer stack, heads and loss on the last), `Op.tp_split` with `Op.phase` gives the
GEMM dimension t ranks split and whether the row is divided at all:

    tp_split     forward / recompute   data gradient   weight gradient   divided by t
    column       N                     K               M                 always
    row          K                     N               N                 always
    split        batch (batched GEMMs; nothing else shrinks but the work)  always
    replicated   -                     -               -                 only with sequence
                                                                         parallelism, and only
                                                                         inside the stack

A divided row's FLOPs, saved bytes and elements are divided by t; a GEMM row's bytes follow its
shrunken operands (A, B and C of its new shape), other rows' bytes are divided too. Every
variant of every (micro-batch size, t, sequence parallel) is predicted in one `predict` call,
so small shards pay the efficiency models' size penalties. No op name is read: renaming ops in
the analytic model changes nothing here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np

from bertscope.analytic.blocks import expand
from bertscope.analytic.families import model_blocks, vocab_multiple
from bertscope.analytic.optimizer import accumulate_op, optimizer_ops
from bertscope.analytic.params import parameter_count
from bertscope.errors import BertscopeError
from bertscope.optable import Op, OpTable
from bertscope.parallel.collectives import ArrayLike
from bertscope.parallel.job import Workload
from bertscope.perf import DeviceProfile, Knobs, predict
from bertscope.perf.kernel_fusion import fuse_records
from bertscope.presets import with_changes
from bertscope.taxonomy import (
    Category,
    Phase,
    PipelineStage,
    Sublayer,
    SublayerGroup,
    TensorSplit,
)

_ATTN_CORE = (Sublayer.ATTN_SCORE, Sublayer.ATTN_SOFTMAX, Sublayer.ATTN_CONTEXT,
              Sublayer.ATTN_FUSED, Sublayer.CROSS_CORE)
"""What selective recomputation reruns (Megatron-LM's core attention, self and cross)."""
_DROPPED = (Category.SOFTMAX, Category.DROPOUT)
"""Rows of the attention core whose saved s x s tensors selective recomputation drops
(Korthikanti et al. 2022, section 4.2: softmax output, dropout mask and output; Q, K, V kept)."""


class _Dim(IntEnum):
    """The GEMM dimension tensor parallelism splits in a row."""

    NONE = 0
    M = 1
    N = 2
    K = 3
    BATCH = 4


class _Divide(IntEnum):
    """When a row's work is divided by t."""

    FIXED = 0
    """Never: replicated outside the layer stack."""
    SP_ONLY = 1
    """With sequence parallelism: replicated inside the layer stack."""
    ALWAYS = 2
    """Column, row and split rows."""


class _Section(IntEnum):
    """Where a row's time is counted."""

    LAYER = 0
    """The repeated layers (`PipelineStage.STACK`)."""
    EMBEDDING = 1
    """The embeddings (`PipelineStage.FIRST`)."""
    HEAD = 2
    """Heads, loss, the tied embedding's gradient sum (`PipelineStage.LAST`)."""


class Block(IntEnum):
    """A layer's tensor-parallel block: each has one column-parallel GEMM group (QKV; the
    first feed-forward GEMMs) and one row-parallel GEMM (the output projections)."""

    ATTENTION = 0
    """Attention's linears (`SublayerGroup.ATTENTION_LINEAR`, cross-attention's too)."""
    FFN = 1
    """The feed-forward linears (`SublayerGroup.FEED_FORWARD`)."""


class Split(IntEnum):
    """Tensor-parallel split of a linear GEMM."""

    COLUMN = 0
    ROW = 1


class Pass(IntEnum):
    """The GEMM's pass: forward, data gradient, weight gradient."""

    FORWARD = 0
    DATA_GRAD = 1
    WEIGHT_GRAD = 2


@dataclass(frozen=True, slots=True)
class ComputeTable:
    """Predicted seconds per micro-batch of one encoder layer and of the sections outside the
    stack, indexed [micro-batch size, tp, sequence parallel]; plus per-parameter optimizer and
    gradient-accumulation costs."""

    batches: np.ndarray
    """Micro-batch sizes (sorted)."""
    tps: np.ndarray
    """Tensor-parallel sizes (sorted)."""
    layer_fwd: np.ndarray
    layer_bwd: np.ndarray
    attn_fwd: np.ndarray
    """The attention core's forward (what selective recomputation reruns)."""
    emb_fwd: np.ndarray
    emb_bwd: np.ndarray
    head_fwd: np.ndarray
    head_bwd: np.ndarray
    layer_once: np.ndarray
    """Seconds per optimizer step, not per micro-batch, of one layer's rows that run once a
    step outside the update: fp8 weight casts under `WeightCast.PER_STEP` or `KEPT`
    (Transformer Engine casts the weights in the first micro-batch and reuses them;
    `analytic.fp8`); zero otherwise. Not in `layer_fwd`."""
    emb_once: np.ndarray
    """... of the embedding section."""
    head_once: np.ndarray
    """... of the heads and loss."""
    layer_saved: np.ndarray
    """Bytes one layer keeps for backward per micro-batch (no recomputation)."""
    core_saved: np.ndarray
    """Of those, the attention core's s x s tensors (what selective recomputation drops)."""
    layer_input: np.ndarray
    """Bytes of one layer's input per micro-batch (what full recomputation keeps)."""
    emb_saved: np.ndarray
    """Bytes the embedding section keeps for backward per micro-batch."""
    head_saved: np.ndarray
    """Bytes the heads and loss keep for backward per micro-batch."""
    transient: np.ndarray
    """Largest single op output, bytes."""
    optimizer_per_param: float
    """Seconds of the optimizer update per parameter."""
    accumulate_per_param: float
    """Seconds per parameter of adding one micro-batch's gradient into .grad."""
    gemm_windows: np.ndarray
    """Seconds per micro-batch of one layer's linear GEMMs that tensor-parallel collectives
    can overlap with, indexed [micro-batch size, tp, sequence parallel, block (`Block`),
    split (`Split`), pass (`Pass`)]: e.g. [..., Block.FFN, Split.ROW, Pass.FORWARD] is the
    row-parallel second feed-forward GEMM's forward (`parallel.overlap`)."""

    def index(self, micro_batch: ArrayLike, tp: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Indices of micro-batch sizes and tp sizes into the tables."""
        bi = np.searchsorted(self.batches, micro_batch)
        ti = np.searchsorted(self.tps, tp)
        if np.any(bi >= len(self.batches)) or np.any(self.batches[np.minimum(
                bi, len(self.batches) - 1)] != micro_batch):
            raise BertscopeError("micro-batch size missing from the compute table")
        if np.any(ti >= len(self.tps)) or np.any(self.tps[np.minimum(
                ti, len(self.tps) - 1)] != tp):
            raise BertscopeError("tp size missing from the compute table")
        return bi, ti


_NUMERIC = ("m", "n", "k", "batch", "elements", "count", "flops", "bytes_read",
            "bytes_written", "saved_bytes")
_FLOATS = ("flops", "bytes_read", "bytes_written", "saved_bytes")
Columns = dict[str, np.ndarray]


def _columns(ops: list[Op]) -> Columns:
    """Op rows as numpy columns (the op-table schema minus time_s)."""
    fields = list(zip(*ops, strict=True))
    out: Columns = {}
    for i, f in enumerate(Op._fields):
        if f == "time_s":
            continue
        dtype = float if f in _FLOATS else np.int64 if f in _NUMERIC or f == "layer" else object
        out[f] = np.asarray(fields[i], dtype=dtype)
    return out


def _tags(cols: Columns) -> Columns:
    """How tensor parallelism splits each row, from its roles alone (see the module
    docstring): section, split GEMM dimension, divisor kind."""
    split, stage, phase = cols["tp_split"], cols["pp_stage"], cols["phase"]
    gemm = cols["batch"] > 0
    col, row = split == TensorSplit.COLUMN, split == TensorSplit.ROW
    fwd = (phase == Phase.FORWARD) | (phase == Phase.RECOMPUTE)
    dgrad, wgrad = phase == Phase.BACKWARD_DATA, phase == Phase.BACKWARD_WEIGHT
    dim = np.full(len(split), int(_Dim.NONE), dtype=np.int64)
    dim[gemm & col & fwd] = _Dim.N
    dim[gemm & col & dgrad] = _Dim.K
    dim[gemm & col & wgrad] = _Dim.M
    dim[gemm & row & fwd] = _Dim.K
    dim[gemm & row & (dgrad | wgrad)] = _Dim.N
    dim[gemm & (split == TensorSplit.SPLIT)] = _Dim.BATCH
    stack = stage == PipelineStage.STACK
    whole = np.where(stack, int(_Divide.SP_ONLY), int(_Divide.FIXED))
    divide = np.where(split != TensorSplit.REPLICATED, int(_Divide.ALWAYS), whole)
    # a column-parallel GEMM keeps its input, which every rank holds whole (sharded only by
    # sequence parallelism inside the stack): its saved bytes divide like a replicated row's
    divide_saved = np.where(gemm & col, whole, divide)
    section = np.where(stack, int(_Section.LAYER), np.where(
        stage == PipelineStage.FIRST, int(_Section.EMBEDDING), int(_Section.HEAD)))
    return {"section": section, "dim": dim, "divide": divide, "divide_saved": divide_saved}


def _base_rows(workload: Workload, micro_batch: int, tp: int = 1) -> Columns:
    """One layer's and the outside sections' rows of a micro-batch (no optimizer rows), the
    vocabulary padded for tensor-parallel size `tp` (`families.vocab_multiple`); with two
    stacks (T5), one layer of each. With `run.fusion` the activation chains are fused
    (`_fused`; the optimizer's rows too, in `_update_ops`)."""
    m = workload.model
    one = {"decoder_layers": 1} if m.decoder_layer_count else {}
    m1 = with_changes(m, num_layers=1, share_layers=False, **one)
    run = workload.run_for(micro_batch)
    blocks = model_blocks(m1, run, tp)
    # rows of blocks that run once per optimizer step outside the update (fp8 weight casts
    # under `WeightCast.PER_STEP`/`KEPT`: `fp8.to_fp8`) apart from the micro-batch's rows
    ops, once = ([op for op in expand([b for b in blocks if b.micro is micro], m1.num_layers)
                  if op.phase is not Phase.OPTIMIZER] for micro in (True, False))
    each, step = _fused(ops, workload), _fused(once, workload) if once else []
    cols = _columns([*each, *step])
    cols["per_step"] = np.arange(len(each) + len(step)) >= len(each)
    return cols


def _fused(ops: list[Op], workload: Workload) -> list[Op]:
    """The rows as `perf.kernel_fusion.fuse` runs them where the run fuses (`RunConfig.fusion`,
    the activation chains only with `RunConfig.chain_fusion`;
    before the roles are read: a fused chain keeps its first row's tensor-parallel split and
    pipeline stage, which every member shares), else unchanged."""
    if not workload.run.fusion:
        return ops
    records = [op._asdict() for op in ops]
    fused, _ = fuse_records(records, workload.precision.act_bytes,
                            chains_too=workload.run.chain_fusion)
    return [Op(**{k: r[k] for k in Op._fields}) for r in fused]


def _mean_seq(workload: Workload) -> float:
    """Tokens per sequence of a layer's input, the mean over all layers (T5's decoder layers
    see the target length)."""
    m, run = workload.model, workload.run
    seq = workload.computed_per_sequence  # seq, or the real tokens when unpadded
    return (m.num_layers * seq + m.decoder_layer_count * run.target_seq) / m.stack_layers


def _layer_weights(workload: Workload, cols: Columns) -> np.ndarray:
    """Each base row's weight in the per-layer figures: 1, except with two stacks (T5),
    whose base rows hold one layer of each: a layer's figures are then the mean over all
    layers (each stack's layer weighs its share, L_enc / L and L_dec / L), so that
    `stack_layers / pp` layers per stage give each stage its share of both stacks."""
    m = workload.model
    weight = np.ones(len(cols["layer"]))
    if m.decoder_layer_count:
        total, layer = m.stack_layers, cols["layer"]
        stack = cols["pp_stage"] == PipelineStage.STACK
        weight[stack & (layer == 0)] = m.num_layers / total  # the encoder's layer
        weight[stack & (layer >= 1)] = m.decoder_layer_count / total
    return weight


def _variant(cols: Columns, tags: Columns, t: int, sp: bool) -> Columns:
    """The rows as one of t tensor-parallel ranks sees them (t = 1: unchanged)."""
    if t == 1:
        return dict(cols)
    out = dict(cols)
    def divisor(divide: np.ndarray) -> np.ndarray:
        return np.where((divide == _Divide.ALWAYS) | ((divide == _Divide.SP_ONLY) & sp),
                        float(t), 1.0)

    d = divisor(tags["divide"])
    dims = {c: cols[c].astype(float) for c in ("m", "n", "k", "batch")}

    def gemm_bytes() -> np.ndarray:
        return dims["batch"] * (dims["m"] * dims["k"] + dims["k"] * dims["n"]
                                + dims["m"] * dims["n"])

    before = gemm_bytes()
    dim = tags["dim"]
    for code, c in ((_Dim.M, "m"), (_Dim.N, "n"), (_Dim.K, "k"), (_Dim.BATCH, "batch")):
        dims[c] = np.where(dim == code, np.ceil(dims[c] / t), dims[c])
        out[c] = dims[c].astype(np.int64)
    after = gemm_bytes()
    byte_scale = np.where(dim != _Dim.NONE, after / np.where(before > 0, before, 1.0), 1.0 / d)
    out["flops"] = cols["flops"] / d
    out["bytes_read"] = cols["bytes_read"] * byte_scale
    out["bytes_written"] = cols["bytes_written"] * byte_scale
    out["saved_bytes"] = cols["saved_bytes"] / divisor(tags["divide_saved"])
    out["elements"] = np.ceil(cols["elements"] / d).astype(np.int64)
    return out


_TABLES: dict[tuple[Any, ...], ComputeTable] = {}


def clear_compute_tables() -> None:
    """Forget cached compute tables (benchmarks time cold searches with it)."""
    _TABLES.clear()


def compute_table(workload: Workload, profile: DeviceProfile, batches: ArrayLike,
                  tps: ArrayLike, knobs: Knobs | None = None) -> ComputeTable:
    """Predicted per-micro-batch times for every micro-batch size in `batches` and tensor-
    parallel size in `tps` (with and without sequence parallelism), from one `predict` call
    on the stacked rows of all variants, the device's figures scaled by `knobs` (what-ifs;
    links are not scaled). Cached per (model, run settings, profile, sizes, knobs)."""
    bs = np.unique(np.asarray(batches, dtype=np.int64))
    ts = np.unique(np.asarray(tps, dtype=np.int64))
    knobs = knobs or Knobs()
    key = (workload.model, workload.run_for(1), profile, tuple(bs.tolist()),
           tuple(ts.tolist()), knobs)
    if key in _TABLES:
        return _TABLES[key]
    parts: list[Columns] = []
    sections: list[np.ndarray] = []
    keys: list[tuple[int, int, int, int]] = []  # (bi, ti, spi, rows)
    weights: list[np.ndarray] = []
    for bi, b in enumerate(bs):
        bases: dict[int, tuple[Columns, Columns, np.ndarray]] = {}  # by vocabulary multiple
        for ti, t in enumerate(ts):
            mult = vocab_multiple(workload.run, int(t))
            if mult not in bases:
                base = _base_rows(workload, int(b), int(t))
                bases[mult] = (base, _tags(base), _layer_weights(workload, base))
            base, tags, weight = bases[mult]
            for spi in (0, 1):
                if t == 1 and spi:
                    continue  # no sequence parallelism without tensor parallelism
                parts.append(_variant(base, tags, int(t), bool(spi)))
                sections.append(tags["section"])
                keys.append((bi, ti, spi, len(base["phase"])))
                weights.append(weight)
    update_ops, accumulate = _update_ops(workload)
    update = _columns([*update_ops, accumulate])  # the accumulate row last
    stacked = {c: np.concatenate([p[c] for p in parts] + [update[c]]) for c in update}
    pred = predict(OpTable.from_columns(stacked), profile, workload.precision, knobs=knobs)
    time = pred.columns["time_s"]
    shape = (len(bs), len(ts), 2)
    size = math.prod(shape)
    flat = np.repeat([np.ravel_multi_index(k[:3], shape) for k in keys], [k[3] for k in keys])
    n_rows = len(flat)
    section, phase = np.concatenate(sections), stacked["phase"][:n_rows]
    once = np.concatenate([p["per_step"] for p in parts])
    fwd = (phase == Phase.FORWARD) & ~once
    attn = np.isin(stacked["sublayer"][:n_rows], list(_ATTN_CORE))
    dropped = attn & np.isin(stacked["category"][:n_rows], list(_DROPPED))
    w_rows = np.concatenate(weights)
    t_rows = time[:n_rows] * w_rows

    def total(mask: np.ndarray, values: np.ndarray = t_rows) -> np.ndarray:
        return np.bincount(flat[mask], weights=values[mask], minlength=size).reshape(shape)

    written = stacked["bytes_written"][:n_rows] / stacked["count"][:n_rows]
    transient = np.zeros(size)
    np.maximum.at(transient, flat, written)
    saved = stacked["saved_bytes"][:n_rows] * w_rows
    layer, emb, head = (section == s for s in (_Section.LAYER, _Section.EMBEDDING,
                                               _Section.HEAD))
    upd_time = time[n_rows:]
    n_params = parameter_count(workload.model)
    windows = _gemm_windows(stacked, n_rows, layer, total)
    table = ComputeTable(
        batches=bs, tps=ts,
        layer_fwd=total(layer & fwd), layer_bwd=total(layer & ~fwd & ~once),
        layer_once=total(layer & once), emb_once=total(emb & once), head_once=total(head & once),
        attn_fwd=total(layer & fwd & attn),
        emb_fwd=total(emb & fwd), emb_bwd=total(emb & ~fwd & ~once),
        head_fwd=total(head & fwd), head_bwd=total(head & ~fwd & ~once),
        layer_saved=total(layer & fwd, saved), core_saved=total(layer & fwd & dropped, saved),
        layer_input=np.broadcast_to(
            (bs * _mean_seq(workload) * workload.model.hidden
             * workload.precision.act_bytes)[:, None, None], shape).astype(float),
        emb_saved=total(emb & fwd, saved), head_saved=total(head & fwd, saved),
        transient=transient.reshape(shape),
        optimizer_per_param=float(upd_time[:-1].sum()) / n_params,
        accumulate_per_param=float(upd_time[-1]) / n_params,
        gemm_windows=windows,
    )
    # tp = 1 has no sequence-parallel variant: mirror it so lookups with sp = 0 or 1 agree
    one = ts == 1
    for arr in (table.layer_fwd, table.layer_bwd, table.attn_fwd, table.emb_fwd, table.emb_bwd,
                table.head_fwd, table.head_bwd, table.layer_once, table.emb_once,
                table.head_once, table.layer_saved, table.core_saved,
                table.emb_saved, table.head_saved, table.transient, table.gemm_windows):
        arr[:, one, 1] = arr[:, one, 0]
    if len(_TABLES) > 64:
        _TABLES.clear()
    _TABLES[key] = table
    return table


_BLOCK_OF = {SublayerGroup.ATTENTION_LINEAR: Block.ATTENTION,
             SublayerGroup.FEED_FORWARD: Block.FFN}
_SPLITS = (TensorSplit.COLUMN, TensorSplit.ROW)
"""The `TensorSplit` of each `Split`, in its order."""
_PASSES = (Phase.FORWARD, Phase.BACKWARD_DATA, Phase.BACKWARD_WEIGHT)
"""The `Phase` of each `Pass`, in its order."""


def _gemm_windows(stacked: Columns, n_rows: int, layer: np.ndarray,
                  total: Any) -> np.ndarray:
    """The layer's linear GEMM seconds per (block, split, pass) (`ComputeTable.
    gemm_windows`), from the rows' roles: category GEMM (fp8 runs' GEMMs too, not their
    casts), the sublayer's group, `tp_split` and phase."""
    cat, sub = stacked["category"][:n_rows], stacked["sublayer"][:n_rows]
    split, phase = stacked["tp_split"][:n_rows], stacked["phase"][:n_rows]
    linear = layer & (cat == Category.GEMM)
    block = np.array([_BLOCK_OF.get(x.group, -1) for x in sub], dtype=np.int64)
    parts = [total(linear & (block == b) & (split == s) & (phase == ph))
             for b in Block for s in _SPLITS for ph in _PASSES]
    out = np.stack(parts, axis=-1)
    return out.reshape(*out.shape[:3], len(Block), len(_SPLITS), len(_PASSES))


def _update_ops(workload: Workload) -> tuple[list[Op], Op]:
    """The optimizer step of the whole model, and one gradient-accumulation add per parameter
    (as the analytic model's grad_accumulate rows), to be predicted and scaled per device."""
    m, run = workload.model, workload.run_for(1)
    return _fused(optimizer_ops(m, run), workload), accumulate_op(m, run)


__all__ = ["Block", "ComputeTable", "Pass", "Split", "clear_compute_tables", "compute_table"]
