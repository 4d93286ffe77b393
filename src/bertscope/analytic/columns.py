"""Blocks laid out as op-table columns directly: each block's rows turned into columns once,
then repeated over its layers with index arrays (no row object per layer).

The same layout as `blocks.expand` (row for row, in execution order; tested equal), built the
way the sweep engine reads blocks: the rows written once, their repetition as arrays. A
bert-large table (1,417 rows) costs a Python object per row through `expand`; here it costs
one conversion per block row and a few numpy takes per block.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bertscope.analytic.blocks import Block, Repeat
from bertscope.optable import Op, as_column

_SCALED = ("count", "flops", "bytes_read", "bytes_written")
"""Fields a per-micro-batch row multiplies by the micro-batches (`blocks.times`)."""


def _block_columns(rows: list[Op]) -> dict[str, np.ndarray]:
    fields = list(zip(*rows, strict=True)) if rows else [()] * len(Op._fields)
    return {name: as_column(list(values)) for name, values in zip(Op._fields, fields,
                                                                    strict=True)}


def expand_columns(blocks: list[Block], layers: int, micro_batches: int = 1
                   ) -> dict[str, np.ndarray]:
    """The columns of `blocks.expand(blocks, layers, micro_batches)` (every `Op` field, 1-D,
    typed as `OpTable.from_ops` types them)."""
    parts: list[dict[str, np.ndarray]] = []
    for blk in blocks:
        rows, later = blk.rows, blk.later
        both = _block_columns([*rows, *later])
        if blk.micro and micro_batches > 1:
            for f in _SCALED:
                both[f] = both[f] * micro_batches
        r = len(rows)
        if blk.repeat is Repeat.ONCE:
            parts.append({f: v[:r] for f, v in both.items()})
            continue
        n = layers if blk.layers is None else int(blk.layers)
        order = range(n) if blk.repeat is Repeat.EACH_LAYER else range(n - 1, -1, -1)
        first, every = np.arange(r), np.arange(len(rows) + len(later))
        take = [first if i == 0 else every for i in order]
        if not take:
            continue
        idx = np.concatenate(take)
        out = {f: v[idx] for f, v in both.items()}
        out["layer"] = np.concatenate([  # the first layer's rows keep their own index
            both["layer"][:r] if i == 0 else np.full(len(every), blk.first + i,
                                                     dtype=both["layer"].dtype)
            for i in order])
        parts.append(out)
    if not parts:
        return _block_columns([])
    cols: dict[str, Any] = {}
    for f in Op._fields:
        arrs = [p[f] for p in parts]
        if any(a.dtype == object for a in arrs):
            arrs = [a.astype(object) for a in arrs]
        cols[f] = np.concatenate(arrs)
    return cols


__all__ = ["expand_columns"]
