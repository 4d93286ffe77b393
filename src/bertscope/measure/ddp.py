"""Measured data-parallel training: `bertscope profile MODEL --nproc N`.

    result = profile_ddp(get_model("bert-tiny"), RunConfig(batch=2, seq=16), nproc=2)
    result.measured["exposed_share"], result.predicted["exposed_share"]

The launcher runs PyTorch's own engine, not a home-made one: torchrun
(`python -m torch.distributed.run --standalone`, loopback only) starts N copies of
`bertscope.measure.ddp_worker`; each joins a process group (gloo on CPU, NCCL on CUDA), wraps
the reference model in `DistributedDataParallel` (default 25 MiB gradient buckets), trains on
its own synthetic batches under torch.profiler and writes its result JSON to a temporary
folder. This module merges the ranks (the mean over ranks; per-rank figures kept in
`meta["ddp"]["ranks"]`) and puts the distributed model's prediction for the same run beside
the measurement.

Measured, per iteration and rank (`iteration_comm`):
- all-reduce time: the length of the union of the all-reduce intervals (from launch to
  completion, whatever thread records them; time waiting for a slower rank included, as DDP
  pays it);
- overlap: the part of it inside the backward compute window, from the start of backward to
  the end of its last autograd node (DDP waits for the last buckets after that node);
- exposed = all-reduce - overlap: the time backward() spends waiting for gradients.

Predicted (`predict_all_reduce`), with `bertscope.parallel`'s rule for DDP (as
`layouts.evaluate_arrays` costs ZeRO stage 0): ceil(gradient bytes / 25 MiB) equal buckets,
each an all-reduce over the N ranks on one link (`Topology.time`), launched evenly over the
backward window, exposed = max(C/k, C - W(k-1)/k) (`collectives.bucketed_exposed`). The link
is measured by default (all-reduces of 4 KiB and of one bucket between the ranks before
training, fitted to the ring formula 2(p-1) alpha + 2(p-1)/p n/B) or taken from the catalog
(`link=`). Compute is not predicted: the backward window and the rest of the iteration are
this run's measured ones, so the comparison isolates the communication model.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bertscope.analytic import build, parameter_count
from bertscope.config import ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.optable import Op, OpTable
from bertscope.parallel.collectives import Algorithm, Collective, bucketed_exposed
from bertscope.parallel.layouts import DDP_BUCKET_BYTES
from bertscope.parallel.topology import Link, LinkScope, Topology, load_link
from bertscope.trace.breakdown import overlap, union

WORKER = "bertscope.measure.ddp_worker"
"""The module torchrun runs on every rank."""
RANK_FILE = "rank{rank}.json"
"""Each rank's result in the run folder."""
ERROR_FILE = "error{rank}.txt"
"""A failing rank's one-line reason in the run folder."""
TRACE_FILE = "rank{rank}.json"
"""Each rank's Chrome/Perfetto trace, in the run folder's traces/ and in `trace_dir`."""
PID_FILE = "pid{rank}"
"""Each rank's process id (torchrun starts every worker in a session of its own)."""
LINK_SMALL_BYTES = 4096
"""Message of the latency point of the link microbenchmark."""

_CAUSE = re.compile(r"\b\w*(Error|Exception)\b: |No module named ")
"""A line of a worker's output that says why it failed (the first one is the root cause)."""
_MEAN_KEYS = ("iteration_s", "tokens_per_s", "op_time_s", "unattributed_s",
              "unattributed_share", "framework_share")
_OP_KEYS = ["name", "layer", "sublayer", "category", "phase", "m", "n", "k", "batch",
            "elements"]


