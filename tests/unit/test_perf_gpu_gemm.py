"""The first-principles GPU GEMM model (perf/gpu_gemm.py) against the worked examples of
NVIDIA's Matrix Multiplication Background User's Guide (DU-09799-001, section 3), and the
catalog figures it reads."""

from __future__ import annotations

import numpy as np
import pytest

from bertscope.errors import BertscopeError
from bertscope.hardware import NumberFormat, load_device, parse_device_text
from bertscope.perf.device_profile import DeviceProfile, model_from_dict
from bertscope.perf.efficiency import GemmEfficiency, default_profile
from bertscope.perf.gpu_gemm import TileWaveGemmEfficiency, for_device


def _one_tile(tm: int, tn: int, sms: int) -> TileWaveGemmEfficiency:
    return TileWaveGemmEfficiency(sm_count=sms, max_fraction=1.0, tiles=((tm, tn),),
                                  splits=(1,))


def test_tile_quantization_example_of_the_guide() -> None:
    # Guide 3.1: a 256 x 256 output in 128 x 128 tiles is 4 tiles, 257 x 256 is 6. With one
    # SM (no wave effect) the useful share is M N / (tiles x 128 x 128):
    model = _one_tile(128, 128, sms=1)
    assert model.utilization(256, 256, 4096) == pytest.approx(1.0)
    # 257 * 256 / (6 * 128 * 128) = 65792 / 98304
    assert model.utilization(257, 256, 4096) == pytest.approx(65792 / 98304)


def test_wave_quantization_example_of_the_guide_on_a100() -> None:
    # Guide 3.2: A100, 108 SMs, one 256 x 128 tile per SM: a wave is 108 tiles. M = 2304,
    # K = 4096: N = 1536 gives 9 x 12 = 108 tiles (one full wave), N = 1664 gives
    # 9 x 13 = 117 tiles: two waves, 117 of 216 slots busy.
    model = _one_tile(256, 128, sms=load_device("a100").sm_count)
    assert model.utilization(2304, 1536, 4096) == pytest.approx(1.0)
    # 2304 * 1664 / (2 waves * 108 * 256 * 128) = 3833856 / 7077888
    assert model.utilization(2304, 1664, 4096) == pytest.approx(3833856 / 7077888)
    # the duration doubles (two waves), though the work grew by 1664 / 1536 only
    t = [n / model.utilization(2304, n, 4096) for n in (1536, 1664)]
    assert t[1] / t[0] == pytest.approx(2.0)


def test_duration_never_falls_as_a_gemm_grows() -> None:
    model = for_device(load_device("a100"))
    n = np.arange(8, 4097, 8, dtype=float)
    for m, k in ((512, 1024), (4096, 1024), (16384, 4096), (64, 64)):
        f = model.utilization(m, n, k)
        duration = m * n * k / f
        assert np.all(np.diff(duration) >= -1e-9 * duration[1:])
        assert np.all((f > 0) & (f <= 1))


def test_split_k_lets_a_thin_long_gemm_fill_the_chip() -> None:
    # M = N = 128, K = 65536: one 128x128 tile fills 1 of 108 SMs; split 16 ways it fills 16.
    plain = _one_tile(128, 128, sms=108)
    split = TileWaveGemmEfficiency(sm_count=108, max_fraction=1.0, tiles=((128, 128),),
                                   splits=(1, 16))
    assert plain.utilization(128, 128, 65536) == pytest.approx(1 / 108)
    assert split.utilization(128, 128, 65536) == pytest.approx(16 / 108)
    # 117 tiles already spill into a second wave: no split (it would only even out the
    # tail, at the cost of a partial-sum reduction): 117 / 216 slots busy
    assert split.utilization(128 * 117, 128, 65536) == pytest.approx(117 / 216)


def test_tile_reuse_term_from_the_l2_feed() -> None:
    # A100: 2 x 312e12 / (1.41e9 x 5120 B/clk) = 86.44 FLOP per operand element; a 64x64 tile
    # does 2*64*64/(64+64) = 64 per element: 64 / 86.44 = 0.7404 of the SM's rate.
    a100 = load_device("a100")
    model = for_device(a100)
    assert model.operand_intensity == pytest.approx(2 * 312e12 / (1.41e9 * 5120))
    only_64 = TileWaveGemmEfficiency(sm_count=108, max_fraction=1.0, tiles=((64, 64),),
                                     splits=(1,), operand_intensity=model.operand_intensity)
    # M = 64 * 108 = 6912, N = 64: 108 tiles of 64 x 64, exactly one wave
    assert only_64.utilization(6912, 64, 4096) == pytest.approx(
        64 / (2 * 312e12 / (1.41e9 * 5120)))


