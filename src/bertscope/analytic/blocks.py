"""An iteration's rows as blocks: the rows written once, with how often each block repeats.

Every encoder layer runs the same ops on the same shapes, so a producer writes one layer's
rows once (as layer 0) and says how the block repeats; `expand` lays the blocks out into the
op table's rows (one per layer, in execution order), and the sweep engine instead weighs each
block's rows by its multiplicity (`multiplicity`). Both read the same rows, so the op table
and a sweep cannot disagree, and building a table costs the same for 2 or 2,000 layers.

The rows are pure arithmetic on sizes: given a model and run view whose size fields are numpy
arrays (one entry per configuration; `sweep.grid`), the same producer code returns rows whose
numeric fields are arrays.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from bertscope.optable import Op


class Repeat(Enum):
    """How a block repeats over the encoder stack."""

    ONCE = "once"
    """Embeddings, heads, a shared (ALBERT) layer's parameter group: one copy."""
    EACH_LAYER = "each_layer"
    """One copy per encoder layer, layer 0 first (forward order)."""
    EACH_LAYER_REVERSED = "each_layer_reversed"
    """One copy per encoder layer, the last layer first (backward order)."""


@dataclass(slots=True)
class Block:
    """Rows of one part of an iteration and how they repeat. Rows of a per-layer block are
    written for its first layer (`first`); `later` rows run only in the stack's layers after
    its first (after the block's rows of each such layer: ALBERT's shared-weight gradient
    sums)."""

    rows: list[Op]
    repeat: Repeat = Repeat.ONCE
    later: list[Op] = field(default_factory=list)
    micro: bool = False
    """The rows run once per micro-batch (forward and backward), written for one."""
    layers: Any = None
    """Layers of the stack a per-layer block repeats over (an int, or an array with one entry
    per configuration); None: the model's `num_layers`. T5's decoder stack sets its own."""
    first: int = 0
    """Layer index of the stack's first layer (T5's decoder layers follow the encoder's)."""
    seq: Any = None
    """Tokens per sequence of the stack (None: the run's `seq`; T5's decoder: its target
    length): full checkpointing keeps batch x seq x hidden of each layer's input."""


def expand(blocks: Iterable[Block], layers: int, micro_batches: int = 1) -> list[Op]:
    """The op table's rows: each block laid out in order, per-layer blocks once per layer with
    the layer index set (linear in the number of layers); rows of per-micro-batch blocks
    carry `count` = micro_batches, their FLOPs and bytes summed over the runs (`times`)."""
    out: list[Op] = []
    for blk in blocks:
        rows, later = blk.rows, blk.later
        if blk.micro and micro_batches > 1:
            rows = [times(op, micro_batches) for op in rows]
            later = [times(op, micro_batches) for op in later]
        if blk.repeat is Repeat.ONCE:
            out += rows
            continue
        n = layers if blk.layers is None else int(blk.layers)
        order = range(n) if blk.repeat is Repeat.EACH_LAYER else range(n - 1, -1, -1)
        for i in order:
            idx = blk.first + i
            out += [op._replace(layer=idx) for op in rows] if i else rows
            if i:
                out += [op._replace(layer=idx) for op in later]
    return out


def multiplicity(blk: Block, layers: Any, micro_batches: Any = 1) -> tuple[Any, Any]:
    """(runs of the block's rows, runs of its `later` rows) in an iteration of `layers`
    encoder layers and `micro_batches` micro-batches (ints, or arrays with one entry per
    configuration): what `expand` lays out as separate rows (layers) and as `count`
    (micro-batches). A row's time scales with its runs: an efficiency model sees the work of
    one launch (`perf.device_profile.per_launch`) and charges overheads per launch."""
    k = micro_batches if blk.micro else 1
    if blk.repeat is Repeat.ONCE:
        return k, 0
    n = layers if blk.layers is None else blk.layers
    return n * k, (n - 1) * k


def times(op: Op, k: Any) -> Op:
    """A row run k times (micro-batches): count, FLOPs and bytes scale; saved bytes, a
    per-micro-batch memory figure, do not."""
    return op._replace(count=op.count * k, flops=op.flops * k, bytes_read=op.bytes_read * k,
                       bytes_written=op.bytes_written * k)


__all__ = ["Block", "Repeat", "expand", "multiplicity", "times"]
