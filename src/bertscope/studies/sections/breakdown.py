"""Section 1: where an iteration's time goes, by category and sublayer group."""

from __future__ import annotations

import pandas as pd

from bertscope.studies.sections.context import GEMM, Ctx, Section, pct, shares


def where_time_goes(ctx: Ctx) -> Section:
    """1. Time by category and sublayer group per model, phase, precision and device."""
    rows = []
    for m in ctx.models:
        for ph in ctx.phases:
            for prec in ctx.precisions:
                run = ctx.run(ph, prec)
                for dev in ctx.running(prec):
                    t = ctx.pred(m, run, dev)
                    fmt = ctx.on(dev, prec)
                    for by in ("category", "group"):
                        for k, v in shares(t, by).items():
                            rows.append({"model": m.name, "phase": ph.name,
                                         "precision": ctx.label(prec),
                                         "format": fmt.value if fmt else "",
                                         "device": dev.device.name, "source": "predicted",
                                         "models": dev.gemm.source, "by": by, "key": k,
                                         "share": float(v)})
    for meas in ctx.measured:
        for by in ("category", "group"):
            for k, v in shares(meas.table, by).items():
                rows.append({"model": meas.model, "phase": meas.phase,
                             "precision": meas.precision, "format": meas.precision,
                             "device": meas.label,
                             "source": "measured", "models": "measured", "by": by, "key": k,
                             "share": float(v)})
    df = pd.DataFrame(rows)
    cat = df[df["by"] == "category"]
    gemm = (cat[cat["key"].isin(GEMM)].groupby(["model", "phase", "precision", "format",
                                                 "device", "source"],
                                                observed=True, sort=False)["share"].sum()
            .rename("gemm_share").reset_index())
    big = gemm[(gemm["model"] == ctx.big.name) & (gemm["source"] == "predicted")
               & (gemm["precision"] == ctx.label(ctx.low))]
    findings = []
    for ph in ctx.phases:
        g = big[big["phase"] == ph.name].set_index("device")["gemm_share"]
        if g.empty:
            continue
        findings.append(
            f"{ctx.big.name}, {ph.name} (seq {ph.seq}), {ctx.label(ctx.low)}: GEMMs take "
            f"{pct(g.min())} ({g.idxmin()}) to {pct(g.max())} ({g.idxmax()}) of the predicted "
            f"iteration; the memory-bound rest {pct(1 - g.max())} to {pct(1 - g.min())}.")
    meas = gemm[gemm["source"] == "measured"]
    for r in meas.to_dict(orient="records"):
        findings.append(f"Measured on {r['device']} ({r['model']}, {r['precision']}): GEMMs "
                        f"take {pct(r['gemm_share'])} of the measured op time.")
    return Section("time", "Where an iteration's time goes", findings,
                   {"shares": df, "gemm_share": gemm}, "stacked", notes=ctx.skipped)


__all__ = ["where_time_goes"]
