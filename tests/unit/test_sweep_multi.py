"""Multi-device points of a sweep (dp/tp/pp/zero axes) equal the distributed model's
`evaluate` for each layout, agree with the single-device engine on one device, follow hand
arithmetic for tokens and FLOPs, and skip layouts the model cannot take."""

from __future__ import annotations

import numpy as np
import pytest

from bertscope.config import RunConfig
from bertscope.errors import BertscopeError
from bertscope.parallel import Cluster, Job, Layout, evaluate
from bertscope.perf import load_profile
from bertscope.presets import get_model
from bertscope.sweep import sweep

CASES = [  # model, device, batch, seq, micro-batches, dp, tp, pp, zero, checkpoint
    ("bert-tiny", "a100", 4, 128, 1, 2, 1, 1, 0, "none"),
    ("bert-base", "h100", 2, 128, 4, 2, 2, 2, 1, "full"),
    ("gpt2", "a100", 8, 256, 2, 4, 2, 1, 2, "none"),
    ("llama2-7b", "h100", 1, 512, 8, 2, 4, 4, 0, "full"),
    ("bert-large", "a100", 4, 256, 2, 2, 2, 1, 1, "selective"),
]


@pytest.mark.parametrize("model,device,batch,seq,micro,dp,tp,pp,zero,ckpt", CASES)
def test_each_point_equals_the_distributed_model(model, device, batch, seq, micro, dp, tp,
                                                 pp, zero, ckpt) -> None:
    r = sweep([model], [device], batch=[batch], seq=[seq], micro_batches=[micro], dp=[dp],
              tp=[tp], pp=[pp], zero=[zero], checkpoint=[ckpt], precision=["bf16"])
    assert r.evaluated == 1
    row = r.frame.iloc[0]
    m = get_model(model)
    # batch is per micro-batch, micro-batches per replica (the run's, as a sweep's axes say):
    # the step's global batch is batch x micro x dp
    job = Job(model=m, run=RunConfig(batch=batch, seq=seq, precision="bf16",
                                     micro_batches=micro, checkpoint=ckpt),
              layout=Layout(dp=dp, tp=tp, pp=pp, zero=zero))
    assert job.global_batch == batch * micro * dp
    ref = evaluate(job, Cluster.build(device, dp * tp * pp))
    assert row["iteration_s"] == pytest.approx(ref.iteration_s, rel=1e-9)
    assert row["tokens_per_s"] == pytest.approx(ref.tokens_per_s, rel=1e-9)
    assert row["memory_bytes"] == pytest.approx(ref.memory_bytes, rel=1e-9)
    assert bool(row["fits"]) == ref.fits
    assert row["devices"] == dp * tp * pp
    assert row["tp_comm_share"] == pytest.approx(ref.time["tp_comm_s"] / ref.iteration_s)
    assert row["bubble_share"] == pytest.approx(ref.time["bubble_s"] / ref.iteration_s)
    # every part of the iteration is a share; they add up to it
    parts = ("compute_share", "tp_comm_share", "pp_comm_share", "bubble_share",
             "dp_comm_share", "optimizer_share")
    assert sum(row[p] for p in parts) == pytest.approx(1.0, rel=1e-9)
    assert np.isnan(row["memory_bound_share"])  # no category split there


def test_tokens_and_flops_by_hand() -> None:
    """bert-base, batch 4 x seq 128, 2 micro-batches, dp 2: a step is 4 x 2 x 2 = 16
    sequences = 2,048 tokens; the job's FLOPs are dp = 2 times one replica's (the
    single-device point with the same batch and micro-batches), and achieved FLOP/s is per
    device: FLOPs / time / (dp x tp) devices."""
    r = sweep(["bert-base"], ["a100"], batch=[4], seq=[128], micro_batches=[2], dp=[1, 2],
              tp=[1, 2])
    f = r.frame.set_index(["dp", "tp"])
    one, four = f.loc[(1, 1)], f.loc[(2, 2)]
    assert four["tokens"] == 16 * 128
    assert one["tokens"] == 8 * 128
    assert four["flops"] == pytest.approx(2 * one["flops"], rel=1e-12)
    assert four["tokens_per_s_per_device"] == pytest.approx(16 * 128 / four["iteration_s"] / 4)
    assert four["achieved_flops"] == pytest.approx(
        four["flops"] / four["iteration_s"] / 4, rel=1e-12)
    assert one["compute_share"] == pytest.approx(1 - one["optimizer_share"])
    assert one["dp_comm_share"] == 0.0


