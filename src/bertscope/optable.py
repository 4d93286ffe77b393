"""The op table: one row per operation of a training iteration, the schema every producer emits.

A row is one op *site* in the iteration's graph (e.g. layer 3's FFN1 weight-gradient GEMM).
`count` says how many times it runs per iteration (micro-batches); `flops`, `bytes_read`
and `bytes_written` are totals over those runs, so sums over rows are iteration totals.
`saved_bytes` is what the op keeps for backward during one micro-batch (a memory figure,
not a volume). `time_s` is measured or predicted time where a producer knows it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from bertscope.errors import BertscopeError
from bertscope.io import Format, atomic_write, export_format, frame_bytes
from bertscope.taxonomy import Category, Phase, PipelineStage, Sublayer, TensorSplit

if TYPE_CHECKING:
    import pandas as pd


class Op(NamedTuple):
    """One op-table row (see the module docstring for the meaning of each column)."""

    name: str
    layer: int
    """Encoder layer index; -1 for rows outside the encoder stack (embeddings, heads, loss)."""
    sublayer: Sublayer
    category: Category
    phase: Phase
    m: int = 0
    """GEMM rows: output rows M (0 for non-GEMM)."""
    n: int = 0
    """GEMM rows: output columns N."""
    k: int = 0
    """GEMM rows: reduction size K."""
    batch: int = 0
    """GEMM rows: independent GEMMs in a batched GEMM (1 for a plain GEMM, 0 for non-GEMM)."""
    elements: int = 0
    """Non-GEMM rows: elements of the main tensor the op streams over."""
    count: int = 1
    flops: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    saved_bytes: float = 0.0
    time_s: float = math.nan
    tp_split: TensorSplit = TensorSplit.REPLICATED
    """Role under tensor parallelism (column, row, split, replicated)."""
    pp_stage: PipelineStage = PipelineStage.STACK
    """Role under pipeline parallelism (first stage, the layer stack, last stage)."""


COLUMNS: tuple[str, ...] = (*Op._fields, "intensity")
"""Column order of an op table's DataFrame (`intensity` = flops / bytes moved)."""

ENUM_COLUMNS: tuple[str, ...] = ("sublayer", "category", "phase", "tp_split", "pp_stage")
"""Columns holding taxonomy enums (written as their values)."""

_SUMMED = ("count", "flops", "bytes_read", "bytes_written", "time_s")


# -- columns ---------------------------------------------------------------------------------
def is_frame(obj: object) -> bool:
    """Whether `obj` is a pandas DataFrame (without importing pandas: if pandas is not loaded,
    nothing is a DataFrame)."""
    pd_mod = sys.modules.get("pandas")
    return pd_mod is not None and isinstance(obj, pd_mod.DataFrame)


def as_column(values: Any) -> np.ndarray:
    """A 1-D column from values, typed as pandas infers a column from Python values: bool,
    int64 or float64 for numbers, else an object array holding the values as given (strings,
    enum members)."""
    if not isinstance(values, list | tuple):
        values = np.asarray(values)  # an array, a pandas Series, any array-like
        if values.dtype.kind in "biufO":
            return values
        values = values.tolist()
    if len(values) and not isinstance(values[0], str):
        arr = np.asarray(values)
        if arr.dtype.kind in "biuf":
            return arr
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def bytes_moved(cols: Mapping[str, Any]) -> np.ndarray:
    """Per row: bytes_read + bytes_written, as floats. `cols`: op-table columns (a mapping of
    name -> array, or a DataFrame)."""
    return (np.asarray(cols["bytes_read"], dtype=float)
            + np.asarray(cols["bytes_written"], dtype=float))


def intensity(cols: Mapping[str, Any]) -> np.ndarray:
    """Arithmetic intensity per row: flops / bytes moved, 0 where no bytes move (or FLOPs are
    unknown)."""
    flops = np.asarray(cols["flops"], dtype=float)
    moved = bytes_moved(cols)
    out = np.divide(flops, moved, out=np.zeros(len(flops)), where=moved > 0)
    return np.where(np.isnan(out), 0.0, out)


