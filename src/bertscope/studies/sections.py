"""The study's sections 1-5: each a table (or a few), a figure kind, and findings computed
from the numbers (`study.py` runs them; `sections_more.py` has 6-10).

Every sentence is built from the section's own tables: the numbers in it and the direction
it states ("rises", "falls", which device) are read from the data, and a claim that fails for
some device names that device instead of hiding it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from bertscope.analytic import build
from bertscope.config import ModelConfig, Optimizer, Precision, RunConfig
from bertscope.errors import BertscopeError
from bertscope.optable import OpTable
from bertscope.perf import DeviceProfile, predict
from bertscope.taxonomy import Category, Phase, Sublayer

GEMM = {c.value for c in Category if c.is_gemm}
MEMORY_BOUND_AT = 0.2
"""A device "is memory-bound" for a configuration when at least this share of the predicted
iteration is in ops bound by memory bandwidth."""


@dataclass(frozen=True)
class PhaseSpec:
    """A BERT pretraining phase: sequence length and per-device micro-batch."""

    name: str
    seq: int
    batch: int


@dataclass
class Section:
    """One section of the report."""

    key: str
    title: str
    findings: list[str]
    tables: dict[str, pd.DataFrame]
    figure: str
    """Which renderer of `report.study_figures` draws it."""
    notes: list[str] = field(default_factory=list)


@dataclass
class Ctx:
    """The study's settings and its cached tables and predictions."""

    models: list[ModelConfig]
    devices: list[DeviceProfile]
    precisions: list[Precision]
    phases: list[PhaseSpec]
    optimizer: Optimizer = Optimizer.LAMB
    measured: list[dict[str, Any]] = field(default_factory=list)
    """Measured category times: {"label", "model", "phase", "precision", "table"}."""
    _tables: dict[tuple[Any, ...], OpTable] = field(default_factory=dict)
    _preds: dict[tuple[Any, ...], OpTable] = field(default_factory=dict)

    def run(self, phase: PhaseSpec, precision: Precision, **kw: Any) -> RunConfig:
        """The run of a phase in a precision."""
        kw = {"batch": phase.batch, "seq": phase.seq, "optimizer": self.optimizer, **kw}
        return RunConfig(precision=precision, **kw)

    def table(self, m: ModelConfig, run: RunConfig) -> OpTable:
        """The analytic op table (cached)."""
        key = (m, run)
        if key not in self._tables:
            self._tables[key] = build(m, run)
        return self._tables[key]

    def pred(self, m: ModelConfig, run: RunConfig, dev: DeviceProfile) -> OpTable:
        """The prediction on a device (cached)."""
        key = (m, run, dev.device.name, id(dev))
        if key not in self._preds:
            self._preds[key] = predict(self.table(m, run), dev)
        return self._preds[key]

    @property
    def big(self) -> ModelConfig:
        """The largest model studied."""
        return max(self.models, key=lambda m: m.hidden * m.num_layers)

    @property
    def low(self) -> Precision:
        """The narrowest precision studied (the one fast training uses)."""
        return self.precisions[-1]


def pct(x: float) -> str:
    """A share as a percentage for a sentence."""
    if abs(x) >= 0.1:
        return f"{100 * x:.0f}%"
    return f"{100 * x:.1f}%" if abs(x) >= 0.001 or x == 0 else f"{100 * x:.2g}%"


def _shares(t: OpTable, by: str) -> pd.Series:
    df = t.df
    key = (df["sublayer"].map(lambda s: Sublayer(s).group.value) if by == "group"
           else df[by].astype(str))
    s = df.groupby(key, observed=True)["time_s"].sum()
    return s / s.sum()


