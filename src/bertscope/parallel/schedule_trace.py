"""A layout's predicted iteration as a per-device schedule: a Chrome/Perfetto trace.

One process per pipeline stage (every data- and tensor-parallel rank of a stage runs the same
schedule), each with two tracks: compute (forward and backward micro-batch slices, gradient
accumulation, the optimizer step, and the bubbles as idle slices) and exposed communication
(the tensor-parallel collectives and pipeline send/recv of each micro-batch step, then the
data-parallel / ZeRO communication that backward did not hide). Open it in ui.perfetto.dev
(Open trace file; nothing leaves the machine) or read it with `bertscope trace`.

The schedule is simulated from the layout model's own figures (`evaluate_arrays`): every
stage's micro-batch step takes the slower stage's forward and backward (the model's
assumption: the slowest stage sets the step), split into compute and exposed communication;
each op starts when its device is free and its input is ready (a forward after the previous
stage's forward of that micro-batch, a backward after the next stage's backward). Orders:
GPipe (all forwards, then all backwards), 1F1B (p - s - 1 warm-up forwards on stage s, then
one forward one backward), interleaved 1F1B (Megatron-LM's order over v model chunks per
device, Narayanan et al. 2021). GPipe and 1F1B end their last backward at (m + p - 1) steps
and interleaved at (m + (p - 1)/v) steps, as the model's bubble says; after it come
gradient accumulation, the exposed data-parallel communication and the optimizer, so the
trace ends at the model's iteration time. Communication the layout overlaps (`Layout.
overlap_tp_comm`, `overlap_grad_reduce`, `overlap_param_gather`; `parallel.overlap`) shows
only its exposed part; the flags that are on are named in the document's metadata.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertscope.errors import BertscopeError
from bertscope.io import atomic_write
from bertscope.job import Job, Schedule
from bertscope.parallel.evaluation import OVERLAP_KEYS, evaluate_arrays, layout_arrays
from bertscope.parallel.job import Cluster, Workload, check_layout

COMPUTE_TID, COMM_TID = 1, 2
"""The two tracks of each stage."""


@dataclass(frozen=True, slots=True)
class Step:
    """One scheduled op of a stage: a micro-batch's forward or backward of one model chunk."""

    stage: int
    backward: bool
    micro_batch: int
    chunk: int
    start: float
    """Seconds from the iteration's start."""
    end: float


