"""Parallel layouts (DP, TP, PP, ZeRO, recomputation) and what one iteration costs on a cluster.

An iteration of a layout splits into (all per device, seconds):

- **compute**: the performance model's predicted op times (`bertscope.perf.predict`) of one
  encoder layer and of the embedding and head sections, for the per-device micro-batch, times
  the layers on the device's pipeline stage and the micro-batches; plus recomputation
  (full: the layer's forward again; selective: its attention core) and gradient accumulation.
  Tensor parallelism divides the work as Megatron-LM splits it (Shoeybi et al. 2019): each
  split row's FLOPs and bytes are divided by t and its split GEMM dimension too (N of
  column-parallel Q/K/V/FFN1/MLM-decoder forward GEMMs, K of row-parallel output/FFN2, the
  head count of attention's batched GEMMs), then predicted again, so small shards pay the
  efficiency models' size penalties. Layernorms, dropouts and residual adds stay whole on
  each rank unless sequence parallelism splits them. This is an approximation of rebuilding
  the op table per layout, made once per (micro-batch size, t, sequence parallel).
- **tensor-parallel communication**, exposed (it sits between dependent ops): per layer two
  all-reduces of the b s h activations in forward and two in backward (Megatron's f and g
  operators), two more in forward again under full recomputation; sequence parallelism
  (Korthikanti et al. 2022) turns each into a reduce-scatter plus an all-gather. One more
  in the vocabulary-parallel embedding (forward) and MLM head (backward).
- **pipeline**: stages of L/p layers; the slowest stage sets the step. GPipe (Huang et al.
  2019) and 1F1B (PipeDream-Flush, Narayanan et al. 2021) take (m + p - 1) micro-batch steps;
  the interleaved 1F1B schedule with v virtual stages per device takes (m + (p - 1)/v)
  (Narayanan et al., SC 2021, section 2.2). Each micro-batch sends its activation forward and
  its gradient back (v times when interleaved), b s h / t bytes each with Megatron's
  scatter-gather optimization.
- **data-parallel / ZeRO communication**, the part not hidden behind backward: DDP all-reduces
  gradients in 25 MiB buckets as backward produces them (Li et al., VLDB 2020); ZeRO-1
  reduce-scatters them the same way and all-gathers the updated 16-bit weights after the step;
  ZeRO-2 reduce-scatters every micro-batch; ZeRO-3 also all-gathers each layer's weights in
  forward and backward of every micro-batch, prefetched behind the previous layer's compute.
  With p > 1 the tied word embedding's gradient is all-reduced between the first and last stage.
- **optimizer**: the predicted update of the device's (ZeRO: its shard of the) parameters.

Memory per device is the larger of the first and last pipeline stage: ZeRO's static memory
plus activations (`parallel.memory`) times the micro-batches a stage holds at its peak, plus
the largest single op output.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from bertscope.analytic.encoder import encoder_ops
from bertscope.analytic.optimizer import optimizer_ops
from bertscope.analytic.params import parameter_count
from bertscope.config import ModelConfig, Optimizer, Precision, RunConfig, with_changes
from bertscope.errors import BertscopeError
from bertscope.hardware import Device
from bertscope.optable import Op, OpTable
from bertscope.parallel.collectives import ArrayLike, Collective, bucketed_exposed
from bertscope.parallel.memory import (
    CHECKPOINTS,
    Checkpoint,
    ZeroStage,
    layer_activation_bytes,
    layer_params_per_device,
    recompute_working_bytes,
    stage_params,
    zero_static_bytes,
)
from bertscope.parallel.topology import Link, Topology, topology_for
from bertscope.perf import DeviceProfile, default_profile, load_profile, predict
from bertscope.taxonomy import Category, Phase, Sublayer

DDP_BUCKET_BYTES = 25 * 2**20
"""PyTorch DDP's default gradient bucket, bucket_cap_mb = 25."""


class Schedule(StrEnum):
    """Pipeline schedule."""

    GPIPE = "gpipe"
    """All forwards, then all backwards (Huang et al. 2019): keeps m micro-batches' activations."""
    ONE_F_ONE_B = "1f1b"
    """One forward, one backward (PipeDream-Flush): the same bubble, at most p in flight."""
    INTERLEAVED = "interleaved"
    """1F1B over v model chunks per device (Narayanan et al. 2021): bubble divided by v."""


SCHEDULES: tuple[Schedule, ...] = tuple(Schedule)
"""Schedules in code order (0 gpipe, 1 1f1b, 2 interleaved)."""


# -- pipeline formulas -------------------------------------------------------------------------
def _schedule_codes(schedule: Schedule | str | ArrayLike) -> np.ndarray:
    if isinstance(schedule, str):
        return np.asarray(SCHEDULES.index(_enum(Schedule, schedule, "schedule")))
    return np.asarray(schedule)


