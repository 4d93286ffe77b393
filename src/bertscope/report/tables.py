"""Terminal tables (rich) for op tables and their summaries."""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console
from rich.table import Table

from bertscope.optable import OpTable


def si(x: float, unit: str = "") -> str:
    """A number with an SI prefix: 1.23 G, 45.6 M, ..."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}".rstrip()


def binary(x: float) -> str:
    """Bytes with a binary prefix (KiB, MiB, GiB)."""
    for factor, prefix in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(x) >= factor:
            return f"{x / factor:.3g} {prefix}"
    return f"{x:.0f} B"


def summary_table(summary: pd.DataFrame, title: str) -> Table:
    """A rich table of an `OpTable.summary` frame: ops, FLOPs, bytes, shares (and time)."""
    timed = "time_s" in summary.columns
    t = Table(title=title, title_justify="left", header_style="bold")
    t.add_column(summary.index.name or "key", no_wrap=True)
    for col in ("ops", "FLOPs", "FLOP %", "bytes", "bytes %", "FLOP/B"):
        t.add_column(col, justify="right")
    if timed:
        t.add_column("time", justify="right")
        t.add_column("time %", justify="right")
    for key, r in summary.iterrows():
        intensity = r["flops"] / r["bytes"] if r["bytes"] else 0.0
        cells = [str(key), f"{int(r['count'])}", si(r["flops"]), f"{100 * r['flops_share']:.1f}",
                 binary(r["bytes"]), f"{100 * r['bytes_share']:.1f}", f"{intensity:.1f}"]
        if timed:
            cells += [si(r["time_s"], "s"), f"{100 * r['time_share']:.1f}"]
        t.add_row(*cells)
    return t


def top_table(table: OpTable, n: int, by: str = "flops") -> Table:
    """A rich table of the n largest rows."""
    t = Table(title=f"Top {n} ops by {by} (shape: MxNxK\\[xbatch] for GEMMs, else elements)",
              title_justify="left", header_style="bold")
    for col in ("op", "layer", "phase", "shape", "FLOPs", "bytes", "FLOP/B"):
        t.add_column(col, justify="left" if col in ("op", "phase") else "right",
                     no_wrap=True)
    for _, r in table.top(n, by).iterrows():
        if r["batch"]:
            shape = f"{r['m']}x{r['n']}x{r['k']}" + (f"x{r['batch']}" if r["batch"] > 1 else "")
        else:
            shape = f"{r['elements']:,}"
        t.add_row(r["name"], "-" if r["layer"] < 0 else str(r["layer"]), r["phase"], shape,
                  si(r["flops"]), binary(r["bytes_read"] + r["bytes_written"]),
                  f"{r['intensity']:.1f}")
    return t


def print_optable(table: OpTable, console: Console, top: int = 10) -> None:
    """Print totals, the breakdowns by category, sublayer group, sublayer and phase, and the
    top ops."""
    meta = table.meta
    tot = table.totals()
    run = meta.get("run", {})
    model = meta.get("model", {})
    head = (f"[bold]{model.get('name', '?')}[/] batch {run.get('batch')} x seq {run.get('seq')}"
            f" x {run.get('micro_batches', 1)} micro-batch(es), {run.get('precision')}, "
            f"{run.get('optimizer')}")
    console.print(head)
    line = (f"params {meta['params']:,}   FLOPs/iteration {si(tot['flops'])}   "
            f"bytes moved {binary(tot['bytes_read'] + tot['bytes_written'])}   "
            f"ops {tot['ops']:,}")
    console.print(line)
    mem = meta.get("memory")
    if mem:
        console.print(
            f"memory: weights {binary(mem['weights'] + mem['master_weights'])}, "
            f"grads {binary(mem['gradients'])}, optimizer {binary(mem['optimizer_states'])}, "
            f"activations {binary(mem['activations'])}, peak ~ {binary(mem['peak'])}")
    console.print(summary_table(table.by_category(), "By category"))
    console.print(summary_table(table.summary("group"), "By sublayer group"))
    console.print(summary_table(table.by_phase(), "By phase"))
    if top > 0:
        console.print(top_table(table, top))


__all__ = ["binary", "print_optable", "si", "summary_table", "top_table"]
