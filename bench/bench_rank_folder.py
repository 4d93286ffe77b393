"""A folder of rank traces with known stragglers, read by bertscope in this process, on local
worker processes and on a 2-worker Dask cluster on 127.0.0.1, and by Holistic Trace Analysis
0.5.0, side by side: wall time and peak memory (each a fresh process), whether the injected
stragglers are found, whether the results of the three bertscope modes are equal, and whether
bertscope's per-rank figures agree with HTA's.

The folder (default 64 ranks): each rank is
- a training step written with the test fixtures' Kineto generator
  (`tests/data/traces/make_traces.py`: CPU ops, runtime launches with correlation ids, kernels
  on a compute stream 7 and an NCCL stream 13, ac2g flows, `[memory]` instants), one
  ProfilerStep (HTA keeps every kernel of a one-step trace), integer microsecond times (HTA
  rounds fractional ones); each backward bucket ends with an AllReduce (the `ncclKernel_`
  spelling HTA's straggler analysis looks for) that starts on a rank once its gradients are
  ready and ends on every rank together (last arrival + transfer);
- per rank: kernel durations perturbed by up to 2%, the host's Python overheads, and the whole
  step shifted by 0-`--skew` us (seeded per rank: ranks do not start in lockstep);
- `--copies` copies of a real recorded trace's host events on a second CPU thread
  (`tests/data/traces/hf/bert_cpu_train.json.gz`: torch.profiler's CPU ops and Python frames
  of a Hugging Face BERT training step, as torch wrote them), each copy shifted into the step
  and stretched by a per-rank factor in [0.98, 1.02]: what both readers parse and neither
  counts as device time (no public multi-rank GPU trace is on disk: HTA's own test traces are
  binary files the bench cannot fetch);
- stragglers injected as a CPU stall before a given rank launches a given AllReduce
  (`inject_for`); after each AllReduce the hosts resume together (as after waiting on the
  bucket), so a stall delays its own collective, not every later one.

Modes (alternated round by round, `--runs` rounds, medians; HTA `--hta-runs` rounds):
- bertscope `analyze_trace(folder).cross_rank()` in one process, one file after another;
- the same on local worker processes (the default: one per core, at most 16);
- the same with `scheduler=` a 2-worker LocalCluster on 127.0.0.1 (started before timing, in a
  process of its own);
- HTA: `TraceAnalysis(trace_dir)` then `get_comm_comp_overlap`, `get_idle_time_breakdown`
  (per rank, consecutive_kernel_delay=30), `get_cuda_kernel_launch_stats` and
  `get_potential_stragglers(num_candidates=number of injected ranks)`.
Peak memory is each process's VmHWM (its own high-water mark since exec: a child does not
inherit the bench's); local mode also reports its largest worker (ru_maxrss of its children),
Dask its largest worker process.

HTA needs pandas < 3: install it apart and point HTA_PATH at it.

    pip install --target /tmp/hta HolisticTraceAnalysis==0.5.0 pandas==2.3.3
    HTA_PATH=/tmp/hta .venv/bin/python bench/bench_rank_folder.py            # 64 ranks
    .venv/bin/python bench/bench_rank_folder.py --ranks 8 --copies 1 --runs 1   # quick
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "data" / "traces"))
import make_traces as mt  # noqa: E402

mt.BASE = 1_700_000_000_000  # integer microseconds (HTA ceils/floors fractional times)
AR = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
LAYER = (("aten::addmm", mt.SGEMM, 40), ("aten::gelu", mt.GELU, 8),
         ("aten::native_layer_norm", mt.LN, 6))
"""Forward kernels of a layer (op, kernel, us); backward runs twice the GEMM and the rest."""
REAL = ROOT / "tests" / "data" / "traces" / "hf" / "bert_cpu_train.json.gz"
"""The real recorded trace whose host events fill each rank's second CPU thread."""
HOST_CATS = ("cpu_op", "python_function")
"""Its events copied (annotations, flows and metadata are not: one ProfilerStep per rank)."""