def bubble_fraction(schedule: Schedule | str | ArrayLike, pp: ArrayLike,
                    micro_batches: ArrayLike, virtual_stages: ArrayLike = 1) -> np.ndarray:
    """Share of the pipeline's time that a device idles: (p - 1)/(m + p - 1) for GPipe and
    1F1B; (p - 1)/(v m + p - 1) interleaved, i.e. a bubble of (p - 1)/v micro-batch steps in
    m + (p - 1)/v (Narayanan et al. 2021, section 2.2). Schedule codes as in `SCHEDULES`."""
    code = _schedule_codes(schedule)
    p, m = np.asarray(pp, dtype=float), np.asarray(micro_batches, dtype=float)
    v = np.where(code == 2, np.asarray(virtual_stages, dtype=float), 1.0)
    return (p - 1) / (v * m + p - 1)


def bubble_overhead(schedule: Schedule | str | ArrayLike, pp: ArrayLike,
                    micro_batches: ArrayLike, virtual_stages: ArrayLike = 1) -> np.ndarray:
    """Bubble time relative to the ideal (bubble-free) time: (p - 1)/m for GPipe and 1F1B,
    (p - 1)/(v m) interleaved (Narayanan et al. 2021's "bubble time fraction")."""
    code = _schedule_codes(schedule)
    p, m = np.asarray(pp, dtype=float), np.asarray(micro_batches, dtype=float)
    v = np.where(code == 2, np.asarray(virtual_stages, dtype=float), 1.0)
    return (p - 1) / (v * m)


def in_flight(schedule: Schedule | str | ArrayLike, pp: ArrayLike, micro_batches: ArrayLike,
              virtual_stages: ArrayLike = 1) -> tuple[np.ndarray, np.ndarray]:
    """Micro-batches' worth of its layers' activations the (first, last) stage holds at its
    peak. GPipe: m on every stage. 1F1B: min(m, p) on the first stage (p - 1 warm-up forwards
    plus one), 1 on the last. Interleaved: Megatron-LM's warm-up of 2(p - 1) + (v - 1)p chunks
    plus one on the first device, (v - 1)p plus one on the last, each chunk 1/v of the stage:
    min(m v, v p + p - 1)/v, which is Korthikanti et al.'s factor 1 + (p - 1)/(p v) times p.
    One pipeline stage (p = 1) holds one micro-batch at a time."""
    code = _schedule_codes(schedule)
    p, m = np.asarray(pp, dtype=float), np.asarray(micro_batches, dtype=float)
    v = np.maximum(np.asarray(virtual_stages, dtype=float), 1.0)
    first = np.where(code == 0, m, np.where(
        code == 2, np.minimum(m * v, v * p + p - 1) / v, np.minimum(m, p)))
    last = np.where(code == 0, m, np.where(
        code == 2, np.minimum(m * v, (v - 1) * p + 1) / v, 1.0))
    single = p <= 1
    return np.where(single, 1.0, first), np.where(single, 1.0, last)


