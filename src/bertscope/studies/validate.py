"""Calibrate on some configs, predict others, and compare with measurement.

    specs = parse_specs("bert-mini:8:128,bert-small:4:128")      # studies.measured
    profile, fits = calibrate_local("cpu", [profile(...) for ...])   # studies.local_calibration
    report = compare(measured_result, profile)                   # errors for one config

Configs used for calibration are kept apart from those validated (`validate` refuses an
overlap). Errors: iteration time (predicted vs the measured, profiled iteration), the op
time (sum of measured rows), each category's share in percentage points, and per join key
(see `perf/fit.py`) for GEMM and memory-bound keys. A measured run here is a `Measurement`
(`studies.measured`): a `ProfileResult` just profiled or a `MeasuredRun` read back.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bertscope.errors import BertscopeError
from bertscope.job import Job
from bertscope.perf.efficiency import DeviceProfile
from bertscope.perf.fit import KEYS, join_keys, joined
from bertscope.perf.predict import predict
from bertscope.stop import STOP, Interrupted, partial_path
from bertscope.studies.fresh import measure_fresh
from bertscope.studies.local_calibration import calibrate_local
from bertscope.studies.measured import (
    Measurement,
    RunSpec,
    combine_rounds,
    config_name,
    load_result,
    retake,
    unsettled_faults,
)


def compare(result: Measurement, profile: DeviceProfile) -> dict[str, Any]:
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
    t_iter = float(result.facts.iteration_s)  # type: ignore[arg-type]
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
        "config": config_name(result),
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


def validate(calibrate: Sequence[RunSpec], check: Sequence[RunSpec], *, device: str = "cpu",
             iters: int = 5, warmup: int = 2, statistic: str = "min", rounds: int = 1,
             quick: bool = False, results_dir: str | Path | None = None,
             log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Profile the calibration configs, fit, then profile and predict the held-out ones.

    Measured rows and iteration times are the `statistic` over `iters` iterations (see
    `bertscope.measure.profile`). With `rounds` > 1 every config is measured that many
    times, all configs in turn each round (slow spells of a shared machine then fall on all
    configs alike), and the rounds are combined by their median, or with the minimum
    statistic their least (`combine_rounds`). With
    `results_dir`, each measurement is kept there and reused when present (its times taken
    again by `statistic` where it saved them per iteration: `retake`), and so are the
    calibration's microbenchmarks (microbench.json; microbench-quick.json with `quick`).
    A CPU measurement whose every iteration faulted pages in (`unsettled_faults`) is taken
    again in a fresh process (`studies.fresh`) and that one is kept.

    Stopping (`bertscope.stop`): a stop request ends the validation after the iteration in
    progress with `Interrupted`; a partial measurement is kept in `results_dir` as
    `NAME.partial.json` (never reused: a saved result marked partial is measured again),
    the complete ones as they are (`kept`: the folder, exit 3); without `results_dir`
    nothing is kept (exit 130)."""
    from bertscope.measure.profile import profile as run_profile  # torch

    overlap = {str(s) for s in calibrate} & {str(s) for s in check}
    if overlap:
        raise BertscopeError(f"configs used for calibration cannot be validated: "
                             f"{', '.join(sorted(overlap))}")
    if rounds < 1:
        raise BertscopeError(f"--rounds must be >= 1, got {rounds}")
    for spec in [*calibrate, *check]:  # every config checked before minutes of profiling
        m, run = spec.configs()
        Job(model=m, run=run)
    if device == "cpu":  # before torch's threads allocate: one malloc arena (`allocator`)
        from bertscope.measure.allocator import keep_freed_memory

        keep_freed_memory()

    def measure(spec: RunSpec, i: int) -> Measurement:
        stem = str(spec).replace(":", "-").replace("/", "_")
        name = f"{stem}.json" if rounds == 1 else f"{stem}.round{i}.json"
        saved = Path(results_dir) / name if results_dir is not None else None
        if saved is not None and saved.is_file():
            reused = load_result(saved)
            if not reused.facts.partial:
                log(f"reusing {saved}")
                return retake(reused, statistic)
            log(f"{saved} holds a partial result (interrupted); measuring {spec} again")
        log(f"profiling {spec}" + (f" (round {i + 1} of {rounds})" if rounds > 1 else ""))
        m, run = spec.configs()
        result = run_profile(m, run, iters=iters, warmup=warmup, device=device,
                             statistic=statistic)
        if result.facts.partial:  # stopped mid-measurement (`bertscope.stop`)
            raise Interrupted(None if saved is None else result.write_json(partial_path(saved)))
        faults = unsettled_faults(result.facts) if device == "cpu" else None
        if faults is not None:  # this process's heap spoiled it: again in a clean one
            log(f"{spec} faulted {faults:,} pages per measured iteration in this process; "
                f"measuring it again in a fresh process")
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    path = measure_fresh(str(spec), saved or Path(tmp) / name, iters=iters,
                                         warmup=warmup, device=device, statistic=statistic)
                except Interrupted as e:  # a partial result in `tmp` is not kept
                    raise Interrupted(e.kept if saved is not None else None) from None
                return _saved(load_result(path), saved)
        if saved is not None:
            result.write_json(saved)
        return _saved(result, saved)

    def _saved(result: Measurement, saved: Path | None) -> Measurement:
        """A measurement just taken, its stale partial file gone; a stop asked during its
        last iteration ends the validation here (the complete result is kept)."""
        if saved is not None:
            partial_path(saved).unlink(missing_ok=True)
            kept.append(saved)
        STOP.check(results_dir if kept else None)
        return result

    kept: list[Path] = []
    specs = [*calibrate, *check]
    measured: dict[str, list[Measurement]] = {str(s): [] for s in specs}
    for i in range(rounds):
        for s in specs:
            measured[str(s)].append(measure(s, i))
    fitted = [combine_rounds(measured[str(s)]) for s in calibrate]
    bench = (None if results_dir is None
             else Path(results_dir) / ("microbench-quick.json" if quick else "microbench.json"))
    # a validation measures the prediction error whatever the inputs: fitted anyway, the
    # consistency check's line logged and kept in the report ("fits")
    profile, fits = calibrate_local(device, fitted, quick=quick, microbench=bench,
                                    allow_inconsistent=True, log=log)
    rows = [compare(combine_rounds(measured[str(s)]), profile) for s in check]
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


__all__ = ["compare", "validate"]
