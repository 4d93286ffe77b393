"""The analytic op model: every op of a training iteration from the config alone (no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertscope.analytic.columns import expand_columns
from bertscope.analytic.families import model_blocks
from bertscope.analytic.memory import MemoryEstimate, memory_estimate
from bertscope.analytic.params import param_groups, parameter_count
from bertscope.config import ModelConfig, RunConfig
from bertscope.job import Job
from bertscope.optable import OpTable, Provenance, intensity
from bertscope.presets import get_model


def ops(model: str | Path | ModelConfig, **run: Any) -> OpTable:
    """The op table of one pretraining iteration of `model` (a preset name, a path to a
    Hugging Face config.json, or a ModelConfig) run with `RunConfig(**run)` (every run
    setting by its field name: batch, seq, precision, checkpoint, attention, ...). The table
    carries the job, its `Provenance` (producer and parameter count) and its `MemoryEstimate`."""
    m = model if isinstance(model, ModelConfig) else get_model(model)
    return build(Job(model=m, run=RunConfig(**run)))


def build(m: ModelConfig | Job, run: RunConfig | None = None) -> OpTable:
    """The op table for a job (or a model and run configuration); the table carries the job
    typed (`table.model`, `table.run`)."""
    job = m if isinstance(m, Job) else Job(model=m, run=run)  # type: ignore[arg-type]
    blocks = model_blocks(job.model, job.run)
    cols = expand_columns(blocks, job.model.num_layers, job.run.micro_batches)
    mem = memory_estimate(job.model, job.run, blocks)
    records = (Provenance("analytic", parameter_count(job.model)), mem)
    return OpTable.from_columns({**cols, "intensity": intensity(cols)}, records, job=job)


__all__ = ["MemoryEstimate", "build", "memory_estimate", "ops", "param_groups",
           "parameter_count"]
