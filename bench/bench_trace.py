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
3. --startup: `bertscope trace` (the command, a whole process, the terminal report, the run
   recorded into a store as by default) on a ~2 KB trace of six ATen ops, 9 runs, median
   (target: under 0.25 s), as `python -m bertscope.cli` and as the console script;
   `--startup-vs OTHER/src` interleaves another checkout's runs (A/B).
4. --recorded: the side by side of 2. on CPU traces recorded at bench time from Hugging Face
   BERT, GPT-2 and ViT training steps (12 narrow layers, random weights, synthetic batches;
   shapes, modules and stacks recorded, nothing dropped), gzipped to 1-5 MB (default ~2.5);
   needs torch and transformers.
5. With --big: a generated 1 GB trace read with peak RSS under 1 GB (target < 1.0 GiB).
6. --cli FILE...: the command itself, `bertscope trace FILE` (terminal report, the run recorded
   into a store as by default), vs HTA (`TraceAnalysis` on a folder holding only that file +
   `get_gpu_kernel_breakdown()`), whole processes alternated run by run (`--runs`, median),
   peak memory as each process's VmHWM (target issue #34: >= 4x faster at <= 1/5 of HTA's
   memory). `--cli-recorded` adds the --recorded traces (HF BERT/GPT-2/ViT, recorded now);
   `--cli-vs OTHER/src` runs another checkout's command in the same alternation (A/B);
   `--cli-format csv|json` runs `bertscope trace FILE --format csv|json` (the rows to stdout)
   instead of the terminal report (comma list: each in turn).

