"""Benchmarks of the trace reader, each a ratio measured side by side in one run.

1. Load + kernel breakdown of a generated Kineto trace (default 100 MB) by bertscope vs
   Holistic Trace Analysis (`TraceAnalysis(...).get_gpu_kernel_breakdown()`): wall time and
   peak RSS, each in a fresh subprocess (targets: >= 3x faster, <= 1/4 of HTA's peak
   memory). HTA is optional: `pip install HolisticTraceAnalysis`; without it that side is
   skipped and a whole-file `json.load` + DataFrame (the usual way, HTA's included) is
   measured instead as a reference, labeled as such.
2. --small: the same side by side on a generated trace gzipped to 1-5 MB (default ~2 MB),
   timed as whole processes (interpreter start to exit, `python -c`), 5 runs each, median:
   what a user waits for on a trace of one training step (targets: >= 3x faster, <= 1/4 of
   HTA's peak memory).
3. --startup: `bertscope trace` (the command, a whole process, the terminal report) on a
   ~2 KB trace, 9 runs, median (target: under 0.25 s).
4. With --big: a generated 1 GB trace read with peak RSS under 1 GB (target < 1.0 GiB).

Traces are generated in a temporary folder (deleted afterwards) with Kineto's layout and
formatting: CPU ops, runtime launches, kernels on two streams with Kineto's kernel args,
ac2g flows, ProfilerStep#N annotations, distributedInfo.

    .venv/bin/python bench/bench_trace.py                  # 100 MB, vs HTA if installed
    .venv/bin/python bench/bench_trace.py --size-mb 300 --big
    .venv/bin/python bench/bench_trace.py --size-mb 0 --small --startup   # only those
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KERNELS = [
    ("aten::addmm", "ampere_sgemm_128x64_tn", 30.0),
    ("aten::addmm", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_"
                    "warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", 25.0),
    ("aten::bmm", "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", 12.0),
    ("aten::_softmax", "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, "
                       "float, float, at::native::(anonymous namespace)::"
                       "SoftMaxForwardEpilogue>(float*, float const*, int)", 6.0),
    ("aten::native_dropout", "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<"
                             "float, float, unsigned int, 1, 4, bool>(...)", 4.0),
    ("aten::native_layer_norm", "void at::native::(anonymous namespace)::"
                                "vectorized_layer_norm_kernel<float, float>(int, float, float "
                                "const*, float const*, float const*, float*, float*, float*)",
     5.0),
    ("aten::gelu", "void at::native::vectorized_elementwise_kernel<4, at::native::"
                   "GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::"
                   "{lambda()#2}::operator()() const::{lambda(float)#1}, at::detail::Array<"
                   "char*, 2> >(...)", 5.0),
    ("aten::add", "void at::native::vectorized_elementwise_kernel<4, at::native::"
                  "CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(...)", 3.0),
]
COMM = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"

_CPU = """  {{
    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": 1234, "tid": {tid},
    "ts": {ts:.3f}, "dur": {dur:.3f},
    "args": {{
      "External id": {ext},"Sequence number": {seq}, "Fwd thread id": 0, "Record function id": 0, "Concrete Inputs": ["", "", "", "1", "1"], "Input type": ["float", "float", "float", "Scalar", "Scalar"], "Input Strides": [[1], [1024, 1], [1, 1024], [], []], "Input Dims": [[1024], [4096, 1024], [1024, 1024], [], []], "Ev Idx": {ext}
    }}
  }},
"""  # noqa: E501
_RUNTIME = """  {{
    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1234, "tid": {tid},
    "ts": {ts:.3f}, "dur": 4.118,
    "args": {{
      "External id": {ext}, "cbid": 211, "correlation": {corr}
    }}
  }},
  {{
    "ph": "s", "id": {corr}, "pid": 1234, "tid": {tid}, "ts": {ts:.3f}, "cat": "ac2g", "name": "ac2g"
  }},
"""  # noqa: E501
_KERNEL = """  {{
    "ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": {stream},
    "ts": {ts:.3f}, "dur": {dur:.3f},
    "args": {{
      "External id": {ext},
      "queued": 0, "device": 0, "context": 1,
      "stream": {stream}, "correlation": {corr},
      "registers per thread": 128,
      "shared memory": 49152,
      "blocks per SM": 1.2,
      "warps per SM": 9.6,
      "grid": [256, 2, 1],
      "block": [256, 1, 1],
      "est. achieved occupancy %": 12
    }}
  }},
  {{
    "ph": "f", "id": {corr}, "pid": 0, "tid": {stream}, "ts": {ts:.3f}, "cat": "ac2g", "name": "ac2g", "bp": "e"
  }},
