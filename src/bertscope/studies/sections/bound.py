"""Section 2: compute-bound vs memory-bound time per device and precision."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bertscope.perf import Prediction
from bertscope.studies.sections.context import GEMM, MEMORY_BOUND_AT, Ctx, Section, pct


def bound_share(ctx: Ctx) -> Section:
    """2. Time in memory-bandwidth-bound ops per device and precision; per-op rooflines with
    each device's roofs (bandwidth, GEMM and vector peaks of the format that ran)."""
    rows, ops, roofs = [], [], []
    for m in ctx.models:
        for ph in ctx.phases:
            for prec in ctx.precisions:
                run = ctx.run(ph, prec)
                for dev in ctx.running(prec):
                    df = ctx.pred(m, run, dev).df
                    fmt = ctx.on(dev, prec)
                    total = df["time_s"].sum()
                    by = df.groupby("bound", observed=True)["time_s"].sum() / total
                    non_gemm = df.loc[~df["category"].astype(str).isin(GEMM), "time_s"].sum()
                    rows.append({"model": m.name, "phase": ph.name, "precision": ctx.label(prec),
                                 "format": fmt.value if fmt else "",
                                 "device": dev.device.name,
                                 "memory_bound": float(by.get("memory", 0.0)),
                                 "compute_bound": float(by.get("compute", 0.0)),
                                 "overhead_bound": float(by.get("overhead", 0.0)),
                                 "non_gemm_share": float(non_gemm / total)})
                    if m is ctx.big and ph is ctx.phases[0] and prec is ctx.low:
                        pr = Prediction.of(ctx.pred(m, run, dev))
                        roofs.append({"device": dev.device.name,
                                      "format": fmt.value if fmt else "",
                                      "bandwidth": float(pr.bandwidth),
                                      "gemm_format": str(pr.gemm_format),
                                      "gemm_peak_flops": float(pr.gemm_peak_flops),
                                      "vector_format": str(pr.vector_format),
                                      "vector_peak_flops": float(pr.vector_peak_flops)})
                        flops = df["flops"].to_numpy()
                        ok = (flops > 0) & (df["time_s"].to_numpy() > 0)
                        ops.append(pd.DataFrame({
                            "device": dev.device.name, "format": fmt.value if fmt else "",
                            "category": df["category"].astype(str),
                            "intensity": df["intensity"], "achieved_flops":
                            np.where(ok, flops / np.maximum(df["time_s"], 1e-30), 0.0),
                            "time_s": df["time_s"]})[ok])
    df = pd.DataFrame(rows)
    sel = df[(df["model"] == ctx.big.name) & (df["precision"] == ctx.label(ctx.low))
             & (df["phase"] == ctx.phases[-1].name)].set_index("device")["memory_bound"]
    heavy = [d for d, v in sel.items() if v >= MEMORY_BOUND_AT]
    light = [d for d, v in sel.items() if v < MEMORY_BOUND_AT]
    findings = []
    if heavy:
        findings.append(f"{ctx.big.name}, {ctx.phases[-1].name}, {ctx.label(ctx.low)}: at least "
                        f"{pct(MEMORY_BOUND_AT)} of the iteration is bound by memory bandwidth "
                        f"on {', '.join(heavy)} (up to {pct(sel[heavy].max())} on "
                        f"{sel[heavy].idxmax()}).")
    if light:
        findings.append(f"Under {pct(MEMORY_BOUND_AT)} on {', '.join(light)} "
                        f"({', '.join(f'{d} {pct(sel[d])}' for d in light)}).")
    if len(ctx.precisions) > 1:
        lo, hi = ctx.label(ctx.precisions[0]), ctx.label(ctx.precisions[-1])
        p = df.groupby(["device", "precision"], observed=True)["non_gemm_share"].mean().unstack()
        p = p[[lo, hi]].dropna()  # devices that run both columns
        rises = [d for d in p.index if p.loc[d, hi] > p.loc[d, lo]]
        findings.append(f"Going from {lo} to {hi} the memory-bound (non-GEMM) share rises on "
                        f"{len(rises)} of {len(p)} devices (mean {pct(p[lo].mean())} -> "
                        f"{pct(p[hi].mean())}): faster tensor math leaves the rest exposed.")
    return Section("bound", "Compute-bound vs memory-bound", findings,
                   {"bound_share": df, "ops": pd.concat(ops) if ops else pd.DataFrame(),
                    "roofs": pd.DataFrame(roofs)},
                   "bound")


__all__ = ["bound_share"]
