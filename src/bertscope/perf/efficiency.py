"""Efficiency models: how far below the roofline an op runs, as small swappable pieces.

A prediction divides each row's ideal time by an achieved fraction of the device's peak:

    compute_s  = flops / (peak x gemm.fraction(rows))          GEMM rows
               = flops / peak                                    other rows (vector units)
    memory_s   = bytes / (bandwidth x bandwidth.fraction(rows))
    overhead_s = overhead.seconds(rows)                          launch cost per execution
    host_s     = overhead.host_seconds(rows)                     host work nothing overlaps
    time_s     = max(compute_s, memory_s, overhead_s) + host_s

Contracts every model keeps (the property tests in tests/unit/test_properties.py rely on
them):

- an `EfficiencyModel.fraction` f lies in (0, 1] (so no op beats the roofline), does not
  fall when a launch does more work w, and the time it implies, w / f(w), does not fall
  either (so merging ops, as fusion does, never costs time: with f non-decreasing, w / f(w)
  is subadditive; with w / f(w) non-decreasing, eliding bytes never adds time). The
  saturating built-in models give w / f(w) = (w + w0) / max, which is both. The GPU
  tile/wave GEMM model (`gpu_gemm.py`) keeps the second (a bigger GEMM never takes fewer
  waves) but not the first (one tile past a full wave lowers the fraction, as NVIDIA's GEMM
  guide shows); fusion never merges GEMM rows, so only the time's monotonicity is needed;
- an `OverheadModel` charges a row (floor and host time alike) no more than the sum of what
  its members' rows would be charged separately;
- models depend on the rows only, never on the device's peaks (a faster chip is never slower);
- a model that keys figures by phase does so through `Phase.family` (recompute is forward
  work run again, so it takes the forward figures).

The default figures are *assumed defaults* per device kind (`source` says so), except the
GEMM model of GPUs with an SM count (first principles, `gpu_gemm.for_device`), the attainable
large-GEMM fraction per device and format where the catalog cites one (`gemm_caps`: cited, or
marked assumed), and the GPU bandwidth and launch figures the catalog cites
(`gpu_bandwidth`, `gpu_overhead`); calibration
replaces them with fitted figures and records where they came from in `source`. Models are
registered by class name so a `DeviceProfile` JSON file can name any of them.

Where things live (every name below is importable from here):

- `device_profile.py`: the protocols, the registry, `DeviceProfile` and its JSON round trip;
- `gemm_models.py`: `GemmEfficiency`, `gemm_phase` (its per-phase key) and
  `FormatGemmEfficiency` (one fitted model per GEMM number format; a model offering
  `for_format(fmt)` is asked for the run's format by `predict.row_times`);
- `gpu_gemm.py`: `TileWaveGemmEfficiency`, the first-principles tile/wave quantization model
  catalog GPUs with an SM count get by default (`for_device`);
- `bandwidth.py`: `BandwidthEfficiency`, the fitted `CategoryBandwidthEfficiency`,
  `Overhead`;
- this module: the assumed defaults per device kind, `default_profile`, `load_profile`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path

from bertscope.hardware import Device, DeviceKind, NumberFormat, load_device
from bertscope.perf.bandwidth import (
    BandwidthEfficiency,
    CategoryBandwidthEfficiency,
    Overhead,
)
from bertscope.perf.device_profile import (
    ASSUMED,
    PROFILE_VERSION,
    DeviceProfile,
    EfficiencyModel,
    OverheadModel,
    device_to_dict,
    model_from_dict,
    read_profile_file,
    register_model,
)
from bertscope.perf.gemm_models import FormatGemmEfficiency, GemmEfficiency, gemm_phase
from bertscope.perf.gpu_gemm import TileWaveGemmEfficiency, for_device

# Assumed defaults per device kind, to be replaced by calibration. Rationale, not measurement:
# - GPU: large cuBLAS / rocBLAS GEMMs commonly run at 70-90% of the dense tensor peak; a
#   GEMM of ~0.25 GFLOP needs about 1 us at A100 bf16 peak to fill 100+ SMs; head-size-64
#   batched GEMMs reach well under half of peak. Streaming kernels reach ~85% of the HBM
#   datasheet figure; ~1 MiB in flight hides HBM latency. Eager PyTorch dispatches an op in
#   a few microseconds.
# - TPU: XLA compiles the step and fuses elementwise ops, so per-op overhead is small; the
#   128x128 MXUs favour dimensions of 128 and more.
# - CPU: BLAS reaches a lower share of peak; launches are plain calls.
_DEFAULTS: dict[DeviceKind, tuple[GemmEfficiency, BandwidthEfficiency, Overhead]] = {
    DeviceKind.GPU: (
        GemmEfficiency(max_fraction=0.85, half_saturation_flops=2.5e8, half_saturation_dim=32),
        BandwidthEfficiency(max_fraction=0.85, half_saturation_bytes=2**20),
        Overhead(seconds_per_launch=5e-6),
    ),
    DeviceKind.TPU: (
        GemmEfficiency(max_fraction=0.85, half_saturation_flops=2.5e8, half_saturation_dim=64),
        BandwidthEfficiency(max_fraction=0.85, half_saturation_bytes=2**20),
        Overhead(seconds_per_launch=1e-6),
    ),
    DeviceKind.CPU: (
        GemmEfficiency(max_fraction=0.7, half_saturation_flops=1e7, half_saturation_dim=16),
        BandwidthEfficiency(max_fraction=0.7, half_saturation_bytes=2**16),
        Overhead(seconds_per_launch=2e-6),
    ),
}


NVIDIA_LAUNCH_SECONDS = 3e-6
"""Launch floor of a kernel on an NVIDIA GPU: null kernels launch back to back in about 3 us
"with recent hardware and software" (NVIDIA Developer Forums, "Too much time for kernel
launch latency", 2022, reply 3, https://forums.developer.nvidia.com/t/233645/3)."""

_LAUNCH_SOURCE = ("3 us per launch: null-kernel launch overhead, NVIDIA Developer Forums "
                  "'Too much time for kernel launch latency' (2022), "
                  "https://forums.developer.nvidia.com/t/233645/3")


def gpu_bandwidth(device: Device) -> BandwidthEfficiency:
    """The saturating bandwidth model of a GPU from its cited figures: `max_fraction` = the
    measured streaming fraction (`Device.stream_bandwidth_fraction`), and the half-saturation
    bytes from Little's law, bytes in flight = achieved bandwidth x DRAM latency
    (`Device.dram_latency`): with time = (B + B0) / (bandwidth x max), B0 = max x bandwidth
    x latency makes a launch pay one DRAM latency before it streams. A figure the catalog
    does not cite keeps the assumed default (0.85, 1 MiB), and `source` says which is which."""
    assumed = _DEFAULTS[DeviceKind.GPU][1]
    top, why_top = assumed.max_fraction, f"max {assumed.max_fraction:g} ({ASSUMED})"
    if device.stream_bandwidth_fraction is not None:
        top = device.stream_bandwidth_fraction
        why_top = f"max {top:g} ({device.sources['stream_bandwidth_fraction']})"
    if device.dram_latency is None:
        half = assumed.half_saturation_bytes
        why_half = f"half-saturation {half:.0f} bytes ({ASSUMED})"
    else:
        half = top * device.memory_bandwidth * device.dram_latency
        why_half = (f"half-saturation {half:.0f} bytes = {top:g} x "
                    f"{device.memory_bandwidth / 1e9:g} GB/s x "
                    f"{device.dram_latency * 1e9:g} ns DRAM latency (Little's law; "
                    f"{device.sources['dram_latency']})")
    if device.stream_bandwidth_fraction is None and device.dram_latency is None:
        return assumed
    return BandwidthEfficiency(max_fraction=top, half_saturation_bytes=half,
                               source=f"{why_top}; {why_half}")


def gpu_overhead(device: Device) -> Overhead:
    """The launch floor of a GPU: the cited NVIDIA figure (`NVIDIA_LAUNCH_SECONDS`) for an
    NVIDIA GPU, the assumed default for others (no cited HIP launch figure)."""
    if device.vendor.strip().lower() == "nvidia":
        return Overhead(seconds_per_launch=NVIDIA_LAUNCH_SECONDS, source=_LAUNCH_SOURCE)
    return _DEFAULTS[DeviceKind.GPU][2]


class Provenance(StrEnum):
    """Where a figure of a prediction comes from."""

    CITED = "cited"
    """A published measurement the catalog cites (microbenchmark, vendor table)."""
    FITTED = "fitted"
    """Fitted by calibration from measured profiles or traces (the model's source says which)."""
    ASSUMED = "assumed"
    """An assumed default, neither cited nor fitted."""


@dataclass(frozen=True, slots=True)
class GemmCap:
    """The attainable fraction of a format's dense peak large library GEMMs reach on one
    device, and where it comes from."""

    fraction: float
    provenance: Provenance
    source: str
    """The citation (`Provenance.CITED`) or why it is assumed."""


def gemm_caps(device: Device) -> dict[NumberFormat, GemmCap]:
    """Per floating-point format the device has a peak for: the cited attainable large-GEMM
    fraction (`Device.gemm_fractions`, with its source) or, where the catalog cites none, the
    assumed default of the device's kind, marked `Provenance.ASSUMED`. int8 is left out (no
    training GEMMs run in it)."""
    top = _DEFAULTS[device.kind][0].max_fraction
    out: dict[NumberFormat, GemmCap] = {}
    for fmt in device.formats:
        if fmt is NumberFormat.INT8:
            continue
        if fmt in device.gemm_fractions:
            out[fmt] = GemmCap(device.gemm_fractions[fmt], Provenance.CITED,
                               device.sources[f"gemm_fractions.{fmt.value}"])
        else:
            out[fmt] = GemmCap(top, Provenance.ASSUMED,
                               f"{ASSUMED}: no published large-GEMM {fmt.value} rate cited for "
                               f"{device.name}")
    return out


def _cited_caps_gemm(device: Device, base: GemmEfficiency) -> FormatGemmEfficiency | None:
    """The saturating default of a device without an SM count (no tile/wave model) with the
    catalog's cited cap per format (`gemm_caps`; assumed where none is cited); None where the
    catalog cites no cap for the device at all."""
    caps = gemm_caps(device)
    if not any(c.provenance is Provenance.CITED for c in caps.values()):
        return None
    per_format = {fmt.value: replace(base, max_fraction=cap.fraction,
                                     source=cap.source if cap.provenance is Provenance.CITED
                                     else ASSUMED)
                  for fmt, cap in caps.items()}
    return FormatGemmEfficiency(per_format=per_format, default=next(iter(per_format)),
                                source="catalog caps per format (cited or assumed)")


def default_profile(device: Device) -> DeviceProfile:
    """The device with the default efficiency models of its kind: a GPU gets the bandwidth
    and launch models of its cited figures (`gpu_bandwidth`, `gpu_overhead`; assumed where
    the catalog cites none) and, with an SM/CU count, the first-principles tile/wave GEMM
    model (`gpu_gemm.for_device`); TPUs and CPUs the assumed defaults of their kind."""
    gemm, bandwidth, overhead = _DEFAULTS[device.kind]
    if device.kind is DeviceKind.GPU:
        bandwidth, overhead = gpu_bandwidth(device), gpu_overhead(device)
    shaped = for_device(device)
    cited = [name for name, model in (("bandwidth", bandwidth), ("overhead", overhead))
             if model.source != ASSUMED]
    rest = (f"bandwidth and overhead from cited figures ({', '.join(cited)}; "
            f"assumed where not cited)" if cited else "assumed default bandwidth and overhead")
    if shaped is not None:
        return DeviceProfile(device=device, gemm=shaped, bandwidth=bandwidth,
                             overhead=overhead,
                             notes=f"first-principles GEMM model (tile/wave quantization); {rest}")
    capped = _cited_caps_gemm(device, gemm)
    if capped is not None:
        return DeviceProfile(device=device, gemm=capped, bandwidth=bandwidth, overhead=overhead,
                             notes=f"default GEMM model for a {device.kind.value} with the "
                                   f"catalog's cited caps per format; {rest}")
    return DeviceProfile(device=device, gemm=gemm, bandwidth=bandwidth, overhead=overhead,
                         notes=f"assumed defaults for a {device.kind.value}" if not cited
                         else f"assumed default GEMM model for a {device.kind.value}; {rest}")


def load_profile(name_or_path: str | Path) -> DeviceProfile:
    """A profile from a catalog name (default models), a device file (.toml/.json, default
    models), or a profile JSON file written by `DeviceProfile.save`."""
    p = Path(str(name_or_path))
    if p.suffix.lower() == ".json" and p.is_file():
        profile = read_profile_file(p)
        if profile is not None:
            return profile
    return default_profile(load_device(name_or_path))


__all__ = [
    "ASSUMED",
    "NVIDIA_LAUNCH_SECONDS",
    "PROFILE_VERSION",
    "BandwidthEfficiency",
    "CategoryBandwidthEfficiency",
    "DeviceProfile",
    "EfficiencyModel",
    "GemmCap",
    "GemmEfficiency",
    "Overhead",
    "OverheadModel",
    "Provenance",
    "TileWaveGemmEfficiency",
    "default_profile",
    "device_to_dict",
    "gemm_caps",
    "gemm_phase",
    "gpu_bandwidth",
    "gpu_overhead",
    "load_profile",
    "model_from_dict",
    "register_model",
]