def where_time_goes(ctx: Ctx) -> Section:
    """1. Time by category and sublayer group per model, phase, precision and device."""
    rows = []
    for m in ctx.models:
        for ph in ctx.phases:
            for prec in ctx.precisions:
                run = ctx.run(ph, prec)
                for dev in ctx.devices:
                    t = ctx.pred(m, run, dev)
                    for by in ("category", "group"):
                        for k, v in _shares(t, by).items():
                            rows.append({"model": m.name, "phase": ph.name, "precision": prec.value,
                                         "device": dev.device.name, "source": "predicted",
                                         "models": dev.gemm.source, "by": by, "key": k,
                                         "share": float(v)})
    for meas in ctx.measured:
        for by in ("category", "group"):
            for k, v in _shares(meas["table"], by).items():
                rows.append({"model": meas["model"], "phase": meas["phase"],
                             "precision": meas["precision"], "device": meas["label"],
                             "source": "measured", "models": "measured", "by": by, "key": k,
                             "share": float(v)})
    df = pd.DataFrame(rows)
    cat = df[df["by"] == "category"]
    gemm = (cat[cat["key"].isin(GEMM)].groupby(["model", "phase", "precision", "device",
                                                 "source"], observed=True)["share"].sum()
            .rename("gemm_share").reset_index())
    big = gemm[(gemm["model"] == ctx.big.name) & (gemm["source"] == "predicted")
               & (gemm["precision"] == ctx.low.value)]
    findings = []
    for ph in ctx.phases:
        g = big[big["phase"] == ph.name].set_index("device")["gemm_share"]
        if g.empty:
            continue
        findings.append(
            f"{ctx.big.name}, {ph.name} (seq {ph.seq}), {ctx.low.value}: GEMMs take "
            f"{pct(g.min())} ({g.idxmin()}) to {pct(g.max())} ({g.idxmax()}) of the predicted "
            f"iteration; the memory-bound rest {pct(1 - g.max())} to {pct(1 - g.min())}.")
    meas = gemm[gemm["source"] == "measured"]
    for r in meas.to_dict(orient="records"):
        findings.append(f"Measured on {r['device']} ({r['model']}, {r['precision']}): GEMMs "
                        f"take {pct(r['gemm_share'])} of the measured op time.")
    return Section("time", "Where an iteration's time goes", findings,
                   {"shares": df, "gemm_share": gemm}, "stacked")


def bound_share(ctx: Ctx) -> Section:
    """2. Time in memory-bandwidth-bound ops per device and precision; per-op rooflines."""
    rows, ops = [], []
    for m in ctx.models:
        for ph in ctx.phases:
            for prec in ctx.precisions:
                run = ctx.run(ph, prec)
                for dev in ctx.devices:
                    df = ctx.pred(m, run, dev).df
                    total = df["time_s"].sum()
                    by = df.groupby("bound", observed=True)["time_s"].sum() / total
                    non_gemm = df.loc[~df["category"].astype(str).isin(GEMM), "time_s"].sum()
                    rows.append({"model": m.name, "phase": ph.name, "precision": prec.value,
                                 "device": dev.device.name,
                                 "memory_bound": float(by.get("memory", 0.0)),
                                 "compute_bound": float(by.get("compute", 0.0)),
                                 "overhead_bound": float(by.get("overhead", 0.0)),
                                 "non_gemm_share": float(non_gemm / total)})
                    if m is ctx.big and ph is ctx.phases[0] and prec is ctx.low:
                        flops = df["flops"].to_numpy()
                        ok = (flops > 0) & (df["time_s"].to_numpy() > 0)
                        ops.append(pd.DataFrame({
                            "device": dev.device.name, "category": df["category"].astype(str),
                            "intensity": df["intensity"], "achieved_flops":
                            np.where(ok, flops / np.maximum(df["time_s"], 1e-30), 0.0),
                            "time_s": df["time_s"]})[ok])
    df = pd.DataFrame(rows)
    sel = df[(df["model"] == ctx.big.name) & (df["precision"] == ctx.low.value)
             & (df["phase"] == ctx.phases[-1].name)].set_index("device")["memory_bound"]
    heavy = [d for d, v in sel.items() if v >= MEMORY_BOUND_AT]
    light = [d for d, v in sel.items() if v < MEMORY_BOUND_AT]
    findings = []
    if heavy:
        findings.append(f"{ctx.big.name}, {ctx.phases[-1].name}, {ctx.low.value}: at least "
                        f"{pct(MEMORY_BOUND_AT)} of the iteration is bound by memory bandwidth "
                        f"on {', '.join(heavy)} (up to {pct(sel[heavy].max())} on "
                        f"{sel[heavy].idxmax()}).")
    if light:
        findings.append(f"Under {pct(MEMORY_BOUND_AT)} on {', '.join(light)} "
                        f"({', '.join(f'{d} {pct(sel[d])}' for d in light)}).")
    if len(ctx.precisions) > 1:
        lo, hi = ctx.precisions[0].value, ctx.precisions[-1].value
        p = df.groupby(["device", "precision"], observed=True)["non_gemm_share"].mean().unstack()
        rises = [d for d in p.index if p.loc[d, hi] > p.loc[d, lo]]
        findings.append(f"Going from {lo} to {hi} the memory-bound (non-GEMM) share rises on "
                        f"{len(rises)} of {len(p)} devices (mean {pct(p[lo].mean())} -> "
                        f"{pct(p[hi].mean())}): faster tensor math leaves the rest exposed.")
    return Section("bound", "Compute-bound vs memory-bound", findings,
                   {"bound_share": df, "ops": pd.concat(ops) if ops else pd.DataFrame()},
                   "bound")


