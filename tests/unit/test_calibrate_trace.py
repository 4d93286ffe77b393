"""`calibrate --from-trace` on the GPU-style fixtures in tests/data/traces/calibrate (written
by make_calibrate.py from chosen rates): the fits, provenance, a prediction of the traced
run, and one-line errors. Expected values are worked by hand from the fixture's rates."""

from __future__ import annotations

import hashlib
import json
from datetime import date
from pathlib import Path

import pytest

from bertscope.cli import main
from bertscope.errors import BertscopeError
from bertscope.optable import Op, OpTable
from bertscope.perf.efficiency import DeviceProfile
from bertscope.perf.predict import predict
from bertscope.studies.trace_calibration import calibrate_from_traces, match_device
from bertscope.taxonomy import Category, Phase, Sublayer
from bertscope.trace.shapes import gemm_format, op_bytes, trace_points

DATA = Path(__file__).parents[1] / "data" / "traces" / "calibrate"
NVIDIA, AMD = DATA / "nvidia_train.json", DATA / "amd_infer.json"

# The NVIDIA fixture, by hand. Forward linears at 0.5 x 19.5 TFLOP/s = 9.75e12 FLOP/s:
#   X[8,512,1024] W[1024,1024]: M=4096 N=1024 K=1024, 2MNK = 8.589934592e9 FLOP -> 881.019 us
#   X[8,512,1024] W[4096,1024]: M=4096 N=4096 K=1024, 3.4359738368e10 FLOP    -> 3524.076 us
#   X[8,512,4096] W[1024,4096]: M=4096 N=1024 K=4096, 3.4359738368e10 FLOP    -> 3524.076 us
# Their data and weight gradients at 0.4 x 19.5 = 7.8e12 FLOP/s: the same FLOPs per pair,
#   2 x 1101.274 us (the 1024x1024 layer) and 4 x 4405.095 us (the two 4096-wide layers).
FWD_US = 881.019 + 2 * 3524.076
BWD_US = 2 * 1101.274 + 4 * 4405.095
GEMM_US = FWD_US + BWD_US  # 27752.099 us


def nvidia_gemm_rows() -> list[Op]:
    """The traced run as op-table rows: the nine GEMMs (one launch each)."""
    def row(m: int, n: int, k: int, phase: Phase) -> Op:
        return Op("gemm", 0, Sublayer.FFN1, Category.GEMM, phase, m=m, n=n, k=k, batch=1,
                  flops=2.0 * m * n * k)

    fwd = [row(4096, 1024, 1024, Phase.FORWARD), row(4096, 4096, 1024, Phase.FORWARD),
           row(4096, 1024, 4096, Phase.FORWARD)]
    bwd = []
    for m, n, k in ((4096, 1024, 1024), (4096, 4096, 1024), (4096, 1024, 4096)):
        bwd += [row(m, k, n, Phase.BACKWARD_DATA), row(k, n, m, Phase.BACKWARD_WEIGHT)]
    return fwd + bwd


def test_points_join_kernels_to_launching_op_shapes() -> None:
    tp = trace_points(NVIDIA)
    assert tp.device == "NVIDIA A100-SXM4-80GB" and tp.time_source == "device"
    shapes = sorted((p["m"], p["n"], p["k"], p["phase"]) for p in tp.gemm)
    assert shapes == sorted([
        (4096, 1024, 1024, "forward"), (4096, 4096, 1024, "forward"),
        (4096, 1024, 4096, "forward"),
        # dX = dY[4096, N] @ W[N, K]; dW = dY^T[N, 4096] @ X[4096, K]
        (4096, 4096, 1024, "backward_data"), (1024, 4096, 4096, "backward_weight"),
        (4096, 1024, 4096, "backward_data"), (4096, 1024, 4096, "backward_weight"),
        (4096, 1024, 1024, "backward_data"), (1024, 1024, 4096, "backward_weight")])
    assert tp.gemm_s == pytest.approx(GEMM_US * 1e-6, rel=1e-9)
    mem = {p["name"]: p for p in tp.memory}
    # gelu [8,512,4096] fp32: 16,777,216 elements x 4 B read + written = 134,217,728 B
    assert mem["aten::gelu"]["bytes"] == 134_217_728 and mem["aten::gelu"]["category"] == \
        "activation"
    # add of two [8,512,1024] fp32: 2 x 16,777,216 B read + 16,777,216 B written
    assert mem["aten::add"]["bytes"] == 50_331_648


