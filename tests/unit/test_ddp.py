"""DDP measurement arithmetic on hand-made numbers: all-reduce/backward overlap, merging ranks
with the prediction beside them, and attribution of collectives (no processes launched). The
all-reduce model itself (link fit, prediction): test_parallel_ddp_model.py."""

from __future__ import annotations

import math
from dataclasses import asdict
from types import SimpleNamespace

import pytest

from bertscope.analytic import parameter_count
from bertscope.config import RunConfig
from bertscope.errors import BertscopeError
from bertscope.measure.ddp import comm_summary, iteration_comm
from bertscope.parallel.collectives import Algorithm
from bertscope.parallel.topology import Link, LinkScope
from bertscope.studies.ddp import merge_comm, merge_ranks, merge_rows, peer_wait
from bertscope.taxonomy import Category, Classifier, Phase, Sublayer
from bertscope.trace.attribute import Attributor
from tests.conftest import tiny


def link(bandwidth: float = 1e9, latency: float = 0.0) -> Link:
    return Link(name="test", description="test link", scope=LinkScope.INTRA,
                bandwidth=bandwidth, latency=latency, sources={"bandwidth": "t", "latency": "t"})


# -- overlap arithmetic --------------------------------------------------------------------------
def test_iteration_comm_unions_then_intersects_with_backward() -> None:
    # all-reduce [10, 20] + [15, 30] = [10, 30], plus [50, 60]: 20 + 10 = 30
    # backward window [0, 25]: overlap is [10, 25] = 15
    assert iteration_comm([(10, 20), (15, 30), (50, 60)], [(0, 25)]) == (30, 15)
    # all of it after backward: nothing overlapped; two backward windows (micro-batches)
    assert iteration_comm([(30, 40)], [(0, 25)]) == (10, 0)
    assert iteration_comm([(5, 15), (30, 40)], [(0, 10), (35, 50)]) == (20, 10)
    assert iteration_comm([], [(0, 25)]) == (0, 0)
    assert iteration_comm([(0, 5)], []) == (5, 0)


def test_comm_summary_means_and_shares() -> None:
    # iterations: 30 ms all-reduce (10 overlapped), 50 ms (30 overlapped)
    s = comm_summary([(0.030, 0.010), (0.050, 0.030)], iteration_s=0.2, backward_s=0.1,
                     calls=2, elements=1000)
    assert s["all_reduce_s"] == pytest.approx(0.040)
    assert s["overlap_s"] == pytest.approx(0.020)
    assert s["exposed_s"] == pytest.approx(0.020)
    assert s["share"] == pytest.approx(0.2)  # 40 / 200
    assert s["exposed_share"] == pytest.approx(0.1)  # 20 / 200
    assert s["overlap_fraction"] == pytest.approx(0.5)
    assert s["bytes"] == 4000  # 1000 fp32 elements
    with pytest.raises(BertscopeError):
        comm_summary([], iteration_s=1, backward_s=1, calls=0, elements=0)


def test_merge_comm_is_the_mean_over_ranks() -> None:
    a = comm_summary([(0.04, 0.01)], iteration_s=0.2, backward_s=0.1, calls=2, elements=10)
    b = comm_summary([(0.06, 0.03)], iteration_s=0.3, backward_s=0.1, calls=2, elements=10)
    m = merge_comm([a, b])
    assert m["all_reduce_s"] == pytest.approx(0.05)
    assert m["exposed_s"] == pytest.approx(0.03)  # (0.03 + 0.03) / 2
    assert m["iteration_s"] == pytest.approx(0.25)
    assert m["share"] == pytest.approx(0.05 / 0.25)  # from the mean times
    with pytest.raises(BertscopeError):
        merge_comm([])


