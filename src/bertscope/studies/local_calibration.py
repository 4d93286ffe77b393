"""Calibrate the local device: microbenchmarks (`bertscope.measure.microbench`), the
efficiency models fitted to them (`bertscope.perf.fit`), and, given measured op
tables, the GEMM and memory models refitted to those.

    profile, report = calibrate_local("cpu", [load_result(p) for p in saved], quick=True)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from bertscope.bounded import read_json
from bertscope.errors import BertscopeError
from bertscope.io import atomic_write
from bertscope.perf.calibration_check import InconsistentCalibration, check_consistency
from bertscope.perf.efficiency import (
    BandwidthEfficiency,
    DeviceProfile,
    GemmEfficiency,
    Overhead,
)
from bertscope.perf.fit import fit_from_microbench, fit_from_tables
from bertscope.stop import STOP
from bertscope.studies.measured import Measurement, config_name

MICROBENCH_VERSION = 1
"""Version of the saved microbenchmark file (`run_microbench`, `calibrate_local`)."""

_FRAMES = ("gemm", "stream", "bf16", "fp16")


def run_microbench(dev: Any, *, quick: bool = False,
                   log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """The local microbenchmarks on torch device `dev`: points of the fp32 GEMM grid
    ("gemm"), streaming copies ("stream"), 16-bit GEMMs ("bf16", "fp16"), as DataFrames,
    and the per-op overhead ("overhead_s"). A stop request (`bertscope.stop`) ends it after
    the point in progress with `Interrupted` (nothing is kept)."""
    from bertscope.measure import microbench as mb

    with STOP.graceful():  # a measuring loop: a stop ends it after the point in progress
        return _microbench(mb, dev, quick=quick, log=log)


def _microbench(mb: Any, dev: Any, *, quick: bool, log: Callable[[str], None]
                ) -> dict[str, Any]:
    """`run_microbench`'s points, measured (its loop body)."""
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
    return {"gemm": gemm, "stream": stream, "overhead_s": overhead_s,
            "bf16": mb.gemm_points(big, dev, "bf16"), "fp16": mb.gemm_points(big[-2:], dev, "fp16")}


def save_microbench(points: dict[str, Any], path: str | Path, *, quick: bool) -> Path:
    """Write `run_microbench`'s points to a JSON file (`load_microbench` reads it back)."""
    doc = {"bertscope_microbench": MICROBENCH_VERSION, "quick": quick,
           "overhead_s": float(points["overhead_s"]),
           **{k: points[k].to_dict(orient="records") for k in _FRAMES}}
    p = Path(path)
    atomic_write(p, (json.dumps(doc, indent=1) + "\n").encode())
    return p


def load_microbench(path: str | Path, *, quick: bool) -> dict[str, Any]:
    """The points of a file `save_microbench` wrote, taken with the same `quick`."""
    p = Path(path)
    try:
        doc = read_json(p)
    except BertscopeError as e:
        raise BertscopeError(f"not a readable microbenchmark file ({e}); delete it to "
                             f"re-measure") from None
    ok = (isinstance(doc, dict) and doc.get("bertscope_microbench") == MICROBENCH_VERSION
          and isinstance(doc.get("overhead_s"), int | float)
          and all(isinstance(doc.get(k), list) and doc[k] for k in _FRAMES))
    if not ok:
        raise BertscopeError(f"{p}: not a bertscope microbenchmark file (version "
                             f"{MICROBENCH_VERSION}); delete it to re-measure")
    if doc.get("quick") is not quick:
        raise BertscopeError(f"{p}: microbenchmarks taken with quick={doc.get('quick')}, "
                             f"asked for quick={quick}; delete it to re-measure")
    return {"overhead_s": float(doc["overhead_s"]),
            **{k: pd.DataFrame(doc[k]) for k in _FRAMES}}


def calibrate_local(device: str, results: Sequence[Measurement] = (), *, quick: bool = False,
                    microbench: str | Path | None = None, allow_inconsistent: bool = False,
                    log: Callable[[str], None] = lambda _: None) -> tuple[DeviceProfile,
                                                                             dict[str, Any]]:
    """Microbenchmark the local device and fit its efficiency models; with profile results
    (measured op tables), refit GEMM and memory models from them. Returns the profile and a
    report of where each figure came from. `microbench`: a JSON file the microbenchmark
    points are read from when it exists, and written to when not (re-predictions from
    saved results are then reproducible). Two or more results are first checked against
    each other (`perf.calibration_check`: each predicted by the fit of the others); inputs
    that disagree raise `InconsistentCalibration` (one line: which, by how much, the fix)
    unless `allow_inconsistent`, which fits them anyway (the report keeps the check)."""
    import torch

    from bertscope.measure import microbench as mb
    from bertscope.measure.profile import resolve_device

    dev = resolve_device(device)
    saved = Path(microbench) if microbench is not None else None
    if saved is not None and saved.is_file():
        log(f"reusing {saved}")
        points = load_microbench(saved, quick=quick)
    else:
        points = run_microbench(dev, quick=quick, log=log)
        STOP.check()  # an interrupted run's points are never saved (`bertscope.stop`)
        if saved is not None:
            save_microbench(points, saved, quick=quick)
    gemm, stream, overhead_s = points["gemm"], points["stream"], points["overhead_s"]
    bf16, fp16 = points["bf16"], points["fp16"]
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
        pairs = [(r.table, r.analytic) for r in results]
        if len(results) >= 2:
            check = check_consistency(pairs, names, profile, f"leave-one-out check ({src})")
            report["consistency"] = check.to_dict()
            if not check.ok and not allow_inconsistent:
                raise InconsistentCalibration(check.line())
            log(check.line())
        profile, fits = fit_from_tables(
            pairs, profile,
            f"fitted to measured op tables of {', '.join(names)} ({src})", inputs=names)
        report.update(fits, from_profiles=names)
    return profile, report


__all__ = ["MICROBENCH_VERSION", "calibrate_local", "load_microbench", "run_microbench",
           "save_microbench"]
