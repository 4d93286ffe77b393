"""tf32: fp32 tensors everywhere, GEMMs at the tf32 tensor-core peak; refused where absent."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bertscope.analytic import build
from bertscope.config import Precision, RunConfig
from bertscope.errors import BertscopeError
from bertscope.perf import load_profile, predict, select_peaks
from bertscope.presets import get_model
from bertscope.sweep import sweep
from bertscope.taxonomy import Category


def test_tf32_rows_are_fp32_rows() -> None:
    """Same op table as fp32 (4-byte activations, no master weights, no 16-bit copies)."""
    m = get_model("bert-tiny")
    a = build(m, RunConfig(batch=2, seq=16)).df
    b = build(m, RunConfig(batch=2, seq=16, precision="tf32")).df
    cols = ["name", "flops", "bytes_read", "bytes_written", "saved_bytes"]
    assert a[cols].equals(b[cols])
    assert not Precision.TF32.mixed and Precision.TF32.act_bytes == 4


def test_tf32_gemms_run_at_the_tf32_peak() -> None:
    """A100: tf32 156 TFLOP/s vs fp32 19.5 (datasheet, catalog file). GEMM rows' compute time
    scales by 19.5 / 156 = 0.125; other rows keep the fp32 vector peak."""
    dev = load_profile("a100")
    assert select_peaks(dev.device, "tf32").gemm_flops == pytest.approx(156e12)
    t = build(get_model("bert-base"), RunConfig(batch=8, seq=128))
    fp32 = predict(t, dev, "fp32").df
    tf32 = predict(t, dev, "tf32").df
    gemm = fp32["category"].map(lambda c: Category(c).is_gemm)
    # every GEMM also writes its output after the main loop (the epilogue), the same bytes
    # in both formats at the A100's 2039 GB/s (no cited stream fraction: the whole of it):
    # that time does not scale with the peak, the main loop's does
    epilogue = fp32.loc[gemm, "bytes_written"] / 2039e9
    ratio = ((tf32.loc[gemm, "compute_s"] - epilogue)
             / (fp32.loc[gemm, "compute_s"] - epilogue)).to_numpy()
    # GEMMs the model runs unsplit scale by the peak ratio exactly. Split-K GEMMs (small
    # M x N, long K: pooler, NSP head, MLM decoder dgrad) pay the partial-sum reduction at
    # the memory bandwidth, which weighs 8x more against the tf32 peak: they gain less.
    rows = fp32.loc[gemm]
    shape = [rows[c].to_numpy(float) for c in ("m", "n", "k")]
    shape.append(np.where(rows["batch"].to_numpy(float) > 0, rows["batch"], 1.0))
    split = np.zeros(len(rows), dtype=bool)
    for fmt in ("fp32", "tf32"):
        model = dev.gemm.for_format(fmt)
        split |= model.utilization(*shape) > replace(model, splits=(1,)).utilization(*shape)
    assert split.sum() < len(rows) // 10
    assert ratio[~split] == pytest.approx(19.5 / 156)
    assert np.all(ratio[split] > 19.5 / 156)
    assert tf32.loc[~gemm, "compute_s"].equals(fp32.loc[~gemm, "compute_s"])


def test_a_device_without_tf32_refuses_it_and_a_sweep_skips_it() -> None:
    with pytest.raises(BertscopeError, match=r"^v100-sxm2-32gb has no tf32 \(it has fp32, fp16\); "
                                             r"pass --precision fp32$"):
        predict(build(get_model("bert-tiny"), RunConfig(batch=1, seq=8, precision="tf32")),
                load_profile("v100"))
    res = sweep(["bert-tiny"], ["v100", "a100"], precision=["fp32", "tf32"])
    assert res.grid_size == 4 and res.evaluated == 3 and res.skipped == 1
    assert set(res.frame[res.frame["precision"] == "tf32"]["device"]) == {"a100-sxm4-80gb"}


def test_profile_refuses_tf32_off_cuda() -> None:
    from bertscope.measure.profile import profile

    with pytest.raises(BertscopeError, match="tf32 runs fp32 matmuls on a GPU"):
        profile(get_model("bert-tiny"), RunConfig(batch=1, seq=8, precision="tf32"), iters=1,
                warmup=0, device="cpu")
