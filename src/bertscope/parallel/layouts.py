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
  the op table per layout, made once per (micro-batch size, t, sequence parallel). Which rows
  split, and along which dimension, comes from the op table's role columns (`Op.tp_split`,
  `Op.pp_stage`) that the analytic model labels, never from op names (`compute`).
- **tensor-parallel communication**, exposed (it sits between dependent ops): per layer two
  all-reduces of the b s h activations in forward and two in backward (Megatron's f and g
  operators), two more in forward again under full recomputation; sequence parallelism
  (Korthikanti et al. 2022) turns each into a reduce-scatter plus an all-gather, and
  gathers the column-parallel GEMMs' sharded input again in backward (two all-gathers per
  layer). One more in the vocabulary-parallel embedding (forward) and MLM head (backward).
  With `Layout.overlap_tp_comm` each collective runs beside the GEMM the schedule allows
  (Transformer Engine's userbuffer pipelining, Megatron's asynchronous backward
  collectives): exposed = max(0, comm - that GEMM's time) (`overlap`).
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
  `Layout.overlap_grad_reduce` takes Megatron's buckets (max(40M, 1M x dp) parameters) and
  lets each stage reduce in its pipeline cool-down; `overlap_param_gather` moves ZeRO-1's
  parameter all-gather behind the next forward, its first bucket exposed (`overlap`).
- **optimizer**: the predicted update of the device's (ZeRO: its shard of the) parameters.

Memory per device is the larger of the first and last pipeline stage: ZeRO's static memory
plus activations (`parallel.memory`) times the micro-batches a stage holds at its peak, plus
the largest single op output.

This module is the layout model's public face; the code lives in `pipeline` (schedules and
their formulas), `job` (`Workload`, `Cluster`, `check_layout`; the `Job` and its `Layout` are
`bertscope.job`'s), `compute` (roles ->
per-tp variants -> predicted per-micro-batch times) and `evaluation` (the vectorized time and
memory of every layout, `evaluate`).
"""

from __future__ import annotations

from bertscope.job import Job, Layout, Schedule
from bertscope.parallel.compute import ComputeTable, clear_compute_tables, compute_table
from bertscope.parallel.evaluation import (
    DDP_BUCKET_BYTES,
    MEMORY_KEYS,
    TIME_KEYS,
    LayoutResult,
    evaluate,
    evaluate_arrays,
    layout_arrays,
)
from bertscope.parallel.job import Cluster, Workload, check_layout
from bertscope.parallel.pipeline import SCHEDULES, bubble_fraction, bubble_overhead, in_flight

__all__ = [
    "DDP_BUCKET_BYTES",
    "MEMORY_KEYS",
    "SCHEDULES",
    "TIME_KEYS",
    "Cluster",
    "ComputeTable",
    "Job",
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
