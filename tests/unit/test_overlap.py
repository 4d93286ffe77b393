"""Communication overlap as schedule terms (`parallel.overlap`, `collectives.exposed_beyond`,
`pipelined_exposed`, the overlap flags of `job.Layout`): hand arithmetic, flags off as
before, and the property that overlap never hides more than the compute beside it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertscope.config import Precision, RunConfig
from bertscope.errors import BertscopeError
from bertscope.job import Job, Layout
from bertscope.parallel import Cluster, Workload, evaluate
from bertscope.parallel.collectives import (
    Collective,
    bucketed_exposed,
    exposed_beyond,
    pipelined_exposed,
)
from bertscope.parallel.compute import Block, Pass, Split, compute_table
from bertscope.parallel.evaluation import OVERLAP_KEYS, evaluate_arrays, layout_arrays
from bertscope.parallel.overlap import tp_layer_comm
from bertscope.parallel.search import SearchSpace, enumerate_layouts, row_job, search
from bertscope.parallel.topology import Link, LinkScope
from bertscope.presets import get_model
from tests.conftest import tiny

FAST = settings(max_examples=40, deadline=None)


def test_primitives_by_hand():
    # 5 s of communication beside 3 s of compute: 2 s exposed; beside 8 s: none
    assert exposed_beyond(5.0, 3.0) == 2.0
    assert exposed_beyond(5.0, 8.0) == 0.0
    # 4 chunks: one GEMM chunk has no transfer beside it; 6 - 4 x 3/4 = 3
    assert pipelined_exposed(6.0, 4.0, 4) == pytest.approx(3.0)
    assert pipelined_exposed(2.0, 4.0, 4) == 0.0  # 2 <= 3: all hidden
    assert pipelined_exposed(2.0, 4.0, 1) == 2.0  # one chunk: nothing to pipeline with
    # buckets: max(8/4, 8 - 4 x 3/4) = max(2, 5) = 5; with a long window the last bucket, 2
    assert bucketed_exposed(8.0, 4, 4.0) == pytest.approx(5.0)
    assert bucketed_exposed(8.0, 4, 100.0) == pytest.approx(2.0)


def _windows(attn: tuple[float, ...], ffn: tuple[float, ...]) -> np.ndarray:
    """GEMM windows [block, split, pass] from (col fwd, col dgrad, col wgrad, row fwd, row
    dgrad, row wgrad) per block."""
    w = np.zeros((len(Block), len(Split), len(Pass)))
    for b, vals in ((Block.ATTENTION, attn), (Block.FFN, ffn)):
        w[b, Split.COLUMN] = vals[:3]
        w[b, Split.ROW] = vals[3:]
    return w


ATTN = (4.0, 2.0, 1.0, 2.0, 6.0, 2.0)
FFN = (8.0, 8.0, 8.0, 8.0, 8.0, 8.0)


def test_tp_layer_without_overlap_is_every_collective():
    # all-reduce 6, reduce-scatter = all-gather = 3 (one b s h tensor each), t = 4
    fwd, bwd = tp_layer_comm(6.0, 3.0, 3.0, False, False, 4, _windows(ATTN, FFN))
    assert (fwd, bwd) == (12.0, 12.0)  # two all-reduces each way: 2 x 6
    fwd, bwd = tp_layer_comm(6.0, 3.0, 3.0, True, False, 4, _windows(ATTN, FFN))
    # forward AG + RS per block: 2 x (3 + 3) = 12; backward the same plus the column GEMMs'
    # input gathered again for their weight gradients: 12 + 2 x 3 = 18
    assert (fwd, bwd) == (12.0, 18.0)


def test_tp_layer_with_overlap_by_hand():
    w = _windows(ATTN, FFN)
    fwd, bwd = tp_layer_comm(6.0, 3.0, 3.0, True, True, 4, w)
    # forward, pipelined in 4 chunks (GEMM x 3/4 hides): attention AG beside QKV 4 -> 3 - 3
    # = 0; RS beside the output projection 2 -> 3 - 1.5 = 1.5; the feed-forward's 8 -> 0
    assert float(fwd) == pytest.approx(1.5)
    # backward: AG of dY pipelined with the row dgrad (attention 6 -> 3 - 4.5 < 0: 0);
    # RS of the column dgrad beside the column wgrad (attention 1 -> 3 - 1 = 2); the input
    # re-gather beside the column dgrad (attention 2 -> 3 - 2 = 1); feed-forward all hidden
    assert float(bwd) == pytest.approx(3.0)
    fwd, bwd = tp_layer_comm(6.0, 3.0, 3.0, False, True, 4, w)
    # no sequence parallelism: the forward all-reduces stay exposed (2 x 6); backward the
    # column dgrad's all-reduce beside the column wgrad: attention 6 - 1 = 5, FFN 6 - 8 -> 0
    assert (float(fwd), float(bwd)) == (pytest.approx(12.0), pytest.approx(5.0))


def _small(global_batch: int = 16) -> Workload:
    m = tiny(get_model("gpt2").family, num_layers=4, heads=4, hidden=64, intermediate=256)
    return Workload(model=m, run=RunConfig(batch=1, seq=32, precision=Precision.BF16),
                    global_batch=global_batch)


def _arrays(layouts: dict[str, np.ndarray], **flags: bool) -> dict[str, np.ndarray]:
    n = len(layouts["dp"])
    return {**layouts, **{k: np.full(n, flags.get(k, False)) for k in OVERLAP_KEYS}}


def test_flags_off_is_todays_model():
    """Without sequence parallelism and with the flags off, TP communication is exactly the
    model before the flags: 4 collectives per layer and micro-batch (+2 under full
    recomputation), one each for the embedding and the head."""
    w = _small()
    cluster = Cluster.build("a100", 8)
    lay = enumerate_layouts(w, cluster, SearchSpace(sequence_parallel=False))
    r = evaluate_arrays(w, cluster, lay)
    off = evaluate_arrays(w, cluster, _arrays(lay))
    for k in r:
        assert np.array_equal(r[k], off[k]), k
    b = w.global_batch // (lay["dp"] * lay["micro_batches"])
    one = cluster.topology.time(Collective.ALL_REDUCE, b * w.seq * w.model.hidden * 2,
                                lay["tp"])
    lps = w.model.stack_layers / lay["pp"]
    full = lay["checkpoint"] == 2
    single = lay["pp"] == 1
    expected = lay["micro_batches"] * (lps * one * (4 + 2 * full) + one * (1 + single))
    assert np.allclose(r["tp_comm_s"], expected, rtol=1e-12, atol=0)


def _link(name: str, scope: str, bandwidth: float, latency: float) -> Link:
    return Link(name=name, description="test", scope=scope, bandwidth=bandwidth,
                latency=latency)


@FAST
@given(st.floats(1e8, 1e12), st.floats(0.0, 1e-4), st.booleans(), st.booleans(),
       st.booleans())
def test_overlap_never_hides_more_than_the_compute_beside_it(bw, lat, o_tp, o_grad, o_param):
    w = _small()
    base = Cluster.build("a100", 8, devices_per_node=4,
                         intra=_link("i", LinkScope.INTRA, bw, lat),
                         inter=_link("x", LinkScope.INTER, bw / 8, lat * 2))
    free = Cluster.build("a100", 8, devices_per_node=4,
                         intra=_link("i", LinkScope.INTRA, 1e30, 0.0),
                         inter=_link("x", LinkScope.INTER, 1e30, 0.0))
    lay = enumerate_layouts(w, base)
    flags = {"overlap_tp_comm": o_tp, "overlap_grad_reduce": o_grad,
             "overlap_param_gather": o_param}
    # the reference keeps the grad flag (Megatron's buckets differ from DDP's, so that flag
    # is another stack, not a discount) and drops the two overlaps that only hide
    plain = evaluate_arrays(w, base, _arrays(lay, overlap_grad_reduce=o_grad))
    over = evaluate_arrays(w, base, _arrays(lay, **flags))
    no_comm = evaluate_arrays(w, free, _arrays(lay, **flags))
    eps = 1e-12
    # never slower than without overlap, never faster than with free communication
    assert np.all(over["iteration_s"] <= plain["iteration_s"] * (1 + eps))
    assert np.all(over["iteration_s"] >= no_comm["iteration_s"] * (1 - eps))
    for key in ("tp_comm_s", "dp_comm_s"):
        assert np.all(over[key] >= 0)
        assert np.all(over[key] <= plain[key] * (1 + eps) + eps)
    # the TP time hidden is at most the linear GEMMs' time it can run beside
    b = w.global_batch // (lay["dp"] * lay["micro_batches"])
    table = compute_table(w, base.profile, np.unique(b), np.unique(lay["tp"]))
    bi, ti = table.index(b, lay["tp"])
    gemms = table.gemm_windows[bi, ti, lay["sp"].astype(int)].sum(axis=(1, 2, 3))
    lps = w.model.stack_layers / lay["pp"]
    hideable = lay["micro_batches"] * lps * gemms * (1 + (lay["checkpoint"] == 2))
    hidden = plain["tp_comm_s"] - over["tp_comm_s"]
    assert np.all(hidden <= hideable * (1 + eps) + eps)
    # exposed >= communication - hideable compute
    assert np.all(over["tp_comm_s"] >= plain["tp_comm_s"] - hideable - eps)


def _medium(cluster_devices: int, per_node: int, layout: Layout,
            micro_batches: int = 1) -> tuple[Job, Cluster]:
    """gpt2-medium (354.8M parameters: 9 of Megatron's 40M-parameter buckets) at seq 128."""
    w = Workload(model=get_model("gpt2-medium"),
                 run=RunConfig(batch=1, seq=128, precision="bf16"), global_batch=16)
    return (w.job(layout, micro_batches),
            Cluster.build("a100", cluster_devices, devices_per_node=per_node))


def _on(job: Job, **flags: bool) -> Job:
    return replace(job, layout=replace(job.layout, **flags))


def test_param_gather_by_hand():
    """ZeRO 1 on 16 replicas (two nodes): the updated parameters' all-gather in k =
    ceil(psi / max(40M, 16M)) buckets behind the first micro-batch's forward, the first
    bucket exposed, replaces the whole gather after the step; the reduce is unchanged."""
    job, cluster = _medium(16, 8, Layout(dp=16, zero=1))
    off, on = (evaluate(j, cluster) for j in (job, _on(job, overlap_param_gather=True)))
    psi = 354_823_168  # gpt2-medium's parameters (tp = pp = 1: one stage holds them all)
    k = np.ceil(psi / 40e6)  # 8.87 -> 9 buckets
    assert k == 9
    topo, gbytes = cluster.topology, psi * 2  # 16-bit weights
    whole = topo.time(Collective.ALL_GATHER, gbytes, 16, 1)
    buckets = k * topo.time(Collective.ALL_GATHER, gbytes / k, 16, 1)
    r = evaluate_arrays(Workload.of(job), cluster, layout_arrays(job))
    fwd = float(r["step_fwd_compute_s"][0])  # the one micro-batch's forward compute
    expected = max(buckets / k, buckets - fwd * (k - 1) / k)
    assert on.time["dp_comm_s"] - off.time["dp_comm_s"] == pytest.approx(expected - whole,
                                                                         rel=1e-9)
    assert on.time["dp_comm_s"] < off.time["dp_comm_s"]


def test_grad_reduce_by_hand():
    """DDP on 2 replicas, one stage: Megatron's 9 buckets of 40M parameters all-reduced
    behind the backward, the last bucket exposed (PyTorch DDP's 25 MiB buckets when off).
    Megatron's larger last bucket can leave more exposed than DDP's: the flag is a different
    stack, not a discount."""
    job, cluster = _medium(2, 2, Layout(dp=2))
    on = evaluate(_on(job, overlap_grad_reduce=True), cluster)
    psi, k = 354_823_168, 9
    gbytes = psi * 2
    total = k * cluster.topology.time(Collective.ALL_REDUCE, gbytes / k, 2, 1)
    r = evaluate_arrays(Workload.of(job), cluster, layout_arrays(job))
    bwd = float(r["step_bwd_compute_s"][0])  # the one micro-batch's backward compute
    assert on.time["dp_comm_s"] == pytest.approx(max(total / k, total - bwd * (k - 1) / k),
                                                 rel=1e-9)


def test_layout_flags_are_checked_labelled_and_carried_by_search():
    with pytest.raises(BertscopeError, match="overlap_grad_reduce must be true or false"):
        Layout(overlap_grad_reduce="yes")
    lay = Layout(dp=2, tp=2, sequence_parallel=np.bool_(True),
                 overlap_tp_comm=np.bool_(True), overlap_param_gather=True, zero=1)
    assert lay.overlap_tp_comm is True
    assert lay.label() == "dp2 tp2 sp pp1 overlap-tp+param zero1"
    assert Layout(dp=2).label() == "dp2 tp1 pp1 zero0"  # no flags: as before
    w = _small()
    cluster = Cluster.build("a100", 4)
    res = search(w, cluster, SearchSpace(tp=2, overlap_tp_comm=True,
                                         overlap_grad_reduce=True))
    assert res.frame["overlap_tp_comm"].all() and not res.frame["overlap_param_gather"].any()
    job = res.jobs(1)[0]
    assert job.layout.overlap_tp_comm and job.layout.overlap_grad_reduce
    assert row_job(w, res.frame.iloc[0].to_dict()).layout == job.layout
    assert evaluate(job, cluster).iteration_s == pytest.approx(
        float(res.frame["iteration_s"].iloc[0]))


def test_job_with_flags_on_the_cli_shape():
    """`Layout.fill` (the command line's path) takes the flags, None as off."""
    lay = Layout.fill(8, tp=2, sequence_parallel=True, overlap_tp_comm=True,
                      overlap_grad_reduce=None)
    assert lay.overlap_tp_comm and not lay.overlap_grad_reduce
    job = Job(model=_small().model, run=RunConfig(batch=2, seq=32, precision="bf16"),
              layout=lay)
    assert "overlap-tp" in job.label()
