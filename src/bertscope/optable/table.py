"""`OpTable`: the rows of one training iteration (columns or a DataFrame) plus metadata."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bertscope.config import ModelConfig, RunConfig
from bertscope.errors import BertscopeError
from bertscope.io import Format, atomic_write, frame_bytes, output_format
from bertscope.job import Job
from bertscope.optable.grouping import Grouped, stable_largest, summarize
from bertscope.optable.schema import Columns, Op, as_column, intensity, is_frame

if TYPE_CHECKING:
    import pandas as pd


class OpTable:
    """An op table: columns of `Op` rows plus metadata (model, run settings, producer).

    The rows are stored either as columns (`from_ops`, `from_columns`: name -> 1-D numpy
    array) or as a pandas DataFrame (`OpTable(df, meta)`); `columns` and `df` give either
    form, the other built on first use and cached, so code that needs no DataFrame never
    imports pandas. A table's rows are immutable (the arrays in `columns` are read-only, and
    `df` must not be modified either): add columns with `with_columns`, or edit a copy from
    `to_frame()` and wrap it, `OpTable(frame, meta)`.

    `job` is the typed (model, run) pair the rows describe, where the producer knows it
    (analytic and profiled tables; a trace has none): read `table.model`, `table.run`. It is
    serialized only at export (JSON meta "model" and "run") and parsed back by loaders
    (`Job.from_dict`). `meta` is a plain dict of the rest (producer, memory, prediction, ...).
    """

    __slots__ = ("_cols", "_df", "_on_frame", "job", "meta")

    def __init__(self, df: pd.DataFrame, meta: dict[str, Any] | None = None, *,
                 job: Job | None = None) -> None:
        if not is_frame(df):
            raise BertscopeError(f"OpTable(df=...) needs a pandas DataFrame, got "
                                 f"{type(df).__name__}; use OpTable.from_columns for arrays")
        self._df: pd.DataFrame | None = df
        self._cols: Columns | None = None
        self._on_frame = True  # the DataFrame is the primary store
        self.meta: dict[str, Any] = meta if meta is not None else {}
        self.job: Job | None = job

    @classmethod
    def from_columns(cls, columns: Mapping[str, Any], meta: dict[str, Any] | None = None, *,
                     job: Job | None = None) -> OpTable:
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
        table.job = job
        return table

    @classmethod
    def from_ops(cls, ops: Iterable[Op], meta: dict[str, Any] | None = None, *,
                 job: Job | None = None) -> OpTable:
        """Build a table from rows; computes arithmetic intensity."""
        rows = list(ops)
        fields = list(zip(*rows, strict=True)) if rows else [()] * len(Op._fields)
        cols = {name: as_column(values) for name, values in zip(Op._fields, fields,
                                                                 strict=True)}
        cols["intensity"] = intensity(cols)
        return cls.from_columns(cols, meta, job=job)

    @property
    def model(self) -> ModelConfig:
        """The model the rows describe (raises when the producer did not know it)."""
        return self._job().model

    @property
    def run(self) -> RunConfig:
        """The run settings the rows describe (raises when the producer did not know them)."""
        return self._job().run

    def _job(self) -> Job:
        if self.job is None:
            raise BertscopeError("this op table carries no model and run configuration (a "
                                 "trace, or a table built from bare rows); pass job=")
        return self.job

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
            return OpTable(self.df.assign(**columns), meta, job=self.job)
        return OpTable.from_columns({**self.columns, **columns}, meta, job=self.job)

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
    def export_meta(self) -> dict[str, Any]:
        """`meta` with the job serialized in it ("model" and "run" after "producer"), as
        exports and saved results write it."""
        return meta_with_job(self.meta, self.job)

    def export(self, path: str | Path, fmt: Format | str | None = None) -> Path:
        """Write the table to `path` atomically (csv, json or parquet; from the suffix when
        `fmt` is None). JSON holds {"meta": ..., "rows": [...]}."""
        p = Path(path)
        atomic_write(p, self.to_bytes(output_format(p, fmt)))
        return p

    def to_bytes(self, fmt: Format) -> bytes:
        """The table as `export` writes it in `fmt` (JSON: {"meta": ..., "rows": [...]}, meta
        values JSON lacks written as text)."""
        return frame_bytes(self.df, fmt, meta=self.export_meta(), json_default=str)


def meta_with_job(meta: dict[str, Any], job: Job | None) -> dict[str, Any]:
    """`meta` with `job` serialized in it ("model" and "run" right after "producer"), as
    exports and saved results write it; a copy of `meta` when there is no job."""
    if job is None:
        return dict(meta)
    head = {k: meta[k] for k in ("producer",) if k in meta}
    return {**head, **job.as_dict(), **meta}


__all__ = ["OpTable", "meta_with_job"]
