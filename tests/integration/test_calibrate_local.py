"""Calibration on this machine end to end, on tiny configs (fast, not accurate)."""

from __future__ import annotations

import json

import pytest

from bertscope.config import Family, RunConfig
from tests.conftest import tiny

pytest.importorskip("torch")
from bertscope.measure.profile import profile, resolve_device
from bertscope.studies import local_calibration
from bertscope.studies.local_calibration import calibrate_local, run_microbench
from bertscope.studies.validate import compare


@pytest.fixture(scope="module")
def quick_points() -> dict:
    """This machine's quick microbenchmark points, measured once for the module (about two
    minutes on 2 cores: each calibration below would otherwise measure them again)."""
    return run_microbench(resolve_device("cpu"), quick=True)


@pytest.fixture
def measured_once(quick_points, monkeypatch) -> dict:
    """Every calibration in the test (the API's and the CLI's) fits to `quick_points`."""
    monkeypatch.setattr(local_calibration, "run_microbench",
                        lambda dev, *, quick=False, log=None: quick_points)
    return quick_points


def test_calibrate_from_profiles_then_compare(tmp_path, capsys, measured_once) -> None:
    runs = [profile(tiny(Family.BERT), RunConfig(batch=b, seq=s), iters=1, warmup=1)
            for b, s in ((2, 16), (4, 32))]
    # two 1-iteration runs on a shared machine: the API flow is tested here, not whether the
    # machine was quiet (the consistency check: tests/unit/test_calibration_consistency.py)
    prof, report = calibrate_local("cpu", runs, quick=True, allow_inconsistent=True)
    assert "consistency" in report
    assert report["from_profiles"] == ["tiny-bert:2:16", "tiny-bert:4:32"]
    assert "fitted to measured op tables of tiny-bert:2:16" in prof.gemm.source
    assert prof.device.peak_flops("fp32") > 0 and prof.device.memory_bandwidth > 0
    # 16-bit peaks measured too: a bf16 run is held to the measured bf16 rate, no stand-in
    from bertscope.perf import select_peaks

    bf16 = select_peaks(prof.device, "bf16")
    assert bf16.gemm_format.value == "bf16" and bf16.notes == ()
    assert bf16.gemm_flops == report["gemm_peak_flops_by_format"]["bf16"] > 0
    held_out = profile(tiny(Family.BERT), RunConfig(batch=3, seq=24), iters=1, warmup=1)
    rep = compare(held_out, prof)
    assert rep["predicted_s"] > 0 and rep["measured_iteration_s"] > 0
    assert {"gemm", "memory"} <= set(rep["per_op_mape"])
    shares = {r["category"]: r for r in rep["shares"]}
    assert sum(r["measured"] for r in shares.values()) == pytest.approx(1.0)

    # the CLI reads saved results back and writes a profile predict can use
    from bertscope.cli import main

    saved = runs[0].write_json(tmp_path / "r.json")
    out = tmp_path / "local.json"
    assert main(["calibrate", "--quick", "--allow-inconsistent", "--from", str(saved),
                 "--from", str(runs[1].write_json(tmp_path / "r2.json")), "--output",
                 str(out)]) == 0
    assert json.loads(out.read_text())["bertscope_profile"] == 1
    assert main(["predict", "bert-tiny", "--device", str(out), "--batch", "2", "--seq",
                 "16"]) == 0
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    capsys.readouterr()
    assert main(["calibrate", "--quick", "--from", str(bad)]) == 2
    assert "not a bertscope profile result" in capsys.readouterr().err


def test_calibrate_from_a_result_saved_before_the_role_columns(tmp_path, measured_once
                                                               ) -> None:
    """`bertscope calibrate --from` reads results written before rows had tp_split and
    pp_stage (tests/data/measured/validate_cpu)."""
    from bertscope.cli import main
    from tests.saved_measurements import saved_measurement

    saved = saved_measurement("validate_cpu") / "bert-mini-32-64.round0.json"
    assert "tp_split" not in json.loads(saved.read_text())["rows"][0]
    out = tmp_path / "local.json"
    assert main(["calibrate", "--quick", "--from", str(saved), "--output", str(out)]) == 0
    prof = json.loads(out.read_text())
    assert prof["bertscope_profile"] == 1
    assert "fitted to measured op tables of bert-mini:32:64" in json.dumps(prof)
