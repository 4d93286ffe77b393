"""Bandwidth and launch-overhead models: what bounds the rows the tensor units do not.

- `BandwidthEfficiency`: one saturating fraction of peak bandwidth for every row (the assumed
  default of every device kind, and what microbenchmark calibration fits);
- `CategoryBandwidthEfficiency`: its fitted kin, one (max, half-saturation) pair per category
  of memory-bound op and optionally per phase family (`Phase.family`: recompute rows take the
  forward entries) and per tensor format (`for_format`, `tensor_formats`: a CPU's bf16 loss
  kernels upcast to fp32 and run at another rate than its fp32 ones), as fitted from
  measured op tables (`calibrate.fit_memory`);
- `Overhead`: a fixed launch floor per execution, plus host time nothing overlaps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from bertscope.errors import BertscopeError, is_positive_number, parse_enum
from bertscope.hardware import NumberFormat
from bertscope.optable import bytes_moved
from bertscope.perf.device_profile import (
    ASSUMED,
    ModelBase,
    per_launch,
    register_model,
    saturating,
)
from bertscope.taxonomy import Issuer, PhaseFamily, gemm_mask, phase_families

if TYPE_CHECKING:
    import pandas as pd

_FORMATS = frozenset(f.value for f in NumberFormat)


@register_model
@dataclass(kw_only=True, frozen=True, slots=True)
class BandwidthEfficiency(ModelBase):
    """Achieved fraction of peak memory bandwidth, saturating in the bytes one launch moves:

        fraction = max_fraction x B / (B + half_saturation_bytes)

    so time = (B + B0) / (bandwidth x max): a launch pays the time to fill the memory pipeline
    (Little's law: bytes in flight = bandwidth x latency) before it streams at full rate.
    """

    max_fraction: float
    """Fraction of the datasheet bandwidth that large streaming kernels reach."""
    half_saturation_bytes: float
    """Bytes per launch at which half of `max_fraction` is reached (0: no size penalty)."""
    source: str = ASSUMED
    """Where the figures come from: "assumed default", or a calibration run."""

    _bounds: ClassVar[dict[str, tuple[float, float]]] = {
        "max_fraction": (1e-6, 1.0), "half_saturation_bytes": (0.0, 1e15)}

    def __post_init__(self) -> None:
        self._check()

    def fraction(self, rows: Mapping[str, Any] | pd.DataFrame) -> np.ndarray:
        """Fraction of peak bandwidth per row (rows moving no bytes get 1)."""
        b = per_launch(rows, bytes_moved(rows))
        return np.where(b > 0, self.max_fraction * saturating(b, self.half_saturation_bytes),
                        1.0)


@register_model
@dataclass(kw_only=True, frozen=True, slots=True)
class CategoryBandwidthEfficiency(ModelBase):
    """`BandwidthEfficiency` with its own (max_fraction, half_saturation_bytes) per category
    of memory-bound op, as fitted from measured op tables; categories not listed use the
    defaults. GEMM rows get `gemm_fraction` (their time is the GEMM model's business).

    Keys are "category[@family][#format]". A key with a format applies to rows whose
    tensors are in that format (`tensor_formats` of the run's activation format, which
    `for_format` sets and `predict.row_times` asks for); a model with no activation format
    set ignores such keys."""

    per_category: dict[str, list[float]] = field(default_factory=dict)
    """category (or "category@phase family": forward, which covers recompute; backward;
    optimizer; either with "#format", e.g. "loss@backward#bf16") -> [max_fraction,
    half_saturation_bytes]; the phase-specific entry wins over the category's, so a row of
    format f takes cat@fam#f, else cat@fam, else cat#f, else cat, else the defaults."""
    max_fraction: float = 1.0
    """Default for categories not listed."""
    half_saturation_bytes: float = 0.0
    """Default for categories not listed."""
    gemm_fraction: float = 1.0
    """Bandwidth fraction of GEMM rows."""
    source: str = "fitted"
    """Where the figures come from."""
    activation_format: str = ""
    """The run's activation format the "#format" keys are read for ("": none, those keys
    ignored); set by `for_format`, left out of `to_dict` when empty."""

    _bounds: ClassVar[dict[str, tuple[float, float]]] = {
        "max_fraction": (1e-9, 1.0), "half_saturation_bytes": (0.0, 1e15),
        "gemm_fraction": (1e-9, 1.0)}

    def __post_init__(self) -> None:
        self._check()
        if not isinstance(self.per_category, Mapping):
            raise BertscopeError(f"CategoryBandwidthEfficiency.per_category: expected an "
                                 f"object of category -> [max_fraction, half_saturation_bytes], "
                                 f"got {type(self.per_category).__name__}")
        for cat, pair in self.per_category.items():
            ok = (isinstance(pair, list | tuple) and len(pair) == 2
                  and is_positive_number(pair[0]) and pair[0] <= 1
                  and (is_positive_number(pair[1]) or pair[1] == 0))
            if not ok:
                raise BertscopeError(f"CategoryBandwidthEfficiency: {cat}: expected "
                                     f"[max_fraction in (0, 1], half_saturation_bytes >= 0], "
                                     f"got {pair!r}")
            fmt = str(cat).partition("#")[2]
            if "#" in str(cat) and fmt not in _FORMATS:
                raise BertscopeError(f"CategoryBandwidthEfficiency: {cat}: unknown number "
                                     f"format {fmt!r} after '#'; formats are "
                                     f"{', '.join(sorted(_FORMATS))}")
        if self.activation_format and self.activation_format not in _FORMATS:
            raise BertscopeError(f"CategoryBandwidthEfficiency.activation_format: unknown "
                                 f"number format {self.activation_format!r}; formats are "
                                 f"{', '.join(sorted(_FORMATS))}")

    def to_dict(self) -> dict[str, Any]:
        """Fields plus `"model"` (`activation_format` only when set)."""
        out = ModelBase.to_dict(self)
        if not self.activation_format:
            out.pop("activation_format")
        return out

    def for_format(self, fmt: NumberFormat | str | None) -> CategoryBandwidthEfficiency:
        """The model for a run of activation format `fmt` (its "#format" keys read for the
        rows' `tensor_formats`); itself where it has no format keys."""
        if not any("#" in k for k in self.per_category):
            return self
        fmt = None if fmt is None else parse_enum(NumberFormat, str(getattr(fmt, "value", fmt)),
                                                  "activation format")
        return replace(self, activation_format="" if fmt is None else fmt.value)

    def __hash__(self) -> int:
        return self._hash()

    def fraction(self, rows: Mapping[str, Any] | pd.DataFrame) -> np.ndarray:
        """Fraction of peak bandwidth per row (rows moving no bytes get 1)."""
        b = per_launch(rows, bytes_moved(rows))
        raw = np.asarray(rows["category"], dtype=object)
        cats = np.array([str(c) for c in raw.ravel()], dtype=object).reshape(raw.shape)
        fam = phase_families(rows["phase"]) if "phase" in rows else np.full(cats.shape, "")
        keyed = cats + "@" + fam
        fmt = tensor_formats(fam, self.activation_format) if self.activation_format else None
        top = np.full(cats.shape, self.max_fraction, dtype=float)
        half = np.full(cats.shape, self.half_saturation_bytes, dtype=float)
        # least specific first: category, category#format, category@family, then both
        for key, (mx, h) in sorted(self.per_category.items(),
                                   key=lambda kv: ("@" in kv[0], "#" in kv[0])):
            base, _, f = key.partition("#")
            if f and fmt is None:
                continue
            sel = (keyed == base) if "@" in base else (cats == base)
            if f:
                sel = sel & (fmt == f)
            top[sel], half[sel] = float(mx), float(h)
        f = top * np.where(half > 0, b / np.maximum(b + half, 1e-300), 1.0)
        f = np.where(gemm_mask(cats), self.gemm_fraction, f)
        return np.where(b > 0, f, 1.0)


def tensor_formats(families: Any, activation_format: NumberFormat | str) -> np.ndarray:
    """Per row, the number format a memory-bound row's tensors are in, given its phase
    family (`phase_families`) and the run's activation format: that format, except rows of
    the optimizer phase, which update fp32 master weights and fp32 optimizer states in any
    precision (mixed precision keeps them in fp32; `config.Precision`)."""
    fmt = NumberFormat(activation_format).value
    fam = np.asarray(families, dtype=object)
    return np.where(fam == PhaseFamily.OPTIMIZER.value, NumberFormat.FP32.value,
                    fmt).astype(object)


@register_model
@dataclass(kw_only=True, frozen=True, slots=True)
class Overhead(ModelBase):
    """A fixed cost per launch: `count` executions of a row cost count x seconds_per_launch.

    It is a floor, not an addition (time = max(compute, memory, overhead)): the host
    dispatches the next kernel while the device runs the current one, so an op costs its
    launch time only when that exceeds its device time (eager PyTorch on small ops). Host
    work that nothing overlaps (a CPU runs the framework and the ops one after the other) is
    the separate, additive `host_seconds_per_launch`; calibration fits it from the gap
    between measured iterations and the sum of their ops."""

    seconds_per_launch: float
    """Seconds per kernel launch (host dispatch plus launch latency)."""
    host_seconds_per_launch: float = 0.0
    """Host time per launch that *adds* to the op's time: the eager framework's work between
    ops (Python, module hooks, the autograd engine, a profiler's bookkeeping) where nothing
    overlaps it, as on a CPU, which runs both. 0 where the host runs ahead of the device."""
    source: str = ASSUMED
    """Where the figures come from: "assumed default", or a calibration run."""

    _bounds: ClassVar[dict[str, tuple[float, float]]] = {
        "seconds_per_launch": (0.0, 1.0), "host_seconds_per_launch": (0.0, 1.0)}

    def __post_init__(self) -> None:
        self._check()

    def seconds(self, rows: Mapping[str, Any] | pd.DataFrame) -> np.ndarray:
        """count x seconds_per_launch per row."""
        return np.asarray(rows["count"], dtype=float) * self.seconds_per_launch

    def host_seconds(self, rows: Mapping[str, Any] | pd.DataFrame) -> np.ndarray:
        """count x host_seconds_per_launch per row the framework issues (`framework_launches`:
        not autocast's casts, which run inside another op's dispatch)."""
        return framework_launches(rows) * self.host_seconds_per_launch


def framework_launches(rows: Mapping[str, Any] | pd.DataFrame) -> np.ndarray:
    """Launches per row that framework code issues: `count`, 0 for rows autocast issues
    inside another op (`Issuer.AUTOCAST`); rows without an issuer column count whole."""
    count = np.asarray(rows["count"], dtype=float)
    if "issuer" not in rows:
        return count
    return count * (np.asarray(rows["issuer"], dtype=object) != Issuer.AUTOCAST)


__all__ = ["BandwidthEfficiency", "CategoryBandwidthEfficiency", "Overhead", "framework_launches",
           "tensor_formats"]