def inject_for(ranks: int, collectives: int) -> dict[tuple[int, int], int]:
    """(AllReduce index, rank) -> CPU stall in us: four stragglers at known places."""
    return {(1, 3 % ranks): 400, (2, 17 % ranks): 300, (3, 42 % ranks): 500,
            (collectives - 2, 5 % ranks): 700}


def _host_events() -> list[dict[str, Any]]:
    with gzip.open(REAL, "rt") as f:
        events = json.load(f)["traceEvents"]
    host = [e for e in events if e.get("ph") == "X" and e.get("cat") in HOST_CATS]
    t0 = min(e["ts"] for e in host)
    return [{**e, "ts": e["ts"] - t0} for e in host]


def _fill(tr: mt.Trace, host: list[dict[str, Any]], copies: int, start: float, end: float,
          rng: random.Random) -> None:
    """`copies` copies of the real host events on thread tid+1 between `start` and `end`
    (relative us), each shifted to its slot and stretched by one factor (nesting kept)."""
    span = max(e["ts"] + e["dur"] for e in host)
    slot = (end - start) / copies
    for c in range(copies):
        scale = slot / span * rng.uniform(0.98, 1.02) * 0.97
        at = start + c * slot
        for e in host:
            tr.events.append({**e, "pid": tr.pid, "tid": tr.tid + 1,
                              "ts": round(mt.BASE + at + e["ts"] * scale, 3),
                              "dur": round(e["dur"] * scale, 3)})


def generate(folder: Path, ranks: int, layers: int, bucket: int,
             inject: dict[tuple[int, int], int], copies: int, skew: int) -> None:
    """Write `ranks` rank files into `folder`; `inject[(collective, rank)]` = stall in us."""
    traces = [mt.Trace(pid=100 + r, tid=100 + r, device=r) for r in range(ranks)]
    rngs = [random.Random(1000 + r) for r in range(ranks)]  # kernel durations, per rank
    cpus = [random.Random(7) for _ in range(ranks)]  # the same Python overheads on every rank
    alloc = [0] * ranks
    for r, tr in enumerate(traces):
        tr.t = float(rngs[r].randrange(skew + 1))  # the step starts a little apart

    def memory(r: int, delta: int) -> None:
        tr = traces[r]
        alloc[r] += delta
        tr.events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]",
                          "pid": tr.pid, "tid": tr.tid, "ts": mt.BASE + tr.t, "s": "t",
                          "args": {"Device Type": 1, "Device Id": r, "Bytes": delta,
                                   "Total Allocated": alloc[r], "Total Reserved": 0}})

    def work(r: int, op: str, kernel: str, us: float) -> None:
        tr = traces[r]
        tr.t += cpus[r].choice((2, 4, 8, 30, 60))  # Python between ops: at times the GPU waits
        with tr.op(op, dims=[[16, 1024]]):
            tr.kernel(kernel, round(us * rngs[r].uniform(0.98, 1.02)))

    anns = [tr.ann("ProfilerStep#1") for tr in traces]
    for a in anns:
        a.__enter__()
    starts = [tr.t for tr in traces]
    for _ in range(layers):
        for r in range(ranks):
            for op, kernel, us in LAYER:
                work(r, op, kernel, us)
            memory(r, 4 << 20)
    n = pending = 0
    for layer in reversed(range(layers)):
        for r in range(ranks):
            work(r, "aten::mm", mt.SGEMM, 40)
            work(r, "aten::mm", mt.SGEMM, 40)
            work(r, "aten::gelu_backward", mt.GELU_BWD, 8)
            memory(r, -(4 << 20))
        pending += 1
        if layer % bucket == 0:  # a gradient bucket is ready: all-reduce it
            grads = pending * 2 * 1024 * 1024  # fp32 gradients of the bucket's layers
            pending = 0
            arrival, launched = [], []
            for r, tr in enumerate(traces):
                tr.t += 10 + inject.get((n, r), 0)
                with tr.op("c10d::allreduce_"):
                    launched.append(tr.t)
                    tr.t += 4  # the launch itself; the kernel is placed below
                ready = max(tr.stream_clock.get(7, 0.0), tr.stream_clock.get(13, 0.0),
                            launched[-1] + 5)
                arrival.append(ready)
            done = max(arrival) + 60  # every rank ends together: last arrival + transfer
            for r, tr in enumerate(traces):
                t_cpu = tr.t
                tr.t = launched[r]
                k = tr.kernel(AR, done - arrival[r], stream=13, at=arrival[r])
                k["args"].update({"Collective name": "allreduce", "In msg nelems": grads,
                                  "Out msg nelems": grads, "Group size": ranks,
                                  "dtype": "Float"})  # as torch >= 2.1 writes them
                tr.t = t_cpu
            resume = max(tr.t for tr in traces)  # hosts resume together: a stall stays local
            for tr in traces:
                tr.t = resume
            n += 1
    for tr in traces:
        with tr.op("aten::copy_"):
            tr.kernel(mt.MEMCPY_D2D, 20, cat="gpu_memcpy", runtime="cudaMemcpyAsync")
        tr.t = max(tr.t, max(tr.stream_clock.values()) + 1)
    for a in anns:
        a.__exit__(None, None, None)
    host = _host_events() if copies else []
    for r, tr in enumerate(traces):
        if copies:
            _fill(tr, host, copies, starts[r] + 2, tr.t - 2, rngs[r])
        tr.write(folder / f"rank{r}.json.gz", level=1,  # level 9 took most of the set-up
                 distributedInfo={"backend": "nccl", "rank": r, "world_size": ranks})
        traces[r] = None  # type: ignore[call-overload]  # free this rank's events


