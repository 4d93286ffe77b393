"""Render stored runs: the list, one run, two compared."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bertscope.report.tables import si


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def print_runs(runs: list[dict[str, Any]], path: Path, console: Console) -> None:
    """The runs, newest first."""
    console.print(f"{len(runs)} run(s) in {escape(str(path))}")
    if not runs:
        return
    t = Table()
    for col in ("id", "kind", "when", "model", "device"):
        t.add_column(col)
    for r in runs:
        t.add_row(r["id"], escape(r["kind"]), _when(r["created"]), escape(str(r["model"] or "")),
                  escape(str(r["device"] or "")))
    console.print(t)


def print_run(run: dict[str, Any], ops: pd.DataFrame, console: Console) -> None:
    """One run and its largest ops."""
    console.print(f"run {run['id']}: {escape(run['kind'])}, {_when(run['created'])}, model "
                  f"{escape(str(run['model']))}, device {escape(str(run['device']))}; "
                  f"{escape(str(run['versions']))}")
    for k, v in run["summary"].items():
        console.print(f"  {escape(str(k))}: {escape(str(v))}")
    if len(ops):
        t = Table(title="largest ops by time")
        for col in ("name", "layer", "sublayer", "category", "phase", "time"):
            t.add_column(col)
        for r in ops.sort_values("time_s", ascending=False).head(10).to_dict(orient="records"):
            t.add_row(escape(str(r["name"])), str(r["layer"]), escape(str(r["sublayer"])),
                      escape(str(r["category"])), escape(str(r["phase"])), si(r["time_s"], "s"))
        console.print(t)


def _side_table(df: pd.DataFrame, title: str, label: str) -> Table:
    t = Table(title=title)
    for col in (label, "A", "B", "B - A", "A %", "B %", "pp"):
        t.add_column(col, justify="left" if col == label else "right")
    for key, r in df.iterrows():
        t.add_row(escape(str(key)), si(r["a_s"], "s"), si(r["b_s"], "s"), si(r["delta_s"], "s"),
                  f"{100 * r['a_share']:.1f}", f"{100 * r['b_share']:.1f}",
                  f"{r['delta_pp']:+.1f}")
    return t


def print_compare(a: dict[str, Any], b: dict[str, Any], cmp: dict[str, pd.DataFrame],
                  console: Console, *, top: int = 10) -> None:
    """B against A: per category, per sublayer group, and the op keys that differ most."""
    console.print(f"A = {a['id']} ({escape(a['kind'])}, {escape(str(a['model']))}, "
                  f"{escape(str(a['device']))})   B = {b['id']} ({escape(b['kind'])}, "
                  f"{escape(str(b['model']))}, {escape(str(b['device']))})")
    ta, tb = cmp["category"]["a_s"].sum(), cmp["category"]["b_s"].sum()
    console.print(f"total: A {si(ta, 's')}, B {si(tb, 's')} "
                  f"({(tb - ta) / ta:+.1%} B vs A)" if ta > 0 else "total: A has no time")
    console.print(_side_table(cmp["category"], "By category", "category"))
    console.print(_side_table(cmp["group"], "By sublayer group", "group"))
    keys = cmp["keys"].dropna(subset=["error"])
    keys = keys.reindex(keys["delta_s"].abs().sort_values(ascending=False).index).head(top)
    t = Table(title=f"Op keys that differ most (B's error against A), top {len(keys)}")
    for col in ("layer", "sublayer", "phase", "category", "A", "B", "error"):
        t.add_column(col)
    for r in keys.to_dict(orient="records"):
        t.add_row(str(r["layer"]), escape(str(r["sublayer"])), escape(str(r["phase"])),
                  escape(str(r["category"])), si(r["a_s"], "s"), si(r["b_s"], "s"),
                  f"{r['error']:+.1%}")
    console.print(t)


__all__ = ["print_compare", "print_run", "print_runs"]
