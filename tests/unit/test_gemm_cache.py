"""GEMMs beyond the last-level cache: their own factor per phase in the fitted GEMM model
(`GemmEfficiency.beyond_cache`), the fit that finds it, and the local cache size it splits at
(`measure.microbench.last_level_cache`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bertscope.errors import BertscopeError
from bertscope.perf.device_profile import model_from_dict
from bertscope.perf.fit import fit_gemm
from bertscope.perf.gemm_models import GemmEfficiency

MiB = 2**20
PEAK = 1e12


def _points() -> pd.DataFrame:
    """Forward GEMMs of one shape class (min(M, N, K) = 512): four within a 32 MiB cache at
    40% of a 1e12 peak, three moving 100-300 MiB a launch at 26%; backward-data GEMMs all
    within the cache at 50%. Every point runs exactly at its rate (no fixed cost), so a fit
    must give the forward factor 0.4 / 0.5 of the data gradients' and 0.26 / 0.4 = 0.65 on
    top of it beyond the cache."""
    rows = []
    for n in (512, 1024, 2048, 4096):
        flops = 2 * 512 * n * 512
        for phase, frac in (("forward", 0.4), ("backward_data", 0.5)):
            rows.append({"flops": flops, "count": 1, "m": 512, "n": n, "k": 512, "batch": 1,
                         "launch_bytes": 4 * MiB, "phase": phase,
                         "time_s": flops / (PEAK * frac)})
    for i, n in enumerate((30522, 50000, 65536)):
        flops = 2 * 512 * n * 512
        rows.append({"flops": flops, "count": 1, "m": 512, "n": n, "k": 512, "batch": 1,
                     "launch_bytes": (i + 1) * 100 * MiB, "phase": "forward",
                     "time_s": flops / (PEAK * 0.26)})
    return pd.DataFrame(rows)


def _as_rows(points: pd.DataFrame) -> pd.DataFrame:
    """Points as op-table rows: the model reads bytes per launch from bytes_read/written."""
    return points.assign(bytes_read=points["launch_bytes"] * points["count"], bytes_written=0)


@pytest.mark.parametrize("preserve_total", [False, True])
def test_fit_prices_gemms_beyond_the_cache_apart(preserve_total: bool) -> None:
    points = _points()
    fit = fit_gemm(points, PEAK, "test", preserve_total=preserve_total,
                   cache_bytes=32 * MiB)
    model = fit.model
    assert model.cache_bytes == 32 * MiB
    assert set(model.beyond_cache) == {"forward"}  # the data gradients never leave the cache
    assert model.beyond_cache["forward"] == pytest.approx(0.65)
    assert model.per_phase["forward"] / model.per_phase["backward_data"] == pytest.approx(0.8)
    want = np.where(points["launch_bytes"] > 32 * MiB, 0.26,
                    np.where(points["phase"] == "forward", 0.4, 0.5))
    np.testing.assert_allclose(model.fraction(_as_rows(points)), want, rtol=1e-9)
    assert fit.mape == pytest.approx(0.0, abs=1e-9)


def test_without_a_cache_size_one_factor_per_phase() -> None:
    """No cache size (a device that lists none): the forward GEMMs share one factor, as
    before the split, and the model's dict carries no cache fields."""
    fit = fit_gemm(_points(), PEAK, "test", preserve_total=True)
    assert fit.model.beyond_cache == {} and fit.model.cache_bytes == 0.0
    assert "beyond_cache" not in fit.model.to_dict()
    assert "cache_bytes" not in fit.model.to_dict()
    # a 1 MiB cache, which every point is past: no phase has GEMMs on both sides of it,
    # so no split either
    split = fit_gemm(_points(), PEAK, "test", cache_bytes=1 * MiB)
    assert split.model.beyond_cache == {}


