"""The analytic model's front door to every family: the rows of one iteration of any model,
from the producer its family spec names (`bertscope.families`).

A family's producer writes blocks of rows in execution order (as `encoder.encoder_blocks`
does) and its parameter layout its groups (`params.GroupLayout`); both are named in its
`FamilySpec`, so every consumer (op tables, memory, sweeps, the distributed model) reaches
the rows through `model_blocks` and never asks which family it holds.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from bertscope.analytic.blocks import Block, expand
from bertscope.analytic.fp8 import to_fp8
from bertscope.config import ModelConfig, Precision, RunConfig, WeightCast
from bertscope.families import resolve
from bertscope.optable import Op

Producer = Callable[[ModelConfig, RunConfig], list[Block]]
"""(model, run) -> one iteration's blocks in execution order."""


def producer(m: ModelConfig) -> Producer:
    """The block producer of `m`'s family (its spec's `producer`)."""
    fn: Producer = resolve(m.family.spec.producer)
    return fn


def model_blocks(m: ModelConfig, run: RunConfig, tp: int = 1) -> list[Block]:
    """All rows of one training iteration (one optimizer step) of `m`, as blocks in
    execution order (the pair is checked where it is made: `Job`, `parallel.Workload`,
    `sweep.grid`), the vocabulary padded for a tensor-parallel size `tp`
    (`padded_vocabulary`). An fp8 run is its family's bf16 blocks with the FP8 recipe's rows
    (`fp8.to_fp8`), so every producer gets fp8 from this one place."""
    blocks = producer(m)(padded_vocabulary(m, run, tp), run)
    if run.precision is not Precision.FP8:
        return blocks
    return to_fp8(blocks, m.num_layers,
                  weights_per_step=run.weight_cast is not WeightCast.PER_MICRO_BATCH)


def vocab_multiple(run: RunConfig, tp: int = 1) -> Any:
    """What the vocabulary is padded to a multiple of: `run.vocab_multiple` (the recipe's:
    NVIDIA's BERT 8, Megatron 128), times the tensor-parallel size `tp` where
    `run.vocab_multiple_times_tp` (Megatron-LM's `_vocab_size_with_padding`: multiple =
    make_vocab_size_divisible_by x tensor_model_parallel_size). An int; on a sweep's run view
    that sweeps it, an array over the group's axes."""
    raw = getattr(run, "vocab_multiple", None)
    mult: Any = 1 if raw is None else int(raw) if np.ndim(raw) == 0 else np.asarray(
        raw, dtype=float)
    return mult * int(tp) if getattr(run, "vocab_multiple_times_tp", False) else mult


def padded_vocabulary(m: Any, run: RunConfig, tp: int = 1) -> Any:
    """`m` with its vocabulary rounded up to a multiple of `vocab_multiple(run, tp)`, `m`
    itself where that changes nothing. `m` is a ModelConfig or the sweep's model view
    (vocabulary arrays)."""
    mult = vocab_multiple(run, tp)
    padded = np.ceil(np.asarray(m.vocab_size) / mult) * mult
    if padded.shape == np.shape(m.vocab_size) and np.array_equal(padded,
                                                                  np.asarray(m.vocab_size)):
        return m
    if isinstance(m, ModelConfig):
        return replace(m, vocab_size=int(padded))
    view = copy.copy(m)
    view.vocab_size = padded
    return view


def model_ops(m: ModelConfig, run: RunConfig, tp: int = 1) -> list[Op]:
    """All rows of one training iteration of `m`, one per op site (`expand` of
    `model_blocks`; `tp`: the tensor-parallel size the vocabulary is padded for)."""
    return expand(model_blocks(m, run, tp), m.num_layers, run.micro_batches)


__all__ = ["Producer", "model_blocks", "model_ops", "padded_vocabulary", "producer",
           "vocab_multiple"]
