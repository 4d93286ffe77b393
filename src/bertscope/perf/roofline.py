"""The roofline bound of each op-table row, and which peak each row is held to.

    roofline_s = max(flops / peak, (bytes_read + bytes_written) / bandwidth)

(Williams, Waterman and Patterson, Roofline: An Insightful Visual Performance Model for
Multicore Architectures, CACM 52(4), 2009.) The peak depends on the row:

- GEMM and batched-GEMM rows run on the tensor / matrix units in the run's precision: fp32
  runs use the fp32 peak (PyTorch does not use TF32 for matmuls by default since 1.12:
  `torch.backends.cuda.matmul.allow_tf32 = False`), tf32 runs (that flag on) the tf32 peak,
  fp16/bf16 runs that format's peak. fp8 runs hold linear layers' GEMMs (category GEMM) to
  the fp8 peak and attention's batched GEMMs, which stay bf16 (`analytic/fp8.py`), to the
  bf16 peak.
- Every other row (softmax, layernorm, GELU, optimizer...) runs on the vector units in fp32
  arithmetic, so it uses the fp32 peak.

A run's GEMMs are priced only at its own format's peak (`run_format`): a device without it
(bf16 or tf32 on a V100, fp16 or fp32 on a TPU, fp8 before Hopper) refuses the run in one
line naming the formats it has and the precision to pass instead, never pricing it at
another format's peak. The one stand-in left is for the vector rate: TPUs publish no
vector-unit rate, so other rows are held to the GEMM format's peak (they are memory-bound at
any plausible one) and the prediction notes it. `study_format` is the study's per-device
choice: its "16-bit" column runs bf16 where a device has it and fp16 where it does not.
A chip with no floating-point peak at all (TPU v1: int8 only) cannot train; that raises.
Communication rows are held to the interconnect bandwidth (NaN where the device has none).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from bertscope.config import Precision
from bertscope.errors import BertscopeError, parse_enum
from bertscope.hardware import Device, NumberFormat
from bertscope.optable import bytes_moved, is_frame
from bertscope.taxonomy import Category, gemm_mask

if TYPE_CHECKING:
    import pandas as pd

F = NumberFormat
_GEMM_FORMAT: dict[Precision, NumberFormat] = {
    Precision.FP32: F.FP32, Precision.TF32: F.TF32, Precision.BF16: F.BF16,
    Precision.FP16: F.FP16, Precision.FP8: F.FP8,
}
_ACTIVATION_FORMATS: dict[Precision, NumberFormat] = {
    Precision.FP32: F.FP32, Precision.TF32: F.FP32, Precision.BF16: F.BF16,
    Precision.FP16: F.FP16, Precision.FP8: F.BF16,  # fp8 runs keep bf16 activations
}
_INSTEAD: dict[Precision, tuple[Precision, ...]] = {  # what to suggest, nearest first
    Precision.FP32: (Precision.BF16, Precision.FP16),
    Precision.TF32: (Precision.FP32, Precision.BF16, Precision.FP16),
    Precision.BF16: (Precision.FP16, Precision.FP32),
    Precision.FP16: (Precision.BF16, Precision.FP32),
    Precision.FP8: (Precision.BF16, Precision.FP16),
}
_SIXTEEN = (Precision.BF16, Precision.FP16)
"""The 16-bit formats, either of which a study's "16-bit" column runs."""


def run_format(device: Device, precision: Precision | str) -> NumberFormat:
    """The GEMM format a run in `precision` uses on `device`: always the precision's own
    (fp32 -> fp32, tf32 -> tf32, bf16 -> bf16, fp16 -> fp16, fp8 -> fp8). A device without a
    peak for it raises `BertscopeError` in one line ("v100-sxm2-32gb has no bf16 (it has
    fp32, fp16); pass --precision fp16"): no run is priced at another format's peak."""
    prec = parse_enum(Precision, precision, "precision")
    fmt = _GEMM_FORMAT[prec]
    if device.has(fmt):
        return fmt
    formats = ", ".join(f.value for f in device.formats)
    instead = next((p for p in _INSTEAD[prec] if device.has(_GEMM_FORMAT[p])), None)
    if instead is None:
        raise BertscopeError(f"{device.name} has no floating-point peak (it has {formats}); "
                             f"it cannot run training: pick another --device")
    raise BertscopeError(f"{device.name} has no {fmt.value} (it has {formats}); pass "
                         f"--precision {instead.value}")


