"""Property tests (hypothesis) of the analytic op model's and the performance model's
invariants."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bertscope.analytic import build
from bertscope.config import Checkpoint, Family, Optimizer, Precision, RunConfig
from bertscope.hardware import Device
from bertscope.optable import OpTable
from bertscope.perf import (
    BandwidthEfficiency,
    DeviceProfile,
    GemmEfficiency,
    Overhead,
    fuse,
    predict,
    roofline,
    select_peaks,
)
from bertscope.perf.gpu_gemm import TileWaveGemmEfficiency
from bertscope.perf.kernel_fusion import FUSED_COLUMN
from bertscope.taxonomy import Category, Phase, Sublayer, gemm_mask, phase_families
from tests.conftest import MODELLED, sized, tiny

FAST = settings(max_examples=40, deadline=None)

families = st.sampled_from(MODELLED)
heads = st.sampled_from([1, 2, 4])
head_dims = st.sampled_from([8, 16, 32])
sizes = st.integers(1, 6)
seqs = st.integers(1, 48)
precisions = st.sampled_from(list(Precision))
optimizers = st.sampled_from(list(Optimizer))
checkpoints = st.sampled_from(list(Checkpoint))  # none, selective, full


def _model(family: Family, a: int, d: int, layers: int = 2):
    kv = 2 if family is Family.LLAMA and a % 2 == 0 else None  # grouped K/V where a allows
    return tiny(family, hidden=a * d, heads=a, intermediate=4 * a * d, num_layers=layers,
                kv_heads=kv)


def _totals(m, **run):
    m, run["seq"] = sized(m, run["seq"])
    d = build(m, RunConfig(**run)).df
    return d["flops"].sum(), (d["bytes_read"] + d["bytes_written"]).sum(), d


@FAST
@given(families, heads, head_dims, sizes, seqs, precisions, optimizers, st.booleans(),
       checkpoints, st.integers(1, 3))
def test_flops_and_bytes_are_non_negative(family, a, d, b, s, prec, opt, drop, ckpt, micro):
    _, _, df = _totals(_model(family, a, d), batch=b, seq=s, precision=prec, optimizer=opt,
                       dropout=drop, checkpoint=ckpt, micro_batches=micro)
    for col in ("flops", "bytes_read", "bytes_written", "saved_bytes", "intensity"):
        assert (df[col] >= 0).all(), col
    # every row moves bytes unless it has no work at all (an adaptive-softmax cluster no
    # token of a tiny batch falls in: Transformer-XL)
    work = df["elements"] + df["m"] * df["n"] * df["k"]
    assert ((df["bytes_read"] + df["bytes_written"] > 0) | (work == 0)).all()


@FAST
@given(families, heads, head_dims, sizes, seqs, precisions)
def test_totals_grow_with_batch_seq_and_hidden(family, a, d, b, s, prec):
    m = _model(family, a, d)
    f, by, _ = _totals(m, batch=b, seq=s, precision=prec)
    f_b, by_b, _ = _totals(m, batch=b + 1, seq=s, precision=prec)
    f_s, by_s, _ = _totals(m, batch=b, seq=s + 1, precision=prec)
    f_h, by_h, _ = _totals(_model(family, a, 2 * d), batch=b, seq=s, precision=prec)
    for bigger_f, bigger_b in ((f_b, by_b), (f_s, by_s), (f_h, by_h)):
        assert bigger_f > f
        assert bigger_b > by


@FAST
@given(st.sampled_from([f for f in MODELLED if f is not Family.XLNET]), heads, head_dims,
       sizes, seqs, checkpoints, st.integers(1, 3))
def test_backward_gemm_flops_are_twice_forward(family, a, d, b, s, ckpt, micro):
    # not XLNet: its last layer's content stream runs forward and never reaches the loss, and
    # several of its batched GEMMs take a constant operand (segment one-hots, the query
    # mapping); test_xlnet checks which get a gradient, and its per-phase GEMM FLOPs equal
    # the reference model's measured ones (test_profile)
    _, _, df = _totals(_model(family, a, d), batch=b, seq=s, checkpoint=ckpt,
                       micro_batches=micro)
    # Llama's rotary-table product (inverse frequencies x positions) needs no gradient
    g = df[gemm_mask(df["category"]) & (df["sublayer"] != Sublayer.ROTARY)]
    fwd = g[g["phase"] == Phase.FORWARD]["flops"].sum()
    wgrad = g[g["phase"] == Phase.BACKWARD_WEIGHT]["flops"].sum()
    dgrad = g[g["phase"] == Phase.BACKWARD_DATA]["flops"].sum()
    # a GEMM on an input needing no gradient has a weight gradient and no data gradient: the
    # pixels (ViT's patch embedding), the position table (Transformer-XL's W_r, a GEMM; its
    # position scores are a batched GEMM with both gradients)
    no_grad_in = (g["sublayer"] == Sublayer.PATCH_EMBED) | (
        (g["sublayer"] == Sublayer.REL_POS) & (g["category"] == Category.GEMM))
    pixels = g[(g["phase"] == Phase.FORWARD) & no_grad_in]
    assert wgrad + dgrad == 2 * fwd - pixels["flops"].sum()


@FAST
@given(families, heads, head_dims, sizes, seqs, precisions)
def test_lamb_moves_at_least_what_adam_does(family, a, d, b, s, prec):
    m, s = sized(_model(family, a, d), s)

    def opt_bytes(opt):
        df = build(m, RunConfig(batch=b, seq=s, precision=prec, optimizer=opt)).df
        o = df[df["phase"] == Phase.OPTIMIZER]
        return o["bytes_read"].sum(), o["bytes_written"].sum()

    lamb_r, lamb_w = opt_bytes(Optimizer.LAMB)
    for other in (Optimizer.ADAM, Optimizer.ADAMW):
        r, w = opt_bytes(other)
        assert lamb_r >= r
        assert lamb_w >= w


# -- the performance model: predicted time never falls below the roofline bound, never rises
# when peak or bandwidth rise, and fusion never makes an iteration slower, over random
# devices, efficiency figures and tiny models
# a run is priced only at its own format's peak (a device without it refuses the run,
# tests/unit/test_device_precisions.py): the tests below take devices that have the run's
# format; sets without fp32 exercise the vector rows' stand-in (the GEMM format's peak)
peak_sets = st.sampled_from([("fp32", "bf16", "fp16", "tf32", "fp8"),
                             ("fp32", "fp16", "tf32", "fp8"), ("bf16", "tf32", "fp8"),
                             ("fp32", "tf32", "fp8"), ("bf16", "fp16", "tf32", "fp8")])


@st.composite
def devices(draw) -> Device:
    fmts = draw(peak_sets)
    peaks = {f: 10 ** draw(st.floats(12, 15)) for f in fmts}
    figures = {f"peaks.{f}": "test" for f in peaks}
    return Device(name="test-chip", sku="Test Chip", vendor="Test", kind="gpu", peaks=peaks,
                  memory_bytes=80e9, memory_bandwidth=10 ** draw(st.floats(11, 13)),
                  sources={**figures, "memory_bytes": "test", "memory_bandwidth": "test"})


fractions = st.one_of(st.just(1.0), st.floats(0.05, 1))


@st.composite
def profiles(draw) -> DeviceProfile:
    device, gemm, w0, d0 = (draw(devices()), draw(fractions),
                            draw(st.sampled_from([0.0, 1e6, 1e8, 1e10])),
                            draw(st.sampled_from([0.0, 8.0, 64.0])))
    bw, b0 = draw(fractions), draw(st.sampled_from([0.0, 1e4, 2.0**20, 1e8]))
    launch = draw(st.sampled_from([0.0, 0.0, 1e-6, 5e-6, 1e-4]))
    host = draw(st.sampled_from([0.0, 0.0, 2e-6, 2e-4]))
    per_phase = draw(st.sampled_from([{}, {"forward": 0.9, "backward_weight": 1.1},
                                      {"backward_data": 3.0}]))
    shaped = TileWaveGemmEfficiency(  # the first-principles GPU model (perf/gpu_gemm.py)
        sm_count=draw(st.sampled_from([1, 7, 108])), max_fraction=gemm,
        mma_k=draw(st.sampled_from([1, 16])),
        operand_intensity=draw(st.sampled_from([0.0, 86.4])), source="test")
    return DeviceProfile(
        device=device,
        gemm=shaped if draw(st.booleans()) else GemmEfficiency(
            max_fraction=gemm, half_saturation_flops=w0, half_saturation_dim=d0,
            per_phase=dict(per_phase), source="test"),
        bandwidth=BandwidthEfficiency(max_fraction=bw, half_saturation_bytes=b0,
                                      source="test"),
        overhead=Overhead(seconds_per_launch=launch, host_seconds_per_launch=host,
                          source="test"))


@st.composite
def tables(draw) -> OpTable:
    m, seq = sized(tiny(draw(families)), draw(st.integers(1, 32)))
    run = RunConfig(batch=draw(st.integers(1, 4)), seq=seq,
                    precision=draw(precisions), optimizer=draw(optimizers),
                    dropout=draw(st.booleans()), checkpoint=draw(checkpoints),
                    micro_batches=draw(st.integers(1, 2)))
    return build(m, run)


@FAST
@given(tables(), profiles())
def test_predicted_time_never_falls_below_the_roofline(table, profile) -> None:
    assume(profile.device.has(table.run.precision.value))
    d = predict(table, profile).df
    assert (d["time_s"] >= d["roofline_s"] * (1 - 1e-12)).all()
    assert d["time_s"].notna().all()
    # each term on its own, so that a larger one cannot hide a violation
    ideal = roofline(d, select_peaks(profile.device, table.run.precision))
    assert (d["compute_s"] >= ideal["compute_s"] * (1 - 1e-12)).all()
    assert (d["memory_s"] >= ideal["memory_s"] * (1 - 1e-12)).all()


@FAST
@given(tables(), profiles(), st.floats(1, 100), st.floats(1, 100))
def test_faster_peak_or_bandwidth_never_predicts_slower(table, profile, kp, kb) -> None:
    assume(profile.device.has(table.run.precision.value))
    dev = profile.device
    faster = dataclasses.replace(dev, peaks={f: v * kp for f, v in dev.peaks.items()},
                                 memory_bandwidth=dev.memory_bandwidth * kb)
    slow = predict(table, profile).df["time_s"].to_numpy()
    fast = predict(table, dataclasses.replace(profile, device=faster)).df["time_s"].to_numpy()
    assert np.all(fast <= slow * (1 + 1e-12))


@FAST
@given(tables(), profiles())
def test_fusion_never_makes_an_iteration_slower(table, profile) -> None:
    assume(profile.device.has(table.run.precision.value))
    fused = fuse(table)
    before = predict(table, profile).export_meta()["prediction"]["time_s"]
    after = predict(fused, profile).export_meta()["prediction"]["time_s"]
    assert after <= before * (1 + 1e-12)
    moved = table.df["bytes_read"] + table.df["bytes_written"]
    assert (fused.df["bytes_read"] + fused.df["bytes_written"]).sum() <= moved.sum()
    assert fused.df["flops"].sum() == pytest.approx(table.df["flops"].sum())
    assert (fused.df[["bytes_read", "bytes_written"]] >= 0).all().all()


@FAST
@given(tables())
def test_fusion_keeps_phase_families_and_recompute_apart(table) -> None:
    # a chain never spans two phase families, nor forward and recompute rows (a fused row of
    # both would take the phase "backward"), so the rows, FLOPs and bytes saved for backward
    # of each (family, recompute) stay with it
    def by_family(t: OpTable, rows) -> dict:
        d = t.df
        key = [f"{f}/{p == Phase.RECOMPUTE}" for f, p in zip(phase_families(d["phase"]),
                                                            d["phase"], strict=True)]
        return d.assign(key=key, rows=rows).groupby("key")[
            ["rows", "flops", "saved_bytes"]].sum().to_dict()

    fused = fuse(table)
    before = by_family(table, 1)
    after = by_family(fused, fused.df[FUSED_COLUMN])
    assert before["rows"] == after["rows"]
    for col in ("flops", "saved_bytes"):
        assert before[col].keys() == after[col].keys()
        for k, v in before[col].items():
            assert after[col][k] == pytest.approx(v)
