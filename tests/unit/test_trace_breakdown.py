"""Trace breakdown on the fixture traces: kernels inherit layer, sublayer and phase from the
op that launched them, categories come from kernel names, timelines add up, no unknowns."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertscope.errors import BertscopeError
from bertscope.taxonomy import Category, Phase, Sublayer
from bertscope.trace import analyze_trace, read_trace
from bertscope.trace.breakdown import kernel_place, overlap, union
from tests.data.traces import make_traces as k

DATA = Path(__file__).parents[1] / "data" / "traces"
FIXTURES = ["cuda_bert_train.json.gz", "rocm_infer.json.gz", "triton_compiled.json.gz",
            "multirank"]
C, P, S = Category, Phase, Sublayer


@pytest.fixture(scope="module")
def cuda():
    return analyze_trace(DATA / "cuda_bert_train.json.gz")


def _row(df, name, **kw):
    d = df[df["name"] == name]
    for col, v in kw.items():
        d = d[d[col] == v]
    assert len(d) == 1, (name[:60], kw, len(d))
    return d.iloc[0]


@pytest.mark.parametrize("fixture", FIXTURES)
def test_fixtures_have_no_unknown_time(fixture: str) -> None:
    t = read_trace(DATA / fixture)
    trace = t.export_meta()["trace"]
    assert trace["unknown_s"] == 0.0 and trace["unknown"] == []
    assert t.export_meta()["time_source"] == "device"
    assert (t.df["time_s"] > 0).all()


def test_kernels_inherit_the_place_of_their_launching_op(cuda) -> None:
    d = cuda.table.df
    # qkv: three addmm launches of the same sgemm in layer 0 (one row, count 3)
    r = _row(d, k.SGEMM)
    assert (r.layer, r.sublayer, r.category, r.phase, r["count"]) == (0, S.QKV, C.GEMM,
                                                                    P.FORWARD, 3)
    assert r.time_s == pytest.approx(30e-6)  # 3 x 10 us
    # cuBLAS runs bmm with GEMM kernels: the launching aten::bmm makes them batched GEMMs
    assert _row(d, k.XMMA_SM90).category == C.BATCHED_GEMM
    assert _row(d, k.NVJET).sublayer == S.ATTN_CONTEXT
    # one kernel name, two places: the LN kernel in three sublayers
    assert {(x.layer, x.sublayer) for x in d[d["name"] == k.LN].itertuples()} == {
        (-1, S.EMBEDDING), (0, S.ATTN_ADD_NORM), (0, S.FFN_ADD_NORM)}
    # the index kernel launched by aten::embedding is embedding work
    assert _row(d, k.INDEX_SELECT).category == C.EMBEDDING
    assert _row(d, k.MEMCPY_H2D).category == C.DATA_MOVEMENT
    # the loss scope: log-softmax and NLL kernels
    assert _row(d, k.LOGSOFTMAX).sublayer == S.LOSS
    assert _row(d, k.NLL, phase=P.FORWARD).category == C.LOSS


def test_backward_kernels_get_data_and_weight_gradient_phases(cuda) -> None:
    d = cuda.table.df
    # AddmmBackward0 nodes (autograd thread) find their forward addmm by sequence number;
    # the mm shapes tell dgrad from wgrad
    assert {(x.layer, x.sublayer) for x in d[d["name"] == k.SGEMM_NN].itertuples()} == {
        (-1, S.MLM_HEAD), (0, S.FFN2)}
    assert set(d.loc[d["name"] == k.SGEMM_NN, "phase"]) == {P.BACKWARD_DATA}
    assert set(d.loc[d["name"] == k.XMMA_SM80, "phase"]) == {P.BACKWARD_WEIGHT}
    assert set(d.loc[d["name"] == k.REDUCE_SUM, "phase"]) == {P.BACKWARD_WEIGHT}  # bias grad
    assert _row(d, k.LN_BWD_GB).phase == P.BACKWARD  # one node, both gradients
    assert _row(d, k.SOFTMAX_BWD).sublayer == S.ATTN_SOFTMAX
    assert _row(d, k.EMB_BWD).phase == P.BACKWARD_WEIGHT
    # memset stays data movement, even inside the embedding backward
    assert _row(d, k.MEMSET).category == C.DATA_MOVEMENT


def test_collectives_and_optimizer(cuda) -> None:
    d = cuda.table.df
    ar = _row(d, k.NCCL_AR)
    assert (ar.category, ar.phase, ar["count"]) == (C.COMMUNICATION, P.COMMUNICATION, 2)
    assert ar.time_s == pytest.approx(70e-6)
    assert _row(d, k.FUSED_ADAMW).sublayer == S.OPTIMIZER
    assert _row(d, k.LPNORM).category == C.REDUCTION
    assert _row(d, k.FOREACH_MUL).category == C.OPTIMIZER
    # the D2H copy of .item() in the optimizer step is still a copy
    assert _row(d, k.MEMCPY_D2H).category == C.DATA_MOVEMENT


def _brute_force_timeline(path: Path) -> dict[str, float]:
    """Busy, compute, comm and overlap of device 0 by rasterizing at 1 ns."""
    with gzip.open(path, "rt") as f:
        evs = [e for e in json.load(f)["traceEvents"]
               if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    t0 = min(e["ts"] for e in evs)
    n = round((max(e["ts"] + e["dur"] for e in evs) - t0) * 1000)
    busy, comp, comm = (np.zeros(n, bool) for _ in range(3))
    for e in evs:
        a, b = round((e["ts"] - t0) * 1000), round((e["ts"] + e["dur"] - t0) * 1000)
        busy[a:b] = True
        if e["name"].startswith("nccl"):
            comm[a:b] = True
        elif e["cat"] == "kernel":
            comp[a:b] = True
    return {"window_s": n * 1e-9, "busy_s": busy.sum() * 1e-9, "compute_s": comp.sum() * 1e-9,
            "comm_s": comm.sum() * 1e-9, "overlap_s": (comp & comm).sum() * 1e-9}


def test_device_timeline_matches_a_brute_force_count(cuda) -> None:
    dev = cuda.devices().iloc[0]
    want = _brute_force_timeline(DATA / "cuda_bert_train.json.gz")
    for key, v in want.items():
        assert dev[key] == pytest.approx(v, abs=2e-9), key
    assert dev["overlap_s"] > 0
    assert dev["exposed_comm_s"] == pytest.approx(dev["comm_s"] - dev["overlap_s"])
    assert dev["idle_s"] == pytest.approx(dev["window_s"] - dev["busy_s"])
    s = cuda.streams().set_index("stream")
    assert s.loc["20", "busy_s"] == pytest.approx(70e-6)  # the two all-reduces, 40 + 30 us
    assert s.loc["20", "idle_s"] == pytest.approx(dev["window_s"] - 70e-6)


def test_union_and_overlap_by_hand() -> None:
    s, e = union(np.array([0.0, 5, 2, 20]), np.array([3.0, 8, 4, 21]))
    assert s.tolist() == [0, 5, 20] and e.tolist() == [4, 8, 21]  # [0,3]+[2,4] merge
    a = (np.array([0.0, 10]), np.array([5.0, 20]))
    b = (np.array([4.0, 5, 19]), np.array([5.0, 12, 30]))  # [4,5] touches [5,12]
    # covered by both: [4,5] 1 + [10,12] 2 + [19,20] 1 = 4
    assert overlap(a, b) == pytest.approx(4.0)
    assert overlap(a, (np.array([]), np.array([]))) == 0.0


def test_rocm_flows_link_kernels_without_correlation_args() -> None:
    r = analyze_trace(DATA / "rocm_infer.json.gz")
    d = r.table.df
    assert set(d["phase"]) == {P.FORWARD} and set(d["layer"]) == {-1}
    # the batched Tensile kernel is batched only because its launcher (aten::bmm) says so
    assert _row(d, k.TENSILE_BATCHED).category == C.BATCHED_GEMM
    assert _row(d, k.TENSILE_HHS).category == C.GEMM
    assert _row(d, k.CK_FMHA)["count"] == 2
    assert r.devices()["device"].tolist() == ["2"]
    assert list(r.ranks) == [0]


def test_compiled_trace_iterations_average() -> None:
    r = analyze_trace(DATA / "triton_compiled.json.gz")
    assert r.ranks[0].iterations == 2
    d = r.table.df
    g = _row(d, k.TRITON["gelu"])
    assert (g["count"], g.time_s) == (1, pytest.approx(3e-6))  # 2 launches of 3 us / 2 steps
    assert set(d.loc[d["name"] == k.FLASH_BWD, "phase"]) == {P.BACKWARD_DATA}
    assert _row(d, k.TRITON["foreach"]).phase == P.OPTIMIZER
    assert _row(d, k.FUSED_SGD).sublayer == S.OPTIMIZER


def test_ranks_from_distributed_info_and_file_names(tmp_path: Path) -> None:
    r = analyze_trace(DATA / "multirank")
    assert list(r.ranks) == [0, 1]
    assert r.ranks[1].path.name == "rank1.pt.trace.json.gz"
    gemm = r.ranks[0].table.df, r.ranks[1].table.df
    t0, t1 = (float(x.loc[x["name"] == k.HGEMM, "time_s"].sum()) for x in gemm)
    assert t1 == pytest.approx(1.25 * t0)  # the straggler
    assert float(r.table.df.loc[r.table.df["name"] == k.HGEMM, "time_s"].sum()) == (
        pytest.approx((t0 + t1) / 2))
    per = r.table.export_meta()["trace"]["per_rank"]
    assert set(per) == {"0", "1"} and per["1"]["by_category"]["gemm"]["share"] > 0
    assert len(r.devices()) == 2 and set(r.streams()["stream"]) == {"7", "13"}
    # one rank: only that file is read
    one = analyze_trace(DATA / "multirank", rank=1)
    assert list(one.ranks) == [1]
    assert one.table.df["time_s"].sum() == pytest.approx(r.ranks[1].table.df["time_s"].sum())
    with pytest.raises(BertscopeError, match="no trace file for rank 5"):
        analyze_trace(DATA / "multirank", rank=5)
    with pytest.raises(BertscopeError, match="rank 0, not rank 3"):
        analyze_trace(DATA / "cuda_bert_train.json.gz", rank=3)
    dup = tmp_path / "dup"
    dup.mkdir()
    for name in ("a.json.gz", "b.json.gz"):
        shutil.copy(DATA / "cuda_bert_train.json.gz", dup / name)
    with pytest.raises(BertscopeError, match="a second trace for rank 0"):
        analyze_trace(dup)


def _with_kernel(tmp_path: Path, name: str) -> Path:
    tr = k.Trace()
    with tr.op("aten::gelu", dims=[[4, 4]]):
        tr.kernel(name, 5.0)
    with tr.op("aten::mm", dims=[[4, 4], [4, 4]]):
        tr.kernel(k.SGEMM, 3.0)
    path = tmp_path / "t.json.gz"
    tr.write(path)
    return path


def test_unknown_kernels_are_listed_with_their_time(tmp_path: Path) -> None:
    r = analyze_trace(_with_kernel(tmp_path, "my_custom_op_v2(float*, int)"))
    u = r.unknown()
    assert u["name"].tolist() == ["my_custom_op_v2(float*, int)"]
    assert u["time_s"].tolist() == pytest.approx([5e-6])
    assert u["category"].tolist() == ["activation"]  # from the launching aten::gelu
    assert r.table.export_meta()["trace"]["unknown_share"] == pytest.approx(5 / 8)


def test_user_patterns_come_first(tmp_path: Path) -> None:
    path = _with_kernel(tmp_path, "my_custom_op_v2(float*, int)")
    pats = tmp_path / "mine.toml"
    pats.write_text("[[pattern]]\nregex = '^my_custom_'\ncategory = 'elementwise'\n"
                    "[[pattern]]\nregex = '^ampere_sgemm'\ncategory = 'other'\n")
    r = analyze_trace(path, patterns=pats)
    assert r.unknown().empty
    d = r.table.df
    # a generic (elementwise) kernel launched by an activation op is activation work
    assert _row(d, "my_custom_op_v2(float*, int)").category == C.ACTIVATION
    assert _row(d, k.SGEMM).category == C.OTHER


def test_kernel_place_rules() -> None:
    from bertscope.trace.breakdown import _Place

    emb = _Place(-1, S.EMBEDDING, C.EMBEDDING, P.FORWARD)
    assert kernel_place(C.DATA_MOVEMENT, emb).category == C.EMBEDDING
    assert kernel_place(C.DATA_MOVEMENT, emb, memory_op=True).category == C.DATA_MOVEMENT
    # the launching op's kind first: a GEMM-named kernel under an embedding op is embedding
    # work (cuDNN's sgemm under a convolution, a sort under an embedding-bag backward)
    assert kernel_place(C.GEMM, emb).category == C.EMBEDDING
    assert kernel_place(C.GEMM, emb, user=True).category == C.GEMM  # the user's rule wins
    assert kernel_place(C.ELEMENTWISE, emb, user=True).category == C.EMBEDDING  # generic
    mm = _Place(-1, S.OTHER, C.ELEMENTWISE, P.FORWARD)  # a generic launcher: the name says
    assert kernel_place(C.ACTIVATION, mm).category == C.ACTIVATION
    assert kernel_place(None, emb).category == C.EMBEDDING  # unknown: the launcher's
    assert kernel_place(None, None).category == C.OTHER
    opt = _Place(-1, S.OPTIMIZER, C.OPTIMIZER, P.OPTIMIZER)
    assert kernel_place(C.ELEMENTWISE, _Place(-1, S.OPTIMIZER, C.OTHER, P.OPTIMIZER)
                        ).category == C.OPTIMIZER
    comm = kernel_place(C.COMMUNICATION, opt)
    assert (comm.phase, comm.sublayer) == (P.COMMUNICATION, S.OTHER)


def test_a_trace_of_kernels_only(tmp_path: Path) -> None:
    f = tmp_path / "kernels.json"
    f.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": k.SGEMM, "pid": 0, "tid": 7, "ts": 10, "dur": 5},
        {"ph": "X", "cat": "kernel", "name": k.NCCL_AR, "pid": 0, "tid": 20, "ts": 12,
         "dur": 5}]}))
    r = analyze_trace(f)
    assert _row(r.table.df, k.SGEMM).phase == P.FORWARD  # no launcher: layer -1, forward
    dev = r.devices().iloc[0]
    # compute [10, 15], comm [12, 17]: overlap 3 us, exposed 2 us, busy 7 us
    assert (dev["overlap_s"], dev["exposed_comm_s"], dev["busy_s"]) == (
        pytest.approx(3e-6), pytest.approx(2e-6), pytest.approx(7e-6))


def test_ops_nest_on_the_nanosecond_grid_the_profiler_wrote(tmp_path: Path) -> None:
    """Kineto writes ts and dur in us with 3 decimals; ts + dur in float us rounds by ~1 ns at
    the ~5e12 us its clock reads, and torch nests on the exact integers. Values found by a
    search (float arithmetic checked in the comments):
    - aten::addmm ends with its aten::linear at ...639.165 + 1.007 = ...639.188 + 0.984 us,
      yet in floats 5459348676639.188 + 0.984 > 5459348676639.165 + 1.007: it is the
      linear's child, not a root;
    - aten::add starts at ...639.165 + 1.021 = ...640.186, the linear's own end in integers
      (torch: an op starting where another ends is not its child), yet in floats
      5459348676640.186 < 5459348676639.165 + 1.021 (a second thread: its own linear)."""
    from bertscope.trace.breakdown import _trees
    from bertscope.trace.reader import read_events
    op = dict(ph="X", cat="cpu_op", pid=1, tid=1)
    evs = [dict(op, name="aten::linear", ts=5459348676639.165, dur=1.007),
           dict(op, name="aten::addmm", ts=5459348676639.188, dur=0.984),
           dict(op, name="aten::linear", ts=5459348676639.165, dur=1.021, tid=2),
           dict(op, name="aten::add", ts=5459348676640.186, dur=0.5, tid=2)]
    assert evs[1]["ts"] + evs[1]["dur"] > evs[0]["ts"] + evs[0]["dur"]  # the float trap
    assert evs[3]["ts"] < evs[2]["ts"] + evs[2]["dur"]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": evs}))
    ev = read_events(path)
    tr = _trees(ev)
    names = [ev.names[ev.name[i]] for i in tr.order]
    parents = [names[p] if p >= 0 else None for p in tr.parent]
    assert list(zip(names, parents, strict=True)) == [
        ("aten::linear", None), ("aten::addmm", "aten::linear"),
        ("aten::linear", None), ("aten::add", None)]
