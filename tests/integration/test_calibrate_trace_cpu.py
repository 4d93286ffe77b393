"""`calibrate --from-trace` on a CPU trace recorded here with shapes (a tiny BERT training
step through torch.profiler with record_shapes=True): the CPU ops carry the durations; a
prediction of the same model and run from the profile fitted on the trace reproduces the
trace's GEMM time."""

from __future__ import annotations

from collections import Counter

import pytest

from bertscope.analytic import build
from bertscope.config import Family, RunConfig
from bertscope.perf.predict import predict
from bertscope.taxonomy import gemm_mask
from bertscope.trace import read_trace
from tests.conftest import tiny

pytest.importorskip("torch")
from bertscope.measure.profile import profile
from bertscope.studies.trace_calibration import calibrate_from_traces


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory: pytest.TempPathFactory):
    """A trace of two training iterations of a tiny BERT at batch 2, sequence 16."""
    path = tmp_path_factory.mktemp("trace") / "tiny_bert.json"
    model, run = tiny(Family.BERT), RunConfig(batch=2, seq=16)
    profile(model, run, iters=2, warmup=1, trace_out=path)  # record_shapes=True
    return path, model, run


def test_cpu_trace_points_match_the_analytic_gemms(cpu_trace) -> None:
    path, model, run = cpu_trace
    from bertscope.trace.shapes import trace_points

    tp = trace_points(path)
    assert tp.device == "cpu" and tp.time_source == "cpu" and tp.iterations == 2
    measured = Counter()
    for p in tp.gemm:
        measured[(p["m"], p["n"], p["k"], p["batch"], p["phase"])] += round(p["count"])
    a = build(model, run).df
    a = a[gemm_mask(a["category"])]
    analytic = Counter()
    for r in a.itertuples():
        analytic[(r.m, r.n, r.k, r.batch, r.phase)] += r.count
    # every GEMM the analytic model has, with its shape and phase, is in the trace
    # (the trace records matmul's 4-D operands as (s, s_or_d, d_or_s, b x heads), as the
    # analytic model writes the attention bmm)
    assert measured == analytic


def test_prediction_from_trace_profile_reproduces_trace_gemm_time(cpu_trace) -> None:
    path, model, run = cpu_trace
    prof, report = calibrate_from_traces([path])
    assert prof.device.kind.value == "cpu" and report["catalog_device"] is None
    assert prof.provenance["traces"][0]["time_source"] == "cpu"
    # the trace's GEMM time per iteration, as the plain trace reader attributes it
    t = read_trace(path).df
    trace_gemm_s = float(t.loc[gemm_mask(t["category"]), "time_s"].sum())
    pred = predict(build(model, run), prof).df
    pred_gemm_s = float(pred.loc[gemm_mask(pred["category"]), "time_s"].sum())
    assert pred_gemm_s == pytest.approx(trace_gemm_s, rel=0.10)
