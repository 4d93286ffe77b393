"""Synthetic measurements for the calibration tests: a made-up CPU and op tables timed from
known rates, so what a fit recovers is known by hand. Nothing is timed."""

from __future__ import annotations

import numpy as np

from bertscope import build, get_model
from bertscope.config import RunConfig
from bertscope.hardware import Device
from bertscope.optable import OpTable
from bertscope.taxonomy import gemm_mask

CHIP = Device(name="chip", sku="Chip", vendor="Test", kind="cpu",
              peaks={"fp32": 1e12, "bf16": 4e12}, memory_bytes=64e9, memory_bandwidth=100e9,
              sources={"peaks.fp32": "t", "peaks.bf16": "t", "memory_bytes": "t",
                       "memory_bandwidth": "t"})
"""A made-up CPU: fp32 1 TFLOP/s, bf16 4 TFLOP/s, 100 GB/s."""


def synthetic_measurement(precision: str, batch: int, seq: int, gemm_rate: float,
                          stream_rate: float) -> tuple[OpTable, OpTable]:
    """(measured, analytic) of bert-tiny batch x seq in `precision`: the analytic table with
    every GEMM row at `gemm_rate` FLOP/s and every other row at `stream_rate` bytes/s."""
    analytic = build(get_model("bert-tiny"), RunConfig(batch=batch, seq=seq,
                                                       precision=precision))
    c = analytic.columns
    gemm = gemm_mask(np.asarray(c["category"], dtype=object))
    time = np.where(gemm, c["flops"] / gemm_rate,
                    (c["bytes_read"] + c["bytes_written"]) / stream_rate)
    return analytic.with_columns({"time_s": time}), analytic
