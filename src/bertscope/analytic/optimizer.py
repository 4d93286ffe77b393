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
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from bertscope.analytic.blocks import Block, Repeat, expand
from bertscope.analytic.params import ParamGroup, group_layout
from bertscope.config import ModelConfig, Optimizer, Precision, RunConfig
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


def accumulation_blocks(m: ModelConfig, run: RunConfig) -> list[Block]:
    """Gradient accumulation: micro-batches after the first add into each .grad."""
    k = run.micro_batches - 1
    ab = run.precision.act_bytes

    def rows(grp: ParamGroup) -> list[Op]:
        n = grp.params
        return [Op(f"{grp.name}.grad_accumulate", grp.layer, Sublayer.OTHER,
                   Category.ELEMENTWISE, Phase.BACKWARD_WEIGHT, elements=n, count=k,
                   flops=k * n, bytes_read=k * 2 * ab * n, bytes_written=k * ab * n,
                   pp_stage=group_stage(grp))]

    return group_blocks(m, rows)


def optimizer_blocks(m: ModelConfig, run: RunConfig) -> list[Block]:
    """The optimizer step's rows for every parameter group of the model, as blocks."""
    return group_blocks(m, lambda grp: _group_rows(grp, run))


def optimizer_ops(m: ModelConfig, run: RunConfig) -> list[Op]:
    """The optimizer step's rows for every parameter group of the model, one per group."""
    return expand(optimizer_blocks(m, run), m.num_layers)


def _group_rows(grp: ParamGroup, run: RunConfig) -> list[Op]:
    """The optimizer step's rows of one parameter group."""
    # gradient element bytes: fp32 under autocast (the parameters' own dtype), else the
    # working precision's (fp8: Transformer Engine's 16-bit weights and gradients)
    gb = W if run.precision.autocast else run.precision.act_bytes
    opt = run.optimizer
    states = W * opt.states  # state bytes per element
    rows: list[Op] = []
    n, name = grp.params, grp.name
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
                         2 * W * n + W * grp.tensors, W * n))
    else:
        rows.append(_row(f"{name}.{opt.value}_update", grp, Category.OPTIMIZER,
                         _UPDATE_FLOPS[opt] * n, (W + states) * n + gb * n,
                         (W + states) * n))
    if run.precision.mixed and not run.precision.autocast:  # refresh the 16-bit weights
        rows.append(_row(f"{name}.copy_to_half", grp, Category.DATA_MOVEMENT, 0,
                         W * n, gb * n))
    return rows


__all__ = ["group_blocks", "group_stage", "optimizer_blocks", "optimizer_ops"]
