"""A sweep's rows taken piece by piece: written to Parquet or JSON Lines, ranked, and summarized
as they come, so that no more than a piece's rows (and the best `top`) are held at once, and
without pandas (the command streams its rows from numpy arrays to Arrow or JSON).

Each piece's rows arrive as `Columns` (`sweep._columns` of that piece alone: its own label
categories, the share columns of the categories seen so far). These consumers read them:

- `ParquetRows`: one row group per piece in a Parquet file (`pyarrow.parquet.ParquetWriter`,
  dictionary encoding for the label columns only: trying it on the float columns cost 6x the
  write). A reader sees one frame equal to the gathered one: pyarrow unifies the pieces'
  label dictionaries in order of first appearance, which is the gathered frame's category
  order (yes/no labels are written as booleans, as a pandas export of the frame reads back).
  A share column that first turns up in a later piece (a category the first pieces' models
  lack) is kept aside for the pieces that have it; at the end the file is rewritten row
  group by row group with the column in its place (0 on earlier single-device rows, NaN on
  multi-device ones: what the gathered frame holds there).
- `JsonRows`: one JSON object per row, a line each, keys in column order, floats exact, NaN
  as null (as pandas writes JSON). A share column that first turns up in a later piece is
  added to the earlier lines at the end, the file rewritten line by line (the same fills as
  Parquet's), so `pandas.read_json(path, lines=True)` reads the gathered frame's rows.
- `TopRows`: the best `top` rows by a column, merged piece by piece (a stable sort of the
  best so far, all earlier, followed by the piece's best equals the whole frame's stable
  sort).
- `Varied`: which configuration columns hold more than one value (the model dimensions
  within a model): what the sweep table shows.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from bertscope.io import json_lines, json_texts, json_value
from bertscope.sweep.grid import MODEL_AXES

if TYPE_CHECKING:
    import pandas as pd

COMPRESSION = "snappy"
"""The Parquet compression of a sweep's rows (fast; a 229,376-row sweep is 40 MiB)."""


@dataclass(frozen=True, slots=True)
class Labels:
    """A label column (model, device, precision, ...): codes into its categories, in order
    of first appearance."""

    codes: np.ndarray
    categories: list[Any]

    def values(self, rows: Any = slice(None)) -> np.ndarray:
        """The labels themselves (an object array), of `rows` (an index) or all."""
        cats = np.empty(len(self.categories), dtype=object)
        cats[:] = self.categories
        return cats[self.codes[rows]]


Columns = dict[str, Any]
"""A sweep's rows by column: numpy arrays, and `Labels` for the label columns."""


def frame_of(cols: Columns) -> pd.DataFrame:
    """Columns as a frame (labels as categoricals), without copying the arrays."""
    import pandas as pd

    return pd.DataFrame({k: pd.Categorical.from_codes(v.codes, categories=v.categories)
                         if isinstance(v, Labels) else v for k, v in cols.items()}, copy=False)


def columns_of(frame: pd.DataFrame) -> Columns:
    """A frame's columns (categoricals as `Labels`)."""
    import pandas as pd

    out: Columns = {}
    for k in frame.columns:
        s = frame[k]
        out[k] = (Labels(s.cat.codes.to_numpy(), list(s.cat.categories))
                  if isinstance(s.dtype, pd.CategoricalDtype) else s.to_numpy())
    return out


def _arrow(cols: Columns) -> Any:
    """Columns as an Arrow table: labels as dictionaries with 32-bit indices (the same type
    whatever a piece's category count), yes/no labels as booleans; NaN stays NaN."""
    import pyarrow as pa

    arrays = []
    for v in cols.values():
        if not isinstance(v, Labels):
            arrays.append(_array(v))
        elif all(isinstance(c, bool | np.bool_) for c in v.categories):
            arrays.append(_array(np.asarray(v.categories, dtype=bool)[v.codes]))
        else:
            arrays.append(pa.DictionaryArray.from_arrays(
                _array(v.codes.astype(np.int32)), _strings(tuple(v.categories))))
    return pa.Table.from_arrays(arrays, names=list(cols))


def _array(values: np.ndarray) -> Any:
    """A numpy column as an Arrow array over the same memory (booleans packed to bits).
    `pa.array` would do it too, but its first call imports pandas (0.3 s of a command's
    start); other dtypes go through it."""
    import pyarrow as pa

    kind = {"f8": pa.float64(), "i8": pa.int64(), "i4": pa.int32()}.get(
        values.dtype.str.lstrip("<=|"))
    if values.dtype == bool:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    if kind is None:
        return pa.array(values)
    data = np.ascontiguousarray(values)
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(data)])


@functools.lru_cache(maxsize=1024)
def _strings(values: tuple[Any, ...]) -> Any:
    """Label categories as an Arrow string array (built from its buffers: see `_array`);
    categories of other types through `pa.array`."""
    import pyarrow as pa

    if not all(isinstance(v, str) for v in values):
        return pa.array(values)
    data = [v.encode() for v in values]
    offsets = np.zeros(len(data) + 1, dtype=np.int32)
    np.cumsum([len(d) for d in data], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(data),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])


