"""Calibrate from traces: fit a device profile to the kernels of Kineto traces recorded with
shapes (`bertscope calibrate --from-trace`), NVIDIA, AMD or CPU-only.

    profile, report = calibrate_from_traces(["step.json.gz"])
    profile.save("a100-from-trace.json")

The points come from `trace.shapes.trace_points` (each kernel joined to its launching op's
input shapes and dtypes); the fits are `perf.fit`'s: `fit_gemm_per_format` (one
`GemmEfficiency` per number format, its size and shape terms, one factor per phase that
preserves the trace's GEMM time per phase) and `fit_memory` (achieved bandwidth per
category). The device is the catalog entry the trace's `deviceProperties` name matches
(its published peaks); otherwise (a CPU-only trace, a device the catalog lacks) a device
whose peaks and bandwidth are the fastest rates the trace shows. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bertscope.errors import BertscopeError
from bertscope.hardware import Device, DeviceKind, catalog
from bertscope.perf.efficiency import DeviceProfile, default_profile
from bertscope.perf.fit import fit_gemm_per_format, fit_memory
from bertscope.stop import STOP
from bertscope.trace.shapes import TracePoints, trace_points

_VENDOR_PREFIXES = ("nvidia-", "tesla-", "amd-instinct-", "amd-radeon-instinct-", "amd-",
                    "instinct-")


def match_device(name: str) -> Device | None:
    """The catalog device a `deviceProperties` name denotes ("NVIDIA A100-SXM4-80GB" ->
    a100-sxm4-80gb, "AMD Instinct MI300X" -> mi300x): the longest catalog name or alias the
    normalized name starts with (followed by its end or a dash); None when none does."""
    norm = "-".join(name.lower().replace("_", " ").split())
    for prefix in _VENDOR_PREFIXES:
        if norm.startswith(prefix):
            norm = norm[len(prefix):]
            break
    best: tuple[int, Device] | None = None
    for d in catalog():
        for key in (d.name, *d.aliases):
            if (norm == key or norm.startswith(key + "-")) and (best is None
                                                                  or len(key) > best[0]):
                best = (len(key), d)
    return best[1] if best else None


def _rate(flops_or_bytes: pd.Series, time_s: pd.Series) -> float:
    ok = time_s > 0
    return float((flops_or_bytes[ok] / time_s[ok]).max()) if ok.any() else 0.0


def trace_device(name: str, gemm: pd.DataFrame, memory: pd.DataFrame, where: str) -> Device:
    """A device for a trace the catalog has no entry for: each GEMM format's peak the fastest
    rate of that format's GEMMs in the trace (fp32, the vector peak, stands in as the fastest
    of them where the trace has no fp32 GEMM), the bandwidth the fastest memory-bound op's."""
    src = f"fastest rate in {where}"
    peaks = {str(f): _rate(g["flops"], g["time_s"]) for f, g in gemm.groupby("format")}
    sources = {f"peaks.{f}": f"{src} ({f} GEMMs)" for f in peaks}
    if "fp32" not in peaks:
        peaks["fp32"] = max(peaks.values())
        sources["peaks.fp32"] = f"{src} (no fp32 GEMM: the fastest GEMM rate stands in)"
    bw = _rate(memory["bytes"], memory["time_s"]) if len(memory) else 0.0
    sources["memory_bandwidth"] = (f"{src} (memory-bound ops)" if bw > 0 else
                                   f"no memory-bound ops in {where}: a 100 GB/s stand-in")
    sources["memory_bytes"] = f"not in {where}: a 1 TB stand-in"
    cpu = name == "cpu"
    return Device(name="trace-cpu" if cpu else "trace-device", sku=name, vendor="unknown",
                  kind=DeviceKind.CPU if cpu else DeviceKind.GPU, peaks=peaks,
                  memory_bytes=1e12, memory_bandwidth=bw if bw > 0 else 1e11, sources=sources,
                  notes=f"peaks and bandwidth are the fastest rates in {where}, not "
                        f"datasheet figures")


def _frames(points: Sequence[TracePoints]) -> tuple[pd.DataFrame, pd.DataFrame]:
    gemm = pd.DataFrame([r for p in points for r in p.gemm])
    memory = pd.DataFrame([r for p in points for r in p.memory])
    if len(memory):
        memory = memory[(memory["bytes"] > 0) & (memory["time_s"] > 0)]
    return gemm.assign(kind="gemm") if len(gemm) else gemm, memory


def fitted_gemm_s(profile: DeviceProfile, gemm: pd.DataFrame) -> float:
    """GEMM time the profile's GEMM model gives the trace's own GEMM points (compute only:
    FLOPs / (peak x fraction), each format at its own peak)."""
    total = 0.0
    for fmt, g in gemm.groupby("format"):
        pick = getattr(profile.gemm, "for_format", None)
        model = profile.gemm if pick is None else pick(str(fmt))
        peak = profile.device.peak_flops(str(fmt))
        total += float(np.sum(g["flops"].to_numpy(float) / (peak * model.fraction(g))))
    return total


