"""Nested result fields (a run's summary, a fitted model's parameters) as terminal tables: one
row per field with its dotted name and its value as a person reads it, never a dict repr or a
16-digit float."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from rich.markup import escape
from rich.table import Table

from bertscope.errors import printable
from bertscope.report.tables import si


def value_text(value: Any) -> str:
    """One value as text: numbers to three significant digits (an SI prefix from 1,000 or
    below 0.001: 1.86 k, 3 µ), integers whole (30,522), yes/no for booleans,
    "-" for None and NaN, lists of numbers comma-joined (of text, a line each); anything
    else printable."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value == 0 or 1e-3 <= abs(value) < 1e3:
            return f"{value:.3g}"
        return si(value)
    if isinstance(value, (list, tuple)):  # sentences (a study's findings) one per line
        sep = "\n" if any(isinstance(v, str) for v in value) else ", "
        return sep.join(value_text(v) for v in value) or "-"
    return printable(value)


def _records(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(
        isinstance(v, Mapping) for v in value)


def flat_fields(data: Mapping[str, Any], skip: Iterable[str] = (), prefix: str = ""
                ) -> list[tuple[str, Any]]:
    """(dotted name, value) of every leaf of `data`, in order: nested mappings give
    `outer.inner` names, an empty mapping nothing; keys in `skip` are left out at every
    level. Lists of mappings stay whole (`records_table` shows them)."""
    skip = frozenset(skip)
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        if key in skip:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out += flat_fields(value, skip, f"{name}.")
        else:
            out.append((name, value))
    return out


def fields_table(data: Mapping[str, Any], title: str | None = None, *,
                 skip: Iterable[str] = ()) -> tuple[Table, list[tuple[str, Any]]]:
    """A two-column table (field, value) of `data`'s leaves (`flat_fields`), and the lists
    of records it left out for `records_table` (name, records)."""
    t = Table(title=title, title_justify="left", header_style="bold")
    t.add_column("field", no_wrap=True)
    t.add_column("value")
    records = []
    for name, value in flat_fields(data, skip):
        if _records(value):
            records.append((name, value))
            continue
        t.add_row(escape(printable(name)), escape(value_text(value)))
    return t, records


def records_table(name: str, records: list[Mapping[str, Any]]) -> Table:
    """A list of records (a sweep's best rows) as a table of one column per record and one
    row per field, so every field fits the width."""
    t = Table(title=f"{escape(printable(name))} ({len(records)})", title_justify="left",
              header_style="bold")
    t.add_column("field", no_wrap=True)
    for i in range(len(records)):
        t.add_column(str(i + 1), justify="right", no_wrap=True)
    keys: list[str] = []
    for r in records:
        keys += [k for k, _ in flat_fields(r) if k not in keys]
    leaves = [dict(flat_fields(r)) for r in records]
    for key in keys:
        t.add_row(escape(printable(key)), *(escape(value_text(leaf.get(key)))
                                           for leaf in leaves))
    return t


__all__ = ["fields_table", "flat_fields", "records_table", "value_text"]