"""  # noqa: E501


def generate(path: Path, size_bytes: int) -> int:
    """Write a Kineto-style GPU training trace of about `size_bytes`; returns events."""
    head = ('{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": "NVIDIA H100 '
            '80GB HBM3", "totalGlobalMem": 85045870592}],\n  "distributedInfo": {"backend": '
            '"nccl", "rank": 0, "world_size": 8},\n  "displayTimeUnit": "ms",\n'
            '  "traceEvents": [\n')
    t, gpu, corr, ext, seq, events, step = 1.7e12, 1.7e12, 0, 0, 0, 0, 0
    with path.open("w") as f:
        f.write(head)
        written = len(head)
        while written < size_bytes:
            step += 1
            chunks: list[str] = []
            ops = len(KERNELS) * 12
            step_start = t
            chunks.append("")  # the step annotation goes first, once its length is known
            for i in range(ops):
                op, kernel, kdur = KERNELS[i % len(KERNELS)]
                ext += 1
                seq += 1
                corr += 1
                chunks.append(_CPU.format(cat="cpu_op", name=op, tid=1234, ts=t, dur=12.0,
                                          ext=ext, seq=seq))
                chunks.append(_RUNTIME.format(tid=1234, ts=t + 3.0, ext=ext, corr=corr))
                gpu = max(gpu, t + 8.0)
                chunks.append(_KERNEL.format(name=kernel, stream=7, ts=gpu, dur=kdur, ext=ext,
                                             corr=corr))
                gpu += kdur
                events += 5
                if i % 24 == 23:  # a gradient bucket's all-reduce on the comm stream
                    corr += 1
                    chunks.append(_RUNTIME.format(tid=1234, ts=t + 8.0, ext=ext, corr=corr))
                    chunks.append(_KERNEL.format(name=COMM, stream=20, ts=gpu - 20, dur=60.0,
                                                 ext=ext, corr=corr))
                    events += 4
                t += 14.0
            t = max(t, gpu) + 5.0
            ext += 1
            chunks[0] = _CPU.format(cat="user_annotation", name=f"ProfilerStep#{step}", tid=1234,
                                    ts=step_start - 1.0, dur=t - step_start, ext=ext, seq=-1)
            events += 1
            text = "".join(chunks)
            f.write(text)
            written += len(text)
        tail = ('  {\n    "ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": '
                f'"", "ts": {t:.3f}\n  }}\n  ],\n  "traceName": "{path.name}"\n}}\n')
        f.write(tail)
    return events


_OURS = """
import resource, sys, time
t0 = time.perf_counter()
from bertscope.trace import analyze_trace
r = analyze_trace(sys.argv[1])
b = r.table.grouped("category")  # the breakdown `bertscope trace` prints, without pandas
t1 = time.perf_counter()
print(t1 - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, len(r.table))
"""
_HTA = """
import resource, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
b = a.get_gpu_kernel_breakdown()
t1 = time.perf_counter()
print(t1 - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, len(b[0]))
"""
_JSON_LOAD = """
import json, resource, sys, time
t0 = time.perf_counter()
import pandas as pd
with open(sys.argv[1]) as f:
    doc = json.load(f)