# -- configs ---------------------------------------------------------------------------------
@dataclass(kw_only=True, frozen=True, slots=True)
class Layout:
    """How a training job is spread over devices. Raises `BertscopeError` when inconsistent."""

    dp: int = 1
    """Data-parallel replicas."""
    tp: int = 1
    """Tensor-parallel ranks (Megatron-style split of every layer)."""
    pp: int = 1
    """Pipeline stages."""
    micro_batches: int = 1
    """Micro-batches per optimizer step per replica (pipeline micro-batches, or gradient
    accumulation steps when pp = 1)."""
    zero: ZeroStage = ZeroStage.NONE
    """ZeRO stage 0-3 across the data-parallel replicas."""
    checkpoint: Checkpoint = Checkpoint.NONE
    """Activation recomputation: none, selective or full."""
    sequence_parallel: bool = False
    """Split layernorm/dropout/residual work and activations along the sequence (needs tp > 1)."""
    schedule: Schedule = Schedule.ONE_F_ONE_B
    """Pipeline schedule (no effect with pp = 1)."""
    virtual_stages: int = 1
    """Model chunks per device for the interleaved schedule (>= 2 there, 1 otherwise)."""

    def __post_init__(self) -> None:
        for f in ("dp", "tp", "pp", "micro_batches", "virtual_stages"):
            value = getattr(self, f)
            if not isinstance(value, int | np.integer) or isinstance(value, bool) or value <= 0:
                raise BertscopeError(f"{f} must be a positive integer, got {value!r}")
            object.__setattr__(self, f, int(value))
        try:
            object.__setattr__(self, "zero", ZeroStage(int(self.zero)))
        except (ValueError, TypeError):
            raise BertscopeError(f"ZeRO stage must be 0, 1, 2 or 3, got {self.zero!r}") from None
        object.__setattr__(self, "checkpoint", _enum(Checkpoint, self.checkpoint, "checkpoint"))
        object.__setattr__(self, "schedule", _enum(Schedule, self.schedule, "schedule"))
        object.__setattr__(self, "sequence_parallel", bool(self.sequence_parallel))
        if self.sequence_parallel and self.tp == 1:
            raise BertscopeError("sequence parallelism splits tensor-parallel regions: it needs "
                                 "tp > 1")
        if self.schedule is Schedule.INTERLEAVED:
            if self.pp == 1:
                raise BertscopeError("the interleaved schedule needs pp > 1")
            if self.virtual_stages < 2:
                raise BertscopeError("the interleaved schedule needs virtual_stages >= 2")
        elif self.virtual_stages != 1:
            raise BertscopeError(f"virtual_stages {self.virtual_stages} needs the interleaved "
                                 f"schedule")
        if self.zero >= ZeroStage.GRADIENTS and self.pp > 1:
            raise BertscopeError("ZeRO-2/3 partition gradients every micro-batch, which "
                                 "pipeline parallelism does not support (DeepSpeed); use "
                                 "ZeRO 0 or 1 with pp > 1")

    @property
    def devices(self) -> int:
        """dp x tp x pp."""
        return self.dp * self.tp * self.pp

    def label(self) -> str:
        """A short description, e.g. "dp8 tp4 sp pp2 1f1b m16 zero1 selective"."""
        parts = [f"dp{self.dp}", f"tp{self.tp}" + (" sp" if self.sequence_parallel else ""),
                 f"pp{self.pp}"]
        if self.pp > 1:
            parts.append(self.schedule.value + (f" v{self.virtual_stages}"
                                                if self.virtual_stages > 1 else ""))
        parts += [f"m{self.micro_batches}", f"zero{int(self.zero)}", self.checkpoint.value]
        return " ".join(parts)


@dataclass(kw_only=True, frozen=True, slots=True)
class Workload:
    """What is trained: the model and the optimizer step's batch."""

    model: ModelConfig
    """The encoder."""
    global_batch: int
    """Sequences per optimizer step, over all replicas and micro-batches."""
    seq: int = 128
    """Tokens per sequence."""
    precision: Precision = Precision.BF16
    """fp32, or mixed fp16/bf16."""
    optimizer: Optimizer = Optimizer.ADAM
    """Optimizer of the update step."""
    dropout: bool = True
    """Dropout on (as pretrained) or off."""
    masked_lm_only: bool = False
    """MLM head on the masked 15% of positions only."""

    def __post_init__(self) -> None:
        for f in ("global_batch", "seq"):
            value = getattr(self, f)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise BertscopeError(f"{f} must be a positive integer, got {value!r}")
        object.__setattr__(self, "precision", _enum(Precision, self.precision, "precision"))
        object.__setattr__(self, "optimizer", _enum(Optimizer, self.optimizer, "optimizer"))
        self.run(1).check(self.model)

    @property
    def tokens(self) -> int:
        """Tokens per optimizer step."""
        return self.global_batch * self.seq

    def run(self, micro_batch: int) -> RunConfig:
        """The run settings of one micro-batch of `micro_batch` sequences."""
        return RunConfig(batch=micro_batch, seq=self.seq, precision=self.precision,
                         optimizer=self.optimizer, dropout=self.dropout,
                         masked_lm_only=self.masked_lm_only)


@dataclass(kw_only=True, frozen=True, slots=True)
class Cluster:
    """The devices a job runs on: a device profile, how many, and the node design."""

    profile: DeviceProfile
    """Device plus efficiency models (the performance model's input)."""
    devices: int
    """Devices in all."""
    topology: Topology
    """Links inside and between nodes."""

    def __post_init__(self) -> None:
        if not isinstance(self.devices, int) or isinstance(self.devices, bool) or \
                self.devices <= 0:
            raise BertscopeError(f"devices must be a positive integer, got {self.devices!r}")

    @classmethod
    def build(cls, device: str | Device | DeviceProfile, devices: int, *,
              devices_per_node: int | None = None, intra: str | Link | None = None,
              inter: str | Link | None = None) -> Cluster:
        """A cluster of `devices` catalog devices (name, `Device` or profile) in the node
        design the device usually comes in (`topology_for`), with any link overridden."""
        if isinstance(device, DeviceProfile):
            profile = device
        elif isinstance(device, Device):
            profile = default_profile(device)
        else:
            profile = load_profile(device)
        if not isinstance(devices, int) or isinstance(devices, bool) or devices <= 0:
            raise BertscopeError(f"devices must be a positive integer, got {devices!r}")
        topo = topology_for(profile.device, devices_per_node=devices_per_node, intra=intra,
                            inter=inter).fit(devices)
        return cls(profile=profile, devices=devices, topology=topo)

    @property
    def memory_bytes(self) -> float:
        """Memory of one device."""
        return self.profile.device.memory_bytes


