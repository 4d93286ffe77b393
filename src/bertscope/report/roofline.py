"""Roofline plot of a predicted iteration: every op on the device's roofline.

x: arithmetic intensity (FLOP per byte moved), y: achieved FLOP/s (flops / predicted time),
both log scale. The roofs are the memory slope (bandwidth x intensity) and the compute peaks
(the GEMM format's and, where it differs, the fp32 vector peak), meeting at the ridge points.
Ops are colored by category and sized by predicted time. Rows without FLOPs (copies, gathers)
have no place on a log axis; the caption says how much time they take.

matplotlib (a dependency, checked by `requirements.require`) is imported lazily and used
without pyplot, so no global backend is touched: the figure renders with Agg.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import numpy as np

from bertscope.errors import BertscopeError
from bertscope.io import atomic_write, check_output
from bertscope.optable import OpTable
from bertscope.perf.predict import Prediction
from bertscope.requirements import require
from bertscope.taxonomy import Category

SUFFIXES = (".png", ".svg")
"""File types `plot_roofline` writes, chosen by the path's suffix."""


def _matplotlib() -> tuple[Any, Any]:
    require("the roofline plot", "matplotlib")
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    return Figure, Line2D


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def plot_roofline(table: OpTable, path: str | Path, *, title: str | None = None) -> Path:
    """Draw the predicted table's ops on the device roofline and write PNG or SVG (by the
    suffix of `path`) atomically. The table must come from `bertscope.perf.predict`."""
    p = Path(path)
    fmt = p.suffix.lower()
    if fmt not in SUFFIXES:
        raise BertscopeError(f"{p}: the plot must be a .png or .svg file")
    pred = Prediction.on(table)
    if pred is None or "time_s" not in table.df.columns:
        raise BertscopeError("plot_roofline needs a predicted table; run perf.predict first")
    check_output(p)
    Figure, Line2D = _matplotlib()

    d = table.df
    moved = (d["bytes_read"] + d["bytes_written"]).to_numpy(dtype=float)
    flops = d["flops"].to_numpy(dtype=float)
    time_s = d["time_s"].to_numpy(dtype=float)
    ok = (flops > 0) & (moved > 0) & (time_s > 0)
    x = flops[ok] / moved[ok]
    y = flops[ok] / time_s[ok]
    t = time_s[ok]
    cats = d["category"].to_numpy()[ok]
    total = float(np.nansum(time_s))
    hidden = total - float(t.sum())

    bw = float(pred.bandwidth)
    roofs = [(f"{pred.gemm_format} peak", float(pred.gemm_peak_flops))]
    if pred.vector_format != pred.gemm_format or \
            pred.vector_peak_flops != pred.gemm_peak_flops:
        roofs.append((f"{pred.vector_format} vector peak", float(pred.vector_peak_flops)))
    ridges = [peak / bw for _, peak in roofs]
    x_lo = min([*x, *ridges]) / 4 if len(x) else min(ridges) / 100
    x_hi = max([*x, *ridges]) * 4 if len(x) else max(ridges) * 100
    x_lo = 10 ** math.floor(math.log10(x_lo))
    x_hi = 10 ** math.ceil(math.log10(x_hi))
    top = max(peak for _, peak in roofs)
    y_lo = min([*y, bw * x_lo]) / 2 if len(y) else bw * x_lo
    y_lo = 10 ** math.floor(math.log10(y_lo))

    fig = Figure(figsize=(9, 6))
    fig.subplots_adjust(left=0.09, right=0.98, top=0.94, bottom=0.13)  # constrained layout
    ax = fig.add_subplot()  # costs a second per plot on log axes
    ax.set_xscale("log")
    ax.set_yscale("log")
    xs = np.geomspace(x_lo, x_hi, 256)
    for i, (label, peak) in enumerate(roofs):
        style = "-" if i == 0 else "--"
        ax.plot(xs, np.minimum(bw * xs, peak), style, color="black", lw=1.4 if i == 0 else 1.0,
                label=f"{label} {peak / 1e12:.4g} TFLOP/s")
        ridge = peak / bw
        ax.axvline(ridge, color="grey", ls=":", lw=0.8)
        ax.annotate(f"ridge {ridge:.3g} FLOP/B", (ridge, y_lo), textcoords="offset points",
                    xytext=(-11, 6), fontsize=8, color="dimgrey", rotation=90)
    ax.plot([], [], " ", label=f"memory {bw / 1e9:.4g} GB/s")

    palette = _palette()
    handles = []
    sizes = 6 + 600 * t / t.max() if len(t) else t
    for cat in Category:
        sel = cats == cat
        if not sel.any():
            continue
        color = palette[cat]
        ax.scatter(x[sel], y[sel], s=sizes[sel], color=color, alpha=0.55, edgecolors="none")
        share = 100 * t[sel].sum() / total if total > 0 else 0.0
        handles.append(Line2D([], [], marker="o", ls="", color=color,
                              label=f"{cat.value} ({share:.1f}% of time)"))
    roof_legend = ax.legend(loc="upper left", fontsize=8, frameon=False)
    ax.add_artist(roof_legend)
    ax.legend(handles=handles, loc="lower right", fontsize=8, title="ops by category "
              "(area ~ time)", title_fontsize=8)
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, top * 3)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved FLOP/s (predicted)")
    ax.grid(True, which="major", ls=":", lw=0.5)
    if title is None:
        fused = ", fused" if pred.fused else ""
        job = (f"{table.model.name} b{table.run.batch} s{table.run.seq}"
               if table.job is not None else "op table")
        title = (f"{job} "
                 f"{pred.precision}{fused} on {pred.sku}: "
                 f"{_ms(pred.time_s)} per iteration (predicted)")
    ax.set_title(title, fontsize=10)
    caption = f"{int(ok.sum())} of {len(d)} ops shown"
    if hidden > 0:
        caption += (f"; {len(d) - int(ok.sum())} without FLOPs or time (copies, gathers) "
                    f"take {_ms(hidden)} ({100 * hidden / total:.1f}%)")
    fig.text(0.01, 0.012, caption, fontsize=7, color="dimgrey")

    buf = io.BytesIO()
    if fmt == ".png":
        fig.savefig(buf, format="png", dpi=130)
    else:
        fig.savefig(buf, format="svg", metadata={"Date": None})
    atomic_write(p, buf.getvalue())
    return p


def _palette() -> dict[Category, tuple[float, float, float, float]]:
    """A fixed color per category (tab20), so plots of different runs compare."""
    from matplotlib import colormaps

    cmap = colormaps["tab20"]
    return {cat: cmap(i % 20) for i, cat in enumerate(Category)}


__all__ = ["SUFFIXES", "plot_roofline"]
