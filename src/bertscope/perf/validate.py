"""Calibrate on some configs, predict others, and compare with measurement.

    specs = parse_specs("bert-mini:8:128,bert-small:4:128")      # model:batch:seq
    profile, fits = calibrate_local("cpu", [profile(...) for ...])
    report = compare(measured_result, profile)                   # errors for one config

Configs used for calibration are kept apart from those validated (`validate` refuses an
overlap). Errors: iteration time (predicted vs the measured, profiled iteration), the op
time (sum of measured rows), each category's share in percentage points, and per join key
(see `calibrate.py`) for GEMM and memory-bound keys.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bertscope.config import ModelConfig, RunConfig, get_model
from bertscope.errors import BertscopeError
from bertscope.optable import Op, OpTable
from bertscope.perf.calibrate import (
    KEYS,
    fit_from_microbench,
    fit_from_tables,
    join_keys,
    joined,
)
from bertscope.perf.efficiency import (
    BandwidthEfficiency,
    DeviceProfile,
    GemmEfficiency,
    Overhead,
)
from bertscope.perf.predict import predict


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One config to profile: model preset (or config.json path), batch, seq."""

    model: str
    batch: int
    seq: int

    def __str__(self) -> str:
        return f"{self.model}:{self.batch}:{self.seq}"

    def configs(self, **run: Any) -> tuple[ModelConfig, RunConfig]:
        """The model and run configs of this spec."""
        return get_model(self.model), RunConfig(batch=self.batch, seq=self.seq, **run)


