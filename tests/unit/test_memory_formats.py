"""Memory-bound fits keyed by tensor format ("category[@family]#format"): which entry a row
takes, how calibration fits them, that predictions read the run's activation format, and
that profiles carrying them round-trip (and old ones still load)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bertscope.analytic import build
from bertscope.config import Family, RunConfig
from bertscope.errors import BertscopeError
from bertscope.perf import DeviceProfile, load_profile, predict
from bertscope.perf.bandwidth import CategoryBandwidthEfficiency, tensor_formats
from bertscope.perf.fit import fit_memory
from bertscope.perf.roofline import activation_format, select_peaks
from tests.conftest import tiny

MODEL = CategoryBandwidthEfficiency(per_category={
    "loss": [0.5, 0.0], "loss#bf16": [0.25, 0.0], "loss@backward": [0.4, 0.0],
    "loss@backward#bf16": [0.2, 0.0], "reduction": [0.3, 0.0], "reduction#bf16": [0.1, 0.0],
    "dropout@forward": [0.7, 0.0], "dropout#bf16": [0.15, 0.0]}, max_fraction=0.6,
    source="unit test")
ROWS = pd.DataFrame({
    "category": ["loss", "loss", "reduction", "reduction", "softmax", "dropout", "dropout"],
    "phase": ["forward", "backward_data", "optimizer", "backward_data", "forward", "forward",
              "backward_data"],
    "bytes_read": [1e6] * 7, "bytes_written": [0.0] * 7, "count": [1] * 7})


def test_a_row_takes_the_most_specific_entry_of_its_format() -> None:
    """Order: cat@family#format, cat@family, cat#format, cat, the default."""
    # no format set: the "#" entries are ignored
    assert MODEL.fraction(ROWS) == pytest.approx([0.5, 0.4, 0.3, 0.3, 0.6, 0.7, 0.6])
    # bf16: loss forward loss#bf16; loss backward loss@backward#bf16; the optimizer's
    # reduction updates fp32 state, so "reduction" (not #bf16); backward reduction #bf16;
    # softmax the default; forward dropout dropout@forward beats dropout#bf16
    bf16 = MODEL.for_format("bf16")
    assert bf16.fraction(ROWS) == pytest.approx([0.25, 0.2, 0.3, 0.1, 0.6, 0.7, 0.15])
    # fp32 has no entries of its own: as with no format
    assert MODEL.for_format("fp32").fraction(ROWS) == pytest.approx(MODEL.fraction(ROWS))
    plain = CategoryBandwidthEfficiency(per_category={"loss": [0.5, 0.0]})
    assert plain.for_format("bf16") is plain  # nothing to read per format


def test_tensor_formats_keep_the_optimizer_in_fp32() -> None:
    fams = np.array(["forward", "backward", "optimizer"], dtype=object)
    assert list(tensor_formats(fams, "bf16")) == ["bf16", "bf16", "fp32"]
    assert list(tensor_formats(fams, "fp32")) == ["fp32", "fp32", "fp32"]
    assert [activation_format(p).value for p in ("fp32", "tf32", "bf16", "fp16", "fp8")] == [
        "fp32", "fp32", "bf16", "fp16", "bf16"]


def test_fit_memory_fits_each_format_apart() -> None:
    """loss fp32: 1e6 B in 1 ms, 2e6 B in 2 ms -> 1e-9 s/B -> max = 1 / (1e10 B/s x 1e-9)
    = 0.1; bf16: 1e6 B in 2 ms, 3e6 B in 6 ms -> 2e-9 s/B -> 0.05; pooled: the median of
    (1, 1, 2, 2) e-9 = 1.5e-9 -> 1 / 15."""
    pts = pd.DataFrame({"category": ["loss"] * 4, "bytes": [1e6, 2e6, 1e6, 3e6],
                        "count": [1] * 4, "time_s": [1e-3, 2e-3, 2e-3, 6e-3],
                        "activation_format": ["fp32", "fp32", "bf16", "bf16"]})
    m = fit_memory(pts, 1e10, "test")
    assert sorted(m.per_category) == ["loss", "loss#bf16", "loss#fp32"]
    assert m.per_category["loss#fp32"][0] == pytest.approx(0.1)
    assert m.per_category["loss#bf16"][0] == pytest.approx(0.05)
    assert m.per_category["loss"][0] == pytest.approx(1 / 15)
    # one format: no format keys (they would repeat the pooled ones)
    one = fit_memory(pts.iloc[:2], 1e10, "test")
    assert sorted(one.per_category) == ["loss"]


def test_predict_reads_the_runs_activation_format() -> None:
    """A bf16 run's loss rows take loss#bf16 (0.25 of the bandwidth), an fp32 run's the
    pooled loss entry (0.5): memory_s = bytes / (bandwidth x fraction)."""
    bw = CategoryBandwidthEfficiency(per_category={"loss": [0.5, 0.0], "loss#bf16": [0.25, 0.0]},
                                     max_fraction=0.6, source="unit test")
    prof = load_profile("a100").with_models(bandwidth=bw)
    for precision, frac in (("bf16", 0.25), ("fp32", 0.5)):
        t = predict(build(tiny(Family.BERT), RunConfig(batch=2, seq=16, precision=precision)),
                    prof)
        df = t.df[t.df["category"] == "loss"]
        assert len(df)
        want = (df["bytes_read"] + df["bytes_written"]) / (prof.device.memory_bandwidth * frac)
        np.testing.assert_allclose(df["memory_s"], want, rtol=1e-12)
        assert select_peaks(prof.device, precision).activation_format.value == (
            "bf16" if precision == "bf16" else "fp32")


def test_format_keys_round_trip_and_old_files_load(tmp_path) -> None:
    prof = load_profile("a100").with_models(bandwidth=MODEL)
    again = DeviceProfile.load(prof.save(tmp_path / "p.json"))
    assert again.bandwidth == MODEL
    assert "activation_format" not in MODEL.to_dict()  # unset: as files were before
    resolved = MODEL.for_format("bf16")
    assert resolved.to_dict()["activation_format"] == "bf16"
    back = DeviceProfile.load(prof.with_models(bandwidth=resolved).save(tmp_path / "q.json"))
    assert back.bandwidth == resolved
    with pytest.raises(BertscopeError, match="unknown number format 'fp99'"):
        CategoryBandwidthEfficiency(per_category={"loss#fp99": [0.5, 0.0]})
    with pytest.raises(BertscopeError, match="unknown activation format"):
        MODEL.for_format("fp99")
