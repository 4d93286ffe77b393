"""The analytic op model: every op of a training iteration from the config alone (no torch)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from bertscope.analytic.encoder import encoder_ops
from bertscope.analytic.memory import MemoryEstimate, memory_estimate
from bertscope.analytic.params import param_groups, parameter_count
from bertscope.config import ModelConfig, Optimizer, Precision, RunConfig, get_model
from bertscope.optable import OpTable


def ops(
    model: str | Path | ModelConfig,
    *,
    batch: int = 8,
    seq: int = 128,
    precision: Precision | str = Precision.FP32,
    optimizer: Optimizer | str = Optimizer.ADAM,
    dropout: bool = True,
    checkpointing: bool = False,
    micro_batches: int = 1,
    masked_lm_only: bool = False,
) -> OpTable:
    """The op table of one pretraining iteration of `model` (a preset name, a path to a
    Hugging Face config.json, or a ModelConfig). `meta` holds the configs and the memory
    estimate."""
    m = model if isinstance(model, ModelConfig) else get_model(model)
    run = RunConfig(batch=batch, seq=seq, precision=precision, optimizer=optimizer,
                    dropout=dropout, checkpointing=checkpointing, micro_batches=micro_batches,
                    masked_lm_only=masked_lm_only)
    return build(m, run)


def build(m: ModelConfig, run: RunConfig) -> OpTable:
    """The op table for a model and run configuration."""
    rows = encoder_ops(m, run)
    mem = memory_estimate(m, run, rows)
    meta = {
        "producer": "analytic",
        "model": {k: str(v) if hasattr(v, "value") else v for k, v in asdict(m).items()},
        "run": {k: str(v) if hasattr(v, "value") else v for k, v in asdict(run).items()},
        "params": parameter_count(m),
        "memory": mem.as_dict(),
    }
    return OpTable.from_ops(rows, meta)


__all__ = ["MemoryEstimate", "build", "memory_estimate", "ops", "param_groups",
           "parameter_count"]
