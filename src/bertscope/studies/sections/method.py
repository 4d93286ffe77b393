"""Section 11: how the study was obtained (models per device, what was measured, measured vs
predicted)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from bertscope.analytic import build
from bertscope.perf import Prediction, predict
from bertscope.studies.sections.context import Ctx, MeasuredPart, Section


def method(ctx: Ctx, measured: list[MeasuredPart], settings: dict[str, Any]) -> Section:
    """11. How this was obtained: the models each device's prediction uses, what was
    measured, and the measured iteration against its prediction where a CPU profile was
    studied."""
    dev = pd.DataFrame([{"device": d.device.name, "sku": d.device.sku,
                         "gemm model": d.gemm.source, "bandwidth model": d.bandwidth.source,
                         "overhead model": d.overhead.source} for d in ctx.devices])
    assumed = [d.device.name for d in ctx.devices if "assumed" in d.gemm.source]
    findings = [f"Predicted parts: the analytic op table of each configuration timed by the "
                f"roofline with efficiency models; {len(assumed)} of {len(ctx.devices)} devices "
                f"use assumed default models (calibrate one with `bertscope calibrate` and pass "
                f"the profile in --device)."]
    findings += [m.note + "." for m in measured] or [
        "No measured part (--no-measure): every number is predicted."]
    rows = []
    for m in measured:  # measured vs predicted where a profile of this kind of device exists
        job = m.table.job
        if job is None or not m.iteration_s:
            continue
        for d in ctx.devices:
            if d.device.kind.value != "cpu":
                continue
            t = Prediction.of(predict(build(job), d)).time_s
            err = (t - m.iteration_s) / m.iteration_s
            rows.append({"device": d.device.name, "measured_s": m.iteration_s,
                         "predicted_s": t, "error": err})
            findings.append(f"{m.model} on {d.device.name}: predicted {t * 1e3:.0f} ms vs "
                            f"measured {m.iteration_s * 1e3:.0f} ms ({err:+.0%}).")
    if measured and not rows:
        findings.append("No CPU profile among the devices, so the measured part is not "
                        "compared with a prediction: pass the profile `bertscope calibrate` "
                        "writes in --device.")
    tables = {"devices": dev}
    if rows:
        tables["measured_vs_predicted"] = pd.DataFrame(rows)
    return Section("how", "How this was obtained", findings, tables, "none",
                      notes=[f"bertscope {settings['bertscope']}, torch {settings['torch']}, "
                             f"Python {settings['python']} on {settings['machine']} "
                             f"({settings['cpus']} CPUs)"])


__all__ = ["method"]
