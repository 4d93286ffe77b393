"""Options that several commands share (ops, predict, profile, distributed): one definition,
so their names, types and help stay the same everywhere. Defaults stay with each command."""

from __future__ import annotations

from typing import Annotated

import typer

from bertscope.config import Optimizer, Precision

ModelArg = Annotated[str, typer.Argument(help="Preset name or path to a HF config.json.")]
BatchOpt = Annotated[int, typer.Option("--batch", help="Sequences per micro-batch.")]
SeqOpt = Annotated[int, typer.Option("--seq", help="Tokens per sequence.")]
PrecisionOpt = Annotated[Precision, typer.Option(
    "--precision", help="fp32, or mixed fp16/bf16 (autocast, fp16 with loss scaling, when "
                        "measured).")]
OptimizerOpt = Annotated[Optimizer, typer.Option(
    "--optimizer", help="Optimizer of the update step.")]
DropoutOpt = Annotated[bool, typer.Option("--dropout/--no-dropout",
                                          help="Dropout layers on or off.")]
CheckpointingOpt = Annotated[bool, typer.Option(
    "--checkpointing/--no-checkpointing",
    help="Full activation checkpointing of each encoder layer.")]
MicroBatchesOpt = Annotated[int, typer.Option(
    "--micro-batches", help="Gradient accumulation: micro-batches per optimizer step.")]
MaskedLmOnlyOpt = Annotated[bool, typer.Option(
    "--masked-lm-only/--no-masked-lm-only",
    help="MLM head on the 15% masked positions only (NVIDIA BERT).")]

__all__ = ["BatchOpt", "CheckpointingOpt", "DropoutOpt", "MaskedLmOnlyOpt", "MicroBatchesOpt",
           "ModelArg", "OptimizerOpt", "PrecisionOpt", "SeqOpt"]
