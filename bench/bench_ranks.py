"""Cross-rank analyses (`bertscope.trace.ranks`) side by side with Holistic Trace Analysis on
one generated multi-rank folder, and whether the injected stragglers are found.

The folder: N ranks written with the Kineto-style generator of the test fixtures
(`tests/data/traces/make_traces.py`: CPU ops, runtime launches with correlation ids, kernels
on a compute stream 7 and an NCCL stream 13, ac2g flows), one ProfilerStep per rank (HTA
keeps every kernel of a one-step trace), integer microsecond times (HTA rounds fractional
ones). Each rank's kernel durations are perturbed by up to 2% (seeded per rank); each
backward bucket ends with an AllReduce (old `ncclKernel_` spelling, which HTA's straggler
analysis looks for) that starts on a rank once its gradients are ready and ends on every rank
together (last arrival + transfer). Stragglers are injected as a CPU stall before a given
rank launches a given collective; `[memory]` instants grow in forward and shrink in backward.

Compared, per rank (HTA 0.5.0 calls, `visualize=False`):
- overlap %: `get_comm_comp_overlap()` vs `CrossRankReport` overlap_share;
- idle by cause: `get_idle_time_breakdown(ranks, consecutive_kernel_delay=30)` summed over
  streams vs idle_by_cause;
- launch delay: `get_cuda_kernel_launch_stats(ranks)` (count, mean, p50, p95, max of its
  launch_delay column) vs LaunchStats;
- stragglers: `get_potential_stragglers(num_candidates=1)` vs the straggler of each injected
  collective.

HTA needs pandas < 3: install it apart and point HTA_PATH at it; it runs in a subprocess.

    pip install --target /tmp/hta HolisticTraceAnalysis==0.5.0 pandas==2.3.3
    HTA_PATH=/tmp/hta PYTHONPATH=src .venv/bin/python bench/bench_ranks.py --ranks 8
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
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


def generate(folder: Path, ranks: int, layers: int, bucket: int,
             inject: dict[tuple[int, int], int]) -> None:
    """Write `ranks` rank files into `folder`; `inject[(collective, rank)]` = stall in us."""
    traces = [mt.Trace(pid=100 + r, tid=100 + r, device=r) for r in range(ranks)]
    rngs = [random.Random(1000 + r) for r in range(ranks)]  # kernel durations, per rank
    cpus = [random.Random(7) for _ in range(ranks)]  # the same Python overheads on every rank
    alloc = [0] * ranks

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
    for _ in range(layers):
        for r in range(ranks):
            for op, kernel, us in LAYER:
                work(r, op, kernel, us)
            memory(r, 4 << 20)
    n = 0
    for layer in reversed(range(layers)):
        for r in range(ranks):
            work(r, "aten::mm", mt.SGEMM, 40)
            work(r, "aten::mm", mt.SGEMM, 40)
            work(r, "aten::gelu_backward", mt.GELU_BWD, 8)
            memory(r, -(4 << 20))
        if layer % bucket == 0:  # a gradient bucket is ready: all-reduce it
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
                tr.kernel(AR, done - arrival[r], stream=13, at=arrival[r])
                tr.t = t_cpu
            n += 1
    for tr in traces:
        with tr.op("aten::copy_"):
            tr.kernel(mt.MEMCPY_D2D, 20, cat="gpu_memcpy", runtime="cudaMemcpyAsync")
        tr.t = max(tr.t, max(tr.stream_clock.values()) + 1)
    for a in anns:
        a.__exit__(None, None, None)
    for r, tr in enumerate(traces):
        tr.write(folder / f"rank{r}.json.gz", distributedInfo={"backend": "nccl", "rank": r,
                                                            "world_size": ranks})


_HTA = r"""
import json, sys, time, logging
logging.disable(logging.WARNING)
import numpy as np
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
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
    out["stragglers"] = [int(x) for x in ta.get_potential_stragglers(num_candidates=1)]
except Exception as e:  # report, do not fail the comparison
    out["stragglers"] = f"{type(e).__name__}: {e}"[:200]
