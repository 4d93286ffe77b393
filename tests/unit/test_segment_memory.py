"""The segment memory (Transformer-XL, XLNet: the previous segment's hidden states, kept
between iterations without gradient) as its own term of the memory per device: one
device (`MemoryEstimate`, predict, sweep) and every layout (`distributed`), by hand
arithmetic: layers on the stage x sequences of the rank x mem_len x hidden x bytes."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from bertscope.analytic import MemoryEstimate, memory_estimate, ops
from bertscope.cli import main
from bertscope.config import RunConfig
from bertscope.parallel import Cluster, Layout, Workload, evaluate
from bertscope.parallel.layouts import MEMORY_KEYS
from bertscope.parallel.memory import segment_memory_per_device
from bertscope.presets import get_model
from bertscope.sweep import sweep


def _job(model: str, global_batch: int, layout: Layout, micro_batches: int = 1,
         precision: str = "fp32", seq: int = 128):
    run = RunConfig(batch=1, seq=seq, precision=precision)
    w = Workload(model=get_model(model), run=run, global_batch=global_batch)
    return w.job(layout, micro_batches)


# -- one device ------------------------------------------------------------------------------
def test_one_device_holds_every_micro_batch_slots_memory() -> None:
    m = get_model("txl-wt103-base")  # 16 layers, hidden 410, mem_len 150
    fp32 = memory_estimate(m, RunConfig(batch=4, seq=150, micro_batches=3, precision="fp32"))
    # 16 layers x (4 x 3 sequences) x 150 x 410 x 4 bytes = 47,232,000
    assert fp32.segment_memory == 47_232_000
    # bf16 activations: 2 bytes an element, half of it
    bf16 = memory_estimate(m, RunConfig(batch=4, seq=150, micro_batches=3, precision="bf16"))
    assert bf16.segment_memory == 23_616_000
    # the peak counts it; one micro-batch's saved activations do not grow with micro-batches
    one = memory_estimate(m, RunConfig(batch=4, seq=150, precision="fp32"))
    assert one.segment_memory == 47_232_000 // 3
    assert fp32.activations == one.activations
    assert fp32.peak - one.peak == 47_232_000 - 15_744_000
    # state, not a saved activation: full recomputation keeps it whole
    full = memory_estimate(m, RunConfig(batch=4, seq=150, micro_batches=3, precision="fp32",
                                        checkpoint="full"))
    assert full.segment_memory == 47_232_000 and full.activations < fp32.activations


def test_xlnet_and_models_without_memory() -> None:
    # xlnet-large: 24 layers, hidden 1024, mem_len 384; batch 8, bf16:
    # 24 x 8 x 384 x 1024 x 2 = 150,994,944 bytes (144 MiB)
    mem = memory_estimate(get_model("xlnet-large"), RunConfig(batch=8, seq=512,
                                                              precision="bf16"))
    assert mem.segment_memory == 150_994_944
    assert memory_estimate(get_model("bert-base"), RunConfig()).segment_memory == 0
    txl = get_model("txl-wt103-base")
    assert memory_estimate(replace(txl, mem_len=0), RunConfig()).segment_memory == 0


def test_a_table_saved_before_the_term_reads_it_as_zero() -> None:
    saved = MemoryEstimate.of(ops("bert-tiny", batch=2, seq=16)).as_dict()
    del saved["segment_memory"]
    assert MemoryEstimate.from_dict({"memory": saved}).segment_memory == 0


# -- per device under a layout ---------------------------------------------------------------
# txl-wt103-large: 18 layers, hidden 1024, mem_len 384; global batch 64 on 8 devices
LARGE = 18 * 384 * 1024  # layers x mem_len x hidden = 7,077,888 elements per sequence


@pytest.mark.parametrize(("layout", "micro", "precision", "expected"), [
    # dp 8: 18 layers x 8 sequences x 384 x 1024 x 4 bytes = 226,492,416
    (Layout(dp=8), 1, "fp32", 226_492_416),
    # dp 4 x tp 2: replicated on both tensor-parallel ranks, 16 sequences a rank:
    # 18 x 16 x 384 x 1024 x 4 = 452,984,832
    (Layout(dp=4, tp=2), 1, "fp32", 452_984_832),
    # ... with sequence parallelism each rank keeps half the positions: 226,492,416
    (Layout(dp=4, tp=2, sequence_parallel=True), 1, "fp32", 226_492_416),
    # dp 2 x tp 2 x pp 2, bf16: 9 layers a stage x 32 sequences x 384 x 1024 x 2
    # = 226,492,416, whether in 1 or 4 micro-batches (one memory per micro-batch slot)
    (Layout(dp=2, tp=2, pp=2), 1, "bf16", 226_492_416),
    (Layout(dp=2, tp=2, pp=2), 4, "bf16", 226_492_416),
    # and with sequence parallelism 113,246,208
    (Layout(dp=2, tp=2, pp=2, sequence_parallel=True), 4, "bf16", 113_246_208),
])
def test_txl_large_per_device_by_layout(layout, micro, precision, expected) -> None:
    job = _job("txl-wt103-large", 64, layout, micro, precision)
    r = evaluate(job, Cluster.build("a100", 8))
    assert r.memory["segment_memory"] == expected
    assert sum(r.memory[k] for k in MEMORY_KEYS) == pytest.approx(r.memory_bytes)
    # the array function gives the same for the layout's own arguments
    per_rank = 64 // layout.dp
    assert float(segment_memory_per_device(
        job.model, sequences=per_rank, pp=layout.pp, tp=layout.tp,
        sp=layout.sequence_parallel, act_bytes=job.run.precision.act_bytes)) == expected
    assert expected == LARGE // layout.pp * per_rank * job.run.precision.act_bytes // (
        layout.tp if layout.sequence_parallel else 1)


def test_pipeline_stages_hold_their_layers_memory() -> None:
    # six stages of 3 layers: 3 x 64 sequences x 384 x 1024 x 4 = 301,989,888
    m = get_model("txl-wt103-large")
    got = segment_memory_per_device(m, sequences=np.array([64, 64]), pp=np.array([1, 6]),
                                    act_bytes=4)
    assert got.tolist() == [6 * 301_989_888, 301_989_888]


def test_xlnet_base_per_device() -> None:
    # xlnet-base: 12 layers, hidden 768, mem_len 384; global batch 32 on 4 devices, fp32
    # dp 4: 12 x 8 x 384 x 768 x 4 = 113,246,208; dp 2 x pp 2: 6 x 16 x ... the same
    cluster = Cluster.build("a100", 4)
    dp = evaluate(_job("xlnet-base", 32, Layout(dp=4)), cluster)
    pp = evaluate(_job("xlnet-base", 32, Layout(dp=2, pp=2), 2), cluster)
    assert dp.memory["segment_memory"] == pp.memory["segment_memory"] == 113_246_208


def test_one_device_layout_agrees_with_the_estimate() -> None:
    # dp 1 in 2 micro-batches of 4: the distributed model's term is the analytic estimate's
    job = _job("txl-wt103-base", 8, Layout(), 2, seq=150)
    r = evaluate(job, Cluster.build("a100", 1))
    est = memory_estimate(job.model, job.run)
    # 16 x 8 x 150 x 410 x 4 = 31,488,000
    assert r.memory["segment_memory"] == est.segment_memory == 31_488_000
    assert r.memory_bytes == pytest.approx(est.peak, rel=1e-12)


def test_models_without_memory_have_a_zero_term() -> None:
    r = evaluate(_job("bert-base", 64, Layout(dp=2, tp=2, pp=2), 4), Cluster.build("a100", 8))
    assert r.memory["segment_memory"] == 0


# -- what the commands print and write ---------------------------------------------------------
def test_distributed_and_predict_show_it_only_where_there_is_one(capsys, monkeypatch,
                                                                  tmp_path) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("BERTSCOPE_STORE", "off")
    assert main(["distributed", "txl-wt103-large", "--device", "a100", "--devices", "8",
                 "--global-batch", "64"]) == 0
    # dp 8, fp32: 226,492,416 bytes = 216 MiB
    assert "segment memory (previous segment's states) │  216 MiB" in capsys.readouterr().out
    assert main(["distributed", "bert-base", "--device", "a100", "--devices", "8",
                 "--global-batch", "64"]) == 0
    assert "segment memory" not in capsys.readouterr().out
    # xlnet-large, batch 8, bf16: 150,994,944 bytes = 144 MiB
    out = tmp_path / "p.json"
    assert main(["predict", "xlnet-large", "--device", "a100", "--batch", "8", "--seq",
                 "512", "--precision", "bf16", "--output", str(out)]) == 0
    assert "segment memory 144 MiB" in capsys.readouterr().out
    assert json.loads(out.read_text())["meta"]["memory"]["segment_memory"] == 150_994_944
    assert main(["predict", "bert-base", "--device", "a100"]) == 0
    assert "segment memory" not in capsys.readouterr().out
    search = tmp_path / "s.json"
    assert main(["distributed", "txl-wt103-large", "--device", "a100", "--devices", "8",
                 "--global-batch", "64", "--search", "--output", str(search)]) == 0
    assert "segment_memory" in search.read_text()


def test_the_sweep_counts_it_on_one_device_and_on_layouts() -> None:
    # xlnet-base, micro-batches swept (token arrays on batch x seq): each row's memory is the
    # per-configuration estimate's peak, the segment memory of batch x micro-batches included
    res = sweep(["xlnet-base"], ["a100"], batch=[2, 3], seq=[64, 128], micro_batches=[1, 2],
                precision=["bf16"])
    assert res.evaluated == 8
    m = get_model("xlnet-base")
    for row in res.frame.to_dict(orient="records"):
        run = RunConfig(batch=row["batch"], seq=row["seq"], micro_batches=row["micro_batches"],
                        precision="bf16")
        assert row["memory_bytes"] == pytest.approx(memory_estimate(m, run).peak, rel=1e-12)
    # 12 x (3 x 2) x 384 x 768 x 2 bytes = 42,467,328 of the largest row's peak
    big = memory_estimate(m, RunConfig(batch=3, seq=128, micro_batches=2, precision="bf16"))
    assert big.segment_memory == 42_467_328
    # on layouts: the distributed model's memory per device
    multi = sweep(["xlnet-base"], ["a100"], batch=[4], seq=[128], dp=[2], pp=[1, 2],
                  micro_batches=[2], precision=["bf16"])
    assert multi.evaluated == 2
    for row in multi.frame.to_dict(orient="records"):
        job = _job("xlnet-base", 2 * 2 * 4, Layout(dp=2, pp=row["pp"]), 2, "bf16")
        r = evaluate(job, Cluster.build("a100", 2 * row["pp"]))
        assert row["memory_bytes"] == pytest.approx(r.memory_bytes, rel=1e-12)