def test_fit_on_nvidia_fixture() -> None:
    profile, report = calibrate_from_traces([NVIDIA])
    assert profile.device.name == "a100-sxm4-80gb"  # matched from deviceProperties
    g = profile.gemm.for_format("fp32")  # the format the trace's GEMMs ran in
    # the fixture's forward GEMMs run at 0.5 of peak, its backward ones at 0.4; every GEMM
    # has min(M, N, K) = 1024 (no shape term earns its place) and 2 x 10^9+ FLOPs, so the
    # fixed cost the least-squares fit may keep (W0, from the durations' rounding to 1 ns)
    # is under 1e-5 of a launch: each phase's fraction is max_fraction x its factor
    assert g.half_saturation_dim == 0 and g.half_saturation_flops < 1e-5 * 2 * 1024**3
    assert g.max_fraction * g.per_phase["forward"] == pytest.approx(0.5, rel=1e-4)
    assert g.max_fraction * g.per_phase["backward_data"] == pytest.approx(0.4, rel=1e-4)
    assert g.max_fraction * g.per_phase["backward_weight"] == pytest.approx(0.4, rel=1e-4)
    # both memory-bound kernels stream at 0.8 x 2039 GB/s
    assert profile.bandwidth.max_fraction == pytest.approx(0.8, rel=1e-4)
    assert report["gemm_trace_s"] == pytest.approx(GEMM_US * 1e-6, rel=1e-9)
    assert report["gemm_fitted_s"] == pytest.approx(GEMM_US * 1e-6, rel=1e-4)


def test_prediction_of_traced_run_reproduces_gemm_time() -> None:
    profile, _ = calibrate_from_traces([NVIDIA])
    table = OpTable.from_ops(nvidia_gemm_rows())
    pred = predict(table, profile, precision="fp32").df
    # each GEMM: 2MNK / (19.5e12 x 0.4 x phase factor) -> the fixture's durations
    assert pred["time_s"].sum() == pytest.approx(GEMM_US * 1e-6, rel=0.10)
    assert pred["time_s"].sum() == pytest.approx(GEMM_US * 1e-6, rel=1e-3)


def test_fit_on_amd_fixture_bf16() -> None:
    profile, report = calibrate_from_traces([AMD])  # no correlation args: ac2g flows only
    assert profile.device.name == "mi300x-oam"
    assert report["kernels"]["gemm"] == {"bf16": 3}
    # three bf16 GEMMs at 0.3 x 1307.4 TFLOP/s (the format from "Input type" c10::BFloat16)
    bf16 = profile.gemm.for_format("bf16")
    assert bf16.max_fraction == pytest.approx(0.3, rel=1e-4)
    assert bf16.per_phase["forward"] == pytest.approx(1.0, rel=1e-4)
    # gelu [4,256,8192] bf16: 2 x 8,388,608 x 2 B = 33,554,432 B; add: 3 x 4,194,304 B; both
    # at 0.5 x 5.3 TB/s
    assert profile.bandwidth.max_fraction == pytest.approx(0.5, rel=1e-4)
    # 2MNK for (1024,2048,2048), (1024,8192,2048), (1024,2048,8192) = 8.59e9 + 2 x 3.436e10
    # FLOP at 3.9222e14 FLOP/s: 21.901 + 2 x 87.603 us
    assert report["gemm_trace_s"] == pytest.approx((21.901 + 2 * 87.603) * 1e-6, rel=1e-4)


