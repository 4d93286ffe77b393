"""Microbenchmarks of the local device (CPU, or CUDA when present): GEMM throughput over shapes,
streaming bandwidth, per-op overhead; and the local device's `Device` description built from
them (every figure's source says it was measured, where and with what). The fits made from
these points: `bertscope.perf.fit`; the workflow: `bertscope.studies.local_calibration`.
The point loops are stop points (`bertscope.stop`): a stop request raises `Interrupted` after
the point in progress.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Iterable
from datetime import date
from pathlib import Path

import pandas as pd
import torch

from bertscope.hardware import Device, DeviceKind
from bertscope.stop import STOP

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _best_time(fn: Callable[[], object], dev: torch.device, *, min_time: float = 0.05,
               repeat: int = 3) -> float:
    """Median over `repeat` rounds of the mean time per call, each round >= min_time."""
    fn()
    _sync(dev)
    t0 = time.perf_counter()
    fn()
    _sync(dev)
    once = max(time.perf_counter() - t0, 1e-7)
    n = max(1, int(min_time / once))
    rounds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        _sync(dev)
        rounds.append((time.perf_counter() - t0) / n)
    return statistics.median(rounds)


def gemm_points(shapes: Iterable[tuple[int, int, int]], dev: torch.device,
                dtype: str = "fp32") -> pd.DataFrame:
    """Time torch.mm for each (M, N, K): columns m, n, k, batch, flops, count, time_s."""
    rows = []
    for m, n, k in shapes:
        a = torch.randn(m, k, device=dev, dtype=_DTYPES[dtype])
        b = torch.randn(k, n, device=dev, dtype=_DTYPES[dtype])
        t = _best_time(lambda a=a, b=b: torch.mm(a, b), dev)
        rows.append({"m": m, "n": n, "k": k, "batch": 1, "flops": 2.0 * m * n * k, "count": 1,
                     "time_s": t})
        STOP.check()  # a stop point of the stop protocol (`bertscope.stop`)
    return pd.DataFrame(rows)


def stream_points(sizes: Iterable[int], dev: torch.device) -> pd.DataFrame:
    """Time a copy of `size` bytes (read + write = 2 x size moved): bytes, count, time_s."""
    rows = []
    for size in sizes:
        src = torch.ones(max(1, size // 4), device=dev)
        dst = torch.empty_like(src)
        t = _best_time(lambda s=src, d=dst: d.copy_(s), dev)
        rows.append({"bytes": 2.0 * src.numel() * 4, "count": 1, "time_s": t})
        STOP.check()
    return pd.DataFrame(rows)


def launch_overhead(dev: torch.device) -> float:
    """Seconds of one tiny op (a 1-element add): dispatch plus launch."""
    x = torch.ones(1, device=dev)
    return _best_time(lambda: torch.add(x, x), dev, min_time=0.02)


GEMM_GRID = [(s, s, s) for s in (64, 128, 256, 512, 768, 1024, 1536)] + [
    (512, 3072, 768), (512, 768, 3072), (3072, 768, 512), (256, 30522, 768),
    (128, 64, 128), (128, 128, 64), (2048, 1024, 1024), (64, 2, 768)]
"""Square sizes plus shapes that BERT op tables contain (FFN, decoder, attention, classifier)."""

STREAM_SIZES = [2**p for p in range(16, 29, 2)]
"""64 KiB ... 256 MiB copies."""


CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")
"""Where Linux describes the CPU's caches (index*/level, index*/size)."""


def last_level_cache(dev: torch.device, caches: Path = CPU_CACHES) -> float | None:
    """Bytes of the device's last-level cache: a CUDA device's L2 (torch's device
    properties), the largest-level cache Linux lists for the CPU; None where unknown."""
    if dev.type == "cuda":
        size = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0)
        return float(size) if size else None
    best: tuple[int, float] | None = None
    for index in sorted(caches.glob("index*")):
        try:
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip().upper()
            scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
            size = float(text.rstrip("KMG")) * scale
        except (OSError, ValueError):
            continue
        if size > 0 and (best is None or level > best[0]):
            best = (level, size)
    return None if best is None else best[1]


def local_device(dev: torch.device, gemm: pd.DataFrame, stream: pd.DataFrame,
                 bf16_gemm: pd.DataFrame | None = None,
                 fp16_gemm: pd.DataFrame | None = None) -> Device:
    """The local device as a `Device`: peaks and bandwidth are the best measured figures
    (a 16-bit peak for each 16-bit format measured: a bf16 run is then held to its own
    measured rate, not the fp32 one)."""
    when = date.today().isoformat()
    where = (torch.cuda.get_device_name(dev) if dev.type == "cuda"
             else f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} "
                  f"threads")
    src = f"measured by bertscope calibrate on {where}, torch {torch.__version__}, {when}"
    peaks = {"fp32": float((gemm["flops"] / gemm["time_s"]).max())}
    for fmt, points in (("bf16", bf16_gemm), ("fp16", fp16_gemm)):
        if points is not None and len(points):
            peaks[fmt] = float((points["flops"] / points["time_s"]).max())
    bw = float((stream["bytes"] / stream["time_s"]).max())
    if dev.type == "cuda":
        mem = float(torch.cuda.get_device_properties(dev).total_memory)
    else:
        mem = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    sources = {f"peaks.{f}": f"{src} (best torch.mm over the GEMM grid)" for f in peaks}
    sources["memory_bandwidth"] = f"{src} (best copy over 64 KiB..256 MiB)"
    sources["memory_bytes"] = f"{src} (device/system memory)"
    cache = last_level_cache(dev)
    if cache is not None:
        sources["on_chip_bytes"] = (f"last-level cache of {where} ("
                                    + ("torch.cuda device properties, L2_cache_size)"
                                       if dev.type == "cuda" else f"{CPU_CACHES}/index*)"))
    return Device(name=f"local-{dev.type}", sku=where, vendor="local",
                  kind=DeviceKind.GPU if dev.type == "cuda" else DeviceKind.CPU,
                  peaks=peaks, memory_bytes=mem, memory_bandwidth=bw, sources=sources,
                  on_chip_bytes=cache,
                  on_chip_note="" if cache is None else "last-level cache",
                  notes="peaks and bandwidth are the best measured rates, not datasheet "
                        "figures")


__all__ = ["CPU_CACHES", "GEMM_GRID", "STREAM_SIZES", "gemm_points", "last_level_cache",
           "launch_overhead", "local_device", "stream_points"]
