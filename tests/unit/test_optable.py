"""Column-backed op tables: the same answers as DataFrame-backed ones, and no pandas on the
prediction path."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest

from bertscope.analytic import build, ops
from bertscope.config import RunConfig
from bertscope.errors import BertscopeError
from bertscope.optable import OpTable
from bertscope.perf import by_bound, fuse, load_profile, predict
from bertscope.perf.predict import top_ops
from tests.conftest import tiny

PREDICT = ["predict", "bert-large", "--device", "a100", "--precision", "bf16", "--batch", "64",
           "--seq", "128"]


def test_predict_and_ops_commands_do_not_import_pandas() -> None:
    code = f"""
import contextlib, io, sys
from bertscope.cli import main
for argv in ({PREDICT!r}, {[*PREDICT, "--fusion"]!r}, ["ops", "bert-base"]):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        rc = main(argv)
    assert rc == 0 and "By phase" in out.getvalue(), (argv, rc)
print(sorted(m for m in ("pandas", "pyarrow", "matplotlib", "torch") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "COLUMNS": "160"})
    assert out.stdout.strip() == "[]", out.stderr


def _pair(fused: bool = False) -> tuple[OpTable, OpTable]:
    """The same table column-backed (as built) and DataFrame-backed."""
    table = build(tiny(), RunConfig(batch=2, seq=16, precision="fp16", micro_batches=2,
                                    optimizer="lamb"))
    if fused:
        table = fuse(table)
    return table, OpTable(table.to_frame(), table.records, job=table.job)


@pytest.mark.parametrize("fused", [False, True])
def test_column_and_frame_backed_tables_agree(fused: bool) -> None:
    cols, frame = _pair(fused)
    profile = load_profile("a100")
    for by in ("category", "sublayer", "phase", "group", "layer", ["phase", "category"]):
        pd.testing.assert_frame_equal(cols.summary(by), frame.summary(by))
    pd.testing.assert_frame_equal(cols.top(5, "bytes"), frame.top(5, "bytes"))
    assert cols.totals() == frame.totals()
    p_cols, p_frame = predict(cols, profile), predict(frame, profile)
    pd.testing.assert_frame_equal(p_cols.df, p_frame.df)
    assert p_cols.export_meta()["prediction"] == p_frame.export_meta()["prediction"]
    pd.testing.assert_frame_equal(p_cols.summary("group"), p_frame.summary("group"))
    pd.testing.assert_frame_equal(top_ops(p_cols, 8), top_ops(p_frame, 8))
    assert by_bound(p_cols) == by_bound(p_frame)
    pd.testing.assert_frame_equal(fuse(cols).df, fuse(frame).df)


def test_summary_matches_a_pandas_groupby() -> None:
    table = predict(ops("bert-base", batch=4, seq=64), load_profile("v100"))
    d = table.df
    want = d.groupby("phase", sort=False)[["count", "flops", "time_s"]].sum()
    got = table.summary("phase")
    pd.testing.assert_frame_equal(got[["count", "flops", "time_s"]], want.loc[got.index],
                                  check_names=False, rtol=1e-12)
    assert got["time_s"].is_monotonic_decreasing
    assert got["time_share"].sum() == pytest.approx(1.0)


def test_columns_are_read_only_and_checked() -> None:
    table = ops("bert-tiny", batch=2, seq=16)
    col = table.columns["flops"]
    with pytest.raises(ValueError, match="read-only"):
        col[0] = 1.0
    with pytest.raises(TypeError):
        table.columns["flops"] = col  # type: ignore[index]
    with pytest.raises(BertscopeError, match="one length"):
        OpTable.from_columns({"a": [1, 2], "b": [1]})
    with pytest.raises(BertscopeError, match="DataFrame"):
        OpTable({"a": [1]})  # type: ignore[arg-type]


def test_added_columns_make_a_new_table_and_keep_a_frame_index() -> None:
    table = ops("bert-tiny", batch=2, seq=16)
    more = table.with_columns({"x": np.arange(len(table))})
    assert "x" in more.columns and "x" not in table.columns
    frame = OpTable(table.df.iloc[::2])  # a filtered frame: its index has gaps
    pred = predict(frame, load_profile("a100"), "fp32")
    assert list(pred.df.index) == list(frame.df.index)


@dataclass
class _Recording:
    """A mapping-style GEMM model that records what it was given."""

    source: str = "test"
    seen: type | None = None

    def fraction(self, rows: Mapping[str, Any]) -> np.ndarray:
        self.seen = type(rows)
        return np.full(len(rows["flops"]), 0.5)

    def to_dict(self) -> dict[str, Any]:
        return {"model": "Recording"}


def test_models_get_the_columns_not_a_frame() -> None:
    table = ops("bert-tiny", batch=2, seq=16)
    model = _Recording()
    profile = load_profile("a100").with_models(gemm=model)
    predict(table, profile, "fp32")
    assert model.seen is not None and not issubclass(model.seen, pd.DataFrame)


def test_columns_read_like_a_dataframe_and_are_read_only() -> None:
    from bertscope.optable import Columns

    table = ops("bert-tiny", batch=2, seq=16)
    cols = table.columns
    assert isinstance(cols, Columns)
    assert len(cols) == len(table) == len(table.df)  # rows, as len(DataFrame) counts
    assert "flops" in cols and "nope" not in cols
    assert list(cols) == list(table.df.columns) == list(cols.columns)
    assert dict(cols).keys() == set(table.df.columns)
    with pytest.raises(ValueError):
        cols["flops"][0] = 1.0  # views are read-only
    with pytest.raises(ValueError, match="differ in length"):
        Columns({"a": np.zeros(2), "b": np.zeros(3)})
