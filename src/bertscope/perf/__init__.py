"""The performance model: roofline bounds, efficiency models, fusion, predicted op times.

    >>> from bertscope.analytic import ops
    >>> from bertscope.perf import fuse, load_profile, predict
    >>> table = ops("bert-large", batch=64, seq=128, precision="bf16")
    >>> p = predict(table, load_profile("a100"))          # or predict(fuse(table), ...)
    >>> p.meta["prediction"]["time_s"], p.summary("category")

Each piece is small and swappable: `roofline.py` (which peak a row is held to, the bound),
`efficiency.py` (GEMM, bandwidth and overhead models; `DeviceProfile` = device + models, JSON
round-trip), `predict.py` (time per row and its bound), `fusion.py` (what fusion would buy).
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import Any

from bertscope.perf import efficiency as _efficiency
from bertscope.perf.efficiency import (
    ASSUMED,
    BandwidthEfficiency,
    DeviceProfile,
    EfficiencyModel,
    GemmEfficiency,
    Overhead,
    OverheadModel,
    default_profile,
    register_model,
)
from bertscope.perf.fusion import fuse
from bertscope.perf.predict import Bound, by_bound, predict
from bertscope.perf.roofline import Peaks, roofline, select_peaks

# The fitted models (CategoryBandwidthEfficiency) live in calibrate.py, which imports pandas;
# it is imported on first use, not here, so that predicting never pays for pandas.
_FITTED = "bertscope.perf.calibrate"


@functools.wraps(_efficiency.load_profile)
def load_profile(name_or_path: str | Path) -> DeviceProfile:
    if Path(str(name_or_path)).suffix.lower() == ".json":
        importlib.import_module(_FITTED)  # registers the models a profile file may name
    return _efficiency.load_profile(name_or_path)


def __getattr__(name: str) -> Any:
    if name == "CategoryBandwidthEfficiency":
        return getattr(importlib.import_module(_FITTED), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ASSUMED",
    "BandwidthEfficiency",
    "Bound",
    "CategoryBandwidthEfficiency",
    "DeviceProfile",
    "EfficiencyModel",
    "GemmEfficiency",
    "Overhead",
    "OverheadModel",
    "Peaks",
    "by_bound",
    "default_profile",
    "fuse",
    "load_profile",
    "predict",
    "register_model",
    "roofline",
    "select_peaks",
]