def test_peer_wait_is_the_excess_over_the_fastest_rank() -> None:
    # iteration 0: bucket A [0, 5] on rank 0 and [3, 5] on rank 1 (2 ms), bucket B [6, 10]
    # on both: rank 0 waited 3 ms. Iteration 1: A [0, 4] / [1, 4] (3 ms) and B overlapping
    # it on gloo's other thread, [2, 12] / [4, 12] (8 ms): rank 0's union [0, 12] minus the
    # union of [1, 4] and [4, 12] = 12 - 11 = 1 ms. Mean over iterations: (3 + 1) / 2 = 2 ms
    b0 = [[(0.0, 5.0), (6.0, 10.0)], [(0.0, 4.0), (2.0, 12.0)]]
    b1 = [[(3.0, 5.0), (6.0, 10.0)], [(1.0, 4.0), (4.0, 12.0)]]
    assert peer_wait([b0, b1]) == pytest.approx([2.0, 0.0])
    assert peer_wait([b0, [[(0.0, 1.0)], [(0.0, 1.0)]]]) is None  # buckets do not line up
    assert peer_wait([[], []]) is None


# -- merging ranks -------------------------------------------------------------------------------
def _row(name: str, time_s: float, **kw: object) -> dict[str, object]:
    base = dict(name=name, layer=-1, sublayer="other", category="other", phase="forward",
                m=0, n=0, k=0, batch=0, elements=0, count=1, flops=0.0, bytes_read=0.0,
                bytes_written=0.0, saved_bytes=0.0, time_s=time_s, intensity=0.0)
    base.update(kw)
    return base


def _doc(rank: int, iteration_s: float, comm: dict[str, float], rows: list) -> dict:
    m, run = tiny(), RunConfig(batch=2, seq=16)
    plain = {k: str(v) if hasattr(v, "value") else v for k, v in asdict(m).items()}
    run_d = {k: str(v) if hasattr(v, "value") else v for k, v in asdict(run).items()}
    meta = {"model": plain, "run": run_d, "device": "cpu", "iters": 1, "warmup": 1,
            "iteration_s": iteration_s, "iteration_times_s": [iteration_s],
            "tokens_per_s": run.tokens / iteration_s, "op_time_s": 0.1, "unattributed_s": 0.0,
            "unattributed_share": 0.0, "framework_share": 0.1,
            "ddp": {"rank": rank, "world_size": 2, "backend": "gloo", "comm": comm,
                    "link": {}}}
    return {"meta": meta, "rows": rows}


def test_merge_rows_averages_over_ranks() -> None:
    a = _doc(0, 0.2, {}, [_row("aten::mm", 0.010, category="gemm", flops=100.0),
                          _row("c10d::allreduce_", 0.004, category="communication",
                               phase="communication")])
    b = _doc(1, 0.2, {}, [_row("aten::mm", 0.030, category="gemm", flops=100.0)])
    d = merge_rows([a, b]).df.set_index("name")
    assert d.loc["aten::mm", "time_s"] == pytest.approx(0.020)
    assert d.loc["aten::mm", "flops"] == pytest.approx(100.0)
    assert d.loc["c10d::allreduce_", "time_s"] == pytest.approx(0.002)  # missing on rank 1
    # a row's launches per iteration are the largest count over the ranks; rows written
    # without the role columns (tp_split, pp_stage) take their defaults
    a = _doc(0, 0.2, {}, [_row("aten::add", 0.010, count=3, saved_bytes=8.0)])
    b = _doc(1, 0.2, {}, [_row("aten::add", 0.030, count=2, saved_bytes=4.0)])
    assert "tp_split" not in a["rows"][0]
    r = merge_rows([a, b]).df.iloc[0]
    assert (r["count"], r["saved_bytes"], r["tp_split"]) == (3, 6.0, "replicated")