def study_format(device: Device, precision: Precision | str) -> Precision | None:
    """The precision a study runs on `device` for its column `precision`: a 16-bit column
    (bf16 or fp16) runs the named format where the device has it and the other 16-bit format
    where it does not (fp16 on a V100, bf16 on a TPU); any other column runs its own format.
    None: the device has neither (the column is skipped there, with a note)."""
    prec = parse_enum(Precision, precision, "precision")
    order = ((prec, *(p for p in _SIXTEEN if p is not prec)) if prec in _SIXTEEN
             else (prec,))
    return next((p for p in order if device.has(_GEMM_FORMAT[p])), None)


@dataclass(frozen=True, slots=True)
class Peaks:
    """The peaks a prediction holds rows to, with the formats they are for."""

    gemm_format: NumberFormat
    gemm_flops: float
    """FLOP/s of GEMM rows."""
    vector_format: NumberFormat
    vector_flops: float
    """FLOP/s of every other row."""
    bandwidth: float
    """Device-memory bytes/s."""
    interconnect: float | None
    """Link bytes/s for communication rows (None: not published)."""
    notes: tuple[str, ...] = field(default=())
    """Stand-ins used (a TPU's vector rows at the GEMM format's peak) and what-if knobs."""
    batched_gemm_flops: float | None = None
    """FLOP/s of batched-GEMM rows where it differs from `gemm_flops` (fp8 runs: attention's
    batched GEMMs stay bf16); None: the same."""
    activation_format: NumberFormat | None = None
    """The format the run's activations are stored in (`activation_format`): bandwidth
    models fitted per format read it (`predict.bandwidth_for`); None: not known."""
    batched_gemm_format: NumberFormat | None = None
    """The format batched-GEMM rows run in where it differs from `gemm_format` (fp8 runs:
    bf16, Transformer Engine's fp8 covers the linear layers only): their peak
    (`batched_gemm_flops`) and the GEMM model's attainable fraction are that format's
    (`predict.row_times`); None: the same."""


def activation_format(precision: Precision | str) -> NumberFormat:
    """The number format a run's activations (and so its memory-bound ops' tensors) are
    stored in: fp32 for fp32 and tf32 (TF32 changes the GEMM rate only), the 16-bit format
    of fp16 and bf16 mixed precision, bf16 for fp8 runs (`analytic/fp8.py`: only the linear
    GEMMs' inputs are fp8)."""
    return _ACTIVATION_FORMATS[parse_enum(Precision, precision, "precision")]


@dataclass(frozen=True, slots=True)
class Knobs:
    """Hardware what-ifs: multipliers of a device's figures (1 = as published). The GEMM knob
    scales the peak GEMM rows are held to (not the vector rate), the bandwidth knob device
    memory bandwidth, the overhead knob the per-launch floor and host time, the memory knob
    the capacity a configuration must fit in."""

    gemm_peak: float = 1.0
    bandwidth: float = 1.0
    overhead: float = 1.0
    memory: float = 1.0

    def __post_init__(self) -> None:
        for name in ("gemm_peak", "bandwidth", "overhead", "memory"):
            v = getattr(self, name)
            ok = (isinstance(v, int | float) and not isinstance(v, bool)
                  and np.isfinite(v) and 0 < v <= 1e6)
            if not ok:
                raise BertscopeError(f"knob {name} must be a multiplier in (0, 1e6], got {v!r}")

    @property
    def is_identity(self) -> bool:
        """Whether every knob is 1 (the device as published)."""
        return (self.gemm_peak, self.bandwidth, self.overhead, self.memory) == (1, 1, 1, 1)

    def apply(self, peaks: Peaks) -> Peaks:
        """`peaks` with the GEMM peak and the bandwidth scaled (noted when not 1)."""
        if self.gemm_peak == 1 and self.bandwidth == 1:
            return peaks
        note = f"what-if: GEMM peak x{self.gemm_peak:g}, bandwidth x{self.bandwidth:g}"
        batched = (None if peaks.batched_gemm_flops is None
                   else peaks.batched_gemm_flops * self.gemm_peak)
        return replace(peaks, gemm_flops=peaks.gemm_flops * self.gemm_peak,
                       batched_gemm_flops=batched,
                       bandwidth=peaks.bandwidth * self.bandwidth,
                       notes=(*peaks.notes, note))


