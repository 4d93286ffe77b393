"""Default bandwidth and launch models of catalog GPUs from cited figures (perf/efficiency.py:
gpu_bandwidth, gpu_overhead): a measured streaming fraction, half-saturation bytes from
Little's law with a measured DRAM latency, and a cited launch floor; assumed defaults, said
so, where the catalog cites nothing."""

from __future__ import annotations

import numpy as np
import pytest

from bertscope.hardware import load_device
from bertscope.perf.efficiency import (
    NVIDIA_LAUNCH_SECONDS,
    default_profile,
    gpu_bandwidth,
    gpu_overhead,
)


def _rows(nbytes: float, count: float = 1.0) -> dict[str, np.ndarray]:
    return {"bytes_read": np.array([nbytes / 2]), "bytes_written": np.array([nbytes / 2]),
            "count": np.array([count])}


def test_v100_bandwidth_from_littles_law() -> None:
    # V100: streaming fraction 0.877 (789.7 of 900 GB/s), DRAM latency 316 ns (436 cycles
    # at 1380 MHz). Bytes in flight = 0.877 x 900e9 B/s x 316e-9 s = 789.3 x 316
    # = 249,418.8 bytes: the half-saturation point.
    model = gpu_bandwidth(load_device("v100"))
    assert model.max_fraction == pytest.approx(0.877)
    assert model.half_saturation_bytes == pytest.approx(249_418.8)
    # at B = B0 half of the ceiling: 0.877 / 2 = 0.4385
    assert float(model.fraction(_rows(249_418.8))[0]) == pytest.approx(0.4385)
    # a 1 MB launch: time = (1e6 + 249,418.8) / (900e9 x 0.877) = 1,249,418.8 / 789.3e9
    # = 1.5830 us, i.e. one DRAM latency (0.316 us) plus 1e6 / 789.3e9 = 1.2669 us
    f = float(model.fraction(_rows(1e6))[0])
    assert 1e6 / (900e9 * f) == pytest.approx(316e-9 + 1e6 / 789.3e9)
    # two launches of 0.5 MB each in one row: the same per-launch fraction as one 0.5 MB
    assert float(model.fraction(_rows(1e6, count=2))[0]) == pytest.approx(
        float(model.fraction(_rows(5e5))[0]))


def test_source_line_names_the_citations() -> None:
    prof = default_profile(load_device("v100"))
    bw = prof.sources["bandwidth"]
    assert "max 0.877 (" in bw and "gpu-benches" in bw and "789.7 GB/s" in bw
    assert "half-saturation 249419 bytes = 0.877 x 900 GB/s x 316 ns DRAM latency" in bw
    assert "Little's law" in bw and "436.0 cycles" in bw
    assert prof.sources["overhead"].startswith("3 us per launch")
    assert "forums.developer.nvidia.com" in prof.sources["overhead"]
    assert "bandwidth and overhead from cited figures (bandwidth, overhead" in prof.notes
    # the GEMM source names the cited caps (Markidis et al. for V100; the MAMF table for
    # A100/H100) once the run's format picks them
    assert "Markidis" in prof.gemm.for_format("fp16").source
    a100 = default_profile(load_device("a100")).gemm.for_format("bf16")
    # 271.2 / 312 = 0.869 at 1024 x 10240 x 5120, less its epilogue (2 bytes x 10240 x 1024
    # written at 2039 GB/s): the main-loop cap 0.869 / (1 - 0.869 x 2 x 153.0 / (2 x 5120))
    assert a100.max_fraction == pytest.approx(0.869 / (1 - 0.869 * 2 * 312e12 / 2039e9
                                                        / (2 * 5120)))
    assert "271.2" in a100.source and "Maximum Achievable Matmul FLOPS" in a100.source


def test_uncited_figures_stay_assumed_and_say_so() -> None:
    # A100 has no cited streaming fraction or DRAM latency in the catalog: the assumed
    # default (0.85 of peak, 1 MiB half-saturation) with its "assumed default" source
    a100 = gpu_bandwidth(load_device("a100"))
    assert (a100.max_fraction, a100.half_saturation_bytes) == (0.85, 2**20)
    assert a100.source == "assumed default"
    # an AMD GPU: no cited HIP launch figure, the assumed 5 us
    mi = gpu_overhead(load_device("mi300x"))
    assert (mi.seconds_per_launch, mi.source) == (5e-6, "assumed default")
    # an NVIDIA GPU: the cited 3 us floor
    assert gpu_overhead(load_device("h100")).seconds_per_launch == NVIDIA_LAUNCH_SECONDS == 3e-6
    # TPUs and CPUs keep their kind's assumed defaults
    tpu = default_profile(load_device("tpu-v4"))
    assert tpu.sources["bandwidth"] == tpu.sources["overhead"] == "assumed default"


_TOML = '''
name = "toy-gpu"
vendor = "NVIDIA"
kind = "gpu"
memory_GB = 16
memory_bandwidth_GBps = 1000
stream_bandwidth_fraction = {frac}
dram_latency_ns = 500
[peak_TFLOPS]
fp16 = 100
[sources]
memory_GB = "a"
memory_bandwidth_GBps = "b"
"peak_TFLOPS.fp16" = "c"
stream_bandwidth_fraction = "d"
dram_latency_ns = "e"
'''


def test_device_file_memory_figures_parse_and_are_checked() -> None:
    from bertscope.errors import BertscopeError
    from bertscope.hardware import parse_device_text

    dev = parse_device_text(_TOML.format(frac=0.9))
    assert dev.stream_bandwidth_fraction == 0.9
    assert dev.dram_latency == pytest.approx(500e-9)
    # Little's law: 0.9 x 1000e9 x 500e-9 = 450,000 bytes in flight
    assert gpu_bandwidth(dev).half_saturation_bytes == pytest.approx(450_000)
    with pytest.raises(BertscopeError, match="stream_bandwidth_fraction"):
        parse_device_text(_TOML.format(frac=1.2))
    with pytest.raises(BertscopeError, match="dram_latency_ns has no source"):
        parse_device_text(_TOML.format(frac=0.9).replace('dram_latency_ns = "e"\n', ""))
