"""Section 8: data-parallel communication vs device count; what other layouts change."""

from __future__ import annotations

import pandas as pd

from bertscope.errors import BertscopeError
from bertscope.parallel import Cluster, Layout, Workload, ZeroStage, evaluate
from bertscope.studies.sections.context import Ctx, Section, pct


def distributed(ctx: Ctx) -> Section:
    """8. Data-parallel communication vs device count; what other layouts change."""
    gpus = [d for d in ctx.devices if d.device.interconnect_bandwidth is not None][:3]
    rows = []
    notes: list[str] = []
    for dev in gpus:
        fmt = ctx.on(dev, ctx.low)
        if fmt is None:  # a device without the column's format: skipped (noted in section 5)
            continue
        run = ctx.run(ctx.phases[0], fmt, batch=1)
        workload = Workload(model=ctx.big, run=run, global_batch=4096)
        for n in (8, 16, 64, 256):
            mb = max(1, 4096 // n // ctx.phases[0].batch)
            r = evaluate(workload.job(Layout(dp=n), mb), Cluster.build(dev, n))
            rows.append({"device": dev.device.name, "format": fmt.value, "devices": n,
                         "layout": f"DP{n}",
                         "iteration_s": r.iteration_s, "tokens_per_s": r.tokens_per_s,
                         "dp_comm_share": r.time["dp_comm_s"] / r.iteration_s,
                         "memory_gib": r.memory_bytes / 2**30, "fits": r.fits})
        n = 64
        for name, lay, mb in (("DP64 ZeRO-1", Layout(dp=64, zero=ZeroStage.OPTIMIZER), 2),
                              ("DP16 x TP4", Layout(dp=16, tp=4), 8),
                              ("DP16 x PP4", Layout(dp=16, pp=4), 8)):
            try:
                r = evaluate(workload.job(lay, mb), Cluster.build(dev, n))
            except BertscopeError as e:  # a layout this model cannot take (tp > heads, ...)
                if f"{name}: {e}" not in notes:
                    notes.append(f"{name}: {e}")
                continue
            rows.append({"device": dev.device.name, "format": fmt.value, "devices": n,
                         "layout": name,
                         "iteration_s": r.iteration_s, "tokens_per_s": r.tokens_per_s,
                         "dp_comm_share": r.time["dp_comm_s"] / r.iteration_s,
                         "memory_gib": r.memory_bytes / 2**30, "fits": r.fits})
    df = pd.DataFrame(rows)
    findings = []
    for dev, g in df[df["layout"].str.fullmatch(r"DP\d+")].groupby("device", sort=False):
        a, b = g.iloc[0], g.iloc[-1]
        findings.append(f"{dev}: exposed data-parallel all-reduce is {pct(a['dp_comm_share'])}"
                        f" of the iteration at {a['devices']} devices and "
                        f"{pct(b['dp_comm_share'])} at {b['devices']} (global batch 4,096).")
    at64 = df[(df["devices"] == 64)]
    for dev, g in at64.groupby("device", sort=False):
        g = g.set_index("layout")
        best = g["tokens_per_s"].idxmax()
        others = ", ".join(f"{k} {v / 1e3:,.0f}k" for k, v in g["tokens_per_s"].items()
                           if k != best)
        findings.append(f"{dev}, 64 devices: {best} is fastest "
                        f"({g.loc[best, 'tokens_per_s'] / 1e3:,.0f}k tokens/s; {others}).")
        break  # one device is enough for the sentence; the table has them all
    if not gpus:
        findings.append("No device with an interconnect figure was studied.")
    return Section("distributed", "Distributed training", findings, {"distributed": df},
                   "distributed", notes=notes)


__all__ = ["distributed"]