_PEAK = r"""
def _peak_kib(status="/proc/self/status"):
    with open(status) as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM"))
"""
_OURS = _PEAK + r"""
import hashlib, json, sys, time
t0 = time.perf_counter()
import bertscope.cluster as cluster
if sys.argv[2] == "inprocess":
    cluster.MAX_LOCAL_WORKERS = 1
from bertscope.trace import analyze_trace
result = analyze_trace(sys.argv[1], scheduler=sys.argv[3] if len(sys.argv) > 3 else None)
rep = result.cross_rank()
wall = time.perf_counter() - t0
import resource
workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB: the largest worker
colls = [[c.kind, c.index, c.straggler, c.max_wait_s, c.message_bytes]
         for c in rep.collectives]
records = rep.rank_records()
print(json.dumps({"wall": wall, "peak_kib": _peak_kib(), "worker_kib": workers,
                  "ranks": len(result.ranks), "collectives": colls, "records": records,
                  "sha": hashlib.sha256(json.dumps([colls, records], sort_keys=True,
                                                   default=str).encode()).hexdigest()}))
"""
_HTA = _PEAK + r"""
import json, sys, time, logging
t0 = time.perf_counter()
logging.disable(logging.WARNING)
import numpy as np
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
t_load = time.perf_counter() - t0
ranks = sorted(ta.t.traces)
out = {"ranks": ranks}
ov = ta.get_comm_comp_overlap(visualize=False)
out["overlap"] = {int(r): float(v) / 100 for r, v in zip(ov["rank"], ov["comp_comm_overlap_pctg"])}
idle = {}
for r in ranks:
    df = ta.get_idle_time_breakdown(ranks=[r], visualize=False, consecutive_kernel_delay=30)[0]
    by = df.groupby("idle_category")["idle_time"].sum()
    idle[int(r)] = {str(k): float(v) for k, v in by.items()}
out["idle"] = idle
ls = ta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
out["launch"] = {int(r): [int(len(d)), float(d.launch_delay.mean()),
                          *map(float, np.percentile(d.launch_delay, [50, 95])),
                          float(d.launch_delay.max())] for r, d in ls.items()}
try:
    out["stragglers"] = [int(x) for x in ta.get_potential_stragglers(
        num_candidates=int(sys.argv[2]))]
except Exception as e:  # report, do not fail the comparison
    out["stragglers"] = f"{type(e).__name__}: {e}"[:200]
out["wall"] = time.perf_counter() - t0
out["load_seconds"] = t_load
out["peak_kib"] = _peak_kib()
print(json.dumps(out))
"""
_CLUSTER = r"""
import json, sys
from distributed import Client, LocalCluster
def peak():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM"))
with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                  dashboard_address=None) as c, Client(c.scheduler_address) as client:
    print(c.scheduler_address, flush=True)
    for line in sys.stdin:  # each line: report the workers' peak memory
        print(json.dumps(max(client.run(peak).values())), flush=True)
"""