# -- measured: interval arithmetic (pure) --------------------------------------------------------
def iteration_comm(comm: Sequence[tuple[float, float]],
                   backward: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(all-reduce time, overlap with backward) of one iteration, in the intervals' unit:
    the length of the union of the all-reduce (start, end) intervals, and of its part inside
    the union of the backward compute windows."""
    def as_union(iv: Sequence[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
        a = np.asarray(iv, dtype=float).reshape(-1, 2)
        return union(a[:, 0], np.maximum(a[:, 0], a[:, 1]))

    c = as_union(comm)
    total = float(np.sum(c[1] - c[0]))
    return total, min(total, overlap(c, as_union(backward)))


def comm_summary(per_iteration: Sequence[tuple[float, float]], *, iteration_s: float,
                 backward_s: float, calls: float, elements: float,
                 element_bytes: int = 4) -> dict[str, float]:
    """One rank's all-reduce facts per iteration from `iteration_comm` results (seconds):
    all_reduce_s, overlap_s, exposed_s, their shares of `iteration_s`, the backward window,
    calls and the volume (`elements` x `element_bytes`)."""
    if not per_iteration:
        raise BertscopeError("no measured iteration to summarize")
    ar = float(np.mean([a for a, _ in per_iteration]))
    ov = float(np.mean([o for _, o in per_iteration]))
    return _shares({"all_reduce_s": ar, "overlap_s": ov, "exposed_s": ar - ov,
                    "iteration_s": iteration_s, "backward_s": backward_s, "calls": calls,
                    "bytes": elements * element_bytes})


def _shares(d: dict[str, float]) -> dict[str, float]:
    it = d["iteration_s"]
    d["share"] = d["all_reduce_s"] / it if it > 0 else 0.0
    d["exposed_share"] = d["exposed_s"] / it if it > 0 else 0.0
    d["overlap_fraction"] = d["overlap_s"] / d["all_reduce_s"] if d["all_reduce_s"] > 0 else 0.0
    return d


# -- predicted -----------------------------------------------------------------------------------
def fit_link(sizes: Sequence[float], times: Sequence[float], world: int, *,
             description: str, source: str) -> Link:
    """A link from two all-reduce timings (small, large message; seconds) over `world`
    ranks, fitted to the ring formula t = 2(p-1) alpha + 2(p-1)/p n/B."""
    (n0, n1), (t0, t1) = sizes, times
    p = max(world, 2)
    f = 2.0 * (p - 1) / p
    if not (n1 > n0 > 0 and t1 > 0 and t0 > 0):
        raise BertscopeError(f"cannot fit a link to all-reduce timings {times} of {sizes} B")
    inv_bw = (t1 - t0) / (f * (n1 - n0)) if t1 > t0 else t1 / (f * n1)
    alpha = max(0.0, (t0 - f * n0 * inv_bw) / (2.0 * (p - 1)))
    return Link(name="measured", description=description, scope=LinkScope.INTRA,
                bandwidth=1.0 / inv_bw, latency=alpha,
                sources={"bandwidth": source, "latency": source})


def predict_all_reduce(*, grad_bytes: float, world: int, link: Link, backward_s: float,
                       iteration_s: float, exposed_s: float,
                       algorithm: Algorithm = Algorithm.AUTO) -> dict[str, float]:
    """The distributed model's DDP all-reduce for a measured run (see the module docstring):
    time, overlap, exposed time and shares, with the iteration's measured exposed time
    `exposed_s` replaced by the predicted one."""
    topo = Topology(name=link.name, devices_per_node=world, intra=link, inter=link,
                    algorithm=algorithm)
    k = max(1, math.ceil(grad_bytes / DDP_BUCKET_BYTES))
    total = k * float(topo.time(Collective.ALL_REDUCE, grad_bytes / k, world))
    exposed = float(bucketed_exposed(total, k, backward_s))
    return _shares({"all_reduce_s": total, "overlap_s": total - exposed, "exposed_s": exposed,
                    "iteration_s": iteration_s - exposed_s + exposed,
                    "backward_s": backward_s, "calls": float(k), "bytes": float(grad_bytes)})


# -- merge ---------------------------------------------------------------------------------------
@dataclass
class DdpResult:
    """A measured DDP run: the profile averaged over ranks, the all-reduce measured and as
    the distributed model predicts it, and what the prediction assumed."""

    profile: Any
    """`ProfileResult` with the mean op table over ranks; `meta["ddp"]` holds the rest."""
    measured: dict[str, float]
    """Mean over ranks of each rank's `comm_summary`."""
    predicted: dict[str, float]
    """`predict_all_reduce` for the same run."""
    ranks: list[dict[str, float]] = field(default_factory=list)
    """Each rank's `comm_summary`."""
    assumptions: list[str] = field(default_factory=list)
    """What the prediction assumed, in words."""

    @property
    def meta(self) -> dict[str, Any]:
        """The merged profile's meta."""
        return self.profile.meta


Interval = tuple[float, float]


def peer_wait(buckets: Sequence[Sequence[Sequence[Interval]]]) -> list[float] | None:
    """Per rank, the all-reduce time per iteration spent waiting for a slower rank to join:
    buckets[rank][iteration][bucket] = (start, end) of each bucket's all-reduce work in
    launch order. A bucket ends on every rank at about the same time, so its shortest
    duration over the ranks is the collective itself and the rest of a rank's interval is
    waiting: the wait is the union of the intervals minus the union of their last `shortest`
    seconds (buckets on gloo's two threads may overlap). None when the buckets do not line
    up across ranks."""
    if not buckets or not buckets[0] or any(len(b) != len(buckets[0]) for b in buckets):
        return None
    waits = [0.0] * len(buckets)
    for i in range(len(buckets[0])):
        per_rank = [list(b[i]) for b in buckets]
        if any(len(x) != len(per_rank[0]) for x in per_rank):
            return None
        shortest = [min(e - s for s, e in col) for col in zip(*per_rank, strict=True)]
        for r, work in enumerate(per_rank):
            core = [(e - d, e) for (_, e), d in zip(work, shortest, strict=True)]
            waits[r] += iteration_comm(work, [])[0] - iteration_comm(core, [])[0]
    return [w / len(buckets[0]) for w in waits]


def merge_comm(ranks: Sequence[dict[str, float]]) -> dict[str, float]:
    """The mean over ranks of each figure of `comm_summary` (shares recomputed from the mean
    times)."""
    if not ranks:
        raise BertscopeError("no rank results to merge")
    out = {k: float(np.mean([r[k] for r in ranks])) for k in ranks[0]}
    return _shares(out)


def merge_rows(docs: Sequence[dict[str, Any]]) -> OpTable:
    """The mean op table over ranks' result documents (rows missing on a rank count 0)."""
    frames = [pd.DataFrame(d["rows"], columns=list(Op._fields)) for d in docs]
    df = pd.concat(frames, ignore_index=True)
    if df.empty:
        return OpTable.from_ops([], {})
    sums = ["flops", "bytes_read", "bytes_written", "saved_bytes", "time_s"]
    g = df.groupby(_OP_KEYS, sort=False, dropna=False).agg(
        {**{c: "sum" for c in sums}, "count": "max"}).reset_index()
    g[sums] = g[sums] / len(docs)
    return OpTable.from_ops(Op(**{f: r[f] for f in Op._fields if f in r})
                            for r in g.to_dict(orient="records"))


def merge_ranks(docs: Sequence[dict[str, Any]], *, link: Link, link_note: str,
                algorithm: Algorithm) -> DdpResult:
    """Merge the ranks' result documents (`ProfileResult.write_json` of each rank) and
    predict the same run's all-reduce."""
    from bertscope.measure.profile import ProfileResult

    docs = sorted(docs, key=lambda d: d["meta"]["ddp"]["rank"])
    first = docs[0]["meta"]
    m, run = ModelConfig(**first["model"]), RunConfig(**first["run"])
    world = len(docs)
    ranks = [dict(d["meta"]["ddp"]["comm"]) for d in docs]
    waits = peer_wait([d["meta"]["ddp"].get("buckets_s", []) for d in docs])
    for r, w in zip(ranks, waits or [math.nan] * world, strict=True):
        r["peer_wait_s"] = w
    measured = merge_comm(ranks)
    n_params = parameter_count(m)
    grad_bytes = 4.0 * n_params  # DDP reduces the fp32 .grad of every parameter, autocast or not
    predicted = predict_all_reduce(
        grad_bytes=grad_bytes, world=world, link=link, backward_s=measured["backward_s"],
        iteration_s=measured["iteration_s"], exposed_s=measured["exposed_s"],
        algorithm=algorithm)
    k = int(predicted["calls"])
    assumptions = [
        f"{k} equal bucket(s) of {grad_bytes / k / 2**20:.3g} MiB (DDP's 25 MiB cap; "
        f"{n_params:,} fp32 gradients), launched evenly over the measured backward window of "
        f"{measured['backward_s'] * 1e3:.3g} ms; exposed = max(C/k, C - W(k-1)/k)",
        f"{algorithm.value} all-reduce over {world} ranks on {link_note}",
        "compute not predicted: the rest of the iteration is this run's measurement",
    ]
    table = merge_rows(docs)
    meta: dict[str, Any] = {**first}
    for key in _MEAN_KEYS:
        meta[key] = float(np.mean([d["meta"][key] for d in docs]))
    meta["iteration_times_s"] = [t for d in docs for t in d["meta"]["iteration_times_s"]]
    meta["partial"] = any(d["meta"].get("partial") for d in docs)
    meta["global_tokens_per_s"] = world * run.tokens / meta["iteration_s"]
    meta["ddp"] = {
        "world_size": world, "backend": first["ddp"]["backend"],
        "measured": measured, "predicted": predicted, "ranks": ranks,
        "link": {"name": link.name, "description": link.description,
                 "bandwidth_Bps": link.bandwidth, "latency_s": link.latency,
                 "sources": link.sources, "algorithm": algorithm.value},
        "assumptions": assumptions,
        "rank_meta": [{k: d["meta"][k] for k in (*_MEAN_KEYS, "iteration_times_s")}
                      for d in docs],
    }
    table.meta = meta
    result = ProfileResult(table=table, analytic=build(m, run), meta=meta)
    return DdpResult(profile=result, measured=measured, predicted=predicted, ranks=ranks,
                     assumptions=assumptions)


# -- launch --------------------------------------------------------------------------------------
def profile_ddp(m: ModelConfig, run: RunConfig, *, nproc: int, iters: int = 3,
                warmup: int = 1, device: str = "cpu", hf: bool = False, seed: int = 0,
                threads: int | None = None, link: str | None = None,
                trace_dir: str | Path | None = None, statistic: str = "mean",
                host_allocator: str = "keep") -> DdpResult:
    """Train `m` with DistributedDataParallel on `nproc` local processes under torchrun,
    profile every rank and merge them (see the module docstring). `link` names a catalog
    link for the prediction (default: the link measured between the ranks); `trace_dir`
    (created) receives each rank's trace as rank<R>.json, which `bertscope trace` reads.
    `statistic` and `host_allocator` are passed to every rank's `profile`."""
    if not isinstance(nproc, int) or nproc < 2:
        raise BertscopeError(f"--nproc must be >= 2 for a distributed run, got {nproc}")
    if iters < 1 or warmup < 0:
        raise BertscopeError(f"need --iters >= 1 and --warmup >= 0, got {iters} and {warmup}")
    run.check(m)
    catalog_link = load_link(link) if link is not None else None  # fail before launching
    if trace_dir is not None:
        trace_dir = Path(trace_dir)
        if trace_dir.exists() and not trace_dir.is_dir():
            raise BertscopeError(f"{trace_dir}: with --nproc the trace output is a folder "
                                 f"(one trace per rank), and this is a file")
        if not (trace_dir.parent if str(trace_dir.parent) else Path(".")).is_dir():
            raise BertscopeError(f"{trace_dir}: folder {trace_dir.parent} does not exist; "
                                 f"create it first")
    dev = _device_kind(device, nproc)
    per_rank = threads or max(1, (os.cpu_count() or 1) // nproc)
    with tempfile.TemporaryDirectory(prefix="bertscope-ddp-") as tmp:
        folder = Path(tmp)
        spec = {"model": _plain(asdict(m)), "run": _plain(asdict(run)), "iters": iters,
                "warmup": warmup, "device": dev, "hf": hf, "seed": seed, "threads": per_rank,
                "out_dir": str(folder), "trace": trace_dir is not None,
                "link_bytes": [LINK_SMALL_BYTES, _bucket_bytes(m)],
                "statistic": str(statistic), "host_allocator": str(host_allocator)}
        (folder / "spec.json").write_text(json.dumps(spec))
        _run_torchrun(folder, nproc, dev, per_rank)
        docs = []
        for r in range(nproc):
            path = folder / RANK_FILE.format(rank=r)
            if not path.is_file():
                raise BertscopeError(f"distributed run: rank {r} wrote no result")
            docs.append(json.loads(path.read_text()))
        if trace_dir is not None:
            _keep_traces(folder / "traces", trace_dir, nproc)
    if catalog_link is not None:
        use, note, algo = (catalog_link, f"catalog link {catalog_link.name} "
                           f"({catalog_link.description})", Algorithm.AUTO)
    else:
        ml = docs[0]["meta"]["ddp"]["link"]
        use = fit_link(ml["sizes"], ml["times"], nproc, description=ml["description"],
                       source=ml["source"])
        note = (f"the link measured between the ranks before training ({ml['description']}: "
                f"{use.bandwidth / 1e9:.3g} GB/s, alpha {use.latency * 1e6:.3g} us)")
        algo = Algorithm.RING  # the fit assumed the ring formula
    return merge_ranks(docs, link=use, link_note=note, algorithm=algo)


def _keep_traces(src: Path, dst: Path, nproc: int) -> None:
    """Move the ranks' traces into `dst` (created), each file replaced whole or not at all."""
    dst.mkdir(exist_ok=True)
    for r in range(nproc):
        name = TRACE_FILE.format(rank=r)
        tmp = dst / f".{name}.tmp"
        try:
            shutil.copyfile(src / name, tmp)
            os.replace(tmp, dst / name)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise BertscopeError(f"{dst / name}: cannot write the trace: {e}") from None


def _plain(d: dict[str, Any]) -> dict[str, Any]:
    return {k: str(v) if hasattr(v, "value") else v for k, v in d.items()}


def _bucket_bytes(m: ModelConfig) -> int:
    """The link microbenchmark's large message: one gradient bucket of this model."""
    grads = 4 * parameter_count(m)
    return int(min(grads / math.ceil(grads / DDP_BUCKET_BYTES), DDP_BUCKET_BYTES))


def _device_kind(device: str, nproc: int) -> str:
    """"cpu" or "cuda" for the workers; checks that there are GPUs enough."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return "cpu"
    if device == "cuda":
        n = torch.cuda.device_count()
        if n < nproc:
            raise BertscopeError(f"--nproc {nproc} needs {nproc} CUDA devices, this machine "
                                 f"has {n}")
        return "cuda"
    raise BertscopeError(f"--device {device!r} with --nproc: use cpu, cuda or auto (each rank "
                         f"takes cuda:LOCAL_RANK)")


def _run_torchrun(folder: Path, nproc: int, device: str, threads: int) -> None:
    """Run the workers under torchrun; Ctrl-C or a failing rank ends the whole process group."""
    import bertscope

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
           "--nproc_per_node", str(nproc), "-m", WORKER, str(folder / "spec.json")]
    env = dict(os.environ)
    root = str(Path(bertscope.__file__).resolve().parents[1])  # workers import this bertscope
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["OMP_NUM_THREADS"] = str(threads)
    if device == "cpu" and "GLOO_SOCKET_IFNAME" not in env and Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only: one machine, no network
    log_path = folder / "torchrun.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            rc = proc.wait()
        except BaseException:  # Ctrl-C (the workers are in their own session) or anything else
            _kill_group(proc, _worker_pids(folder, nproc))
            raise
    if rc != 0:
        raise BertscopeError(f"distributed run failed (torchrun exit {rc}): "
                             f"{_failure(folder, nproc, log_path)}")


def _kill_group(proc: subprocess.Popen[bytes], workers: Sequence[int] = ()) -> None:
    """End torchrun's process group and the workers' (each has its own session): SIGTERM,
    then SIGKILL to whatever is left after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        for group in (proc.pid, *workers):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, sig)
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:  # torchrun is gone; a worker that outlived it is not kept
            for group in workers:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)
        break


