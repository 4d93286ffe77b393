"""The `trace` command; `register(app)` adds it to the `bertscope` app.

Thin like the rest of the CLI: parse, call `bertscope.trace`, render. Errors are
`BertscopeError`s, which `bertscope.cli.main` prints as one line with exit code 2.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from bertscope.errors import BertscopeError
from bertscope.io import atomic_write, check_folder

if TYPE_CHECKING:
    import pandas as pd


class TraceFormat(StrEnum):
    """What `bertscope trace` writes."""

    TABLE = "table"
    CSV = "csv"
    JSON = "json"


def trace_cmd(
    path: Annotated[Path, typer.Argument(
        help="A Kineto/Chrome trace (.json or .json.gz) or a folder of per-rank traces.")],
    rank: Annotated[int | None, typer.Option(help="Only this rank (default: every rank).")] = (
        None),
    fmt: Annotated[TraceFormat | None, typer.Option(
        "--format", help="table (terminal), csv (op-table rows) or json (rows + per-rank "
                         "breakdowns); default: from the --output suffix, else table.")] = None,
    patterns: Annotated[Path | None, typer.Option(
        help="TOML file of [[pattern]] regex/category rows, tried before the built-in ones.")
    ] = None,
    output: Annotated[Path | None, typer.Option(help="Write here instead of stdout.")] = None,
    top: Annotated[int, typer.Option(help="Show the N names with the most time.")] = 10,
) -> None:
    """Break a profiler trace down by category, sublayer and phase; streams, overlap, idle."""
    from bertscope.trace import analyze_trace

    if top < 0:
        raise BertscopeError(f"--top must be >= 0, got {top}")
    if fmt is None:
        suffix = output.suffix.lower().lstrip(".") if output is not None else ""
        fmt = TraceFormat(suffix) if suffix in ("csv", "json") else TraceFormat.TABLE
    check_folder(output)
    result = analyze_trace(path, rank=rank, patterns=patterns)
    table = result.table
    if fmt is TraceFormat.TABLE:
        from bertscope.report.tables import make_console

        console = Console(record=True, width=132) if output is not None else make_console()
        print_trace(result, console, top=top)
        if output is not None:
            atomic_write(output, console.export_text().encode())
        return
    d = table.to_frame()
    for col in ("sublayer", "category", "phase"):
        d[col] = d[col].map(str)
    if fmt is TraceFormat.CSV:
        text = d.to_csv(index=False)
    else:
        rows = json.loads(d.to_json(orient="records"))
        text = json.dumps({"meta": table.meta, "rows": rows}, indent=1, default=str) + "\n"
    if output is None:
        typer.echo(text, nl=False)
    else:
        atomic_write(output, text.encode())


# -- rendering ---------------------------------------------------------------------------------
def _s(x: float) -> str:
    from bertscope.report.tables import si

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
        t.add_row(str(key), *cells, str(top_name))
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
        t.add_row(*cells)
    return t


def print_trace(result: Any, console: Console, *, top: int = 10) -> None:
    """Print a read trace: headline, breakdowns by category, sublayer and phase (per rank
    when several), device timelines (busy, idle, compute/communication overlap), streams,
    the top names and the names no pattern knew."""
    meta = result.table.meta
    per_rank = meta["trace"]["per_rank"]
    iters = sorted({v["iterations"] for v in per_rank.values()})
    busy = float(result.table.df["time_s"].sum())
    console.print(
        f"[bold]{meta['path']}[/]: {len(result.ranks)} rank(s) {meta['ranks']}, "
        f"{'/'.join(map(str, iters))} iteration(s), {meta['time_source']} time; busy "
        f"{_s(busy)} per iteration (mean over ranks); unknown names "
        f"{100 * meta['trace']['unknown_share']:.2f}% of it")
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
            t.add_row(r["name"], str(r["category"]), str(int(r["count"])), _s(r["time_s"]),
                      f"{100 * r['time_share']:.1f}")
        console.print(t)
    unknown = result.unknown()
    if not unknown.empty:
        t = Table(title="Names no pattern matched (category taken from the launching op); "
                        "classify them with --patterns FILE", title_justify="left",
                  header_style="bold")
        for col in ("name", "category", "count", "time/iter"):
            t.add_column(col, justify="left" if col in ("name", "category") else "right",
                         overflow="fold")
        for _, r in unknown.head(max(top, 20)).iterrows():
            t.add_row(r["name"], r["category"], str(int(r["count"])), _s(r["time_s"]))
        console.print(t)


def register(app: typer.Typer) -> None:
    """Add `trace` to a typer app."""
    app.command("trace")(trace_cmd)


__all__ = ["TraceFormat", "print_trace", "register", "trace_cmd"]
