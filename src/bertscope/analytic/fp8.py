"""FP8 training as one transformation of any family's blocks: the rows a Transformer-Engine
style recipe adds around the linear layers' GEMMs.

The recipe (NVIDIA Transformer Engine, `transformer_engine.common.recipe.DelayedScaling`
defaults: `fp8_format=Format.HYBRID` (E4M3 in forward, E5M2 for gradients, as Micikevicius et
al. 2022, *FP8 Formats for Deep Learning*, arXiv:2209.05433, section 4, recommend),
`amax_history_len=1024`, `amax_compute_algo="max"`; https://docs.nvidia.com/deeplearning/
transformer-engine/user-guide/api/common.html):

- every linear layer (category GEMM) multiplies FP8 operands and writes its output in bf16;
  attention's batched GEMMs stay bf16 (TE's DotProductAttention default), as does every
  other op (bf16 mixed precision, fp32 master weights);
- before a GEMM, each bf16 operand not yet in FP8 is cast by a cast-transpose kernel (TE's
  `cast_transpose`): it reads 2 bytes, writes the FP8 tensor and its transpose (1 + 1
  bytes), and takes the tensor's amax on the way (2 FLOPs per element: scale, max). Forward
  (and recompute) casts the input X and the weight W; the data gradient casts the incoming
  gradient dY; the weight gradient reuses X^T and dY^T from those casts (no new cast);
- the GEMM itself reads 1 byte per operand element instead of 2, and keeps its input for
  backward in FP8 (half the saved bytes);
- delayed scaling: after each forward and each backward (per micro-batch), one fused kernel
  updates every FP8 tensor's amax history and scale (TE's global reduce-and-update): it
  reads the 1024-entry fp32 history and the new amax, writes the rolled history, the scale
  and its inverse (a reduction row, layer -1).

Weight casts follow the run's cast policy (`config.WeightCast`): per micro-batch as above by
default; once per optimizer step otherwise (`weights_per_step`: Transformer Engine's
`is_first_microbatch=True` casts and caches the FP8 weights in the first micro-batch, later
micro-batches and recomputation reuse them; Megatron-Core passes it through), as rows of a
per-step block beside the layer's (`Block.micro` False).

`to_fp8(blocks, layers)` is applied in one place (`families.model_blocks`) to every family's
blocks; cast rows inherit the GEMM's layer, sublayer, phase, count and roles (tp_split,
pp_stage), so the op table, the sweep and the distributed model all get them. Arithmetic on
sizes only (the sweep's arrays flow through). Approximations: a cast's tensor-parallel role
is the GEMM's (a column-parallel layer's input is in fact replicated); the amax all-reduce
across data-parallel ranks is not modelled; TE's fusions of a cast into a preceding
layernorm or bias-gradient kernel are left to `perf.fuse`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bertscope.analytic.blocks import Block, Repeat, multiplicity
from bertscope.optable import Op
from bertscope.taxonomy import Category, Phase, PhaseFamily, Sublayer

AMAX_HISTORY = 1024
"""`DelayedScaling.amax_history_len` default (Transformer Engine 1.x and 2.x)."""

_FP32 = 4
_BF16 = 2
_CAST_FLOPS = 2
"""Per element: multiply by the scale, compare with the running amax."""


def _operands(op: Op) -> tuple[Any, Any]:
    """Elements of the GEMM's A (m x k) and B (k x n) operands in one launch."""
    return op.m * op.k * op.batch, op.k * op.n * op.batch


def _cast(op: Op, suffix: str, elements: Any) -> Op:
    """A cast-transpose of one operand of `op` (`elements` per launch) to FP8, with `op`'s
    place, count and roles; FLOPs and bytes are totals over the count, as every row's."""
    total = elements * op.count
    return Op(f"{op.name}.fp8_cast_{suffix}", op.layer, op.sublayer, Category.DATA_MOVEMENT,
              op.phase, elements=elements, count=op.count, flops=_CAST_FLOPS * total,
              bytes_read=_BF16 * total, bytes_written=2 * total, tp_split=op.tp_split,
              pp_stage=op.pp_stage)


