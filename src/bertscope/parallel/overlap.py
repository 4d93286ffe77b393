"""Communication overlap as schedule terms: what each collective leaves exposed beside the
compute the schedule lets it run with (never a multiplier; `collectives.exposed_beyond`,
`pipelined_exposed`, `bucketed_exposed`).

Tensor parallelism, per layer and micro-batch (Megatron-LM's f/g operators, Shoeybi et al.
2019; with sequence parallelism their all-gather / reduce-scatter form, Korthikanti et al.
2022, arXiv:2205.05198, section 4.2.2). Each block (attention, feed-forward) has a
column-parallel GEMM group C (QKV; the first feed-forward GEMMs) and a row-parallel GEMM R
(the output projections). With n = b s h activation bytes and t ranks:

    without sequence parallelism   forward  all-reduce after R                      (1 / block)
                                   backward all-reduce of C's data gradient         (1 / block)
    with sequence parallelism      forward  all-gather before C, reduce-scatter after R
                                   backward all-gather of dY before R's data gradient,
                                            reduce-scatter of C's data gradient, and the
                                            all-gather of C's sequence-sharded input for
                                            C's weight gradient (Megatron saves that input
                                            sharded and gathers it again in backward:
                                            `LinearWithGradAccumulationAndAsyncCommunication.
                                            backward`, megatron/core/tensor_parallel/layers.py,
                                            NVIDIA/Megatron-LM; the memory model keeps it
                                            sharded, `compute._tags`)

Without overlap every collective is exposed. With `Layout.overlap_tp_comm`:

- the backward collective of C's data gradient (all-reduce, or reduce-scatter) runs beside
  C's weight-gradient GEMM, which does not need it (Megatron's asynchronous tensor-parallel
  all-reduce, Korthikanti et al. 2022 section 6.2: "we overlap all-reduce communication with
  the linear weight's gradient computation"; Transformer Engine's bulk overlap
  `BULK_OVERLAP_RS`): exposed = max(0, comm - C's weight gradient);
- with sequence parallelism the re-gather of C's input runs beside C's data-gradient GEMM
  (Megatron's asynchronous all-gather; TE's `BULK_OVERLAP_AG`): max(0, AG - C's dgrad);
- with sequence parallelism the forward all-gather and reduce-scatter and the backward
  all-gather of dY are pipelined with the GEMM they feed or drain, in t chunks (TE's
  userbuffer ring exchange, `SPLIT_PIPELINED_AG_P2P` / `SPLIT_PIPELINED_RS_P2P` in
  transformer_engine/common/userbuffers/comm_gemm_overlap.h, NVIDIA/TransformerEngine):
  max(0, comm - GEMM (t - 1)/t) (`collectives.pipelined_exposed`);
- the forward all-reduce without sequence parallelism stays exposed (TE's userbuffer
  overlap needs sequence parallelism; Megatron-LM refuses --tp-comm-overlap without it).

Each GEMM hides at most one collective, and never more than its own time: the overlapped
compute is counted once, in compute, and slowed by nothing (contention for SMs and memory
bandwidth is left out: an optimistic bound).
"""

from __future__ import annotations

import numpy as np

from bertscope.parallel.collectives import ArrayLike, exposed_beyond, pipelined_exposed
from bertscope.parallel.compute import Block, Pass, Split


def tp_layer_comm(ar: ArrayLike, rs: ArrayLike, ag: ArrayLike, sp: ArrayLike,
                  overlap: ArrayLike, tp: ArrayLike,
                  windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) exposed tensor-parallel seconds of one layer and micro-batch (the
    module docstring): `ar`, `rs`, `ag` one collective of the layer's b s h activations,
    `sp` and `overlap` per layout (bool), `windows` the layout's GEMM seconds [..., block,
    split, pass] (`ComputeTable.gemm_windows` looked up). Recomputation's forward under
    full recomputation repeats the forward's terms (the caller adds them)."""
    ar, rs, ag = (np.asarray(x, dtype=float) for x in (ar, rs, ag))
    sp, ov = np.asarray(sp, dtype=bool), np.asarray(overlap, dtype=bool)
    t = np.asarray(tp, dtype=float)
    one = np.where(sp, rs + ag, ar)
    plain_fwd = 2.0 * one
    plain_bwd = 2.0 * one + np.where(sp, 2.0 * ag, 0.0)

    def gemm(block: Block, split: Split, ps: Pass) -> np.ndarray:
        return windows[..., block, split, ps]

    fwd_sp = sum(pipelined_exposed(ag, gemm(b, Split.COLUMN, Pass.FORWARD), t)
                 + pipelined_exposed(rs, gemm(b, Split.ROW, Pass.FORWARD), t) for b in Block)
    bwd_sp = sum(pipelined_exposed(ag, gemm(b, Split.ROW, Pass.DATA_GRAD), t)
                 + exposed_beyond(rs, gemm(b, Split.COLUMN, Pass.WEIGHT_GRAD))
                 + exposed_beyond(ag, gemm(b, Split.COLUMN, Pass.DATA_GRAD)) for b in Block)
    bwd_ar = sum(exposed_beyond(ar, gemm(b, Split.COLUMN, Pass.WEIGHT_GRAD)) for b in Block)
    fwd = np.where(ov, np.where(sp, fwd_sp, plain_fwd), plain_fwd)
    bwd = np.where(ov, np.where(sp, bwd_sp, bwd_ar), plain_bwd)
    return fwd, bwd


__all__ = ["tp_layer_comm"]
