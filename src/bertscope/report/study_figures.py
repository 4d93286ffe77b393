"""The study's figures: one renderer per section kind, each drawing from the section's tables
(matplotlib, Agg; saved as PNG and SVG)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from bertscope.taxonomy import Category

_CATS = [c.value for c in Category]


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _colors() -> dict[str, Any]:
    cmap = _plt().get_cmap("tab20")
    return {c: cmap(i % 20) for i, c in enumerate(_CATS)}


def _short(name: str) -> str:
    return name.split("-sxm")[0].split("-hgx")[0].split("-oam")[0]


def _names(df: pd.DataFrame) -> dict[str, str]:
    """Each device's tick label: its short name and, where the table has a "format" column,
    the format that ran on it (its last precision column's: "v100 (fp16)")."""
    devices = list(dict.fromkeys(df["device"].astype(str)))
    if "format" not in df.columns:
        return {d: _short(d) for d in devices}
    last = df if "precision" not in df.columns else df[df["precision"] == df["precision"].iloc[-1]]
    fmt = dict(zip(last["device"].astype(str), last["format"].astype(str), strict=True))
    return {d: _short(d) + (f" ({fmt[d]})" if fmt.get(d) else "") for d in devices}


def _stacked(ax: Any, frame: pd.DataFrame, title: str) -> None:
    """Stacked category shares: one bar per row of `frame` (index: bar label)."""
    colors = _colors()
    bottom = np.zeros(len(frame))
    for cat in [c for c in _CATS if c in frame.columns]:
        vals = frame[cat].to_numpy()
        ax.bar(range(len(frame)), vals, bottom=bottom, color=colors[cat], label=cat)
        bottom += vals
    ax.set_xticks(range(len(frame)))
    ax.set_xticklabels([_short(str(i)) for i in frame.index], rotation=45, ha="right",
                       fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of iteration time")
    ax.set_title(title, fontsize=9)


def _finish(fig: Any, ax: Any, xlabel: str, ylabel: str, *, logx: bool = True) -> Any:
    """Labels, a log x axis, a small legend, a tight layout: the figure."""
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig_stacked(sec: Any) -> Any:
    """1: category shares per device for each phase (largest model, narrowest precision),
    measured bars last."""
    plt = _plt()
    df = sec.tables["shares"]
    cat = df[df["by"] == "category"]
    pred = cat[cat["source"] == "predicted"]
    big = pred["model"].iloc[-1]
    low = pred["precision"].iloc[-1]
    phases = list(dict.fromkeys(pred["phase"]))
    meas = cat[cat["source"] == "measured"]
    n = len(phases) + (1 if len(meas) else 0)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.8), squeeze=False)
    for ax, ph in zip(axes[0], phases, strict=False):
        sel = pred[(pred["model"] == big) & (pred["precision"] == low) & (pred["phase"] == ph)]
        _stacked(ax, sel.pivot_table(index="device", columns="key", values="share",
                                     sort=False).fillna(0).rename(index=_names(sel)),
                 f"{big}, {ph}, {low} (predicted)")
    if len(meas):
        first = meas.iloc[0]
        _stacked(axes[0][-1], meas.pivot_table(index="device", columns="key", values="share",
                                               sort=False).fillna(0),
                 f"measured: {first['model']}, {first['precision']}")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=7)
    fig.tight_layout(rect=(0, 0, 0.86, 1))
    return fig


