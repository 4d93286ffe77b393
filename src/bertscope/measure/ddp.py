"""Measured data-parallel training, the launch: torchrun, its workers, their results.

    docs = run_ranks(get_model("bert-tiny"), RunConfig(batch=2, seq=16), nproc=2)

The launcher runs PyTorch's own engine, not a home-made one: torchrun
(`python -m torch.distributed.run --standalone`, loopback only) starts N copies of
`bertscope.measure.ddp_worker`; each joins a process group (gloo on CPU, NCCL on CUDA), wraps
the reference model in `DistributedDataParallel` (default 25 MiB gradient buckets), times
all-reduces of 4 KiB and of one bucket between the ranks (the link microbenchmark), trains on
its own synthetic batches under torch.profiler and writes its result JSON to a temporary
folder; `run_ranks` returns those documents. Merging the ranks and the model's prediction
beside them: `bertscope.studies.ddp` (`profile_ddp`).

Measured, per iteration and rank (`iteration_comm`, summarized by `comm_summary`):
- all-reduce time: the length of the union of the all-reduce intervals (from launch to
  completion, whatever thread records them; time waiting for a slower rank included, as DDP
  pays it);
- overlap: the part of it inside the backward compute window, from the start of backward to
  the end of its last autograd node (DDP waits for the last buckets after that node);
- exposed = all-reduce - overlap: the time backward() spends waiting for gradients.

The process control (the stop protocol, `bertscope.stop`): torchrun and the workers run in
sessions of their own; the launch waits as a measuring loop (`stop.wait_child`), so Ctrl-C,
SIGTERM or a failing rank ends all of them (`_kill_group`) and an interrupted run keeps
nothing (ranks stopped apart would wait on each other's all-reduce): `Interrupted`, exit 130.
They die with this process even on `kill -9`: torchrun gets SIGTERM when it dies
(`stop.spawn`: a parent-death signal), on which it ends its workers, and each worker gets
SIGKILL when torchrun dies (`ddp_worker.main`). A failure is told in one line (`_failure`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertscope.analytic import parameter_count
from bertscope.config import ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.io import check_output
from bertscope.job import Job
from bertscope.measure.profile import refuse_unmeasured
from bertscope.parallel.ddp_model import comm_shares, link_bucket_bytes
from bertscope.stop import STOP, spawn, wait_child
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
    return comm_shares({"all_reduce_s": ar, "overlap_s": ov, "exposed_s": ar - ov,
                        "iteration_s": iteration_s, "backward_s": backward_s, "calls": calls,
                        "bytes": elements * element_bytes})


# -- launch --------------------------------------------------------------------------------------
def check_request(m: ModelConfig, run: RunConfig, *, nproc: int, iters: int,
                  warmup: int) -> None:
    """Refuse a distributed run that cannot start (fewer than 2 processes, no iteration, a
    sequence the model cannot hold), before anything is launched."""
    if not isinstance(nproc, int) or nproc < 2:
        raise BertscopeError(f"--nproc must be >= 2 for a distributed run, got {nproc}")
    if iters < 1 or warmup < 0:
        raise BertscopeError(f"need --iters >= 1 and --warmup >= 0, got {iters} and {warmup}")
    Job(model=m, run=run)  # the pair's one check: the sequence fits the positions
    refuse_unmeasured(run)


def run_ranks(m: ModelConfig, run: RunConfig, *, nproc: int, iters: int = 3, warmup: int = 1,
              device: str = "cpu", hf: bool = False, seed: int = 0, threads: int | None = None,
              trace_dir: str | Path | None = None, statistic: str = "mean",
              host_allocator: str = "keep") -> list[dict[str, Any]]:
    """Train `m` with DistributedDataParallel on `nproc` local processes under torchrun,
    profile every rank and return the ranks' result documents (`ProfileResult.write_json`
    of each, with its meta's "ddp" entry), in rank order. `trace_dir` (created) receives each rank's
    trace as rank<R>.json, which `bertscope trace` reads. `statistic` and `host_allocator`
    are passed to every rank's `profile`."""
    check_request(m, run, nproc=nproc, iters=iters, warmup=warmup)
    check_output(trace_dir, folder=True)  # one trace per rank goes in it
    dev = _device_kind(device, nproc)
    per_rank = threads or max(1, (os.cpu_count() or 1) // nproc)
    with tempfile.TemporaryDirectory(prefix="bertscope-ddp-") as tmp:
        folder = Path(tmp)
        spec = {**Job(model=m, run=run).as_dict(), "iters": iters,
                "warmup": warmup, "device": dev, "hf": hf, "seed": seed, "threads": per_rank,
                "out_dir": str(folder), "trace": trace_dir is not None,
                "link_bytes": [LINK_SMALL_BYTES, link_bucket_bytes(4 * parameter_count(m))],
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
    return docs


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
    raise BertscopeError(f"--measure-on {device!r} with --nproc: use cpu, cuda or auto (each rank "
                         f"takes cuda:LOCAL_RANK)")


def _run_torchrun(folder: Path, nproc: int, device: str, threads: int) -> None:
    """Run the workers under torchrun; Ctrl-C or a failing rank ends the whole process group."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
           "--nproc_per_node", str(nproc), "-m", WORKER, str(folder / "spec.json")]
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # src/: workers import this bertscope
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["OMP_NUM_THREADS"] = str(threads)
    env["TMPDIR"] = str(folder)  # torchrun's torchelastic_* log folder (which it never
    # removes) and the ranks' temporary files go in the launch folder, removed with it
    if device == "cpu" and "GLOO_SOCKET_IFNAME" not in env and Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only: one machine, no network
    log_path = folder / "torchrun.log"
    with log_path.open("wb") as log:
        proc = spawn(cmd, death_signal=signal.SIGTERM, env=env, stdout=log,
                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def end(p: subprocess.Popen[bytes]) -> None:
            _kill_group(p, _worker_pids(folder, nproc))

        rc = wait_child(proc, on_stop=end, on_error=end)
    STOP.check()  # asked to stop: the ranks were ended, nothing is kept
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


__all__ = ["ERROR_FILE", "LINK_SMALL_BYTES", "PID_FILE", "RANK_FILE", "TRACE_FILE", "WORKER",
           "check_request", "comm_summary", "iteration_comm", "run_ranks"]
