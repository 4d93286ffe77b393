"""Section 6: category shares from BERT-base to multi-billion-parameter encoders."""

from __future__ import annotations

from typing import Any

import pandas as pd

from bertscope.presets import get_model
from bertscope.studies.sections.context import Ctx, Section, pct


def scaling(ctx: Ctx, sweep_fn: Any) -> Section:
    """6. Category shares from BERT-base to multi-billion-parameter encoders."""
    devs = ctx.running(ctx.low) or ctx.devices
    dev = next((d for d in devs if "a100" in d.device.name), devs[0])
    base = get_model("bert-large")
    parts = []
    for hidden, layers in ((768, 12), (1024, 24), (1536, 24), (2048, 36), (2560, 48),
                           (4096, 48)):
        parts.append(ctx.sweep(sweep_fn, [base], [dev], [ctx.low], hidden=[hidden],
                               heads=[hidden // 64], num_layers=[layers],
                               batch=[ctx.phases[0].batch], seq=[ctx.phases[0].seq],
                               optimizer=[ctx.optimizer.value]))
    df = pd.concat(parts, ignore_index=True)
    shares = [c for c in df.columns if c.startswith("share_")]
    keep = ["format", "hidden", "num_layers", "params", "iteration_s", "memory_bound_share",
            "optimizer_share", "memory_bytes", "fits", *shares]
    df = df[keep]
    a, b = df.iloc[0], df.iloc[-1]
    g0 = a.get("share_gemm", 0) + a.get("share_batched_gemm", 0)
    g1 = b.get("share_gemm", 0) + b.get("share_batched_gemm", 0)
    verb = "rises" if g1 > g0 else "falls"
    findings = [f"On {dev.device.name} ({ctx.on(dev, ctx.low).value}, seq "
                f"{ctx.phases[0].seq}, batch "
                f"{ctx.phases[0].batch}): the GEMM share {verb} from {pct(g0)} at "
                f"{a['params'] / 1e6:,.0f}M parameters to {pct(g1)} at "
                f"{b['params'] / 1e9:,.1f}B; the optimizer's from {pct(a['optimizer_share'])} "
                f"to {pct(b['optimizer_share'])}."]
    over = df[~df["fits"]]
    if len(over):
        findings.append(f"From {over['params'].min() / 1e9:,.1f}B parameters the run no "
                        f"longer fits one {dev.device.name}'s memory: it needs the "
                        f"distributed layouts of section 8.")
    return Section("scaling", "Scaling the network", findings, {"scaling": df}, "scaling")


__all__ = ["scaling"]