def _order(schedule: Schedule, p: int, m: int, v: int, stage: int) -> list[tuple[bool, int, int]]:
    """(backward, micro-batch, chunk) in the order the stage runs them."""
    if schedule is Schedule.GPIPE:
        return [(False, i, 0) for i in range(m)] + [(True, i, 0) for i in range(m)]
    if schedule is Schedule.ONE_F_ONE_B:
        fwd, bwd = [(False, i, 0) for i in range(m)], [(True, i, 0) for i in range(m)]
        warm = min(p - stage - 1, m)
    else:  # Megatron-LM's interleaved order: groups of p micro-batches through the chunks
        def nth(k: int, backward: bool) -> tuple[bool, int, int]:
            chunk = (k // p) % v
            return backward, (k // (p * v)) * p + k % p, v - 1 - chunk if backward else chunk

        fwd = [nth(k, False) for k in range(m * v)]
        bwd = [nth(k, True) for k in range(m * v)]
        warm = min((p - stage - 1) * 2 + (v - 1) * p, m * v)
    out = fwd[:warm]
    for i in range(len(fwd) - warm):
        out += [fwd[warm + i], bwd[i]]
    return out + bwd[len(fwd) - warm:]


def simulate(schedule: Schedule, p: int, m: int, v: int, fwd: float, bwd: float) -> list[Step]:
    """Every stage's ops with start and end times: `fwd` and `bwd` seconds per micro-batch
    step of one stage (a chunk takes 1/v of them); an op starts when its stage is free and its
    input is ready. Raises if the orders deadlock (they do not for the built-in schedules)."""
    orders = [_order(schedule, p, m, v, s) for s in range(p)]
    done: dict[tuple[bool, int, int], float] = {}  # (backward, micro-batch, virtual stage)
    free, at = [0.0] * p, [0] * p
    steps: list[Step] = []
    last = p * v - 1
    while any(at[s] < len(orders[s]) for s in range(p)):
        moved = False
        for s in range(p):
            while at[s] < len(orders[s]):
                backward, mb, chunk = orders[s][at[s]]
                vs = chunk * p + s  # the model chunk's place in the whole pipeline
                if backward:
                    dep = (False, mb, vs) if vs == last else (True, mb, vs + 1)
                else:
                    dep = (False, mb, vs - 1) if vs > 0 else None
                if dep is not None and dep not in done:
                    break
                start = max(free[s], done[dep] if dep is not None else 0.0)
                end = start + (bwd if backward else fwd) / v
                done[(backward, mb, vs)] = end
                free[s] = end
                steps.append(Step(s, backward, mb, chunk, start, end))
                at[s] += 1
                moved = True
        if not moved:
            raise BertscopeError(f"the {schedule.value} schedule deadlocked")  # a bug, not input
    return steps


def _x(name: str, cat: str, pid: int, tid: int, ts: float, dur: float,
       args: dict[str, Any] | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "ts": ts * 1e6,
                         "dur": dur * 1e6, "pid": pid, "tid": tid}
    if args:
        e["args"] = args
    return e


def _meta(name: str, pid: int, tid: int | None, value: str) -> dict[str, Any]:
    e: dict[str, Any] = {"ph": "M", "name": name, "pid": pid, "args": {"name": value}}
    if tid is not None:
        e["tid"] = tid
    return e


def layout_timeline(job: Job, cluster: Cluster) -> dict[str, Any]:
    """The job's predicted iteration as a Chrome trace document (see the module docstring);
    raises `BertscopeError` for a job that does not fit the cluster (`check_layout`)."""
    check_layout(job, cluster)
    workload, layout = Workload.of(job), job.layout
    r = {k: float(v[0]) for k, v in evaluate_arrays(workload, cluster,
                                                     layout_arrays(job)).items()}
    p, m = layout.pp, job.run.micro_batches
    v = layout.virtual_stages if layout.schedule is Schedule.INTERLEAVED else 1
    fc, fm = r["step_fwd_compute_s"], r["step_fwd_comm_s"]
    bc, bm = r["step_bwd_compute_s"], r["step_bwd_comm_s"]
    steps = simulate(layout.schedule, p, m, v, fc + fm, bc + bm)
    flush = max(s.end for s in steps)
    lps = workload.model.stack_layers // (p * v)  # T5: encoder and decoder layers
    events: list[dict[str, Any]] = []
    for s in range(p):
        pid = s + 1
        events += [_meta("process_name", pid, None, f"stage {s} ({layout.dp} x {layout.tp} "
                         f"devices: data x tensor parallel)"),
                   _meta("process_sort_index", pid, None, str(s)),
                   _meta("thread_name", pid, COMPUTE_TID, "compute"),
                   _meta("thread_name", pid, COMM_TID, "communication (exposed)")]
        mine = sorted((x for x in steps if x.stage == s), key=lambda x: x.start)
        t = 0.0
        for x in mine:
            if x.start > t:
                events.append(_x("bubble", "bubble", pid, COMPUTE_TID, t, x.start - t))
            comp, comm = (bc, bm) if x.backward else (fc, fm)
            first = (x.chunk * p + s) * lps
            args = {"micro_batch": x.micro_batch, "chunk": x.chunk,
                    "layers": f"{first}-{first + lps - 1}",
                    "phase": "backward" if x.backward else "forward"}
            kind = "backward" if x.backward else "forward"
            label = f"{kind} mb{x.micro_batch}" + (f" chunk{x.chunk}" if v > 1 else "")
            events += [_x(f"bertscope.phase::{kind}", "user_annotation", pid, COMPUTE_TID,
                          x.start, comp / v),
                       _x(label, "cpu_op", pid, COMPUTE_TID, x.start, comp / v, args)]
            if comm > 0:  # a process-group scope name: the trace reader's communication
                events.append(_x(f"nccl:{'tp+pp' if p > 1 else 'tp'} {label}", "cpu_op", pid,
                                 COMM_TID, x.start + comp / v, comm / v, args))
            t = x.end
        if flush > t:
            events.append(_x("bubble", "bubble", pid, COMPUTE_TID, t, flush - t))
        t = flush
        for name, dur, tid, phase in (
                ("gradient accumulation", r["accumulate_s"], COMPUTE_TID, "backward"),
                ("weight casts (once per step)", r["weight_cast_s"], COMPUTE_TID, "forward"),
                ("nccl:data-parallel gradient sync (exposed)", r["dp_comm_s"], COMM_TID, None),
                ("optimizer step", r["optimizer_s"], COMPUTE_TID, "optimizer")):
            if dur > 0:
                if phase is not None:
                    events.append(_x(f"bertscope.phase::{phase}", "user_annotation", pid, tid,
                                     t, dur))
                events.append(_x(name, "cpu_op", pid, tid, t, dur))
                t += dur
        events.append(_x("bertscope.iter::0", "user_annotation", pid, COMPUTE_TID, 0.0, t))
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "bertscope": {"producer": "predicted layout", "iteration_s": r["iteration_s"],
                          "bubble_s": r["bubble_s"], "schedule": layout.schedule.value,
                          "dp": layout.dp, "tp": layout.tp, "pp": p, "micro_batches": m,
                          "virtual_stages": v, "device": cluster.profile.device.name,
                          **{k: getattr(layout, k) for k in OVERLAP_KEYS if getattr(layout, k)}}}


def write_layout_timeline(job: Job, cluster: Cluster,
                          path: str | Path) -> Path:
    """Write `layout_timeline(...)` to `path` (JSON) atomically."""
    p = Path(path)
    atomic_write(p, json.dumps(layout_timeline(job, cluster)).encode())
    return p


__all__ = ["Step", "layout_timeline", "simulate", "write_layout_timeline"]
