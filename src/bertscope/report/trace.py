"""Terminal report of a read trace: breakdowns per rank, devices, streams, top and unknown names."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bertscope.report.tables import name_column, si
from bertscope.trace.summaries import fused_records, module_records, top_records, unknown_records


def _s(x: float) -> str:
    return si(x, "s")


def _breakdown_table(result: Any, by: str, title: str) -> Table:
    """Time per iteration, share and count per `by` (mean over ranks), the top name of each
    group, and each rank's share when there are several."""
    table = result.table
    g = table.grouped(by)
    t = Table(title=title, title_justify="left", header_style="bold")
    t.add_column(by, no_wrap=True)
    for col in ("time/iter", "time %", "count"):
        t.add_column(col, justify="right", no_wrap=True)
    ranks = list(result.ranks)
    per_rank = {r: _share_of(result.ranks[r].table, by) for r in ranks}
    if len(ranks) > 1:
        for r in ranks:
            t.add_column(f"rank {r} %", justify="right", no_wrap=True)
    t.add_column("top name", overflow="ellipsis", no_wrap=True, max_width=60)
    top = _top_names(table, by)
    cols = g.columns
    for key, time_s, share, count in zip(g.keys, cols["time_s"].tolist(),
                                         cols["time_share"].tolist(), cols["count"].tolist(),
                                         strict=True):
        cells = [_s(time_s), f"{100 * share:.1f}", f"{int(count)}"]
        if len(ranks) > 1:
            cells += [f"{100 * per_rank[k].get(key, 0.0):.1f}" for k in ranks]
        t.add_row(str(key), *cells, escape(str(top.get(key, ""))))
    return t


def _share_of(table: Any, by: str) -> dict[Any, float]:
    g = table.grouped(by)
    return dict(zip(g.keys, g.columns["time_share"].tolist(), strict=True))


def _top_names(table: Any, by: str) -> dict[Any, str]:
    """Per value of `by`: the name with the most time (on ties, the first in sort order)."""
    cols = table.columns
    time: dict[tuple[Any, str], float] = {}
    for key, name, t in zip(cols[by].tolist(), cols["name"].tolist(), cols["time_s"].tolist(),
                            strict=True):
        time[key, name] = time.get((key, name), 0.0) + t
    best: dict[Any, tuple[float, str]] = {}
    for (key, name), t in time.items():
        if key not in best or (t, best[key][1]) > (best[key][0], name):
            best[key] = (t, name)
    return {k: name for k, (_, name) in best.items()}


def _frame_table(rows: list[dict[str, Any]], title: str, cols: dict[str, str]) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold")
    for label in cols.values():
        t.add_column(label, justify="left" if label in ("rank", "device", "stream") else "right",
                     no_wrap=True)
    for r in rows:
        cells = []
        for key in cols:
            v = r[key]
            if key.endswith("_s"):
                cells.append(_s(float(v)))
            elif key.endswith("share"):
                cells.append("nan" if v is None else f"{100 * float(v):.1f}")
            else:
                cells.append(str(v))
        t.add_row(*map(escape, cells))
    return t


def print_headline(result: Any, console: Console) -> None:
    """The one-line headline: path, ranks, iterations, time source, busy time, unknown share."""
    summary = result.summary
    iters = sorted({b.iterations for b in summary.ranks.values()})
    busy = float(result.table.columns["time_s"].sum())
    console.print(
        f"[bold]{escape(summary.path)}[/]: {len(result.ranks)} rank(s) {sorted(summary.ranks)}, "
        f"{'/'.join(map(str, iters))} iteration(s), {summary.time_source} time; busy "
        f"{_s(busy)} per iteration (mean over ranks); unknown names "
        f"{100 * summary.unknown_share:.2f}% of it")


