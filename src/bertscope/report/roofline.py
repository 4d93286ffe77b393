"""Roofline plot of a predicted iteration: every op on the device's roofline.

x: arithmetic intensity (FLOP per byte moved), y: achieved FLOP/s (flops / predicted time),
both log scale. The roofs are the memory slope (bandwidth x intensity) and the compute peaks
(the GEMM format's and, where it differs, the fp32 vector peak), meeting at the ridge points.
Ops are colored by category and sized by predicted time. Rows without FLOPs (copies, gathers)
have no place on a log axis; the caption says how much time they take. `draw_roofline` draws
one device's roofline on given axes: the study's small multiples draw with it too.

matplotlib (a dependency, checked by `requirements.require`) is imported lazily and used
without pyplot, so no global backend is touched: the figure renders with Agg.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertscope.errors import BertscopeError
from bertscope.io import atomic_write, check_output
from bertscope.optable import OpTable
from bertscope.perf.predict import Prediction
from bertscope.report.palette import category_color
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


@dataclass(frozen=True)
class Roofs:
    """A device's roofline for one format: the memory slope and the compute ceilings."""

    bandwidth: float
    """Memory bandwidth, bytes/s: the slope."""
    ceilings: tuple[tuple[str, float], ...]
    """(label, peak FLOP/s) of each ceiling: the GEMM format's peak first, then the vector
    peak where it differs."""

    @classmethod
    def of(cls, pred: Any) -> Roofs:
        """The roofs a prediction was priced under: a `Prediction`, or anything with its
        fields bandwidth, gemm_format, gemm_peak_flops, vector_format, vector_peak_flops (a
        row of the study's roofs table)."""
        ceilings = [(f"{pred.gemm_format} peak", float(pred.gemm_peak_flops))]
        if pred.vector_format != pred.gemm_format or \
                pred.vector_peak_flops != pred.gemm_peak_flops:
            ceilings.append((f"{pred.vector_format} vector peak",
                             float(pred.vector_peak_flops)))
        return cls(float(pred.bandwidth), tuple(ceilings))

    @property
    def ridges(self) -> list[float]:
        """Each ceiling's ridge point, FLOP/byte (peak / bandwidth)."""
        return [peak / self.bandwidth for _, peak in self.ceilings]


def draw_roofline(ax: Any, roofs: Roofs, x: np.ndarray, y: np.ndarray, cats: np.ndarray,
                  t: np.ndarray, *, total: float | None = None, t_max: float | None = None,
                  fontsize: float = 8, area: float = 600) -> dict[Category, float]:
    """Draw `roofs` (slope, ceilings, ridge points) and the ops at intensity `x`, achieved
    FLOP/s `y`, coloured by category `cats`, marker area ~ time `t` (`area` points^2 at
    `t_max`, default the largest), on the log-log axes `ax`; the roofs carry legend labels
    (peak, bandwidth) for the caller to place. Returns each category's percent of `total`
    (default: of `t`)."""
    bw = roofs.bandwidth
    ridges = roofs.ridges
    x_lo = min([*x, *ridges]) / 4 if len(x) else min(ridges) / 100
    x_hi = max([*x, *ridges]) * 4 if len(x) else max(ridges) * 100
    x_lo = 10 ** math.floor(math.log10(x_lo))
    x_hi = 10 ** math.ceil(math.log10(x_hi))
    top = max(peak for _, peak in roofs.ceilings)
    y_lo = min([*y, bw * x_lo]) / 2 if len(y) else bw * x_lo
    y_lo = 10 ** math.floor(math.log10(y_lo))
    ax.set_xscale("log")
    ax.set_yscale("log")
    xs = np.geomspace(x_lo, x_hi, 256)
    for i, ((label, peak), ridge) in enumerate(zip(roofs.ceilings, ridges, strict=True)):
        ax.plot(xs, np.minimum(bw * xs, peak), "-" if i == 0 else "--", color="black",
                lw=1.4 if i == 0 else 1.0, label=f"{label} {peak / 1e12:.4g} TFLOP/s")
        ax.axvline(ridge, color="grey", ls=":", lw=0.8)
        ax.annotate(f"ridge {ridge:.3g} FLOP/B", (ridge, y_lo), textcoords="offset points",
                    xytext=(-2 - fontsize, 6), fontsize=fontsize, color="dimgrey", rotation=90)
    ax.plot([], [], " ", label=f"memory {bw / 1e9:.4g} GB/s")
    scale = t_max if t_max else (float(t.max()) if len(t) else 1.0)
    total = float(t.sum()) if total is None else total
    shares: dict[Category, float] = {}
    for cat in Category:
        sel = cats == cat
        if not sel.any():
            continue
        ax.scatter(x[sel], y[sel], s=6 + area * t[sel] / scale, color=category_color(cat),
                   alpha=0.6, edgecolors="none")
        shares[cat] = 100 * float(t[sel].sum()) / total if total > 0 else 0.0
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, top * 3)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.grid(True, which="major", ls=":", lw=0.5)
    return shares


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
    t = time_s[ok]
    total = float(np.nansum(time_s))
    hidden = total - float(t.sum())

    fig = Figure(figsize=(10.5, 6))
    fig.subplots_adjust(left=0.08, right=0.74, top=0.94, bottom=0.13)  # constrained layout
    ax = fig.add_subplot()  # costs a second per plot on log axes
    roofs = Roofs.of(pred)
    shares = draw_roofline(ax, roofs, flops[ok] / moved[ok], flops[ok] / t,
                           d["category"].to_numpy()[ok], t, total=total)
    roof_legend = ax.legend(loc="lower left", bbox_to_anchor=(1.02, 0.0), borderaxespad=0,
                            fontsize=8, frameon=False)
    ax.add_artist(roof_legend)
    ax.legend(handles=[Line2D([], [], marker="o", ls="", color=category_color(cat),
                              label=f"{cat} ({share:.1f}% of time)")
                       for cat, share in shares.items()],
              loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, fontsize=8,
              title="ops by category\n(area ~ time)", title_fontsize=8)
    ax.set_ylabel("achieved FLOP/s (predicted)")
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


__all__ = ["SUFFIXES", "Roofs", "draw_roofline", "plot_roofline"]