def gemm_shapes(ctx: Ctx) -> Section:
    """3. The distinct GEMM shapes, their FLOP share, intensity and predicted efficiency."""
    dev = next((d for d in ctx.devices if "a100" in d.device.name), ctx.devices[0])
    run = ctx.run(ctx.phases[0], ctx.low)
    t = ctx.pred(ctx.big, run, dev)
    df = t.df[t.df["category"].astype(str).isin(GEMM)].copy()
    peak = t.meta["prediction"]["gemm_peak_flops"]
    df["kind"] = np.where(df["category"].astype(str) == Category.BATCHED_GEMM.value,
                          "attention (batched)", "linear")
    df["pass"] = df["phase"].astype(str).map({Phase.FORWARD.value: "forward",
                                              Phase.RECOMPUTE.value: "forward",
                                              Phase.BACKWARD_DATA.value: "data gradient",
                                              Phase.BACKWARD_WEIGHT.value: "weight gradient"})
    g = df.groupby(["m", "n", "k", "batch", "kind", "pass"], observed=True).agg(
        count=("count", "sum"), flops=("flops", "sum"), time_s=("time_s", "sum"),
        intensity=("intensity", "mean")).reset_index()
    g["flop_share"] = g["flops"] / g["flops"].sum()
    g["efficiency"] = g["flops"] / g["time_s"] / peak
    g = g.sort_values("flops", ascending=False).reset_index(drop=True)
    kinds = g.groupby("kind")[["flops", "time_s"]].sum()
    eff = kinds["flops"] / kinds["time_s"] / peak
    share_f = kinds["flops"] / kinds["flops"].sum()
    share_t = kinds["time_s"] / kinds["time_s"].sum()
    big = g[g["flop_share"] >= 0.01]
    worst = g.loc[g["efficiency"].idxmin()]
    findings = [f"{ctx.big.name}, {ctx.phases[0].name}, {ctx.low.value} on {dev.device.name}: "
                f"{len(g)} distinct GEMM shapes; the {len(big)} with at least 1% of the GEMM "
                f"FLOPs reach {pct(big['efficiency'].min())} to {pct(big['efficiency'].max())}"
                f" of the GEMM peak, the least efficient "
                f"({int(worst['m'])}x{int(worst['n'])}x{int(worst['k'])}, "
                f"{worst['pass']}) {pct(worst['efficiency'])}."]
    if "attention (batched)" in kinds.index and "linear" in kinds.index:
        a = "attention (batched)"
        findings.append(f"Attention's batched GEMMs do {pct(share_f[a])} of the GEMM FLOPs but "
                        f"take {pct(share_t[a])} of GEMM time, at {pct(eff[a])} of peak "
                        f"against {pct(eff['linear'])} for the linear layers.")
    passes = g.groupby("pass")[["flops", "time_s"]].sum()
    pe = (passes["flops"] / passes["time_s"] / peak).sort_values()
    findings.append(f"By pass: {', '.join(f'{k} {pct(v)}' for k, v in pe.items())} of peak.")
    tables = {"gemm_shapes": g}
    for meas in ctx.measured:  # achieved rates of the measured GEMMs (no peak to divide by)
        mdf = meas["table"].df
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
        findings.append(f"Measured on {meas['label']} ({meas['model']}): {len(shapes)} GEMM "
                        f"shapes run at {shapes['achieved_gflops'].min():.1f} to "
                        f"{shapes['achieved_gflops'].max():.1f} GFLOP/s ("
                        + ", ".join(f"{k} {v:g}" for k, v in rate.items()) + " overall).")
    return Section("gemm", "GEMM heterogeneity", findings, tables, "gemm")


