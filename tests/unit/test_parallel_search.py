"""Layout search: enumeration, ranking, pinning, speed; and the `distributed` command."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bertscope import cli
from bertscope.config import RunConfig
from bertscope.errors import BertscopeError
from bertscope.parallel import (
    Checkpoint,
    Cluster,
    Schedule,
    SearchSpace,
    Workload,
    ZeroStage,
    check_layout,
    evaluate,
    search,
)
from bertscope.parallel.layouts import clear_compute_tables
from bertscope.parallel.search import divisors, enumerate_layouts, row_job
from bertscope.presets import get_model
from tests.conftest import tiny


@pytest.fixture(scope="module")
def workload() -> Workload:
    return Workload(model=tiny(num_layers=4, heads=4),
                    run=RunConfig(batch=1, seq=32, precision="bf16"), global_batch=16)


def test_divisors() -> None:
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(1) == [1]


def test_every_enumerated_layout_is_valid_and_unique(workload) -> None:
    cluster = Cluster.build("a100", 8)
    result = search(workload, cluster)
    frame = result.frame
    keys = ["dp", "tp", "pp", "sp", "schedule", "virtual_stages", "micro_batches", "zero",
            "checkpoint"]
    assert not frame.duplicated(keys).any()
    for job in result.jobs():
        check_layout(job, cluster)  # every job checked itself on construction
        assert job.global_batch == 16 and Workload.of(job) == workload
    assert (frame["dp"] * frame["tp"] * frame["pp"] == 8).all()
    assert set(frame["tp"]) == {1, 2, 4}  # divides 4 heads and 8 devices
    assert set(frame["pp"]) == {1, 2, 4}  # divides 4 layers
    # no ZeRO without data parallelism, no ZeRO-2/3 with pipeline stages
    assert (frame.loc[frame["dp"] == 1, "zero"] == 0).all()
    assert (frame.loc[frame["pp"] > 1, "zero"] <= 1).all()
    assert not frame.loc[frame["tp"] == 1, "sp"].any()
    inter = frame[frame["schedule"] == "interleaved"]
    assert len(inter) and (inter["micro_batches"] % inter["pp"] == 0).all()


def test_ranking_and_best(workload) -> None:
    cluster = Cluster.build("a100", 8)
    result = search(workload, cluster)
    frame = result.frame
    fits = frame["fits"].to_numpy()
    assert fits[: result.fitting].all() and not fits[result.fitting:].any()
    tps = frame.loc[frame["fits"], "tokens_per_s"].to_numpy()
    assert np.all(np.diff(tps) <= 0)
    best = result.best()
    assert best is not None and best == result.jobs(1)[0]
    r = evaluate(best, cluster)
    assert r.tokens_per_s == pytest.approx(tps[0], rel=1e-12)
    assert r.memory_bytes == pytest.approx(frame.loc[0, "memory_bytes"], rel=1e-12)
    assert row_job(workload, frame.iloc[3].to_dict()) == result.jobs(4)[3]
    # a row's micro-batches and recomputation are the job's run; its micro-batch the run's batch
    row, job = frame.iloc[3], result.jobs(4)[3]
    assert (job.run.micro_batches, job.run.checkpoint.value, job.run.batch) == (
        row["micro_batches"], row["checkpoint"], row["micro_batch"])


def test_pinned_dimensions(workload) -> None:
    cluster = Cluster.build("a100", 8)
    space = SearchSpace(tp=2, checkpoint=Checkpoint.FULL, schedule=Schedule.GPIPE,
                        sequence_parallel=True)
    frame = search(workload, cluster, space).frame
    assert set(frame["tp"]) == {2} and set(frame["checkpoint"]) == {"full"}
    assert frame["sp"].all()
    assert set(frame.loc[frame["pp"] > 1, "schedule"]) == {"gpipe"}
    with pytest.raises(BertscopeError, match="no valid layout"):
        search(workload, cluster, SearchSpace(tp=3))


@pytest.mark.parametrize(("kw", "needle"), [
    (dict(checkpoint="some"), "unknown checkpoint 'some'"),
    (dict(schedule="zigzag"), "unknown schedule 'zigzag'"),
    (dict(zero=5), "ZeRO stage must be"),
    (dict(tp=0), "tp must be a positive integer"),
])
def test_search_space_validates(kw, needle) -> None:
    with pytest.raises(BertscopeError, match=needle):
        SearchSpace(**kw)


def test_pinned_zero_stage_and_schedule_codes(workload) -> None:
    cluster = Cluster.build("a100", 8)
    arrays = enumerate_layouts(workload, cluster, SearchSpace(zero=ZeroStage.GRADIENTS))
    assert set(arrays["zero"]) == {int(ZeroStage.GRADIENTS)}
    assert set(arrays["pp"]) == {1}  # ZeRO-2 shards gradients every micro-batch: no pipeline
    arrays = enumerate_layouts(workload, cluster, SearchSpace(schedule=Schedule.INTERLEAVED))
    assert set(arrays["schedule"]) == {Schedule.INTERLEAVED.code}
    assert (arrays["micro_batches"] % arrays["pp"] == 0).all()


def test_ten_thousand_layouts_costed_in_one_search() -> None:
    """Every one of 13,020 layouts costed (its speed is bench/bench_distributed.py's, not a
    test's: no test asserts wall-clock time)."""
    # 12288 = 3 x 2^12 sequences has 26 divisors: 13,020 layouts on 64 devices
    workload = Workload(model=get_model("bert-large"),
                        run=RunConfig(batch=1, seq=128, precision="bf16"), global_batch=12288)
    cluster = Cluster.build("a100", 64)
    assert len(enumerate_layouts(workload, cluster)["dp"]) >= 10_000
    clear_compute_tables()  # time the whole search, compute table included
    result = search(workload, cluster)
    assert result.evaluated >= 10_000
    assert result.frame["iteration_s"].gt(0).all()


# -- the command -------------------------------------------------------------------------------
def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


BASE = ("distributed", "bert-base", "--devices", "16", "--device", "a100", "--global-batch",
        "256")


def test_cli_one_layout(capsys) -> None:
    rc, out, err = _run(capsys, *BASE, "--tp", "4", "--pp", "2", "--micro-batches", "4", "--sp",
                        "--checkpoint", "selective", "--zero", "1")
    assert rc == 0, err
    for needle in ("dp2 tp4 sp pp2 1f1b m4 zero1 selective", "Iteration time per device",
                   "pipeline bubble", "Memory per device", "of which recompute", "dgx-a100"):
        assert needle in out


def test_cli_search(capsys, tmp_path) -> None:
    path = tmp_path / "layouts.csv"
    rc, out, err = _run(capsys, *BASE, "--search", "--top", "3", "--pp", "1", "--output",
                        str(path))
    assert rc == 0, err
    assert "layouts in" in out and "Top 3 layouts" in out and "Best layout" in out
    frame = pd.read_csv(path)
    assert len(frame) > 3 and set(frame["pp"]) == {1}


@pytest.mark.parametrize(("argv", "needle"), [
    (("--tp", "5"), "does not divide"),
    (("--zero", "7"), "ZeRO stage must be 0, 1, 2 or 3, got 7"),
    (("--pp", "2", "--zero", "3"), "ZeRO-2/3"),
    (("--device", "a10"), "did you mean"),
    (("--output", "x.csv"), "--output x.csv writes the costed layouts of --search"),
    (("--format", "jsonl"), "--format jsonl writes the costed layouts of --search"),
    (("--search", "--top", "0"), "--top must be >= 1"),
    (("--inter", "ib-xdr"), "unknown link"),
])
def test_cli_errors_are_one_line(capsys, argv, needle) -> None:
    base = BASE[:4] + BASE[6:] if "--device" in argv else BASE  # an option is given once
    rc, _, err = _run(capsys, *base, *argv)
    assert rc == 2
    assert needle in err and err.count("\n") == 1 and err.startswith("bertscope: error:")


def test_cli_search_when_nothing_fits(capsys) -> None:
    rc, out, err = _run(capsys, "distributed", "bert-large", "--devices", "1", "--device",
                        "v100", "--global-batch", "1024", "--seq", "512", "--micro-batches", "1",
                        "--search", "--top", "2")
    assert rc == 0, err
    assert "no layout fits" in out and "smallest-memory" in out and "Best layout" not in out


def test_cli_takes_a_calibrated_profile(capsys, tmp_path) -> None:
    # fitted models hold dicts (per-phase GEMM factors, per-category bandwidth); the
    # distributed model caches by profile, so they must hash by value
    from bertscope.hardware import load_device
    from bertscope.perf import CategoryBandwidthEfficiency, DeviceProfile, GemmEfficiency, Overhead

    def fitted() -> DeviceProfile:
        return DeviceProfile(
            device=load_device("a100"),
            gemm=GemmEfficiency(max_fraction=0.7, half_saturation_flops=1e8,
                                per_phase={"forward": 0.9, "backward_weight": 1.1},
                                source="test fit"),
            bandwidth=CategoryBandwidthEfficiency(per_category={"dropout": [0.3, 0.0]},
                                                  max_fraction=0.8, source="test fit"),
            overhead=Overhead(seconds_per_launch=5e-6, host_seconds_per_launch=1e-6,
                              source="test fit"))

    assert hash(fitted()) == hash(fitted()) and fitted() == fitted()
    path = fitted().save(tmp_path / "fitted.json")
    rc, out, err = _run(capsys, "distributed", "bert-base", "--devices", "16", "--device",
                        str(path), "--global-batch", "256", "--tp", "2")
    assert rc == 0, err
    assert "Iteration time per device" in out
