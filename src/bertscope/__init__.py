"""bertscope: where the time, bytes and FLOPs of Transformer training go.

Every public function checks its arguments as the command line does (the same config
classes, enum parsers and sweep axis parser): a bad value raises `bertscope.Error` (the
alias of `BertscopeError`) with the command line's one-line message; where a list is
expected, a single value (a string included) is one value."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bertscope.analytic import build, memory_estimate, ops, parameter_count
    from bertscope.config import Family, ModelConfig, Optimizer, Precision, RunConfig
    from bertscope.errors import BertscopeError, Error
    from bertscope.job import Job, Layout
    from bertscope.optable import Op, OpTable
    from bertscope.presets import PRESETS, get_model
    from bertscope.studies.study import study
    from bertscope.sweep import sweep
    from bertscope.taxonomy import Category, Phase, Sublayer
    from bertscope.trace import analyze_trace, read_trace

__version__ = "0.1.0"

_LAZY = {
    **dict.fromkeys(("build", "memory_estimate", "ops", "parameter_count"), "bertscope.analytic"),
    **dict.fromkeys(("Family", "ModelConfig", "Optimizer", "Precision", "RunConfig"),
                    "bertscope.config"),
    **dict.fromkeys(("PRESETS", "get_model"), "bertscope.presets"),
    **dict.fromkeys(("BertscopeError", "Error"), "bertscope.errors"),
    **dict.fromkeys(("Job", "Layout"), "bertscope.job"),
    **dict.fromkeys(("Op", "OpTable"), "bertscope.optable"),
    **dict.fromkeys(("Category", "Phase", "Sublayer"), "bertscope.taxonomy"),
    **dict.fromkeys(("analyze_trace", "read_trace"), "bertscope.trace"),
    "sweep": "bertscope.sweep",
    "study": "bertscope.studies.study",
}
"""Public name -> the module that defines it, imported on first use (PEP 562): `import
bertscope` costs nothing, and a command pays only for what it uses (`bertscope trace` neither
numpy's nor pandas's import for the analytic producer it does not run). `bertscope.sweep` is
also the package's name: once that package is imported, the attribute is the package, which
is callable as the function (bertscope/sweep/__init__.py)."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "PRESETS",
    "BertscopeError",
    "Category",
    "Error",
    "Family",
    "Job",
    "Layout",
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