def calibrate_from_traces(paths: Sequence[str | Path]) -> tuple[DeviceProfile, dict[str, Any]]:
    """Fit a device profile to one or more traces of one device, recorded with shapes.

    Returns the profile (its `provenance`: each trace's file name and sha256, the device,
    kernels used per fit, the date) and a report. One-line errors: a missing file, a file
    that is not a trace, a trace without shapes, traces of different devices, no GEMMs with
    shapes."""
    if not paths:
        raise BertscopeError("calibrate --from-trace: give at least one trace file")
    points = []
    for p in paths:  # a stop request (`bertscope.stop`) is honoured between traces
        STOP.check()
        points.append(trace_points(p))
    STOP.check()
    names = sorted({p.device for p in points})
    if len(names) > 1:
        raise BertscopeError(f"the traces ran on different devices ({', '.join(names)}); "
                             f"calibrate one device at a time")
    name = names[0]
    files = ", ".join(p.path.name for p in points)
    where = f"trace {files}" if len(points) == 1 else f"traces {files}"
    gemm, memory = _frames(points)
    if not len(gemm) or int(((gemm["flops"] > 0) & (gemm["time_s"] > 0)).sum()) < 3:
        unsized = sum(p.unsized_gemm_s for p in points)
        why = (f" ({unsized * 1e3:.3g} ms of GEMM kernels launched by ops without shapes "
               f"the GEMM registry reads)" if unsized > 0 else "")
        raise BertscopeError(f"{where}: fewer than 3 GEMMs with shapes found{why}; a GEMM "
                             f"fit needs aten::mm/addmm/bmm/baddbmm/matmul/linear ops with "
                             f"\"Input Dims\" and their kernels")
    catalog_device = None if name == "cpu" else match_device(name.split(" + ")[0])
    device = catalog_device or trace_device(name, gemm, memory, where)
    base = default_profile(device)
    digests = ", ".join(f"{p.path.name} sha256 {p.sha256[:12]}" for p in points)
    source = f"fitted to {where} ({digests}) on {name}"
    # one run's launches, measured under one load: least squares in time per launch (the
    # large launches weigh most, and the intercepts keep the fixed costs of small ones: a
    # median of per-launch rates lets a 192-byte loss that takes milliseconds set the rate
    # of a 125 MB one), not the median fit meant for noisy separate runs
    # a format the traces lack: the catalog device's own figures (its source says so), an
    # unknown device's refused (`FormatGemmEfficiency.for_format`)
    profile, gemm_model, fits = fit_gemm_per_format(
        gemm, base, source, preserve_total=True, robust=False,
        fallback=base.gemm if catalog_device is not None else None,
        inputs=[p.path.name for p in points])
    models: dict[str, Any] = {"gemm": gemm_model}
    if len(memory) >= 2:
        models["bandwidth"] = fit_memory(memory, profile.device.memory_bandwidth, source,
                                         robust=False)
    when = date.today().isoformat()
    kernels = {
        "gemm": {str(f): int(g["kernels"].sum()) for f, g in gemm.groupby("format")},
        "memory": ({str(c): int(g["kernels"].sum()) for c, g in memory.groupby("category")}
                   if len(memory) else {}),
    }
    provenance = {
        "from": "trace", "date": when, "device": name,
        "catalog_device": catalog_device.name if catalog_device else None,
        "traces": [{"file": p.path.name, "path": str(p.path), "sha256": p.sha256,
                    "device": p.device, "time_source": p.time_source,
                    "iterations": p.iterations, "gemm_points": len(p.gemm),
                    "memory_points": len(p.memory), "gemm_s": p.gemm_s} for p in points],
        "kernels": kernels,
        "points": {"gemm": len(gemm), "memory": len(memory)},
    }
    profile = replace(profile.with_models(**models), provenance=provenance,
                      notes=f"calibrated from {where} on {name}, {when}; overhead "
                            f"{profile.overhead.source}")
    trace_s = float(gemm["time_s"].sum())
    report = {"device": name, "catalog_device": provenance["catalog_device"],
              "gemm_peak_flops": profile.device.peak_flops("fp32"),
              "bandwidth": profile.device.memory_bandwidth, "traces": provenance["traces"],
              "kernels": kernels, "gemm_trace_s": trace_s,
              "gemm_fitted_s": fitted_gemm_s(profile, gemm),
              "memory_categories": sorted(getattr(profile.bandwidth, "per_category", {})),
              **fits}
    return profile, report


__all__ = ["calibrate_from_traces", "fitted_gemm_s", "match_device", "trace_device"]
