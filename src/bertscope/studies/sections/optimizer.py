"""Section 4: the optimizer's share vs tokens per iteration, precision and micro-batches."""

from __future__ import annotations

from typing import Any

from bertscope.studies.sections.context import Ctx, Section, pct


def optimizer_share(ctx: Ctx, sweep_fn: Any) -> Section:
    """4. The optimizer's share vs tokens per iteration, precision and micro-batches."""
    devs = ctx.running(ctx.low) or ctx.devices
    dev = next((d for d in devs if "a100" in d.device.name), devs[0])
    res = ctx.sweep(sweep_fn, [ctx.big], [dev], ctx.precisions,
                    batch=[1, 2, 4, 8, 16, 32, 64, 128], seq=[128, 512],
                    optimizer=["adam", "lamb"], micro_batches=[1, 8])
    df = res[["model", "device", "optimizer", "precision", "format", "batch", "seq",
              "micro_batches", "tokens", "optimizer_share", "iteration_s"]].copy()
    low = ctx.label(ctx.low)
    findings = []
    for opt in ("lamb", "adam"):
        s = df[(df["optimizer"] == opt) & (df["micro_batches"] == 1)
               & (df["precision"] == low)].sort_values("tokens")
        if len(s) > 1:
            a, b = s.iloc[0], s.iloc[-1]
            verb = "falls" if b["optimizer_share"] < a["optimizer_share"] else "rises"
            findings.append(f"{opt.upper() if opt == 'lamb' else 'Adam'} ({ctx.big.name}, "
                            f"{ctx.on(dev, ctx.low).value}, {dev.device.name}): its share "
                            f"{verb} from "
                            f"{pct(a['optimizer_share'])} at {int(a['tokens']):,} tokens per "
                            f"iteration to {pct(b['optimizer_share'])} at "
                            f"{int(b['tokens']):,}.")
    one = df[(df["optimizer"] == "lamb") & (df["batch"] == 8) & (df["seq"] == 128)
             & (df["precision"] == low)].set_index("micro_batches")["optimizer_share"]
    if {1, 8} <= set(one.index):
        findings.append(f"Eight micro-batches per step (gradient accumulation) cut LAMB's share "
                        f"at batch 8 x seq 128 from {pct(one[1])} to {pct(one[8])}.")
    return Section("optimizer", "The optimizer", findings, {"optimizer_share": df},
                   "optimizer")


__all__ = ["optimizer_share"]
