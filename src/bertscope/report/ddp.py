"""Terminal report of a measured DDP run: all-reduce measured vs predicted."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table

from bertscope.report.tables import binary, si

_ROWS = (
    ("all-reduce time / iteration", "all_reduce_s", "s"),
    ("  overlapped with backward", "overlap_s", "s"),
    ("  exposed (backward waits)", "exposed_s", "s"),
    ("  waiting for the slower rank", "peer_wait_s", "s"),
    ("all-reduce share of iteration", "share", "%"),
    ("exposed share of iteration", "exposed_share", "%"),
    ("backward compute window", "backward_s", "s"),
    ("iteration", "iteration_s", "s"),
    ("all-reduce calls (buckets)", "calls", "n"),
    ("gradient volume", "bytes", "B"),
)


def _fmt(value: float, unit: str) -> str:
    if math.isnan(value):
        return "-"
    if unit == "%":
        return f"{100 * value:.1f}%"
    if unit == "n":
        return f"{value:.3g}"
    if unit == "B":
        return binary(value) if value > 0 else "-"
    return si(value, "s")


def comm_table(measured: dict[str, float], predicted: dict[str, float],
               title: str = "All-reduce: measured vs predicted") -> Table:
    """A table of the all-reduce figures, measured (mean over ranks) beside predicted."""
    t = Table(title=title, title_justify="left", header_style="bold")
    t.add_column("per iteration, per rank")
    t.add_column("measured", justify="right")
    t.add_column("predicted", justify="right")
    for label, key, unit in _ROWS:
        t.add_row(label, _fmt(measured.get(key, math.nan), unit),
                  _fmt(predicted.get(key, math.nan), unit))
    return t


def print_ddp(result: Any, console: Console) -> None:
    """Print a `DdpResult`: the measured vs predicted all-reduce, per-rank figures and what
    the prediction assumed."""
    ddp = result.facts
    console.print(
        f"[bold]DistributedDataParallel[/]: {ddp.world_size} ranks, {ddp.backend}; "
        f"global tokens/s {ddp.global_tokens_per_s:,.0f}")
    console.print(comm_table(result.measured, result.predicted))
    for i, r in enumerate(result.ranks):
        wait = r.get("peer_wait_s", math.nan)
        console.print(f"  rank {i}: all-reduce {si(r['all_reduce_s'], 's')} "
                      f"({100 * r['share']:.1f}% of {si(r['iteration_s'], 's')}), overlapped "
                      f"{si(r['overlap_s'], 's')}, exposed {si(r['exposed_s'], 's')}"
                      + ("" if math.isnan(wait) else f", waiting for the slower rank "
                                                     f"{si(wait, 's')}"))
    console.print("prediction assumed: " + "; ".join(result.assumptions))


__all__ = ["comm_table", "print_ddp"]