def test_provenance_saved_and_read_back(tmp_path: Path) -> None:
    profile, _ = calibrate_from_traces([NVIDIA])
    out = profile.save(tmp_path / "p.json")
    prov = json.loads(out.read_text())["provenance"]
    trace = prov["traces"][0]
    assert trace["file"] == "nvidia_train.json"
    assert trace["sha256"] == hashlib.sha256(NVIDIA.read_bytes()).hexdigest()
    assert prov["device"] == "NVIDIA A100-SXM4-80GB" and prov["catalog_device"] == \
        "a100-sxm4-80gb"
    assert prov["kernels"] == {"gemm": {"fp32": 9}, "memory": {"activation": 1,
                                                               "elementwise": 1}}
    assert prov["date"] == date.today().isoformat()
    back = DeviceProfile.load(out)
    assert back.provenance == prov and back == profile
    assert "nvidia_train.json" in back.gemm.source


def test_cli_writes_profile_predict_reads(tmp_path: Path, capsys) -> None:
    out = tmp_path / "a100.json"
    rc = main(["calibrate", "--from-trace", str(NVIDIA), str(AMD), "--output", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "different devices" in err and len(err.strip().splitlines()) == 1
    rc = main(["calibrate", "--from-trace", str(NVIDIA), "--output", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and out.is_file() and "nvidia_train.json" in text
    assert main(["predict", "bert-tiny", "--device", str(out), "--batch", "2",
                 "--seq", "32"]) == 0


@pytest.mark.parametrize(("name", "needle"), [
    ("no_shapes.json", "record_shapes=True"),
    ("no_gemm.json", "fewer than 3 GEMMs with shapes"),
    ("missing.json", "no such trace file"),
])
def test_bad_traces_one_line_exit_2(name: str, needle: str, tmp_path: Path, capsys) -> None:
    rc = main(["calibrate", "--from-trace", str(DATA / name), "--output",
               str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p.json").exists()


def test_non_trace_json_and_mixed_sources(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"rows": []}')
    assert main(["calibrate", "--from-trace", str(bad)]) == 2
    assert "not a trace" in capsys.readouterr().err
    assert main(["calibrate", "--from", str(bad), "--from-trace", str(NVIDIA)]) == 2
    assert "give one" in capsys.readouterr().err
    with pytest.raises(BertscopeError, match="at least one"):
        calibrate_from_traces([])


def test_device_names_dtypes_and_bytes() -> None:
    assert match_device("NVIDIA A100-SXM4-80GB").name == "a100-sxm4-80gb"
    assert match_device("NVIDIA H100 80GB HBM3").name == "h100-sxm5-80gb"
    assert match_device("AMD Instinct MI300X").name == "mi300x-oam"
    assert match_device("Tesla V100-SXM2-32GB").name == "v100-sxm2-32gb"
    assert match_device("GeForce RTX 2080") is None
    assert gemm_format(["c10::BFloat16", "c10::BFloat16"], []) == "bf16"
    assert gemm_format(["float", "float"], ["ampere_sgemm_128x64_tn"]) == "fp32"
    assert gemm_format(["float"], ["sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n"]) == "tf32"
    # layer norm [2,32,128] fp32 + weight and bias [128]: 32,768 + 512 + 512 B read, 32,768 B
    # written (normalized_shape is a scalar list: no bytes)
    assert op_bytes([[2, 32, 128], [], [128], [128], []],
                    ["float", "ScalarList", "float", "float", "Scalar"]) == 66_560
    # embedding of 64 indices (int64) into a [30522, 128] fp32 table: 512 B of indices, 64 rows
    # of 512 B read and written
    assert op_bytes([[30522, 128], [2, 32]], ["float", "long int"], "aten::embedding") == \
        512 + 2 * 64 * 512
