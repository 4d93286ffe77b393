"""Vectorized evaluation: the time and memory of every layout given as arrays, at once.

An iteration of a layout splits into (all per device, seconds; see `bertscope.parallel.layouts`
for the model and its sources): compute (`compute.ComputeTable`'s per-micro-batch times, times
the layers of a stage and the micro-batches, plus recomputation and gradient accumulation),
tensor-parallel communication, pipeline send/recv and bubble, exposed data-parallel / ZeRO
communication, and the optimizer step. Memory per device is the larger of the first and last
pipeline stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from bertscope.analytic.families import vocab_multiple
from bertscope.analytic.memory import gradient_bytes
from bertscope.config import config_dict
from bertscope.job import Job, Layout, ZeroStage
from bertscope.parallel.collectives import Collective, bucketed_exposed, exposed_beyond
from bertscope.parallel.compute import ComputeTable, compute_table
from bertscope.parallel.job import Cluster, Workload, check_layout
from bertscope.parallel.memory import (
    FULL_CODE,
    SELECTIVE_CODE,
    layer_params_per_device,
    padded_stage_params,
    segment_memory_per_device,
    zero_static_bytes,
)
from bertscope.parallel.overlap import tp_layer_comm
from bertscope.parallel.pipeline import (
    bubble_fraction,
    edge_in_flight,
    in_flight,
    virtual_factor,
)

DDP_BUCKET_BYTES = 25 * 2**20
"""PyTorch DDP's default gradient bucket, bucket_cap_mb = 25."""
MEGATRON_BUCKET_PARAMS = 40_000_000
"""Megatron-Core's default gradient bucket with overlapped reduction: max(40M, 1M x dp)
parameters (`DistributedDataParallelConfig.bucket_size`, megatron/core/distributed/
distributed_data_parallel_config.py, NVIDIA/Megatron-LM)."""
MEGATRON_BUCKET_PARAMS_PER_REPLICA = 1_000_000
"""... and 1M parameters per data-parallel replica (larger DP groups, larger buckets)."""
OVERLAP_KEYS = ("overlap_tp_comm", "overlap_grad_reduce", "overlap_param_gather")
"""Layout flags of communication overlap, as optional bool arrays of `evaluate_arrays`
(`job.Layout`'s fields of the same names; absent: off)."""

TIME_KEYS = ("compute_s", "tp_comm_s", "pp_comm_s", "bubble_s", "dp_comm_s", "optimizer_s")
"""The parts an iteration's time splits into; they sum to iteration_s."""
MEMORY_KEYS = ("weights", "gradients", "optimizer_states", "activations", "segment_memory",
               "transient")
"""The parts of a device's peak memory; they sum to memory_bytes."""