@pytest.mark.parametrize("model", ["bert-base", "gpt2", "llama2-7b"])
def test_one_device_layout_agrees_with_the_single_device_engine(model) -> None:
    """ZeRO-1 over one replica changes nothing, so the distributed model on one device
    (another implementation: compute tables of section times, not the engine's rows) must
    give the engine's single-device figures."""
    r = sweep([model], ["a100"], batch=[4], seq=[128], zero=[0, 1], precision=["bf16"],
              checkpoint=["none", "full"])
    for ckpt in ("none", "full"):
        f = r.frame[r.frame["checkpoint"] == ckpt].set_index("zero")
        assert f.loc[1, "iteration_s"] == pytest.approx(f.loc[0, "iteration_s"], rel=1e-9)
        assert f.loc[1, "memory_bytes"] == pytest.approx(f.loc[0, "memory_bytes"], rel=1e-9)
        assert f.loc[1, "flops"] == pytest.approx(f.loc[0, "flops"], rel=1e-12)


@pytest.mark.parametrize("model", ["bert-base", "gpt2", "llama2-7b"])
def test_fusion_on_one_device_layout_agrees_with_the_engine(model) -> None:
    """Fusion on a multi-device point fuses the distributed model's compute table
    (`parallel.compute`) before its roles are read; on one device (ZeRO-1 over one replica)
    that must time what the engine's per-block fusion times, with and without selective
    recomputation, and take less time than unfused."""
    r = sweep([model], ["a100"], batch=[4], seq=[128], zero=[0, 1], precision=["bf16"],
              checkpoint=["none", "selective"], fusion=[True, False])
    fused = r.frame["fusion"].astype(bool)  # a label column: categorical
    for ckpt in ("none", "selective"):
        f = r.frame[(r.frame["checkpoint"] == ckpt) & fused].set_index("zero")
        assert f.loc[1, "iteration_s"] == pytest.approx(f.loc[0, "iteration_s"], rel=1e-9)
        unfused = r.frame[(r.frame["checkpoint"] == ckpt) & ~fused]
        assert f.loc[1, "iteration_s"] < unfused.set_index("zero").loc[1, "iteration_s"]


def test_selective_recompute_is_the_distributed_models() -> None:
    """A selective point on several devices equals `evaluate` of its job (the group's
    checkpoint mode reaches `Workload.job`), between none and full in time."""
    r = sweep(["bert-base"], ["a100"], dp=[2], tp=[2], checkpoint=["none", "selective", "full"])
    f = r.frame.set_index("checkpoint")
    assert f.loc["none", "iteration_s"] < f.loc["selective", "iteration_s"] \
        < f.loc["full", "iteration_s"]
    job = Job(model=get_model("bert-base"), run=RunConfig(checkpoint="selective"),
              layout=Layout(dp=2, tp=2))
    ref = evaluate(job, Cluster.build("a100", 4))
    assert f.loc["selective", "iteration_s"] == pytest.approx(ref.iteration_s, rel=1e-9)
    assert f.loc["selective", "memory_bytes"] == pytest.approx(ref.memory_bytes, rel=1e-9)


def test_layouts_the_model_cannot_take_are_skipped() -> None:
    """bert-base has 12 heads and 12 layers: tp 5 does not divide the heads, pp 5 not the
    layers; ZeRO-2 cannot run with pp 2. Of dp 1 x tp {1, 5} x pp {1, 2, 5} x zero {0, 2}
    = 12 points, the valid ones are (tp 1, pp 1, zero 0 and 2) and (tp 1, pp 2, zero 0): 3."""
    r = sweep(["bert-base"], ["a100"], tp=[1, 5], pp=[1, 2, 5], zero=[0, 2])
    assert r.grid_size == 12
    assert r.evaluated == 3
    assert r.skipped == 9
    assert sorted(zip(r.frame["pp"], r.frame["zero"], strict=True)) == [(1, 0), (1, 2), (2, 0)]


