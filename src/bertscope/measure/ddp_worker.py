"""One rank of `bertscope profile MODEL --nproc N` (see `bertscope.measure.ddp`).

torchrun runs `python -m bertscope.measure.ddp_worker SPEC.json` once per rank, with RANK,
WORLD_SIZE and LOCAL_RANK set. The rank joins the process group (gloo on CPU, NCCL on CUDA),
times all-reduces of the spec's two message sizes (the link microbenchmark), then runs
`bertscope.measure.profile.profile` with the model wrapped in DistributedDataParallel and its
own synthetic batches, and writes its result JSON, with the all-reduce facts of the capture
in its meta's "ddp" entry, to the spec's folder. A failing rank writes its one-line reason
there too.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from bertscope.errors import BertscopeError
from bertscope.job import Job
from bertscope.measure.ddp import (
    ERROR_FILE,
    PID_FILE,
    RANK_FILE,
    TRACE_FILE,
    comm_summary,
    iteration_comm,
)
from bertscope.measure.profile import ProfileResult, profile
from bertscope.stop import die_with_parent
from bertscope.taxonomy import Category, Classifier
from bertscope.trace.attribute import ITER, PHASE, numel

_NODE = "autograd::engine::evaluate_function: "
_ALL_REDUCE_OP = "c10d::allreduce_"
"""The dispatcher op DDP's reducer calls once per bucket (the calls counted)."""
LINK_REPS = 5
"""Timed repetitions per message size of the link microbenchmark (the best counts)."""


def is_all_reduce(name: str, classify: Classifier) -> bool:
    """True for a communication event of an all-reduce (c10d::allreduce_, gloo:all_reduce,
    nccl:all_reduce, NCCL AllReduce kernels)."""
    low = name.lower()
    return ("allreduce" in low or "all_reduce" in low) and \
        classify(name) is Category.COMMUNICATION


def analyze_comm(events: Any, completed: int) -> dict[str, Any]:
    """All-reduce facts of a capture's first `completed` iterations: "comm", the
    `ddp.comm_summary` of the all-reduce intervals (any thread) that start inside each
    iteration and of its backward compute windows (backward phase start to the end of its
    last autograd node), and "buckets_s", per iteration the (start, end) of the process
    group's all-reduce work (gloo:all_reduce, nccl:all_reduce) in launch order, in seconds
    from the iteration's start."""
    classify = Classifier()
    evs = list(events)
    iters = sorted((e for e in evs if e.name.startswith(ITER) and e.cpu_parent is None
                    and int(e.name[len(ITER):]) < completed), key=lambda e: e.time_range.start)
    if not iters:
        raise BertscopeError("no measured iteration in the capture")
    windows = [(e.time_range.start, e.time_range.end) for e in iters]
    phases = [e for e in evs if e.name == f"{PHASE}backward"]
    node_ends = sorted((e.time_range.start, e.time_range.end) for e in evs
                       if e.name.startswith(_NODE))
    comm = [e for e in evs if is_all_reduce(e.name, classify)]

    def inside(t: float, lo: float, hi: float) -> bool:
        return lo <= t < hi

    per_iter: list[tuple[float, float]] = []
    buckets: list[list[float]] = []
    backward_us = 0.0
    for lo, hi in windows:
        bw = []
        for p in phases:
            s, e = p.time_range.start, p.time_range.end
            if inside(s, lo, hi):
                ends = [ne for ns, ne in node_ends if s <= ns < e]
                bw.append((s, max(ends) if ends else e))
        backward_us += sum(e - s for s, e in bw)
        cm = [(c.time_range.start, c.time_range.end) for c in comm
              if inside(c.time_range.start, lo, hi)]
        per_iter.append(iteration_comm(cm, bw))
        work = sorted((c.time_range.start, c.time_range.end) for c in comm
                      if _is_work(c.name) and inside(c.time_range.start, lo, hi))
        buckets.append([((s - lo) * 1e-6, (e - lo) * 1e-6) for s, e in work])
    measured = [c for c in comm if any(inside(c.time_range.start, lo, hi) for lo, hi in windows)]
    ops = [c for c in measured if c.name == _ALL_REDUCE_OP]
    # the op's tensor-list shapes are not kept by torch's FunctionEvent (Kineto's trace has
    # them); the process group's work scope (gloo:all_reduce) has the flattened bucket
    elements = _elements(ops) or _elements([c for c in measured if _is_work(c.name)])
    n = len(windows)
    summary = comm_summary([(a * 1e-6, o * 1e-6) for a, o in per_iter],
                           iteration_s=sum(hi - lo for lo, hi in windows) * 1e-6 / n,
                           backward_s=backward_us * 1e-6 / n, calls=len(ops) / n,
                           elements=elements / n)
    return {"comm": summary, "buckets_s": buckets}