def _env(extra_path: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, str(ROOT / "src")) if p)
    env["PYTHONWARNINGS"] = "ignore"
    return env


def run(script: str, *args: str, env: dict[str, str]) -> dict[str, Any]:
    """One fresh Python running `script` with `args`; its last stdout line as JSON, with the
    whole process's wall time (interpreter start to exit) as "process_s"."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                       env=env, timeout=3600, check=False)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError((p.stderr.strip().splitlines() or ["?"])[-1][:300])
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["process_s"] = wall
    return out


def _close(a: float, b: float, tol: float = 1e-6) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol * max(1.0, abs(a), abs(b))


def agreement(records: list[dict[str, Any]], hta: dict[str, Any]) -> dict[str, int]:
    """Ranks whose overlap (HTA rounds it to 0.01 %), idle by cause and launch statistics
    agree with HTA's (relative tolerance 1e-6)."""
    agree = {"overlap": 0, "idle": 0, "launch": 0}
    for row in records:
        r = str(row["rank"])
        h_i = hta["idle"].get(r, {})
        ours_i = [row[f"{k}_s"] * 1e6 for k in ("host_wait", "kernel_wait", "other")]
        ours_l = [row["launches"], row["launch_mean_us"], row["launch_p50_us"],
                  row["launch_p95_us"], row["launch_max_us"]]
        agree["overlap"] += abs(row["overlap_share"] - hta["overlap"][r]) <= 5e-5
        agree["idle"] += all(_close(a, h_i.get(k, 0.0)) for a, k in
                             zip(ours_i, ("host_wait", "kernel_wait", "other"), strict=True))
        agree["launch"] += all(_close(float(a), float(b)) for a, b in
                               zip(ours_l, hta["launch"][r], strict=True))
    return agree


