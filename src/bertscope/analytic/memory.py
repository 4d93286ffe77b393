"""Memory model: weights, gradients, optimizer state, saved activations, and a peak estimate.

Static memory per parameter (Rajbhandari et al. 2020, ZeRO, section 3.1: mixed-precision
Adam keeps 2 + 2 + 12 = 16 bytes per parameter):

| precision | weights          | gradients | optimizer state             |
|-----------|------------------|-----------|-----------------------------|
| fp32      | 4                | 4         | 4 x states (SGD 1, Adam 2)  |
| fp16/bf16 | 2 + 4 (master)   | 2         | 4 x states                  |
| kept      | 2 + 4 (master)   | 4 (main)  | 4 x states                  |

`kept` is `WeightCast.KEPT` (and any mixed run with `fused_accumulation`): 16-bit weights
beside fp32 main parameters and fp32 main gradients, 18 bytes per parameter with Adam, as the
Megatron Core user guide counts bf16 parameters with fp32 gradients
(https://docs.nvidia.com/megatron-core/developer-guide/latest/distrib_optimizer.html, the
table of bytes per parameter: 18 without, 6 + 12/d with the distributed optimizer).

Saved activations are the op table's `saved_bytes` of one micro-batch's forward rows
(micro-batches run one after another). With full checkpointing each encoder layer keeps
only its input, and one layer's activations are live again while it is recomputed; with
selective checkpointing the attention core's memory-bound rows save nothing
(`section.checkpointed`), so the stacked forward rows already say what is kept.
The peak adds the largest single op output (a transient buffer) to everything above.

**Segment memory** (Transformer-XL, XLNet: `ModelConfig.mem_len` > 0): the hidden states of
the previous segment each layer attends over, `mem_len` positions x hidden per sequence per
layer, kept from one iteration to the next without gradient (state, not a saved activation:
no op row saves it, and checkpointing does not drop it). It is held in the activations'
format (`Precision.act_bytes`, as the op rows that write it count it) for every sequence of
the step: one memory per micro-batch slot, as the authors' `train.py` keeps one per
`batch_chunk` (kimiyoung/transformer-xl, pytorch/train.py: `mems = [tuple() for _ in
range(args.batch_chunk)]`), so batch x micro_batches sequences:

    segment_memory = layers x batch x micro_batches x mem_len x hidden x act_bytes

with one memory per layer (each layer's input, as the reference models and Hugging Face's
XLNet cache them; the authors' Transformer-XL code also caches the last layer's output,
which no layer reads: one layer more). Zero for every other family.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, Self

import numpy as np

from bertscope.analytic.blocks import Block, Repeat
from bertscope.analytic.families import model_blocks, padded_vocabulary
from bertscope.analytic.optimizer import grad_bytes
from bertscope.analytic.params import parameter_count
from bertscope.analytic.section import per_use_casts
from bertscope.config import Checkpoint, ModelConfig, RunConfig
from bertscope.optable import Record
from bertscope.packing import computed_tokens
from bertscope.taxonomy import Phase

MASTER_BYTES = 4


@dataclass(frozen=True, slots=True)
class MemoryEstimate(Record):
    """Bytes of each part of training memory on one device (an analytic table's record,
    exported as meta "memory")."""

    KEYS: ClassVar[tuple[str, ...]] = ("memory",)
    params: int
    """Unique trainable parameters."""
    weights: int
    """Working weights (fp32, or 16-bit in mixed precision)."""
    master_weights: int
    """fp32 master copy (mixed precision only)."""
    gradients: int
    optimizer_states: int
    activations: int
    """Saved for backward by one micro-batch (peak of the forward pass)."""
    activations_per_layer: int
    """Saved by one encoder layer without checkpointing."""
    transient: int
    """Largest single op output, held while the next op consumes it."""
    segment_memory: int = 0
    """The previous segment's hidden states carried to the next iteration (Transformer-XL,
    XLNet; `segment_memory_bytes`); 0 for models without memory."""

    @property
    def static(self) -> int:
        """Weights, master weights, gradients and optimizer states."""
        return self.weights + self.master_weights + self.gradients + self.optimizer_states

    @property
    def peak(self) -> int:
        """Static memory plus saved activations, the segment memory and the largest
        transient buffer."""
        return self.static + self.activations + self.segment_memory + self.transient

    def as_dict(self) -> dict[str, int]:
        """All fields plus `static` and `peak`."""
        return {**asdict(self), "static": self.static, "peak": self.peak}

    def to_dict(self) -> dict[str, Any]:
        """{"memory": `as_dict()`}, as exports write it."""
        return {"memory": self.as_dict()}

    @classmethod
    def from_dict(cls, entries: Mapping[str, Any]) -> Self:
        """From meta "memory" (`static` and `peak` are recomputed; a table saved before the
        segment memory was a term reads it as 0)."""
        saved = entries["memory"]
        return cls(**{f.name: int(saved[f.name]) for f in fields(cls)
                      if f.name in saved or f.name != "segment_memory"})


def _is_one(count: Any) -> bool:
    """Whether a row's launch count is the number 1 (x / 1 needs no pass over x)."""
    return isinstance(count, int | float) and count == 1


