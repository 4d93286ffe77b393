"""CSV and JSON rows written without pandas (`optable.export`) are pandas' own bytes: checked
against pandas itself (the independent implementation: `DataFrame.to_csv(index=False)` and
`to_json(orient="records")`, what `io.frame_bytes` writes) on drawn columns, the edge values
of its JSON encoder, and real traces' tables."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertscope.io import Format, frame_bytes
from bertscope.optable import OpTable
from bertscope.optable.export import pandas_double, rows_bytes, rows_csv, rows_json
from bertscope.taxonomy import Category

HF = Path(__file__).parents[1] / "data" / "traces" / "hf"


def _pandas_rows(cols: dict[str, np.ndarray]) -> tuple[str, list[dict]]:
    frame = pd.DataFrame(cols)
    return frame.to_csv(index=False), json.loads(frame.to_json(orient="records"))


def _same_json(ours: list[dict], theirs: list[dict]) -> None:
    # json.dumps compares floats by their repr (and NaN never equals itself)
    assert json.dumps(ours) == json.dumps(theirs)


EDGES = [
    0.0, -0.0, 1.0, -1.0, 0.5, 2.5, 1e-15, 9.99e-16, 1.5e-15, 1e16 - 1, 1e16, 1e16 + 2,
    1.23456789015, 1.23456789025, 0.00000000005, 0.00000000015, 0.99999999999, 0.99999999995,
    123456.000000000049, 3.2613999999999996e-05, 7.655e-06, 1e300, -1e300, 5e-324,
    math.pi, -math.e, 2.0 ** 53, 2.0 ** 53 + 2, 4503599627370495.5,
    math.nan, math.inf, -math.inf,
]
"""The JSON encoder's edges: its fixed/exponent thresholds (1e-15, 1e16 - 1), halves at the
10th decimal (0.00000000005 rounds up: its last kept digit is 0; 0.00000000015 up: odd),
carries into the whole part (0.99999999995), the largest and smallest doubles, NaN and
infinities (null)."""


def test_the_json_encoder_edges_read_back_as_pandas_writes_them() -> None:
    col = np.array(EDGES)
    _, theirs = _pandas_rows({"x": col})
    ours = [pandas_double(v) for v in EDGES]
    assert json.dumps(ours) == json.dumps([r["x"] for r in theirs])
    # by hand: 10 decimals within [1e-15, 1e16), 10 significant digits outside
    assert pandas_double(math.pi) == 3.1415926536  # 3.14159265358979... -> 10 decimals
    assert pandas_double(1e-16 * 1.2345678912) == 1.234567891e-16  # %.10g
    assert pandas_double(math.nan) is None and pandas_double(-math.inf) is None


finite = st.floats(allow_nan=False, allow_infinity=False)
anything = st.one_of(finite, st.just(math.nan), st.just(math.inf),
                     st.floats(min_value=1e-17, max_value=1e-13),
                     st.floats(min_value=1e15, max_value=1e17))
texts = st.text(alphabet=st.sampled_from('ab ,"\n\r\t;:|é∞'), max_size=6)


@settings(max_examples=150, deadline=None)
@given(floats=st.lists(anything, min_size=1, max_size=8), data=st.data())
def test_drawn_columns_are_written_as_pandas_writes_them(floats: list[float],
                                                         data: st.DataObject) -> None:
    n = len(floats)
    cols = {
        "name": np.array(data.draw(st.lists(texts, min_size=n, max_size=n)), dtype=object),
        "layer": np.array(data.draw(st.lists(st.integers(-2**62, 2**62), min_size=n,
                                             max_size=n)), dtype=np.int64),
        "flops": np.array(floats),
        "category": np.array(data.draw(st.lists(st.sampled_from(list(Category)), min_size=n,
                                                max_size=n)), dtype=object),
        "flag": np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n))),
    }
    csv_text, records = _pandas_rows(cols)
    assert rows_csv(cols) == csv_text
    _same_json(rows_json(cols), records)


def test_no_rows_is_the_header_alone() -> None:
    cols = {"name": np.array([], dtype=object), "time_s": np.array([], dtype=float)}
    assert rows_csv(cols) == "name,time_s\n" == pd.DataFrame(cols).to_csv(index=False)
    assert rows_json(cols) == []


@pytest.mark.parametrize("trace", ["bert_cpu_train.json.gz", "t5_cpu_train.json.gz"])
@pytest.mark.parametrize("fmt", [Format.CSV, Format.JSON, Format.JSONL])
def test_a_traces_table_exports_the_bytes_pandas_wrote(trace: str, fmt: Format) -> None:
    from bertscope.trace import read_trace

    table = read_trace(HF / trace)
    assert not table._on_frame  # the columns path is the one taken
    meta = table.export_meta()
    ours = table.to_bytes(fmt)
    theirs = frame_bytes(pd.DataFrame(dict(table.columns)), fmt, meta=meta, json_default=str)
    assert ours == theirs
    # and a frame-backed table (pandas writes it) gives the same bytes
    assert OpTable(table.to_frame(), table.records).to_bytes(fmt) == theirs


def test_rows_bytes_refuses_parquet() -> None:
    with pytest.raises(ValueError, match="csv, json or jsonl"):
        rows_bytes({"x": np.zeros(1)}, "parquet")
