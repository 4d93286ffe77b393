"""GEMM calibration per number format (perf/fit.py: fit_gemm_per_format): measured
tables of fp32 and bf16 runs give one GEMM model per format, each relative to its own peak,
and a prediction reads the model of its run's format."""

from __future__ import annotations

import numpy as np
import pytest

from bertscope.perf import predict
from bertscope.perf.device_profile import DeviceProfile, model_from_dict
from bertscope.perf.efficiency import default_profile
from bertscope.perf.fit import fit_from_tables
from bertscope.perf.gemm_models import FormatGemmEfficiency, GemmEfficiency
from bertscope.taxonomy import gemm_mask
from tests.synthetic_tables import CHIP, synthetic_measurement

RATE = {"fp32": 0.5e12, "bf16": 1e12}  # measured GEMM rates: 0.5 of fp32, 0.25 of bf16 peak
STREAM = 50e9  # measured memory-bound rate: 0.5 of the bandwidth


def _measured(precision: str, batch: int, seq: int):
    """A synthetic measurement: every GEMM at RATE[precision], every other row at STREAM."""
    return synthetic_measurement(precision, batch, seq, RATE[precision], STREAM)


def test_one_gemm_model_per_format_each_against_its_own_peak(tmp_path) -> None:
    pairs = [_measured(p, b, s) for p in ("fp32", "bf16") for b, s in ((2, 32), (4, 64))]
    profile, report = fit_from_tables(pairs, default_profile(CHIP), "synthetic")
    gemm = profile.gemm
    assert isinstance(gemm, FormatGemmEfficiency) and gemm.default == "fp32"
    # 0.5e12 / 1e12 and 1e12 / 4e12
    assert gemm.for_format("fp32").max_fraction == pytest.approx(0.5)
    assert gemm.for_format("bf16").max_fraction == pytest.approx(0.25)
    assert set(report["gemm_fit_mape"]) == {"fp32", "bf16"}
    # a format not fitted is refused in one line (issue 31: never another format's fit)
    from bertscope.perf.gemm_models import NotCalibrated

    with pytest.raises(NotCalibrated, match="fp16 is not calibrated on this profile"):
        gemm.for_format("fp16")
    # the fitted profile predicts a held-out bf16 run's GEMM time (same synthetic rates)
    held, analytic = _measured("bf16", 8, 16)
    pred = predict(analytic, profile).columns
    sel = gemm_mask(np.asarray(pred["category"], dtype=object))
    want = float(np.sum(held.columns["time_s"][sel]))
    assert float(np.sum(pred["compute_s"][sel])) == pytest.approx(want, rel=1e-6)
    # and survives a JSON round trip
    again = DeviceProfile.load(profile.save(tmp_path / "p.json"))
    assert again.gemm == gemm
    assert model_from_dict(gemm.to_dict()) == gemm


def test_a_single_format_knows_its_format() -> None:
    pairs = [_measured("fp32", b, s) for b, s in ((2, 32), (4, 64))]
    profile, report = fit_from_tables(pairs, default_profile(CHIP), "synthetic")
    assert isinstance(profile.gemm, FormatGemmEfficiency)
    assert list(profile.gemm.per_format) == ["fp32"]
    assert isinstance(profile.gemm.for_format("fp32"), GemmEfficiency)
    assert profile.gemm.for_format("fp32").max_fraction == pytest.approx(0.5)
    assert isinstance(report["gemm_fit_mape"], float)


def test_bad_format_models_are_refused() -> None:
    from bertscope.errors import BertscopeError

    plain = GemmEfficiency(max_fraction=0.5, half_saturation_flops=0.0, source="t")
    with pytest.raises(BertscopeError, match="default 'bf16' is not one of"):
        FormatGemmEfficiency(per_format={"fp32": plain}, default="bf16")
    with pytest.raises(BertscopeError, match="per_format"):
        FormatGemmEfficiency(per_format={}, default="fp32")
    with pytest.raises(BertscopeError, match="unknown model"):
        FormatGemmEfficiency(per_format={"fp32": {"model": "Nope"}}, default="fp32")


def test_measured_table_fit_reproduces_each_phases_gemm_time() -> None:
    # the larger half of the GEMMs run 1.5x slower than the rest: a median of per-key ratios
    # would follow the many small ones; the per-phase factor is the ratio of totals, so the
    # fitted profile predicts the calibration runs' GEMM time per phase exactly
    from bertscope.perf.fit import gemm_phase

    pairs = []
    for b, s in ((2, 32), (4, 64)):
        measured, analytic = _measured("fp32", b, s)
        c = measured.columns
        big = c["flops"] > np.median(c["flops"][c["flops"] > 0])
        pairs.append((measured.with_columns({"time_s": np.where(big, 1.5, 1.0) * c["time_s"]}),
                      analytic))
    profile, _ = fit_from_tables(pairs, default_profile(CHIP), "synthetic")
    want: dict[str, float] = {}
    got: dict[str, float] = {}
    for measured, analytic in pairs:
        pred = predict(analytic, profile).columns
        sel = gemm_mask(np.asarray(pred["category"], dtype=object))
        phases = gemm_phase(np.asarray(pred["phase"], dtype=object)[sel])
        for ph in set(phases):
            on = phases == ph
            want[ph] = want.get(ph, 0.0) + float(np.sum(measured.columns["time_s"][sel][on]))
            got[ph] = got.get(ph, 0.0) + float(np.sum(pred["compute_s"][sel][on]))
    assert len(want) == 3  # forward, data gradient, weight gradient
    for ph, w in want.items():
        assert got[ph] == pytest.approx(w, rel=1e-9), ph