def check_layout(layout: Layout, workload: Workload, cluster: Cluster) -> None:
    """Raise `BertscopeError` when `layout` cannot run `workload` on `cluster`."""
    m = workload.model
    if layout.devices != cluster.devices:
        raise BertscopeError(f"dp x tp x pp = {layout.dp} x {layout.tp} x {layout.pp} = "
                             f"{layout.devices}, but the cluster has {cluster.devices} devices")
    per_step = layout.dp * layout.micro_batches
    if workload.global_batch % per_step:
        raise BertscopeError(f"global batch {workload.global_batch} is not divisible by dp x "
                             f"micro-batches = {per_step}")
    for what, size in (("heads", m.heads), ("intermediate size", m.intermediate)):
        if size % layout.tp:
            raise BertscopeError(f"tp {layout.tp} does not divide {m.name}'s {size} {what}")
    chunks = layout.pp * layout.virtual_stages
    if m.num_layers % chunks:
        raise BertscopeError(f"{m.num_layers} layers do not split into pp x virtual stages = "
                             f"{chunks} equal stages")
    if layout.schedule is Schedule.INTERLEAVED and layout.micro_batches % layout.pp:
        raise BertscopeError(f"the interleaved schedule needs micro-batches "
                             f"({layout.micro_batches}) to be a multiple of pp ({layout.pp})")


# -- per-(micro-batch, tp) compute times --------------------------------------------------------
_COLUMN = frozenset({"q", "k", "v", "ffn1", "mlm_decoder"})  # output dim split
_ROW = frozenset({"attn_out", "ffn2"})  # input (reduction) dim split
_SPLIT = frozenset({"score", "score_scale", "score_mask", "softmax", "attn_dropout", "context",
                    "act", "mlm_loss", "tied_embedding"})  # heads, FFN width, vocabulary
_ATTN_CORE = (Sublayer.ATTN_SCORE, Sublayer.ATTN_SOFTMAX, Sublayer.ATTN_CONTEXT)
_NONE, _M, _N, _K, _BATCH = range(5)
_FIXED, _SP_ONLY, _ALWAYS = range(3)  # when a row is divided by t
_LAYER, _EMB, _HEAD, _OPT, _ACC = range(5)  # sections


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
Columns = dict[str, np.ndarray]


def _columns(ops: list[Op]) -> Columns:
    """Op rows as numpy columns (the op-table schema minus time_s)."""
    fields = list(zip(*ops, strict=True))
    out: Columns = {}
    for i, f in enumerate(Op._fields):
        if f == "time_s":
            continue
        dtype = float if f in ("flops", "bytes_read", "bytes_written", "saved_bytes") else \
            np.int64 if f in _NUMERIC or f == "layer" else object
        out[f] = np.asarray(fields[i], dtype=dtype)
    return out


def _tags(cols: Columns) -> Columns:
    """How tensor parallelism splits each row: section, split GEMM dimension, divisor kind
    (see the module docstring)."""
    names = [str(x) for x in cols["name"]]
    base = np.asarray([x.split(".")[0] for x in names], dtype=object)
    suffix = np.asarray([x.split(".")[1] if "." in x else "" for x in names], dtype=object)
    layer = cols["layer"] == 0
    emb = ~layer & (cols["sublayer"] == Sublayer.EMBEDDING) & (base != "tied_embedding")
    col = np.isin(base, list(_COLUMN))
    row = np.isin(base, list(_ROW))
    split = np.isin(base, list(_SPLIT))
    fwd, dgrad, wgrad = (suffix == "", suffix == "dgrad", suffix == "wgrad")
    dim = np.full(len(names), _NONE)
    dim[col & fwd] = _N
    dim[col & dgrad] = _K
    dim[col & wgrad] = _M
    dim[row & fwd] = _K
    dim[row & (dgrad | wgrad)] = _N
    dim[split & (cols["batch"] > 0)] = _BATCH
    bias = suffix == "bias_grad"
    divide = np.where(col | split | (row & ~bias), _ALWAYS, np.where(layer, _SP_ONLY, _FIXED))
    section = np.where(layer, _LAYER, np.where(emb, _EMB, _HEAD))
    return {"section": section, "dim": dim, "divide": divide}