def test_catalog_peaks_agree_with_units_clock_and_per_unit_rate() -> None:
    # dense 16-bit tensor FLOP per clock per SM/CU from the vendors' whitepapers: V100 8 TCs x
    # 64 FMA x 2 = 1024; A100 4 x 256 x 2 = 2048; H100 twice A100's = 4096; CDNA 1/2 1024,
    # CDNA 3 2048 per CU; MI50 (no matrix cores) 128 lanes x 2 (packed fp16) = 256.
    rate = {"v100": 1024, "a100": 2048, "h100": 4096, "h200-sxm-141gb": 4096, "mi100": 1024,
            "mi250x": 1024, "mi300x": 2048, "mi50-32gb": 256}
    for name, per_clock in rate.items():
        d = load_device(name)
        assert d.sm_count * d.boost_clock * per_clock == pytest.approx(
            d.peak_flops(NumberFormat.FP16), rel=0.005), name


def test_catalog_gpus_default_to_the_model_and_tpus_do_not() -> None:
    for name in ("v100", "a100", "h100", "mi300x"):
        assert isinstance(default_profile(load_device(name)).gemm, TileWaveGemmEfficiency)
    for name in ("tpu-v4", "b200"):  # TPUs: systolic arrays; B200: no SM count published
        gemm = default_profile(load_device(name)).gemm
        # B200: the saturating default per format with its cited caps (#31)
        assert isinstance(gemm.for_format("bf16") if name == "b200" else gemm, GemmEfficiency)
    v100 = for_device(load_device("v100"))
    # Markidis et al. 2018: 83 Tflops/s on Tensor Cores, 7x the single precision rate,
    # measured at 1.38 GHz, where the peaks are 112.7 (Tensor Cores) and 5120 x 2 x 1.38e9 (#31)
    # at N = 8192 (v100-sxm2-32gb.toml gemm_attainable_shape); the cap is the main loop's,
    # measured / (1 - measured x e), e = out bytes x (peak / 900 GB/s) / 0.877 / (2 x 8192)
    for fmt, measured, out, peak in (("fp16", 83 / 112.7, 2, 125e12),
                                     ("fp32", 83 / 7 / 14.1312, 4, 15.7e12)):
        e = out * peak / 900e9 / 0.877 / (2 * 8192)
        assert v100.for_format(fmt).max_fraction == pytest.approx(measured / (1 - measured * e),
                                                                   abs=1e-3)
    # not cited: the assumed cap, only the element size (alignment) of bf16 set
    assert v100.for_format("bf16").max_fraction == v100.max_fraction == 0.85
    assert v100.for_format("bf16").element_bytes == 2 and v100.element_bytes == 0
    assert v100.mma_k == 4 and "Markidis" in v100.for_format("fp16").source
    assert "assumed" not in v100.for_format("fp16").source and "assumed" in v100.source
    assert "assumed" in for_device(load_device("a100")).source


def test_prediction_uses_the_cap_of_the_runs_gemm_format() -> None:
    # one large GEMM row on the V100 in fp16 and in fp32: same shape, so the same tile/wave
    # utilization; the time ratio is the peak ratio x the inverse cap ratio, plus the same
    # epilogue in both: 2 n^2 bytes written at 900 GB/s x 0.877 (the V100's cited stream
    # fraction) after the main loop
    from bertscope.optable import Op, OpTable
    from bertscope.perf import predict
    from bertscope.taxonomy import Category, Phase, Sublayer

    n = 8192
    row = Op("g", 0, Sublayer.FFN1, Category.GEMM, Phase.FORWARD, m=n, n=n, k=n, batch=1,
             flops=2 * n**3, bytes_read=4 * n * n, bytes_written=2 * n * n)
    profile = default_profile(load_device("v100"))
    t = {p: float(predict(OpTable.from_ops([row]), profile, p).columns["compute_s"][0])
         for p in ("fp16", "fp32")}
    util = for_device(load_device("v100")).utilization(n, n, n)
    # fraction: the main-loop caps behind the cited 0.736 and 0.839 (measured at n = 8192, the
    # catalog's gemm_attainable_shape): measured / (1 - measured x e), e = out bytes x
    # (peak / 900 GB/s) / 0.877 / (2 n): fp16 out 2 bytes, fp32 4
    epilogue = 2 * n * n / (900e9 * 0.877)
    cap16 = 0.736 / (1 - 0.736 * 2 * 125e12 / 900e9 / 0.877 / (2 * n))
    cap32 = 0.839 / (1 - 0.839 * 4 * 15.7e12 / 900e9 / 0.877 / (2 * n))
    assert t["fp16"] == pytest.approx(2 * n**3 / (125e12 * cap16 * util) + epilogue)
    assert t["fp32"] == pytest.approx(2 * n**3 / (15.7e12 * cap32 * util) + epilogue)


