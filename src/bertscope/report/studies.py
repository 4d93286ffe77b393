"""Terminal reports of the workflows that measure and predict: calibration, validation."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bertscope.report.fields import flat_fields, value_text
from bertscope.report.tables import name_column, si


def print_calibration(profile: Any, report: dict[str, Any], out: Console) -> None:
    """Print a calibrated device profile: the fitted peak and bandwidth, each efficiency
    model's fitted parameters (one row each, three significant digits; a GEMM model's
    unfitted fallback named, not listed), then where each figure comes from, a line each."""
    t = Table(title=f"Calibrated {escape(profile.device.sku)}", title_justify="left",
              header_style="bold")
    t.add_column("model", no_wrap=True)
    t.add_column("parameter", no_wrap=True)
    t.add_column("value", justify="right", overflow="ellipsis")
    t.add_row("device", "fp32 GEMM peak", si(report["gemm_peak_flops"], "FLOP/s"))
    t.add_row("", "bandwidth", si(report["bandwidth"], "B/s"))
    sources = [("fp32 GEMM peak", profile.device.sources["peaks.fp32"]),
               ("bandwidth", profile.device.sources["memory_bandwidth"])]
    for name, model in (("gemm", profile.gemm), ("bandwidth", profile.bandwidth),
                        ("overhead", profile.overhead)):
        t.add_section()
        fitted = model.to_dict()
        rows = [(f, value_text(v)) for f, v in flat_fields(fitted, ("model", "source",
                                                                    "fallback"))]
        if isinstance(fitted.get("fallback"), dict):  # the catalog's model, not fitted
            rows.append(("fallback", f"{fitted['fallback'].get('model', '?')} (the "
                                     f"catalog's figures, not fitted)"))
        for i, (field, text) in enumerate(rows):
            t.add_row(name if i == 0 else "", escape(field), escape(text))
        sources.append((f"{name} model", model.source))
    out.print(t)
    out.print("sources:")
    for what, source in sources:
        out.print(f"  {what}: {escape(source)}")


def print_trace_calibration(profile: Any, report: dict[str, Any], out: Console) -> None:
    """Print a profile fitted to traces: the traces (file, sha256, iterations), the device, the
    kernels each fit used, the traces' GEMM time against the fitted model's, then the
    profile as `print_calibration` shows it."""
    t = Table(title="Traces (time: device or host clock; pts: points each fit used; GEMM/iter: "
                    "GEMM time per iteration)", title_justify="left", header_style="bold")
    name_column(t, "file")
    t.add_column("sha256", no_wrap=True)  # its start; the device is the line below
    for col in ("time", "iters", "GEMM pts", "mem pts", "GEMM/iter"):
        t.add_column(col, justify="left" if col == "time" else "right", no_wrap=True)
    for tr in report["traces"]:
        t.add_row(escape(tr["file"]), tr["sha256"][:8],
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
