"""The study's figures: one renderer per section kind, each drawing from the section's tables
(matplotlib, Agg; saved as PNG and SVG).

Every figure follows the same rules: colours from `report.palette` (one per category, the
same in every figure, colour-blind safe); shares drawn as percentages on 0-100 % axes;
legends outside the axes (constrained layout makes room), never over data; the format that
ran on each device in its label ("v100 (fp16)").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from bertscope.report.palette import PASS_COLORS, category_color, series
from bertscope.report.roofline import Roofs, draw_roofline
from bertscope.taxonomy import Category, Phase

_CATS = [c.value for c in Category]
_FONT = 8


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _figure(ncols: int = 1, nrows: int = 1, *, size: tuple[float, float], **kw: Any
            ) -> tuple[Any, Any]:
    """A constrained-layout figure and its axes (always a 2-D array)."""
    return _plt().subplots(nrows, ncols, figsize=size, squeeze=False, layout="constrained",
                           **kw)


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


def measured_title(device: str, model: str, precision: str) -> str:
    """A measured panel's title, each name once: a name already inside another is dropped
    ("trace x.json", "trace", "trace" -> "measured: trace x.json")."""
    names = [str(n) for n in dict.fromkeys((device, model, precision)) if str(n)]
    kept = [n for n in names if not any(n != o and n in o for o in names)]
    return "measured: " + ", ".join(kept)


def _percent_axis(ax: Any, label: str, *, top: float = 100.0) -> None:
    """A y axis in percent from 0 to `top` (at most 100)."""
    ax.set_ylim(0, min(100.0, top))
    ax.set_ylabel(label)
    ax.yaxis.set_major_formatter(_plt().FuncFormatter(lambda v, _: f"{v:g}%"))


def _ticks(ax: Any, labels: list[str], offset: float = 0.0) -> None:
    ax.set_xticks(np.arange(len(labels)) + offset)
    ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=_FONT)


def _legend_right(fig: Any, handles: list[Any] | None = None, **kw: Any) -> Any:
    """The figure's legend to the right of every axes (the figure's first axes' entries
    unless `handles`)."""
    if handles is None:
        handles, _ = fig.axes[0].get_legend_handles_labels()
    return fig.legend(handles=handles, loc="outside right upper", fontsize=_FONT - 1, **kw)


def _legend_below(fig: Any, handles: list[Any] | None = None, *, ncol: int = 4, **kw: Any
                  ) -> Any:
    """The figure's legend below every axes."""
    if handles is None:
        handles, _ = fig.axes[0].get_legend_handles_labels()
    return fig.legend(handles=handles, loc="outside lower center", ncol=ncol,
                      fontsize=_FONT - 1, **kw)


def _stacked(ax: Any, frame: pd.DataFrame, title: str) -> None:
    """Stacked category shares in percent: one bar per row of `frame` (index: bar label)."""
    bottom = np.zeros(len(frame))
    for cat in [c for c in _CATS if c in frame.columns]:
        vals = 100 * frame[cat].to_numpy()
        ax.bar(range(len(frame)), vals, bottom=bottom, color=category_color(cat), label=cat,
               edgecolor="white", linewidth=0.3)
        bottom += vals
    _ticks(ax, [_short(str(i)) for i in frame.index])
    _percent_axis(ax, "% of iteration time")
    ax.set_title(title, fontsize=_FONT + 1)


def _category_handles(fig: Any) -> list[Any]:
    """One legend entry per category drawn in any axes of `fig`, in `Category` order."""
    seen: dict[str, Any] = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(lab, h)
    return [seen[c] for c in _CATS if c in seen]


def fig_stacked(sec: Any) -> Any:
    """1: category shares per device for each phase (largest model, narrowest precision),
    measured bars last."""
    df = sec.tables["shares"]
    cat = df[df["by"] == "category"]
    pred = cat[cat["source"] == "predicted"]
    big = pred["model"].iloc[-1]
    low = pred["precision"].iloc[-1]
    phases = list(dict.fromkeys(pred["phase"]))
    meas = cat[cat["source"] == "measured"]
    n = len(phases) + (1 if len(meas) else 0)
    fig, axes = _figure(n, size=(3.9 * n + 1.6, 3.9))
    for ax, ph in zip(axes[0], phases, strict=False):
        sel = pred[(pred["model"] == big) & (pred["precision"] == low) & (pred["phase"] == ph)]
        _stacked(ax, sel.pivot_table(index="device", columns="key", values="share",
                                     sort=False).fillna(0).rename(index=_names(sel)),
                 f"{big}, {ph}, {low} (predicted)")
    if len(meas):
        first = meas.iloc[0]
        _stacked(axes[0][-1], meas.pivot_table(index="device", columns="key", values="share",
                                               sort=False).fillna(0),
                 measured_title(str(first["device"]), str(first["model"]),
                                str(first["precision"])))
    _legend_right(fig, _category_handles(fig))
    return fig