Traces are generated in a temporary folder (deleted afterwards) with Kineto's layout and
formatting: CPU ops, runtime launches, kernels on two streams with Kineto's kernel args,
ac2g flows, ProfilerStep#N annotations, distributedInfo.

    .venv/bin/python bench/bench_trace.py                  # 100 MB, vs HTA if installed
    .venv/bin/python bench/bench_trace.py --size-mb 300 --big
    .venv/bin/python bench/bench_trace.py --size-mb 0 --small --startup   # only those
    .venv/bin/python bench/bench_trace.py --size-mb 0 --recorded          # HF CPU traces
    .venv/bin/python bench/bench_trace.py --size-mb 0 --startup --startup-vs ../main/src
    HTA_PATH=/tmp/hta .venv/bin/python bench/bench_trace.py --size-mb 0 --runs 5 \
        --cli tests/data/traces/hf/*.json.gz --cli-recorded
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
from typing import Any

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
        side_by_side("small", path, runs)


def side_by_side(label: str, path: Path, runs: int) -> tuple[float, float] | None:
    """Whole-process wall time and peak RSS of bertscope and HTA on the trace at `path` (the
    only trace in its folder, which HTA reads), `runs` each, interleaved (a change of load
    falls on both sides), medians printed; returns (speed ratio, memory ratio), None without
    HTA."""
    hta_too = _hta_installed()
    ours: list[tuple[float, float, float]] = []
    hta: list[tuple[float, float, float]] = []
    for _ in range(runs):
        ours.append(_run(_OURS, str(path)))
        if hta_too:
            hta.append(_run(_HTA, str(path.parent), hta=True))
    ours_wall = statistics.median(w for _, _, w in ours)
    ours_rss = statistics.median(r for _, r, _ in ours)
    print(f"[{label}: bertscope] whole process {ours_wall:.2f} s (median of {runs}), peak RSS "
          f"{_gib(ours_rss)}")
    if not hta_too:
        print("[HTA] not installed: skipping the HTA side")
        return None
    hta_wall = statistics.median(w for _, _, w in hta)
    hta_rss = statistics.median(r for _, r, _ in hta)
    print(f"[{label}: HTA] whole process {hta_wall:.2f} s (median of {runs}), peak RSS "
          f"{_gib(hta_rss)}")
    speed, memory = hta_wall / ours_wall, ours_rss / hta_rss
    print(f"[{label} vs HTA] speed {speed:.2f}x (target >= 3), memory {memory:.3f} of HTA's "
          f"(target <= 0.25)", flush=True)
    return speed, memory


def _hf_models() -> dict[str, tuple[Any, dict[str, Any]]]:
    """HF BERT, GPT-2 and ViT of 12 narrow layers (random weights, built from configs) with a
    synthetic batch each: no network, no downloads."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (4, 64))
    text = {"input_ids": ids, "labels": ids}
    return {
        "bert": (tf.BertForMaskedLM(tf.BertConfig(
            vocab_size=1000, hidden_size=64, num_hidden_layers=12, num_attention_heads=4,
            intermediate_size=256, max_position_embeddings=128)), text),
        "gpt2": (tf.GPT2LMHeadModel(tf.GPT2Config(
            vocab_size=1000, n_embd=64, n_layer=12, n_head=4, n_positions=128)), text),
        "vit": (tf.ViTForImageClassification(tf.ViTConfig(
            image_size=64, patch_size=16, num_channels=3, hidden_size=64, num_hidden_layers=12,
            num_attention_heads=4, intermediate_size=256, num_labels=10)),
            {"pixel_values": torch.randn(4, 3, 64, 64), "labels": torch.randint(0, 10, (4,))}),
    }


def record_trace(model: Any, batch: dict[str, Any], out: Path, gz_mb: float) -> int:
    """Record CPU training steps of `model` (shapes, modules, stacks: everything torch
    writes, python frames included) gzipped at `out`, as many steps as bring it to about
    `gz_mb` MB (one step recorded first to size them); returns the steps recorded."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.data.traces.record_hf import profile_steps

    raw = out.with_name("raw.json")
    profile_steps(model, batch, raw, 1)
    per_step = len(gzip.compress(raw.read_bytes(), compresslevel=6))
    steps = max(1, min(40, round(gz_mb * 2**20 / per_step)))
    profile_steps(model, batch, raw, steps)
    with raw.open("rb") as src, gzip.open(out, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    return steps


def record_all(into: Path, gz_mb: float) -> None:
    """Record each model's trace into its own folder under `into` (HTA reads a folder)."""
    for name, (model, batch) in _hf_models().items():
        folder = into / name
        folder.mkdir()
        path = folder / f"{name}_rank0.json.gz"
        steps = record_trace(model, batch, path, gz_mb)
        size = path.stat().st_size / 2**20
        with gzip.open(path, "rt") as f:
            events = len(json.load(f)["traceEvents"])
        where = "in" if 1 <= size <= 5 else "OUT OF"
        print(f"[recorded {name}] {size:.2f} MiB gzipped ({where} 1-5 MB), {events:,} events, "
              f"{steps} training steps", flush=True)


def recorded(gz_mb: float, runs: int = 3) -> None:
    """bertscope vs HTA on CPU traces recorded now from HF BERT, GPT-2 and ViT training
    steps, each gzipped to about `gz_mb` MB (target 1-5 MB), whole processes. The recording
    runs in a process of its own: a child forked from a parent holding torch and the models
    would report the parent's resident memory as its own peak (Linux keeps the high-water
    mark across exec)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, __file__, "--size-mb", "0", "--record-into", tmp,
                        "--recorded-mb", str(gz_mb)], check=True,
                       env={**os.environ, "TRANSFORMERS_VERBOSITY": "error",
                            "PYTHONWARNINGS": "ignore"})
        for folder in sorted(Path(tmp).iterdir()):
            side_by_side(f"recorded {folder.name}", next(folder.glob("*.json.gz")), runs)


_TINY_OPS = ("aten::mm", "aten::add", "aten::native_layer_norm", "aten::_softmax",
             "aten::gelu", "aten::native_dropout")
_TINY = [{"ph": "X", "cat": "cpu_op", "name": _TINY_OPS[i % len(_TINY_OPS)], "pid": 1,
          "tid": 1, "ts": 10.0 + 10 * i, "dur": 5.0, "args": {"Input Dims": [[4, 4], [4, 4]]}}
         for i in range(12)]
"""A tiny trace whose names reach several rows of the pattern table (a name matched by a
late row costs the rows before it), recorded into a runs store as `bertscope trace` does by
default."""


def startup(runs: int = 9, versus: Path | None = None) -> None:
    """`bertscope trace` on a ~2 KB trace: the whole command's wall time, as `python -m
    bertscope.cli` and as the installed `bertscope` console script, with bytecode caches
    written (as an installed package has them; one warm-up run first). With `versus` (another
    checkout's src folder) the two trees run interleaved, round by round."""
    trees = [Path(__file__).resolve().parents[1] / "src", *([versus] if versus else [])]
    script = Path(sys.executable).with_name("bertscope")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tiny.json"
        path.write_text(json.dumps({"traceEvents": _TINY}))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(BERTSCOPE_STORE=str(Path(tmp) / "runs.sqlite"),  # recorded, as by default
                   PYTHONPYCACHEPREFIX=str(Path(tmp) / "pyc"))
        commands = {"python -m bertscope.cli trace": [sys.executable, "-m", "bertscope.cli"]}
        if script.exists():
            commands["bertscope trace (console script)"] = [str(script)]
        times: dict[tuple[Path, str], list[tuple[float, float]]] = {}
        for rnd in range(runs + 1):
            for tree in trees:
                for label, cmd in commands.items():
                    c0 = _children_cpu()
                    t0 = time.perf_counter()
                    subprocess.run([*cmd, "trace", str(path)], capture_output=True, check=True,
                                   env={**env, "PYTHONPATH": str(tree)})
                    wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
                    if rnd:  # round 0 writes the bytecode caches
                        times.setdefault((tree, label), []).append((wall, cpu))
        for (tree, label), t in times.items():
            walls, cpus = [w for w, _ in t], [c for _, c in t]
            print(f"[startup] {label} on a {path.stat().st_size / 1024:.1f} KB trace, {tree}: "
                  f"wall median {statistics.median(walls):.3f} s, min {min(walls):.3f} s; CPU "
                  f"(user+sys) median {statistics.median(cpus):.3f} s, min {min(cpus):.3f} s "
                  f"of {runs} (target < 0.25 s)")


def _children_cpu() -> float:
    """User + system seconds of the finished child processes so far."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


_VMHWM = """
def _vmhwm():
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmHWM")) * 1024
"""
_CLI = _VMHWM + """
import atexit, sys
out = sys.argv.pop()
atexit.register(lambda: open(out, "w").write(str(_vmhwm())))
sys.argv = ["bertscope", "trace", *sys.argv[1:]]
from bertscope.cli import main
sys.exit(main())
"""
_HTA_CLI = _VMHWM + """
import sys
out = sys.argv.pop()
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
b = a.get_gpu_kernel_breakdown()
open(out, "w").write(str(_vmhwm()))
"""


def _whole(script: str, arg: str, tmp: Path, *, hta: bool = False,
           env: dict[str, str] | None = None, extra: tuple[str, ...] = ()
           ) -> tuple[float, float]:
    """(wall seconds from start to exit, VmHWM bytes) of one fresh Python running `script`
    on `arg` (and `extra`, more arguments of the command)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    if hta and HTA_PATH:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (HTA_PATH, env.get("PYTHONPATH")) if p)
    peak = tmp / "peak"
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", script, arg, *extra, str(peak)],
                         capture_output=True, text=True, check=False, env=env)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr else "failed")
    return wall, float(peak.read_text())


def cli_vs_hta(files: list[Path], runs: int, versus: Path | None = None, fmt: str = "table"
               ) -> list[tuple[str, float, float]]:
    """`bertscope trace FILE` vs HTA on each file, whole processes alternated, `runs` each;
    prints a line per file and returns (label, speed ratio, memory ratio). With `versus`
    (another checkout's src folder) its command runs in the same alternation (A/B). `fmt`:
    the terminal report ("table") or an export format written to stdout."""
    extra = () if fmt == "table" else ("--format", fmt)
    what = "bertscope trace" + "".join(f" {a}" for a in extra)
    if not _hta_installed():
        print("[cli] HTA not installed (set HTA_PATH): skipping")
        return []
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        env = {"BERTSCOPE_STORE": str(t / "runs.sqlite"), "COLUMNS": "120"}
        for f in files:
            folder = t / f"only_{f.name}"
            folder.mkdir()
            shutil.copy(f, folder / f.name)
            ours, hta, other = [], [], []
            for _ in range(runs):
                ours.append(_whole(_CLI, str(folder / f.name), t, env=env, extra=extra))
                hta.append(_whole(_HTA_CLI, str(folder), t, hta=True))
                if versus is not None:
                    other.append(_whole(_CLI, str(folder / f.name), t, extra=extra,
                                        env={**env, "PYTHONPATH": str(versus)}))
            o_s, o_m = (statistics.median(x) for x in zip(*ours, strict=True))
            h_s, h_m = (statistics.median(x) for x in zip(*hta, strict=True))
            size = f.stat().st_size
            print(f"[cli {f.name}] {size / 2**20:.2f} MiB: {what} {o_s:.2f} s, "
                  f"{_gib(o_m)}; HTA {h_s:.2f} s, {_gib(h_m)}; {h_s / o_s:.2f}x faster at "
                  f"{o_m / h_m:.3f} of HTA's peak (median of {runs}, alternated; target >= 4x "
                  f"at <= 0.2)", flush=True)
            if other:
                v_s, v_m = (statistics.median(x) for x in zip(*other, strict=True))
                print(f"[cli {f.name} vs {versus}] {what} {v_s:.2f} s, {_gib(v_m)}: this tree "
                      f"{v_s / o_s:.2f}x faster at {o_m / v_m:.3f} of its peak", flush=True)
            out.append((f.name, h_s / o_s, o_m / h_m))
    return out


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


def cli_files(args: argparse.Namespace) -> None:
    """--cli: the given files, and with --cli-recorded the HF traces recorded now."""
    formats = args.cli_format.split(",")
    if not args.cli_recorded:
        for fmt in formats:
            cli_vs_hta(args.cli, args.runs, args.cli_vs, fmt)
        return
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, __file__, "--size-mb", "0", "--record-into", tmp,
                        "--recorded-mb", str(args.recorded_mb)], check=True,
                       capture_output=True,
                       env={**os.environ, "TRANSFORMERS_VERBOSITY": "error",
                            "PYTHONWARNINGS": "ignore"})
        recorded = sorted(Path(tmp).glob("*/*.json.gz"))
        for fmt in formats:
            cli_vs_hta([*args.cli, *recorded], args.runs, args.cli_vs, fmt)


