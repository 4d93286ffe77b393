"""The vectorized tile/wave GEMM model (perf/gpu_gemm.py) equals a plain scalar reading of its
module docstring, candidate by candidate, on random stacked shapes (rows that vary with the
configurations and rows whose tiles do not, as a sweep stacks them)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bertscope.hardware import load_device
from bertscope.perf.gpu_gemm import PARTIAL_BYTES, TileWaveGemmEfficiency, for_device


def reference(model: TileWaveGemmEfficiency, m: float, n: float, k: float, b: float) -> float:
    """max over tiles and split-K factors of tile share x wave share x K share x reuse (the
    split's partial-sum reduction charged), capped at 1: one shape, no numpy."""
    m, n, k, b = (max(float(x), 1.0) for x in (m, n, k, b))
    sms = model.sm_count
    k_pad = math.ceil(k / model.mma_k) * model.mma_k
    best = 0.0
    for tm, tn in model.tiles:
        reuse = (1.0 if model.operand_intensity <= 0
                 else min(1.0, 2 * tm * tn / (tm + tn) / model.operand_intensity))
        tiles = b * math.ceil(m / tm) * math.ceil(n / tn)
        share = m / (math.ceil(m / tm) * tm) * n / (math.ceil(n / tn) * tn) * reuse
        for s in model.splits:
            if s == 1:
                u = share * tiles / (math.ceil(tiles / sms) * sms) * k / k_pad
            elif tiles * s <= sms:  # split tiles must fit one wave
                u = share * tiles * s / sms * k / (s * math.ceil(k_pad / s))
                charge = s * PARTIAL_BYTES * model.split_k_flop_per_byte / 2 / k
                u = u / (1 + u * charge)
            else:
                continue
            best = max(best, u)
    return min(best, 1.0)


def aligned_share(model: TileWaveGemmEfficiency, m: float, n: float, k: float) -> float:
    """The docstring's operand alignment, one shape: min(16, element bytes x the largest
    power of two dividing M, N and K) / 16; 1 where the element size is not set."""
    if model.element_bytes == 0:
        return 1.0
    g = math.gcd(int(m), int(n), int(k))
    return min(16, model.element_bytes * (g & -g)) / 16


def with_epilogue(model: TileWaveGemmEfficiency, f: float, flops: float, written: float) -> float:
    """The docstring's epilogue as times, one shape: the main loop takes flops / (peak f), the
    output write written / (bandwidth x stream fraction) after it; the fraction is flops /
    peak over their sum (peak / bandwidth = the format's ridge)."""
    main = flops / f  # in units of 1 / peak
    write = written * model.split_k_flop_per_byte / model.stream_fraction
    return flops / (main + write)


MODELS = {name: for_device(load_device(name)).for_format(fmt)
          for name, fmt in (("a100", "bf16"), ("h100", "fp8"), ("mi300x", "bf16"),
                            ("v100", "fp16"))}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stacked_fractions_equal_the_scalar_reference(name: str, seed: int) -> None:
    model = MODELS[name]
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, 70_000, size=(1, 6, 5)).astype(float)  # (rows, batch, seq)
    small = rng.integers(1, 300, size=(1, 6, 5)).astype(float)
    dims = [64, 128, 768, 1024, 3072, 4096, 1000, 30522]
    # rows: forward-like (M varies), weight-gradient-like (K varies, tiles fixed), small
    # thin ones (split-K territory) and batched ones
    rows = []
    for _ in range(9):
        kind = rng.integers(0, 4)
        a, c = (float(rng.choice(dims)) for _ in range(2))
        if kind == 0:
            rows.append((tokens, a, c, 1.0))
        elif kind == 1:
            rows.append((a, c, tokens, 1.0))
        elif kind == 2:
            rows.append((small, float(rng.integers(1, 200)), tokens, 1.0))
        else:
            rows.append((small, small, 64.0, float(rng.integers(1, 64))))
    shape = (len(rows), 6, 5)
    cols = {f: np.empty(shape) for f in ("m", "n", "k", "batch")}
    for i, row in enumerate(rows):
        for f, v in zip(("m", "n", "k", "batch"), row, strict=True):
            cols[f][i] = v
    cols["flops"] = 2 * cols["m"] * cols["n"] * cols["k"]
    cols["count"] = np.ones((1, 1, 1))
    got = model.fraction(cols)
    want = np.vectorize(lambda *x: model.max_fraction * reference(model, *x)
                        * aligned_share(model, *x[:3]))(
        cols["m"], cols["n"], cols["k"], cols["batch"])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # with the output bytes known (2-byte outputs, B M N of them), the epilogue is charged
    cols["bytes_written"] = 2 * cols["m"] * cols["n"] * np.maximum(cols["batch"], 1)
    got = model.fraction(cols)
    want = np.vectorize(lambda f, fl, w: with_epilogue(model, f, fl, w))(
        want, cols["flops"], cols["bytes_written"])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert np.all(got < model.fraction({k: v for k, v in cols.items() if k != "bytes_written"}))
    del cols["bytes_written"]
    # one M for every row (broadcast over the rows), varying with the configurations
    shared = {**cols, "m": tokens}
    got = model.fraction(shared)
    want = np.vectorize(lambda *x: model.max_fraction * reference(model, *x)
                        * aligned_share(model, *x[:3]))(
        tokens, cols["n"], cols["k"], cols["batch"])
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_broadcast_shapes_equal_the_scalar_reference(name: str) -> None:
    """Dimensions of different shapes (as a sweep's unstacked rows): elementwise."""
    model = MODELS[name]
    m = np.array([[1.0], [37.0], [512.0], [8192.0]])
    n = np.array([1.0, 64.0, 1000.0, 4096.0])
    k = np.array([[[3.0]], [[4096.0]]])
    got = model.utilization(m, n, k, 2.0)
    want = np.vectorize(lambda *x: reference(model, *x))(m, n, k, 2.0)
    assert got.shape == (2, 4, 4)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert model.utilization(300, 200, 100) == pytest.approx(reference(model, 300, 200, 100, 1),
                                                             rel=1e-12)