def fig_bound(sec: Any) -> Any:
    """2: memory-bound share per device and precision; below, one roofline per device (its
    bandwidth slope, compute ceilings and ridge points, every op of the largest model)."""
    df = sec.tables["bound_share"]
    big = df["model"].iloc[-1]
    ph = df["phase"].iloc[-1]
    sel = df[(df["model"] == big) & (df["phase"] == ph)]
    p = sel.pivot_table(index="device", columns="precision", values="memory_bound", sort=False)
    ops = sec.tables["ops"]
    roofs = sec.tables.get("roofs", pd.DataFrame())
    devices = list(roofs["device"]) if len(roofs) and len(ops) else []
    cols = 3
    rows = -(-len(devices) // cols)
    fig = _plt().figure(figsize=(11, 3.6 + 2.6 * rows), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[3.6, 2.6 * rows]) if rows else (fig, None)
    a = top.subplots()
    width = 0.8 / max(1, len(p.columns))
    for i, col in enumerate(p.columns):
        a.bar(np.arange(len(p)) + i * width, 100 * p[col], width, label=col, color=series(i))
    names = _names(sel)
    _ticks(a, [names.get(d, _short(d)) for d in p.index], width * (len(p.columns) - 1) / 2)
    _percent_axis(a, "% of time in memory-bound ops")
    a.set_title(f"{big}, {ph}: time in memory-bound ops", fontsize=_FONT + 1)
    top.legend(loc="outside right upper", fontsize=_FONT - 1, title="precision",
               title_fontsize=_FONT - 1)
    if bottom is None:
        return fig
    from matplotlib.lines import Line2D
    from matplotlib.ticker import LogLocator, NullLocator

    axes = bottom.subplots(rows, cols, squeeze=False)
    shown: dict[str, Any] = {}
    names = _names(ops)
    for k, (ax, row) in enumerate(zip(axes.flat, roofs.itertuples(index=False), strict=False)):
        g = ops[ops["device"] == row.device]
        rf = Roofs.of(row)
        draw_roofline(ax, rf, g["intensity"].to_numpy(float),
                      g["achieved_flops"].to_numpy(float), g["category"].to_numpy(),
                      g["time_s"].to_numpy(float), fontsize=5.5, area=200)
        ceilings = " / ".join(f"{peak / 1e12:.3g}" for _, peak in rf.ceilings)
        ax.set_title(f"{names.get(row.device, _short(row.device))}: {ceilings} TFLOP/s, "
                     f"{rf.bandwidth / 1e9:.4g} GB/s", fontsize=_FONT - 0.5)
        ax.tick_params(labelsize=_FONT - 2)
        for axis in (ax.xaxis, ax.yaxis):  # few ticks: log-axis minor ticks cost seconds
            axis.set_major_locator(LogLocator(numticks=5))
            axis.set_minor_locator(NullLocator())
        ax.set_xlabel("FLOP/byte" if k // cols == rows - 1 else "", fontsize=_FONT - 1)
        ax.set_ylabel("FLOP/s" if k % cols == 0 else "", fontsize=_FONT - 1)
        for cat in set(g["category"]):
            shown[str(cat)] = cat
    for ax in axes.flat[len(devices):]:
        ax.set_visible(False)
    handles = [Line2D([], [], marker="o", ls="", color=category_color(c), label=c)
               for c in _CATS if c in shown]
    handles += [Line2D([], [], color="black", label="GEMM-format peak"),
                Line2D([], [], color="black", ls="--", label="vector peak"),
                Line2D([], [], color="grey", ls=":", label="ridge point")]
    bottom.legend(handles=handles, loc="outside lower center", ncol=8, fontsize=_FONT - 1,
                  title="one roofline per device (predicted; area ~ time)",
                  title_fontsize=_FONT - 1)
    return fig


def fig_gemm(sec: Any) -> Any:
    """3: each of the paper's GEMMs (QKV, scores, context, attention output, FC1, FC2, MLM
    head, ...): its share of GEMM time and its fraction of the GEMM peak, one bar per pass
    (forward, data gradient, weight gradient), as Pati et al. (IISWC 2022) show them."""
    g = sec.tables["per_gemm"]
    gemms = list(dict.fromkeys(g["gemm"]))
    passes = list(dict.fromkeys(g["pass"]))
    phase = dict(zip(g["pass"], g["phase"], strict=False))
    fig, axes = _figure(2, size=(11, 3.8))
    width = 0.8 / max(1, len(passes))
    for ax, col, label in ((axes[0][0], "time_share", "% of GEMM time"),
                           (axes[0][1], "efficiency", "% of the GEMM peak")):
        for i, pas in enumerate(passes):
            part = g[g["pass"] == pas].set_index("gemm")[col].reindex(gemms)
            ax.bar(np.arange(len(gemms)) + i * width, 100 * part.fillna(0), width, label=pas,
                   color=PASS_COLORS.get(Phase(phase[pas]), series(i)))
        _ticks(ax, gemms, width * (len(passes) - 1) / 2)
        top = 100 if col == "efficiency" else min(100, 10 * np.ceil(g[col].max() * 11))
        _percent_axis(ax, label, top=top)
    first = g.iloc[0]
    fig.suptitle(f"The GEMMs of {first['model']} on {_short(str(first['device']))} "
                 f"({first['format']}, predicted)", fontsize=_FONT + 1)
    _legend_right(fig, title="pass", title_fontsize=_FONT - 1)
    return fig


def fig_optimizer(sec: Any) -> Any:
    """4: the optimizer's share vs tokens per iteration: one line per optimizer and sequence
    length (tokens = batch x seq), one panel per micro-batch count."""
    df = sec.tables["optimizer_share"]
    low = df["precision"].iloc[-1]
    d = df[df["precision"] == low]
    micros = sorted(d["micro_batches"].unique())
    opts = list(dict.fromkeys(d["optimizer"]))
    seqs = sorted(d["seq"].unique())
    styles = ["-", "--", ":", "-."]
    fig, axes = _figure(len(micros), size=(4.6 * len(micros) + 1.8, 3.8), sharey=True)
    for ax, micro in zip(axes[0], micros, strict=True):
        for i, opt in enumerate(opts):
            for j, seq in enumerate(seqs):
                part = d[(d["optimizer"] == opt) & (d["seq"] == seq)
                         & (d["micro_batches"] == micro)].sort_values("tokens")
                if part.empty:
                    continue
                ax.plot(part["tokens"], 100 * part["optimizer_share"], marker=".",
                        color=series(i), ls=styles[j % len(styles)], label=f"{opt}, seq {seq}")
        ax.set_xscale("log")
        ax.set_xlabel("tokens per iteration")
        ax.set_title(f"{micro} micro-batch{'es' if micro > 1 else ''} per step",
                     fontsize=_FONT + 1)
        _percent_axis(ax, "optimizer's % of iteration time" if ax is axes[0][0] else "",
                      top=min(100, 10 * np.ceil(d["optimizer_share"].max() * 11)))
    fig.suptitle(f"{df['model'].iloc[0]} on {_short(str(df['device'].iloc[0]))} "
                 f"({df['format'].iloc[-1]})", fontsize=_FONT + 1)
    _legend_right(fig)
    return fig


def fig_precision(sec: Any) -> Any:
    """5: category shares per device for each precision."""
    df = sec.tables["precision_shares"]
    precs = list(dict.fromkeys(df["precision"]))
    fig, axes = _figure(len(precs), size=(3.9 * len(precs) + 1.6, 3.9))
    for ax, prec in zip(axes[0], precs, strict=True):
        sel = df[df["precision"] == prec]
        _stacked(ax, sel.pivot_table(index="device", columns="category", values="share",
                                     sort=False).fillna(0).rename(index=_names(sel)), prec)
    _legend_right(fig, _category_handles(fig))
    return fig


def fig_scaling(sec: Any) -> Any:
    """6: category shares vs parameters."""
    df = sec.tables["scaling"]
    fig, axes = _figure(size=(7.5, 4))
    ax = axes[0][0]
    cats = [c for c in _CATS if f"share_{c}" in df.columns]
    ax.stackplot(df["params"], *[100 * df[f"share_{c}"] for c in cats],
                 colors=[category_color(c) for c in cats], labels=cats)
    ax.set_xscale("log")
    ax.set_xlabel("parameters")
    _percent_axis(ax, "% of iteration time")
    _legend_right(fig)
    return fig


def fig_checkpointing(sec: Any) -> Any:
    """7: time overhead and memory saved by full checkpointing, in percent."""
    df = sec.tables["checkpointing"]
    fig, axes = _figure(size=(7, 4))
    ax = axes[0][0]
    x = np.arange(len(df))
    ax.bar(x - 0.2, 100 * df["overhead"], 0.4, label="extra time", color=series(3))
    ax.bar(x + 0.2, 100 * df["memory_saved"], 0.4, label="memory saved", color=series(0))
    names = _names(df)
    _ticks(ax, [names[str(d)] for d in df["device"]])
    _percent_axis(ax, "% of the run without checkpointing")
    _legend_right(fig)
    return fig


def fig_distributed(sec: Any) -> Any:
    """8: exposed all-reduce share vs devices, in percent."""
    df = sec.tables["distributed"]
    dp = df[df["layout"].str.fullmatch(r"DP\d+")]
    fig, axes = _figure(size=(7, 3.8))
    ax = axes[0][0]
    names = _names(dp)
    for i, (dev, g) in enumerate(dp.groupby("device", sort=False)):
        ax.plot(g["devices"], 100 * g["dp_comm_share"], marker="o", color=series(i),
                label=names.get(dev, _short(dev)))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("devices (data parallel)")
    _percent_axis(ax, "exposed all-reduce, % of iteration",
                  top=float(np.ceil(110 * dp["dp_comm_share"].max() + 1e-9)))
    _legend_right(fig)
    return fig


def fig_implications(sec: Any) -> Any:
    """9: speedups from fusion, near-memory compute and each hardware knob."""
    a = sec.tables["fusion_near_memory"].set_index("device")
    s = sec.tables["sensitivity"].set_index("device")
    cols = {"fusion": a["fusion_speedup"], "sdpa attention": a["sdpa_speedup"],
            "near-memory": a["near_memory_speedup"],
            **{k: s[k] for k in s.columns if k not in ("best", "format")}}
    fig, axes = _figure(size=(10, 3.9))
    ax = axes[0][0]
    width = 0.8 / len(cols)
    for i, (k, v) in enumerate(cols.items()):
        ax.bar(np.arange(len(a)) + i * width, v.reindex(a.index), width, label=k,
               color=series(i))
    ax.axhline(1.0, color="black", lw=0.5)
    names = _names(a.reset_index())
    _ticks(ax, [names.get(d, _short(d)) for d in a.index], width * (len(cols) - 1) / 2)
    ax.set_ylabel("speedup of the iteration (x)")
    _legend_right(fig)
    return fig


def fig_recipes(sec: Any) -> Any:
    """10: one panel per device: the iteration under each recipe (eager, fused, megatron)
    stacked by category, in percent of the eager iteration (a bar's height is its time;
    its label says its speedup)."""
    cat = sec.tables["recipe_time"]
    it = sec.tables["recipes"]
    big, ph = it["model"].iloc[-1], it["phase"].iloc[-1]
    it = it[(it["model"] == big) & (it["phase"] == ph)]
    cat = cat[(cat["model"] == big) & (cat["phase"] == ph)]
    devices = list(dict.fromkeys(it["device"]))
    names = _names(it)
    cols = min(3, len(devices))
    rows = -(-len(devices) // cols)
    fig, axes = _figure(cols, rows, size=(3.1 * cols + 1.9, 2.7 * rows + 0.5), sharey=True)
    for k, (ax, dev) in enumerate(zip(axes.flat, devices, strict=False)):
        recipes = it[it["device"] == dev].set_index("recipe")["speedup"]
        frame = (cat[cat["device"] == dev].pivot_table(index="recipe", columns="category",
                                                       values="of_eager", aggfunc="sum",
                                                       sort=False)
                 .reindex(recipes.index).fillna(0))
        frame.index = [r if i == 0 else f"{r} {v:.2f}x"
                       for i, (r, v) in enumerate(recipes.items())]
        _stacked(ax, frame, names.get(dev, _short(dev)))
        top = 100 * frame.sum(axis=1).max()
        if top > 100:  # a stack slower than eager
            ax.set_ylim(0, 10 * np.ceil(top / 10))
        ax.set_ylabel("% of the eager iteration" if k % cols == 0 else "")
    for ax in axes.flat[len(devices):]:
        ax.set_visible(False)
    fig.suptitle(f"{big}, {ph}, {it['precision'].iloc[0]} (predicted): each recipe's "
                 f"iteration by category, % of eager's; label: speedup over eager",
                 fontsize=_FONT + 1)
    _legend_right(fig, _category_handles(fig))
    return fig


RENDERERS: dict[str, Callable[[Any], Any]] = {
    "stacked": fig_stacked, "bound": fig_bound, "gemm": fig_gemm, "optimizer": fig_optimizer,
    "precision": fig_precision, "scaling": fig_scaling, "checkpointing": fig_checkpointing,
    "distributed": fig_distributed, "implications": fig_implications,
    "recipes": fig_recipes}
"""Figure kind (`Section.figure`) -> renderer."""

__all__ = ["RENDERERS", "measured_title"]