def _base_rows(workload: Workload, micro_batch: int) -> Columns:
    """One layer's and the outside sections' rows of a micro-batch (no optimizer rows)."""
    m1 = with_changes(workload.model, num_layers=1, share_layers=False)
    ops = [op for op in encoder_ops(m1, workload.run(micro_batch))
           if op.phase is not Phase.OPTIMIZER]
    return _columns(ops)


def _variant(cols: Columns, tags: Columns, t: int, sp: bool) -> Columns:
    """The rows as one of t tensor-parallel ranks sees them (t = 1: unchanged)."""
    if t == 1:
        return dict(cols)
    out = dict(cols)
    divide = tags["divide"]
    d = np.where((divide == _ALWAYS) | ((divide == _SP_ONLY) & sp), float(t), 1.0)
    dims = {c: cols[c].astype(float) for c in ("m", "n", "k", "batch")}

    def gemm_bytes() -> np.ndarray:
        return dims["batch"] * (dims["m"] * dims["k"] + dims["k"] * dims["n"]
                                + dims["m"] * dims["n"])

    before = gemm_bytes()
    dim = tags["dim"]
    for code, c in ((_M, "m"), (_N, "n"), (_K, "k"), (_BATCH, "batch")):
        dims[c] = np.where(dim == code, np.ceil(dims[c] / t), dims[c])
        out[c] = dims[c].astype(np.int64)
    after = gemm_bytes()
    byte_scale = np.where(dim != _NONE, after / np.where(before > 0, before, 1.0), 1.0 / d)
    out["flops"] = cols["flops"] / d
    out["bytes_read"] = cols["bytes_read"] * byte_scale
    out["bytes_written"] = cols["bytes_written"] * byte_scale
    out["saved_bytes"] = cols["saved_bytes"] / d
    out["elements"] = np.ceil(cols["elements"] / d).astype(np.int64)
    return out


_TABLES: dict[tuple[Any, ...], ComputeTable] = {}


def clear_compute_tables() -> None:
    """Forget cached compute tables (benchmarks time cold searches with it)."""
    _TABLES.clear()


def compute_table(workload: Workload, profile: DeviceProfile, batches: ArrayLike,
                  tps: ArrayLike) -> ComputeTable:
    """Predicted per-micro-batch times for every micro-batch size in `batches` and tensor-
    parallel size in `tps` (with and without sequence parallelism), from one `predict` call
    on the stacked rows of all variants. Cached per (workload, profile, sizes)."""
    bs = np.unique(np.asarray(batches, dtype=np.int64))
    ts = np.unique(np.asarray(tps, dtype=np.int64))
    key = (workload, profile, tuple(bs.tolist()), tuple(ts.tolist()))
    if key in _TABLES:
        return _TABLES[key]
    parts: list[Columns] = []
    sections: list[np.ndarray] = []
    keys: list[tuple[int, int, int, int]] = []  # (bi, ti, spi, rows)
    for bi, b in enumerate(bs):
        base = _base_rows(workload, int(b))
        tags = _tags(base)
        for ti, t in enumerate(ts):
            for spi in (0, 1):
                if t == 1 and spi:
                    continue  # no sequence parallelism without tensor parallelism
                parts.append(_variant(base, tags, int(t), bool(spi)))
                sections.append(tags["section"])
                keys.append((bi, ti, spi, len(base["name"])))
    update = _columns(_update_ops(workload))
    stacked = {c: np.concatenate([p[c] for p in parts] + [update[c]]) for c in update}
    pred = predict(OpTable.from_columns(stacked), profile, workload.precision)
    time = pred.columns["time_s"]
    shape = (len(bs), len(ts), 2)
    size = math.prod(shape)
    flat = np.repeat([np.ravel_multi_index(k[:3], shape) for k in keys], [k[3] for k in keys])
    n_rows = len(flat)
    section, phase = np.concatenate(sections), stacked["phase"][:n_rows]
    fwd = phase == Phase.FORWARD
    attn = np.isin(stacked["sublayer"][:n_rows], list(_ATTN_CORE))
    t_rows = time[:n_rows]

    def total(mask: np.ndarray, values: np.ndarray = t_rows) -> np.ndarray:
        return np.bincount(flat[mask], weights=values[mask], minlength=size).reshape(shape)

    written = stacked["bytes_written"][:n_rows] / stacked["count"][:n_rows]
    transient = np.zeros(size)
    np.maximum.at(transient, flat, written)
    saved = stacked["saved_bytes"][:n_rows]
    sec = {s: section == s for s in (_LAYER, _EMB, _HEAD)}
    upd_time = time[n_rows:]
    is_acc = update["name"] == "grad_accumulate"
    n_params = parameter_count(workload.model)
    table = ComputeTable(
        batches=bs, tps=ts,
        layer_fwd=total(sec[_LAYER] & fwd), layer_bwd=total(sec[_LAYER] & ~fwd),
        attn_fwd=total(sec[_LAYER] & fwd & attn),
        emb_fwd=total(sec[_EMB] & fwd), emb_bwd=total(sec[_EMB] & ~fwd),
        head_fwd=total(sec[_HEAD] & fwd), head_bwd=total(sec[_HEAD] & ~fwd),
        emb_saved=total(sec[_EMB] & fwd, saved), head_saved=total(sec[_HEAD] & fwd, saved),
        transient=transient.reshape(shape),
        optimizer_per_param=float(upd_time[~is_acc].sum()) / n_params,
        accumulate_per_param=float(upd_time[is_acc].sum()) / n_params,
    )
    # tp = 1 has no sequence-parallel variant: mirror it so lookups with sp = 0 or 1 agree
    one = ts == 1
    for arr in (table.layer_fwd, table.layer_bwd, table.attn_fwd, table.emb_fwd, table.emb_bwd,
                table.head_fwd, table.head_bwd, table.emb_saved, table.head_saved,
                table.transient):
        arr[:, one, 1] = arr[:, one, 0]
    if len(_TABLES) > 64:
        _TABLES.clear()
    _TABLES[key] = table
    return table


