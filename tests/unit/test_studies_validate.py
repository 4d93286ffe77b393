"""Validation's reading side on the saved measurements of the first CPU validation
(tests/data/measured/validate_cpu, written before op-table rows had tp_split and pp_stage):
loading, combining rounds, comparing, all without torch."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from bertscope.config import Checkpoint
from bertscope.errors import BertscopeError
from bertscope.optable import Provenance
from bertscope.perf.efficiency import load_profile
from bertscope.studies.measured import MeasuredRun, combine_rounds, load_result, table_from_doc
from bertscope.studies.validate import compare
from bertscope.taxonomy import PipelineStage, TensorSplit
from tests.saved_measurements import saved_measurement

SAVED = saved_measurement("validate_cpu")
STEM, CONFIG = "bert-small-4-256", "bert-small:4:256"


def rounds() -> list[Path]:
    return [SAVED / f"{STEM}.round{i}.json" for i in range(3)]


def test_an_old_saved_result_loads_with_role_defaults() -> None:
    doc = json.loads(rounds()[0].read_text())
    assert "tp_split" not in doc["rows"][0]  # written before the role columns existed
    r = load_result(rounds()[0])
    assert isinstance(r, MeasuredRun)
    assert len(r.table) == len(doc["rows"])
    assert set(r.table.df["tp_split"]) == {TensorSplit.REPLICATED}
    assert set(r.table.df["pp_stage"]) == {PipelineStage.STACK}
    assert r.table.df["time_s"].sum() == pytest.approx(sum(x["time_s"] for x in doc["rows"]))
    assert Provenance.of(r.analytic).producer == "analytic"
    assert r.analytic.run.batch == 4 and r.analytic.run.seq == 256
    assert list(r.facts.iteration_times_s) == doc["meta"]["iteration_times_s"]
    assert len(table_from_doc(doc)) == len(doc["rows"])
    # read and written again, the saved meta is the same (keys, order and values; the job
    # written as the config serializes it today, with the fields it gained since)
    again = table_from_doc(doc).export_meta()
    assert list(again) == list(doc["meta"])
    rest = {k: v for k, v in doc["meta"].items() if k not in ("model", "run")}
    assert {k: v for k, v in json.loads(json.dumps(again)).items() if k in rest} == rest


def test_unreadable_results_are_one_error(tmp_path: Path) -> None:
    with pytest.raises(BertscopeError, match="no such file"):
        load_result(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(BertscopeError, match="not a bertscope profile result"):
        load_result(bad)


def test_rounds_combine_to_each_rows_median() -> None:
    docs = [json.loads(p.read_text()) for p in rounds()]
    c = combine_rounds([load_result(p) for p in rounds()])
    assert isinstance(c, MeasuredRun)
    assert c.facts.rounds == 3
    every = [t for d in docs for t in d["meta"]["iteration_times_s"]]
    assert list(c.facts.iteration_times_s) == every
    assert c.facts.iteration_s == statistics.median(every)
    assert c.facts.op_time_s == pytest.approx(c.table.df["time_s"].sum())

    def key(r: dict[str, object]) -> tuple[object, ...]:
        return tuple(r[f] for f in ("name", "layer", "sublayer", "category", "phase", "m",
                                    "n", "k", "batch", "elements"))

    per_round = [{key(r): r["time_s"] for r in d["rows"]} for d in docs]
    got = {key(r): r["time_s"] for r in c.table.df.to_dict(orient="records")}
    assert set(got) == set().union(*per_round)
    for k, t in got.items():
        assert t == statistics.median(p.get(k, 0.0) for p in per_round)
    one = load_result(rounds()[0])
    assert combine_rounds([one]) is one


def test_rounds_measured_with_the_minimum_combine_to_the_least() -> None:
    """Rounds whose meta says statistic "min": each row's least over the rounds that timed
    it, the iteration the least of all iterations."""
    runs = [load_result(p) for p in rounds()]
    runs = [MeasuredRun(table=r.table.with_records(replace(r.facts, statistic="min")),
                        analytic=r.analytic) for r in runs]
    docs = [json.loads(p.read_text()) for p in rounds()]
    c = combine_rounds(runs)
    assert c.facts.iteration_s == min(t for d in docs for t in d["meta"]["iteration_times_s"])
    fields = ("name", "layer", "sublayer", "category", "phase", "m", "n", "k", "batch",
              "elements")
    per_round = [{tuple(str(r[f]) for f in fields): r["time_s"] for r in d["rows"]}
                 for d in docs]
    got = c.table.df.to_dict(orient="records")
    assert len(got) == len(set().union(*per_round))
    for r in got:
        k = tuple(str(r[f]) for f in fields)
        assert r["time_s"] == min(p[k] for p in per_round if k in p)


def test_saved_validation_is_reproduced(tmp_path: Path) -> None:
    """The recorded validation of this config, from its saved measurements and profile."""
    report = json.loads(saved_measurement("validate_cpu.json").read_text())
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(report["profile"]))
    got = compare(combine_rounds([load_result(p) for p in rounds()]), load_profile(path))
    want = next(r for r in report["results"] if r["config"] == CONFIG)
    assert got["config"] == CONFIG
    for figure in ("measured_iteration_s", "measured_op_s", "predicted_s", "error",
                   "predicted_op_s", "op_error", "max_share_error_pp"):
        assert got[figure] == pytest.approx(want[figure], rel=1e-9, abs=1e-12), figure
    assert got["per_op_mape"] == pytest.approx(want["per_op_mape"], rel=1e-9)


def test_specs_carry_the_knobs_the_paper_varies() -> None:
    from bertscope.errors import BertscopeError
    from bertscope.studies.measured import parse_specs

    a, b = parse_specs("bert-base:2:128:bf16:lamb:mb4:ckpt, bert-mini:8:64:nodropout:masked")
    _, run = a.configs()
    assert (run.precision.value, run.optimizer.value, run.micro_batches, run.checkpoint) \
        == ("bf16", "lamb", 4, Checkpoint.FULL)
    assert str(a) == "bert-base:2:128:bf16:lamb:mb4:ckpt"
    _, run_b = b.configs()
    assert not run_b.dropout and run_b.masked_lm_only
    assert [str(s) for s in parse_specs(str(a))] == [str(a)]  # round trip
    with pytest.raises(BertscopeError, match="unknown field 'fp64'"):
        parse_specs("bert-base:2:128:fp64")


R9 = saved_measurement("validate_cpu_r9") / "bert-mini-16-64-bf16.round0.json"


def test_retake_takes_another_statistic_from_the_saved_iterations() -> None:
    """A result saved with the minimum statistic and its per-iteration row times, taken
    again as the median: each row the median of its saved iterations (Python's statistics
    module), the iteration the median of the iteration times."""
    from bertscope.studies.measured import retake

    doc = json.loads(R9.read_text())
    assert doc["meta"]["statistic"] == "min"
    saved = load_result(R9)
    same = retake(saved, "min")  # taken with that statistic already: the same rows
    assert same.table.df["time_s"].tolist() == pytest.approx(
        saved.table.df["time_s"].tolist(), abs=6e-11)  # rows keep 10 decimals
    per = doc["meta"]["row_times_s"]
    gaps = [t - sum(r[i] for r in per) for i, t in enumerate(doc["meta"]["iteration_times_s"])]
    # the least iteration as the rows' least plus the least time between ops
    assert same.facts.iteration_s == pytest.approx(
        sum(min(t for t in r if t > 0) for r in per) + min(gaps))
    med = retake(saved, "median")
    assert med.facts.statistic == "median"
    assert med.facts.iteration_s == statistics.median(doc["meta"]["iteration_times_s"])
    times = med.table.df["time_s"].tolist()
    for t, per in zip(times, doc["meta"]["row_times_s"], strict=True):
        assert t == statistics.median(per)
    least = retake(med, "min")  # and back: the least over the iterations that ran a row
    for t, row in zip(least.table.df["time_s"].tolist(), doc["rows"], strict=True):
        assert t == pytest.approx(row["time_s"], abs=6e-11)  # rows keep 10 decimals
    old = load_result(rounds()[0])  # saved before per-iteration row times existed
    assert retake(old, "min") is old


def test_retake_refuses_row_times_that_do_not_match_the_rows() -> None:
    from bertscope.studies.measured import retake

    saved = load_result(R9)
    short = replace(saved.facts, row_times_s=saved.facts.row_times_s[:-1])
    saved = MeasuredRun(table=saved.table.with_records(short), analytic=saved.analytic)
    with pytest.raises(BertscopeError, match="row_times_s: expected a list of one entry"):
        retake(saved, "median")


def test_rounds_taken_with_the_minimum_add_the_least_time_between_ops() -> None:
    """Three saved rounds with per-iteration row times: the iteration is each row's least
    over all 15 iterations, summed, plus the least over them of (iteration - its rows)."""
    paths = [R9.with_name(f"bert-mini-16-64-bf16.round{i}.json") for i in range(3)]
    docs = [json.loads(p.read_text()) for p in paths]
    c = combine_rounds([load_result(p) for p in paths])
    fields = ("name", "layer", "sublayer", "category", "phase", "m", "n", "k", "batch",
              "elements")
    per_row: dict[tuple[str, ...], list[float]] = {}
    for d in docs:
        for row, times in zip(d["rows"], d["meta"]["row_times_s"], strict=True):
            per_row.setdefault(tuple(str(row[f]) for f in fields), []).extend(times)
    gaps = [t - sum(r[i] for r in d["meta"]["row_times_s"])
            for d in docs for i, t in enumerate(d["meta"]["iteration_times_s"])]
    rows = c.table.df["time_s"].sum()
    assert rows == pytest.approx(sum(min((t for t in r if t > 0), default=0.0)
                                     for r in per_row.values()), rel=1e-9)
    assert c.facts.iteration_s == pytest.approx(rows + min(gaps))
    assert c.facts.iteration_s < min(t for d in docs for t in d["meta"]["iteration_times_s"])