def _casts(op: Op, weights_per_step: bool = False) -> tuple[list[Op], list[Op]]:
    """(the casts a GEMM row needs before it in its micro-batch, the weight casts made once
    per step instead), by phase (module docstring)."""
    a, b = _operands(op)
    if op.phase.family is PhaseFamily.FORWARD:  # forward and recompute: X and W
        if not weights_per_step:
            return [_cast(op, "a", a), _cast(op, "b", b)], []
        once = [_cast(op, "b", b)] if op.phase is Phase.FORWARD else []  # recompute reuses
        return [_cast(op, "a", a)], once
    if op.phase in (Phase.BACKWARD_DATA, Phase.BACKWARD):  # the incoming gradient dY
        return [_cast(op, "a", a)], []
    return [], []  # weight gradient: X^T and dY^T come from the casts above


def _fp8_gemm(op: Op) -> Op:
    """The GEMM reading FP8 operands (1 byte, not 2) and saving its input in FP8."""
    a, b = _operands(op)
    return op._replace(bytes_read=op.bytes_read - (_BF16 - 1) * (a + b) * op.count,
                       saved_bytes=op.saved_bytes / 2)


def _update(phase: Phase, tensors: Any) -> Op:
    """One fused amax-history and scale update of `tensors` FP8 tensors."""
    h = AMAX_HISTORY * tensors
    return Op("fp8.amax_update", -1, Sublayer.OTHER, Category.REDUCTION, phase, elements=h,
              flops=h, bytes_read=_FP32 * (h + tensors),
              bytes_written=_FP32 * (h + 2 * tensors))


def _convert(rows: list[Op], weights_per_step: bool = False
             ) -> tuple[list[Op], Any, Any, list[Op]]:
    """Rows with casts before each linear GEMM and the GEMMs in FP8, the number of tensors
    cast in the forward phase and in the others (per run of the rows: a count fixed by the
    rows' structure, never by sizes; a weight cast once per step still counts: its amax
    history is updated with the others'), and the weight casts made once per step."""
    out: list[Op] = []
    once: list[Op] = []
    fwd = rest = 0
    for op in rows:
        if op.category is not Category.GEMM:
            out.append(op)
            continue
        casts, per_step = _casts(op, weights_per_step)
        if op.phase is Phase.FORWARD:
            fwd += len(casts) + len(per_step)
        else:
            rest += len(casts)
        out += [*casts, _fp8_gemm(op)]
        once += per_step
    return out, fwd, rest, once


def to_fp8(blocks: list[Block], layers: Any, weights_per_step: bool = False) -> list[Block]:
    """`blocks` of a bf16 iteration as an FP8 one: cast rows before every linear GEMM, the
    GEMMs reading FP8, and the two scale-update rows (after the last block that casts in
    forward, and after the last one that casts in backward). `layers`: the model's layer
    count (an int, or an array over configurations). `weights_per_step`: the weights' casts
    run once per optimizer step, in a block of their own before the block that uses them."""
    out: list[Block] = []
    tensors = {"forward": 0, "backward": 0}
    last = {"forward": -1, "backward": -1}
    for blk in blocks:
        rows, fwd, rest, once = _convert(blk.rows, weights_per_step)
        later, fwd_l, rest_l, once_l = _convert(blk.later, weights_per_step)
        if once or once_l:
            out.append(replace(blk, rows=once, later=once_l, micro=False))
        copies, again = multiplicity(blk, layers, 1)
        for key, n, n_later in (("forward", fwd, fwd_l), ("backward", rest, rest_l)):
            if n == 0 and n_later == 0:
                continue  # the block casts nothing of this kind
            tensors[key] = tensors[key] + n * copies + n_later * again
            last[key] = len(out)
        out.append(replace(blk, rows=rows, later=later))
    for key, phase in sorted((("backward", Phase.BACKWARD), ("forward", Phase.FORWARD)),
                             key=lambda kv: -last[kv[0]]):
        if last[key] >= 0:  # insert the later position first so the earlier index holds
            out.insert(last[key] + 1, Block([_update(phase, tensors[key])], Repeat.ONCE,
                                            micro=True))
    return out


__all__ = ["AMAX_HISTORY", "to_fp8"]
