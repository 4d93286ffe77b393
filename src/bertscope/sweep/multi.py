"""Multi-device points of a sweep: layouts (dp x tp x pp, ZeRO) timed by the distributed model.

A configuration with more than one device (any of `dp`, `tp`, `pp` above 1, or a ZeRO stage)
is a distributed training job: `batch` sequences per micro-batch, `micro_batches` of them per
data-parallel replica, so a step's global batch is batch x micro_batches x dp. It is timed by
`parallel.evaluate_arrays` (the model `bertscope distributed` prints), which is vectorized over
layouts: one call per (model sizes, sequence length, device, knob set, device count) covers
every batch, micro-batch count and layout of that slice, the per-micro-batch compute table
(`parallel.compute.compute_table`, one `predict` of the op table's rows) shared by them.

Rows carry the time parts of the layout (compute, tensor- and pipeline-parallel
communication, bubble, exposed data-parallel communication, optimizer) as shares of the
iteration. The distributed model times sections of a layer, not categories, so the
per-category and per-bound shares of a multi-device row are NaN (not measured, not zero).
FLOPs are the job's (the analytic table's per replica, times dp; tensor-parallel copies of
small ops not counted twice), achieved FLOP/s per device. Knobs scale each device's figures
in the compute table and the capacity it must fit in; links are not scaled. Each point is a
`job.Job` (the group's run config with the point's sizes, `Workload.job` with the layout, its
micro-batches and the group's recomputation mode), checked as `bertscope distributed` checks
one; a point the job or the cluster refuses is skipped.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable
from dataclasses import replace
from typing import Any

import numpy as np

from bertscope.analytic.blocks import multiplicity
from bertscope.analytic.families import model_blocks
from bertscope.analytic.params import parameter_count
from bertscope.config import Checkpoint, ModelConfig
from bertscope.errors import BertscopeError
from bertscope.job import Layout, with_recipe_layout
from bertscope.parallel.compute import compute_table
from bertscope.parallel.evaluation import OVERLAP_KEYS, evaluate_arrays
from bertscope.parallel.job import Cluster, Workload, check_layout
from bertscope.perf.efficiency import DeviceProfile
from bertscope.perf.roofline import Knobs, select_peaks
from bertscope.sweep.engine import runs_on
from bertscope.sweep.grid import LAYOUT_AXES, MODEL_AXES, Group, ModelView

PARTS: tuple[str, ...] = ("compute_s", "tp_comm_s", "pp_comm_s", "bubble_s", "dp_comm_s")
"""Time parts of a multi-device row besides the optimizer (`parallel.TIME_KEYS`)."""
_LAYOUT_VARIED = ("batch", "micro_batches")
"""Numeric run axes one `evaluate_arrays` call covers; every other one is a loop."""


def layouts(combos: Iterable[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """The (dp, tp, pp, zero) combinations of more than one device or a ZeRO stage: the
    multi-device part of a grid (the rest is the single-device engine's)."""
    return [tuple(c) for c in combos if tuple(c) != (1, 1, 1, 0)]  # type: ignore[misc]


def job_flops(group: Group) -> np.ndarray:
    """FLOPs of one replica's iteration for every configuration of the group (its full
    shape): the analytic rows' FLOPs times their multiplicities, as the engine sums them."""
    m, run = group.views()
    total: Any = 0.0
    for blk in model_blocks(m, run):  # type: ignore[arg-type]
        copies, later = multiplicity(blk, m.num_layers, run.micro_batches)
        for ops, w in ((blk.rows, copies), (blk.later, later)):
            for op in ops:
                total = total + np.asarray(op.flops, dtype=float) * w
    return np.broadcast_to(np.asarray(total, dtype=float), group.shape)


def _models(group: Group) -> list[tuple[tuple[int, ...], ModelConfig]]:
    """(index along each model-size axis, the concrete model) for every combination of the
    group's model sizes a model config accepts."""
    inter = np.broadcast_to(ModelView(group).intermediate, group.shape)
    dims = [group.axes.index(a) for a in MODEL_AXES]
    out = []
    for idx in itertools.product(*(range(group.shape[d]) for d in dims)):
        sizes = {a: int(group.values[a][i]) for a, i in zip(MODEL_AXES, idx, strict=True)}
        at = [0] * len(group.axes)
        for d, i in zip(dims, idx, strict=True):
            at[d] = i
        sizes["intermediate"] = int(inter[tuple(at)])
        changes = {a: v for a, v in sizes.items() if v != getattr(group.model, a)}
        try:
            model = replace(group.model, **changes) if changes else group.model
        except BertscopeError:
            continue  # sizes the model cannot have (heads not dividing hidden): skipped
        out.append((idx, model))
    return out


def _runs(group: Group) -> list[tuple[dict[str, int], Any]]:
    """(index along each numeric run axis but batch and micro-batches, the group's run config
    with those values) for every combination of them."""
    names = [a for a in group.axes[len(MODEL_AXES):] if a not in _LAYOUT_VARIED]
    out = []
    for idx in itertools.product(*(range(len(group.values[a])) for a in names)):
        values = {a: group.values[a][i] for a, i in zip(names, idx, strict=True)}
        try:
            run = replace(group.run, **{a: None if np.isnan(v) else int(v)
                                        for a, v in values.items()})
        except BertscopeError:
            continue
        out.append((dict(zip(names, idx, strict=True)), run))
    return out


def _valid_layouts(combos: list[tuple[int, int, int, int]], micro: np.ndarray,
                   workload: Workload, cluster_of: dict[int, Cluster], checkpoint: Checkpoint,
                   pinned: Collection[str] = LAYOUT_AXES) -> list[tuple[int, ...]]:
    """(dp, tp, pp, zero, micro-batches, sequence parallel, schedule code, virtual stages,
    the overlap flags) of the layouts whose job is valid and fits its cluster: the
    distributed model's own rules, asked once each. Each layout is 1F1B without sequence
    parallelism or overlap, then takes the run's recipe's layout defaults where they apply
    (`job.with_recipe_layout`; ZeRO's only where the grid's `zero` axis was not given:
    `pinned`)."""
    ok = []
    for (d, t, p, z), mb in itertools.product(combos, micro.astype(int).tolist()):
        try:
            job = replace(workload, global_batch=d * mb).job(Layout(dp=d, tp=t, pp=p, zero=z),
                                                             mb, checkpoint)
            job = with_recipe_layout(job, {k: 1 for k in pinned})
            check_layout(job, cluster_of[d * t * p])
        except BertscopeError:
            continue
        lay = job.layout
        ok.append((d, t, p, int(lay.zero), mb, int(lay.sequence_parallel), lay.schedule.code,
                   lay.virtual_stages, *(int(getattr(lay, k)) for k in OVERLAP_KEYS)))
    return ok


def evaluate_group(group: Group, targets: list[tuple[DeviceProfile, Knobs]],
                   combos: list[tuple[int, int, int, int]],
                   pinned: Collection[str] = LAYOUT_AXES
                   ) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Every configuration of `group` under every layout of `combos` on every target, as
    (target index per entry, columns) pairs in the form `engine.evaluate_piece` returns, plus
    the layout columns and time parts. `pinned`: the layout axes the grid was given (the
    others take the group's recipe's layout defaults where they apply)."""
    flops = job_flops(group)
    checkpoint = group.run.checkpoint
    batch, micro = group.values["batch"], group.values["micro_batches"]
    counts = sorted({d * t * p for d, t, p, _ in combos})
    runs = [runs_on(profile, group.run.precision) for profile, _ in targets]
    clusters = [{n: Cluster.build(profile, n) for n in counts} if ok else {}  # node design
                for (profile, _), ok in zip(targets, runs, strict=True)]
    results = []
    for idx, model in _models(group):
        for where, run in _runs(group):
            try:
                workload = Workload(model=model, run=run, global_batch=1)
            except BertscopeError:
                continue  # a sequence beyond the model's positions: skipped
            for ti, (profile, knobs) in enumerate(targets):
                if not runs[ti]:
                    continue  # a precision the device lacks: skipped, counted
                valid = _valid_layouts(combos, micro, workload, clusters[ti], checkpoint,
                                       pinned)
                if not valid:
                    continue
                table = compute_table(workload, profile, batch, [v[1] for v in valid], knobs)
                at = {**dict(zip(MODEL_AXES, idx, strict=True)), **where}
                for n in counts:
                    mine = [v for v in valid if v[0] * v[1] * v[2] == n]
                    if mine:
                        results.append(_slice(group, mine, workload, clusters[ti][n], table,
                                              knobs, ti, flops, at))
    return results


def _slice(group: Group, valid: list[tuple[int, ...]], workload: Workload,
           cluster: Cluster, table: Any, knobs: Knobs, target: int, flops: np.ndarray,
           where: dict[str, int]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One `evaluate_arrays` call: every (layout, batch) of one device count, as columns;
    `where` places the call's model sizes and run values in the group's axes."""
    batch, micro = group.values["batch"], group.values["micro_batches"]
    lay = np.repeat(np.array(valid, dtype=np.int64), len(batch), axis=0)
    bi = np.tile(np.arange(len(batch)), len(valid))
    b = batch.astype(np.int64)[bi]
    d, t, p, z, mb, sp, sched, v, *overlap = lay.T
    n = len(b)
    got = evaluate_arrays(workload, cluster, {
        "dp": d, "tp": t, "pp": p, "micro_batches": mb, "zero": z,
        "checkpoint": np.full(n, group.run.checkpoint.code), "sp": sp.astype(bool),
        "schedule": sched, "virtual_stages": v, "global_batch": b * mb * d,
        **{k: f.astype(bool) for k, f in zip(OVERLAP_KEYS, overlap, strict=True)}}, table)
    order = np.argsort(micro)  # the micro-batch axis in the grid's order, unique
    mi = order[np.searchsorted(micro[order], mb)]
    index: dict[str, Any] = {**where, "batch": bi, "micro_batches": mi}
    at = tuple(index[a] for a in group.axes)  # the configuration's place in the group
    model = workload.model
    out: dict[str, np.ndarray] = {
        "time_s": got["iteration_s"], "flops": flops[at] * d,
        "tokens": (b * mb * d * workload.tokens_per_sequence).astype(float),  # real tokens
        "params": np.full(n, float(parameter_count(model))),
        "memory_bytes": got["memory_bytes"],
        "capacity_bytes": np.full(n, cluster.memory_bytes * knobs.memory),
        "gemm_peak_flops": np.full(n, knobs.apply(
            select_peaks(cluster.profile.device, workload.precision)).gemm_flops),
        "optimizer_s": got["optimizer_s"],
        **{k: got[k] for k in PARTS},
        "dp": d.astype(float), "tp": t.astype(float), "pp": p.astype(float),
        "zero": z.astype(float), "devices": (d * t * p).astype(float),
    }
    for a in group.axes:
        if a in MODEL_AXES:
            out[a] = np.full(n, float(getattr(model, a)))
        elif a not in _LAYOUT_VARIED:
            out[a] = np.full(n, group.values[a][index[a]])
    out["batch"], out["micro_batches"] = b.astype(float), mb.astype(float)
    return np.full(n, target), out


__all__ = ["PARTS", "evaluate_group", "job_flops", "layouts"]