df = pd.DataFrame(doc["traceEvents"])
k = df[df["cat"] == "kernel"].groupby("name")["dur"].sum()
t1 = time.perf_counter()
print(t1 - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, len(k))
"""
_BASELINE = """
import resource
import bertscope.trace
print(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, 0)
"""


HTA_PATH = os.environ.get("HTA_PATH", "")
"""Extra sys.path entries for the HTA side (HTA installed with pip --target elsewhere, so
its dependencies stay out of the project's environment)."""


def measure(script: str, arg: str, *, hta: bool = False) -> tuple[float, float]:
    """(seconds, peak RSS bytes) of `script` run on `arg` in a fresh Python (imports
    included)."""
    secs, rss, _ = _run(script, arg, hta=hta)
    return secs, rss


def _run(script: str, arg: str, *, hta: bool = False) -> tuple[float, float, float]:
    """(seconds inside, peak RSS bytes, whole-process wall seconds) of one run."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    if hta and HTA_PATH:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (HTA_PATH, env.get("PYTHONPATH")) if p)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", script, arg], capture_output=True, text=True,
                         check=False, env=env)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr else "failed")
    secs, rss, _ = out.stdout.strip().splitlines()[-1].split()
    return float(secs), float(rss), wall


def _hta_installed() -> bool:
    try:
        _run("import sys, hta.trace_analysis; print(0, 0, 0)", "", hta=True)
    except RuntimeError:
        return False
    return True


def _gib(x: float) -> str:
    return f"{x / 2**30:.3f} GiB" if x >= 2**30 else f"{x / 2**20:.0f} MiB"


def versus(size_mb: int) -> None:
    """bertscope vs HTA (or the json.load reference) on one generated trace."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rank0.json"
        t0 = time.perf_counter()
        n = generate(path, size_mb << 20)
        print(f"[generate] {path.stat().st_size / 2**20:.0f} MiB, {n:,} events in "
              f"{time.perf_counter() - t0:.1f} s")
        _, base = measure(_BASELINE, str(path))
        ours_s, ours_rss = measure(_OURS, str(path))
        print(f"[bertscope] load + breakdown {ours_s:.2f} s, peak RSS {_gib(ours_rss)} "
              f"(of which {_gib(base)} is Python + imports)")
        if _hta_installed():
            hta_s, hta_rss = measure(_HTA, tmp, hta=True)
            print(f"[HTA] load + get_gpu_kernel_breakdown {hta_s:.2f} s, peak RSS "
                  f"{_gib(hta_rss)}")
            print(f"[vs HTA] speed {hta_s / ours_s:.2f}x (target >= 3), memory "
                  f"{ours_rss / hta_rss:.3f} of HTA's (target <= 0.25)")
        else:
            print("[HTA] not installed: pip install HolisticTraceAnalysis (optional bench "
                  "dependency); skipping the HTA side")
            ref_s, ref_rss = measure(_JSON_LOAD, str(path))
            print(f"[reference: json.load + DataFrame, not HTA] {ref_s:.2f} s, peak RSS "
                  f"{_gib(ref_rss)}; bertscope: {ref_s / ours_s:.2f}x faster, "
                  f"{ours_rss / ref_rss:.3f} of its memory")


def small(gz_mb: float, runs: int = 5) -> None:
    """bertscope vs HTA on a generated trace gzipped to about `gz_mb` MB, whole processes."""
    with tempfile.TemporaryDirectory() as tmp:
        raw, path = Path(tmp) / "raw.json", Path(tmp) / "rank0.json.gz"
        n = generate(raw, int(gz_mb * 14 * 2**20))  # Kineto JSON gzips about 14:1
        with raw.open("rb") as src, gzip.open(path, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()
        print(f"[small] {path.stat().st_size / 2**20:.2f} MiB gzipped, {n:,} events")
        ours = [_run(_OURS, str(path)) for _ in range(runs)]
        ours_wall = statistics.median(w for _, _, w in ours)
        ours_rss = statistics.median(r for _, r, _ in ours)
        print(f"[bertscope] whole process {ours_wall:.2f} s (median of {runs}), peak RSS "
              f"{_gib(ours_rss)}")
        if not _hta_installed():
            print("[HTA] not installed: skipping the HTA side")
            return
        hta = [_run(_HTA, tmp, hta=True) for _ in range(runs)]
        hta_wall = statistics.median(w for _, _, w in hta)
        hta_rss = statistics.median(r for _, r, _ in hta)
        print(f"[HTA] whole process {hta_wall:.2f} s (median of {runs}), peak RSS "
              f"{_gib(hta_rss)}")
        print(f"[small vs HTA] speed {hta_wall / ours_wall:.2f}x (target >= 3), memory "
              f"{ours_rss / hta_rss:.3f} of HTA's (target <= 0.25)")


_TINY = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
          "ts": 10.0 + 10 * i, "dur": 5.0, "args": {"Input Dims": [[4, 4], [4, 4]]}}
         for i in range(12)]


def startup(runs: int = 9) -> None:
    """`bertscope trace` on a ~2 KB trace: the whole command's wall time."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tiny.json"
        path.write_text(json.dumps({"traceEvents": _TINY}))
        env = {**os.environ, "BERTSCOPE_STORE": "off"}
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "bertscope.cli", "trace", str(path)],
                           capture_output=True, check=True, env=env)
            times.append(time.perf_counter() - t0)
        print(f"[startup] bertscope trace on a {path.stat().st_size / 1024:.1f} KB trace: "
              f"median {statistics.median(times):.3f} s, min {min(times):.3f} s of {runs} "
              f"(target < 0.25 s)")


def big(size_gb: float) -> None:
    """Peak RSS of reading a generated trace of `size_gb` GiB (target < 1 GiB)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.json"
        t0 = time.perf_counter()
        n = generate(path, int(size_gb * 2**30))
        size = path.stat().st_size
        print(f"[generate] {size / 2**30:.2f} GiB, {n:,} events in "
              f"{time.perf_counter() - t0:.1f} s")
        secs, rss = measure(_OURS, str(path))
        print(f"[big] read + breakdown {secs:.1f} s ({size / 2**20 / secs:.0f} MiB/s), peak "
              f"RSS {_gib(rss)} = {rss / size:.3f} x the file (target < 1 GiB: "
              f"{'ok' if rss < 2**30 else 'MISSED'})")


def main() -> None:
    """Run the benchmarks."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=100, help="trace size for the comparison")
    ap.add_argument("--big", action="store_true", help="also read a generated 1 GiB trace")
    ap.add_argument("--big-gb", type=float, default=1.0, help="size of the --big trace")
    ap.add_argument("--small", action="store_true",
                    help="also compare on a trace gzipped to --small-mb, whole processes")
    ap.add_argument("--small-mb", type=float, default=2.0, help="gzipped size of --small")
    ap.add_argument("--startup", action="store_true",
                    help="also time `bertscope trace` on a 2 KB trace")
    args = ap.parse_args()
    if args.size_mb > 0:
        versus(args.size_mb)
    if args.small:
        small(args.small_mb)
    if args.startup:
        startup()
    if args.big:
        big(args.big_gb)
    print(json.dumps({"python": sys.version.split()[0]}))


if __name__ == "__main__":
    main()
