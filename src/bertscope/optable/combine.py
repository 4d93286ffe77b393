"""One op table from several of the same work: ranks of one run, or rounds of one config.

    mean = combine([rank0.table, rank1.table], Combine.MEAN)      # the mean rank
    typical = combine([round0, round1, round2], Combine.MEDIAN)   # each row's median time
    least = combine([round0, round1, round2], Combine.MIN)        # each row's least time

Rows are matched by what names an op site: `KEY` (name, layer, sublayer, category, phase and
the shape fields m, n, k, batch, elements). The combined table has one row per key, in order
of first appearance (first table first). A row missing from a table took nothing there: its
additive figures count 0 in that table. Sums over a key within one table (and over tables)
follow pandas' `groupby().sum()` exactly (compensated summation, NaN skipped), so callers that
used pandas get the same numbers. No pandas is imported.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Any

import numpy as np

from bertscope.errors import BertscopeError, parse_enum
from bertscope.optable.grouping import group_rows
from bertscope.optable.records import Record
from bertscope.optable.schema import Op
from bertscope.optable.table import OpTable

KEY: tuple[str, ...] = Op._fields[:Op._fields.index("count")]
"""The columns that name a row: name, layer, sublayer, category, phase, m, n, k, batch,
elements; and `module` where every table has it (`OPTIONAL_KEY`)."""
OPTIONAL_KEY: tuple[str, ...] = ("module",)
"""Key columns a table read back from an older file may lack."""

AVERAGED: tuple[str, ...] = ("flops", "bytes_read", "bytes_written", "saved_bytes", "time_s")
"""Columns the mean combinations average over the tables."""


class Combine(StrEnum):
    """How `combine` makes one row of a key's rows in several tables."""

    MEAN = "mean"
    """The mean over ranks (trace ranks): `AVERAGED` columns summed over every table and
    divided by the number of tables; `count` the same mean, rounded, at least 1 (the mean
    rank's launches per iteration); role columns take their defaults."""
    MEAN_MAX_COUNT = "mean-max-count"
    """The mean over ranks as `MEAN`, except `count`: the largest over the tables (a row's
    launches per iteration on a rank that runs it; measured DDP ranks)."""
    MEDIAN = "median"
    """The median over rounds of one config: `time_s` is the median over the tables of each
    table's time for the key (0 where the row is missing); every other column is the row's
    first appearance's."""
    MIN = "min"
    """The least over rounds, as `MEDIAN` but the least time over the tables that timed the
    key (a row one round missed does not make it free). Rounds measured with the minimum
    statistic: the least of their least is the least over all their iterations."""


def combine(tables: Sequence[OpTable], how: Combine | str = Combine.MEAN, *,
            records: Iterable[Record] | None = None) -> OpTable:
    """One table from `tables` by `how` (see `Combine`), rows keyed by `KEY`. `records`: the
    result's (default: the first table's); its job is the tables' common one (None when they
    differ)."""
    how = parse_enum(Combine, how, "combination")
    if not tables:
        return OpTable.from_ops([], records or ())
    records = tables[0].records if records is None else tuple(records)
    jobs = [getattr(t, "job", None) for t in tables]
    job = jobs[0] if all(j == jobs[0] for j in jobs) else None
    cols = [t.columns for t in tables]
    n_rows = [len(c) for c in cols]
    missing = sorted({f for c in cols for f in KEY if f not in c})
    if missing:
        raise BertscopeError(f"cannot combine op tables without column(s) {', '.join(missing)}")
    values = {f: _concat([c[f] for c in cols]) for f in Op._fields if all(f in c for c in cols)}
    source = np.repeat(np.arange(len(tables)), n_rows)
    key = (*KEY, *(f for f in OPTIONAL_KEY if f in values))
    keys, codes = group_rows(values, key)
    if how in (Combine.MEDIAN, Combine.MIN):
        ops = _per_key_time(values, codes, source, len(keys), len(tables), key,
                            least=how is Combine.MIN)
    else:
        ops = _mean(values, codes, len(keys), len(tables), key,
                    max_count=how is Combine.MEAN_MAX_COUNT)
    return OpTable.from_ops(ops, records, job=job)


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    """One column from the tables' columns (object when any of them is)."""
    if any(p.dtype.kind == "O" for p in parts):
        parts = [p.astype(object) for p in parts]
    return np.concatenate(parts)


def _first(codes: np.ndarray, groups: int) -> list[int]:
    """Position of each group's first row (groups are numbered in order of appearance)."""
    return np.unique(codes, return_index=True)[1].tolist() if groups else []


def _kahan(codes: np.ndarray, groups: int, values: np.ndarray) -> list[float]:
    """Per group, the sum of `values` in row order as pandas' groupby sum makes it: Kahan
    compensated, NaN skipped (0 for a group without numbers)."""
    total = [0.0] * groups
    comp = [0.0] * groups
    for g, v in zip(codes.tolist(), np.asarray(values, dtype=float).tolist(), strict=True):
        if v != v:  # NaN
            continue
        y = v - comp[g]
        t = total[g] + y
        c = t - total[g] - y
        comp[g] = 0.0 if c != c else c
        total[g] = t
    return total


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value (ints stay ints); anything else as it is."""
    return value.item() if isinstance(value, np.generic) else value


def _row(values: dict[str, np.ndarray], pos: int, fields: Sequence[str]) -> list[Any]:
    return [_plain(values[f][pos]) for f in fields]


def _mean(values: dict[str, np.ndarray], codes: np.ndarray, groups: int, tables: int,
          key: Sequence[str], *, max_count: bool) -> list[Op]:
    sums = {c: _kahan(codes, groups, values[c]) for c in AVERAGED if c in values}
    count: list[Any] = [None] * groups
    for g, c in zip(codes.tolist(), values["count"].tolist(), strict=True):
        if max_count:
            count[g] = c if count[g] is None else max(count[g], c)
        else:
            count[g] = c if count[g] is None else count[g] + c
    if not max_count:
        count = [max(1, round(c / tables)) for c in count]
    return [Op(**dict(zip(key, _row(values, pos, key), strict=True)), count=count[g],
               **{c: s[g] / tables for c, s in sums.items()})
            for g, pos in enumerate(_first(codes, groups))]


def _per_key_time(values: dict[str, np.ndarray], codes: np.ndarray, source: np.ndarray,
                  groups: int, tables: int, key: Sequence[str], *, least: bool) -> list[Op]:
    """One row per key: the median over the tables of each table's time for the key (0 where
    it is missing), or (`least`) the least over the tables that timed it; every other column
    the key's first row's."""
    cell = codes * tables + source
    per_table = np.reshape(_kahan(cell, groups * tables, values["time_s"]), (groups, tables))
    if least:
        timed = np.zeros(groups * tables, dtype=bool)
        timed[cell[~np.isnan(np.asarray(values["time_s"], dtype=float))]] = True
        timed = np.reshape(timed, (groups, tables))
        lowest = np.min(np.where(timed, per_table, np.inf), axis=1) if groups else []
        med = [0.0 if np.isinf(t) else float(t) for t in lowest]
    else:
        med = np.median(per_table, axis=1).tolist() if groups else []
    rest = [f for f in Op._fields if f in values and f not in key and f != "time_s"]
    return [Op(**dict(zip(key, _row(values, pos, key), strict=True)),
               **dict(zip(rest, _row(values, pos, rest), strict=True)), time_s=med[g])
            for g, pos in enumerate(_first(codes, groups))]


__all__ = ["AVERAGED", "KEY", "OPTIONAL_KEY", "Combine", "combine"]
