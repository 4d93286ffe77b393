"""Section 7: recompute overhead vs activation memory saved."""

from __future__ import annotations

from typing import Any

import pandas as pd

from bertscope.studies.sections.context import Ctx, Section, pct


def checkpointing(ctx: Ctx, sweep_fn: Any) -> Section:
    """7. Recompute overhead vs activation memory saved."""
    res = ctx.sweep(sweep_fn, [ctx.big], ctx.devices, [ctx.low],
                    batch=[ctx.phases[-1].batch], seq=[ctx.phases[-1].seq],
                    optimizer=[ctx.optimizer.value], checkpoint=["none", "full"])
    df = res[["device", "format", "checkpoint", "iteration_s", "memory_bytes", "fits"]]
    p = df.pivot_table(index="device", columns="checkpoint", values=["iteration_s",
                                                                     "memory_bytes"],
                       observed=True)
    out = pd.DataFrame({
        "overhead": p[("iteration_s", "full")] / p[("iteration_s", "none")] - 1,
        "memory_saved": 1 - p[("memory_bytes", "full")] / p[("memory_bytes", "none")],
        "memory_none_gib": p[("memory_bytes", "none")] / 2**30,
        "memory_full_gib": p[("memory_bytes", "full")] / 2**30}).reset_index()
    ran = dict(zip(df["device"].astype(str), df["format"], strict=True))
    out.insert(1, "format", out["device"].astype(str).map(ran))  # the format that ran
    findings = [f"{ctx.big.name}, {ctx.phases[-1].name}, {ctx.label(ctx.low)}: full checkpointing "
                f"costs {pct(out['overhead'].min())} to {pct(out['overhead'].max())} more time "
                f"and saves {pct(out['memory_saved'].mean())} of the memory "
                f"({out['memory_none_gib'].iloc[0]:.1f} -> {out['memory_full_gib'].iloc[0]:.1f} "
                f"GiB)."]
    fits_only = sorted(set(df[(df["checkpoint"] == "full") & df["fits"]]["device"])
                       - set(df[(df["checkpoint"] == "none") & df["fits"]]["device"]))
    if fits_only:
        findings.append(f"It makes the run fit on {', '.join(fits_only)}.")
    return Section("checkpointing", "Checkpointing", findings, {"checkpointing": out},
                   "checkpointing")


__all__ = ["checkpointing"]