def _update_ops(workload: Workload) -> list[Op]:
    """The optimizer step of the whole model, and one gradient-accumulation add per parameter
    (as the analytic model's `grad_accumulate` rows), to be predicted and scaled per device."""
    m, run = workload.model, workload.run(1)
    n = parameter_count(m)
    ab = run.precision.act_bytes
    acc = Op("grad_accumulate", -1, Sublayer.OTHER, Category.ELEMENTWISE, Phase.BACKWARD_WEIGHT,
             elements=n, flops=n, bytes_read=2 * ab * n, bytes_written=ab * n)
    return [*optimizer_ops(m, run), acc]


# -- evaluation (vectorized over layouts) -------------------------------------------------------
TIME_KEYS = ("compute_s", "tp_comm_s", "pp_comm_s", "bubble_s", "dp_comm_s", "optimizer_s")
"""The parts an iteration's time splits into; they sum to iteration_s."""
MEMORY_KEYS = ("weights", "gradients", "optimizer_states", "activations", "transient")
"""The parts of a device's peak memory; they sum to memory_bytes."""


def evaluate_arrays(workload: Workload, cluster: Cluster, arrays: dict[str, np.ndarray],
                    table: ComputeTable | None = None) -> dict[str, np.ndarray]:
    """Cost every layout given as equal-length arrays: dp, tp, pp, micro_batches, zero
    (0-3), checkpoint (codes, see `CHECKPOINTS`), sp (bool), schedule (codes, see
    `SCHEDULES`), virtual_stages. Layouts must be valid (`check_layout`). Returns arrays of
    the time parts (`TIME_KEYS`), iteration_s, tokens_per_s, bubble_fraction, the memory
    parts of the peak stage (`MEMORY_KEYS`), memory_bytes, fits, micro_batch and recompute_s
    (part of compute_s)."""
    m, w = workload.model, workload
    dp, tp, pp, mb = (np.asarray(arrays[k], dtype=np.int64)
                      for k in ("dp", "tp", "pp", "micro_batches"))
    zero, ck = np.asarray(arrays["zero"]), np.asarray(arrays["checkpoint"])
    sp, sch = np.asarray(arrays["sp"], dtype=bool), np.asarray(arrays["schedule"])
    v = np.where(sch == 2, np.asarray(arrays["virtual_stages"], dtype=float), 1.0)
    b = w.global_batch // (dp * mb)
    if table is None:
        table = compute_table(w, cluster.profile, np.unique(b), np.unique(tp))
    bi, ti = table.index(b, tp)
    si = sp.astype(np.int64)

    def look(arr: np.ndarray) -> np.ndarray:
        return arr[bi, ti, si]

    lf, lb, la = look(table.layer_fwd), look(table.layer_bwd), look(table.attn_fwd)
    ef, eb, hf, hb = (look(table.emb_fwd), look(table.emb_bwd), look(table.head_fwd),
                      look(table.head_bwd))
    topo = cluster.topology
    ab = w.precision.act_bytes
    lps = m.num_layers / pp
    single = (pp == 1).astype(float)
    rec = np.where(ck == 2, lf, np.where(ck == 1, la, 0.0))

    # tensor parallel: two all-reduces (or RS + AG) per layer forward, two backward
    act_bytes = b * w.seq * m.hidden * ab
    ar = topo.time(Collective.ALL_REDUCE, act_bytes, tp)
    rsag = (topo.time(Collective.REDUCE_SCATTER, act_bytes, tp)
            + topo.time(Collective.ALL_GATHER, act_bytes, tp))
    one = np.where(sp, rsag, ar)
    tp_layer = one * (4.0 + 2.0 * (ck == 2))
    # pipeline: activation forward and gradient back per micro-batch (and chunk)
    send = topo.time(Collective.SEND_RECV, act_bytes / tp, np.where(pp > 1, 2, 1), tp * dp)
    p2p = 2.0 * v * send

    body = lps * (lf + lb + rec)
    c_first = body + ef + eb + single * (hf + hb)
    c_last = body + hf + hb + single * (ef + eb)
    # embedding all-reduce (forward, first stage) and MLM-head all-reduce (backward, last)
    tp_stage = lps * tp_layer + one * (1.0 + single)
    step_first = c_first + tp_stage + p2p
    step_last = c_last + tp_stage + p2p
    first_slow = step_first >= step_last
    step = np.maximum(step_first, step_last)
    bubble = (pp - 1) / v * step

    # data parallel / ZeRO
    psi_first, psi_last = stage_params(m, tp, pp)
    psi_layer = layer_params_per_device(m, tp)
    bwd_first = lps * (lb + rec) + eb + single * hb
    bwd_last = lps * (lb + rec) + hb + single * eb
    fwd_first = lps * lf + ef + single * hf
    fwd_last = lps * lf + hf + single * ef
    tied = np.where(pp > 1, topo.time(Collective.ALL_REDUCE, m.vocab_size * m.emb / tp * ab,
                                      2, (pp - 1) * tp * dp), 0.0)

    def grad_sync(psi: np.ndarray, fwd: np.ndarray, bwd: np.ndarray) -> np.ndarray:
        gbytes = psi * ab
        k = np.ceil(gbytes / DDP_BUCKET_BYTES)
        ar_all = k * topo.time(Collective.ALL_REDUCE, gbytes / k, dp, tp)
        rs_all = k * topo.time(Collective.REDUCE_SCATTER, gbytes / k, dp, tp)
        gather = topo.time(Collective.ALL_GATHER, gbytes, dp, tp)  # 16-bit weights
        units = np.ceil(lps) + 1.0  # ZeRO-3 gathers layer by layer (+ embeddings/heads)
        ag_unit = units * topo.time(Collective.ALL_GATHER, gbytes / units, dp, tp)
        rs_unit = units * topo.time(Collective.REDUCE_SCATTER, gbytes / units, dp, tp)
        z0 = bucketed_exposed(ar_all, k, bwd)
        z1 = bucketed_exposed(rs_all, k, bwd) + gather
        z2 = mb * bucketed_exposed(rs_all, k, bwd) + gather
        z3 = mb * (bucketed_exposed(ag_unit, units, fwd)
                   + bucketed_exposed(ag_unit + rs_unit, units, bwd))
        out = np.where(zero == 0, z0, np.where(zero == 1, z1, np.where(zero == 2, z2, z3)))
        return out + tied

    dp_comm = np.maximum(grad_sync(psi_first, fwd_first, bwd_first),
                         grad_sync(psi_last, fwd_last, bwd_last))
    psi_max = np.maximum(psi_first, psi_last)
    shard = np.where(zero >= 1, dp, 1)
    optimizer = table.optimizer_per_param * psi_max / shard
    accumulate = (mb - 1) * table.accumulate_per_param * psi_max / np.where(zero >= 2, dp, 1)

    c_slow = np.where(first_slow, c_first, c_last)
    out: dict[str, np.ndarray] = {
        "micro_batch": b,
        "compute_s": mb * c_slow + accumulate,
        "recompute_s": mb * lps * rec,
        "tp_comm_s": mb * tp_stage,
        "pp_comm_s": mb * p2p,
        "bubble_s": bubble,
        "dp_comm_s": dp_comm,
        "optimizer_s": optimizer,
    }
    out["iteration_s"] = sum(out[k] for k in TIME_KEYS)
    out["tokens_per_s"] = w.tokens / out["iteration_s"]
    out["bubble_fraction"] = bubble_fraction(sch, pp, mb, v)

    # memory of the first and the last stage; the device peak is the larger
    kw: dict[str, Any] = dict(seq=w.seq, micro_batch=b, hidden=m.hidden, heads=m.heads,
                              intermediate=m.intermediate, tp=tp, sp=sp, checkpoint=ck,
                              act_bytes=ab, dropout=w.dropout)
    per_layer = layer_activation_bytes(**kw)
    working = recompute_working_bytes(**kw)
    f_first, f_last = in_flight(sch, pp, mb, v)
    edge_first = np.where(pp == 1, 1.0, np.where(sch == 0, mb, np.minimum(mb, pp)))
    edge_last = np.where(pp == 1, 1.0, np.where(sch == 0, mb, 1.0))
    es, hs = look(table.emb_saved), look(table.head_saved)
    acts_first = lps * per_layer * f_first + es * edge_first + single * hs + working
    acts_last = lps * per_layer * f_last + hs * edge_last + single * es + working
    transient = look(table.transient)
    static_kw: dict[str, Any] = dict(precision=w.precision, optimizer=w.optimizer,
                                     layer_params=psi_layer)
    s_first = zero_static_bytes(psi_first, dp, zero, **static_kw)
    s_last = zero_static_bytes(psi_last, dp, zero, **static_kw)
    tot_first = sum(s_first.values()) + acts_first + transient
    tot_last = sum(s_last.values()) + acts_last + transient
    first_peak = tot_first >= tot_last
    for key in ("weights", "gradients", "optimizer_states"):
        out[key] = np.where(first_peak, s_first[key], s_last[key])
    out["activations"] = np.where(first_peak, acts_first, acts_last)
    out["transient"] = transient
    out["memory_bytes"] = np.maximum(tot_first, tot_last)
    out["fits"] = out["memory_bytes"] <= cluster.memory_bytes
    return out


