"""The `calibrate` and `validate` commands; `register(app)` adds them to the `bertscope` app."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from bertscope.errors import BertscopeError
from bertscope.io import atomic_write, check_folder
from bertscope.report.tables import make_console
from bertscope.trace.attribute import Statistic


def _need_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise BertscopeError("this command measures with PyTorch: pip install "
                             "'bertscope[torch]'") from None


def calibrate_cmd(
    device: Annotated[str, typer.Option(help="cpu, cuda or auto.")] = "cpu",
    from_results: Annotated[list[Path] | None, typer.Option(
        "--from", help="`bertscope profile` JSON results to fit the models to (repeatable).")
    ] = None,
    quick: Annotated[bool, typer.Option(help="Fewer microbenchmark shapes.")] = False,
    output: Annotated[Path, typer.Option(help="Device profile JSON to write.")] = Path(
        "local-profile.json"),
) -> None:
    """Microbenchmark the local device and fit its efficiency models (optionally to measured
    op tables); `bertscope predict --device FILE` then uses the profile."""
    _need_torch()
    check_folder(output)
    from bertscope.perf.validate import calibrate_local, load_result

    results = [load_result(p) for p in from_results or []]
    out = make_console()
    profile, report = calibrate_local(device, results, quick=quick,
                                      log=lambda s: out.print(f"[dim]{s}[/]"))
    profile.save(output)
    t = Table(title=f"Calibrated {profile.device.sku}", title_justify="left",
              header_style="bold")
    for col in ("figure", "value", "source"):
        t.add_column(col, overflow="fold")
    from bertscope.report.tables import si

    t.add_row("fp32 GEMM peak", si(report["gemm_peak_flops"], "FLOP/s"),
              profile.device.sources["peaks.fp32"])
    t.add_row("bandwidth", si(report["bandwidth"], "B/s"),
              profile.device.sources["memory_bandwidth"])
    for name, model in (("gemm", profile.gemm), ("bandwidth", profile.bandwidth),
                        ("overhead", profile.overhead)):
        fields = {k: v for k, v in model.to_dict().items() if k not in ("model", "source")}
        t.add_row(f"{name} model", json.dumps(fields, default=str)[:300], model.source)
    out.print(t)
    out.print(f"wrote {output}")


def validate_cmd(
    calibrate: Annotated[str, typer.Option(
        help="Configs to calibrate on, MODEL:BATCH:SEQ[,...].")] = (
        "bert-mini:16:128,bert-small:8:128,bert-medium:4:128"),
    check: Annotated[str, typer.Option(
        "--validate", help="Held-out configs to predict and compare, MODEL:BATCH:SEQ[,...].")
    ] = "bert-base:2:128,bert-base:4:64,bert-medium:8:64,bert-small:4:256",
    device: Annotated[str, typer.Option(help="cpu, cuda or auto.")] = "cpu",
    iters: Annotated[int, typer.Option(help="Measured iterations per config.")] = 5,
    warmup: Annotated[int, typer.Option(help="Warm-up iterations per config.")] = 2,
    statistic: Annotated[Statistic, typer.Option(
        help="Each op's time over the iterations: median (robust to a slow iteration) or "
             "mean.")] = Statistic.MEDIAN,
    rounds: Annotated[int, typer.Option(
        help="Measure every config this many times, all configs in turn, and take the "
             "median (a shared machine's slow spells then fall on all configs alike).")] = 1,
    output: Annotated[Path | None, typer.Option(help="Write the full report (JSON).")] = None,
    results_dir: Annotated[Path | None, typer.Option(
        help="Keep each config's profile result here and reuse those already there.")] = None,
) -> None:
    """Profile calibration configs, fit the model, then predict held-out configs and compare:
    per-config error, MAPE, per-category share error, per-op error."""
    _need_torch()
    check_folder(output)
    if results_dir is not None and not results_dir.is_dir():
        raise BertscopeError(f"--results-dir {results_dir}: no such folder; create it first")
    from bertscope.perf.validate import parse_specs, validate

    out = make_console()
    report = validate(parse_specs(calibrate), parse_specs(check), device=device, iters=iters,
                      warmup=warmup, statistic=statistic, rounds=rounds,
                      results_dir=results_dir,
                      log=lambda s: out.print(f"[dim]{s}[/]"))
    print_validation(report, out)
    if output is not None:
        atomic_write(output, json.dumps(report, indent=1, default=str).encode())
        out.print(f"wrote {output}")


def print_validation(report: dict[str, Any], out: Console) -> None:
    """Print a validation report: one row per held-out config, then the summary."""
    from bertscope.report.tables import si

    out.print(f"calibrated on: {', '.join(report['calibrated_on'])}")
    t = Table(title="Predicted vs measured (held-out configs)", title_justify="left",
              header_style="bold")
    for col in ("config", "measured", "predicted", "error", "max category share error",
                "GEMM per-op error", "memory per-op error"):
        t.add_column(col, justify="left" if col == "config" else "right", no_wrap=True)
    for r in report["results"]:
        t.add_row(r["config"], si(r["measured_iteration_s"], "s"), si(r["predicted_s"], "s"),
                  f"{100 * r['error']:+.1f}%", f"{r['max_share_error_pp']:.1f} pp",
                  f"{100 * r['per_op_mape'].get('gemm', float('nan')):.1f}%",
                  f"{100 * r['per_op_mape'].get('memory', float('nan')):.1f}%")
    out.print(t)
    out.print(f"MAPE of iteration time: {100 * report['mape']:.1f}%   largest category share "
              f"error: {report['max_share_error_pp']:.1f} pp")


def register(app: typer.Typer) -> None:
    """Add `calibrate` and `validate` to a typer app."""
    app.command("calibrate")(calibrate_cmd)
    app.command("validate")(validate_cmd)


__all__ = ["calibrate_cmd", "print_validation", "register", "validate_cmd"]