class Columns:
    """An op table's rows as read-only columns, read the way a DataFrame is: `rows["flops"]`
    is a 1-D numpy array, `"phase" in rows` asks for a column, `len(rows)` counts rows, and
    iterating (or `keys()`) gives the column names. So efficiency models written for a
    DataFrame run on it unchanged, and `dict(rows)` copies it."""

    __slots__ = ("_cols", "_n")

    def __init__(self, cols: Mapping[str, np.ndarray]) -> None:
        out = {}
        for name, col in cols.items():
            view = np.asarray(col).view()
            view.flags.writeable = False
            out[name] = view
        lengths = {len(v) for v in out.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns differ in length: {sorted(lengths)}")
        self._cols: Mapping[str, np.ndarray] = MappingProxyType(out)
        self._n = lengths.pop() if lengths else 0

    def __getitem__(self, name: str) -> np.ndarray:
        return self._cols[name]

    def __contains__(self, name: object) -> bool:
        return name in self._cols

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols)

    def keys(self) -> Iterable[str]:
        """The column names."""
        return self._cols.keys()

    def items(self) -> Iterable[tuple[str, np.ndarray]]:
        """(name, column) pairs."""
        return self._cols.items()

    @property
    def columns(self) -> tuple[str, ...]:
        """The column names (as `DataFrame.columns` lists them)."""
        return tuple(self._cols)


def stable_largest(values: Any, n: int) -> np.ndarray:
    """Positions of the n largest values, largest first, ties in row order and NaN last
    (pandas' `nlargest(n)` order)."""
    v = np.asarray(values, dtype=float)
    return np.argsort(-v, kind="stable")[:max(n, 0)]


# -- grouping --------------------------------------------------------------------------------
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
    keys = (by,) if isinstance(by, str) else tuple(by)
    if "group" in keys and "group" not in cols:
        cols = {**cols, "group": [Sublayer(s).group.value for s in cols["sublayer"]]}
    names, codes = group_rows(cols, keys)
    g = {c: group_sum(codes, len(names), cols[c]) for c in _SUMMED}
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


