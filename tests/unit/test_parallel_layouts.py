"""Layouts: pipeline formulas, validation, and the iteration/memory model of one layout."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bertscope.analytic import ops
from bertscope.config import Optimizer, Precision, RunConfig
from bertscope.errors import BertscopeError
from bertscope.parallel import (
    Checkpoint,
    Cluster,
    Job,
    Layout,
    Schedule,
    Workload,
    ZeroStage,
    bubble_fraction,
    bubble_overhead,
    check_layout,
    evaluate,
    in_flight,
)
from bertscope.parallel.collectives import Collective
from bertscope.parallel.layouts import MEMORY_KEYS, SCHEDULES, TIME_KEYS, layout_arrays
from bertscope.parallel.memory import CHECKPOINTS, FULL_CODE, NONE_CODE, SELECTIVE_CODE
from bertscope.parallel.pipeline import GPIPE_CODE, INTERLEAVED_CODE, ONE_F_ONE_B_CODE
from bertscope.perf import load_profile, predict
from bertscope.presets import get_model

G, F1B, INT = Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED


def _workload(model: str, global_batch: int, seq: int) -> Workload:
    """A bf16 Adam workload (the run's batch is a template the job sets)."""
    return Workload(model=get_model(model), run=RunConfig(batch=1, seq=seq, precision="bf16"),
                    global_batch=global_batch)


def test_bubble_fraction_by_hand() -> None:
    # GPipe and 1F1B: (p - 1) / (m + p - 1); p = 4, m = 8: 3 / 11
    assert float(bubble_fraction(G, 4, 8)) == pytest.approx(3 / 11)
    assert float(bubble_fraction(F1B, 4, 8)) == pytest.approx(3 / 11)
    # p = 8, m = 1: 7 / 8 of the time idle
    assert float(bubble_fraction(F1B, 8, 1)) == pytest.approx(7 / 8)
    # interleaved, v = 2: the bubble shrinks to (p - 1)/v steps: 1.5 / (8 + 1.5) = 3 / 19
    assert float(bubble_fraction(INT, 4, 8, 2)) == pytest.approx(3 / 19)
    # no pipeline, no bubble
    assert float(bubble_fraction(F1B, 1, 8)) == 0.0


def test_bubble_overhead_by_hand() -> None:
    # Narayanan et al. 2021: bubble / ideal = (p - 1)/m = 3/8, interleaved (p - 1)/(v m) = 3/16
    assert float(bubble_overhead(F1B, 4, 8)) == pytest.approx(3 / 8)
    assert float(bubble_overhead(INT, 4, 8, 2)) == pytest.approx(3 / 16)


def test_in_flight_by_hand() -> None:
    # GPipe keeps all m = 8 micro-batches on every stage
    assert [float(x) for x in in_flight(G, 4, 8)] == [8.0, 8.0]
    # 1F1B: p = 4 on the first stage (3 warm-up forwards + 1), one on the last
    assert [float(x) for x in in_flight(F1B, 4, 8)] == [4.0, 1.0]
    # fewer micro-batches than stages: all of them
    assert [float(x) for x in in_flight(F1B, 4, 2)] == [2.0, 1.0]
    # interleaved p = 4, v = 2: first (v p + p - 1)/v = 11/2, Korthikanti's 1 + (p-1)/(pv)
    # = 1 + 3/8 times p = 5.5; last ((v - 1) p + 1)/v = 5/2
    assert [float(x) for x in in_flight(INT, 4, 8, 2)] == [5.5, 2.5]
    assert [float(x) for x in in_flight(F1B, 1, 8)] == [1.0, 1.0]


@pytest.mark.parametrize(("kw", "needle"), [
    (dict(tp=1, sequence_parallel=True), "needs tp > 1"),
    (dict(pp=1, schedule=INT, virtual_stages=2), "needs pp > 1"),
    (dict(pp=2, schedule=INT, virtual_stages=1), "virtual_stages >= 2"),
    (dict(pp=2, virtual_stages=2), "needs the interleaved"),
    (dict(pp=2, zero=2), "ZeRO-2/3"),
    (dict(zero=4), "ZeRO stage must be"),
    (dict(dp=0), "dp must be a positive integer"),
])
def test_layout_validates(kw, needle) -> None:
    with pytest.raises(BertscopeError, match=needle):
        Layout(**kw)


def test_recomputation_is_the_runs_not_the_layouts() -> None:
    # checkpoint and micro-batches moved from the layout to the run (one place each)
    with pytest.raises(BertscopeError, match="unknown checkpoint"):
        RunConfig(checkpoint="some")
    with pytest.raises(TypeError):
        Layout(checkpoint="full")
    with pytest.raises(TypeError):
        Layout(micro_batches=2)


@pytest.fixture(scope="module")
def job() -> Workload:
    return _workload("bert-base", 64, 128)


@pytest.fixture(scope="module")
def cluster16() -> Cluster:
    return Cluster.build("a100", 16)


@pytest.mark.parametrize(("kw", "micro_batches", "needle"), [
    (dict(dp=8), 1, "cluster has 16 devices"),
    (dict(dp=16), 3, "not divisible by dp x micro-batches"),
    (dict(dp=16), 0, "micro_batches must be a positive integer"),
    (dict(dp=16), np.int64(2), None),  # a search frame's numpy micro-batches
    (dict(dp=4, tp=4, pp=1), 1, None),
    (dict(dp=2, tp=8), 1, "does not divide"),
    (dict(dp=2, pp=8), 1, "do not split"),
    (dict(dp=4, pp=4, schedule=INT, virtual_stages=3), 2, "multiple of pp"),
])
def test_check_layout(job, cluster16, kw, micro_batches, needle) -> None:
    # the job checks itself against the model and run (Workload.job builds it); check_layout
    # the device count; both raise the same one-line error type
    if needle is None:
        check_layout(job.job(Layout(**kw), micro_batches), cluster16)
    else:
        with pytest.raises(BertscopeError, match=needle):
            check_layout(job.job(Layout(**kw), micro_batches), cluster16)


def test_one_device_matches_the_performance_and_memory_models() -> None:
    job = _workload("bert-base", 8, 128)
    r = evaluate(job.job(Layout()), Cluster.build("a100", 1))
    table = ops("bert-base", batch=8, seq=128, precision="bf16")
    pred = predict(table, load_profile("a100"))
    assert r.iteration_s == pytest.approx(pred.export_meta()["prediction"]["time_s"], rel=1e-9)
    assert r.time["optimizer_s"] == pytest.approx(
        pred.df.loc[pred.df["phase"] == "optimizer", "time_s"].sum(), rel=1e-9)
    assert r.memory_bytes == pytest.approx(table.export_meta()["memory"]["peak"], rel=1e-12)


def test_parts_add_up(job, cluster16) -> None:
    layout = Layout(dp=2, tp=4, pp=2, zero=ZeroStage.OPTIMIZER, sequence_parallel=True)
    r = evaluate(job.job(layout, 4, Checkpoint.SELECTIVE), cluster16)
    assert sum(r.time[k] for k in TIME_KEYS) == pytest.approx(r.iteration_s)
    assert sum(r.memory[k] for k in MEMORY_KEYS) == pytest.approx(r.memory_bytes)
    assert r.tokens_per_s == pytest.approx(64 * 128 / r.iteration_s)
    assert 0 < r.time["recompute_s"] < r.time["compute_s"]
    assert r.micro_batch == 64 // (2 * 4)
    # bubble: (p - 1) / (m + p - 1) = 1/5 of the pipeline's time
    assert r.bubble_fraction == pytest.approx(1 / 5)
    for key in ("tp_comm_s", "pp_comm_s", "bubble_s", "dp_comm_s"):
        assert r.time[key] > 0, key


def test_each_parallelism_brings_its_own_costs(job, cluster16) -> None:
    dp = evaluate(job.job(Layout(dp=16)), cluster16)
    assert dp.time["tp_comm_s"] == dp.time["pp_comm_s"] == dp.time["bubble_s"] == 0
    tp = evaluate(job.job(Layout(dp=4, tp=4)), cluster16)
    assert tp.time["tp_comm_s"] > 0 and tp.time["pp_comm_s"] == 0
    pp = evaluate(job.job(Layout(dp=4, pp=4), 4), cluster16)
    assert pp.time["pp_comm_s"] > 0 and pp.time["bubble_s"] > 0
    assert pp.memory["weights"] < dp.memory["weights"]


def test_tensor_parallel_splits_compute_imperfectly() -> None:
    job = _workload("bert-base", 16, 128)
    one = evaluate(job.job(Layout()), Cluster.build("a100", 1))
    four = evaluate(job.job(Layout(tp=4)), Cluster.build("a100", 4))
    # replicated layernorm/dropout/residual work and smaller, less efficient GEMMs: a rank
    # does more than a quarter of the work, yet less than all of it
    assert one.time["compute_s"] / 4 < four.time["compute_s"] < one.time["compute_s"]
    sp = evaluate(job.job(Layout(tp=4, sequence_parallel=True)), Cluster.build("a100", 4))
    assert one.time["compute_s"] / 4 < sp.time["compute_s"] < four.time["compute_s"]


def test_recomputation_trades_time_for_memory(job, cluster16) -> None:
    runs = {ck: evaluate(job.job(Layout(dp=4, tp=4), checkpoint=ck), cluster16)
            for ck in Checkpoint}
    none, sel, full = (runs[c] for c in (Checkpoint.NONE, Checkpoint.SELECTIVE,
                                         Checkpoint.FULL))
    assert none.time["recompute_s"] == 0 < sel.time["recompute_s"] < full.time["recompute_s"]
    assert none.memory["activations"] > sel.memory["activations"] > full.memory["activations"]
    # full recomputation reruns the forward's tensor-parallel all-reduces too (4 -> 6 per layer)
    assert full.time["tp_comm_s"] > sel.time["tp_comm_s"] == none.time["tp_comm_s"]


def test_sequence_parallel_keeps_ring_volume_and_cuts_memory(job) -> None:
    cluster = Cluster.build("a100", 16)
    ring = Cluster(profile=cluster.profile, devices=16,
                   topology=cluster.topology.__class__(
                       name="ring", devices_per_node=8, intra=cluster.topology.intra,
                       inter=cluster.topology.inter, algorithm="ring"))
    off = evaluate(job.job(Layout(dp=4, tp=4)), ring)
    on = evaluate(job.job(Layout(dp=4, tp=4, sequence_parallel=True)), ring)
    # ring all-reduce = ring reduce-scatter + ring all-gather; backward gathers the column-
    # parallel GEMMs' sharded input again (Megatron-LM): 2 all-gathers more per layer
    b, m = job.global_batch // 4, job.model
    ag = ring.topology.time(Collective.ALL_GATHER, b * job.seq * m.hidden * 2, 4)
    assert on.time["tp_comm_s"] == pytest.approx(off.time["tp_comm_s"]
                                                 + m.num_layers * 2 * ag)
    assert on.memory["activations"] < off.memory["activations"]
    assert on.time["compute_s"] < off.time["compute_s"]


def test_zero_shards_the_optimizer(job, cluster16) -> None:
    r = {z: evaluate(job.job(Layout(dp=16, zero=z)), cluster16) for z in ZeroStage}
    assert r[ZeroStage.OPTIMIZER].time["optimizer_s"] == pytest.approx(
        r[ZeroStage.NONE].time["optimizer_s"] / 16)
    assert r[ZeroStage.OPTIMIZER].memory["optimizer_states"] == pytest.approx(
        r[ZeroStage.NONE].memory["optimizer_states"] / 16)
    assert r[ZeroStage.PARAMETERS].time["dp_comm_s"] > r[ZeroStage.NONE].time["dp_comm_s"]


def test_memory_that_does_not_fit() -> None:
    job = Workload(model=get_model("bert-large"),  # V100 runs fp16 (no bf16)
                   run=RunConfig(batch=1, seq=512, precision="fp16"), global_batch=4096)
    r = evaluate(job.job(Layout()), Cluster.build("v100", 1))
    assert not r.fits and r.memory_bytes > r.memory_capacity


def test_workload_validates() -> None:
    with pytest.raises(BertscopeError, match="global_batch"):
        Workload(model=get_model("bert-base"), run=RunConfig(batch=1, seq=128),
                 global_batch=0)
    with pytest.raises(BertscopeError, match="exceeds"):
        Workload(model=get_model("bert-base"), run=RunConfig(batch=1, seq=1024),
                 global_batch=8)
    with pytest.raises(BertscopeError, match="devices"):
        Cluster.build("a100", 0)


def test_workload_carries_the_typed_run() -> None:
    run = RunConfig(batch=7, seq=64, precision="fp16", optimizer="lamb", dropout=False,
                    micro_batches=3, masked_lm_only=True)
    job = Workload(model=get_model("bert-base"), run=run, global_batch=32)
    assert (job.seq, job.precision, job.optimizer) == (64, Precision.FP16, Optimizer.LAMB)
    assert job.tokens == 32 * 64
    # the run's batch and micro-batches are a template: the workload keeps one sequence and
    # one micro-batch, and a micro-batch's settings replace them
    assert (job.run.batch, job.run.micro_batches) == (1, 1)
    one = job.run_for(4)
    assert (one.batch, one.micro_batches) == (4, 1)
    assert replace(one, batch=7, micro_batches=3) == run
    # hashable and equal by value (it keys the compute-table cache)
    same = Workload(model=get_model("bert-base"), run=run, global_batch=32)
    assert same == job and hash(same) == hash(job)


def test_the_run_template_does_not_change_results(cluster16) -> None:
    layout = Layout(dp=4, tp=2, pp=2)
    runs = [RunConfig(batch=1, seq=128, precision="bf16"),
            RunConfig(batch=5, seq=128, precision="bf16", micro_batches=4,
                      checkpoint="full")]
    a, b = (evaluate(Workload(model=get_model("bert-base"), run=r, global_batch=64).job(
        layout, 2), cluster16) for r in runs)
    assert a == b


def test_a_workload_spread_equals_the_job_declared_directly(job, cluster16) -> None:
    # global batch 64 over dp = 2 replicas x 4 micro-batches: 64 / (2 x 4) = 8 sequences
    # per micro-batch; tp 4 x pp 2 x dp 2 = 16 devices
    layout = Layout(dp=2, tp=4, pp=2, zero=ZeroStage.OPTIMIZER, sequence_parallel=True)
    spread = job.job(layout, 4, Checkpoint.SELECTIVE)
    direct = Job(model=get_model("bert-base"),
                 run=RunConfig(batch=8, seq=128, precision="bf16", micro_batches=4,
                               checkpoint="selective"),
                 layout=layout)
    assert spread == direct
    assert direct.global_batch == 8 * 4 * 2 == 64
    assert Workload.of(direct) == job
    a, b = evaluate(spread, cluster16), evaluate(direct, cluster16)
    assert a == b and a.micro_batch == 8
    assert a.job.label() == "dp2 tp4 sp pp2 1f1b m4 zero1 selective"


def test_workload_keeps_one_sequence_without_recomputation() -> None:
    # a workload's run is per sequence: the job built from it chooses batch, micro-batches
    # and recomputation (64 / (2 x 4) = 8 sequences per micro-batch)
    run = RunConfig(batch=4, seq=128, checkpoint="full", micro_batches=2)
    w = Workload(model=get_model("bert-base"), run=run, global_batch=64)
    assert (w.run.batch, w.run.micro_batches, w.run.checkpoint) == (1, 1, Checkpoint.NONE)
    j = w.job(Layout(dp=2), 4, "selective")
    assert (j.run.batch, j.run.micro_batches, j.run.checkpoint) == (8, 4, Checkpoint.SELECTIVE)


@pytest.mark.parametrize(("kw", "needle"), [
    (dict(run=dict(batch=1, seq=128)), "run must be a RunConfig"),
    (dict(model="bert-base"), "model must be a ModelConfig"),
    (dict(global_batch=2.5), "global_batch must be a positive integer"),
])
def test_workload_rejects(kw, needle) -> None:
    args = dict(model=get_model("bert-base"), run=RunConfig(batch=1, seq=128), global_batch=8)
    with pytest.raises(BertscopeError, match=needle):
        Workload(**{**args, **kw})


def test_array_codes_come_from_the_enums() -> None:
    assert [s.code for s in Schedule] == list(range(len(SCHEDULES)))
    assert [c.code for c in Checkpoint] == list(range(len(CHECKPOINTS)))
    assert (GPIPE_CODE, ONE_F_ONE_B_CODE, INTERLEAVED_CODE) == (0, 1, 2)
    assert (NONE_CODE, SELECTIVE_CODE, FULL_CODE) == (0, 1, 2)
    arrays = layout_arrays(Job(model=get_model("bert-base"),
                               run=RunConfig(checkpoint=Checkpoint.FULL, micro_batches=2),
                               layout=Layout(pp=2, schedule=INT, virtual_stages=2)))
    assert int(arrays["schedule"][0]) == INTERLEAVED_CODE
    assert int(arrays["checkpoint"][0]) == FULL_CODE
    # a name or a code array: the same bubble
    assert float(bubble_fraction("interleaved", 4, 8, 2)) == float(
        bubble_fraction(np.array([INTERLEAVED_CODE]), 4, 8, 2)[0])
    with pytest.raises(BertscopeError, match="unknown schedule"):
        bubble_fraction("zigzag", 4, 8)


def test_layout_takes_numpy_integers() -> None:
    layout = Layout(dp=np.int64(2), tp=np.int32(2))
    assert (layout.dp, layout.tp) == (2, 2) and type(layout.dp) is int