def _fold(op: Any, values: list[Any]) -> Any:
    """`op` (operator.add or np.maximum) folded over `values`, values of one type first: exact in
    any order for maxima and for byte counts (integers), and a sweep's token-space values
    (`sweep.tokens`) then meet the full-grid ones once, not once each."""
    by: dict[type, Any] = {}
    for v in values:
        t = type(v)
        by[t] = op(by[t], v) if t in by else v
    return functools.reduce(op, by.values())


def memory_parts(m: ModelConfig, run: RunConfig, blocks: list[Block]) -> dict[str, Any]:
    """The fields of `MemoryEstimate` from an iteration's blocks (numbers, or arrays with one
    entry per configuration when the configs hold arrays: the sweep engine's input). The
    parameter bytes count the vocabulary rows a recipe pads (`families.padded_vocabulary`:
    allocated, updated and stored like the others, as the distributed model counts them);
    "params" stays the model's own count."""
    own = parameter_count(m)
    padded = padded_vocabulary(m, run)
    n = own if padded is m else parameter_count(padded)
    ab = run.precision.act_bytes
    per_layer: Any = 0  # the largest layer's saved activations (of any stack)
    stacked: Any = 0  # every layer's, summed over the stacks
    inputs: Any = 0  # every layer's input: what full checkpointing keeps
    outside: Any = 0
    written = [op.bytes_written if _is_one(op.count) else op.bytes_written / op.count
               for blk in blocks for op in [*blk.rows, *blk.later]
               if op.phase is not Phase.OPTIMIZER]
    transient = _fold(np.maximum, [0, *written])
    for blk in blocks:
        if blk.repeat is Repeat.EACH_LAYER:
            fwd = [op for op in blk.rows if op.phase is Phase.FORWARD]
            if fwd:  # a stack's forward (the optimizer's per-layer blocks have none)
                saved = _fold(operator.add, [op.saved_bytes for op in fwd])
                layers = m.num_layers if blk.layers is None else blk.layers
                per_layer = np.maximum(per_layer, saved)
                stacked = stacked + layers * saved
                # b s, or the real tokens when unpadded (bertscope.packing)
                tokens = computed_tokens(run) if blk.seq is None else run.batch * blk.seq
                inputs = inputs + layers * ab * tokens * m.hidden
        elif blk.repeat is Repeat.ONCE:
            outside = outside + _fold(operator.add, [0, *(
                op.saved_bytes for op in blk.rows  # a sweep's layer index may be an array (T5)
                if op.phase is Phase.FORWARD and np.all(np.asarray(op.layer) < 0))])
    full = run.checkpoint is Checkpoint.FULL
    acts = outside + (inputs + per_layer if full else stacked)
    return {
        "params": own,
        "weights": ab * n,
        "master_weights": MASTER_BYTES * n if run.precision.mixed else 0 * n,
        "gradients": gradient_bytes(run) * n,
        "optimizer_states": 4 * run.optimizer.states * n,
        "activations": acts,
        "activations_per_layer": per_layer,
        "transient": transient,
        # one memory per micro-batch slot: every sequence of the step (module docstring)
        "segment_memory": segment_memory_bytes(m, sequences=run.batch * run.micro_batches,
                                               act_bytes=ab),
    }


def segment_memory_bytes(m: ModelConfig, *, sequences: Any, act_bytes: int,
                         layers: Any = None) -> Any:
    """Bytes of the segment memory (module docstring) of `sequences` sequences over `layers`
    layers (default: the model's `num_layers`): layers x sequences x mem_len x hidden x
    act_bytes; 0 where `mem_len` is 0. Numbers or arrays (a sweep's, a layout search's)."""
    n = m.num_layers if layers is None else layers
    return n * sequences * m.mem_len * m.hidden * act_bytes


def gradient_bytes(run: RunConfig) -> int:
    """Bytes held per parameter for its gradient: the working precision's under autocast
    (ZeRO's 2 + 2 + 12 accounting of the fp32 weights and gradients), else the gradient the
    optimizer reads (`optimizer.grad_bytes`: fp32 main gradients where weights are kept or
    accumulation is fused, the 16-bit model's own under `per_step`)."""
    return run.precision.act_bytes if per_use_casts(run) else grad_bytes(run)


def memory_estimate(m: ModelConfig, run: RunConfig,
                    blocks: list[Block] | None = None) -> MemoryEstimate:
    """Memory of training `m` with `run` (from the iteration's blocks, built when not given)."""
    if blocks is None:
        blocks = model_blocks(m, run)
    return MemoryEstimate(**{k: int(v) for k, v in memory_parts(m, run, blocks).items()})


__all__ = ["MemoryEstimate", "gradient_bytes", "memory_estimate", "memory_parts",
           "segment_memory_bytes"]
