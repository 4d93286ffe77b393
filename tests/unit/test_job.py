"""The job declared once (`bertscope.job`): model + run + layout, checked on construction,
round-tripped through its dict, and the one spelling of recomputation (`Checkpoint`) in the
analytic model, selective included."""

from __future__ import annotations

import numpy as np
import pytest

from bertscope.analytic import MemoryEstimate, ops
from bertscope.config import Checkpoint, RunConfig
from bertscope.errors import BertscopeError
from bertscope.job import SINGLE_DEVICE, Job, Layout, Schedule, ZeroStage
from bertscope.presets import get_model
from bertscope.taxonomy import Category, Phase, Sublayer, SublayerGroup


def test_global_batch_is_batch_times_micro_batches_times_replicas() -> None:
    job = Job(model=get_model("bert-large"), run=RunConfig(batch=8, seq=128, micro_batches=4),
              layout=Layout(dp=64, tp=4))
    assert job.global_batch == 8 * 4 * 64 == 2048
    assert job.devices == 64 * 4 == 256


@pytest.mark.parametrize(("layout", "run", "match"), [
    (Layout(tp=5), {}, "tp 5 does not divide"),           # bert-base: 12 heads
    (Layout(pp=5), {}, "do not split"),                   # 12 layers
    (Layout(pp=2, schedule="interleaved", virtual_stages=2), {"micro_batches": 3},
     "multiple of pp"),
    (SINGLE_DEVICE, {"seq": 513}, "exceeds"),             # 512 positions
])
def test_the_job_checks_its_parts_together(layout: Layout, run: dict, match: str) -> None:
    with pytest.raises(BertscopeError, match=match):
        Job(model=get_model("bert-base"), run=RunConfig(**run), layout=layout)


def test_layout_checks_itself() -> None:
    with pytest.raises(BertscopeError, match="needs tp > 1"):
        Layout(sequence_parallel=True)
    with pytest.raises(BertscopeError, match="ZeRO-2/3"):
        Layout(pp=2, zero=2)
    with pytest.raises(BertscopeError, match="interleaved"):
        Layout(virtual_stages=2)
    assert Layout(zero=1).zero is ZeroStage.OPTIMIZER
    assert Layout.fill(16, tp=4, schedule="interleaved", pp=2) == Layout(
        dp=2, tp=4, pp=2, schedule=Schedule.INTERLEAVED, virtual_stages=2)


def test_run_config_refuses_non_booleans_and_old_spelling() -> None:
    with pytest.raises(BertscopeError, match="fusion must be true or false"):
        RunConfig(fusion="yes")
    with pytest.raises(TypeError):
        RunConfig(checkpointing=True)  # one spelling: checkpoint
    assert RunConfig(checkpoint="selective").checkpoint is Checkpoint.SELECTIVE


def test_job_round_trips_with_and_without_a_layout() -> None:
    single = Job(model=get_model("roberta-base"), run=RunConfig(batch=2, seq=64,
                                                                precision="bf16"))
    assert "layout" not in single.as_dict()
    assert Job.from_dict(single.as_dict()) == single
    spread = Job(model=get_model("bert-base"), run=RunConfig(micro_batches=4),
                 layout=Layout(dp=2, tp=2, pp=2, zero=1))
    assert Job.from_dict(spread.as_dict()) == spread
    assert spread.as_dict()["layout"]["zero"] == 1
    doc = single.as_dict()
    doc["run"]["speed"] = 1
    with pytest.raises(BertscopeError, match="no field 'speed'"):
        Job.from_dict(doc)


def test_records_saved_before_checkpoint_still_load() -> None:
    doc = Job(model=get_model("bert-tiny"), run=RunConfig()).as_dict()
    del doc["run"]["checkpoint"]
    doc["run"]["checkpointing"] = True
    assert Job.from_dict(doc).run.checkpoint is Checkpoint.FULL


def test_selective_recomputation_drops_the_attention_cores_memory_bound_saves() -> None:
    """bert-tiny (L = 2, a = 2 heads), batch 2 x seq 16, fp32, dropout on: each layer's
    attention core keeps e = a s^2 b = 2 x 16^2 x 2 = 1,024 score elements three times over:
    the softmax output (4 bytes each), the dropout mask (1) and the dropout output (4) —
    Korthikanti et al.'s 5as/h term in fp32 — 9 x 1,024 = 9,216 bytes per layer, 18,432 for
    both, which selective recomputation does not keep."""
    m = get_model("bert-tiny")
    none = ops(m, batch=2, seq=16, checkpoint="none")
    sel = ops(m, batch=2, seq=16, checkpoint="selective")
    assert (MemoryEstimate.of(none).activations - MemoryEstimate.of(sel).activations
            == 18_432)
    c = sel.columns
    rerun = c["phase"] == Phase.RECOMPUTE
    subs = {Sublayer(s) for s in c["sublayer"][rerun]}
    assert subs and all(s.group is SublayerGroup.ATTENTION_CORE for s in subs)
    # the rerun's batched GEMMs are the score and context products of both layers:
    # 2 x (2 b a s^2 d) = 2 x (2 x 2 x 2 x 16^2 x 64) = 262,144 FLOPs per layer
    bmm = rerun & (c["category"] == Category.BATCHED_GEMM)
    assert float(np.sum(c["flops"][bmm] * c["count"][bmm])) == 2 * 262_144
    full = ops(m, batch=2, seq=16, checkpoint="full")
    f = full.columns
    fwd, again = f["phase"] == Phase.FORWARD, f["phase"] == Phase.RECOMPUTE
    layer_fwd = fwd & (f["layer"] >= 0)
    assert np.sum(f["flops"][again] * f["count"][again]) == np.sum(
        f["flops"][layer_fwd] * f["count"][layer_fwd])
