"""The study's sections, one module each: what each computes, its tables, its figure kind and
its findings (`bertscope.studies.study` runs them in order).

`context` (the `Ctx`, `Section`, `PhaseSpec` and helpers every section shares), then
1 `breakdown`, 2 `bound`, 3 `gemms`, 4 `optimizer`, 5 `precision`, 6 `scaling`,
7 `checkpointing`, 8 `distributed`, 9 `implications`, 10 `recipes`, 11 `method`.
"""

from __future__ import annotations

from bertscope.studies.sections.bound import bound_share
from bertscope.studies.sections.breakdown import where_time_goes
from bertscope.studies.sections.checkpointing import checkpointing
from bertscope.studies.sections.context import (
    GEMM,
    MEMORY_BOUND_AT,
    Ctx,
    MeasuredPart,
    PhaseSpec,
    Section,
    pct,
    shares,
)
from bertscope.studies.sections.distributed import distributed
from bertscope.studies.sections.gemms import gemm_shapes
from bertscope.studies.sections.implications import NearMemory, implications
from bertscope.studies.sections.method import method
from bertscope.studies.sections.optimizer import optimizer_share
from bertscope.studies.sections.precision import mixed_precision
from bertscope.studies.sections.recipes import recipe_stacks
from bertscope.studies.sections.scaling import scaling

__all__ = ["GEMM", "MEMORY_BOUND_AT", "Ctx", "MeasuredPart", "NearMemory", "PhaseSpec",
           "Section", "bound_share", "checkpointing", "distributed", "gemm_shapes",
           "implications", "method", "mixed_precision", "optimizer_share", "pct",
           "recipe_stacks", "scaling", "shares", "where_time_goes"]
