"""Typed records on op tables: read by class, written as JSON meta in one place
(`export_meta`), read back in one place (`table_from_doc`), unknown entries kept."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertscope.analytic import MemoryEstimate, ops
from bertscope.config import Precision
from bertscope.errors import BertscopeError
from bertscope.hardware import NumberFormat
from bertscope.io import Format
from bertscope.optable import (
    Columns,
    Extra,
    OpTable,
    ProfileFacts,
    Provenance,
    records_from_dict,
    table_from_doc,
)
from bertscope.perf import FusionStats, Prediction, fuse, load_profile, predict
from bertscope.perf.predict import Bound, BoundShare


def _saved(table: OpTable) -> dict:
    """The table as `export` writes it in JSON, parsed."""
    return json.loads(table.to_bytes(Format.JSON))


def test_a_prediction_is_typed_and_round_trips_through_its_export() -> None:
    table = ops("bert-tiny", batch=2, seq=16, precision="bf16", optimizer="lamb")
    pred_table = predict(fuse(table), load_profile("a100"))
    pred = Prediction.of(pred_table)
    assert pred.precision is Precision.BF16 and pred.gemm_format is NumberFormat.BF16
    assert pred.fused and pred.tokens == 2 * 16  # batch x seq
    doc = _saved(pred_table)
    assert list(doc["meta"]) == ["producer", "model", "run", "params", "memory", "fusion",
                                 "prediction"]
    assert doc["meta"]["prediction"]["precision"] == "bf16"  # the enum's value on export
    back = table_from_doc(doc)
    again = Prediction.of(back)
    assert again.precision is Precision.BF16  # and the enum again on load
    assert again.time_s == pred.time_s and again.models == pred.models
    assert again.rows is None  # read back without its rows
    assert FusionStats.of(back) == FusionStats.of(pred_table)
    assert MemoryEstimate.of(back) == MemoryEstimate.of(table)
    assert Provenance.of(back) == Provenance("analytic", Provenance.of(table).params)
    assert back.job == table.job
    assert _saved(back)["meta"] == doc["meta"]  # written again: the same meta


def test_bounds_sum_the_rows_each_bound_limits() -> None:
    rows = Columns({"time_s": np.array([1.0, 2.0, 3.0]), "count": np.array([1, 2, 3]),
                    "bound": np.array(["compute", "memory", "memory"], dtype=object)})
    pred = Prediction(device="d", sku="d", precision=Precision.FP32,
                      gemm_format=NumberFormat.FP32, gemm_peak_flops=1.0,
                      vector_format=NumberFormat.FP32, vector_peak_flops=1.0, bandwidth=1.0,
                      notes=(), models={}, time_s=6.0, roofline_s=6.0, flops=0.0,
                      achieved_flops=0.0, peak_fraction=0.0, tokens=None, tokens_per_s=None,
                      fused=False, rows=rows)
    assert pred.bounds() == {
        Bound.COMPUTE: BoundShare(rows=1, launches=1, time_s=1.0, time_share=1 / 6),
        Bound.MEMORY: BoundShare(rows=2, launches=5, time_s=5.0, time_share=5 / 6),  # 2 + 3
        Bound.OVERHEAD: BoundShare(rows=0, launches=0, time_s=0.0, time_share=0.0)}
    read_back = Prediction.from_dict(pred.to_dict())
    with pytest.raises(BertscopeError, match="without its rows"):
        read_back.bounds()


def test_unknown_entries_are_kept_in_order_and_missing_facts_stay_missing() -> None:
    meta = {"producer": "profile", "seed": 7, "iteration_s": 0.5,
            "iteration_times_s": [0.5, 0.6], "custom": {"a": 1}}
    recs = records_from_dict(meta)
    assert recs == (Provenance("profile"), Extra({"seed": 7, "custom": {"a": 1}}),
                    ProfileFacts(iteration_s=0.5, iteration_times_s=(0.5, 0.6)))
    table = OpTable.from_ops([], recs)
    assert ProfileFacts.of(table).iteration_times_s == (0.5, 0.6)
    # no key the result did not have is written (an older result keeps its keys)
    assert table.export_meta() == {"producer": "profile", "seed": 7, "custom": {"a": 1},
                                   "iteration_s": 0.5, "iteration_times_s": [0.5, 0.6]}


def test_bad_records_are_one_line_errors() -> None:
    with pytest.raises(BertscopeError, match="must be Record objects, got dict"):
        OpTable.from_ops([], {"producer": "x"})  # type: ignore[arg-type]
    with pytest.raises(BertscopeError, match="no Prediction"):
        Prediction.of(ops("bert-tiny", batch=1, seq=8))
    with pytest.raises(BertscopeError, match="meta: not as bertscope writes it"):
        records_from_dict({"prediction": {"device": "d"}})


def test_with_records_replaces_a_record_of_the_same_class_in_place() -> None:
    t = OpTable.from_ops([], (Provenance("a"), ProfileFacts(iters=1), Extra({"x": 1})))
    u = t.with_records(ProfileFacts(iters=2), FusionStats(1, 2, 3, 4.0))
    assert [type(r).__name__ for r in u.records] == ["Provenance", "ProfileFacts", "Extra",
                                                     "FusionStats"]
    assert ProfileFacts.of(u).iters == 2 and ProfileFacts.of(t).iters == 1  # t unchanged