def main() -> None:
    """Generate the folder, run every mode, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--bucket", type=int, default=4, help="layers per all-reduce bucket")
    ap.add_argument("--copies", type=int, default=8,
                    help="copies of the real host events per rank (file size)")
    ap.add_argument("--skew", type=int, default=200, help="largest per-rank start shift, us")
    ap.add_argument("--runs", type=int, default=3, help="rounds of the bertscope modes")
    ap.add_argument("--hta-runs", type=int, default=1, help="rounds with HTA in them")
    a = ap.parse_args()
    collectives = math.ceil(a.layers / a.bucket)
    inject = inject_for(a.ranks, collectives)
    hta_path = os.environ.get("HTA_PATH")
    tmp = Path(tempfile.mkdtemp(prefix="bench_rank_folder."))
    cluster = subprocess.Popen([sys.executable, "-c", _CLUSTER], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               env=_env())
    try:
        t0 = time.perf_counter()
        generate(tmp, a.ranks, a.layers, a.bucket, inject, a.copies, a.skew)
        size = sum(f.stat().st_size for f in tmp.iterdir())
        print(f"[folder] {a.ranks} ranks, {size / 2**20:.1f} MiB gzipped "
              f"({size / a.ranks / 2**20:.2f} MiB a rank), {collectives} AllReduce each, "
              f"{a.copies} copies of {REAL.name}'s host events a rank; written in "
              f"{time.perf_counter() - t0:.0f} s")
        print("[injected] " + ", ".join(f"AllReduce #{k} rank {r} +{d} us"
                                        for (k, r), d in inject.items()))
        address = cluster.stdout.readline().strip()  # type: ignore[union-attr]
        modes = {"inprocess": (), "local": (), "dask": (address,)}
        got: dict[str, list[dict[str, Any]]] = {m: [] for m in [*modes, "hta"]}
        for rnd in range(max(a.runs, a.hta_runs)):
            if rnd < a.runs:
                for mode, extra in modes.items():
                    got[mode].append(run(_OURS, str(tmp), mode, *extra, env=_env()))
            if rnd < a.hta_runs and hta_path:
                got["hta"].append(run(_HTA, str(tmp), str(len({r for _, r in inject})),
                                      env=_env(hta_path)))
        cluster.stdin.write("peak\n")  # type: ignore[union-attr]
        cluster.stdin.flush()  # type: ignore[union-attr]
        dask_worker_kib = json.loads(cluster.stdout.readline())  # type: ignore[union-attr]
    finally:
        cluster.stdin.close()  # type: ignore[union-attr]
        cluster.wait(timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
    report(got, inject, dask_worker_kib, a.ranks)


def report(got: dict[str, list[dict[str, Any]]], inject: dict[tuple[int, int], int],
           dask_worker_kib: int, ranks: int) -> None:
    """The side-by-side table, the stragglers found and the agreement with HTA."""
    labels = {"inprocess": "bertscope, in one process", "local": "bertscope, local processes",
              "dask": "bertscope, Dask 2 workers 127.0.0.1", "hta": "HTA 0.5.0 (4 analyses)"}
    base = statistics.median(g["process_s"] for g in got["inprocess"])
    print(f"{'who':<36} {'runs':>4} {'process s':>9} {'vs HTA':>7} {'peak MiB':>9} "
          f"{'worker MiB':>10}")
    hta_s = statistics.median(g["process_s"] for g in got["hta"]) if got["hta"] else None
    for mode, rows in got.items():
        if not rows:
            print(f"{labels[mode]:<36} not run (set HTA_PATH)")
            continue
        wall = statistics.median(g["process_s"] for g in rows)
        peak = statistics.median(g["peak_kib"] for g in rows) / 1024
        worker = (dask_worker_kib if mode == "dask" else
                  max(g.get("worker_kib", 0) for g in rows)) / 1024
        ratio = f"{hta_s / wall:6.1f}x" if hta_s else "      -"
        print(f"{labels[mode]:<36} {len(rows):4d} {wall:9.2f} {ratio} {peak:9.0f} "
              f"{(f'{worker:.0f}' if worker else '-'):>10}")
    print(f"(process s: interpreter start to exit, median; in-process / local / Dask: "
          f"{base:.2f} / {statistics.median(g['process_s'] for g in got['local']):.2f} / "
          f"{statistics.median(g['process_s'] for g in got['dask']):.2f} s)")
    shas = {g["sha"] for m in ("inprocess", "local", "dask") for g in got[m]}
    print(f"[equal] bertscope's collectives and per-rank figures equal in every mode and run: "
          f"{len(shas) == 1} ({got['dask'][0]['ranks']} ranks read)")
    colls = {(k, i): (s, w) for k, i, s, w, _ in got["inprocess"][0]["collectives"]}
    sizes = [b for *_, b in got["inprocess"][0]["collectives"]]
    print(f"[messages] {len(sizes)} collectives, input messages "
          f"{', '.join(f'{b / 2**20:.0f}' for b in sizes)} MiB (from the kernels' args)")
    found = 0
    for (k, r), d in inject.items():
        s, w = colls[("AllReduce", k)]
        found += s == r
        print(f"[straggler] AllReduce #{k}: injected rank {r} (+{d} us); bertscope names rank "
              f"{s}, longest wait {w * 1e6:.0f} us: {'found' if s == r else 'MISSED'}")
    print(f"[straggler] bertscope found {found}/{len(inject)} (the straggler of each "
          f"injected collective)")
    if got["hta"]:
        hta = got["hta"][0]
        cands = hta["stragglers"]
        want = sorted({r for _, r in inject})
        hit = [r for r in want if isinstance(cands, list) and r in cands]
        print(f"[straggler] HTA get_potential_stragglers(num_candidates={len(want)}): {cands}; "
              f"injected ranks {want}: {len(hit)}/{len(want)} among them (HTA names ranks, "
              f"not collectives)")
        agree = agreement(got["inprocess"][0]["records"], hta)
        print(f"[agree with HTA] overlap {agree['overlap']}/{ranks} ranks, idle by cause "
              f"{agree['idle']}/{ranks}, launch statistics {agree['launch']}/{ranks}")


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"(bench wall {time.perf_counter() - t0:.0f} s; python {sys.version.split()[0]})")
