"""The performance model: roofline, efficiency models, fusion, predict, the CLI commands.

Hand arithmetic is written beside each expected value. The property tests of the three
invariants of the issue (predicted time never below the roofline bound, never higher on a
faster chip, never higher after fusion) are in test_properties.py.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from bertscope.analytic import build, ops, param_groups
from bertscope.config import Optimizer, Precision, RunConfig
from bertscope.errors import BertscopeError
from bertscope.hardware import Device, catalog, load_device
from bertscope.job import Job
from bertscope.optable import Op, OpTable, ProfileFacts
from bertscope.perf import (
    BandwidthEfficiency,
    CategoryBandwidthEfficiency,
    DeviceProfile,
    FusionStats,
    GemmEfficiency,
    Overhead,
    Prediction,
    default_profile,
    fuse,
    load_profile,
    predict,
    register_model,
    select_peaks,
)
from bertscope.perf.efficiency import gemm_phase
from bertscope.perf.kernel_fusion import FUSED_COLUMN
from bertscope.presets import get_model
from bertscope.taxonomy import Category, Phase, Sublayer
from tests.conftest import tiny


def _device(peaks: dict[str, float], bandwidth: float = 1e12, kind: str = "gpu") -> Device:
    figures = {f"peaks.{f}": "test" for f in peaks}
    return Device(name="test-chip", sku="Test Chip", vendor="Test", kind=kind, peaks=peaks,
                  memory_bytes=80e9, memory_bandwidth=bandwidth,
                  sources={**figures, "memory_bytes": "test", "memory_bandwidth": "test"})


def _ideal(device: Device, *, gemm: float = 1.0, w0: float = 0.0, d0: float = 0.0,
           bw: float = 1.0, b0: float = 0.0, launch: float = 0.0,
           host: float = 0.0, per_phase: dict[str, float] | None = None) -> DeviceProfile:
    return DeviceProfile(device=device,
                         gemm=GemmEfficiency(max_fraction=gemm, half_saturation_flops=w0,
                                             half_saturation_dim=d0,
                                             per_phase=dict(per_phase or {}), source="test"),
                         bandwidth=BandwidthEfficiency(max_fraction=bw,
                                                       half_saturation_bytes=b0, source="test"),
                         overhead=Overhead(seconds_per_launch=launch,
                                           host_seconds_per_launch=host, source="test"))


def _table(*rows: Op, precision: str = "fp32") -> OpTable:
    job = Job(model=get_model("bert-tiny"), run=RunConfig(batch=1, seq=1, precision=precision))
    return OpTable.from_ops(rows, job=job)


N = 1024
GEMM = Op("gemm", 0, Sublayer.FFN1, Category.GEMM, Phase.FORWARD, m=N, n=N, k=N, batch=1,
          flops=2 * N**3, bytes_read=2 * 4 * N * N, bytes_written=4 * N * N)


# -- hand-derived checks ----------------------------------------------------------------------
def test_one_gemm_at_full_efficiency_is_flops_over_peak() -> None:
    dev = _device({"fp32": 100e12})
    p = predict(_table(GEMM), _ideal(dev), "fp32").df.iloc[0]
    # 2 * 1024^3 = 2,147,483,648 FLOPs / 100e12 FLOP/s = 21.47 us; its 12 MiB at 1 TB/s take
    # 12,582,912 / 1e12 = 12.6 us, so it is compute-bound
    assert p["time_s"] == pytest.approx(21.474836e-6, rel=1e-6)
    assert p["roofline_s"] == pytest.approx(21.474836e-6, rel=1e-6)
    assert p["memory_s"] == pytest.approx(12.582912e-6, rel=1e-6)
    assert p["bound"] == "compute"


def test_gemm_efficiency_shape_slows_streaming_not_fill() -> None:
    dev = _device({"fp32": 100e12})
    prof = _ideal(dev, gemm=0.5, w0=2 * N**3, d0=N)
    p = predict(_table(GEMM), prof, "fp32").df.iloc[0]
    # W = W0 = 2 * 1024^3; S = 1024 / (1024 + 1024) = 1/2; peak x max = 50e12 FLOP/s:
    # time = W / (50e12 x S) + W0 / 50e12 = 85.90 us + 42.95 us = 128.85 us
    # (21.47 us at the full peak: 21.47 / 0.5 / 0.5 + 21.47 / 0.5)
    assert p["time_s"] == pytest.approx(21.474836e-6 * (4 + 2), rel=1e-6)
    assert p["roofline_s"] == pytest.approx(21.474836e-6, rel=1e-6)


def test_thin_tiny_gemm_pays_its_fill_cost_once() -> None:
    """A 2-class classifier GEMM (m 8, n 2, k 1024: W = 2 x 8 x 2 x 1024 = 32,768 FLOPs)
    under W0 = 1e9 FLOPs, D0 = 256: its streaming part is W / (peak max S) with S = 2 / 258,
    its fixed part W0 / (peak max): 32,768 x 129 / 50e12 + 1e9 / 50e12 = 0.0845 us + 20 us,
    about the fill cost of any launch (not 129 x 20 us, as a product of the two saturations
    would make it)."""
    dev = _device({"fp32": 100e12})
    prof = _ideal(dev, gemm=0.5, w0=1e9, d0=256)
    thin = GEMM._replace(m=8, n=2, k=1024, flops=32768, bytes_read=0,
                         bytes_written=0)
    t = predict(_table(thin), prof, "fp32").df["time_s"].iloc[0]
    assert t == pytest.approx(32768 * 129 / 50e12 + 1e9 / 50e12, rel=1e-9)


def test_memory_bound_row_uses_achieved_bandwidth() -> None:
    dev = _device({"fp32": 100e12}, bandwidth=1e12)
    row = Op("add", 0, Sublayer.FFN_ADD_NORM, Category.ELEMENTWISE, Phase.FORWARD,
             elements=10**9, flops=1e9, bytes_read=1e9, bytes_written=1e9)
    p = predict(_table(row), _ideal(dev, bw=0.8), "fp32").df.iloc[0]
    # 2e9 bytes / (1e12 B/s * 0.8) = 2.5 ms; roofline 2e9 / 1e12 = 2 ms; 1e9 / 100e12 = 10 us
    assert p["time_s"] == pytest.approx(2.5e-3)
    assert p["roofline_s"] == pytest.approx(2e-3)
    assert p["bound"] == "memory"
    half = predict(_table(row), _ideal(dev, bw=0.8, b0=2e9), "fp32").df.iloc[0]
    # half saturation at the row's own 2e9 bytes: fraction 0.4, time 5 ms
    assert half["time_s"] == pytest.approx(5e-3)


def test_small_ops_are_overhead_bound() -> None:
    dev = _device({"fp32": 100e12})
    row = Op("scale", 0, Sublayer.ATTN_SCORE, Category.ELEMENTWISE, Phase.FORWARD,
             elements=10, count=3, flops=30, bytes_read=120, bytes_written=120)
    p = predict(_table(row), _ideal(dev, launch=5e-6), "fp32").df.iloc[0]
    assert p["time_s"] == pytest.approx(15e-6)  # 3 launches x 5 us
    assert p["bound"] == "overhead"


def test_host_time_adds_to_every_launch() -> None:
    dev = _device({"fp32": 100e12}, bandwidth=1e12)
    row = Op("add", 0, Sublayer.FFN_ADD_NORM, Category.ELEMENTWISE, Phase.FORWARD,
             elements=10**9, count=2, flops=1e9, bytes_read=1e9, bytes_written=1e9)
    p = predict(_table(row), _ideal(dev, launch=5e-6, host=1e-4), "fp32").df.iloc[0]
    # max(10 us compute, 2 ms memory, 2 x 5 us floor) + 2 launches x 100 us host = 2.2 ms
    assert p["time_s"] == pytest.approx(2.2e-3)
    assert p["host_s"] == pytest.approx(2e-4)
    assert p["bound"] == "memory"
    small = row._replace(flops=30, bytes_read=120, bytes_written=120)
    q = predict(_table(small), _ideal(dev, launch=5e-6, host=1e-4), "fp32").df.iloc[0]
    assert q["time_s"] == pytest.approx(2 * 5e-6 + 2e-4)  # floor + host
    assert q["bound"] == "overhead"


def test_host_gap_is_fitted_per_analytic_launch() -> None:
    from bertscope.perf.fit import fit_host_gap

    def pair(iteration_s: float, op_s: float, launches: int) -> tuple[OpTable, OpTable]:
        measured = OpTable.from_ops(
            [Op("aten::add", 0, Sublayer.FFN1, Category.ELEMENTWISE, Phase.FORWARD,
                time_s=op_s)], (ProfileFacts(iteration_s=iteration_s),))
        analytic = OpTable.from_ops(
            [Op("add", 0, Sublayer.FFN1, Category.ELEMENTWISE, Phase.FORWARD, count=launches)])
        return measured, analytic

    # gaps per launch: (1.0 - 0.8) / 100 = 2 ms, (2.0 - 1.9) / 200 = 0.5 ms,
    # (1.5 - 1.2) / 100 = 3 ms; the median is 2 ms
    pairs = [pair(1.0, 0.8, 100), pair(2.0, 1.9, 200), pair(1.5, 1.2, 100)]
    assert fit_host_gap(pairs) == pytest.approx(2e-3)
    assert fit_host_gap([(OpTable.from_ops([]), OpTable.from_ops([]))]) is None


def test_gemms_use_the_precision_peak_and_other_ops_fp32() -> None:
    a100 = load_device("a100")
    table = ops("bert-tiny", batch=2, seq=16, precision="bf16")
    p = predict(table, _ideal(a100)).df
    gemm = p[p["category"] == Category.GEMM].iloc[0]
    soft = p[p["category"] == Category.SOFTMAX].iloc[0]
    assert gemm["compute_s"] == pytest.approx(gemm["flops"] / 312e12)
    assert soft["compute_s"] == pytest.approx(soft["flops"] / 19.5e12)


@pytest.mark.parametrize(
    ("device", "precision", "fmt", "peak"),
    [
        ("a100", "fp32", "fp32", 19.5e12),  # PyTorch's default: no TF32 for matmuls
        ("a100", "bf16", "bf16", 312e12),
        ("h100", "fp16", "fp16", 989.4e12),
        ("v100", "fp16", "fp16", 125e12),
        ("tpu-v3", "bf16", "bf16", 123e12),
    ],
)
def test_peak_selection(device, precision, fmt, peak) -> None:
    peaks = select_peaks(load_device(device), precision)
    assert peaks.gemm_format == fmt
    assert peaks.gemm_flops == pytest.approx(peak)
    assert not any("GEMMs" in n for n in peaks.notes)


@pytest.mark.parametrize(
    ("device", "precision", "message"),
    [  # no stand-in: a format the device lacks refuses the run (the catalog's peak tables)
        ("tpu-v3", "fp32", "tpu-v3 has no fp32 (it has bf16); pass --precision bf16"),
        ("tpu-v3", "fp16", "tpu-v3 has no fp16 (it has bf16); pass --precision bf16"),
        ("v100", "bf16", "v100-sxm2-32gb has no bf16 (it has fp32, fp16); pass --precision fp16"),
        ("v100", "tf32", "v100-sxm2-32gb has no tf32 (it has fp32, fp16); pass --precision fp32"),
        ("mi250x", "tf32", "mi250x-oam has no tf32 (it has fp32, fp16, bf16, int8); pass "
                           "--precision fp32"),
    ],
)
def test_a_format_the_device_lacks_is_refused(device, precision, message) -> None:
    with pytest.raises(BertscopeError) as e:
        select_peaks(load_device(device), precision)
    assert str(e.value) == message


def test_tpu_vector_rows_fall_back_to_the_matrix_peak_and_tf32_can_be_forced() -> None:
    tpu = select_peaks(load_device("tpu-v4"), "bf16")
    assert tpu.vector_format == "bf16" and tpu.vector_flops == pytest.approx(275e12)
    assert select_peaks(load_device("a100"), "fp32", "tf32").gemm_flops == pytest.approx(156e12)
    with pytest.raises(BertscopeError, match="no published dense tf32"):
        select_peaks(load_device("v100"), "fp32", "tf32")
    with pytest.raises(BertscopeError, match="cannot run training"):
        select_peaks(load_device("tpu-v1"), "bf16")


# -- fusion: hand checks ----------------------------------------------------------------------
def _fused_row(fused: OpTable, name: str, layer: int) -> pd.Series:
    d = fused.df
    return d[(d["name"] == name) & (d["layer"] == layer)].iloc[0]


def _members(table: OpTable, names: list[str], layer: int) -> pd.DataFrame:
    d = table.df
    return d[d["name"].isin(names) & (d["layer"] == layer)]


def test_dropout_residual_layernorm_elides_three_tensor_passes() -> None:
    m = tiny()  # hidden 64
    table = build(m, RunConfig(batch=2, seq=8, precision=Precision.BF16))
    fused = fuse(table)
    names = ["attn_out_dropout", "residual1", "attn_norm"]
    row = _fused_row(fused, "+".join(names), 0)
    parts = _members(table, names, 0)
    # X = 2 bytes x (2 x 8 tokens x 64) = 2,048 bytes. dropout -> residual: write and read of
    # X elided; residual -> layernorm: layernorm keeps its input for backward, so only the
    # read goes: 3 X = 6,144 bytes. The 1-byte mask (1,024 B) is still written.
    assert parts["bytes_read"].sum() - row["bytes_read"] == 2 * 2048
    assert parts["bytes_written"].sum() - row["bytes_written"] == 2048
    assert row["saved_bytes"] == parts["saved_bytes"].sum()
    assert row["flops"] == parts["flops"].sum()
    assert row["category"] == Category.LAYERNORM and row[FUSED_COLUMN] == 3
    assert row["phase"] == Phase.FORWARD and row["count"] == 1


def test_attention_chain_forward_and_backward() -> None:
    table = build(tiny(), RunConfig(batch=2, seq=8, precision=Precision.BF16))
    fused = fuse(table)
    # scores: 2 x 4 heads x 8 x 8 = 512 elements, X = 1,024 bytes
    fwd = ["score_scale", "score_mask", "softmax", "attn_dropout"]
    row, parts = _fused_row(fused, "+".join(fwd), 1), _members(table, fwd, 1)
    # reads: three members get the scores on chip (3 X); writes: scale's and mask's outputs
    # go (2 X); softmax keeps its output for backward, so its write stays
    assert parts["bytes_read"].sum() - row["bytes_read"] == 3 * 1024
    assert parts["bytes_written"].sum() - row["bytes_written"] == 2 * 1024
    bwd = ["attn_dropout.grad", "softmax.grad", "score_scale.grad"]
    row, parts = _fused_row(fused, "+".join(bwd), 1), _members(table, bwd, 1)
    # backward: re-reads elided (2 X), every gradient still written
    assert parts["bytes_read"].sum() - row["bytes_read"] == 2 * 1024
    assert parts["bytes_written"].sum() == row["bytes_written"]
    assert row["phase"] == Phase.BACKWARD_DATA


def test_backward_add_norm_chain_mixes_data_and_weight_gradients() -> None:
    # fp32: under autocast the residual add's gradient cast (a copy, not fused) would sit
    # between the norm's and the dropout's gradients
    table = build(tiny(), RunConfig(batch=2, seq=8, precision=Precision.FP32))
    names = ["residual2.grad_sum", "attn_norm.grad", "attn_norm.weight_grad",
             "attn_out_dropout.grad"]
    row = _fused_row(fuse(table), "+".join(names), 0)
    parts = _members(table, names, 0)
    # X per later member: 2 x 8 tokens x 64 features x 4 B = 4096
    assert parts["bytes_read"].sum() - row["bytes_read"] == 3 * 4096
    assert row["phase"] == Phase.BACKWARD  # data- and weight-gradient work in one kernel


@pytest.mark.parametrize(("optimizer", "precision", "elided_per_param"), [
    ("lamb", "fp8", 3 * 4),  # norms of w and u ride the moments pass (2 x 4 B); copy (4 B)
    ("adam", "fp8", 4),  # the copy to bf16 rides the update pass: w is not read again
    ("lamb", "bf16", 2 * 4),  # autocast: no 16-bit copy to refresh, only the norms ride
    ("adam", "fp32", 0),  # nothing to elide, only launches
])
def test_fused_optimizer_is_one_launch_per_stage(optimizer, precision, elided_per_param) -> None:
    m = tiny()
    table = build(m, RunConfig(batch=2, seq=8, precision=Precision(precision),
                               optimizer=Optimizer(optimizer)))
    fused = fuse(table)
    before = table.df[table.df["phase"] == Phase.OPTIMIZER]
    after = fused.df[fused.df["phase"] == Phase.OPTIMIZER]
    params = sum(g.params for g in param_groups(m))
    moved = (before["bytes_read"] + before["bytes_written"]).sum()
    assert moved - (after["bytes_read"] + after["bytes_written"]).sum() == \
        elided_per_param * params
    stages = {"lamb": 3, "adam": 1}[optimizer]  # LAMB: grad norm | moments | update
    assert len(after) == stages
    assert after[FUSED_COLUMN].sum() == len(before)
    assert (after["elements"] == params).all()


def test_fuse_keeps_totals_and_is_idempotent() -> None:
    table = ops("bert-tiny", batch=2, seq=16, precision="bf16", optimizer="lamb")
    fused = fuse(table)
    assert fused.df[FUSED_COLUMN].sum() == len(table)
    assert fused.df["flops"].sum() == pytest.approx(table.df["flops"].sum())
    assert fused.df["saved_bytes"].sum() == pytest.approx(table.df["saved_bytes"].sum())
    info = FusionStats.of(fused)
    assert info.launches_saved == table.df["count"].sum() - fused.df["count"].sum()
    assert len(fuse(fused)) == len(fused)
    with pytest.raises(BertscopeError, match="precision"):
        fuse(OpTable(df=table.df))


# -- Phase.family decides the per-phase keys and the chain split --------------------------------
def test_recompute_rows_take_the_forward_per_phase_figures() -> None:
    # the GEMM factor's key is the family where that is forward, else the phase itself
    assert list(gemm_phase(list(Phase))) == [
        "forward", "backward_data", "backward_weight", "backward", "forward", "optimizer",
        "communication"]
    dev = _device({"fp32": 100e12})
    prof = _ideal(dev, per_phase={"forward": 0.5, "backward_data": 0.8})
    gemms = [GEMM._replace(phase=p) for p in (Phase.FORWARD, Phase.RECOMPUTE,
                                              Phase.BACKWARD_DATA, Phase.BACKWARD_WEIGHT)]
    p = predict(_table(*gemms), prof, "fp32").df
    # 21.47 us at peak (memory 12.6 us): / 0.5 forward and recompute, / 0.8 data gradient,
    # weight gradient not listed (factor 1)
    want = [42.949673e-6, 42.949673e-6, 26.843546e-6, 21.474836e-6]
    assert p["time_s"].tolist() == pytest.approx(want, rel=1e-6)
    # a fitted bandwidth entry "category@family": recompute takes the forward one
    bw = CategoryBandwidthEfficiency(per_category={
        "dropout": [0.1, 0.0], "dropout@forward": [0.2, 0.0], "dropout@backward": [0.4, 0.0]})
    phases = [Phase.FORWARD, Phase.RECOMPUTE, Phase.BACKWARD_DATA, Phase.BACKWARD_WEIGHT,
              Phase.OPTIMIZER]
    rows = {"category": np.array([Category.DROPOUT] * 5, dtype=object),
            "phase": np.array(phases, dtype=object), "count": np.ones(5),
            "bytes_read": np.full(5, 1e6), "bytes_written": np.zeros(5)}
    assert bw.fraction(rows).tolist() == pytest.approx([0.2, 0.2, 0.4, 0.4, 0.1])


def test_fusion_keeps_recompute_apart_from_forward_and_elides_its_writes() -> None:
    # adjacent rows of one layer, sublayer group, count and element count, all of the forward
    # family: a forward dropout + residual add, then the same recomputed with the layernorm.
    # Two executions, so two chains. X = 2 bytes (bf16) x 100 elements = 200 bytes.
    def row(name: str, cat: Category, phase: Phase, read: float, written: float,
            saved: float) -> Op:
        return Op(name, 0, Sublayer.ATTN_ADD_NORM, cat, phase, elements=100, flops=100,
                  bytes_read=read, bytes_written=written, saved_bytes=saved)

    C, P = Category, Phase
    rows = [row("drop", C.DROPOUT, P.FORWARD, 200, 300, 100),  # X and the 1-byte mask
            row("add", C.ELEMENTWISE, P.FORWARD, 400, 200, 0),
            row("drop", C.DROPOUT, P.RECOMPUTE, 200, 300, 100),
            row("add", C.ELEMENTWISE, P.RECOMPUTE, 400, 200, 0),
            row("norm", C.LAYERNORM, P.RECOMPUTE, 200, 200, 200)]
    fused = fuse(_table(*rows, precision="bf16")).df
    assert fused["name"].tolist() == ["drop+add", "drop+add+norm"]
    assert fused["phase"].tolist() == [P.FORWARD, P.RECOMPUTE]
    assert fused[FUSED_COLUMN].tolist() == [2, 3]
    # forward: add gets X on chip (read -200); dropout's output is not written (-200)
    # recompute, as forward work: add's and norm's reads go (-400); the dropout -> add write
    # goes (-200), the add -> norm write stays (layernorm keeps its input for backward)
    assert fused["bytes_read"].tolist() == [600 - 200, 800 - 400]
    assert fused["bytes_written"].tolist() == [500 - 200, 700 - 200]
    assert fused["flops"].tolist() == [200, 300]


# -- profiles: defaults, JSON round trip, swapping models --------------------------------------
@pytest.mark.parametrize("device", catalog(), ids=lambda d: d.name)
def test_default_profiles_round_trip_through_json(device, tmp_path) -> None:
    prof = default_profile(device)
    # bandwidth and launch figures are cited where the catalog has them (NVIDIA launches,
    # V100's streaming fraction and DRAM latency), else the assumed default
    # (tests/unit/test_perf_memory_defaults.py)
    for part in ("bandwidth", "overhead"):
        assert (prof.sources[part] == "assumed default"
                or (device.kind == "gpu" and "https://" in prof.sources[part]))
    # GPUs with an SM count get the first-principles GEMM model (tests/unit/test_perf_gpu_gemm.py);
    # one without, with cited caps: the saturating default per format (test_gemm_caps.py)
    assert (prof.sources["gemm"] == "assumed default"
            or prof.sources["gemm"].startswith("tile/wave quantization")
            or prof.sources["gemm"] == "catalog caps per format (cited or assumed)")
    again = DeviceProfile.from_json(prof.to_json())
    assert again == prof
    assert again.device.sources == device.sources
    path = prof.save(tmp_path / f"{device.name}.json")
    assert load_profile(path) == prof


def test_load_profile_takes_names_device_files_and_profiles(tmp_path) -> None:
    assert load_profile("A100").device.name == "a100-sxm4-80gb"
    fixture = "tests/data/devices/my-accelerator.toml"
    assert load_profile(fixture).device == load_device(fixture)
    custom = _ideal(load_device("h100"), gemm=0.7).with_models(
        overhead=Overhead(seconds_per_launch=2e-6, source="fit on 2026-01-01"))
    path = custom.save(tmp_path / "h100-fitted.json")
    assert load_profile(str(path)).overhead.source == "fit on 2026-01-01"
    with pytest.raises(BertscopeError, match="unknown device"):
        load_profile("a1000x")


@register_model
@dataclass(kw_only=True, frozen=True, slots=True)
class FlatGemm:
    """A swapped-in model: one fraction for every GEMM."""

    fraction_value: float
    source: str = "test"

    def fraction(self, rows: pd.DataFrame) -> np.ndarray:
        return np.full(len(rows), self.fraction_value)

    def to_dict(self) -> dict:
        return {"model": "FlatGemm", **dataclasses.asdict(self)}


def test_a_registered_model_swaps_in_and_round_trips() -> None:
    dev = _device({"fp32": 100e12})
    prof = _ideal(dev).with_models(gemm=FlatGemm(fraction_value=0.5))
    p = predict(_table(GEMM), prof, "fp32").df.iloc[0]
    assert p["time_s"] == pytest.approx(2 * 21.474836e-6, rel=1e-6)  # 21.47 us / 0.5
    assert DeviceProfile.from_json(prof.to_json()) == prof
    bad = prof.with_models(gemm=FlatGemm(fraction_value=1.5))
    with pytest.raises(BertscopeError, match=r"\(0, 1\]"):
        predict(_table(GEMM), bad, "fp32")


@pytest.mark.parametrize("make", [
    lambda: GemmEfficiency(max_fraction=0, half_saturation_flops=1),
    lambda: GemmEfficiency(max_fraction=1.2, half_saturation_flops=1),
    lambda: BandwidthEfficiency(max_fraction=0.8, half_saturation_bytes=-1),
    lambda: Overhead(seconds_per_launch=math.nan),
    lambda: Overhead(seconds_per_launch=1e-6, source=" "),
])
def test_bad_model_figures_raise(make) -> None:
    with pytest.raises(BertscopeError):
        make()


def test_bad_profile_files_raise_one_clear_error(tmp_path) -> None:
    prof = default_profile(load_device("a100")).to_dict()
    prof["gemm"]["model"] = "NoSuchModel"
    with pytest.raises(BertscopeError, match="unknown model 'NoSuchModel'"):
        DeviceProfile.from_dict(prof)
    prof = default_profile(load_device("a100")).to_dict()
    prof["bandwidth"]["speed"] = 3
    with pytest.raises(BertscopeError, match="no field 'speed'"):
        DeviceProfile.from_dict(prof)
    with pytest.raises(BertscopeError, match="not valid JSON"):
        DeviceProfile.from_json("{")


def test_prediction_meta_has_tokens_per_second() -> None:
    p = predict(ops("bert-tiny", batch=4, seq=32, precision="bf16", micro_batches=2),
                load_device("h100"))
    pred = Prediction.of(p)
    assert pred.tokens == 4 * 32 * 2
    assert pred.tokens_per_s == pytest.approx(256 / pred.time_s)
    assert pred.time_s == pytest.approx(p.df["time_s"].sum())
    assert pred.precision is Precision.BF16  # the enum, not its string
    assert set(p.df["bound"]) <= {"compute", "memory", "overhead"}
    exported = json.loads(json.dumps(p.export_meta()))  # exports keep working
    assert exported["prediction"]["precision"] == "bf16"
    assert exported["prediction"]["tokens"] == 256


# -- the CLI ----------------------------------------------------------------------------------
def _run(capsys, *argv: str) -> tuple[int, str, str]:
    from bertscope import cli
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_predict_prints_a_prediction(capsys) -> None:
    rc, out, err = _run(capsys, "predict", "bert-tiny", "--device", "a100", "--precision",
                        "bf16", "--batch", "2", "--seq", "16", "--top", "3")
    assert rc == 0, err
    for needle in ("predicted iteration", "tokens/s", "of bf16 peak", "By category",
                   "By sublayer group", "By phase", "By bound", "Top 3 ops", "compute"):
        assert needle in out, needle


def test_cli_predict_fusion_output_and_plot(capsys, tmp_path) -> None:
    csv, svg = tmp_path / "pred.csv", tmp_path / "roof.svg"
    rc, out, err = _run(capsys, "predict", "bert-tiny", "--device", "tpu-v4", "--batch", "2",
                        "--seq", "16", "--precision", "bf16", "--fusion", "--output", str(csv),
                        "--plot", str(svg))
    assert rc == 0, err
    assert "fusion:" in out and "faster" in out
    assert "note: other ops at the bf16 peak" in out  # a TPU publishes no fp32 vector rate
    got = pd.read_csv(csv)
    assert {"time_s", "bound", "roofline_s", FUSED_COLUMN} <= set(got.columns)
    assert "<svg" in svg.read_text()


def test_cli_png_plot(capsys, tmp_path) -> None:
    png = tmp_path / "roof.png"
    rc, _, err = _run(capsys, "predict", "bert-tiny", "--device", "a100", "--batch", "1",
                      "--seq", "8", "--top", "0", "--plot", str(png))
    assert rc == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("argv", "needle"), [
    (["predict", "bert-tiny", "--device", "a1000x"], "unknown device 'a1000x'"),
    (["predict", "bert-tiny", "--device", "tpu-v1"], "cannot run training"),
    (["predict", "bert-tiny", "--device", "a100", "--plot", "x.pdf"], ".png or .svg"),
    (["predict", "bert-tiny", "--device", "nope/chip.toml"], "no such file"),
    (["predict", "bert-tiny"], "--device"),
])
def test_cli_predict_bad_input_is_one_line_exit_2(capsys, argv, needle) -> None:
    rc, _, err = _run(capsys, *argv)
    assert rc == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1


def test_cli_devices_lists_the_catalog(capsys) -> None:
    rc, out, _ = _run(capsys, "devices")
    assert rc == 0
    assert "a100-sxm4-80gb" in out and "tpu-v5p" in out