@dataclass(frozen=True, slots=True)
class LayoutResult:
    """One layout's predicted iteration: time parts, throughput, memory per device."""

    layout: Layout
    micro_batch: int
    """Sequences per micro-batch per replica."""
    iteration_s: float
    tokens_per_s: float
    time: dict[str, float]
    """Seconds per part (`TIME_KEYS`, summing to iteration_s) plus recompute_s (in compute_s)."""
    bubble_fraction: float
    memory: dict[str, float]
    """Bytes per part of the peak stage (`MEMORY_KEYS`), summing to memory_bytes."""
    memory_bytes: float
    memory_capacity: float
    fits: bool
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        """Plain values, the layout's fields included (enums as text)."""
        out = asdict(self)
        out["layout"] = {k: (v.value if isinstance(v, StrEnum) else int(v)
                             if isinstance(v, ZeroStage) else v)
                         for k, v in asdict(self.layout).items()}
        return out


def layout_arrays(layout: Layout) -> dict[str, np.ndarray]:
    """One layout as the length-1 arrays `evaluate_arrays` takes."""
    return {
        "dp": np.array([layout.dp]), "tp": np.array([layout.tp]), "pp": np.array([layout.pp]),
        "micro_batches": np.array([layout.micro_batches]),
        "zero": np.array([int(layout.zero)]),
        "checkpoint": np.array([CHECKPOINTS.index(layout.checkpoint)]),
        "sp": np.array([layout.sequence_parallel]),
        "schedule": np.array([SCHEDULES.index(layout.schedule)]),
        "virtual_stages": np.array([layout.virtual_stages]),
    }