def test_merge_ranks_predicts_the_same_run() -> None:
    c0 = comm_summary([(0.04, 0.01)], iteration_s=0.2, backward_s=0.05, calls=2, elements=5)
    c1 = comm_summary([(0.06, 0.01)], iteration_s=0.2, backward_s=0.07, calls=2, elements=5)
    docs = [_doc(1, 0.2, c1, [_row("aten::mm", 0.02)]), _doc(0, 0.2, c0, [_row("aten::mm", 0.01)])]
    r = merge_ranks(docs, link=link(), link_note="a test link", algorithm=Algorithm.RING)
    grads = 4.0 * parameter_count(tiny())
    assert r.predicted["bytes"] == grads
    assert r.predicted["all_reduce_s"] == pytest.approx(grads / 1e9)
    assert r.measured["exposed_s"] == pytest.approx(0.04)  # (0.03 + 0.05) / 2
    assert r.measured["backward_s"] == pytest.approx(0.06)
    assert math.isnan(r.measured["peer_wait_s"])  # no bucket durations in these documents
    assert r.predicted["iteration_s"] == pytest.approx(0.2 - 0.04 + grads / 1e9)
    assert [x["all_reduce_s"] for x in r.ranks] == [0.04, 0.06]  # sorted by rank
    assert r.facts.world_size == 2
    assert r.facts.global_tokens_per_s == pytest.approx(2 * 32 / 0.2)  # 2 ranks x 2 x 16 / 0.2 s
    saved = r.profile.table.export_meta()  # written as before: "ddp" then global tokens/s
    assert list(saved)[-2:] == ["ddp", "global_tokens_per_s"]
    assert saved["ddp"]["world_size"] == 2 and saved["iteration_times_s"] == [0.2, 0.2]
    assert any("a test link" in a for a in r.assumptions)
    assert r.profile.comparison() is not None


# -- attribution of collectives ------------------------------------------------------------------
def ev(name, t=10.0, children=(), seq=-1, shapes=None):
    e = SimpleNamespace(name=name, cpu_time_total=t, device_time_total=t,
                        cpu_children=list(children), cpu_parent=None, sequence_nr=seq,
                        input_shapes=shapes or [], flops=0)
    for c in e.cpu_children:
        c.cpu_parent = e
    return e


def test_collectives_are_communication_and_ddp_forward_is_walked_through() -> None:
    gelu = ev("aten::gelu", 5, seq=3, shapes=[[2, 16, 256]])
    fwd = ev("bertscope.phase::forward", 20, [ev("DistributedDataParallel.forward", 18, [
        ev("bertscope::0::ffn_act", 6, [gelu])])])
    # DDP's reducer copies each gradient into its bucket (scaled by 1/world) and launches a
    # bucket's all-reduce from a gradient-accumulator hook, after GELU's backward node
    gelu_bwd = ev("autograd::engine::evaluate_function: GeluBackward0", 4,
                  [ev("GeluBackward0", 3, [ev("aten::gelu_backward", 2)])], seq=3)
    ar = ev("c10d::allreduce_", 3, shapes=[[[1000]], [], [], [], [], []])
    mul_out = ev("torch::distributed::reducer::mul_out", 1, shapes=[[256]])
    acc = ev("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 8,
             [ev("torch::autograd::AccumulateGrad", 2), mul_out, ar])
    bwd = ev("bertscope.phase::backward", 10, [gelu_bwd, acc])
    a = Attributor(Classifier())
    a.walk(ev("bertscope.iter::0", 40, [fwd, bwd]))
    rows = {o.name: o for o in a.ops(1)}
    assert rows["aten::gelu"].layer == 0
    assert rows["aten::gelu"].sublayer is Sublayer.FFN_ACT
    c = rows["c10d::allreduce_"]
    assert (c.layer, c.sublayer, c.category, c.phase) == (
        -1, Sublayer.OTHER, Category.COMMUNICATION, Phase.COMMUNICATION)
    assert c.elements == 1000  # the bucket's elements, from the tensor list's shape
    mo = rows["torch::distributed::reducer::mul_out"]  # not GELU work: DDP's copy
    assert (mo.category, mo.phase) == (Category.ELEMENTWISE, Phase.COMMUNICATION)