def test_model_and_profile_round_trip(tmp_path) -> None:
    model = for_device(load_device("h100"))
    assert model_from_dict(model.to_dict()) == model
    profile = default_profile(load_device("a100"))
    path = profile.save(tmp_path / "a100.json")
    back = DeviceProfile.load(path)
    assert back.gemm == profile.gemm
    assert back.device.sm_count == 108 and back.device.mma_tile == (16, 8, 16)
    assert back.device.boost_clock == pytest.approx(1.41e9)


def test_fraction_is_elementwise_over_broadcast_columns() -> None:
    model = for_device(load_device("v100"))
    m = np.array([[128.0], [4096.0], [33.0]])  # (rows, 1) against a configuration axis
    n = np.array([64.0, 1024.0, 3000.0])
    rows = {"m": m, "n": n, "k": np.full((3, 1), 1024.0), "batch": np.ones((3, 1)),
            "flops": 2 * m * n * 1024, "count": np.ones((3, 1))}
    f = model.fraction(rows)
    assert f.shape == (3, 3)
    for i in range(3):
        for j in range(3):
            assert f[i, j] == pytest.approx(model.max_fraction * model.utilization(
                m[i, 0], n[j], 1024.0))


def test_device_file_needs_a_source_for_the_sm_count() -> None:
    text = ('name = "x"\nvendor = "v"\nkind = "gpu"\nmemory_GB = 1\nmemory_bandwidth_GBps = 1\n'
            'sm_count = 10\n[peak_TFLOPS]\nfp16 = 1\n[sources]\n"peak_TFLOPS.fp16" = "s"\n'
            'memory_GB = "s"\nmemory_bandwidth_GBps = "s"\n')
    with pytest.raises(BertscopeError, match="sm_count has no source"):
        parse_device_text(text)
    with pytest.raises(BertscopeError, match="mma_tile must be three"):
        parse_device_text(text.replace("sm_count = 10", "mma_tile = [1, 2]"))
    table = text.replace("[sources]", "[gemm_attainable_fraction]\nfp16 = 1.5\n[sources]")
    with pytest.raises(BertscopeError, match=r"gemm_attainable_fraction.fp16 must be a fraction"):
        parse_device_text(table + 'sm_count = "s"\n')
    with pytest.raises(BertscopeError, match="unknown number format 'fp64'"):
        parse_device_text(table.replace("fp16 = 1.5", "fp64 = 0.5") + 'sm_count = "s"\n')
    with pytest.raises(BertscopeError, match=r"gemm_attainable_fraction\.fp16 has no source"):
        parse_device_text(table.replace("1.5", "0.5") + 'sm_count = "s"\n')
    ok = parse_device_text(text + 'sm_count = "s"\n')
    assert ok.sm_count == 10 and isinstance(default_profile(ok).gemm, TileWaveGemmEfficiency)


def test_alike_stacked_rows_are_timed_once_with_the_same_answer() -> None:
    """Stacked (rows, configs) shapes where rows 0, 2 and 3 are one shape: the fractions equal
    each row's own `utilization` (times the cap), row by row."""
    from bertscope.perf.gpu_gemm import _distinct_rows

    model = for_device(load_device("a100"))
    tokens = np.array([[64.0, 512.0, 4096.0]])
    m = np.concatenate([tokens, tokens * 2, tokens, tokens])
    n = np.array([[1024.0], [1024.0], [1024.0], [1024.0]])
    k = np.array([[1024.0], [4096.0], [1024.0], [1024.0]])
    first, inverse = _distinct_rows([m, n, k, np.ones((1, 1))])
    assert first == [0, 1] and list(inverse) == [0, 1, 0, 0]
    rows = {"flops": np.ones((4, 3)), "count": 1.0, "m": m, "n": n, "k": k, "batch": 0.0}
    got = model.fraction(rows)
    for i in range(4):
        want = model.max_fraction * model.utilization(m[i], n[i], k[i])
        np.testing.assert_allclose(got[i], want, rtol=1e-12)  # dense or sparse split path


