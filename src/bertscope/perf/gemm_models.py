"""GEMM efficiency: the fraction of the tensor-unit peak a GEMM row reaches.

`GemmEfficiency` is both the assumed default of every device kind and what calibration fits
(`calibrate.fit_gemm`, one factor per phase on top). Its per-phase factors are keyed by
`gemm_phase`, which `Phase.family` decides: every phase of the forward family (forward and
recompute, the same kernels on the same shapes) shares the key "forward"; backward phases keep
their own (a data gradient and a weight gradient run at different rates).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from bertscope.errors import BertscopeError, is_positive_number
from bertscope.optable import bytes_moved
from bertscope.perf.device_profile import (
    ASSUMED,
    ModelBase,
    model_from_dict,
    per_launch,
    register_model,
    saturating,
)
from bertscope.taxonomy import PhaseFamily, phase_families

if TYPE_CHECKING:
    import pandas as pd


def gemm_phase(phase: Any) -> np.ndarray:
    """Per row: the key of a GEMM's per-phase factor (object array of str): "forward" for the
    forward family (recompute included), the phase itself otherwise (backward_data,
    backward_weight, backward)."""
    families = phase_families(phase)
    arr = np.asarray(phase, dtype=object)
    phases = np.array([str(p) for p in arr.ravel()], dtype=object).reshape(arr.shape)
    return np.where(families == PhaseFamily.FORWARD.value, families, phases)


def _phase_factors(factors: Mapping[str, float], phase: Any) -> np.ndarray:
    """Per row: the factor of its GEMM phase key (`gemm_phase`), 1 where none is listed."""
    keys = gemm_phase(phase)
    return np.array([float(factors.get(k, 1.0)) for k in keys.ravel()],
                    dtype=float).reshape(keys.shape)


@register_model
@dataclass(kw_only=True, frozen=True, slots=True)
class GemmEfficiency(ModelBase):
    """GEMM fraction of the tensor-unit peak, a saturating function of size and shape:

        time = W / (peak x max x S) + W0 / (peak x max),   S = D / (D + D0)
        fraction = W / (peak x time) = max x S x W / (W + W0 x S)

    with W the FLOPs of one launch (a batched GEMM is one launch), W0 =
    `half_saturation_flops`, D = min(M, N, K) and D0 = `half_saturation_dim`. The W0 term is
    a fixed fill/drain cost per launch (W0 FLOPs' worth of time at the large-GEMM rate); the
    shape term S slows the streaming part of a thin GEMM (head size 64, a 2-class
    classifier) against a square one of the same work, not its fixed cost. (Multiplying the
    two saturations instead would make a 2-wide GEMM pay its shape penalty on the fill/drain
    time too: a tiny classifier GEMM then costs (D + D0) / D times W0, hundreds of times its
    launch cost.) Either term alone is the plain saturating form: S = 1 gives
    max x W / (W + W0), W0 = 0 gives max x S. No tile or wave quantization: a smooth default
    that calibration can replace.
    `per_phase` scales the fraction of one phase's GEMMs (capped at 1): the same shape runs
    at different rates as a forward addmm (bias folded in), a data gradient or a weight
    gradient (a transposed operand). `beyond_cache` scales, per phase again, the GEMMs
    that move more than `cache_bytes` per launch (operands and output beyond the last-level
    cache stream from memory: a CPU's fp32 MLM decoder, 30522 wide, ran at 0.6-0.7 of the
    rate of the same phase's layer GEMMs in bench/results/validate_cpu_r13 at d715217).
    """

    max_fraction: float
    """Fraction of peak that large, square GEMMs reach."""
    half_saturation_flops: float
    """FLOPs per launch at which the size term is 1/2 (0: no size penalty)."""
    half_saturation_dim: float = 0.0
    """Smallest GEMM dimension at which the shape term is 1/2 (0: no shape penalty)."""
    per_phase: dict[str, float] = field(default_factory=dict)
    """GEMM phase key (`gemm_phase`: forward, which covers recompute; backward_data;
    backward_weight; backward) -> factor on the fraction; phases not listed get 1."""
    batched: float = 1.0
    """Factor on the fraction of batched GEMMs (batch > 1: attention's score and context
    products), capped at 1 as `per_phase` is: many small products in one launch do not run
    at one GEMM's rate for their shape (a CPU's bf16 batched products ran 3-4x below the
    rate fitted to its linears: bench/results/validate_cpu_r9 at d715217)."""
    cache_bytes: float = 0.0
    """Last-level cache of the calibrated device in bytes: GEMMs moving more per launch take
    the `beyond_cache` factors (0: no such split)."""
    beyond_cache: dict[str, float] = field(default_factory=dict)
    """GEMM phase key -> factor on the fraction (after `per_phase`, capped at 1) of that
    phase's GEMMs that move more than `cache_bytes` per launch; phases not listed get 1."""
    source: str = ASSUMED
    """Where the figures come from: "assumed default", or a calibration run."""

    _bounds: ClassVar[dict[str, tuple[float, float]]] = {
        "max_fraction": (1e-6, 1.0), "half_saturation_flops": (0.0, 1e18),
        "half_saturation_dim": (0.0, 1e9), "batched": (1e-3, 1e3), "cache_bytes": (0.0, 1e15)}

    def __post_init__(self) -> None:
        self._check()
        for name in ("per_phase", "beyond_cache"):
            factors = getattr(self, name)
            if not isinstance(factors, Mapping):
                raise BertscopeError(f"GemmEfficiency.{name}: expected an object of phase -> "
                                     f"factor, got {type(factors).__name__}")
            for phase, factor in factors.items():
                if not (is_positive_number(factor) and float(factor) <= 1e3):
                    raise BertscopeError(f"GemmEfficiency.{name}[{phase!r}] must be a number "
                                         f"in (0, 1000], got {factor!r}")

    def __hash__(self) -> int:
        return self._hash()

    def to_dict(self) -> dict[str, Any]:
        """Fields plus `"model"` (the cache split only where it has factors)."""
        out = ModelBase.to_dict(self)
        if not self.beyond_cache:
            out.pop("beyond_cache")
            out.pop("cache_bytes")
        return out

    def fraction(self, rows: Mapping[str, Any] | pd.DataFrame) -> np.ndarray:
        """Fraction of peak per row (rows without FLOPs get 1; they take no compute time)."""
        w = per_launch(rows, "flops")
        m, n, k = (np.asarray(rows[c], dtype=float) for c in "mnk")
        smallest = np.minimum(np.minimum(m, n), k)  # columns may broadcast (a sweep's)
        d = np.where(smallest > 0, smallest, 1.0)
        shape = saturating(d, self.half_saturation_dim)
        work = w * shape  # (the rows with no FLOPs get 1 below)
        f = self.max_fraction * np.divide(
            work, w + self.half_saturation_flops * shape, out=np.ones_like(work),
            where=work > 0)
        if self.per_phase and "phase" in rows:
            f = np.minimum(1.0, f * _phase_factors(self.per_phase, rows["phase"]))
        if self.beyond_cache and self.cache_bytes > 0 and "phase" in rows:
            beyond = per_launch(rows, bytes_moved(rows)) > self.cache_bytes
            f = np.where(beyond, np.minimum(
                1.0, f * _phase_factors(self.beyond_cache, rows["phase"])), f)
        if self.batched != 1.0 and "batch" in rows:
            batched = np.asarray(rows["batch"], dtype=float) > 1
            f = np.where(batched, np.minimum(1.0, f * self.batched), f)
        return np.where(w > 0, f, 1.0)


@register_model
@dataclass(kw_only=True, frozen=True, slots=True)
class FormatGemmEfficiency(ModelBase):
    """One fitted `GemmEfficiency` per GEMM number format (calibration from measured tables
    or traces: a bf16 GEMM's shape of efficiency differs from an fp32 one's); `for_format`
    gives the model of a run's GEMM format (`predict.row_times` asks). A format nothing
    measured is never priced silently with another format's fit (an fp32 fit at the bf16
    peak predicted a held-out bf16 CPU run at +229%, issue 31): it gets the `fallback` model
    (the catalog's figures of a catalog device, named so in the provenance line) or, with no
    fallback, a one-line error saying what to measure (`NotCalibrated`)."""

    per_format: dict[str, Any]
    """Number format -> `GemmEfficiency` (or its `to_dict()` form, as read from a file)."""
    default: str
    """The format `fraction` (a caller that names no format) reads."""
    source: str = "fitted"
    """Where the figures come from."""
    fallback: Any = None
    """The model for formats not in `per_format` (a catalog device's default GEMM model, or
    its `to_dict()` form), or None: such a format is refused (`for_format`)."""
    inputs: tuple[str, ...] = ()
    """What the fits were made from (the profile results' config names), for the refusal's
    fix."""

    def __post_init__(self) -> None:
        self._check()
        if not isinstance(self.per_format, Mapping) or not self.per_format:
            raise BertscopeError("FormatGemmEfficiency.per_format: expected an object of "
                                 "number format -> GemmEfficiency")
        models = {}
        for fmt, m in self.per_format.items():
            if isinstance(m, Mapping):
                m = model_from_dict(dict(m), where=f"FormatGemmEfficiency.per_format[{fmt!r}]")
            if not isinstance(m, GemmEfficiency):
                raise BertscopeError(f"FormatGemmEfficiency.per_format[{fmt!r}] must be a "
                                     f"GemmEfficiency, got {type(m).__name__}")
            models[str(fmt)] = m
        if self.default not in models:
            raise BertscopeError(f"FormatGemmEfficiency.default {self.default!r} is not one of "
                                 f"the fitted formats ({', '.join(models)})")
        object.__setattr__(self, "per_format", models)
        fallback = self.fallback
        if isinstance(fallback, Mapping):
            fallback = model_from_dict(dict(fallback), where="FormatGemmEfficiency.fallback")
        if fallback is not None and not callable(getattr(fallback, "fraction", None)):
            raise BertscopeError(f"FormatGemmEfficiency.fallback must be a GEMM efficiency "
                                 f"model or null, got {type(fallback).__name__}")
        object.__setattr__(self, "fallback", fallback)
        if not isinstance(self.inputs, tuple | list) or not all(
                isinstance(i, str) for i in self.inputs):
            raise BertscopeError("FormatGemmEfficiency.inputs must be a list of names")
        object.__setattr__(self, "inputs", tuple(self.inputs))

    def __hash__(self) -> int:
        return self._hash()

    def to_dict(self) -> dict[str, Any]:
        """Fields (each format's model in its own `to_dict()` form) plus `"model"`."""
        out: dict[str, Any] = {
            "model": type(self).__name__, "default": self.default, "source": self.source,
            "per_format": {f: m.to_dict() for f, m in self.per_format.items()}}
        if self.fallback is not None:
            out["fallback"] = self.fallback.to_dict()
        if self.inputs:
            out["inputs"] = list(self.inputs)
        return out

    def calibrated(self, fmt: Any) -> bool:
        """Whether `fmt`'s GEMMs were fitted (measured), not left to the fallback."""
        return str(fmt) in self.per_format

    def for_format(self, fmt: Any) -> Any:
        """The model fitted for `fmt`; else the fallback's (the catalog's figures, which the
        prediction's provenance line calls cited or assumed); else `NotCalibrated` (one line:
        what to run)."""
        model = self.per_format.get(str(fmt))
        if model is not None:
            return model
        if self.fallback is None:
            raise NotCalibrated(not_calibrated_line(str(fmt), self))
        # the catalog's model as it is: the prediction's provenance line then names its
        # figures cited or assumed, not fitted (`predict.provenance` compares with it)
        pick = getattr(self.fallback, "for_format", None)
        return self.fallback if pick is None else pick(fmt)

    def fraction(self, rows: Mapping[str, Any] | pd.DataFrame) -> np.ndarray:
        """The default format's fractions (`for_format` picks a run's own)."""
        return self.per_format[self.default].fraction(rows)


class NotCalibrated(BertscopeError):
    """A profile fitted from measurements was asked for a GEMM format none of them ran."""


def not_calibrated_line(fmt: str, model: FormatGemmEfficiency) -> str:
    """One line: `fmt` GEMMs are not calibrated on the profile (which formats are, from
    what) and the commands that would calibrate them."""
    fitted = ", ".join(model.per_format)
    what = f" of {', '.join(model.inputs)}" if model.inputs else ""
    return (f"{fmt} is not calibrated on this profile (its GEMM rates were fitted on {fitted} "
            f"runs{what}; another format's fit at the {fmt} peak is no prediction): run "
            f"`bertscope profile MODEL --precision {fmt} --batch B --seq S --output "
            f"{fmt}.json`, then `bertscope calibrate --from <the same results> --from "
            f"{fmt}.json`; or predict on a catalog device (--device cpu)")


__all__ = ["FormatGemmEfficiency", "GemmEfficiency", "NotCalibrated", "gemm_phase",
           "not_calibrated_line"]
