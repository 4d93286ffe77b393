"""The study's sections 6-9: scaling the network, checkpointing, distributed training, and
the implications for accelerator design (fusion, near-memory compute, which knob pays).
Findings are computed from each section's tables, as in `sections.py`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from bertscope.config import Attention
from bertscope.perf import DeviceProfile, Knobs, fuse, predict
from bertscope.presets import get_model
from bertscope.studies.sections import Ctx, Section, pct
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


def scaling(ctx: Ctx, sweep_fn: Any) -> Section:
    """6. Category shares from BERT-base to multi-billion-parameter encoders."""
    dev = next((d for d in ctx.devices if "a100" in d.device.name), ctx.devices[0])
    base = get_model("bert-large")
    parts = []
    for hidden, layers in ((768, 12), (1024, 24), (1536, 24), (2048, 36), (2560, 48),
                           (4096, 48)):
        res = sweep_fn([base], [dev], hidden=[hidden], heads=[hidden // 64], num_layers=[layers],
                       batch=[ctx.phases[0].batch], seq=[ctx.phases[0].seq],
                       precision=[ctx.low.value], optimizer=[ctx.optimizer.value])
        parts.append(res.frame)
    df = pd.concat(parts, ignore_index=True)
    shares = [c for c in df.columns if c.startswith("share_")]
    keep = ["hidden", "num_layers", "params", "iteration_s", "memory_bound_share",
            "optimizer_share", "memory_bytes", "fits", *shares]
    df = df[keep]
    a, b = df.iloc[0], df.iloc[-1]
    g0 = a.get("share_gemm", 0) + a.get("share_batched_gemm", 0)
    g1 = b.get("share_gemm", 0) + b.get("share_batched_gemm", 0)
    verb = "rises" if g1 > g0 else "falls"
    findings = [f"On {dev.device.name} ({ctx.low.value}, seq {ctx.phases[0].seq}, batch "
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


def checkpointing(ctx: Ctx, sweep_fn: Any) -> Section:
    """7. Recompute overhead vs activation memory saved."""
    res = sweep_fn([ctx.big], ctx.devices, batch=[ctx.phases[-1].batch],
                   seq=[ctx.phases[-1].seq], precision=[ctx.low.value],
                   optimizer=[ctx.optimizer.value], checkpoint=["none", "full"])
    df = res.frame[["device", "checkpoint", "iteration_s", "memory_bytes", "fits"]]
    p = df.pivot_table(index="device", columns="checkpoint", values=["iteration_s",
                                                                     "memory_bytes"],
                       observed=True)
    out = pd.DataFrame({
        "overhead": p[("iteration_s", "full")] / p[("iteration_s", "none")] - 1,
        "memory_saved": 1 - p[("memory_bytes", "full")] / p[("memory_bytes", "none")],
        "memory_none_gib": p[("memory_bytes", "none")] / 2**30,
        "memory_full_gib": p[("memory_bytes", "full")] / 2**30}).reset_index()
    findings = [f"{ctx.big.name}, {ctx.phases[-1].name}, {ctx.low.value}: full checkpointing "
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


def distributed(ctx: Ctx) -> Section:
    """8. Data-parallel communication vs device count; what other layouts change."""
    from bertscope.errors import BertscopeError
    from bertscope.parallel import Cluster, Layout, Workload, ZeroStage, evaluate

    gpus = [d for d in ctx.devices if d.device.interconnect_bandwidth is not None][:3]
    rows = []
    notes: list[str] = []
    run = ctx.run(ctx.phases[0], ctx.low, batch=1)
    workload = Workload(model=ctx.big, run=run, global_batch=4096)
    for dev in gpus:
        for n in (8, 16, 64, 256):
            mb = max(1, 4096 // n // ctx.phases[0].batch)
            r = evaluate(workload.job(Layout(dp=n), mb), Cluster.build(dev, n))
            rows.append({"device": dev.device.name, "devices": n, "layout": f"DP{n}",
                         "iteration_s": r.iteration_s, "tokens_per_s": r.tokens_per_s,
                         "dp_comm_share": r.time["dp_comm_s"] / r.iteration_s,
                         "memory_gib": r.memory_bytes / 2**30, "fits": r.fits})
        n = 64
        for name, lay, mb in (("DP64 ZeRO-1", Layout(dp=64, zero=ZeroStage.OPTIMIZER), 2),
                              ("DP16 x TP4", Layout(dp=16, tp=4), 8),
                              ("DP16 x PP4", Layout(dp=16, pp=4), 8)):
            try:
                r = evaluate(workload.job(lay, mb), Cluster.build(dev, n))
            except BertscopeError as e:  # a job this model cannot take (tp > heads, ...)
                if f"{name}: {e}" not in notes:
                    notes.append(f"{name}: {e}")
                continue
            rows.append({"device": dev.device.name, "devices": n, "layout": name,
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
    table = ctx.table(ctx.big, run)
    fused = fuse(table)
    flash = ctx.run(ph, ctx.low, attention=Attention.SDPA)
    rows = []
    for dev in ctx.devices:
        pred = ctx.pred(ctx.big, run, dev)
        base = pred.meta["prediction"]["time_s"]
        f = predict(fused, dev).meta["prediction"]["time_s"]
        near, gains = _near_memory_time(table, pred, dev, nm)
        top = max(gains, key=gains.get) if gains else ""
        sdpa = ctx.pred(ctx.big, flash, dev).meta["prediction"]["time_s"]
        rows.append({"device": dev.device.name, "base_s": base, "fusion_speedup": base / f,
                     "sdpa_speedup": base / sdpa, "near_memory_speedup": base / near,
                     "near_memory_top_category": top})
    df = pd.DataFrame(rows)
    knobs = sweep_fn([ctx.big], ctx.devices, batch=[ph.batch], seq=[ph.seq],
                     precision=[ctx.low.value], optimizer=[ctx.optimizer.value],
                     gemm_peak=[1.0, 2.0], bandwidth=[1.0, 2.0], overhead=[1.0, 0.5]).frame
    sens = []
    for dev, g in knobs.groupby("device", observed=True, sort=False):
        def time(gp: float, bw: float, oh: float, g: pd.DataFrame = g) -> float:
            sel = g[(g["gemm_peak"] == gp) & (g["bandwidth"] == bw) & (g["overhead"] == oh)]
            return float(sel["iteration_s"].iloc[0])

        t0 = time(1, 1, 1)
        gains = {"2x GEMM peak": t0 / time(2, 1, 1), "2x bandwidth": t0 / time(1, 2, 1),
                 "half launch overhead": t0 / time(1, 1, 0.5)}
        best = max(gains, key=gains.get)
        sens.append({"device": dev, **gains, "best": best})
    sens_df = pd.DataFrame(sens)
    findings = [f"{ctx.big.name}, {ph.name}, {ctx.low.value}: fusing memory-bound chains and "
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


__all__ = ["NearMemory", "checkpointing", "distributed", "implications", "scaling"]
