"""`OpTable`: the rows of one training iteration (columns or a DataFrame) plus typed records."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bertscope.config import ModelConfig, RunConfig
from bertscope.errors import BertscopeError, check_path, expect, shown
from bertscope.io import Format, atomic_write, frame_bytes, output_format
from bertscope.job import Job
from bertscope.optable.export import rows_bytes
from bertscope.optable.grouping import Grouped, stable_largest, summarize
from bertscope.optable.records import (
    Record,
    records_from_dict,
    records_to_dict,
    replace_records,
)
from bertscope.optable.schema import Columns, Op, as_column, intensity, is_frame, op_from_dict

if TYPE_CHECKING:
    import pandas as pd


class OpTable:
    """An op table: columns of `Op` rows plus the job and typed records (producer, memory,
    prediction, ...).

    The rows are stored either as columns (`from_ops`, `from_columns`: name -> 1-D numpy
    array) or as a pandas DataFrame (`OpTable(df, records)`); `columns` and `df` give either
    form, the other built on first use and cached, so code that needs no DataFrame never
    imports pandas. A table's rows are immutable (the arrays in `columns` are read-only, and
    `df` must not be modified either): add columns with `with_columns`, or edit a copy from
    `to_frame()` and wrap it, `OpTable(frame, records)`.

    `job` is the typed (model, run) pair the rows describe, where the producer knows it
    (analytic and profiled tables; a trace has none): read `table.model`, `table.run`. It is
    serialized only at export (JSON meta "model" and "run") and parsed back by loaders
    (`table_from_doc`). `records` are the rest, typed (`optable.records`): read one with its
    class, `Prediction.of(table)`; add one with `with_records`. They too become dicts only at
    export (`export_meta`) and back at load (`table_from_doc`).
    """

    __slots__ = ("_cols", "_df", "_on_frame", "job", "records")

    def __init__(self, df: pd.DataFrame, records: Iterable[Record] = (), *,
                 job: Job | None = None) -> None:
        if not is_frame(df):
            raise BertscopeError(f"OpTable(df=...) needs a pandas DataFrame, got "
                                 f"{type(df).__name__}; use OpTable.from_columns for arrays")
        self._df: pd.DataFrame | None = df
        self._cols: Columns | None = None
        self._on_frame = True  # the DataFrame is the primary store
        self.records: tuple[Record, ...] = _records(records)
        self.job: Job | None = job

    @classmethod
    def from_columns(cls, columns: Mapping[str, Any], records: Iterable[Record] = (), *,
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
        table.records = _records(records)
        table.job = job
        return table

    @classmethod
    def from_ops(cls, ops: Iterable[Op], records: Iterable[Record] = (), *,
                 job: Job | None = None) -> OpTable:
        """Build a table from rows; computes arithmetic intensity."""
        rows = list(ops)
        fields = list(zip(*rows, strict=True)) if rows else [()] * len(Op._fields)
        cols = {name: as_column(values) for name, values in zip(Op._fields, fields,
                                                                 strict=True)}
        cols["intensity"] = intensity(cols)
        return cls.from_columns(cols, records, job=job)

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

    def with_columns(self, columns: Mapping[str, Any], *records: Record) -> OpTable:
        """A new table with `columns` added or replaced (1-D, one value per row) and this
        table's records with `records` put in place of those of their class. A
        DataFrame-backed table stays one (its index and dtypes kept)."""
        kept = replace_records(self.records, *records)
        if self._on_frame:
            return OpTable(self.df.assign(**columns), kept, job=self.job)
        return OpTable.from_columns({**self.columns, **columns}, kept, job=self.job)

    def with_records(self, *records: Record) -> OpTable:
        """The same rows (shared, not copied) with `records` put in place of those of their
        class (added where the table has none)."""
        table = OpTable.__new__(OpTable)
        table._df, table._cols, table._on_frame = self._df, self._cols, self._on_frame
        table.records = replace_records(self.records, *records)
        table.job = self.job
        return table

    def __len__(self) -> int:
        if self._df is not None:
            return len(self._df)
        return len(self.columns)

    def __repr__(self) -> str:
        return (f"OpTable({len(self)} rows, columns={list(self.columns)}, "
                f"records={[type(r).__name__ for r in self.records]})")

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
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise BertscopeError(f"n must be an integer >= 0, got {shown(n)}")
        c = self.columns
        if by == "bytes":
            values = np.asarray(c["bytes_read"], dtype=float) + np.asarray(c["bytes_written"],
                                                                          dtype=float)
        elif isinstance(by, str) and by in c:
            values = c[by]
        else:
            raise BertscopeError(f"cannot rank by {shown(by)}; use one of flops, bytes, "
                                 f"time_s")
        return stable_largest(values, n)

    def top(self, n: int = 10, by: str = "flops") -> pd.DataFrame:
        """The n rows largest in `by` (flops, bytes, time_s, ...)."""
        d = self.df
        if by == "bytes":
            d = d.assign(bytes=d["bytes_read"] + d["bytes_written"])
        return d.iloc[self.top_positions(n, by)]

    # -- export ----------------------------------------------------------------------------
    def export_meta(self) -> dict[str, Any]:
        """The records and the job as JSON meta ("model" and "run" after "producer"), as
        exports and saved results write it: the one place a table's meta becomes a dict."""
        return meta_with_job(records_to_dict(self.records), self.job)

    def export(self, path: str | Path, fmt: Format | str | None = None) -> Path:
        """Write the table to `path` atomically (csv, json or parquet; from the suffix when
        `fmt` is None). JSON holds {"meta": ..., "rows": [...]}."""
        p = Path(check_path(path, "export"))
        atomic_write(p, self.to_bytes(output_format(p, fmt)))
        return p

    def to_bytes(self, fmt: Format) -> bytes:
        """The table as `export` writes it in `fmt` (JSON: {"meta": ..., "rows": [...]}, meta
        values JSON lacks written as text). A table held as columns is written as CSV, JSON or
        JSON Lines without pandas (`optable.export`: the same bytes)."""
        if not self._on_frame and fmt in (Format.CSV, Format.JSON, Format.JSONL):
            return rows_bytes(self.columns, fmt, meta=self.export_meta(), json_default=str)
        return frame_bytes(self.df, fmt, meta=self.export_meta(), json_default=str)


