"""Operand alignment in the GPU GEMM model (perf/gpu_gemm.py `alignment`): expected shares
derived by hand from the 16-byte load width of NVIDIA's Matrix Multiplication Background
guide (section 4.1); the H200 measurement that motivated it is in
bench/results/gpu_recipe_check.txt (vocabulary GEMMs at 0.16-0.37 of the aligned rate)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bertscope.hardware import load_device
from bertscope.perf.gpu_gemm import alignment, for_device


@pytest.mark.parametrize(("m", "n", "k", "width", "want"), [
    # BERT's vocabulary 30,522 = 2 x 15,261: 2 bf16 elements = 4 bytes of 16 -> 0.25
    (4096, 30522, 1024, 2, 0.25),
    # GPT-2's 50,257 is odd: 1 element = 2 bytes of 16 -> 0.125
    (8192, 50257, 1024, 2, 0.125),
    # every dimension a multiple of 8 bf16 elements (16 bytes): full rate
    (4096, 1024, 4096, 2, 1.0),
    # NVIDIA's padded 30,528 = 64 x 477: aligned in bf16
    (4096, 30528, 1024, 2, 1.0),
    # fp32 (and tf32) elements are 4 bytes: 30,522 -> 2 x 4 = 8 bytes of 16 -> 0.5
    (4096, 30522, 1024, 4, 0.5),
    # fp8: 1 byte x 2 = 2 bytes of 16 -> 0.125; 8,192 x 1 byte: 16 bytes, full rate
    (4096, 30522, 1024, 1, 0.125),
    (8192, 8192, 8192, 1, 1.0),
    # the smallest dimension decides: K = 100 = 4 x 25 -> 4 x 2 = 8 bytes -> 0.5
    (4096, 4096, 100, 2, 0.5),
    # not modelled (element size unknown): 1
    (4096, 30522, 1024, 0, 1.0),
])
def test_alignment_share_by_hand(m: int, n: int, k: int, width: int, want: float) -> None:
    assert float(alignment(m, n, k, width)) == pytest.approx(want)


def test_alignment_broadcasts_over_arrays() -> None:
    got = alignment(np.array([4096, 4096]), np.array([30522, 30528]), 1024, 2)
    assert got.tolist() == [0.25, 1.0]


def test_the_tile_model_charges_it_per_format() -> None:
    # 30,522 and 30,528 launch the same tiles (both ceil to 239 tiles of 128 columns), so
    # the fractions differ by the alignment share (0.25 in bf16, 0.5 in tf32) times the
    # tile share's useful columns, 30,522 / 30,528 of the same launched ones
    model = for_device(load_device("h200"))
    assert model is not None
    rows = pd.DataFrame({"m": [4096, 4096], "n": [30522, 30528], "k": [1024, 1024],
                         "batch": [0, 0], "flops": [1.0, 1.0], "count": [1, 1]})
    bf16 = model.for_format("bf16").fraction(rows)
    assert bf16[0] / bf16[1] == pytest.approx(0.25 * 30522 / 30528)
    tf32 = model.for_format("tf32").fraction(rows)
    assert tf32[0] / tf32[1] == pytest.approx(0.5 * 30522 / 30528)
    plain = model.fraction(rows)  # no format asked: alignment not modelled
    assert plain[0] / plain[1] == pytest.approx(30522 / 30528)
