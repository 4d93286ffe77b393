"""An op table's rows as CSV, JSON and JSON Lines without pandas, byte for byte as
`io.frame_bytes` writes them.

`io.frame_bytes` writes a DataFrame with `DataFrame.to_csv(index=False)` and, for JSON,
`to_json(orient="records")` read back and written with the meta. A table held as columns
(`OpTable.from_columns`: every producer's table, a trace's included) is written here from its
numpy columns instead, so exporting one (`bertscope trace FILE --format csv`, `ops
--output x.json`) does not import pandas (~100 MiB resident, twice the rest of the command).
The output is pandas' own, checked against it by tests/unit/test_export_rows.py:

- CSV: the standard `csv` writer with pandas' dialect (",", '"' doubled, minimal quoting,
  "\\n" line ends); floats as numpy writes them (`astype(str)`, what pandas does for a float
  column without `float_format`), NaN as an empty field; ints, bools and text as `str`.
- JSON: pandas' encoder (its vendored ultrajson) writes a double as `round(x, 10)` in fixed
  notation within [1e-15, 1e16) and as `"%.10g"` outside it, NaN and infinities as null;
  `pandas_double` does the same arithmetic, and the value is what reading that text gives.
- JSON Lines: `io.json_lines` of `io.json_texts` per column, which `io.frame_bytes` uses on
  the frame's columns too (pandas-free already; exact floats).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from bertscope.io import json_lines, json_texts

JSON_DIGITS = 10
"""Decimal places pandas' JSON encoder writes a double with (`to_json`'s double_precision)."""
_FIXED_MAX = 1e16 - 1
_FIXED_MIN = 1e-15
"""pandas' encoder writes doubles above `_FIXED_MAX` or below `_FIXED_MIN` with "%.10g"."""


def pandas_double(x: float) -> float | None:
    """`x` as pandas' `to_json` writes it and JSON reads it back: None for NaN and
    infinities (null), else rounded to `JSON_DIGITS` decimal places with its encoder's
    arithmetic (halves rounded up where the last kept digit is odd or zero), or to 10
    significant digits outside [1e-15, 1e16)."""
    if math.isnan(x) or math.isinf(x):
        return None
    neg = x < 0
    v = -x if neg else x
    if v > _FIXED_MAX or (v != 0.0 and v < _FIXED_MIN):
        return float(f"%.{JSON_DIGITS}g" % x)
    scale = 10 ** JSON_DIGITS
    whole = int(v)
    tmp = (v - whole) * float(scale)
    frac = int(tmp)
    diff = tmp - frac
    if diff > 0.5 or (diff == 0.5 and (frac == 0 or frac & 1)):
        frac += 1
    if frac >= scale:
        frac, whole = 0, whole + 1
    out = float(f"{whole}.{frac:0{JSON_DIGITS}d}")
    return -out if neg else out


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _csv_column(col: np.ndarray) -> list[Any]:
    """One column's CSV fields as pandas makes them (`get_values_for_csv`)."""
    if col.dtype.kind == "f":
        text = col.astype(str).astype(object)
        text[np.isnan(col)] = ""
        return text.tolist()
    if col.dtype.kind == "O":
        return ["" if _is_missing(v) else v for v in col.tolist()]
    return col.tolist()


def rows_csv(cols: Mapping[str, np.ndarray]) -> str:
    """The rows of `cols` (name -> 1-D array) as `DataFrame(cols).to_csv(index=False)`."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(list(cols))
    writer.writerows(zip(*(_csv_column(np.asarray(c)) for _, c in cols.items()), strict=True))
    return buf.getvalue()


def _json_column(col: np.ndarray) -> list[Any]:
    """One column's JSON values as pandas' `to_json` writes them, read back."""
    if col.dtype.kind == "f":
        return [pandas_double(v) for v in col.tolist()]
    if col.dtype.kind == "O":
        out = []
        for v in col.tolist():
            if _is_missing(v) or (isinstance(v, float) and math.isinf(v)):
                out.append(None)
            elif isinstance(v, float):
                out.append(pandas_double(v))
            else:
                out.append(str(v) if isinstance(v, str) else v)
        return out
    return col.tolist()


def rows_json(cols: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    """The rows of `cols` as `json.loads(DataFrame(cols).to_json(orient="records"))`."""
    names = list(cols)
    values = [_json_column(np.asarray(c)) for _, c in cols.items()]
    return [dict(zip(names, row, strict=True)) for row in zip(*values, strict=True)]


def rows_bytes(cols: Mapping[str, np.ndarray], fmt: str, *, meta: dict[str, Any] | None = None,
               json_default: Any = None) -> bytes:
    """The rows of `cols` in `fmt` ("csv", "json" or "jsonl"), as `io.frame_bytes` writes
    the DataFrame of these columns: JSON is {"meta": meta, "rows": [...]} (indent 1), JSON
    Lines the rows alone."""
    if fmt == "csv":
        return rows_csv(cols).encode()
    if fmt == "json":
        return (json.dumps({"meta": meta or {}, "rows": rows_json(cols)}, indent=1,
                           default=json_default) + "\n").encode()
    if fmt == "jsonl":
        return json_lines({str(k): json_texts(np.asarray(c)) for k, c in cols.items()})
    raise ValueError(f"rows_bytes writes csv, json or jsonl, not {fmt!r}")


__all__ = ["JSON_DIGITS", "pandas_double", "rows_bytes", "rows_csv", "rows_json"]
