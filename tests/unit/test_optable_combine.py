"""`combine`: one op table from several (ranks, rounds), rows keyed by what names an op site."""

from __future__ import annotations

import math

import pytest

from bertscope.analytic import build
from bertscope.config import RunConfig
from bertscope.errors import BertscopeError
from bertscope.optable import Combine, Op, OpTable, Provenance, combine
from bertscope.optable.combine import KEY
from bertscope.taxonomy import Category, Phase, PipelineStage, Sublayer, TensorSplit
from tests.conftest import tiny


def op(name: str, time_s: float, count: int = 1, **kw: object) -> Op:
    return Op(name, 0, Sublayer.FFN1, Category.ELEMENTWISE, Phase.FORWARD, elements=8,
              count=count, time_s=time_s, **kw)  # type: ignore[arg-type]


def rows(t: OpTable) -> dict[str, dict[str, object]]:
    return {r["name"]: r for r in t.df.to_dict(orient="records")}


def test_key_is_name_place_and_shape() -> None:
    assert KEY == ("name", "layer", "sublayer", "category", "phase", "m", "n", "k", "batch",
                   "elements")
    # same name, other shape: two rows
    a = OpTable.from_ops([op("aten::add", 1.0), op("aten::add", 2.0)._replace(elements=16)])
    assert len(combine([a, a])) == 2


def test_mean_over_ranks_counts_a_missing_row_as_zero() -> None:
    r0 = OpTable.from_ops([op("aten::add", 0.010, count=3, flops=100.0, bytes_read=8.0),
                           op("aten::mul", 0.004, count=2)], (Provenance("rank 0"),))
    r1 = OpTable.from_ops([op("aten::add", 0.030, count=2, flops=300.0, bytes_read=24.0)],
                          (Provenance("rank 1"),))
    mean = combine([r0, r1])  # Combine.MEAN is the default
    d = rows(mean)
    assert list(d) == ["aten::add", "aten::mul"]  # order of first appearance
    assert d["aten::add"]["time_s"] == pytest.approx(0.020)
    assert d["aten::add"]["flops"] == pytest.approx(200.0)
    assert d["aten::add"]["bytes_read"] == pytest.approx(16.0)
    assert d["aten::add"]["count"] == 2  # round(5 / 2), Python's rounding
    assert d["aten::mul"]["time_s"] == pytest.approx(0.002)
    assert d["aten::mul"]["count"] == 1  # round(2 / 2)
    assert mean.records == (Provenance("rank 0"),)  # the first table's records unless given
    assert combine([r0, r1], "mean", records=[Provenance("x")]).records == (Provenance("x"),)
    # the intensity column is recomputed from the averaged figures
    assert d["aten::add"]["intensity"] == pytest.approx(200.0 / 16.0)


def test_mean_max_count_keeps_the_largest_count() -> None:
    r0 = OpTable.from_ops([op("aten::add", 0.010, count=3), op("aten::mul", 0.004, count=4)])
    r1 = OpTable.from_ops([op("aten::add", 0.030, count=2)])
    d = rows(combine([r0, r1], Combine.MEAN_MAX_COUNT))
    assert (d["aten::add"]["count"], d["aten::mul"]["count"]) == (3, 4)
    assert d["aten::mul"]["time_s"] == pytest.approx(0.002)


def test_median_over_rounds_takes_time_only() -> None:
    rounds = [OpTable.from_ops([op("aten::add", t, count=2, bytes_read=b)] +
                               ([op("aten::mul", m)] if m is not None else []))
              for t, b, m in ((1.0, 64.0, 0.5), (3.0, 99.0, None), (100.0, 1.0, 0.7))]
    d = rows(combine(rounds, Combine.MEDIAN))
    assert d["aten::add"]["time_s"] == 3.0
    assert d["aten::mul"]["time_s"] == 0.5  # median of 0.5, 0 (absent), 0.7
    assert (d["aten::add"]["count"], d["aten::add"]["bytes_read"]) == (2, 64.0)  # first round's


def test_nan_time_counts_nothing_and_roles_are_kept_or_defaulted() -> None:
    a = OpTable.from_ops([op("aten::mm", math.nan, tp_split=TensorSplit.COLUMN)])
    b = OpTable.from_ops([op("aten::mm", 0.2, tp_split=TensorSplit.COLUMN)])
    assert rows(combine([a, b]))["aten::mm"]["time_s"] == pytest.approx(0.1)
    median = rows(combine([a, b], Combine.MEDIAN))["aten::mm"]
    assert median["tp_split"] == TensorSplit.COLUMN  # the first appearance's roles
    mean = rows(combine([a, b]))["aten::mm"]
    assert (mean["tp_split"], mean["pp_stage"]) == (TensorSplit.REPLICATED, PipelineStage.STACK)


def test_tables_without_role_columns_still_combine() -> None:
    """Rows read from files written before tp_split and pp_stage existed."""
    import pandas as pd

    old = OpTable(pd.DataFrame([{f: v for f, v in op("aten::add", 1.0)._asdict().items()
                                 if f not in ("tp_split", "pp_stage")}]))
    new = OpTable.from_ops([op("aten::add", 3.0)])
    for how in Combine:
        d = rows(combine([old, new], how))["aten::add"]
        # mean and median of 1 and 3: 2; the least: 1
        assert d["time_s"] == pytest.approx(1.0 if how is Combine.MIN else 2.0)
        assert (d["tp_split"], d["pp_stage"]) == (TensorSplit.REPLICATED, PipelineStage.STACK)


def test_plain_strings_and_enum_members_are_one_key() -> None:
    a = OpTable.from_ops([op("aten::add", 1.0)])
    b = OpTable.from_ops([Op("aten::add", 0, "ffn1", "elementwise", "forward",  # type: ignore[arg-type]
                             elements=8, time_s=3.0)])
    assert len(combine([a, b])) == 1


def test_edges() -> None:
    assert len(combine([], records=[Provenance("a")])) == 0
    one = OpTable.from_ops([op("aten::add", 1.0, count=3)])
    assert rows(combine([one], Combine.MEAN))["aten::add"]["count"] == 3
    with pytest.raises(BertscopeError, match="unknown combination 'sum'"):
        combine([one], "sum")
    # the tables' common job is kept; differing jobs give none
    t1, t2 = build(tiny(), RunConfig(batch=2, seq=16)), build(tiny(), RunConfig(batch=4, seq=16))
    assert combine([t1, t1]).job == t1.job
    assert combine([t1, t2]).job is None


def test_min_is_the_least_over_the_tables_that_timed_a_row() -> None:
    rounds = [OpTable.from_ops([op("aten::mm", 3.0), op("aten::add", 5.0)]),
              OpTable.from_ops([op("aten::mm", 1.0), op("aten::mul", math.nan)]),
              OpTable.from_ops([op("aten::mm", 2.0), op("aten::add", 4.0),
                                op("aten::mul", 2.0)])]
    d = rows(combine(rounds, Combine.MIN))
    assert d["aten::mm"]["time_s"] == 1.0  # least of 3, 1, 2
    assert d["aten::add"]["time_s"] == 4.0  # least of 5 and 4; round 1 missed it
    assert d["aten::mul"]["time_s"] == 2.0  # round 1 did not time it (NaN)
    assert list(d) == ["aten::mm", "aten::add", "aten::mul"]  # order of first appearance
