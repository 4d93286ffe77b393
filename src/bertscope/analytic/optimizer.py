"""Rows of the optimizer update, one set per parameter group (embeddings, each layer, heads).

Weights and optimizer state are fp32 (in mixed precision: fp32 master weights; gradients
arrive in 16 bits and the updated weights are copied back to 16 bits). Per element:

| optimizer | reads (fp32 words + grad)    | writes        | FLOPs (approx.)         |
|-----------|------------------------------|---------------|-------------------------|
| SGD       | w, momentum, g               | w, momentum   | 4                       |
| Adam      | w, m, v, g                   | w, m, v       | 12                      |
| AdamW     | w, m, v, g                   | w, m, v       | 14 (decoupled decay)    |
| LAMB      | global grad norm (NVLAMB), then Adam-style moments writing the update u,
|           | per-tensor norms of w and u (reductions), then w -= lr * ratio * u       |

LAMB: You et al. 2019 (Large Batch Optimization for Deep Learning), Algorithm 2; the
global gradient-norm pre-normalization is NVIDIA's NVLAMB.

Mixed precision, by `RunConfig.weight_cast` (`config.WeightCast`):

| policy          | gradient read   | 16-bit weights made by                         |
|-----------------|-----------------|------------------------------------------------|
| per_micro_batch | fp32 (autocast) | autocast's casts in every forward (`section`)  |
| per_step        | 16-bit          | a `copy_to_half` row after the update          |
| kept            | fp32 main grad  | the update row itself (+2 bytes written each)  |

fp8 runs keep their 16-bit weights as `per_step` does unless `kept` (Transformer Engine's
FP8 casts are `fp8.py`'s). Gradient accumulation adds micro-batches after the first into the
gradient; with `fused_accumulation` the linear layers' weight-gradient GEMMs add into the
fp32 main gradient themselves (`section.Section.linear`), so only the parameters outside the
layer stacks (embeddings, heads) keep an accumulation row: the stack's biases and norms, under
0.5% of a layer's parameters at h >= 768, are counted with the fused weights (approximation).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from bertscope.analytic.blocks import Block, Repeat, expand
from bertscope.analytic.params import ParamGroup, group_layout
from bertscope.analytic.section import per_use_casts
from bertscope.config import ModelConfig, Optimizer, Precision, RunConfig, WeightCast
from bertscope.optable import Op
from bertscope.taxonomy import Category, Phase, PipelineStage, Sublayer

W = 4
"""Bytes of an fp32 master weight / optimizer-state element."""

_UPDATE_FLOPS = {Optimizer.SGD: 4, Optimizer.ADAM: 12, Optimizer.ADAMW: 14, Optimizer.LAMB: 14}


def group_stage(grp: ParamGroup) -> PipelineStage:
    """The pipeline stage holding a parameter group: the embeddings on the first stage, the
    encoder layers in the stack, the pooler and pretraining heads on the last stage. (A
    sweep's layer index may be an array: T5's decoder layer comes after L layers, L swept.)"""
    if np.all(np.asarray(grp.layer) >= 0):
        return PipelineStage.STACK
    return PipelineStage.FIRST if grp.name == "embedding" else PipelineStage.LAST


def _row(name: str, grp: ParamGroup, cat: Category, flops: float, read: float,
         written: float) -> Op:
    return Op(name, grp.layer, Sublayer.OPTIMIZER, cat, Phase.OPTIMIZER, elements=grp.params,
              flops=flops, bytes_read=read, bytes_written=written, pp_stage=group_stage(grp))


def group_blocks(m: ModelConfig, rows: Callable[[ParamGroup], list[Op]]) -> list[Block]:
    """Blocks of per-parameter-group rows, in group order: the groups before the encoder
    stack, the layer group (once per layer, or once for a shared layer), those after."""
    g = group_layout(m)
    stacks = [Block(rows(st.group), Repeat.EACH_LAYER if st.per_layer else Repeat.ONCE,
                    layers=st.layers, first=st.group.layer) for st in g.stacks]
    return [Block([op for grp in g.before for op in rows(grp)]), *stacks,
            Block([op for grp in g.after for op in rows(grp)])]


def accumulates(run: RunConfig) -> bool:
    """Whether the iteration runs several micro-batches (gradient accumulation rows). A
    sweep's group of configurations shares the answer (`sweep.grid` splits on it)."""
    return bool(np.all(np.asarray(run.micro_batches) > 1))


def kept_weights(run: RunConfig) -> bool:
    """Whether 16-bit weights are kept beside fp32 main parameters and gradients, written by
    the optimizer's update (`WeightCast.KEPT` in mixed precision)."""
    return bool(run.precision.mixed and run.weight_cast is WeightCast.KEPT)


def grad_bytes(run: RunConfig) -> int:
    """Bytes of one gradient element as the optimizer reads it: fp32 under autocast (the
    parameters' own dtype), fp32 main gradients where weights are kept or accumulation is
    fused into the GEMMs (Megatron-LM accumulates bf16 runs' gradients in fp32), else the
    16-bit model's own (apex O2; fp8: Transformer Engine's bf16 gradients)."""
    if per_use_casts(run) or kept_weights(run) or run.fused_accumulation:
        return W
    return run.precision.act_bytes


