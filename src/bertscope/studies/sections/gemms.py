"""Section 3: GEMM heterogeneity (each of the paper's GEMMs per pass; distinct shapes, FLOP
shares, efficiency)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bertscope.perf import Prediction
from bertscope.studies.sections.context import GEMM, Ctx, Section, pct
from bertscope.taxonomy import Category, Phase, Sublayer

PAPER_GEMMS: dict[Sublayer, str] = {
    Sublayer.QKV: "QKV", Sublayer.ATTN_SCORE: "scores", Sublayer.ATTN_CONTEXT: "context",
    Sublayer.ATTN_OUTPUT: "attention output", Sublayer.FFN_GATE: "FC gate",
    Sublayer.FFN1: "FC1", Sublayer.FFN2: "FC2", Sublayer.MLM_HEAD: "MLM head",
    Sublayer.NSP_HEAD: "NSP head", Sublayer.LM_HEAD: "LM head"}
"""Each GEMM's name as Pati et al. (IISWC 2022) name BERT's GEMMs, in the order of a layer;
a sublayer not listed keeps its own name, after these."""
PASSES: dict[Phase, str] = {Phase.FORWARD: "forward", Phase.RECOMPUTE: "forward",
                            Phase.BACKWARD_DATA: "data gradient",
                            Phase.BACKWARD_WEIGHT: "weight gradient",
                            Phase.BACKWARD: "backward"}
"""A GEMM row's pass (recomputation is forward work)."""


def per_gemm(df: pd.DataFrame, peak: float) -> pd.DataFrame:
    """One row per GEMM (`PAPER_GEMMS`) and pass of the GEMM rows `df` (with "gemm" and
    "pass" columns): the pass's phase (forward for recomputation), FLOPs, time, share of GEMM
    time and fraction of the GEMM `peak`, in the paper's order."""
    g = df.groupby(["gemm", "pass"], observed=True, sort=False).agg(
        flops=("flops", "sum"), time_s=("time_s", "sum")).reset_index()
    g.insert(2, "phase", g["pass"].map({n: p.value for p, n in reversed(PASSES.items())}))
    g["time_share"] = g["time_s"] / g["time_s"].sum()
    g["efficiency"] = g["flops"] / g["time_s"] / peak
    order = {n: i for i, n in enumerate(dict.fromkeys(PAPER_GEMMS.values()))}
    passes = {n: i for i, n in enumerate(dict.fromkeys(PASSES.values()))}
    return g.sort_values(["gemm", "pass"], key=lambda c: c.map(
        order if c.name == "gemm" else passes).fillna(len(order))).reset_index(drop=True)