def _is_work(name: str) -> bool:
    """A process group's own scope of a collective's work ("gloo:all_reduce")."""
    return ":" in name and "::" not in name


def _elements(events: list[Any]) -> int:
    return sum(numel(list(getattr(c, "input_shapes", None) or [])[:1]) for c in events)


def measure_link(sizes: list[int], world: int, dev: torch.device, backend: str) -> dict[str, Any]:
    """Best-of-`LINK_REPS` all-reduce time of each message size (bytes) between the ranks,
    the slowest rank's, with what was measured in words. Messages under 1 MB run
    back to back (up to 10 per timing), so that ranks leaving the barrier apart do not
    count as latency."""
    times = []
    for nbytes in sizes:
        x = torch.ones(max(1, nbytes // 4), device=dev)
        dist.all_reduce(x)  # warm-up: connections, buffers
        inner = max(1, min(10, 10**6 // max(nbytes, 1)))
        best = math.inf
        for _ in range(LINK_REPS):
            dist.barrier()
            _sync(dev)
            t0 = time.perf_counter()
            for _ in range(inner):
                dist.all_reduce(x)
            _sync(dev)
            best = min(best, (time.perf_counter() - t0) / inner)
        times.append(best)
    t = torch.tensor(times, dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    what = ("gloo all-reduce over loopback" if backend == "gloo"
            else f"{backend} all-reduce between local GPUs")
    return {"sizes": [float(s) for s in sizes], "times": [float(v) for v in t.tolist()],
            "description": what,
            "source": f"measured by bertscope profile --nproc {world}: best of {LINK_REPS} "
                      f"{backend} all-reduces of {sizes[0]} B and {sizes[1]} B between the "
                      f"ranks before training (slowest rank), torch {torch.__version__}"}


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def run_rank(spec: dict[str, Any], rank: int, world: int, local_rank: int) -> ProfileResult:
    """Join the process group, measure the link, profile DDP training; returns the result."""
    torch.set_num_threads(int(spec["threads"]))
    cuda = spec["device"] == "cuda"
    dev = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend)
    try:
        link = measure_link([int(s) for s in spec["link_bytes"]], world, dev, backend)
        job = Job.from_dict(spec, "ddp spec")
        m, run = job.model, job.run

        def wrap(module: torch.nn.Module) -> torch.nn.Module:
            return DistributedDataParallel(module, device_ids=[local_rank] if cuda else None)

        def analyze(events: Any, completed: int) -> dict[str, Any]:
            return {"ddp": {"rank": rank, "world_size": world, "backend": backend,
                            **analyze_comm(events, completed), "link": link}}

        trace = None
        if spec.get("trace"):
            trace = Path(spec["out_dir"]) / "traces" / TRACE_FILE.format(rank=rank)
            trace.parent.mkdir(exist_ok=True)
        return profile(m, run, iters=int(spec["iters"]), warmup=int(spec["warmup"]),
                       device=str(dev), hf=bool(spec["hf"]), seed=int(spec["seed"]),
                       wrap=wrap, data_seed=int(spec["seed"]) + rank * run.micro_batches,
                       analyze=analyze, trace_out=trace,
                       statistic=spec.get("statistic", "mean"),
                       host_allocator=spec.get("host_allocator", "keep"))
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """Entry point under torchrun: run this rank, write its result (or its error) to the
    spec's folder. The rank dies with torchrun (a parent-death signal, `stop`), so a
    `kill -9` of bertscope, which ends torchrun, leaves no rank behind."""
    die_with_parent(signal.SIGKILL)  # torchrun gone (killed with bertscope): so are we
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(args[0]).read_text())
    folder = Path(spec["out_dir"])
    rank = int(os.environ.get("RANK", "0"))
    (folder / PID_FILE.format(rank=rank)).write_text(str(os.getpid()))  # Ctrl-C ends us
    try:
        result = run_rank(spec, rank, int(os.environ.get("WORLD_SIZE", "1")),
                          int(os.environ.get("LOCAL_RANK", "0")))
        result.write_json(folder / RANK_FILE.format(rank=rank))
    except BertscopeError as e:
        (folder / ERROR_FILE.format(rank=rank)).write_text(str(e))
        return 2
    except Exception as e:
        (folder / ERROR_FILE.format(rank=rank)).write_text(f"{type(e).__name__}: {e}")
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
