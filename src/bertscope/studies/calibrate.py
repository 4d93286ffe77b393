"""Calibrate the local device: microbenchmarks (`bertscope.measure.microbench`), the
efficiency models fitted to them (`bertscope.perf.calibrate`), and, given measured op
tables, the GEMM and memory models refitted to those.

    profile, report = calibrate_local("cpu", [load_result(p) for p in saved], quick=True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from bertscope.perf.calibrate import fit_from_microbench, fit_from_tables
from bertscope.perf.efficiency import (
    BandwidthEfficiency,
    DeviceProfile,
    GemmEfficiency,
    Overhead,
)
from bertscope.studies.validate import Measurement, config_name


def calibrate_local(device: str, results: Sequence[Measurement] = (), *, quick: bool = False,
                    log: Callable[[str], None] = lambda _: None) -> tuple[DeviceProfile,
                                                                             dict[str, Any]]:
    """Microbenchmark the local device and fit its efficiency models; with profile results
    (measured op tables), refit GEMM and memory models from them. Returns the profile and a
    report of where each figure came from."""
    import torch

    from bertscope.measure import microbench as mb
    from bertscope.measure.profile import resolve_device

    dev = resolve_device(device)
    grid = mb.GEMM_GRID[:8] if quick else mb.GEMM_GRID
    log("GEMM microbenchmarks")
    gemm = mb.gemm_points(grid, dev)
    log("streaming bandwidth")
    stream = mb.stream_points(mb.STREAM_SIZES[:5] if quick else mb.STREAM_SIZES, dev)
    log("per-op overhead")
    overhead_s = mb.launch_overhead(dev)
    # 16-bit GEMM peaks of their own (this 2-core CPU: bf16 ~4x fp32 with AMX; fp16 is
    # emulated on many CPUs): measured on the larger shapes, where the peak is reached
    log("16-bit GEMM microbenchmarks")
    big = [s for s in grid if min(s) >= 256] or list(grid[-2:])
    bf16 = mb.gemm_points(big, dev, "bf16")
    fp16 = mb.gemm_points(big[-2:], dev, "fp16")
    device_desc = mb.local_device(dev, gemm, stream, bf16, fp16)
    src = device_desc.sources["memory_bandwidth"].split(" (")[0]
    # the gemm and bandwidth models are replaced by the fits below
    base = DeviceProfile(device=device_desc,
                         gemm=GemmEfficiency(max_fraction=1.0, half_saturation_flops=0.0,
                                             source="placeholder"),
                         bandwidth=BandwidthEfficiency(max_fraction=1.0, half_saturation_bytes=0.0,
                                                       source="placeholder"),
                         overhead=Overhead(seconds_per_launch=overhead_s,
                                           source=f"{src} (1-element add)"),
                         notes=f"calibrated on {device_desc.sku}, torch {torch.__version__}")
    profile = fit_from_microbench(gemm, stream, base, f"{src} (microbenchmarks)")
    report: dict[str, Any] = {"device": device_desc.sku, "gemm_peak_flops":
                              device_desc.peak_flops("fp32"),
                              "gemm_peak_flops_by_format": {f.value: v for f, v in
                                                            device_desc.peaks.items()},
                              "bandwidth": device_desc.memory_bandwidth,
                              "overhead_s": overhead_s, "from_profiles": []}
    if results:
        names = [config_name(r) for r in results]
        profile, fits = fit_from_tables(
            [(r.table, r.analytic) for r in results], profile,
            f"fitted to measured op tables of {', '.join(names)} ({src})")
        report.update(fits, from_profiles=names)
    return profile, report


__all__ = ["calibrate_local"]
