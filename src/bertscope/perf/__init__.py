"""The performance model: roofline bounds, efficiency models, fusion, predicted op times.

    >>> from bertscope.analytic import ops
    >>> from bertscope.perf import Prediction, fuse, load_profile, predict
    >>> table = ops("bert-large", batch=64, seq=128, precision="bf16")
    >>> p = predict(table, load_profile("a100"))          # or predict(fuse(table), ...)
    >>> Prediction.of(p).time_s, p.summary("category")

Each piece is small and swappable: `roofline.py` (which peak a row is held to, the bound),
`efficiency.py` (the efficiency models' contract, defaults per device kind and every model
name: `device_profile.py` holds the protocols, registry and `DeviceProfile` = device + models
with its JSON round trip, `gemm_models.py` the fitted GEMM models, `gpu_gemm.py` the
first-principles tile/wave GEMM model of catalog GPUs, `bandwidth.py` the bandwidth
and overhead models), `predict.py` (time per row and its bound), `kernel_fusion.py` (what fusion
would buy), `fit.py` (fitting the models to measurements).
"""

from __future__ import annotations

from bertscope.perf.efficiency import (
    ASSUMED,
    BandwidthEfficiency,
    CategoryBandwidthEfficiency,
    DeviceProfile,
    EfficiencyModel,
    GemmEfficiency,
    Overhead,
    OverheadModel,
    TileWaveGemmEfficiency,
    default_profile,
    load_profile,
    register_model,
)
from bertscope.perf.gemm_models import FormatGemmEfficiency
from bertscope.perf.kernel_fusion import FusionStats, fuse
from bertscope.perf.predict import Bound, BoundShare, Prediction, by_bound, predict
from bertscope.perf.roofline import Knobs, Peaks, roofline, run_format, select_peaks, study_format

__all__ = [
    "ASSUMED",
    "BandwidthEfficiency",
    "Bound",
    "BoundShare",
    "CategoryBandwidthEfficiency",
    "DeviceProfile",
    "EfficiencyModel",
    "FormatGemmEfficiency",
    "FusionStats",
    "GemmEfficiency",
    "Knobs",
    "Overhead",
    "OverheadModel",
    "Peaks",
    "Prediction",
    "TileWaveGemmEfficiency",
    "by_bound",
    "default_profile",
    "fuse",
    "load_profile",
    "predict",
    "register_model",
    "roofline",
    "run_format",
    "select_peaks",
    "study_format",
]
