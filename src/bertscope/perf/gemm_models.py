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
from bertscope.perf.device_profile import (
    ASSUMED,
    ModelBase,
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


@register_model
@dataclass(kw_only=True, frozen=True, slots=True)
class GemmEfficiency(ModelBase):
    """GEMM fraction of the tensor-unit peak, a saturating function of size and shape:

        fraction = max_fraction x W / (W + half_saturation_flops) x D / (D + half_saturation_dim)

    with W the FLOPs of one launch (a batched GEMM is one launch) and D = min(M, N, K). The W
    term makes small GEMMs pay a fixed fill/drain cost (time = (W + W0) / (peak x max)); the D
    term makes thin GEMMs (head size 64, a 2-class classifier) slower than square ones of the
    same work. No tile or wave quantization: a smooth default that calibration can replace.
    `per_phase` scales the fraction of one phase's GEMMs (capped at 1): the same shape runs
    at different rates as a forward addmm (bias folded in), a data gradient or a weight
    gradient (a transposed operand).
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
    source: str = ASSUMED
    """Where the figures come from: "assumed default", or a calibration run."""

    _bounds: ClassVar[dict[str, tuple[float, float]]] = {
        "max_fraction": (1e-6, 1.0), "half_saturation_flops": (0.0, 1e18),
        "half_saturation_dim": (0.0, 1e9)}

    def __post_init__(self) -> None:
        self._check()
        if not isinstance(self.per_phase, Mapping):
            raise BertscopeError(f"GemmEfficiency.per_phase: expected an object of phase -> "
                                 f"factor, got {type(self.per_phase).__name__}")
        for phase, factor in self.per_phase.items():
            if not (is_positive_number(factor) and float(factor) <= 1e3):
                raise BertscopeError(f"GemmEfficiency.per_phase[{phase!r}] must be a number "
                                     f"in (0, 1000], got {factor!r}")

    def __hash__(self) -> int:
        return self._hash()

    def fraction(self, rows: Mapping[str, Any] | pd.DataFrame) -> np.ndarray:
        """Fraction of peak per row (rows without FLOPs get 1; they take no compute time)."""
        w = per_launch(rows, "flops")
        m, n, k = (np.asarray(rows[c], dtype=float) for c in "mnk")
        smallest = np.minimum(np.minimum(m, n), k)  # columns may broadcast (a sweep's)
        d = np.where(smallest > 0, smallest, 1.0)
        f = (self.max_fraction * saturating(w, self.half_saturation_flops)
             * saturating(d, self.half_saturation_dim))
        if self.per_phase and "phase" in rows:
            keys = gemm_phase(rows["phase"])
            scale = np.array([float(self.per_phase.get(k, 1.0)) for k in keys.ravel()],
                             dtype=float).reshape(keys.shape)
            f = np.minimum(1.0, f * scale)
        return np.where(w > 0, f, 1.0)


__all__ = ["GemmEfficiency", "gemm_phase"]