def gemm_shapes(ctx: Ctx) -> Section:
    """3. The distinct GEMM shapes, their FLOP share, intensity and predicted efficiency."""
    devs = ctx.running(ctx.low) or ctx.devices
    dev = next((d for d in devs if "a100" in d.device.name), devs[0])
    run = ctx.run(ctx.phases[0], ctx.low)
    t = ctx.pred(ctx.big, run, dev)
    df = t.df[t.df["category"].astype(str).isin(GEMM)].copy()
    peak = Prediction.of(t).gemm_peak_flops
    df["kind"] = np.where(df["category"].astype(str) == Category.BATCHED_GEMM.value,
                          "attention (batched)", "linear")
    df["pass"] = df["phase"].astype(str).map({p.value: n for p, n in PASSES.items()})
    names = {s.value: n for s, n in PAPER_GEMMS.items()}
    df["gemm"] = df["sublayer"].astype(str).map(lambda v: names.get(v, v))
    g = df.groupby(["gemm", "m", "n", "k", "batch", "kind", "pass"], observed=True).agg(
        count=("count", "sum"), flops=("flops", "sum"), time_s=("time_s", "sum"),
        intensity=("intensity", "mean")).reset_index()
    g["format"] = Prediction.of(t).gemm_format.value  # the format that ran on `dev`
    g["flop_share"] = g["flops"] / g["flops"].sum()
    g["efficiency"] = g["flops"] / g["time_s"] / peak
    g = g.sort_values("flops", ascending=False).reset_index(drop=True)
    kinds = g.groupby("kind")[["flops", "time_s"]].sum()
    eff = kinds["flops"] / kinds["time_s"] / peak
    share_f = kinds["flops"] / kinds["flops"].sum()
    share_t = kinds["time_s"] / kinds["time_s"].sum()
    big = g[g["flop_share"] >= 0.01]
    shapes = len(g[["m", "n", "k", "batch", "kind", "pass"]].drop_duplicates())
    worst = g.loc[g["efficiency"].idxmin()]
    findings = [f"{ctx.big.name}, {ctx.phases[0].name}, {ctx.on(dev, ctx.low).value} on "
                f"{dev.device.name}: "
                f"{shapes} distinct GEMM shapes; the {len(big)} GEMMs with at least 1% of the "
                f"GEMM "
                f"FLOPs reach {pct(big['efficiency'].min())} to {pct(big['efficiency'].max())}"
                f" of the GEMM peak, the least efficient "
                f"({worst['gemm']} {int(worst['m'])}x{int(worst['n'])}x{int(worst['k'])}, "
                f"{worst['pass']}) {pct(worst['efficiency'])}."]
    if "attention (batched)" in kinds.index and "linear" in kinds.index:
        a = "attention (batched)"
        findings.append(f"Attention's batched GEMMs do {pct(share_f[a])} of the GEMM FLOPs but "
                        f"take {pct(share_t[a])} of GEMM time, at {pct(eff[a])} of peak "
                        f"against {pct(eff['linear'])} for the linear layers.")
    passes = g.groupby("pass")[["flops", "time_s"]].sum()
    pe = (passes["flops"] / passes["time_s"] / peak).sort_values()
    findings.append(f"By pass: {', '.join(f'{k} {pct(v)}' for k, v in pe.items())} of peak.")
    by_gemm = per_gemm(df, peak)
    by_gemm.insert(0, "format", g["format"].iloc[0])
    by_gemm.insert(0, "device", dev.device.name)
    by_gemm.insert(0, "model", ctx.big.name)
    tables = {"per_gemm": by_gemm, "gemm_shapes": g}
    for meas in ctx.measured:  # achieved rates of the measured GEMMs (no peak to divide by)
        mdf = meas.table.df
        mg = mdf[mdf["category"].astype(str).isin(GEMM) & (mdf["time_s"] > 0)
                 & (mdf["flops"] > 0)].copy()
        if mg.empty:
            continue
        mg["kind"] = np.where(mg["category"].astype(str) == Category.BATCHED_GEMM.value,
                              "attention (batched)", "linear")
        shapes = mg.groupby(["m", "n", "k", "batch", "kind"], observed=True).agg(
            flops=("flops", "sum"), time_s=("time_s", "sum")).reset_index()
        shapes["achieved_gflops"] = shapes["flops"] / shapes["time_s"] / 1e9
        tables["measured_gemms"] = shapes.sort_values("flops", ascending=False)
        by_kind = shapes.groupby("kind")[["flops", "time_s"]].sum()
        rate = (by_kind["flops"] / by_kind["time_s"] / 1e9).round(1)
        findings.append(f"Measured on {meas.label} ({meas.model}): {len(shapes)} GEMM "
                        f"shapes run at {shapes['achieved_gflops'].min():.1f} to "
                        f"{shapes['achieved_gflops'].max():.1f} GFLOP/s ("
                        + ", ".join(f"{k} {v:g}" for k, v in rate.items()) + " overall).")
    return Section("gemm", "GEMM heterogeneity", findings, tables, "gemm")


__all__ = ["PAPER_GEMMS", "PASSES", "gemm_shapes", "per_gemm"]
