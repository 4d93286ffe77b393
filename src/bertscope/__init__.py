"""bertscope: where the time, bytes and FLOPs of Transformer training go."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from bertscope.studies.study import study
    from bertscope.sweep import sweep
    from bertscope.trace import analyze_trace, read_trace

__version__ = "0.1.0"

_LAZY = {"analyze_trace": "bertscope.trace", "read_trace": "bertscope.trace",
         "sweep": "bertscope.sweep", "study": "bertscope.studies.study"}
"""Names imported on first use: the trace reader, the sweep and the study need pandas, which
commands that use none of them should not pay for at start-up."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])

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
    "study",
    "sweep",
]