def test_knobs_reach_multi_device_points() -> None:
    """Memory x 0.01 leaves 0.8 GB of an 80 GB A100: bert-large does not fit; the GEMM knob
    makes the compute faster."""
    r = sweep(["bert-large"], ["a100"], dp=[2], memory=[1.0, 0.01], gemm_peak=[1.0, 2.0])
    f = r.frame.set_index(["memory", "gemm_peak"])
    assert bool(f.loc[(1.0, 1.0), "fits"]) and not bool(f.loc[(0.01, 1.0), "fits"])
    assert f.loc[(1.0, 2.0), "iteration_s"] < f.loc[(1.0, 1.0), "iteration_s"]
    capacity = 0.01 * load_profile("a100").device.memory_bytes
    assert f.loc[(0.01, 1.0), "memory_bytes"] > capacity  # the same need, less room
    assert f.loc[(0.01, 1.0), "memory_bytes"] == f.loc[(1.0, 1.0), "memory_bytes"]


def test_single_device_grids_keep_their_columns() -> None:
    r = sweep(["bert-tiny"], ["a100"], batch=[2, 4])
    assert "dp" not in r.frame and "bubble_share" not in r.frame


@pytest.mark.parametrize("axes,message", [
    ({"zero": [4]}, "stages are 0, 1, 2 or 3"),
    ({"dp": [0]}, "positive integers"),
    ({"tp": []}, "empty"),
])
def test_bad_layout_axes_are_refused(axes, message) -> None:
    with pytest.raises(BertscopeError, match=message):
        sweep(["bert-tiny"], ["a100"], **axes)


def test_checkpoint_is_the_layouts() -> None:
    """A full-recompute point re-runs every layer's forward: more time, less memory."""
    r = sweep(["bert-base"], ["a100"], dp=[2], checkpoint=["none", "full"])
    f = r.frame.set_index("checkpoint")
    assert f.loc["full", "iteration_s"] > f.loc["none", "iteration_s"]
    assert f.loc["full", "memory_bytes"] < f.loc["none", "memory_bytes"]


def test_cli_layout_axes(tmp_path, capsys, monkeypatch) -> None:
    import pandas as pd

    from bertscope.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "grid.csv"
    rc = main(["sweep", "bert-mini", "--dp", "1,2", "--tp", "1..2", "--pp", "1,2", "--output",
               str(out), "--sort", "tokens_per_s_per_device"])
    text = capsys.readouterr().out
    assert rc == 0
    # bert-mini: 4 heads, 4 layers: every tp in {1, 2} and pp in {1, 2} divides; 2 x 2 x 2
    assert "evaluated 8 configurations" in text and "bubble%" in text
    df = pd.read_csv(out)
    assert sorted(df["devices"]) == [1, 2, 2, 2, 4, 4, 4, 8]
    assert main(["sweep", "bert-mini", "--zero", "0,4"]) == 2
    assert "stages are 0, 1, 2 or 3" in capsys.readouterr().err


_POOLS = """
import json, sys
import bertscope.cluster as cluster
import bertscope.sweep as sw
used = []
real = cluster.local_pool
def spy(n, *, processes):
    pool = real(n, processes=processes)
    used.append(type(pool).__name__)
    return pool
cluster.local_pool = spy
sw.PROCESS_CONFIGS = 2
sw.PROCESS_PIECES = 1
kw = dict(batch=range(1, 9), seq=[32, 64], precision=["fp32", "bf16"], optimizer=["adam", "lamb"],
          micro_batches=[1, 2])
a = sw.sweep(["bert-tiny", "bert-mini"], ["a100", "tpu-v4"], workers=2, **kw).frame
b = sw.sweep(["bert-tiny", "bert-mini"], ["a100", "tpu-v4"], workers=1, **kw).frame
print(json.dumps({"used": used, "rows": len(a), "equal": bool(a.equals(b)),
                  "torch": "torch" in sys.modules}))
"""


def test_worker_processes_give_the_threads_answer() -> None:
    """Many pieces run on forked worker processes (no torch, no other thread: checked in a
    fresh Python); the frame equals the one-thread run value for value."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _POOLS], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    # workers=1: no pool, the pieces run in this process
    assert got["used"] == ["ProcessPoolExecutor"] and not got["torch"]
    # 2 models x (a100: fp32 and bf16, tpu-v4: bf16 only, no fp32 peak) x 8 batches x 2 seqs
    # x 2 optimizers x 2 micro
    assert got["rows"] == 2 * 3 * 8 * 2 * 2 * 2
    assert got["equal"]


def test_threads_where_torch_is_loaded(monkeypatch) -> None:
    """A process that has torch loaded never forks workers (a forked threaded runtime can
    deadlock): the pool is threads whatever the piece count."""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    from bertscope.cluster import local_pool

    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch", object()))
    with local_pool(2, processes=True) as pool:
        assert isinstance(pool, ThreadPoolExecutor)