def parse_specs(text: str) -> list[RunSpec]:
    """Parse "model:batch:seq,model:batch:seq,..."."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        bits = part.split(":")
        if len(bits) != 3:
            raise BertscopeError(f"bad config {part!r}: write MODEL:BATCH:SEQ, e.g. "
                                 f"bert-mini:8:128")
        try:
            out.append(RunSpec(bits[0], int(bits[1]), int(bits[2])))
        except ValueError:
            raise BertscopeError(f"bad config {part!r}: BATCH and SEQ must be integers") \
                from None
    if not out:
        raise BertscopeError("no configs given; write MODEL:BATCH:SEQ[,...]")
    return out


def calibrate_local(device: str, results: Sequence[Any] = (), *, quick: bool = False,
                    log: Callable[[str], None] = lambda _: None) -> tuple[DeviceProfile,
                                                                             dict[str, Any]]:
    """Microbenchmark the local device and fit its efficiency models; with profile results
    (measured op tables), refit GEMM and memory models from them. Returns the profile and a
    report of where each figure came from."""
    import torch

    from bertscope.measure.profile import resolve_device
    from bertscope.perf import microbench as mb

    dev = resolve_device(device)
    grid = mb.GEMM_GRID[:8] if quick else mb.GEMM_GRID
    log("GEMM microbenchmarks")
    gemm = mb.gemm_points(grid, dev)
    log("streaming bandwidth")
    stream = mb.stream_points(mb.STREAM_SIZES[:5] if quick else mb.STREAM_SIZES, dev)
    log("per-op overhead")
    overhead_s = mb.launch_overhead(dev)
    bf16 = mb.gemm_points(grid[:4], dev, "bf16") if dev.type == "cuda" else None
    device_desc = mb.local_device(dev, gemm, stream, bf16)
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
                              "bandwidth": device_desc.memory_bandwidth,
                              "overhead_s": overhead_s, "from_profiles": []}
    if results:
        names = [f"{r.meta['model']['name']}:{r.meta['run']['batch']}:{r.meta['run']['seq']}"
                 for r in results]
        profile, fits = fit_from_tables(
            [(r.table, r.analytic) for r in results], profile,
            f"fitted to measured op tables of {', '.join(names)} ({src})")
        report.update(fits, from_profiles=names)
    return profile, report


def compare(result: Any, profile: DeviceProfile) -> dict[str, Any]:
    """Predict the run of a profile result on `profile` and compare with its measurement.

    The iteration is compared whole (predicted rows with their host time against the
    measured iteration); category shares, the op total and each join key compare op time
    alone (predicted time_s - host_s against measured rows), since measured rows hold no
    framework time between ops."""
    pred = predict(result.analytic, profile)
    measured = result.table
    t_pred = float(pred.df["time_s"].sum())
    op_pred = pred.df.assign(time_s=pred.df["time_s"] - pred.df["host_s"])
    t_pred_ops = float(op_pred["time_s"].sum())
    t_iter = float(result.meta["iteration_s"])
    t_ops = float(measured.df["time_s"].sum())
    shares = pd.concat(
        [measured.df.groupby("category")["time_s"].sum().rename("measured") / t_ops,
         op_pred.groupby("category")["time_s"].sum().rename("predicted") / t_pred_ops],
        axis=1).fillna(0.0)
    shares["error_pp"] = 100 * (shares["predicted"] - shares["measured"])
    keys = joined(measured, pred).rename(columns={"measured_s": "measured"})
    p = join_keys(op_pred).groupby(KEYS)["time_s"].sum()
    keys = keys.set_index(KEYS).join(p.rename("predicted")).reset_index()
    keys = keys[(keys["measured"] > 0) & (keys["predicted"] > 0)]
    keys["error"] = (keys["predicted"] - keys["measured"]) / keys["measured"]
    per_kind = {k: float(np.mean(np.abs(g["error"]))) for k, g in keys.groupby("kind")}
    return {
        "config": f"{result.meta['model']['name']}:{result.meta['run']['batch']}:"
                  f"{result.meta['run']['seq']}",
        "measured_iteration_s": t_iter,
        "measured_op_s": t_ops,
        "predicted_s": t_pred,
        "error": (t_pred - t_iter) / t_iter,
        "predicted_op_s": t_pred_ops,
        "op_error": (t_pred_ops - t_ops) / t_ops,
        "shares": shares.reset_index().to_dict(orient="records"),
        "max_share_error_pp": float(shares["error_pp"].abs().max()),
        "per_op_mape": per_kind,
        "per_op": keys[[*KEYS, "flops", "bytes", "measured", "predicted", "error"]].to_dict(
            orient="records"),
    }


def load_result(path: str | Path) -> Any:
    """A saved `bertscope profile` JSON result, with its analytic table rebuilt: an object
    with `table`, `analytic` and `meta`, as `ProfileResult` has."""
    from types import SimpleNamespace

    from bertscope.analytic import build

    p = Path(path)
    try:
        doc = json.loads(p.read_text())
        meta = doc["meta"]
        m = ModelConfig(**meta["model"])
        run = RunConfig(**meta["run"])
        rows = [Op(**{k: r[k] for k in Op._fields if k in r}) for r in doc["rows"]]
    except FileNotFoundError:
        raise BertscopeError(f"{p}: no such file") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BertscopeError(f"{p}: not a bertscope profile result ({e})") from None
    return SimpleNamespace(table=OpTable.from_ops(rows, meta), analytic=build(m, run),
                           meta=meta)


def combine(results: Sequence[Any]) -> Any:
    """One result from several measurements of the same config: each row's time is the
    median over them (a row missing from one took 0 there), the iteration time the median of
    all measured iterations. Returns an object with `table`, `analytic` and `meta`."""
    from types import SimpleNamespace

    if len(results) == 1:
        return results[0]
    keys = list(Op._fields[:Op._fields.index("count")])  # what names a row: name .. elements
    frames = [r.table.df.assign(_round=i) for i, r in enumerate(results)]
    d = pd.concat(frames, ignore_index=True)
    times = (d.pivot_table(index=keys, columns="_round", values="time_s", aggfunc="sum",
                           observed=True).reindex(columns=range(len(results))).fillna(0.0))
    first = d.drop_duplicates(keys).set_index(keys)
    first = first.drop(columns=["time_s", "_round", "intensity"])
    first["time_s"] = times.median(axis=1)
    rows = [Op(**r) for r in first.reset_index().to_dict(orient="records")]
    meta = dict(results[0].meta)
    every = [t for r in results for t in r.meta["iteration_times_s"]]
    meta.update(iteration_s=float(np.median(every)), iteration_times_s=every,
                rounds=len(results), op_time_s=float(first["time_s"].sum()))
    return SimpleNamespace(table=OpTable.from_ops(rows, meta), analytic=results[0].analytic,
                           meta=meta)


def validate(calibrate: Sequence[RunSpec], check: Sequence[RunSpec], *, device: str = "cpu",
             iters: int = 5, warmup: int = 2, statistic: str = "median", rounds: int = 1,
             quick: bool = False, results_dir: str | Path | None = None,
             log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Profile the calibration configs, fit, then profile and predict the held-out ones.

    Measured rows and iteration times are the `statistic` over `iters` iterations (see
    `bertscope.measure.profile`). With `rounds` > 1 every config is measured that many
    times, all configs in turn each round (slow spells of a shared machine then fall on all
    configs alike), and the rounds are combined by their median (`combine`). With
    `results_dir`, each measurement is kept there and reused when present."""
    from bertscope.measure.profile import profile as run_profile

    overlap = {str(s) for s in calibrate} & {str(s) for s in check}
    if overlap:
        raise BertscopeError(f"configs used for calibration cannot be validated: "
                             f"{', '.join(sorted(overlap))}")
    if rounds < 1:
        raise BertscopeError(f"--rounds must be >= 1, got {rounds}")

    def measure(spec: RunSpec, i: int) -> Any:
        stem = str(spec).replace(":", "-").replace("/", "_")
        name = f"{stem}.json" if rounds == 1 else f"{stem}.round{i}.json"
        saved = Path(results_dir) / name if results_dir is not None else None
        if saved is not None and saved.is_file():
            log(f"reusing {saved}")
            return load_result(saved)
        log(f"profiling {spec}" + (f" (round {i + 1} of {rounds})" if rounds > 1 else ""))
        m, run = spec.configs()
        result = run_profile(m, run, iters=iters, warmup=warmup, device=device,
                             statistic=statistic)
        if saved is not None:
            result.write_json(saved)
        return result

    specs = [*calibrate, *check]
    measured: dict[str, list[Any]] = {str(s): [] for s in specs}
    for i in range(rounds):
        for s in specs:
            measured[str(s)].append(measure(s, i))
    fitted = [combine(measured[str(s)]) for s in calibrate]
    profile, fits = calibrate_local(device, fitted, quick=quick, log=log)
    rows = [compare(combine(measured[str(s)]), profile) for s in check]
    errors = np.array([abs(r["error"]) for r in rows])
    return {
        "calibrated_on": [str(s) for s in calibrate],
        "validated_on": [str(s) for s in check],
        "fits": fits,
        "profile": profile.to_dict(),
        "results": rows,
        "mape": float(errors.mean()),
        "max_share_error_pp": max(r["max_share_error_pp"] for r in rows),
    }


__all__ = ["RunSpec", "calibrate_local", "combine", "compare", "load_result", "parse_specs",
           "validate"]