def test_analyze_comm_finds_all_reduce_on_any_thread() -> None:
    pytest.importorskip("torch")
    from bertscope.measure.ddp_worker import analyze_comm

    def at(e, start, end, thread=1):
        e.time_range = SimpleNamespace(start=start, end=end)
        e.thread = thread
        return e

    # iteration [0, 200] us; backward phase [50, 150], its last autograd node ends at 100;
    # the main thread launches the all-reduce at 90 (c10d::allreduce_; torch keeps no shapes
    # of its tensor list), a gloo thread runs it [90, 130] on the flat 1000-element bucket:
    # 40 us, 10 overlapped (90..100), 30 exposed
    node1 = at(ev("autograd::engine::evaluate_function: AddmmBackward0"), 50, 60)
    node2 = at(ev("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"),
               60, 100)
    launch = at(ev("c10d::allreduce_", shapes=[[], [], [], [], [], []]), 90, 92)
    bwd = at(ev("bertscope.phase::backward", children=[node1, node2, launch]), 50, 150)
    it = at(ev("bertscope.iter::0", children=[bwd]), 0, 200)
    work = at(ev("gloo:all_reduce", shapes=[[1000]]), 90, 130, thread=2)
    later = at(ev("gloo:all_reduce", shapes=[[1000]]), 300, 310, thread=2)  # after iteration 0
    out = analyze_comm([it, bwd, node1, node2, launch, work, later], completed=1)
    assert out["buckets_s"] == [[(pytest.approx(90e-6), pytest.approx(130e-6))]]
    f = out["comm"]
    assert f["all_reduce_s"] == pytest.approx(40e-6)
    assert f["overlap_s"] == pytest.approx(10e-6)
    assert f["exposed_s"] == pytest.approx(30e-6)
    assert f["backward_s"] == pytest.approx(50e-6)
    assert f["iteration_s"] == pytest.approx(200e-6)
    assert (f["calls"], f["bytes"]) == (1, 4000)


def test_a_failure_is_told_in_one_line(tmp_path) -> None:
    from bertscope.measure.ddp import _failure

    log = tmp_path / "torchrun.log"
    log.write_text("W1130 setting up\n/x/python: No module named bertscope.nope\n"
                   "Traceback (most recent call last):\n"
                   "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
                   "  error_file: <N/A>\n")
    assert _failure(tmp_path, 2, log) == "/x/python: No module named bertscope.nope"
    (tmp_path / "error1.txt").write_text("this run needs ~9 GiB\nbut has 1")
    assert _failure(tmp_path, 2, log) == "rank 1: this run needs ~9 GiB but has 1"


# -- command line --------------------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["--nproc", "0"], "--nproc must be >= 1"),
    (["--link", "nvlink4"], "--link needs --nproc 2 or more"),
    (["--nproc", "2", "--link", "nvlink99"], "unknown link 'nvlink99'"),
])
def test_profile_nproc_bad_input_is_one_line(args, message, capsys) -> None:
    pytest.importorskip("torch")
    from bertscope.cli import main

    assert main(["profile", "bert-tiny", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bertscope: error: ") and message in err and err.count("\n") == 1


def test_ctrl_c_during_a_distributed_run_exits_130(monkeypatch, capsys) -> None:
    pytest.importorskip("torch")
    from bertscope.cli import main
    from bertscope.studies import ddp

    def interrupted(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(ddp, "profile_ddp", interrupted)
    assert main(["profile", "bert-tiny", "--nproc", "2"]) == 130
    assert capsys.readouterr().err == "bertscope: interrupted\n"


def test_results_are_strict_json_even_with_nan(tmp_path) -> None:
    """A NaN in the meta (e.g. an undefined rank wait) is written as null, not NaN."""
    import json

    from bertscope.analytic import ops
    from bertscope.measure.profile import ProfileResult
    from bertscope.optable import Extra

    t = ops("bert-tiny", batch=1, seq=8)
    r = ProfileResult(table=t.with_records(Extra({"wait_s": float("nan"),
                                                  "ranks": [{"x": float("inf")}]})),
                      analytic=t)
    text = r.write_json(tmp_path / "r.json").read_text()
    doc = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    assert doc["meta"]["wait_s"] is None and doc["meta"]["ranks"][0]["x"] is None
