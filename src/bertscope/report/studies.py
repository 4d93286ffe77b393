"""Terminal reports of the workflows that measure and predict: calibration, validation."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bertscope.report.tables import si


def print_calibration(profile: Any, report: dict[str, Any], out: Console) -> None:
    """Print a calibrated device profile: fitted peak and bandwidth with their sources, and
    each efficiency model's fitted fields."""
    t = Table(title=f"Calibrated {escape(profile.device.sku)}", title_justify="left",
              header_style="bold")
    for col in ("figure", "value", "source"):
        t.add_column(col, overflow="fold")
    t.add_row("fp32 GEMM peak", si(report["gemm_peak_flops"], "FLOP/s"),
              escape(profile.device.sources["peaks.fp32"]))
    t.add_row("bandwidth", si(report["bandwidth"], "B/s"),
              escape(profile.device.sources["memory_bandwidth"]))
    for name, model in (("gemm", profile.gemm), ("bandwidth", profile.bandwidth),
                        ("overhead", profile.overhead)):
        fields = {k: v for k, v in model.to_dict().items() if k not in ("model", "source")}
        t.add_row(f"{name} model", escape(json.dumps(fields, default=str)[:300]),
                  escape(model.source))
    out.print(t)


def print_trace_calibration(profile: Any, report: dict[str, Any], out: Console) -> None:
    """Print a profile fitted to traces: the traces (file, sha256, device, iterations), the
    kernels each fit used, the traces' GEMM time against the fitted model's, then the
    profile as `print_calibration` shows it."""
    t = Table(title="Traces", title_justify="left", header_style="bold")
    for col in ("file", "sha256", "device", "time", "iterations", "GEMM points",
                "memory points", "GEMM time / iteration"):
        t.add_column(col, overflow="fold")
    for tr in report["traces"]:
        t.add_row(escape(tr["file"]), tr["sha256"][:16], escape(tr["device"]),
                  tr["time_source"], str(tr["iterations"]), str(tr["gemm_points"]),
                  str(tr["memory_points"]), si(tr["gemm_s"], "s"))
    out.print(t)
    device = report["catalog_device"] or "no catalog match: peaks are the trace's rates"
    out.print(f"device: {escape(report['device'])} ({escape(device)})")
    kernels = report["kernels"]
    out.print("kernels per fit: GEMM " + ", ".join(f"{f} {n}" for f, n in
                                                   kernels["gemm"].items())
              + "; memory " + (", ".join(f"{c} {n}" for c, n in kernels["memory"].items())
                               or "none (assumed default bandwidth model)"))
    trace_s, fitted_s = report["gemm_trace_s"], report["gemm_fitted_s"]
    out.print(f"GEMM time in the traces {si(trace_s, 's')}, fitted model "
              f"{si(fitted_s, 's')} ({100 * (fitted_s / trace_s - 1):+.1f}%)")
    print_calibration(profile, report, out)


def print_validation(report: dict[str, Any], out: Console) -> None:
    """Print a validation report: one row per held-out config, then the summary."""
    out.print(f"calibrated on: {escape(', '.join(report['calibrated_on']))}")
    t = Table(title="Predicted vs measured (held-out configs)", title_justify="left",
              header_style="bold")
    for col in ("config", "measured", "predicted", "error", "max category share error",
                "GEMM per-op error", "memory per-op error"):
        t.add_column(col, justify="left" if col == "config" else "right", no_wrap=True)
    for r in report["results"]:
        t.add_row(escape(r["config"]), si(r["measured_iteration_s"], "s"),
                  si(r["predicted_s"], "s"),
                  f"{100 * r['error']:+.1f}%", f"{r['max_share_error_pp']:.1f} pp",
                  f"{100 * r['per_op_mape'].get('gemm', float('nan')):.1f}%",
                  f"{100 * r['per_op_mape'].get('memory', float('nan')):.1f}%")
    out.print(t)
    out.print(f"MAPE of iteration time: {100 * report['mape']:.1f}%   largest category share "
              f"error: {report['max_share_error_pp']:.1f} pp")


__all__ = ["print_calibration", "print_trace_calibration", "print_validation"]