def _worker_pids(folder: Path, nproc: int) -> list[int]:
    """Process ids the ranks wrote, of processes still running this run's spec."""
    out = []
    for r in range(nproc):
        try:
            pid = int((folder / PID_FILE.format(rank=r)).read_text())
        except (OSError, ValueError):
            continue
        cmdline = Path(f"/proc/{pid}/cmdline")
        try:
            if cmdline.exists() and str(folder) not in cmdline.read_bytes().decode(
                    errors="replace"):
                continue  # the id now belongs to another process
        except OSError:
            continue
        out.append(pid)
    return out


def _failure(folder: Path, nproc: int, log_path: Path) -> str:
    """One line saying why: a rank's own error, else the log's last error line."""
    for r in range(nproc):
        path = folder / ERROR_FILE.format(rank=r)
        if path.is_file():
            text = " ".join(path.read_text(errors="replace").split())
            return f"rank {r}: {text}" if text else f"rank {r} failed"
    lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines()
             if ln.strip()]
    causes = [ln for ln in lines if _CAUSE.search(ln) and "ChildFailedError" not in ln]
    line = causes[0] if causes else (lines or ["no output"])[-1]
    return " ".join(line.split())[:300]


__all__ = ["DdpResult", "comm_summary", "fit_link", "iteration_comm", "merge_comm",
           "merge_ranks", "merge_rows", "peer_wait", "predict_all_reduce", "profile_ddp"]
