"""The analytic op model: every op of a training iteration from the config alone (no torch)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertscope.analytic.columns import expand_columns
from bertscope.analytic.families import model_blocks
from bertscope.analytic.memory import MemoryEstimate
from bertscope.analytic.memory import memory_estimate as _memory_estimate
from bertscope.analytic.params import param_groups
from bertscope.analytic.params import parameter_count as _parameter_count
from bertscope.config import ModelConfig, RunConfig, as_run
from bertscope.errors import BertscopeError, shown
from bertscope.job import Job
from bertscope.optable import OpTable, Provenance, intensity
from bertscope.presets import get_model


def ops(model: str | Path | ModelConfig, **run: Any) -> OpTable:
    """The op table of one pretraining iteration of `model` (a preset name, a path to a
    Hugging Face config.json, or a ModelConfig) run with `RunConfig(**run)` (every run
    setting by its field name: batch, seq, precision, checkpoint, attention, ...). The table
    carries the job, its `Provenance` (producer and parameter count) and its `MemoryEstimate`.
    A setting's name or value the run config does not take (`checkpointing=`, the old
    spelling of `checkpoint=`; `dropout="no"`) is a `BertscopeError` naming the fix."""
    return build(get_model(model), as_run(run, "ops"))


def build(m: str | Path | ModelConfig | Job,
          run: RunConfig | Mapping[str, Any] | None = None) -> OpTable:
    """The op table for a job (or a model and run configuration: a preset name or path and
    a RunConfig, a dict of its fields or None for the defaults); the table carries the job
    typed (`table.model`, `table.run`)."""
    if isinstance(m, Job):
        if run is not None:
            raise BertscopeError("build: give a Job, or a model and a run, not a Job and a run")
        job = m
    else:
        job = Job(model=get_model(m), run=as_run(run, "build"))
    blocks = model_blocks(job.model, job.run, job.layout.tp)  # vocabulary padded for tp
    cols = expand_columns(blocks, job.model.num_layers, job.run.micro_batches)
    mem = _memory_estimate(job.model, job.run, blocks)
    records = (Provenance("analytic", _parameter_count(job.model)), mem)
    return OpTable.from_columns({**cols, "intensity": intensity(cols)}, records, job=job)


def memory_estimate(m: str | Path | ModelConfig,
                    run: RunConfig | Mapping[str, Any] | None = None) -> MemoryEstimate:
    """Memory of training `m` (a preset name, config.json path or ModelConfig) with `run`
    (a RunConfig, a dict of its fields, or None for the defaults)."""
    model, cfg = get_model(m), as_run(run, "memory_estimate")
    cfg.check(model)
    return _memory_estimate(model, cfg)


def parameter_count(m: str | Path | ModelConfig, *, pretraining: bool = True) -> int:
    """Parameters of `m` (a preset name, config.json path or ModelConfig), with its
    pretraining heads (`pretraining=False`: the encoder alone)."""
    if not isinstance(pretraining, bool):
        raise BertscopeError(f"parameter_count: pretraining must be true or false (a bool), "
                             f"got {shown(pretraining)}")
    return _parameter_count(get_model(m), pretraining=pretraining)


__all__ = ["MemoryEstimate", "build", "memory_estimate", "ops", "param_groups",
           "parameter_count"]
