"""Attainable large-GEMM fractions per device and format (#31 item 4): every catalog device and
floating-point format has a cap that is cited or explicitly assumed, the cited ones are the
published measurements' arithmetic, and every prediction says in one line which of its parts
are cited, fitted or assumed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bertscope.analytic import build
from bertscope.config import RunConfig
from bertscope.hardware import NumberFormat, catalog, load_device
from bertscope.job import Job
from bertscope.optable import OpTable
from bertscope.perf import predict
from bertscope.perf.efficiency import (
    ASSUMED,
    GemmEfficiency,
    Provenance,
    default_profile,
    gemm_caps,
)
from bertscope.perf.predict import Prediction, gemm_for
from bertscope.perf.roofline import select_peaks
from bertscope.presets import get_model, with_changes


def _committed_result(source: str) -> bool:
    """Whether `source` names a results file under bench/results/ that exists."""
    root = Path(__file__).resolve().parents[2]
    return any(word.startswith("bench/results/") and (root / word).is_file()
               for word in source.split())


def test_every_catalog_device_and_format_has_a_cited_or_assumed_cap() -> None:
    for device in catalog():
        caps = gemm_caps(device)
        floats = {f for f in device.formats if f is not NumberFormat.INT8}
        assert set(caps) == floats, device.name
        for fmt, cap in caps.items():
            assert 0 < cap.fraction <= 1
            if cap.provenance is Provenance.CITED:
                assert cap.fraction == device.gemm_fractions[fmt]
                assert cap.source == device.sources[f"gemm_fractions.{fmt.value}"]
                # the reference expands to a URL, or to a measurement committed here
                assert "http" in cap.source or _committed_result(cap.source), cap.source
            else:
                assert cap.provenance is Provenance.ASSUMED
                assert cap.source.startswith(ASSUMED) and device.name in cap.source
                assert fmt not in device.gemm_fractions


@pytest.mark.parametrize(("device", "fmt", "measured", "peak"), [
    ("a100", "bf16", 271.2, 312),      # MAMF table, BF16 row NVIDIA A100 SXM: 271.2 / 312
    ("h100", "fp8", 1402.6, 1978.9),   # FP8 row NVIDIA H100 SXM: 1402.6 / 1978.9
    ("b200", "bf16", 1745.0, 2250),    # BF16 row NVIDIA B200 SXM: 1745.0 / 2250
    ("b200", "fp8", 3432.5, 4500),     # FP8 row NVIDIA B200 SXM: 3432.5 / 4500
    ("mi250x", "bf16", 147.0, 191.5),  # BF16 row AMD MI250X, one GCD: 147.0 / 191.5
])
def test_cited_caps_are_the_published_measurement_over_the_peak(device: str, fmt: str,
                                                               measured: float,
                                                               peak: float) -> None:
    cap = gemm_caps(load_device(device))[NumberFormat(fmt)]
    assert cap.provenance is Provenance.CITED
    assert cap.fraction == pytest.approx(measured / peak, abs=1e-3)


def test_a_gpu_without_an_sm_count_still_uses_its_cited_caps() -> None:
    b200 = load_device("b200")
    assert b200.sm_count is None  # no tile/wave model: the saturating default per format
    profile = default_profile(b200)
    big = {"m": [16384.0], "n": [16384.0], "k": [16384.0], "batch": [0.0],
           "flops": [2.0 * 16384**3], "count": [1.0], "phase": ["forward"]}
    for fmt, cap in (("bf16", 0.776), ("fp8", 0.763), ("fp32", 0.85)):
        model = gemm_for(profile, select_peaks(b200, "fp32" if fmt == "fp32" else fmt))
        assert float(model.fraction(big)[0]) == pytest.approx(cap, rel=0.02)
        assert model.max_fraction == cap
    # 0.85 for fp32: no fp32 GEMM rate is cited for B200, the kind's assumed default


def _tiny_table(precision: str) -> OpTable:
    model = with_changes(get_model("bert-tiny"), num_layers=1)
    return build(Job(model=model, run=RunConfig(batch=4, seq=64, precision=precision)))


def test_the_provenance_line_names_cited_and_assumed_parts() -> None:
    line = Prediction.of(predict(_tiny_table("bf16"), "a100")).provenance
    assert "\n" not in line
    assert "GEMM bf16 cap 0.869 cited (Bekman: BF16 row NVIDIA A100 SXM)" in line
    assert "tile/wave over 108 SMs" in line
    assert "bandwidth 0.85 of peak assumed" in line  # no streaming figure cited for A100
    assert "launch 3 us cited" in line
    tpu = Prediction.of(predict(_tiny_table("bf16"), "tpu-v4")).provenance
    assert tpu.startswith("GEMM bf16 cap 0.85 assumed")
    assert "cited" not in tpu


def test_the_provenance_line_says_what_a_fitted_model_was_fitted_from() -> None:
    profile = default_profile(load_device("v100"))
    fitted = replace(profile, gemm=GemmEfficiency(max_fraction=0.5, half_saturation_flops=1e8,
                                                  source="calibrate --from runs/v100 (3 "
                                                         "profiles)"))
    line = Prediction.of(predict(_tiny_table("fp16"), fitted)).provenance
    assert line.startswith("GEMM fp16 fitted (calibrate --from runs/v100 (3 profiles))")
    assert "bandwidth 0.877 of peak cited" in line  # gpu-benches stream fraction, not fitted