def evaluate(layout: Layout, workload: Workload, cluster: Cluster) -> LayoutResult:
    """Predict one layout's iteration (see the module docstring); raises `BertscopeError`
    when the layout does not fit the workload or cluster (`check_layout`)."""
    check_layout(layout, workload, cluster)
    r = {k: v[0] for k, v in evaluate_arrays(workload, cluster, layout_arrays(layout)).items()}
    notes = (cluster.topology.notes,) if cluster.topology.notes else ()
    return LayoutResult(
        layout=layout, micro_batch=int(r["micro_batch"]), iteration_s=float(r["iteration_s"]),
        tokens_per_s=float(r["tokens_per_s"]),
        time={k: float(r[k]) for k in (*TIME_KEYS, "recompute_s")},
        bubble_fraction=float(r["bubble_fraction"]),
        memory={k: float(r[k]) for k in MEMORY_KEYS}, memory_bytes=float(r["memory_bytes"]),
        memory_capacity=cluster.memory_bytes, fits=bool(r["fits"]), notes=notes)


def _enum(kind: Any, value: Any, what: str) -> Any:
    if isinstance(value, kind):
        return value
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(m.value for m in kind)
        raise BertscopeError(f"unknown {what} {value!r}; choose one of: {choices}") from None


__all__ = [
    "DDP_BUCKET_BYTES",
    "MEMORY_KEYS",
    "SCHEDULES",
    "TIME_KEYS",
    "Cluster",
    "ComputeTable",
    "Layout",
    "LayoutResult",
    "Schedule",
    "Workload",
    "bubble_fraction",
    "bubble_overhead",
    "check_layout",
    "clear_compute_tables",
    "compute_table",
    "evaluate",
    "evaluate_arrays",
    "in_flight",
    "layout_arrays",
]
