"""Section 5: how the breakdown moves between precisions."""

from __future__ import annotations

import pandas as pd

from bertscope.config import Precision
from bertscope.perf import Prediction
from bertscope.studies.sections.context import GEMM, Ctx, Section, shares


def mixed_precision(ctx: Ctx) -> Section:
    """5. How the breakdown moves between precisions."""
    rows = []
    ph = ctx.phases[0]
    for dev in ctx.devices:
        precs = [p for p in ctx.precisions if ctx.on(dev, p) is not None]
        if (Precision.FP32 in precs and Precision.TF32 not in ctx.precisions
                and ctx.on(dev, Precision.TF32) is not None):  # tf32 where the device has it
            precs.insert(precs.index(Precision.FP32) + 1, Precision.TF32)
        for prec in precs:
            t = ctx.pred(ctx.big, ctx.run(ph, prec), dev)
            s = shares(t, "category")
            for k, v in s.items():
                rows.append({"device": dev.device.name, "precision": ctx.label(prec),
                             "format": Prediction.of(t).gemm_format.value,
                             "category": k, "share": float(v),
                             "iteration_s": Prediction.of(t).time_s})
    df = pd.DataFrame(rows)
    findings = []
    if len(ctx.precisions) > 1:
        lo, hi = ctx.label(ctx.precisions[0]), ctx.label(ctx.precisions[-1])
        it = df.groupby(["device", "precision"], observed=True)["iteration_s"].first().unstack()
        speed = (it[lo] / it[hi]).dropna().sort_values()  # devices that run both columns
        findings.append(f"{ctx.big.name}, {ph.name}: {hi} runs the iteration "
                        f"{speed.iloc[0]:.1f}x ({speed.index[0]}) to {speed.iloc[-1]:.1f}x "
                        f"({speed.index[-1]}) faster than {lo}.")
        g = df[df["category"].isin(GEMM)].groupby(["device", "precision"],
                                                   observed=True)["share"].sum().unstack()
        g = g[[lo, hi]].dropna()
        falls = [d for d in g.index if g.loc[d, hi] < g.loc[d, lo]]
        same = [d for d in g.index if d not in falls]
        findings.append(f"The GEMM share falls with {hi} on {len(falls)} of {len(g)} devices"
                        + (f"; not on {', '.join(same)} (no faster {hi} GEMM path)" if same
                           else "") + ".")
    else:
        findings.append("One precision studied: pass --precision fp32,bf16 to compare.")
    notes = ctx.skipped
    it = df.groupby(["device", "precision"], observed=True)["iteration_s"].first().unstack()
    if {"fp32", "tf32"} <= set(it.columns):
        tf = (it["fp32"] / it["tf32"]).dropna().sort_values()
        if len(tf):
            findings.append(f"TF32 matmuls (fp32 training with allow_tf32) run the iteration "
                            f"{tf.iloc[0]:.1f}x ({tf.index[0]}) to {tf.iloc[-1]:.1f}x "
                            f"({tf.index[-1]}) faster than plain fp32 on the {len(tf)} "
                            f"device(s) that have TF32.")
    return Section("precision", "Mixed precision", findings, {"precision_shares": df},
                   "precision", notes=notes)


__all__ = ["mixed_precision"]
