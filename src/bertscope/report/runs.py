"""Render stored runs: the list, one run, two compared."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bertscope.errors import printable
from bertscope.report.fields import fields_table, records_table
from bertscope.report.tables import name_column, si


def _text(value: object) -> str:
    """A stored value as terminal text: unprintable characters (control codes, undecodable
    bytes) escaped, markup shown as written."""
    return escape(printable(value))


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def print_runs(runs: list[dict[str, Any]], path: Path, console: Console) -> None:
    """The runs, newest first."""
    console.print(f"{len(runs)} run(s) in {_text(path)}")
    if not runs:
        return
    t = Table()
    for col in ("id", "kind", "when", "model", "device"):
        t.add_column(col)
    for r in runs:
        t.add_row(_text(r["id"]), _text(r["kind"]), _when(r["created"]), _text(r["model"] or ""),
                  _text(r["device"] or ""))
    console.print(t)


def _versions(versions: object) -> str:
    """The recorded versions as "bertscope 0.1.0, python 3.11.7" (unknown ones left out)."""
    if not isinstance(versions, dict):
        return _text(versions)
    return ", ".join(f"{_text(k)} {_text(v)}" for k, v in versions.items() if v is not None)


def print_run(run: dict[str, Any], ops: pd.DataFrame, console: Console) -> None:
    """One run: what it was, its summary as a table (nested fields dotted, lists of records
    such as a sweep's best rows as their own table) and its largest ops."""
    console.print(f"run {_text(run['id'])}: {_text(run['kind'])}, {_when(run['created'])}, model "
                  f"{_text(run['model'])}, device {_text(run['device'])}; "
                  f"{_versions(run['versions'])}")
    summary = run.get("summary") or {}
    table, records = fields_table(summary if isinstance(summary, dict) else
                                  {"summary": summary}, "Summary")
    if table.row_count:
        console.print(table)
    for name, rows in records:
        console.print(records_table(name, rows))
    if len(ops):
        t = Table(title="Largest ops by time", title_justify="left", header_style="bold")
        name_column(t, "name")
        for col in ("layer", "sublayer", "category", "phase", "time"):
            t.add_column(col, justify="right" if col in ("layer", "time") else "left",
                         no_wrap=True)
        for r in ops.sort_values("time_s", ascending=False).head(10).to_dict(orient="records"):
            t.add_row(_text(r["name"]), str(r["layer"]), _text(r["sublayer"]),
                      _text(r["category"]), _text(r["phase"]), si(r["time_s"], "s"))
        console.print(t)


def _side_table(df: pd.DataFrame, title: str, label: str) -> Table:
    t = Table(title=title)
    for col in (label, "A", "B", "B - A", "A %", "B %", "pp"):
        t.add_column(col, justify="left" if col == label else "right")
    for key, r in df.iterrows():
        t.add_row(_text(key), si(r["a_s"], "s"), si(r["b_s"], "s"), si(r["delta_s"], "s"),
                  f"{100 * r['a_share']:.1f}", f"{100 * r['b_share']:.1f}",
                  f"{r['delta_pp']:+.1f}")
    return t


def print_compare(a: dict[str, Any], b: dict[str, Any], cmp: dict[str, pd.DataFrame],
                  console: Console, *, top: int = 10) -> None:
    """B against A: per category, per sublayer group, and the op keys that differ most."""
    console.print(f"A = {_text(a['id'])} ({_text(a['kind'])}, {_text(a['model'])}, "
                  f"{_text(a['device'])})   B = {_text(b['id'])} ({_text(b['kind'])}, "
                  f"{_text(b['model'])}, {_text(b['device'])})")
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
        t.add_row(str(r["layer"]), _text(r["sublayer"]), _text(r["phase"]),
                  _text(r["category"]), si(r["a_s"], "s"), si(r["b_s"], "s"),
                  f"{r['error']:+.1%}")
    console.print(t)


__all__ = ["print_compare", "print_run", "print_runs"]