def select_peaks(device: Device, precision: Precision | str,
                 gemm_format: NumberFormat | str | None = None) -> Peaks:
    """The peaks for a run in `precision` on `device` (its GEMMs in the precision's own
    format, `run_format`: a device without it raises). `gemm_format` forces the GEMM format
    (e.g. "tf32" for a run with `allow_tf32 = True`); it must be one the device has."""
    prec = parse_enum(Precision, precision, "precision")
    notes: list[str] = []
    if gemm_format is not None:
        gemm = device.peak_flops(gemm_format)  # raises naming the formats the device has
        g = NumberFormat(str(gemm_format).lower())
    else:
        g = run_format(device, prec)  # raises where the device lacks the format
        gemm = device.peak_flops(g)
    if device.has(F.FP32):
        v, vector = F.FP32, device.peak_flops(F.FP32)
    else:
        v, vector = g, gemm
        notes.append(f"other ops at the {g.value} peak: no published fp32 vector rate")
    batched, batched_format = None, None
    if prec is Precision.FP8 and gemm_format is None:  # attention's batched GEMMs stay bf16
        sixteen = study_format(device, Precision.BF16)
        batched = device.peak_flops(_GEMM_FORMAT[sixteen]) if sixteen else gemm
        batched_format = _GEMM_FORMAT[sixteen] if sixteen else None
    return Peaks(gemm_format=g, gemm_flops=gemm, vector_format=v, vector_flops=vector,
                 bandwidth=device.memory_bandwidth, interconnect=device.interconnect_bandwidth,
                 notes=tuple(notes), batched_gemm_flops=batched,
                 activation_format=_ACTIVATION_FORMATS[prec],
                 batched_gemm_format=batched_format)


def row_peaks(rows: Mapping[str, Any] | pd.DataFrame,
              peaks: Peaks) -> tuple[np.ndarray, np.ndarray]:
    """Per row: (FLOP/s peak, bytes/s peak) the row is held to. `rows`: op-table columns
    (`OpTable.columns`, a DataFrame, any mapping of name -> array)."""
    cat = np.asarray(rows["category"], dtype=object)
    gemm = gemm_mask(cat)
    flops_peak = np.where(gemm, peaks.gemm_flops, peaks.vector_flops)
    if peaks.batched_gemm_flops is not None:
        flops_peak = np.where(cat == Category.BATCHED_GEMM, peaks.batched_gemm_flops,
                              flops_peak)
    comm = cat == Category.COMMUNICATION
    link = peaks.interconnect if peaks.interconnect is not None else np.nan
    bytes_peak = np.where(comm, link, peaks.bandwidth)
    return flops_peak.astype(float), bytes_peak.astype(float)


def roofline(rows: Mapping[str, Any] | pd.DataFrame,
             peaks: Peaks) -> dict[str, np.ndarray] | pd.DataFrame:
    """Per row: compute_s = flops / peak, memory_s = bytes / bandwidth, and their max,
    roofline_s (the fastest the row could possibly run). A dict of arrays for columns; a
    DataFrame (with the rows' index) for a DataFrame."""
    flops_peak, bytes_peak = row_peaks(rows, peaks)
    compute = np.asarray(rows["flops"], dtype=float) / flops_peak
    memory = bytes_moved(rows) / bytes_peak
    out = {"compute_s": compute, "memory_s": memory, "roofline_s": np.maximum(compute, memory)}
    if is_frame(rows):
        import pandas as pd

        return pd.DataFrame(out, index=rows.index)
    return out


__all__ = ["Knobs", "Peaks", "activation_format", "roofline", "row_peaks", "run_format",
           "select_peaks", "study_format"]