def optimizer_share(ctx: Ctx, sweep_fn: Any) -> Section:
    """4. The optimizer's share vs tokens per iteration, precision and micro-batches."""
    dev = next((d for d in ctx.devices if "a100" in d.device.name), ctx.devices[0])
    res = sweep_fn([ctx.big], [dev], batch=[1, 2, 4, 8, 16, 32, 64, 128],
                   seq=[128, 512], optimizer=["adam", "lamb"],
                   precision=[p.value for p in ctx.precisions], micro_batches=[1, 8])
    df = res.frame[["model", "device", "optimizer", "precision", "batch", "seq",
                    "micro_batches", "tokens", "optimizer_share", "iteration_s"]].copy()
    findings = []
    for opt in ("lamb", "adam"):
        s = df[(df["optimizer"] == opt) & (df["micro_batches"] == 1)
               & (df["precision"] == ctx.low.value)].sort_values("tokens")
        if len(s) > 1:
            a, b = s.iloc[0], s.iloc[-1]
            verb = "falls" if b["optimizer_share"] < a["optimizer_share"] else "rises"
            findings.append(f"{opt.upper() if opt == 'lamb' else 'Adam'} ({ctx.big.name}, "
                            f"{ctx.low.value}, {dev.device.name}): its share {verb} from "
                            f"{pct(a['optimizer_share'])} at {int(a['tokens']):,} tokens per "
                            f"iteration to {pct(b['optimizer_share'])} at "
                            f"{int(b['tokens']):,}.")
    one = df[(df["optimizer"] == "lamb") & (df["batch"] == 8) & (df["seq"] == 128)
             & (df["precision"] == ctx.low.value)].set_index("micro_batches")["optimizer_share"]
    if {1, 8} <= set(one.index):
        findings.append(f"Eight micro-batches per step (gradient accumulation) cut LAMB's share "
                        f"at batch 8 x seq 128 from {pct(one[1])} to {pct(one[8])}.")
    return Section("optimizer", "The optimizer", findings, {"optimizer_share": df},
                   "optimizer")


def mixed_precision(ctx: Ctx) -> Section:
    """5. How the breakdown moves between precisions."""
    from bertscope.perf import select_peaks

    rows = []
    ph = ctx.phases[0]
    for dev in ctx.devices:
        precs = list(ctx.precisions)
        if Precision.FP32 in precs and Precision.TF32 not in precs:
            try:  # tf32 beside fp32 where the device has TF32 units
                select_peaks(dev.device, Precision.TF32)
                precs.insert(precs.index(Precision.FP32) + 1, Precision.TF32)
            except BertscopeError:
                pass
        for prec in precs:
            t = ctx.pred(ctx.big, ctx.run(ph, prec), dev)
            s = _shares(t, "category")
            for k, v in s.items():
                rows.append({"device": dev.device.name, "precision": prec.value,
                             "category": k, "share": float(v),
                             "iteration_s": t.meta["prediction"]["time_s"]})
    df = pd.DataFrame(rows)
    findings = []
    if len(ctx.precisions) > 1:
        lo, hi = ctx.precisions[0].value, ctx.precisions[-1].value
        it = df.groupby(["device", "precision"], observed=True)["iteration_s"].first().unstack()
        speed = (it[lo] / it[hi]).sort_values()
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
        findings.append("One precision studied: pass --precisions fp32,bf16 to compare.")
    it = df.groupby(["device", "precision"], observed=True)["iteration_s"].first().unstack()
    if {"fp32", "tf32"} <= set(it.columns):
        tf = (it["fp32"] / it["tf32"]).dropna().sort_values()
        if len(tf):
            findings.append(f"TF32 matmuls (fp32 training with allow_tf32) run the iteration "
                            f"{tf.iloc[0]:.1f}x ({tf.index[0]}) to {tf.iloc[-1]:.1f}x "
                            f"({tf.index[-1]}) faster than plain fp32 on the {len(tf)} "
                            f"device(s) that have TF32.")
    return Section("precision", "Mixed precision", findings, {"precision_shares": df},
                   "precision")


__all__ = ["GEMM", "MEMORY_BOUND_AT", "Ctx", "PhaseSpec", "Section", "bound_share",
           "gemm_shapes", "mixed_precision", "optimizer_share", "pct", "where_time_goes"]
