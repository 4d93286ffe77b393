"""The split-K reduction charge of the tile/wave GEMM model (perf/gpu_gemm.py): a split-K
candidate writes s fp32 partial M x N outputs and a reduction kernel reads them back
(CUTLASS parallel split-K), 8 bytes per partial element at the memory bandwidth."""

from __future__ import annotations

import numpy as np
import pytest

from bertscope.hardware import load_device
from bertscope.perf.gpu_gemm import PARTIAL_BYTES, TileWaveGemmEfficiency, for_device


def _model(ridge: float, splits: tuple[int, ...] = (1, 2)) -> TileWaveGemmEfficiency:
    # 8 SMs, one 64 x 64 tile, no K padding, no operand-feed limit
    return TileWaveGemmEfficiency(sm_count=8, max_fraction=1.0, tiles=((64, 64),),
                                  splits=splits, split_k_flop_per_byte=ridge)


def test_split_k_pays_its_partial_sums() -> None:
    # M = N = 64, K = 1024: one output tile on 8 SMs. useful = 64 * 64 * 1024 = 4096 * 1024.
    # s = 1: one wave of 8 slots x 4096 x 1024 -> 1/8.
    # s = 2: 8 slots x 4096 x 512 launched = 4096 * 4096; the reduction: 2 partials x 4096
    #   elements x (8 bytes x 10 FLOP/byte / 2 FLOP per MAC = 40 MACs) = 4096 * 80 MACs, so
    #   4096 * 1024 / (4096 * 4096 + 4096 * 80) = 1024 / 4176
    assert PARTIAL_BYTES == 8.0
    assert float(_model(10.0).utilization(64, 64, 1024)) == pytest.approx(1024 / 4176)
    # not charged (ridge 0): 4096 * 1024 / (4096 * 4096) = 1/4, as before the charge
    assert float(_model(0.0).utilization(64, 64, 1024)) == pytest.approx(0.25)
    # a slow memory (1000 FLOP/byte: 4000 MACs per element) makes the split a loss:
    # 1024 / (4096 + 8000) = 0.0847 < 1/8, so the unsplit candidate wins
    assert float(_model(1000.0).utilization(64, 64, 1024)) == pytest.approx(0.125)


def test_split_k_charge_broadcasts_over_rows_and_configs() -> None:
    # the sweep evaluates (rows, configs) arrays: each element equals its scalar evaluation
    model = _model(10.0, splits=(1, 2, 4))
    m = np.array([[64.0], [128.0], [4096.0]])          # (rows, 1)
    k = np.array([[256.0, 1024.0, 8192.0]])             # (1, configs)
    grid = model.utilization(m, 64.0, k)
    assert grid.shape == (3, 3)
    for i in range(3):
        for j in range(3):
            assert grid[i, j] == pytest.approx(float(model.utilization(m[i, 0], 64, k[0, j])))


def test_split_k_time_never_falls_as_the_gemm_grows() -> None:
    # the charge grows with M N and the split candidates drop out as tiles fill the wave, so
    # time = useful / utilization stays non-decreasing in M, N and K
    model = for_device(load_device("a100")).for_format("bf16")
    for grow in ("m", "n", "k"):
        dims = np.arange(16, 4097, 16, dtype=float)
        shape = {"m": 64.0, "n": 1024.0, "k": 1024.0}
        shape[grow] = dims
        t = shape["m"] * shape["n"] * shape["k"] / model.utilization(**shape)
        assert np.all(np.diff(t) >= -1e-9 * t[1:]), grow


def test_for_device_charges_at_the_format_peak_over_the_bandwidth() -> None:
    # A100: 312 TFLOPS bf16 / 2039 GB/s = 153.0 FLOP/byte; tf32 156 / 2039 = 76.5; fp32
    # (no tensor cores) 19.5 / 2039 = 9.56
    model = for_device(load_device("a100"))
    assert model.split_k_flop_per_byte == pytest.approx(312e12 / 2039e9)
    assert model.for_format("tf32").split_k_flop_per_byte == pytest.approx(156e12 / 2039e9)
    assert model.for_format("fp32").split_k_flop_per_byte == pytest.approx(19.5e12 / 2039e9)
    # H100 fp8: 1978.9 TFLOPS / 3.35 TB/s = 590.7 FLOP/byte, with the cited fp8 cap 0.709
    h100 = for_device(load_device("h100")).for_format("fp8")
    assert h100.split_k_flop_per_byte == pytest.approx(1978.9e12 / 3.35e12)
    # measured at 1024 x 9216 x 14336 (gemm_attainable_shape): the main-loop cap is
    # 0.709 / (1 - 0.709 x e), e = 2 output bytes x 590.7 / (2 x 14336) = 0.04120: 0.7303
    assert h100.max_fraction == pytest.approx(0.709 / (1 - 0.709 * 2 * 1978.9e12 / 3.35e12
                                                        / (2 * 14336)))
    assert "split-K reduction charged" in h100.source


def test_split_k_charge_on_an_a100_gemm_by_hand() -> None:
    # A100 bf16, M = 128, N = 128, K = 8192 (mma K 16: no padding). Tile 128 x 128 (1 tile):
    # s = 16: 16 slices of K 512 fill 16 of 108 SMs, one wave: launched = 108 x 16384 x 512
    # = 905,969,664 MACs; the reduction: 16 x 16384 partials x 8 bytes x 153.02 FLOP/byte
    # / 2 = 16 x 16384 x 612.06 = 160,449,036 MACs; useful = 16384 x 8192 = 134,217,728.
    # 134,217,728 / (905,969,664 + 160,449,036) = 0.12585 (uncharged: 0.14815 = 16 / 108).
    # Other candidates do no better: a 64 x 64 tile x 16 splits = 64 slots of K 512,
    # launched 108 x 4096 x 512 = 226,492,416 + the same reduction -> 134,217,728 /
    # 386,941,452 = 0.3469; that is the best (64 x 64 is the smallest tile).
    model = TileWaveGemmEfficiency(sm_count=108, max_fraction=1.0, mma_k=16,
                                   tiles=((128, 128), (64, 64)), splits=(1, 2, 4, 8, 16),
                                   split_k_flop_per_byte=312e12 / 2039e9)
    ridge = 312e12 / 2039e9
    reduction = 16 * 16384 * 8 * ridge / 2
    best = 16384 * 8192 / (108 * 4096 * 512 + reduction)
    assert float(model.utilization(128, 128, 8192)) == pytest.approx(best)
    assert best == pytest.approx(0.3469, abs=1e-4)