def _records(records: Iterable[Record]) -> tuple[Record, ...]:
    """`records` as a tuple, refused in one line unless each is a `Record` (a dict of meta
    is read with `records_from_dict`)."""
    out = tuple(records)
    bad = [r for r in out if not isinstance(r, Record)]
    if bad or isinstance(records, Mapping):
        raise BertscopeError(f"op-table records must be Record objects, got "
                             f"{type(records if isinstance(records, Mapping) else bad[0]).__name__}"
                             f"; read a dict of meta with records_from_dict")
    return out


def meta_with_job(meta: dict[str, Any], job: Job | None) -> dict[str, Any]:
    """`meta` with `job` serialized in it ("model" and "run" right after "producer"), as
    exports and saved results write it; a copy of `meta` when there is no job."""
    if job is None:
        return dict(meta)
    head = {k: v for k, v in meta.items() if k == "producer"}
    return {**head, **job.as_dict(), **meta}


def table_from_doc(doc: Mapping[str, Any]) -> OpTable:
    """The op table of a saved document ({"meta": ..., "rows": [...]}, as `export` and
    `ProfileResult.write_json` write it): the one place saved tables are read back. Its job
    is parsed from the meta's "model" and "run" (none when it has neither), the rest into
    records (`records_from_dict`); columns a row lacks (those added since it was written,
    e.g. tp_split and pp_stage) take `Op`'s defaults; columns that are no `Op` field
    (intensity) are recomputed or dropped."""
    if not isinstance(doc, Mapping):
        raise BertscopeError(f"expected an object with meta and rows, got {type(doc).__name__}")
    rows_in = expect(dict(doc), "rows", list, "result")
    rows = [op_from_dict(r, f"rows[{i}]") for i, r in enumerate(rows_in)]
    saved = expect(dict(doc), "meta", dict, "result", {})
    job = Job.from_dict(saved) if "model" in saved or "run" in saved else None
    return OpTable.from_ops(rows, records_from_dict(saved, skip=("model", "run")), job=job)


__all__ = ["OpTable", "meta_with_job", "table_from_doc"]
