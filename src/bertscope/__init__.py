"""bertscope: where the time, bytes and FLOPs of Transformer training go."""

from __future__ import annotations

from bertscope.analytic import build, memory_estimate, ops, parameter_count
from bertscope.config import (
    PRESETS,
    Family,
    ModelConfig,
    Optimizer,
    Precision,
    RunConfig,
    get_model,
)
from bertscope.errors import BertscopeError
from bertscope.optable import Op, OpTable
from bertscope.taxonomy import Category, Phase, Sublayer
from bertscope.trace import analyze_trace, read_trace

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "BertscopeError",
    "Category",
    "Family",
    "ModelConfig",
    "Op",
    "OpTable",
    "Optimizer",
    "Phase",
    "Precision",
    "RunConfig",
    "Sublayer",
    "analyze_trace",
    "build",
    "get_model",
    "memory_estimate",
    "ops",
    "parameter_count",
    "read_trace",
]
