"""fp8 runs price each GEMM row at the format it runs in: Transformer Engine's fp8 covers the
linear layers (category GEMM); attention's batched GEMMs stay bf16 (`analytic/fp8.py`), so
they are held to the bf16 peak and the bf16 attainable fraction, not fp8's."""

from __future__ import annotations

import numpy as np
import pytest

from bertscope import ops
from bertscope.hardware import NumberFormat
from bertscope.perf import load_profile, predict
from bertscope.perf.predict import batched_gemm_for, gemm_for
from bertscope.perf.roofline import select_peaks
from bertscope.taxonomy import Category


def _compute(precision: str, category: Category) -> np.ndarray:
    table = ops("gpt2", batch=2, seq=256, precision=precision, attention="sdpa")
    c = predict(table, "h100").columns
    sel = c["category"] == category
    return c["compute_s"][sel]


def test_fp8_batched_gemms_are_priced_as_in_a_bf16_run():
    # the batched GEMM rows are the same in both runs (fp8 converts category GEMM only), so
    # at the same (bf16) peak and cap their compute times must agree
    fp8, bf16 = (_compute(p, Category.BATCHED_GEMM) for p in ("fp8", "bf16"))
    assert len(fp8) == len(bf16) > 0
    assert np.allclose(fp8, bf16, rtol=1e-12)


def test_fp8_linear_gemms_keep_the_fp8_cap():
    # h100-sxm5-80gb.toml: gemm_attainable_fraction fp8 = 0.709 (Bekman's MAMF table),
    # bf16 = 0.803; the linear GEMMs of an fp8 run at fp8's, the batched ones at bf16's
    profile = load_profile("h100")
    peaks = select_peaks(profile.device, "fp8")
    assert peaks.gemm_format is NumberFormat.FP8
    assert peaks.batched_gemm_format is NumberFormat.BF16
    # (each the main-loop cap behind the figure at its measured shape: measured /
    # (1 - measured x 2 bytes x ridge / (2 K)); fp8 K = 14336, bf16 K = 13312, 3.35 TB/s)
    fp8 = 0.709 / (1 - 0.709 * 2 * 1978.9e12 / 3.35e12 / (2 * 14336))
    bf16 = 0.803 / (1 - 0.803 * 2 * 989.4e12 / 3.35e12 / (2 * 13312))
    assert gemm_for(profile, peaks).max_fraction == pytest.approx(fp8)
    assert batched_gemm_for(profile, peaks).max_fraction == pytest.approx(bf16)
    bf16 = select_peaks(profile.device, "bf16")
    assert bf16.batched_gemm_format is None  # one format: one model for every GEMM row
    assert batched_gemm_for(profile, bf16) is gemm_for(profile, bf16)