def _accumulate_bytes(run: RunConfig) -> tuple[int, int]:
    """(accumulator, addend) bytes per element of one gradient accumulation: the gradient
    buffer read and written, the micro-batch's gradient read. Autocast's rows keep the
    working precision for both (as measured rows were named before the policies)."""
    ab = run.precision.act_bytes
    if per_use_casts(run):
        return ab, ab
    return grad_bytes(run), ab


def _accumulated(grp: ParamGroup, run: RunConfig) -> bool:
    """Whether a group's gradients are added up by a kernel of their own: all of them, or
    with fused accumulation the groups outside the layer stacks only."""
    return not run.fused_accumulation or group_stage(grp) is not PipelineStage.STACK


def accumulation_blocks(m: ModelConfig, run: RunConfig) -> list[Block]:
    """Gradient accumulation: micro-batches after the first add into each gradient (module
    docstring: fused accumulation leaves the groups outside the stacks)."""
    k = run.micro_batches - 1
    acc, add = _accumulate_bytes(run)

    def rows(grp: ParamGroup) -> list[Op]:
        if not _accumulated(grp, run):
            return []
        n = grp.params
        return [Op(f"{grp.name}.grad_accumulate", grp.layer, Sublayer.OTHER,
                   Category.ELEMENTWISE, Phase.BACKWARD_WEIGHT, elements=n, count=k,
                   flops=k * n, bytes_read=k * (acc + add) * n, bytes_written=k * acc * n,
                   pp_stage=group_stage(grp))]

    return [blk for blk in group_blocks(m, rows) if blk.rows]


def accumulate_op(m: ModelConfig, run: RunConfig) -> Op:
    """One micro-batch's gradient accumulation over the whole model as one row (the
    distributed model's per-parameter cost): the parameters `accumulation_blocks` adds up,
    with its bytes per element."""
    g = group_layout(m)
    n = sum(grp.params for grp in [*g.before, *g.after] if _accumulated(grp, run))
    n += sum(g.stack_layers(st, m.num_layers) * st.group.params for st in g.stacks
             if _accumulated(st.group, run))
    acc, add = _accumulate_bytes(run)
    return Op("model.grad_accumulate", -1, Sublayer.OTHER, Category.ELEMENTWISE,
              Phase.BACKWARD_WEIGHT, elements=n, flops=n, bytes_read=(acc + add) * n,
              bytes_written=acc * n)


def optimizer_blocks(m: ModelConfig, run: RunConfig) -> list[Block]:
    """The optimizer step's rows for every parameter group of the model, as blocks."""
    return group_blocks(m, lambda grp: _group_rows(grp, run))


def optimizer_ops(m: ModelConfig, run: RunConfig) -> list[Op]:
    """The optimizer step's rows for every parameter group of the model, one per group."""
    return expand(optimizer_blocks(m, run), m.num_layers)


def _group_rows(grp: ParamGroup, run: RunConfig) -> list[Op]:
    """The optimizer step's rows of one parameter group."""
    gb = grad_bytes(run)
    opt = run.optimizer
    states = W * opt.states  # state bytes per element
    n, name = grp.params, grp.name
    kept = run.precision.act_bytes * n if kept_weights(run) else 0 * n  # 16-bit weights
    rows: list[Op] = []
    if run.precision is Precision.FP16:  # loss scaling: unscale and check for inf/nan
        rows.append(_row(f"{name}.grad_unscale", grp, Category.OPTIMIZER, 2 * n,
                         gb * n, gb * n))
    if opt is Optimizer.LAMB:
        rows.append(_row(f"{name}.grad_norm", grp, Category.REDUCTION, 2 * n,
                         gb * n, W))
        rows.append(_row(f"{name}.lamb_moments", grp, Category.OPTIMIZER,
                         _UPDATE_FLOPS[opt] * n, (W + states) * n + gb * n,
                         (states + W) * n))  # writes m, v and the update u
        rows.append(_row(f"{name}.lamb_norms", grp, Category.REDUCTION, 4 * n,
                         2 * W * n, 2 * W * grp.tensors))  # ||w||, ||u|| per tensor
        rows.append(_row(f"{name}.lamb_update", grp, Category.OPTIMIZER, 3 * n,
                         2 * W * n + W * grp.tensors, W * n + kept))
    else:
        rows.append(_row(f"{name}.{opt.value}_update", grp, Category.OPTIMIZER,
                         _UPDATE_FLOPS[opt] * n, (W + states) * n + gb * n,
                         (W + states) * n + kept))
    if run.precision.mixed and not per_use_casts(run) and not kept_weights(run):
        # refresh the 16-bit weights from the fp32 masters once per step
        rows.append(_row(f"{name}.copy_to_half", grp, Category.DATA_MOVEMENT, 0,
                         W * n, gb * n))
    return rows


__all__ = ["accumulate_op", "accumulates", "accumulation_blocks", "grad_bytes", "group_blocks",
           "group_stage", "kept_weights", "optimizer_blocks", "optimizer_ops",
           "per_use_casts"]