def test_beyond_cache_factor_applies_past_the_cache_only() -> None:
    """fraction = max x factor: 0.5 x 0.8 = 0.4 within 32 MiB (bytes per launch = bytes
    moved / count), 0.5 x 0.8 x 0.5 = 0.2 past it, capped at 1 like the phase factors."""
    model = GemmEfficiency(max_fraction=0.5, half_saturation_flops=0.0,
                           per_phase={"forward": 0.8}, cache_bytes=32 * MiB,
                           beyond_cache={"forward": 0.5, "backward_weight": 10.0})
    rows = pd.DataFrame({
        "flops": [1e9] * 4, "count": [1, 4, 1, 1], "m": [512] * 4, "n": [512] * 4,
        "k": [512] * 4, "phase": ["forward", "forward", "forward", "backward_weight"],
        "bytes_read": [10 * MiB, 100 * MiB, 40 * MiB, 40 * MiB],
        "bytes_written": [0, 0, 0, 0]})
    # 100 MiB over 4 launches is 25 MiB a launch: within the cache
    np.testing.assert_allclose(model.fraction(rows), [0.4, 0.4, 0.2, 1.0])
    again = model_from_dict(model.to_dict())
    assert again == model
    np.testing.assert_allclose(again.fraction(rows), model.fraction(rows))


def test_beyond_cache_factors_are_checked() -> None:
    with pytest.raises(BertscopeError, match=r"beyond_cache\['forward'\] must be a number"):
        GemmEfficiency(max_fraction=0.5, half_saturation_flops=0.0,
                       beyond_cache={"forward": -1.0})
    with pytest.raises(BertscopeError, match="cache_bytes must be a number"):
        GemmEfficiency(max_fraction=0.5, half_saturation_flops=0.0, cache_bytes=-1.0)


def _cache(root: Path, index: int, level: str, size: str) -> None:
    d = root / f"index{index}"
    d.mkdir()
    (d / "level").write_text(level + "\n")
    (d / "size").write_text(size + "\n")


def test_last_level_cache_reads_the_highest_level(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    from bertscope.measure.microbench import last_level_cache

    cpu = torch.device("cpu")
    assert last_level_cache(cpu, tmp_path) is None  # nothing listed: unknown
    _cache(tmp_path, 0, "1", "48K")
    _cache(tmp_path, 1, "1", "32K")
    _cache(tmp_path, 2, "2", "2048K")
    _cache(tmp_path, 3, "3", "32768K")
    _cache(tmp_path, 4, "x", "1G")  # unreadable level: skipped
    assert last_level_cache(cpu, tmp_path) == 32768 * 1024  # 32 MiB, the L3


def test_predict_and_sweep_price_the_decoder_beyond_the_cache() -> None:
    """bert-tiny at 8 x 128 on a profile whose GEMM model halves forward GEMMs past 40 MiB:
    only the MLM decoder's forward (1024 x 30522 x 128 fp32: (1024 x 128 + 128 x 30522 +
    1024 x 30522) x 4 B = 141 MB a launch) crosses it, so its compute time doubles and no
    other row's moves; the sweep engine, given the same profile, gives the same total."""
    from dataclasses import replace

    from bertscope.analytic import build
    from bertscope.config import RunConfig
    from bertscope.job import Job
    from bertscope.perf import load_profile, predict
    from bertscope.presets import get_model
    from bertscope.sweep import sweep

    base = load_profile("a100")
    plain = GemmEfficiency(max_fraction=0.5, half_saturation_flops=0.0)
    split = replace(plain, cache_bytes=40 * MiB, beyond_cache={"forward": 0.5})
    table = build(Job(model=get_model("bert-tiny"), run=RunConfig(batch=8, seq=128)))
    before = predict(table, base.with_models(gemm=plain)).df
    after = predict(table, base.with_models(gemm=split)).df
    moved = after["compute_s"].to_numpy() != before["compute_s"].to_numpy()
    decoder = ((after["sublayer"].astype(str) == "mlm_head") & (after["n"] == 30522)
               & (after["phase"].astype(str) == "forward")).to_numpy()
    assert moved.tolist() == decoder.tolist() and decoder.sum() == 1
    ratio = after["compute_s"][decoder].iloc[0] / before["compute_s"][decoder].iloc[0]
    assert ratio == pytest.approx(2.0)
    for gemm, table_times in ((split, after), (plain, before)):
        res = sweep(["bert-tiny"], [base.with_models(gemm=gemm)], batch=[8], seq=[128])
        (row,) = res.frame.to_dict(orient="records")
        assert row["iteration_s"] == pytest.approx(float(table_times["time_s"].sum()),
                                                   rel=1e-9)
    assert after["time_s"].sum() > before["time_s"].sum()