def test_the_epilogue_makes_short_k_gemms_slower_as_measured_on_the_h200() -> None:
    """Same FLOPs, K = 1024 vs 4096: measured on one H200 (bench/results/gpu_gemm_caps.txt,
    bf16: 4096 x 4096 x 1024 at 0.674 of peak, 4096 x 1024 x 4096 at 0.753; fp16 0.661 and
    0.728). Without the epilogue the tile model rates both alike (both fill whole waves of
    256 x 128 tiles); with it the short-K one loses the time of its 4x larger output. By hand:
    f / (1 + f x 2 bytes x R / (2 K)), R = 989.5e12 / 4.8e12 = 206.1 FLOP/byte (the H200 has
    no cited stream fraction: 1), f = 0.779 (bench/results/gemm_caps_vs_model.txt "no epi"):
    K = 1024: 0.779 / (1 + 0.779 x 206.1 / 1024) = 0.673; K = 4096: 0.779 / 1.0392 = 0.750;
    ratio 0.898 vs the measured 0.674 / 0.753 = 0.895 (bf16), 0.661 / 0.728 = 0.908 (fp16)."""
    model = for_device(load_device("h200")).for_format("bf16")

    def frac(m: int, n: int, k: int) -> float:
        rows = {"m": [m], "n": [n], "k": [k], "batch": [0], "count": [1],
                "flops": [2.0 * m * n * k], "bytes_written": [2.0 * m * n]}
        return float(model.fraction(rows)[0])
    short, long = frac(4096, 4096, 1024), frac(4096, 1024, 4096)
    plain = model.utilization(4096, 4096, 1024) * model.max_fraction
    assert plain == pytest.approx(model.utilization(4096, 1024, 4096) * model.max_fraction)
    assert short == pytest.approx(plain / (1 + plain * 989.5e12 / 4.8e12 / 1024), rel=1e-9)
    assert long == pytest.approx(plain / (1 + plain * 989.5e12 / 4.8e12 / 4096), rel=1e-9)
    for measured in (0.674 / 0.753, 0.661 / 0.728):
        assert short / long == pytest.approx(measured, abs=0.015)


def test_a_cited_shape_is_checked_and_the_model_gives_the_figure_there(tmp_path) -> None:
    text = ('name = "x"\nvendor = "v"\nkind = "gpu"\nmemory_GB = 1\nmemory_bandwidth_GBps = 1\n'
            'sm_count = 10\n[peak_TFLOPS]\nfp16 = 1\n[gemm_attainable_fraction]\nfp16 = 0.5\n'
            '[gemm_attainable_shape]\nfp16 = [64, 64, 64]\n[sources]\n'
            '"peak_TFLOPS.fp16" = "s"\nmemory_GB = "s"\nmemory_bandwidth_GBps = "s"\n'
            'sm_count = "s"\n"gemm_attainable_fraction.fp16" = "s"\n')
    assert parse_device_text(text).gemm_shapes[NumberFormat.FP16] == (64, 64, 64)
    with pytest.raises(BertscopeError, match=r"gemm_attainable_shape.fp16 must be three "
                                             r"positive integers \[M, N, K\], got \[64, 64\]$"):
        parse_device_text(text.replace("[64, 64, 64]", "[64, 64]"))
    with pytest.raises(BertscopeError, match=r"gemm_attainable_shape.bf16 has no "
                                             r"gemm_attainable_fraction.bf16 to go with it"):
        parse_device_text(text.replace("fp16 = [64", "bf16 = [64"))
    with pytest.raises(BertscopeError, match="unknown number format 'fp64' in "
                                             r"\[gemm_attainable_shape\]"):
        parse_device_text(text.replace("fp16 = [64", "fp64 = [64"))
    # the V100's cited 0.736 (Markidis et al., N = 8192): the model gives it back on that
    # GEMM, its output written, once the tile/wave share (taken as whole there) is divided out
    v100 = load_device("v100")
    model = for_device(v100).for_format("fp16")
    n = 8192
    rows = {"m": [n], "n": [n], "k": [n], "batch": [0], "count": [1], "flops": [2.0 * n**3],
            "bytes_written": [2.0 * n * n]}
    share = model.utilization(n, n, n)
    assert float(model.fraction(rows)[0]) / share == pytest.approx(83 / 112.7, rel=1e-3)
    # a profile saved and loaded keeps the shapes (and so the same caps)
    path = default_profile(v100).save(tmp_path / "v100.json")
    back = DeviceProfile.load(path)
    assert back.device.gemm_shapes == v100.gemm_shapes
    assert for_device(back.device) == for_device(v100)