out["seconds"] = time.perf_counter() - t0
out["load_seconds"] = t_load
print(json.dumps(out))
"""


def run_hta(folder: Path, hta_path: str | None) -> dict[str, Any] | str:
    """HTA's figures from a subprocess (its own pandas), or why there are none."""
    env = dict(os.environ)
    if hta_path:
        env["PYTHONPATH"] = hta_path
    else:
        env.pop("PYTHONPATH", None)
    p = subprocess.run([sys.executable, "-c", _HTA, str(folder)], capture_output=True,
                       text=True, env=env, timeout=1800)
    if p.returncode != 0:
        return "HTA failed: " + (p.stderr.strip().splitlines() or ["?"])[-1][:300]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _close(a: float, b: float, tol: float = 1e-6) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol * max(1.0, abs(a), abs(b))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--bucket", type=int, default=4, help="layers per all-reduce bucket")
    args = ap.parse_args()
    from bertscope.trace import analyze_trace

    collectives = math.ceil(args.layers / args.bucket)
    inject = {(1, 3 % args.ranks): 400, (collectives - 2, 5 % args.ranks): 700}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        generate(folder, args.ranks, args.layers, args.bucket, inject)
        size = sum(f.stat().st_size for f in folder.iterdir())
        print(f"[generate] {args.ranks} ranks, {args.layers} layers, {collectives} AllReduce "
              f"each, {size / 2**20:.1f} MiB; injected: "
              + ", ".join(f"AllReduce #{k} rank {r} +{d} us" for (k, r), d in inject.items()))
        t0 = time.perf_counter()
        rep = analyze_trace(folder).cross_rank()
        t_ours = time.perf_counter() - t0
        hta = run_hta(folder, os.environ.get("HTA_PATH"))
    rows = {r["rank"]: r for r in rep.rank_records()}
    print(f"[bertscope] read + cross-rank analysis {t_ours:.2f} s (in process)")
    if isinstance(hta, str):
        print(f"[HTA] {hta}")
    else:
        print(f"[HTA] load {hta['load_seconds']:.2f} s, load + 4 analyses {hta['seconds']:.2f} s"
              f" (after its imports); bertscope {hta['seconds'] / t_ours:.1f}x "
              f"faster")
    print("rank | overlap % ours / HTA | host wait us | kernel wait us | other us "
          "(ours / HTA) | launch n, mean, p50, p95, max us (ours / HTA)")
    agree = {"overlap": 0, "idle": 0, "launch": 0}
    for r, row in rows.items():
        ours_l = [row["launches"], row["launch_mean_us"], row["launch_p50_us"],
                  row["launch_p95_us"], row["launch_max_us"]]
        ours_i = [row[f"{k}_s"] * 1e6 for k in ("host_wait", "kernel_wait", "other")]
        line = f"{r:4d} | {100 * row['overlap_share']:6.2f}"
        if not isinstance(hta, str):
            h_o = hta["overlap"][str(r)] if str(r) in hta["overlap"] else hta["overlap"][r]
            h_i = hta["idle"].get(str(r), hta["idle"].get(r, {}))
            h_i = [h_i.get(k, 0.0) for k in ("host_wait", "kernel_wait", "other")]
            h_l = hta["launch"].get(str(r), hta["launch"].get(r))
            agree["overlap"] += abs(row["overlap_share"] - h_o) <= 5e-5  # HTA rounds to 0.01 %
            agree["idle"] += all(_close(a, b) for a, b in zip(ours_i, h_i, strict=True))
            agree["launch"] += all(_close(float(a), float(b)) for a, b in
                                   zip(ours_l, h_l, strict=True))
            line += f" / {100 * h_o:6.2f}"
            line += " | " + " | ".join(f"{a:7.0f} / {b:7.0f}" for a, b in
                                       zip(ours_i, h_i, strict=True))
            line += " | " + ", ".join(f"{a:.4g}" for a in ours_l) + " / " + \
                ", ".join(f"{b:.4g}" for b in h_l)
        else:
            line += " | " + " | ".join(f"{a:7.0f}" for a in ours_i) + " | " + \
                ", ".join(f"{a:.4g}" for a in ours_l)
        print(line)
    if not isinstance(hta, str):
        n = len(rows)
        print(f"[agree] overlap {agree['overlap']}/{n} ranks, idle by cause "
              f"{agree['idle']}/{n}, launch statistics {agree['launch']}/{n} "
              f"(relative tolerance 1e-6)")
    found = 0
    for (k, r), d in inject.items():
        c = next(c for c in rep.collectives if c.kind == "AllReduce" and c.index == k)
        ok = c.straggler == r
        found += ok
        print(f"[straggler] AllReduce #{k}: injected rank {r} (+{d} us CPU stall); found rank "
              f"{c.straggler}, max wait {c.max_wait_s * 1e6:.0f} us, sum of waits "
              f"{c.sum_wait_s * 1e6:.0f} us: {'found' if ok else 'MISSED'}")
    print(f"[straggler] bertscope found {found}/{len(inject)} injected stragglers; worst "
          "collectives: " + ", ".join(f"#{c.index} rank {c.straggler} "
                                      f"{c.max_wait_s * 1e6:.0f} us" for c in rep.stragglers(4)))
    if not isinstance(hta, str):
        print(f"[straggler] HTA get_potential_stragglers(num_candidates=1): {hta['stragglers']}"
              f" (one candidate per iteration, from the start of the last long ncclKernel)")
    for n in rep.notes:
        print(f"[note] {n}")


if __name__ == "__main__":
    main()
