"""No silent format gaps (issue 31, item 5): a profile fitted from measured tables of one
GEMM format, asked for another, says in one line that the format is not calibrated and what
to run (or, for a catalog device fitted from traces, uses the catalog's figures and says
so); fitted from tables of both formats, it prices each at its own measured rate. Synthetic
measurements (the analytic table with known rates), nothing is timed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertscope.cli import main
from bertscope.perf import predict
from bertscope.perf.device_profile import DeviceProfile
from bertscope.perf.efficiency import default_profile
from bertscope.perf.fit import fit_from_tables
from bertscope.perf.gemm_models import FormatGemmEfficiency, GemmEfficiency, NotCalibrated
from bertscope.perf.predict import Prediction
from bertscope.taxonomy import gemm_mask
from tests.synthetic_tables import CHIP, synthetic_measurement

# measured GEMM rates: fp32 at 0.5 of its 1 TFLOP/s peak; bf16 at 1.5 TFLOP/s, 0.375 of its
# 4 TFLOP/s peak (an fp32 fit's 0.5 at the bf16 peak would say 2 TFLOP/s: 33% fast)
RATE = {"fp32": 0.5e12, "bf16": 1.5e12}
STREAM = 50e9


def _measured(precision: str, batch: int, seq: int):
    """A synthetic measurement: every GEMM at RATE[precision], every other row at STREAM."""
    return synthetic_measurement(precision, batch, seq, RATE[precision], STREAM)


NAMES = ["bert-tiny:2:32", "bert-tiny:4:64"]


def _fit(*precisions: str) -> DeviceProfile:
    pairs = [_measured(p, b, s) for p in precisions for b, s in ((2, 32), (4, 64))]
    names = [f"{n}:{p}" if p != "fp32" else n for p in precisions for n in NAMES]
    profile, _ = fit_from_tables(pairs, default_profile(CHIP), "fitted to synthetic tables",
                                 inputs=names)
    return profile


def _gemm_s(table, profile) -> float:
    pred = predict(table, profile).columns
    sel = gemm_mask(np.asarray(pred["category"], dtype=object))
    return float(np.sum(pred["compute_s"][sel]))


def test_bf16_on_an_fp32_profile_is_one_line_saying_what_to_run() -> None:
    profile = _fit("fp32")
    _, analytic = _measured("bf16", 8, 16)
    with pytest.raises(NotCalibrated) as e:
        predict(analytic, profile)
    line = str(e.value)
    assert "\n" not in line
    assert line.startswith("bf16 is not calibrated on this profile")
    assert "fitted on fp32 runs of bert-tiny:2:32, bert-tiny:4:64" in line
    assert "bertscope profile MODEL --precision bf16" in line and "--output bf16.json" in line
    assert "bertscope calibrate --from" in line
    # the fp32 run it was fitted for is priced at its measured rate
    held, analytic = _measured("fp32", 8, 16)
    sel = gemm_mask(np.asarray(held.columns["category"], dtype=object))
    assert _gemm_s(analytic, profile) == pytest.approx(
        float(np.sum(held.columns["time_s"][sel])), rel=1e-6)


def test_bf16_tables_give_bf16_its_own_measured_rate() -> None:
    profile = _fit("fp32", "bf16")
    held, analytic = _measured("bf16", 8, 16)
    sel = gemm_mask(np.asarray(held.columns["category"], dtype=object))
    # the held-out bf16 GEMMs at 1.5 TFLOP/s, as measured (not 0.5 x 4 TFLOP/s)
    assert _gemm_s(analytic, profile) == pytest.approx(
        float(np.sum(held.columns["time_s"][sel])), rel=1e-6)
    # the source says per format where the rate came from
    fmt = Prediction.of(predict(analytic, profile))
    assert "(bf16 GEMMs)" in fmt.models["gemm"]["source"]
    assert "synthetic tables" in fmt.models["gemm"]["source"]
    _, fp32 = _measured("fp32", 8, 16)
    assert "(fp32 GEMMs)" in Prediction.of(predict(fp32, profile)).models["gemm"]["source"]


def test_the_profile_file_keeps_its_formats(tmp_path: Path) -> None:
    profile = _fit("fp32")
    back = DeviceProfile.load(profile.save(tmp_path / "p.json"))
    assert back.gemm == profile.gemm and isinstance(back.gemm, FormatGemmEfficiency)
    assert back.gemm.calibrated("fp32") and not back.gemm.calibrated("bf16")
    with pytest.raises(NotCalibrated):
        back.gemm.for_format("bf16")


def test_cli_predict_bf16_on_fp32_profile_exits_2_in_one_line(tmp_path: Path, capsys) -> None:
    path = _fit("fp32").save(tmp_path / "local.json")
    args = ["predict", "bert-tiny", "--device", str(path), "--batch", "2", "--seq", "32"]
    assert main([*args, "--precision", "fp32"]) == 0
    capsys.readouterr()
    assert main([*args, "--precision", "bf16"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bf16 is not calibrated on this profile" in err


def test_a_fallback_model_prices_other_formats() -> None:
    """A catalog device fitted from traces of one format keeps the catalog's figures for the
    others (`calibrate --from-trace`), as they are (the provenance line then names them)."""
    fitted = GemmEfficiency(max_fraction=0.5, half_saturation_flops=0.0, source="trace t")
    catalog = GemmEfficiency(max_fraction=0.7, half_saturation_flops=0.0,
                             source="assumed default")
    model = FormatGemmEfficiency(per_format={"fp32": fitted}, default="fp32", source="t",
                                 fallback=catalog)
    assert model.for_format("bf16") == catalog and model.for_format("fp32") == fitted
    again = json.loads(json.dumps(model.to_dict()))
    from bertscope.perf.device_profile import model_from_dict

    assert model_from_dict(again) == model


def test_the_sources_line_says_per_format_where_the_gemm_rate_came_from() -> None:
    """An A100 fitted from a trace of fp32 GEMMs: an fp32 prediction's sources line says its
    GEMM rate was fitted to that trace; a bf16 one's that it is the catalog's (cited or
    assumed, not fitted)."""
    from bertscope.perf.predict import provenance
    from bertscope.perf.roofline import select_peaks
    from bertscope.studies.trace_calibration import calibrate_from_traces

    trace = Path(__file__).parents[1] / "data" / "traces" / "calibrate" / "nvidia_train.json"
    profile, _ = calibrate_from_traces([trace])
    fp32 = provenance(profile, select_peaks(profile.device, "fp32"))
    assert fp32.startswith("GEMM fp32 fitted (") and "nvidia_train.json" in fp32
    bf16 = provenance(profile, select_peaks(profile.device, "bf16"))
    assert bf16.startswith("GEMM bf16 cap ") and "fitted (" not in bf16.split(";")[0]
    # and a CPU profile fitted from fp32 tables says which tables, in fp32
    cpu = _fit("fp32")
    line = provenance(cpu, select_peaks(cpu.device, "fp32"))
    assert "GEMM fp32 fitted (fitted to synthetic tables" in line