class ParquetRows:
    """Rows written to the Parquet file `path`, one row group per `write` (see the module
    docstring); `close` finishes the file. Used inside `io.atomic_path`: the file is the
    temporary one, renamed into place by the caller once whole."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._writer: Any = None
        self._schema: Any = None
        """The schema of the row groups written (the first piece's)."""
        self._final: Any = None
        """The schema of the last piece (every share column seen, in place)."""
        self._fills: list[float] = []
        """What each row group holds in a share column it lacks."""
        self._late: dict[str, dict[int, Any]] = {}
        """Share columns missing from the written schema: their values per row group."""

    def write(self, cols: Columns, fill: float) -> None:
        """Append the rows of one piece (`fill`: 0.0 for single-device rows, NaN for
        multi-device ones: their value in a share column that turns up later)."""
        import pyarrow.parquet as pq

        table = _arrow(cols)
        self._final = table.schema
        if self._writer is None:
            self._schema = table.schema
            self._writer = pq.ParquetWriter(self.path, table.schema, compression=COMPRESSION,
                                            use_dictionary=_dictionaries(table.schema))
        late = [n for n in table.schema.names if self._schema.get_field_index(n) < 0]
        for name in late:
            self._late.setdefault(name, {})[len(self._fills)] = table.column(name)
        if late:
            table = table.select(self._schema.names)
        self._writer.write_table(table)
        self._fills.append(fill)

    def close(self) -> None:
        """Finish the file (rewritten with the late share columns in place, if any)."""
        if self._writer is None:
            return
        self._writer.close()
        self._writer = None
        if self._late:
            self._rewrite()

    def abort(self) -> None:
        """Close the writer after a failure (the caller removes the file)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _rewrite(self) -> None:
        """The file again, row group by row group, each late column added where it was
        missing (its fill) and every column in the last piece's order."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        final = self._final
        tmp = f"{self.path}.late"
        src = pq.ParquetFile(self.path)
        with pq.ParquetWriter(tmp, final, compression=COMPRESSION,
                              use_dictionary=_dictionaries(final)) as out:
            for i in range(src.num_row_groups):
                got = src.read_row_group(i)
                cols = {n: got.column(n) for n in got.schema.names}
                for name, per_group in self._late.items():
                    cols[name] = per_group.get(i, pa.chunked_array(
                        [np.full(got.num_rows, self._fills[i])]))
                out.write_table(pa.table([cols[f.name].cast(f.type) for f in final],
                                         schema=final))
        os.replace(tmp, self.path)


class JsonRows:
    """Rows written to the JSON Lines file `path`, one object per row (see the module
    docstring), piece by piece as `write` is called; `close` finishes the file. Used inside
    `io.atomic_path`, as `ParquetRows` is: the file is the temporary one."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: Any = None
        self._first: list[str] = []
        """The columns of the first piece."""
        self._final: list[str] = []
        """The columns of the last piece (every share column seen, in place)."""
        self._pieces: list[tuple[int, float]] = []
        """Each piece's row count and its fill (its value in a column it lacks)."""

    def write(self, cols: Columns, fill: float) -> None:
        """Append the rows of one piece (`fill`: as `ParquetRows.write`'s)."""
        texts = {k: _json_texts(v) for k, v in cols.items()}
        if self._file is None:
            self._file = open(self.path, "wb")  # noqa: SIM115 (closed by close or abort)
            self._first = list(cols)
        self._final = list(cols)
        self._file.write(json_lines(texts))
        self._pieces.append((len(next(iter(texts.values()), [])), fill))

    def close(self) -> None:
        """Finish the file (rewritten with the late share columns in place, if any)."""
        if self._file is None:
            return
        self._file.close()
        self._file = None
        if set(self._final) - set(self._first):
            self._rewrite()

    def abort(self) -> None:
        """Close the file after a failure (the caller removes it)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def _rewrite(self) -> None:
        """The file again, piece by piece, each row with every column of the last piece, in
        its order (a column a row lacks: its piece's fill)."""
        tmp = f"{self.path}.late"
        final = self._final
        with open(self.path, "rb") as src, open(tmp, "wb") as out:
            for n, fill in self._pieces:
                rows = [json.loads(src.readline()) for _ in range(n)]
                missing = json_value(fill)
                out.write(json_lines({k: json_texts([r.get(k, missing) for r in rows])
                                      for k in final}))
        os.replace(tmp, self.path)


def _json_texts(v: Any) -> list[str]:
    """A column of `Columns` as JSON texts: labels by value (each category written once; yes/no
    labels as booleans), figures through `io.json_texts` (NaN as null)."""
    if isinstance(v, Labels):
        cats = np.empty(len(v.categories), dtype=object)
        cats[:] = json_texts([json_value(c) for c in v.categories])
        return cats[v.codes].tolist()
    return json_texts(v)


def _dictionaries(schema: Any) -> list[str]:
    """The dictionary (label) columns of an Arrow schema."""
    import pyarrow as pa

    return [f.name for f in schema if pa.types.is_dictionary(f.type)]


class TopRows:
    """The best `top` rows by `sort` (smallest first for `ascending`), ties in row order,
    NaN last, merged piece by piece; `sort` None keeps the first `top` rows. A label column
    (model, device, ...) ranks by its values' order of first appearance, as the gathered
    frame's categories do (`SweepResult.ranked` is the reference)."""

    def __init__(self, sort: str | None, top: int, *, ascending: bool) -> None:
        self.sort = sort
        self.top = top
        self.ascending = ascending
        self.best: dict[str, np.ndarray] | None = None
        """The best rows so far by column (labels as values), with each row's fill."""
        self._rank: dict[Any, int] = {}
        """Label values by first appearance (a label sort's key)."""

    def add(self, cols: Columns, fill: float) -> None:
        """Take a piece's rows (`fill`: their value in a share column they lack)."""
        n = len(next(v for v in cols.values() if not isinstance(v, Labels)))
        sort = self.sort
        if sort is not None and isinstance(cols.get(sort), Labels):
            for v in cols[sort].categories:
                self._rank.setdefault(v, len(self._rank))
        if sort is not None and sort not in cols:  # a share column later pieces may have
            cols = {**cols, sort: np.full(n, fill)}
        take = self._order(cols.get(sort), n)[:self.top]
        piece = {k: v.values(take) if isinstance(v, Labels) else v[take]
                 for k, v in cols.items()}
        piece[_FILL] = np.full(len(take), fill)
        if self.best is None:
            self.best = piece
            return
        best = self.best  # a share column only one side has: the other's rows hold fills
        both = [*best, *(k for k in piece if k not in best)]
        merged = {k: np.concatenate([best.get(k, best[_FILL]), piece.get(k, piece[_FILL])])
                  for k in both}
        take = self._order(merged.get(sort), len(merged[_FILL]))[:self.top]
        self.best = {k: v[take] for k, v in merged.items()}

    def _order(self, key: Any, n: int) -> np.ndarray:
        """Row indices in rank order (stable; NaN last either way, as pandas sorts)."""
        if key is None:
            return np.arange(n)
        if isinstance(key, Labels):
            key = np.array([self._rank[c] for c in key.categories], dtype=np.int64)[key.codes]
        elif key.dtype == object:  # label values (the best rows so far)
            key = np.array([self._rank[c] for c in key], dtype=np.int64)
        elif key.dtype == bool:
            key = key.astype(np.int8)
        return np.argsort(key if self.ascending else -key, kind="stable")

    def records(self, columns: Iterable[str]) -> list[dict[str, Any]]:
        """The best rows, best first, as {column: value} with exactly `columns`."""
        if self.best is None:
            return []
        cols = list(columns)
        values = [self.best[c].tolist() for c in cols]
        return [dict(zip(cols, row, strict=True)) for row in zip(*values, strict=True)]


_FILL = "\0fill"
"""`TopRows`' column of each row's fill."""
CONFIG_END = "tokens"
"""The first figure column: the columns before it name a configuration."""
LAYOUT = ("dp", "tp", "pp", "zero")
"""Layout columns (after the figures, in sweeps with multi-device points)."""


class Varied:
    """Which configuration columns hold more than one value (NaN aside) over the pieces
    added: the model dimensions within one model, every other column over all rows."""

    def __init__(self) -> None:
        self._seen: dict[Any, Any] = {}
        """A value seen, per column (per column and model for the dimensions)."""
        self.columns: set[str] = set()

    def add(self, cols: Columns) -> None:
        """Take a piece's rows."""
        names = list(cols)
        config = names[:names.index(CONFIG_END)] if CONFIG_END in names else names
        config += [c for c in LAYOUT if c in cols]
        model: Labels = cols["model"]
        codes = model.codes  # one model a piece, but for multi-device pieces
        models = [codes[0]] if (codes == codes[0]).all() else np.unique(codes)
        for c in config:
            if c in self.columns:
                continue
            if c not in MODEL_AXES:
                self._take(c, c, cols[c])
                continue
            for m in models:
                rows = cols[c] if len(models) == 1 else cols[c][model.codes == m]
                self._take(c, (c, model.categories[m]), rows)

    def _take(self, column: str, key: Any, values: Any) -> None:
        if isinstance(values, Labels):
            codes = values.codes
            if not len(codes):
                return
            if (codes != codes[0]).any():
                self.columns.add(column)
                return
            first = values.categories[codes[0]]
        else:
            if values.dtype.kind == "f":
                values = values[~np.isnan(values)]
            if not len(values):
                return
            first = values[0]
            if (values != first).any():
                self.columns.add(column)
                return
            first = first.item()
        if self._seen.setdefault(key, first) != first:
            self.columns.add(column)


__all__ = ["COMPRESSION", "Columns", "JsonRows", "Labels", "ParquetRows", "TopRows", "Varied",
           "columns_of", "frame_of"]
