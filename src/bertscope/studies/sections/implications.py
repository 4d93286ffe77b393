"""Section 9: implications for accelerator design: fusion, near-memory compute, and
which hardware knob pays most, per device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from bertscope.config import Attention
from bertscope.perf import DeviceProfile, Knobs, Prediction, fuse, predict
from bertscope.studies.sections.context import Ctx, Section
from bertscope.taxonomy import Category


@dataclass(frozen=True)
class NearMemory:
    """A processing-near-memory what-if: the chosen memory-bound categories run on units that
    see `bandwidth` times the device's memory bandwidth (and their FLOPs at the vector rate).
    The default multiple (4x) is an assumption of this study, in the range near-memory DRAM
    designs argue for (in-bank units reading several banks at once; e.g. Samsung's HBM-PIM,
    Kwon et al., ISSCC 2021); pass your own."""

    bandwidth: float = 4.0
    categories: tuple[Category, ...] = (Category.OPTIMIZER, Category.LAYERNORM, Category.RMSNORM,
                                        Category.SOFTMAX, Category.DROPOUT,
                                        Category.ACTIVATION, Category.ELEMENTWISE,
                                        Category.REDUCTION)


def _near_memory_time(t: Any, base: Any, dev: DeviceProfile, nm: NearMemory
                      ) -> tuple[float, dict]:
    """The iteration with the chosen categories' rows timed at `nm.bandwidth` x bandwidth
    (`base`: the table's prediction on `dev`, for every other row)."""
    fast = predict(t, dev, knobs=Knobs(bandwidth=nm.bandwidth)).df
    base = base.df
    chosen = base["category"].astype(str).isin({c.value for c in nm.categories})
    new = base["time_s"].where(~chosen, fast["time_s"])
    gain = (base["time_s"] - new)[chosen].groupby(base["category"][chosen].astype(str),
                                                   observed=True).sum()
    return float(new.sum()), {k: float(v) for k, v in gain.items()}


def implications(ctx: Ctx, sweep_fn: Any, nm: NearMemory | None = None) -> Section:
    """9. Fusion, near-memory compute and which hardware knob pays most, per device."""
    nm = nm or NearMemory()
    ph = ctx.phases[-1]
    run = ctx.run(ph, ctx.low)
    flash = ctx.run(ph, ctx.low, attention=Attention.SDPA)
    rows = []
    fused: dict[Any, Any] = {}  # the fused table per format that runs
    for dev in ctx.running(ctx.low):
        fmt = ctx.on(dev, ctx.low)
        table = ctx.table(ctx.big, ctx.run(ph, fmt))
        if fmt not in fused:
            fused[fmt] = fuse(table)
        pred = ctx.pred(ctx.big, run, dev)
        base = Prediction.of(pred).time_s
        f = Prediction.of(predict(fused[fmt], dev)).time_s
        near, gains = _near_memory_time(table, pred, dev, nm)
        top = max(gains, key=gains.get) if gains else ""
        sdpa = Prediction.of(ctx.pred(ctx.big, flash, dev)).time_s
        rows.append({"device": dev.device.name, "format": fmt.value,
                     "base_s": base, "fusion_speedup": base / f,
                     "sdpa_speedup": base / sdpa, "near_memory_speedup": base / near,
                     "near_memory_top_category": top})
    df = pd.DataFrame(rows)
    knobs = ctx.sweep(sweep_fn, [ctx.big], ctx.devices, [ctx.low], batch=[ph.batch],
                      seq=[ph.seq], optimizer=[ctx.optimizer.value], gemm_peak=[1.0, 2.0],
                      bandwidth=[1.0, 2.0], overhead=[1.0, 0.5])
    sens = []
    for dev, g in knobs.groupby("device", observed=True, sort=False):
        def time(gp: float, bw: float, oh: float, g: pd.DataFrame = g) -> float:
            sel = g[(g["gemm_peak"] == gp) & (g["bandwidth"] == bw) & (g["overhead"] == oh)]
            return float(sel["iteration_s"].iloc[0])

        t0 = time(1, 1, 1)
        gains = {"2x GEMM peak": t0 / time(2, 1, 1), "2x bandwidth": t0 / time(1, 2, 1),
                 "half launch overhead": t0 / time(1, 1, 0.5)}
        best = max(gains, key=gains.get)
        sens.append({"device": dev, "format": g["format"].iloc[0], **gains, "best": best})
    sens_df = pd.DataFrame(sens)
    findings = [f"{ctx.big.name}, {ph.name}, {ctx.label(ctx.low)}: fusing memory-bound chains and "
                f"the optimizer speeds the iteration up {df['fusion_speedup'].min():.2f}x "
                f"({df.loc[df['fusion_speedup'].idxmin(), 'device']}) to "
                f"{df['fusion_speedup'].max():.2f}x "
                f"({df.loc[df['fusion_speedup'].idxmax(), 'device']}); a fused attention "
                f"kernel (sdpa: no s x s score tensor in memory) alone "
                f"{df['sdpa_speedup'].min():.2f}x to {df['sdpa_speedup'].max():.2f}x.",
                f"Near-memory units with {nm.bandwidth:g}x bandwidth for "
                f"{', '.join(c.value for c in nm.categories)} give "
                f"{df['near_memory_speedup'].min():.2f}x to "
                f"{df['near_memory_speedup'].max():.2f}x; the op that gains most is mostly "
                f"{df['near_memory_top_category'].mode().iloc[0]}."]
    for best, g in sens_df.groupby("best", sort=False):
        findings.append(f"{best} pays most on {', '.join(g['device'])}.")
    return Section("implications", "Implications for accelerator design", findings,
                   {"fusion_near_memory": df, "sensitivity": sens_df}, "implications")


__all__ = ["NearMemory", "implications"]
