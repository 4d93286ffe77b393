"""Op-table rows grouped by columns without pandas: group keys and codes, sums, summaries."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from bertscope.errors import BertscopeError, as_values, shown
from bertscope.optable.schema import SUMMED
from bertscope.taxonomy import Sublayer

if TYPE_CHECKING:
    import pandas as pd


def stable_largest(values: Any, n: int) -> np.ndarray:
    """Positions of the n largest values, largest first, ties in row order and NaN last
    (pandas' `nlargest(n)` order)."""
    v = np.asarray(values, dtype=float)
    return np.argsort(-v, kind="stable")[:max(n, 0)]


def group_rows(cols: Mapping[str, Any], by: Sequence[str]) -> tuple[list[Any], np.ndarray]:
    """Rows grouped by the columns `by`, groups in order of first appearance: each group's key
    (a value, or a tuple of values for several columns) and each row's group number."""
    values = [np.asarray(cols[c]).tolist() for c in by]
    keys = values[0] if len(values) == 1 else list(zip(*values, strict=True))
    index: dict[Any, int] = {}
    codes = np.fromiter((index.setdefault(k, len(index)) for k in keys), dtype=np.intp,
                        count=len(keys))
    return list(index), codes


def group_sum(codes: np.ndarray, groups: int, values: Any) -> np.ndarray:
    """Per group, the sum of `values` over its rows: exact int64 for integer columns; for
    others float, NaN ignored, NaN where a group has no number (pandas' `sum(min_count=1)`)."""
    v = np.asarray(values)
    if v.dtype.kind in "bi":
        out = np.zeros(groups, dtype=np.int64)
        np.add.at(out, codes, v)
        return out
    v = v.astype(float)
    ok = ~np.isnan(v)
    sums = np.bincount(codes[ok], weights=v[ok], minlength=groups)
    return np.where(np.bincount(codes[ok], minlength=groups) > 0, sums, np.nan)


def group_first_max(codes: np.ndarray, groups: int, values: Any) -> np.ndarray:
    """Per group, the position of its row with the largest value (the first such row; NaN
    counts as smallest)."""
    v = np.nan_to_num(np.asarray(values, dtype=float), nan=-np.inf)
    order = np.lexsort((-v, codes))
    first = np.ones(len(order), dtype=bool)
    first[1:] = codes[order][1:] != codes[order][:-1]
    out = np.empty(groups, dtype=np.intp)
    out[codes[order][first]] = order[first]
    return out


@dataclass(frozen=True, slots=True)
class Grouped:
    """Rows of an op table grouped by columns, without pandas: one key and one value per
    column for each group, in display order. `to_frame()` gives the DataFrame form."""

    by: tuple[str, ...]
    """The grouping columns."""
    keys: list[Any]
    """One per group: the value of the `by` column, or a tuple of values for several."""
    columns: dict[str, np.ndarray]
    """Column name -> one value per group."""

    def __len__(self) -> int:
        return len(self.keys)

    def rows(self) -> Iterator[tuple[Any, dict[str, Any]]]:
        """(key, {column: value}) per group, in order."""
        for i, key in enumerate(self.keys):
            yield key, {c: v[i] for c, v in self.columns.items()}

    def take(self, positions: np.ndarray) -> Grouped:
        """The groups at `positions`, in that order."""
        return Grouped(self.by, [self.keys[i] for i in positions],
                       {c: v[positions] for c, v in self.columns.items()})

    def to_frame(self) -> pd.DataFrame:
        """A DataFrame indexed by the keys (a MultiIndex for several `by` columns)."""
        import pandas as pd

        if len(self.by) == 1:
            index = pd.Index(self.keys, name=self.by[0])
        else:
            levels = [[k[i] for k in self.keys] for i in range(len(self.by))]
            index = pd.MultiIndex.from_arrays(levels, names=list(self.by))
        return pd.DataFrame(self.columns, index=index)


def summarize(cols: Mapping[str, Any], by: str | Sequence[str]) -> Grouped:
    """Totals of `count`, FLOPs, bytes and (where known) time grouped by one or more columns
    ("group": the coarse sublayer groups), with each group's share, largest time (else FLOPs)
    first, then bytes. The pandas-free form of `OpTable.summary`."""
    keys = as_values(by, "group by")  # a column name is one key, not its letters
    unknown = [k for k in keys if not isinstance(k, str) or (k not in cols and k != "group")]
    if not keys or unknown:
        raise BertscopeError(f"cannot group by {shown(unknown[0]) if unknown else 'nothing'}; "
                             f"give one or more of: group, {', '.join(cols)}")
    if "group" in keys and "group" not in cols:
        cols = {**cols, "group": [Sublayer(s).group.value for s in cols["sublayer"]]}
    names, codes = group_rows(cols, keys)
    g = {c: group_sum(codes, len(names), cols[c]) for c in SUMMED}
    g["bytes"] = g["bytes_read"] + g["bytes_written"]
    timed = bool(np.any(~np.isnan(g["time_s"])))
    if not timed:
        del g["time_s"]
    for col in ("flops", "bytes", "time_s") if timed else ("flops", "bytes"):
        total = float(np.nansum(g[col]))
        share = g[col] / total if total > 0 else np.zeros(len(names))
        g[f"{col.removesuffix('_s')}_share"] = share
    order = np.lexsort((-g["bytes"].astype(float), -g["time_s" if timed else "flops"]))
    return Grouped(keys, names, g).take(order)


__all__ = ["Grouped", "group_first_max", "group_rows", "group_sum", "stable_largest",
           "summarize"]