def evaluate_arrays(workload: Workload, cluster: Cluster, arrays: dict[str, np.ndarray],
                    table: ComputeTable | None = None) -> dict[str, np.ndarray]:
    """Cost every layout given as equal-length arrays: dp, tp, pp, micro_batches, zero
    (0-3), checkpoint (codes, `Checkpoint.code`), sp (bool), schedule (codes,
    `Schedule.code`), virtual_stages, and optionally global_batch (sequences per step, one per
    layout: a sweep varies it; default the workload's) and the overlap flags (`OVERLAP_KEYS`,
    bool; default off; `parallel.overlap`). Layouts must be valid
    (`check_layout`, with each layout's global batch). Returns arrays of
    the time parts (`TIME_KEYS`), iteration_s, tokens_per_s, bubble_fraction, the memory
    parts of the peak stage (`MEMORY_KEYS`), memory_bytes, fits, micro_batch, recompute_s
    (part of compute_s), accumulate_s (gradient accumulation, part of compute_s),
    weight_cast_s (weight casts run once per step, part of compute_s: fp8 under per_step or
    kept) and one micro-batch step of the slower stage: step_fwd_compute_s, step_fwd_comm_s,
    step_bwd_compute_s, step_bwd_comm_s (they sum to compute_s / micro_batches less
    accumulation and the per-step casts, plus (tp_comm_s + pp_comm_s) / micro_batches): what
    a timeline lays out."""
    m, w = workload.model, workload
    dp, tp, pp, mb = (np.asarray(arrays[k], dtype=np.int64)
                      for k in ("dp", "tp", "pp", "micro_batches"))
    zero, ck = np.asarray(arrays["zero"]), np.asarray(arrays["checkpoint"])
    sp, sch = np.asarray(arrays["sp"], dtype=bool), np.asarray(arrays["schedule"])
    v = virtual_factor(sch, arrays["virtual_stages"])
    gb = np.asarray(arrays.get("global_batch", w.global_batch), dtype=np.int64)
    b = gb // (dp * mb)
    n = len(dp)
    o_tp, o_grad, o_param = (np.broadcast_to(np.asarray(arrays.get(k, False), dtype=bool), (n,))
                             for k in OVERLAP_KEYS)
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
    lps = m.stack_layers / pp
    single = (pp == 1).astype(float)
    full = ck == FULL_CODE
    rec = np.where(full, lf, np.where(ck == SELECTIVE_CODE, la, 0.0))

    # tensor parallel: two all-reduces (or RS + AG) per layer forward, two backward (with
    # sequence parallelism two more all-gathers of the column-parallel GEMMs' inputs), each
    # exposed or overlapped with the GEMMs beside it (`parallel.overlap`)
    act_bytes = b * w.computed_per_sequence * m.hidden * ab  # seq, or unpadded real tokens
    ar = topo.time(Collective.ALL_REDUCE, act_bytes, tp)
    rs = topo.time(Collective.REDUCE_SCATTER, act_bytes, tp)
    ag = topo.time(Collective.ALL_GATHER, act_bytes, tp)
    one = np.where(sp, rs + ag, ar)
    tp_layer_fwd, tp_layer_bwd = tp_layer_comm(ar, rs, ag, sp, o_tp, tp,
                                               table.gemm_windows[bi, ti, si])
    tp_layer = tp_layer_fwd * (1.0 + full) + tp_layer_bwd
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
    psi_first, psi_last = padded_stage_params(m, w.run, tp, pp)  # the padded vocabulary
    psi_layer = layer_params_per_device(m, tp)
    vocab_multiples = np.array([vocab_multiple(w.run, int(t)) for t in tp], dtype=float)
    bwd_first = lps * (lb + rec) + eb + single * hb
    bwd_last = lps * (lb + rec) + hb + single * eb
    fwd_first = lps * lf + ef + single * hf
    fwd_last = lps * lf + hf + single * ef
    # gradients travel in the dtype they are held in: fp32 main gradients where the recipe
    # keeps 16-bit weights or fuses accumulation (Megatron-LM reduces bf16 runs' gradients
    # in fp32: arguments.py, validate_args), else the working precision's as before
    grad_b = gradient_bytes(w.run)
    vocab = np.ceil(m.vocab_size / vocab_multiples) * vocab_multiples  # padded, per layout
    tied = np.where(pp > 1, topo.time(Collective.ALL_REDUCE,
                                      vocab * m.emb / tp * grad_b, 2,
                                      (pp - 1) * tp * dp), 0.0)
    # one micro-batch step of the slower stage, forward and backward (recompute runs in
    # backward), each with its exposed communication: TP collectives (forward: the layers'
    # forward ones and the embedding's; backward the rest) and half the send/recv each way
    c_slow = np.where(first_slow, c_first, c_last)
    tp_fwd = lps * tp_layer_fwd + np.where(first_slow | (pp == 1), one, 0.0)
    step_fwd = np.where(first_slow, fwd_first, fwd_last)
    step_bwd = c_slow - step_fwd + tp_stage - tp_fwd + p2p / 2
    # Megatron's overlapped reduce starts on each stage after its own last backward: the
    # last stage ends its last backward (p - 1)/v backward steps before the first stage
    # (the pipeline's cool-down) and reduces in that idle time
    cooldown = np.where(o_grad, (pp - 1) / v * step_bwd, 0.0)
    meg_params = np.maximum(MEGATRON_BUCKET_PARAMS, MEGATRON_BUCKET_PARAMS_PER_REPLICA * dp)

    def grad_sync(psi: np.ndarray, fwd: np.ndarray, bwd: np.ndarray,
                  idle: np.ndarray) -> np.ndarray:
        gbytes = psi * ab  # 16-bit weights (gathered)
        rbytes = psi * grad_b  # gradients (reduced)
        k = np.ceil(rbytes / DDP_BUCKET_BYTES)
        ar_all = k * topo.time(Collective.ALL_REDUCE, rbytes / k, dp, tp)
        rs_all = k * topo.time(Collective.REDUCE_SCATTER, rbytes / k, dp, tp)
        gather = topo.time(Collective.ALL_GATHER, gbytes, dp, tp)
        # Megatron's buckets (`overlap_grad_reduce`, `overlap_param_gather`): the reduce
        # hides behind the last micro-batch's backward but its last bucket, then the stage's
        # cool-down; the updated parameters' gather behind the first micro-batch's forward
        # but its first bucket (`bucketed_exposed`)
        km = np.maximum(np.ceil(psi / meg_params), 1.0)
        ar_meg = exposed_beyond(bucketed_exposed(
            km * topo.time(Collective.ALL_REDUCE, rbytes / km, dp, tp), km, bwd), idle)
        rs_meg = exposed_beyond(bucketed_exposed(
            km * topo.time(Collective.REDUCE_SCATTER, rbytes / km, dp, tp), km, bwd), idle)
        ag_meg = bucketed_exposed(km * topo.time(Collective.ALL_GATHER, gbytes / km, dp, tp),
                                  km, fwd)
        reduce_ar = np.where(o_grad, ar_meg, bucketed_exposed(ar_all, k, bwd))
        reduce_rs = np.where(o_grad, rs_meg, bucketed_exposed(rs_all, k, bwd))
        gather = np.where(o_param, ag_meg, gather)
        units = np.ceil(lps) + 1.0  # ZeRO-3 gathers layer by layer (+ embeddings/heads)
        ag_unit = units * topo.time(Collective.ALL_GATHER, gbytes / units, dp, tp)
        rs_unit = units * topo.time(Collective.REDUCE_SCATTER, rbytes / units, dp, tp)
        z0 = reduce_ar
        z1 = reduce_rs + gather
        z2 = mb * reduce_rs + gather
        z3 = mb * (bucketed_exposed(ag_unit, units, fwd)
                   + bucketed_exposed(ag_unit + rs_unit, units, bwd))
        out = np.where(zero == ZeroStage.NONE, z0, np.where(
            zero == ZeroStage.OPTIMIZER, z1, np.where(zero == ZeroStage.GRADIENTS, z2, z3)))
        return out + tied

    dp_comm = np.maximum(grad_sync(psi_first, fwd_first, bwd_first, np.zeros(n)),
                         grad_sync(psi_last, fwd_last, bwd_last, cooldown))
    psi_max = np.maximum(psi_first, psi_last)
    shard = np.where(zero >= ZeroStage.OPTIMIZER, dp, 1)
    optimizer = table.optimizer_per_param * psi_max / shard
    accumulate = (mb - 1) * table.accumulate_per_param * psi_max / np.where(
        zero >= ZeroStage.GRADIENTS, dp, 1)

    # rows run once per step, not per micro-batch (fp8 weight casts under per_step / kept:
    # `ComputeTable.layer_once`), on the slower stage
    lo, eo, ho = look(table.layer_once), look(table.emb_once), look(table.head_once)
    weight_cast = np.where(first_slow, lps * lo + eo + single * ho, lps * lo + ho + single * eo)

    out: dict[str, np.ndarray] = {
        "micro_batch": b,
        "compute_s": mb * c_slow + accumulate + weight_cast,
        "recompute_s": mb * lps * rec,
        "tp_comm_s": mb * tp_stage,
        "pp_comm_s": mb * p2p,
        "bubble_s": bubble,
        "dp_comm_s": dp_comm,
        "optimizer_s": optimizer,
    }
    out["step_fwd_compute_s"] = step_fwd
    out["step_bwd_compute_s"] = c_slow - out["step_fwd_compute_s"]
    out["step_fwd_comm_s"] = tp_fwd + p2p / 2
    out["step_bwd_comm_s"] = tp_stage - tp_fwd + p2p / 2
    out["accumulate_s"] = accumulate
    out["weight_cast_s"] = weight_cast
    out["iteration_s"] = sum(out[k] for k in TIME_KEYS)
    out["tokens_per_s"] = gb * w.tokens_per_sequence / out["iteration_s"]  # real tokens
    out["bubble_fraction"] = bubble_fraction(sch, pp, mb, v)

    # memory of the first and the last stage; the device peak is the larger
    # per layer, from the op table's saved bytes as each rank keeps them (the roles divide
    # them: `compute._variant`); with the paper's assumptions these are Korthikanti et al.'s
    # Table 2 terms (`memory.layer_activation_bytes`; tested)
    kept, core = look(table.layer_saved), look(table.core_saved)
    layer_in = look(table.layer_input) / np.where(sp, tp, 1)
    selective = ck == SELECTIVE_CODE
    per_layer = np.where(full, layer_in, np.where(selective, kept - core, kept))
    working = np.where(full, kept, np.where(selective, core, 0.0))
    f_first, f_last = in_flight(sch, pp, mb, v)
    edge_first, edge_last = edge_in_flight(sch, pp, mb)
    es, hs = look(table.emb_saved), look(table.head_saved)
    acts_first = lps * per_layer * f_first + es * edge_first + single * hs + working
    acts_last = lps * per_layer * f_last + hs * edge_last + single * es + working
    transient = look(table.transient)
    static_kw: dict[str, Any] = dict(precision=w.precision, optimizer=w.optimizer,
                                     layer_params=psi_layer, grad_bytes=gradient_bytes(w.run))
    s_first = zero_static_bytes(psi_first, dp, zero, **static_kw)
    s_last = zero_static_bytes(psi_last, dp, zero, **static_kw)
    # the previous segment's states (Transformer-XL, XLNet; 0 otherwise): each stage its
    # L/p layers', for all b x mb sequences of the rank (one memory per micro-batch slot)
    seg = segment_memory_per_device(m, sequences=b * mb, pp=pp, tp=tp, sp=sp, act_bytes=ab)
    tot_first = sum(s_first.values()) + acts_first + seg + transient
    tot_last = sum(s_last.values()) + acts_last + seg + transient
    first_peak = tot_first >= tot_last
    for key in ("weights", "gradients", "optimizer_states"):
        out[key] = np.where(first_peak, s_first[key], s_last[key])
    out["activations"] = np.where(first_peak, acts_first, acts_last)
    out["segment_memory"] = seg
    out["transient"] = transient
    out["memory_bytes"] = np.maximum(tot_first, tot_last)
    out["fits"] = out["memory_bytes"] <= cluster.memory_bytes
    return out


