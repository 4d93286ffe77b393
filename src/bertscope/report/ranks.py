"""The ranks of a trace side by side (`trace.ranks.CrossRankReport`): a per-rank table with a
bar of where each GPU's time went, the worst stragglers, and a ranks x categories heat map."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from bertscope.errors import BertscopeError
from bertscope.io import atomic_write, check_output
from bertscope.report.tables import si
from bertscope.requirements import require
from bertscope.trace.ranks import CrossRankReport

BAR = 20
"""Characters of the per-rank bar."""
_PARTS = (("compute", "█", "green"), ("comm", "█", "magenta"), ("copy", "█", "cyan"),
          ("idle", "░", "grey50"))
HEAT_COLUMNS = (("compute_share", "compute"), ("comm_share", "comm (exposed)"),
                ("copy_share", "copies (exposed)"), ("idle_share", "idle"),
                ("overlap_share", "comm under compute"), ("host_wait_s", "host wait"),
                ("kernel_wait_s", "kernel wait"), ("collective_wait_s", "waiting in collectives"))
"""Heat map columns: record key and label (seconds become shares of the rank's window)."""
SUFFIXES = (".png", ".svg")


def _pct(x: float | None) -> str:
    return "-" if x is None or x != x else f"{100 * x:.1f}"


def _bar(row: dict[str, Any]) -> Text:
    """Where the rank's window went, as a stacked bar of `BAR` characters."""
    t = Text()
    used = 0
    for i, (key, ch, style) in enumerate(_PARTS):
        n = BAR - used if i == len(_PARTS) - 1 else round(BAR * row[f"{key}_share"])
        n = max(0, min(n, BAR - used))
        t.append(ch * n, style=style)
        used += n
    return t


def print_ranks(report: CrossRankReport, console: Console, *, top: int = 10) -> None:
    """Print the per-rank table (shares of each rank's device window, overlap, idle by cause,
    waits, launch delays, peak memory), the `top` collectives with the longest wait and the
    notes on what could not be compared."""
    rows = report.rank_records()
    t = Table(title="Ranks: where each GPU's time went (shares of its device window: compute, "
                    "comm not under compute, copies, idle; overlap = comm under compute / comm)",
              title_justify="left", header_style="bold")
    for c in ("rank", "window", "compute %", "comm %", "copy %", "idle %", "bar", "overlap %"):
        t.add_column(c, justify="left" if c in ("rank", "bar") else "right", no_wrap=True)
    for r in rows:
        t.add_row(str(r["rank"]), si(r["window_s"], "s"), _pct(r["compute_share"]),
                  _pct(r["comm_share"]), _pct(r["copy_share"]), _pct(r["idle_share"]),
                  _bar(r), _pct(r["overlap_share"]))
    console.print(t)
    w = Table(title="Ranks: idle by cause (host wait, kernel wait, other), bubble, waiting in "
                    "collectives, straggler, launch delay (p50, p95), peak memory",
              title_justify="left", header_style="bold")
    for c in ("rank", "host", "kernel", "other", "bubble", "in coll.", "last at", "caused",
              "launches", "p50", "p95", "peak mem"):
        w.add_column(c, justify="left" if c == "rank" else "right", no_wrap=True)
    for r in rows:
        w.add_row(str(r["rank"]), *(si(r[k], "s") for k in (
            "host_wait_s", "kernel_wait_s", "other_s", "bubble_s", "collective_wait_s")),
            str(r["straggler_count"]), si(r["caused_wait_s"], "s"), str(r["launches"]),
            si(r["launch_p50_us"] * 1e-6, "s"), si(r["launch_p95_us"] * 1e-6, "s"),
            si(r["peak_bytes"], "B"))
    console.print(w)
    console.print("bar: [green]█[/] compute  [magenta]█[/] comm  [cyan]█[/] copies  "
                  "[grey50]░[/] idle; host/kernel wait: idle gaps on the streams (HTA's "
                  "causes); bubble: idle gaps ended by a send/recv; coll. wait: time inside "
                  "collectives before the last rank came; last at: collectives this rank was "
                  "the straggler of")
    worst = [c for c in report.stragglers(top) if c.max_wait_s > 0]
    if worst:
        s = Table(title=f"Top {len(worst)} stragglers (collectives by longest wait)",
                  title_justify="left", header_style="bold")
        sized = any(c.message_bytes == c.message_bytes for c in worst)
        for c in ("collective", "straggler", "first rank", "max wait", "sum of waits",
                  *(("message",) if sized else ())):
            s.add_column(c, justify="left" if c == "collective" else "right", no_wrap=True)
        for c in worst:
            first = min(c.arrival_us, key=lambda r: (c.arrival_us[r], r))
            s.add_row(f"{c.kind} #{c.index}", f"rank {c.straggler}", f"rank {first}",
                      si(c.max_wait_s, "s"), si(c.sum_wait_s, "s"),
                      *((_bytes(c.message_bytes),) if sized else ()))
        console.print(s)
    elif report.collectives:
        console.print(f"{len(report.collectives)} collective(s) matched across ranks; every "
                      f"rank arrived at each at the same time")
    messages = report.message_records()
    if messages:
        m = Table(title="Collectives: input message sizes (the kernels' args)",
                  title_justify="left", header_style="bold")
        for c in ("collective", "count", "sized", "min", "median", "max", "per rank"):
            m.add_column(c, justify="left" if c == "collective" else "right", no_wrap=True)
        for r in messages:
            m.add_row(r["kind"], str(r["count"]), str(r["sized"]),
                      *(_bytes(r[k]) for k in ("min_bytes", "median_bytes", "max_bytes",
                                               "bytes_per_rank")))
        console.print(m)
    for n in report.notes:
        console.print(f"note: {n}")


def _bytes(b: float) -> str:
    return "-" if b != b else si(b, "B")


def plot_ranks(report: CrossRankReport, path: str | Path) -> Path:
    """Write a heat map of ranks x time categories (shares of each rank's device window;
    `HEAT_COLUMNS`) as PNG or SVG (by the suffix of `path`), atomically."""
    p = Path(path)
    if p.suffix.lower() not in SUFFIXES:
        raise BertscopeError(f"{p}: the plot must be a .png or .svg file")
    rows = report.rank_records()
    if not rows:
        raise BertscopeError("no rank has device events: nothing to plot")
    check_output(p)
    require("the rank heat map", "matplotlib")
    import numpy as np
    from matplotlib.figure import Figure

    m = np.array([[(r[k] / r["window_s"] if k.endswith("_s") and r["window_s"] > 0
                    else r[k]) if r[k] == r[k] else 0.0 for k, _ in HEAT_COLUMNS]
                  for r in rows], dtype=float)
    fig = Figure(figsize=(1.2 * len(HEAT_COLUMNS) + 2, 0.35 * len(rows) + 1.8))
    ax = fig.add_subplot()
    im = ax.imshow(m, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(len(HEAT_COLUMNS)), [label for _, label in HEAT_COLUMNS],
                  rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), [f"rank {r['rank']}" for r in rows])
    if len(rows) <= 32:
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                ax.text(j, i, f"{100 * m[i, j]:.0f}", ha="center", va="center", fontsize=7,
                        color="white" if m[i, j] < 0.6 else "black")
    fig.colorbar(im, ax=ax, label="share of the rank's device window")
    ax.set_title("Where each rank's GPU time went")
    fig.tight_layout()
    buf = io.BytesIO()
    if p.suffix.lower() == ".png":
        fig.savefig(buf, format="png", dpi=110)
    else:
        fig.savefig(buf, format="svg", metadata={"Date": None})
    atomic_write(p, buf.getvalue())
    return p


__all__ = ["HEAT_COLUMNS", "plot_ranks", "print_ranks"]
