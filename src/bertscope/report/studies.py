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


__all__ = ["print_calibration", "print_validation"]