def main() -> None:
    """Run the benchmarks."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=100, help="trace size for the comparison")
    ap.add_argument("--big", action="store_true", help="also read a generated 1 GiB trace")
    ap.add_argument("--big-gb", type=float, default=1.0, help="size of the --big trace")
    ap.add_argument("--small", action="store_true",
                    help="also compare on a trace gzipped to --small-mb, whole processes")
    ap.add_argument("--small-mb", type=float, default=2.0, help="gzipped size of --small")
    ap.add_argument("--recorded", action="store_true",
                    help="also compare on CPU traces recorded now from HF BERT/GPT-2/ViT "
                         "training steps (needs torch and transformers)")
    ap.add_argument("--recorded-mb", type=float, default=2.5, help="gzipped size of each")
    ap.add_argument("--runs", type=int, default=3, help="runs per side for --recorded and --cli")
    ap.add_argument("--startup-vs", type=Path,
                    help="with --startup: another checkout's src folder, run interleaved")
    ap.add_argument("--record-into", type=Path, help=argparse.SUPPRESS)  # --recorded's child
    ap.add_argument("--startup", action="store_true",
                    help="also time `bertscope trace` on a 2 KB trace")
    ap.add_argument("--cli", type=Path, nargs="*", default=[],
                    help="trace files: `bertscope trace FILE` vs HTA, whole processes")
    ap.add_argument("--cli-recorded", action="store_true",
                    help="with --cli: also the HF traces --recorded records")
    ap.add_argument("--cli-vs", type=Path,
                    help="with --cli: another checkout's src folder, run in the alternation")
    ap.add_argument("--cli-format", default="table",
                    help="with --cli: table (the terminal report), csv or json (the rows to "
                         "stdout); a comma list runs each in turn")
    args = ap.parse_args()
    if args.record_into is not None:
        record_all(args.record_into, args.recorded_mb)
        return
    if args.size_mb > 0:
        versus(args.size_mb)
    if args.small:
        small(args.small_mb)
    if args.recorded:
        recorded(args.recorded_mb, args.runs)
    if args.startup:
        startup(versus=args.startup_vs)
    if args.cli or args.cli_recorded:
        cli_files(args)
    if args.big:
        big(args.big_gb)
    print(json.dumps({"python": sys.version.split()[0]}))


if __name__ == "__main__":
    main()
