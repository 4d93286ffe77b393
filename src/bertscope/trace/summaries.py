"""What a read trace's report shows, as plain records (lists of dicts), without pandas.

`TraceResult`'s DataFrame methods wrap these (pandas is imported when a DataFrame is asked
for); the terminal report and the table's meta use them directly, so `bertscope trace`
never imports pandas for its report.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Any

from bertscope.optable import OpTable
from bertscope.taxonomy import fused_ops

Row = dict[str, Any]
"""One row of a report table (a plain record: name, time_s, count, ...)."""

INDUCTOR_KERNEL = re.compile(r"^triton_(poi|red|per|for|tem)_")
"""Names of torch.compile (Inductor) kernels."""


def _sums(table: OpTable, key: Iterable[str]) -> tuple[dict[tuple[Any, ...], list[Any]], float]:
    """Per distinct value of the `key` columns (first-seen order): [time_s, count]; and the
    table's total time."""
    cols = table.columns
    keys = list(zip(*(cols[k].tolist() for k in key), strict=True))
    out: dict[tuple[Any, ...], list[Any]] = {}
    total = 0.0
    for k, t, c in zip(keys, cols["time_s"].tolist(), cols["count"].tolist(), strict=True):
        acc = out.setdefault(k, [0.0, 0])
        acc[0] += t
        acc[1] += c
        total += t
    return out, total


def top_records(table: OpTable, n: int) -> list[Row]:
    """The n (name, category) pairs with the most time, largest first (ties in first-seen
    order), with count and share of all time."""
    sums, total = _sums(table, ("name", "category"))
    rows = sorted(sums.items(), key=lambda kv: -kv[1][0])[:max(n, 0)]
    return [{"name": name, "category": cat, "time_s": t, "count": c,
             "time_share": t / total if total > 0 else 0.0}
            for (name, cat), (t, c) in rows]


def unknown_records(table: OpTable, names: Collection[str]) -> list[Row]:
    """Names no pattern matched: time, count and the categories their rows took from the
    launching op, most time first."""
    cols = table.columns
    out: dict[str, list[Any]] = {}
    for name, t, c, cat in zip(cols["name"].tolist(), cols["time_s"].tolist(),
                               cols["count"].tolist(), cols["category"].tolist(), strict=True):
        if name in names:
            acc = out.setdefault(name, [0.0, 0, set()])
            acc[0] += t
            acc[1] += c
            acc[2].add(str(cat))
    rows = sorted(out.items(), key=lambda kv: -kv[1][0])
    return [{"name": n, "time_s": t, "count": c, "category": ",".join(sorted(cats))}
            for n, (t, c, cats) in rows]


def fused_records(table: OpTable) -> list[Row]:
    """Inductor kernels, most time first: name, category, the ATen ops it fuses, time,
    count."""
    sums, _ = _sums(table, ("name", "category"))
    rows = sorted(((k, v) for k, v in sums.items() if INDUCTOR_KERNEL.match(k[0])),
                  key=lambda kv: -kv[1][0])
    return [{"name": name, "category": cat, "fuses": ", ".join(fused_ops(name)),
             "time_s": t, "count": c} for (name, cat), (t, c) in rows]


def module_records(table: OpTable) -> list[Row]:
    """The module tree: every prefix of the rows' module paths, parents before children
    (siblings in the order they first ran), with depth, its last element, time (its rows
    and all below), share of all time and launches."""
    sums, total = _sums(table, ("module",))
    time: dict[str, float] = {}
    count: dict[str, int] = {}
    for (module,), (t, c) in sums.items():
        if not module:
            continue
        parts = module.split("/")
        for i in range(1, len(parts) + 1):
            key = "/".join(parts[:i])
            time[key] = time.get(key, 0.0) + t
            count[key] = count.get(key, 0) + c
    return [{"module": p, "depth": p.count("/"), "name": p.rpartition("/")[2],
             "time_s": time[p], "time_share": time[p] / total if total > 0 else 0.0,
             "count": count[p]} for p in tree_order(time)]


def tree_order(paths: Iterable[str]) -> list[str]:
    """Slash-separated paths with each parent before its children, siblings in the order
    given."""
    children: dict[str, list[str]] = {}
    for p in paths:
        children.setdefault(p.rpartition("/")[0], []).append(p)
    out: list[str] = []
    stack = list(reversed(children.get("", [])))
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(reversed(children.get(p, [])))
    return out


def shares(table: OpTable, by: str) -> dict[str, dict[str, float]]:
    """Time, share of time and count per value of column `by`."""
    if not len(table.columns):
        return {}
    g = table.grouped(by)
    cols = g.columns
    return {str(k): {"time_s": float(t), "share": float(s), "count": int(c)}
            for k, t, s, c in zip(g.keys, cols["time_s"].tolist(),
                                  cols["time_share"].tolist(), cols["count"].tolist(),
                                  strict=True)}


def frame(records: list[Row], columns: Iterable[str]) -> Any:
    """Records as a pandas DataFrame with `columns` (also when there are none)."""
    import pandas as pd

    return pd.DataFrame(records, columns=list(columns))


__all__ = ["INDUCTOR_KERNEL", "Row", "frame", "fused_records", "module_records", "shares",
           "top_records", "tree_order", "unknown_records"]