@dataclass(frozen=True, slots=True)
class LayoutResult:
    """One job's predicted iteration on a cluster: time parts, throughput, memory per device."""

    job: Job
    """The job costed: its layout, micro-batches and recomputation."""
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

    @property
    def layout(self) -> Layout:
        """How the job is spread (`job.layout`)."""
        return self.job.layout

    @property
    def micro_batch(self) -> int:
        """Sequences per micro-batch per replica (`job.run.batch`)."""
        return self.job.run.batch

    def as_dict(self) -> dict[str, Any]:
        """Plain values: the layout's fields, micro-batches, recomputation and the results
        (enums as text)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "job"}
        out["layout"] = {**config_dict(self.layout),
                         "micro_batches": self.job.run.micro_batches,
                         "checkpoint": self.job.run.checkpoint.value}
        out["micro_batch"] = self.micro_batch
        out["notes"] = list(self.notes)
        return out


def layout_arrays(job: Job) -> dict[str, np.ndarray]:
    """One job's layout, micro-batches and recomputation as the length-1 arrays
    `evaluate_arrays` takes."""
    lay = job.layout
    return {
        "dp": np.array([lay.dp]), "tp": np.array([lay.tp]), "pp": np.array([lay.pp]),
        "micro_batches": np.array([job.run.micro_batches]),
        "zero": np.array([int(lay.zero)]),
        "checkpoint": np.array([job.run.checkpoint.code]),
        "sp": np.array([lay.sequence_parallel]),
        "schedule": np.array([lay.schedule.code]),
        "virtual_stages": np.array([lay.virtual_stages]),
        **{k: np.array([getattr(lay, k)]) for k in OVERLAP_KEYS},
    }


def evaluate(job: Job, cluster: Cluster) -> LayoutResult:
    """Predict one job's iteration on `cluster` (see the module docstring); raises
    `BertscopeError` when the job does not fit the cluster (`check_layout`)."""
    check_layout(job, cluster)
    workload = Workload.of(job)
    r = {k: v[0] for k, v in evaluate_arrays(workload, cluster, layout_arrays(job)).items()}
    notes = (cluster.topology.notes,) if cluster.topology.notes else ()
    return LayoutResult(
        job=job, iteration_s=float(r["iteration_s"]), tokens_per_s=float(r["tokens_per_s"]),
        time={k: float(r[k]) for k in (*TIME_KEYS, "recompute_s")},
        bubble_fraction=float(r["bubble_fraction"]),
        memory={k: float(r[k]) for k in MEMORY_KEYS}, memory_bytes=float(r["memory_bytes"]),
        memory_capacity=cluster.memory_bytes, fits=bool(r["fits"]), notes=notes)


__all__ = ["DDP_BUCKET_BYTES", "MEGATRON_BUCKET_PARAMS", "MEGATRON_BUCKET_PARAMS_PER_REPLICA",
           "MEMORY_KEYS", "OVERLAP_KEYS", "TIME_KEYS", "LayoutResult", "evaluate",
           "evaluate_arrays", "layout_arrays"]