# -- the table -------------------------------------------------------------------------------
class OpTable:
    """An op table: columns of `Op` rows plus metadata (model, run settings, producer).

    The rows are stored either as columns (`from_ops`, `from_columns`: name -> 1-D numpy
    array) or as a pandas DataFrame (`OpTable(df, meta)`); `columns` and `df` give either
    form, the other built on first use and cached, so code that needs no DataFrame never
    imports pandas. A table's rows are immutable (the arrays in `columns` are read-only, and
    `df` must not be modified either): add columns with `with_columns`, or edit a copy from
    `to_frame()` and wrap it, `OpTable(frame, meta)`. `meta` is a plain dict.
    """

    __slots__ = ("_cols", "_df", "_on_frame", "meta")

    def __init__(self, df: pd.DataFrame, meta: dict[str, Any] | None = None) -> None:
        if not is_frame(df):
            raise BertscopeError(f"OpTable(df=...) needs a pandas DataFrame, got "
                                 f"{type(df).__name__}; use OpTable.from_columns for arrays")
        self._df: pd.DataFrame | None = df
        self._cols: Columns | None = None
        self._on_frame = True  # the DataFrame is the primary store
        self.meta: dict[str, Any] = meta if meta is not None else {}

    @classmethod
    def from_columns(cls, columns: Mapping[str, Any],
                     meta: dict[str, Any] | None = None) -> OpTable:
        """A table over columns (name -> 1-D array or sequence, all of one length). Arrays are
        used as given, not copied: the caller hands them over and must not modify them."""
        cols = {name: as_column(col) for name, col in columns.items()}
        lengths = {len(c) for c in cols.values()}
        if len(lengths) > 1 or any(c.ndim != 1 for c in cols.values()):
            shapes = ", ".join(f"{k}: {np.shape(c)}" for k, c in cols.items())
            raise BertscopeError(f"op-table columns must be 1-D and of one length ({shapes})")
        table = cls.__new__(cls)
        table._df = None
        table._cols = Columns(cols)
        table._on_frame = False
        table.meta = dict(meta) if meta is not None else {}
        return table

    @classmethod
    def from_ops(cls, ops: Iterable[Op], meta: dict[str, Any] | None = None) -> OpTable:
        """Build a table from rows; computes arithmetic intensity."""
        rows = list(ops)
        fields = list(zip(*rows, strict=True)) if rows else [()] * len(Op._fields)
        cols = {name: as_column(values) for name, values in zip(Op._fields, fields,
                                                                 strict=True)}
        cols["intensity"] = intensity(cols)
        return cls.from_columns(cols, meta)

    @property
    def columns(self) -> Columns:
        """The rows as read-only columns: name -> 1-D numpy array (enum columns as object
        arrays of what the table holds: enum members or strings); see `Columns`."""
        if self._cols is None:
            assert self._df is not None
            self._cols = Columns({name: self._df[name].to_numpy() for name in self._df.columns})
        return self._cols

    @property
    def df(self) -> pd.DataFrame:
        """The rows as a pandas DataFrame (built on first use, then cached; do not modify it)."""
        if self._df is None:
            import pandas as pd

            self._df = pd.DataFrame(dict(self.columns))
        return self._df

    def with_columns(self, columns: Mapping[str, Any],
                     meta: dict[str, Any] | None = None) -> OpTable:
        """A new table with `columns` added or replaced (1-D, one value per row) and `meta`
        (default: a copy of this table's). A DataFrame-backed table stays one (its index and
        dtypes kept)."""
        meta = dict(self.meta) if meta is None else meta
        if self._on_frame:
            return OpTable(self.df.assign(**columns), meta)
        return OpTable.from_columns({**self.columns, **columns}, meta)

    def __len__(self) -> int:
        if self._df is not None:
            return len(self._df)
        return len(self.columns)

    def __repr__(self) -> str:
        return (f"OpTable({len(self)} rows, columns={list(self.columns)}, "
                f"meta keys={list(self.meta)})")

    def to_frame(self) -> pd.DataFrame:
        """The rows as a pandas DataFrame (a copy)."""
        return self.df.copy()

    # -- summaries -------------------------------------------------------------------------
    def totals(self) -> dict[str, float]:
        """Iteration totals: flops, bytes read/written, ops launched, time where known."""
        c = self.columns
        out = {
            "flops": float(np.nansum(c["flops"])),
            "bytes_read": float(np.nansum(c["bytes_read"])),
            "bytes_written": float(np.nansum(c["bytes_written"])),
            "ops": int(np.sum(c["count"])),
        }
        time_s = np.asarray(c["time_s"], dtype=float)
        if np.any(~np.isnan(time_s)):
            out["time_s"] = float(np.nansum(time_s))
        return out

    def grouped(self, by: str | list[str]) -> Grouped:
        """`summary(by)` without pandas (see `summarize`)."""
        return summarize(self.columns, by)

    def summary(self, by: str | list[str]) -> pd.DataFrame:
        """Totals grouped by one or more columns, with each group's share of FLOPs, bytes
        and (where known) time. `by` may also be "group" for the coarse sublayer groups."""
        return self.grouped(by).to_frame()

    def by_category(self) -> pd.DataFrame:
        """Totals and shares per category."""
        return self.summary("category")

    def by_sublayer(self) -> pd.DataFrame:
        """Totals and shares per sublayer."""
        return self.summary("sublayer")

    def by_phase(self) -> pd.DataFrame:
        """Totals and shares per phase."""
        return self.summary("phase")

    def top_positions(self, n: int = 10, by: str = "flops") -> np.ndarray:
        """Positions of the n rows largest in `by` (flops, bytes, time_s, ...), largest first."""
        c = self.columns
        if by == "bytes":
            values = np.asarray(c["bytes_read"], dtype=float) + np.asarray(c["bytes_written"],
                                                                          dtype=float)
        elif by in c:
            values = c[by]
        else:
            raise BertscopeError(f"cannot rank by {by!r}; use one of flops, bytes, time_s")
        return stable_largest(values, n)

    def top(self, n: int = 10, by: str = "flops") -> pd.DataFrame:
        """The n rows largest in `by` (flops, bytes, time_s, ...)."""
        d = self.df
        if by == "bytes":
            d = d.assign(bytes=d["bytes_read"] + d["bytes_written"])
        return d.iloc[self.top_positions(n, by)]

    # -- export ----------------------------------------------------------------------------
    def export(self, path: str | Path, fmt: Format | str | None = None) -> Path:
        """Write the table to `path` atomically (csv, json or parquet; from the suffix when
        `fmt` is None). JSON holds {"meta": ..., "rows": [...]}."""
        p = Path(path)
        fmt = export_format(fmt if fmt is not None else p.suffix.lstrip("."), p)
        atomic_write(p, frame_bytes(self.df, fmt, meta=self.meta))
        return p


__all__ = ["COLUMNS", "ENUM_COLUMNS", "Columns", "Grouped", "Op", "OpTable", "as_column",
           "bytes_moved", "group_first_max",
           "group_rows", "group_sum", "intensity", "is_frame", "stable_largest", "summarize"]
