"""Terminal report of a read trace: breakdowns per rank, devices, streams, top and unknown names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bertscope.report.tables import si

if TYPE_CHECKING:
    import pandas as pd


def _s(x: float) -> str:
    return si(x, "s")


def _breakdown_table(result: Any, by: str, title: str) -> Table:
    """Time per iteration, share and count per `by` (mean over ranks), the top name of each
    group, and each rank's share when there are several."""
    table = result.table
    s = table.summary(by)
    d = table.df
    t = Table(title=title, title_justify="left", header_style="bold")
    t.add_column(by, no_wrap=True)
    for col in ("time/iter", "time %", "count"):
        t.add_column(col, justify="right", no_wrap=True)
    ranks = list(result.ranks)
    per_rank = {r: result.ranks[r].table.summary(by)["time_share"] for r in ranks}
    if len(ranks) > 1:
        for r in ranks:
            t.add_column(f"rank {r} %", justify="right", no_wrap=True)
    t.add_column("top name", overflow="ellipsis", no_wrap=True, max_width=60)
    for key, r in s.iterrows():
        rows = d[d[by] == key]
        top_name = rows.groupby("name")["time_s"].sum().idxmax() if len(rows) else ""
        cells = [_s(r["time_s"]), f"{100 * r['time_share']:.1f}", f"{int(r['count'])}"]
        if len(ranks) > 1:
            cells += [f"{100 * per_rank[k].get(key, 0.0):.1f}" for k in ranks]
        t.add_row(str(key), *cells, escape(str(top_name)))
    return t


def _frame_table(d: pd.DataFrame, title: str, cols: dict[str, str]) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold")
    for label in cols.values():
        t.add_column(label, justify="left" if label in ("rank", "device", "stream") else "right",
                     no_wrap=True)
    for _, r in d.iterrows():
        cells = []
        for key in cols:
            v = r[key]
            if key.endswith("_s"):
                cells.append(_s(float(v)))
            elif key.endswith("share"):
                cells.append(f"{100 * float(v):.1f}")
            else:
                cells.append(str(v))
        t.add_row(*map(escape, cells))
    return t


def _headline(result: Any, console: Console) -> None:
    meta = result.table.meta
    per_rank = meta["trace"]["per_rank"]
    iters = sorted({v["iterations"] for v in per_rank.values()})
    busy = float(result.table.df["time_s"].sum())
    console.print(
        f"[bold]{escape(str(meta['path']))}[/]: {len(result.ranks)} rank(s) {meta['ranks']}, "
        f"{'/'.join(map(str, iters))} iteration(s), {meta['time_source']} time; busy "
        f"{_s(busy)} per iteration (mean over ranks); unknown names "
        f"{100 * meta['trace']['unknown_share']:.2f}% of it")


def module_tree(result: Any) -> Table:
    """The module tree (`TraceResult.modules`) as a table: each module call indented under
    its parent, with its time per iteration (its rows and all below), share of all time and
    launches."""
    d = result.modules()
    covered = float(d.loc[d["depth"] == 0, "time_share"].sum()) if len(d) else 0.0
    t = Table(title=f"By module (time per iteration, the module's own ops and all below; "
                    f"{100 * covered:.1f}% of all time is inside a module)",
              title_justify="left", header_style="bold")
    t.add_column("module", no_wrap=True, overflow="ellipsis", max_width=90)
    for col in ("time/iter", "time %", "count"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in d.itertuples(index=False):
        t.add_row("  " * int(r.depth) + escape(str(r.name)), _s(float(r.time_s)),
                  f"{100 * float(r.time_share):.1f}", str(int(r.count)))
    return t


def print_trace(result: Any, console: Console, *, top: int = 10, by: str | None = None
                ) -> None:
    """Print a read trace: headline, breakdowns by category, sublayer and phase (per rank
    when several), device timelines (busy, idle, compute/communication overlap), streams,
    the top names, what Inductor kernels fuse and the names no pattern knew. `by`: only
    that breakdown (category, sublayer, phase, or module: the module tree) after the
    headline, then the unknown names."""
    _headline(result, console)
    if by is not None:
        console.print(module_tree(result) if by == "module" else
                      _breakdown_table(result, by, f"By {by}"))
        _print_unknown(result, console, top)
        return
    console.print(_breakdown_table(result, "category", "By category"))
    console.print(_breakdown_table(result, "sublayer", "By sublayer"))
    console.print(_breakdown_table(result, "phase", "By phase"))
    devices = result.devices()
    if not devices.empty:
        devices = devices.assign(busy_share=devices["busy_s"] / devices["window_s"].where(
            devices["window_s"] > 0))
        console.print(_frame_table(devices, "Devices (whole capture; overlap = compute and "
                                   "communication at once)", {
            "rank": "rank", "device": "device", "window_s": "window", "busy_s": "busy",
            "busy_share": "busy %", "idle_s": "idle", "compute_s": "compute",
            "comm_s": "comm", "overlap_s": "overlap", "exposed_comm_s": "exposed comm"}))
        console.print(_frame_table(result.streams(), "Streams (idle = device window - busy)", {
            "rank": "rank", "device": "device", "stream": "stream", "busy_s": "busy",
            "busy_share": "busy %", "idle_s": "idle", "events": "events"}))
    if top > 0:
        t = Table(title=f"Top {top} names by time per iteration", title_justify="left",
                  header_style="bold")
        for col in ("name", "category", "count", "time/iter", "time %"):
            t.add_column(col, justify="left" if col in ("name", "category") else "right",
                         no_wrap=True, overflow="ellipsis", max_width=90 if col == "name"
                         else None)
        for _, r in result.top(top).iterrows():
            t.add_row(escape(r["name"]), str(r["category"]), str(int(r["count"])),
                      _s(r["time_s"]),
                      f"{100 * r['time_share']:.1f}")
        console.print(t)
    fused = result.fused()
    if top > 0 and not fused.empty:
        t = Table(title="torch.compile kernels: the ATen ops each fuses (its category from "
                        "them)", title_justify="left", header_style="bold")
        for col in ("name", "category", "fuses", "time/iter"):
            t.add_column(col, justify="right" if col == "time/iter" else "left",
                         overflow="fold")
        for r in fused.head(max(top, 20)).itertuples(index=False):
            t.add_row(escape(r.name), str(r.category), escape(r.fuses), _s(float(r.time_s)))
        console.print(t)
    _print_unknown(result, console, top)


def _print_unknown(result: Any, console: Console, top: int) -> None:
    unknown = result.unknown()
    if not unknown.empty:
        t = Table(title="Names no pattern matched (category taken from the launching op); "
                        "classify them with --patterns FILE", title_justify="left",
                  header_style="bold")
        for col in ("name", "category", "count", "time/iter"):
            t.add_column(col, justify="left" if col in ("name", "category") else "right",
                         overflow="fold")
        for _, r in unknown.head(max(top, 20)).iterrows():
            t.add_row(escape(r["name"]), r["category"], str(int(r["count"])), _s(r["time_s"]))
        console.print(t)


__all__ = ["module_tree", "print_trace"]