def fig_bound(sec: Any) -> Any:
    """2: memory-bound share per device and precision; every op on a roofline-style plot."""
    plt = _plt()
    df = sec.tables["bound_share"]
    big = df["model"].iloc[-1]
    ph = df["phase"].iloc[-1]
    sel = df[(df["model"] == big) & (df["phase"] == ph)]
    p = sel.pivot_table(index="device", columns="precision", values="memory_bound", sort=False)
    ops = sec.tables["ops"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    width = 0.8 / max(1, len(p.columns))
    for i, col in enumerate(p.columns):
        a.bar(np.arange(len(p)) + i * width, p[col], width, label=col)
    a.set_xticks(np.arange(len(p)) + width * (len(p.columns) - 1) / 2)
    names = _names(sel)
    a.set_xticklabels([names.get(d, _short(d)) for d in p.index], rotation=45, ha="right",
                      fontsize=8)
    a.set_ylabel("time in memory-bound ops")
    a.set_title(f"{big}, {ph}", fontsize=9)
    a.legend(fontsize=7)
    if len(ops):
        names = _names(ops)
        for dev, g in ops.groupby("device", sort=False):
            b.scatter(g["intensity"].clip(lower=1e-3), g["achieved_flops"], s=6,
                      label=names.get(dev, _short(dev)), alpha=0.6)
        b.set_xscale("log")
        b.set_yscale("log")
        b.set_xlabel("arithmetic intensity (FLOP/byte)")
        b.set_ylabel("predicted FLOP/s")
        b.set_title("every op, each device", fontsize=9)
        b.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    return fig


def fig_gemm(sec: Any) -> Any:
    """3: efficiency vs intensity of each GEMM shape, by pass and kind."""
    plt = _plt()
    g = sec.tables["gemm_shapes"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for (kind, pas), part in g.groupby(["kind", "pass"]):
        ax.scatter(part["intensity"], part["efficiency"], s=20 + 400 * part["flop_share"],
                   marker="o" if kind == "linear" else "^", label=f"{kind}, {pas}", alpha=0.7)
    return _finish(fig, ax, "arithmetic intensity (FLOP/byte)", "fraction of GEMM peak")


def fig_optimizer(sec: Any) -> Any:
    """4: the optimizer's share vs tokens per iteration."""
    plt = _plt()
    df = sec.tables["optimizer_share"]
    low = df["precision"].iloc[-1]
    fig, ax = plt.subplots(figsize=(6, 4))
    for (opt, micro), part in df[df["precision"] == low].groupby(["optimizer",
                                                                 "micro_batches"]):
        part = part.sort_values("tokens")
        ax.plot(part["tokens"], part["optimizer_share"], marker=".",
                label=f"{opt}, {micro} micro-batch(es)")
    return _finish(fig, ax, "tokens per iteration", "optimizer share of time")


def fig_precision(sec: Any) -> Any:
    """5: category shares per device for each precision."""
    plt = _plt()
    df = sec.tables["precision_shares"]
    precs = list(dict.fromkeys(df["precision"]))
    fig, axes = plt.subplots(1, len(precs), figsize=(4.2 * len(precs), 3.8), squeeze=False)
    for ax, prec in zip(axes[0], precs, strict=True):
        sel = df[df["precision"] == prec]
        _stacked(ax, sel.pivot_table(index="device", columns="category", values="share",
                                     sort=False).fillna(0).rename(index=_names(sel)), prec)
    fig.tight_layout()
    return fig


def fig_scaling(sec: Any) -> Any:
    """6: category shares vs parameters."""
    plt = _plt()
    df = sec.tables["scaling"]
    colors = _colors()
    fig, ax = plt.subplots(figsize=(6, 4))
    cats = [c for c in _CATS if f"share_{c}" in df.columns]
    ax.stackplot(df["params"], *[df[f"share_{c}"] for c in cats],
                 colors=[colors[c] for c in cats], labels=cats)
    ax.set_xscale("log")
    ax.set_xlabel("parameters")
    ax.set_ylabel("share of iteration time")
    ax.legend(fontsize=6, loc="lower left")
    fig.tight_layout()
    return fig


def fig_checkpointing(sec: Any) -> Any:
    """7: time overhead and memory saved by full checkpointing."""
    plt = _plt()
    df = sec.tables["checkpointing"]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    x = np.arange(len(df))
    ax.bar(x - 0.2, df["overhead"], 0.4, label="extra time")
    ax.bar(x + 0.2, df["memory_saved"], 0.4, label="memory saved")
    ax.set_xticks(x)
    names = _names(df)
    ax.set_xticklabels([names[str(d)] for d in df["device"]], rotation=45, ha="right",
                       fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig_distributed(sec: Any) -> Any:
    """8: exposed all-reduce share vs devices."""
    plt = _plt()
    df = sec.tables["distributed"]
    dp = df[df["layout"].str.fullmatch(r"DP\d+")]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    names = _names(dp)
    for dev, g in dp.groupby("device", sort=False):
        ax.plot(g["devices"], g["dp_comm_share"], marker="o", label=names.get(dev, _short(dev)))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("devices (data parallel)")
    ax.set_ylabel("exposed all-reduce share")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig_implications(sec: Any) -> Any:
    """9: speedups from fusion, near-memory compute and each hardware knob."""
    plt = _plt()
    a = sec.tables["fusion_near_memory"].set_index("device")
    s = sec.tables["sensitivity"].set_index("device")
    cols = {"fusion": a["fusion_speedup"], "sdpa attention": a["sdpa_speedup"],
            "near-memory": a["near_memory_speedup"],
            **{k: s[k] for k in s.columns if k not in ("best", "format")}}
    fig, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.8 / len(cols)
    for i, (k, v) in enumerate(cols.items()):
        ax.bar(np.arange(len(a)) + i * width, v.reindex(a.index), width, label=k)
    ax.axhline(1.0, color="black", lw=0.5)
    ax.set_xticks(np.arange(len(a)) + width * (len(cols) - 1) / 2)
    names = _names(a.reset_index())
    ax.set_xticklabels([names.get(d, _short(d)) for d in a.index], rotation=45, ha="right",
                       fontsize=8)
    ax.set_ylabel("speedup of the iteration")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


RENDERERS: dict[str, Callable[[Any], Any]] = {
    "stacked": fig_stacked, "bound": fig_bound, "gemm": fig_gemm, "optimizer": fig_optimizer,
    "precision": fig_precision, "scaling": fig_scaling, "checkpointing": fig_checkpointing,
    "distributed": fig_distributed, "implications": fig_implications}
"""Figure kind (`Section.figure`) -> renderer."""

__all__ = ["RENDERERS"]