def module_tree(result: Any) -> Table:
    """The module tree (`TraceResult.modules`) as a table: each module call indented under
    its parent, with its time per iteration (its rows and all below), share of all time and
    launches."""
    d = module_records(result.table)
    covered = sum(r["time_share"] for r in d if r["depth"] == 0)
    t = Table(title=f"By module (time per iteration, the module's own ops and all below; "
                    f"{100 * covered:.1f}% of all time is inside a module)",
              title_justify="left", header_style="bold")
    t.add_column("module", no_wrap=True, overflow="ellipsis", max_width=90)
    for col in ("time/iter", "time %", "count"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in d:
        t.add_row("  " * r["depth"] + escape(str(r["name"])), _s(r["time_s"]),
                  f"{100 * r['time_share']:.1f}", str(int(r["count"])))
    return t


def print_trace(result: Any, console: Console, *, top: int = 10, by: str | None = None
                ) -> None:
    """Print a read trace: headline, breakdowns by category, sublayer and phase (per rank
    when several), device timelines (busy, idle, compute/communication overlap), streams,
    the top names, what Inductor kernels fuse and the names no pattern knew. `by`: only
    that breakdown (category, sublayer, phase, or module: the module tree) after the
    headline, then the unknown names."""
    print_headline(result, console)
    if by is not None:
        console.print(module_tree(result) if by == "module" else
                      _breakdown_table(result, by, f"By {by}"))
        _print_unknown(result, console, top)
        return
    console.print(_breakdown_table(result, "category", "By category"))
    console.print(_breakdown_table(result, "sublayer", "By sublayer"))
    console.print(_breakdown_table(result, "phase", "By phase"))
    devices = [{**r, "busy_share": r["busy_s"] / r["window_s"] if r["window_s"] > 0 else None}
               for r in result.device_records()]
    if devices:
        console.print(_frame_table(devices, "Devices (whole capture; overlap = compute and "
                                   "communication at once)", {
            "rank": "rank", "device": "device", "window_s": "window", "busy_s": "busy",
            "busy_share": "busy %", "idle_s": "idle", "compute_s": "compute",
            "comm_s": "comm", "overlap_s": "overlap", "exposed_comm_s": "exposed comm"}))
        console.print(_frame_table(result.device_records("stream_rows"),
                                   "Streams (idle = device window - busy)", {
            "rank": "rank", "device": "device", "stream": "stream", "busy_s": "busy",
            "busy_share": "busy %", "idle_s": "idle", "events": "events"}))
    if top > 0:
        t = Table(title=f"Top {top} names by time per iteration", title_justify="left",
                  header_style="bold")
        for col in ("name", "category", "count", "time/iter", "time %"):
            t.add_column(col, justify="left" if col in ("name", "category") else "right",
                         no_wrap=True, overflow="ellipsis", max_width=90 if col == "name"
                         else None)
        for r in top_records(result.table, top):
            t.add_row(escape(r["name"]), str(r["category"]), str(int(r["count"])),
                      _s(r["time_s"]),
                      f"{100 * r['time_share']:.1f}")
        console.print(t)
    fused = fused_records(result.table)
    if top > 0 and fused:
        t = Table(title="torch.compile kernels: the ATen ops each fuses (its category from "
                        "them)", title_justify="left", header_style="bold")
        name_column(t, "name", max_width=90)
        t.add_column("category", no_wrap=True)
        t.add_column("fuses", overflow="ellipsis")  # wraps between op names, never inside
        t.add_column("time/iter", justify="right", no_wrap=True)
        for r in fused[:max(top, 20)]:
            t.add_row(escape(r["name"]), str(r["category"]), escape(r["fuses"]),
                      _s(r["time_s"]))
        console.print(t)
    _print_unknown(result, console, top)


def _print_unknown(result: Any, console: Console, top: int) -> None:
    unknown = unknown_records(result.table, result.unknown_names())
    if unknown:
        t = Table(title="Names no pattern matched (category taken from the launching op); "
                        "classify them with --patterns FILE", title_justify="left",
                  header_style="bold")
        name_column(t, "name", max_width=90)
        for col in ("category", "count", "time/iter"):
            t.add_column(col, justify="left" if col == "category" else "right", no_wrap=True)
        for r in unknown[:max(top, 20)]:
            t.add_row(escape(r["name"]), r["category"], str(int(r["count"])), _s(r["time_s"]))
        console.print(t)


__all__ = ["module_tree", "print_headline", "print_trace"]
