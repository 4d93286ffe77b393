"""Saved calibration microbenchmarks: validate with --results-dir measures them once and
reuses the file (so a re-prediction from saved results is reproducible)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from bertscope.errors import BertscopeError

pytest.importorskip("torch")
from bertscope.measure import microbench as mb
from bertscope.studies import local_calibration as cal
from bertscope.studies import validate as val
from bertscope.studies.measured import combine_rounds, load_result, parse_specs
from tests.saved_measurements import saved_measurement

SAVED = saved_measurement("validate_cpu")


def _points() -> dict[str, object]:
    """Hand-made microbenchmark points: fp32 GEMMs at 1e11 FLOP/s (2 x 512^3 FLOP in
    2.68435456e-3 s), bf16 at 4e11, copies at 1e10 B/s."""
    def gemm(rate: float) -> pd.DataFrame:
        rows = [{"m": d, "n": d, "k": d, "batch": 1, "flops": 2.0 * d ** 3, "count": 1,
                 "time_s": 2.0 * d ** 3 / rate} for d in (64, 128, 256, 512)]
        return pd.DataFrame(rows)
    stream = pd.DataFrame([{"bytes": b, "count": 1, "time_s": b / 1e10}
                           for b in (2 ** 16, 2 ** 20, 2 ** 24)])
    return {"gemm": gemm(1e11), "stream": stream, "overhead_s": 2e-6, "bf16": gemm(4e11),
            "fp16": gemm(2e10)}


def test_validate_reuses_saved_microbenchmarks(tmp_path: Path, monkeypatch) -> None:
    """The first call measures (here: hand-made points) and writes microbench.json; the
    second reads it back, running no microbenchmark, and fits the same profile."""
    runs = {"bert-small:4:256": [load_result(SAVED / f"bert-small-4-256.round{i}.json")
                                 for i in range(3)]}
    calls: list[str] = []

    def fake(dev: object, *, quick: bool = False, log: object = None) -> dict[str, object]:
        calls.append("measured")
        return _points()

    monkeypatch.setattr(cal, "run_microbench", fake)
    bench = tmp_path / "microbench.json"
    first, _ = cal.calibrate_local("cpu", [combine_rounds(runs["bert-small:4:256"])],
                                   microbench=bench)
    assert calls == ["measured"] and bench.is_file()

    def boom(*_: object, **__: object) -> None:
        raise AssertionError("a microbenchmark ran")

    monkeypatch.setattr(cal, "run_microbench", boom)
    for name in ("gemm_points", "stream_points", "launch_overhead"):
        monkeypatch.setattr(mb, name, boom)
    second, report = cal.calibrate_local("cpu", [combine_rounds(runs["bert-small:4:256"])],
                                         microbench=bench)
    assert second.to_dict()["gemm"] == first.to_dict()["gemm"]
    assert second.to_dict()["bandwidth"] == first.to_dict()["bandwidth"]
    # the peaks are the best rates of the points: 4e11 bf16, 1e10 B/s
    assert second.device.peak_flops("bf16") == pytest.approx(4e11, rel=1e-12)
    assert second.device.memory_bandwidth == pytest.approx(1e10, rel=1e-12)
    assert report["overhead_s"] == 2e-6


def test_validate_passes_the_results_dir_file(tmp_path: Path, monkeypatch) -> None:
    """`validate` with a results dir hands calibrate_local <dir>/microbench.json (and
    microbench-quick.json for quick calibration, another grid)."""
    import shutil

    seen: list[object] = []

    def fake_cal(device: str, results: object, *, quick: bool, microbench: object,
                 log: object, **_: object) -> tuple[object, dict[str, object]]:
        seen.append(microbench)
        raise BertscopeError("stop here")

    monkeypatch.setattr(val, "calibrate_local", fake_cal)
    for stem in ("bert-small-4-256", "bert-base-2-128"):  # saved: validate profiles nothing
        shutil.copy(SAVED / f"{stem}.round0.json", tmp_path / f"{stem}.json")
    specs_a, specs_b = parse_specs("bert-small:4:256"), parse_specs("bert-base:2:128")
    for quick, name in ((False, "microbench.json"), (True, "microbench-quick.json")):
        with pytest.raises(BertscopeError, match="stop here"):
            val.validate(specs_a, specs_b, quick=quick, results_dir=tmp_path)
        assert seen[-1] == tmp_path / name


def test_bad_microbench_files_are_one_error(tmp_path: Path) -> None:
    bad = tmp_path / "m.json"
    bad.write_text("not json")
    with pytest.raises(BertscopeError, match="not a readable microbenchmark file"):
        cal.load_microbench(bad, quick=False)
    bad.write_text(json.dumps({"bertscope_microbench": 1}))
    with pytest.raises(BertscopeError, match="not a bertscope microbenchmark file"):
        cal.load_microbench(bad, quick=False)
    good = cal.save_microbench(_points(), tmp_path / "g.json", quick=False)
    with pytest.raises(BertscopeError, match="quick=False, asked for quick=True"):
        cal.load_microbench(good, quick=True)
    back = cal.load_microbench(good, quick=False)
    pd.testing.assert_frame_equal(back["bf16"], _points()["bf16"])
