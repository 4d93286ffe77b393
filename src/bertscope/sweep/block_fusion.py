"""Fusion in a sweep: `perf.kernel_fusion.fuse_records` applied block by block, per configuration.

Chains never cross blocks (blocks are one layer, or the embeddings, or the heads, whose
neighbours sit in other layers), so fusing each block's rows gives, once laid out, the rows
`perf.kernel_fusion.fuse` gives on the whole op table; the optimizer's rows are fused across every
parameter group as `fuse` does (the layer group's rows counted once per layer). Whether two
adjacent rows chain depends on their count and element count being equal, which for rows of
different formulas can hold for some configurations only (vocab equal to hidden, a masked
sequence of one token): such a pair splits the piece into variants, each fused with its own
decisions and kept where its pattern holds (`variants`).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from bertscope.analytic.blocks import Block, Repeat, multiplicity
from bertscope.optable import Op
from bertscope.perf.kernel_fusion import FUSED_COLUMN, chain_key, fuse_records
from bertscope.taxonomy import Phase

_FIELDS = Op._fields


def _records(ops: list[Op]) -> list[dict[str, Any]]:
    return [dict(zip(_FIELDS, op, strict=True)) for op in ops]


def _ops(records: list[dict[str, Any]]) -> list[Op]:
    return [Op(**{k: r[k] for k in _FIELDS}) for r in records]


def _pair_masks(keys: list[Any], shape: tuple[int, ...]) -> list[Any]:
    """Per adjacent pair: True / False where the keys agree everywhere / nowhere, else the
    boolean array (over the piece) of where they agree."""
    out: list[Any] = []
    for a, b in itertools.pairwise(keys):
        if a is None or b is None or a[1:4] != b[1:4]:
            out.append(False)
            continue
        # layer (an array where the layer count is swept: T5's decoder), count, elements
        eq = np.broadcast_to((np.asarray(a[0]) == np.asarray(b[0]))
                             & (np.asarray(a[4]) == np.asarray(b[4]))
                             & (np.asarray(a[5]) == np.asarray(b[5])), shape)
        out.append(True if eq.all() else (False if not eq.any() else eq))
    return out


def variants(blocks: list[Block], shape: tuple[int, ...], act_bytes: int,
             layers: Any, *, chains_too: bool = True
             ) -> list[tuple[np.ndarray | None, list[Block]]]:
    """The fused blocks of a piece: one (None, blocks) where every pair of rows decides its
    chain the same way for every configuration; otherwise one (mask, blocks) per pattern of
    decisions that occurs, masks over the piece's shape. With `chains_too` False
    (`RunConfig.chain_fusion`) only the optimizer's rows are fused."""
    micro = [b for b in blocks if not any(op.phase is Phase.OPTIMIZER for op in b.rows)]
    opt = [b for b in blocks if b not in micro]
    fused_opt = _fused_optimizer(opt, layers)
    if not chains_too:
        return [(None, micro + fused_opt)]
    masks = [_pair_masks([chain_key(r) for r in _records(b.rows)], shape) for b in micro]
    mixed = [(bi, i, m) for bi, ms in enumerate(masks) for i, m in enumerate(ms)
             if isinstance(m, np.ndarray)]
    if not mixed:
        return [(None, _fuse(micro, masks, act_bytes) + fused_opt)]
    code = np.zeros(shape, dtype=np.int64)
    for j, (_, _, m) in enumerate(mixed):
        code |= m.astype(np.int64) << j
    out = []
    for c in np.unique(code):
        decided = [list(ms) for ms in masks]
        for j, (bi, i, _) in enumerate(mixed):
            decided[bi][i] = bool((int(c) >> j) & 1)
        out.append((code == c, _fuse(micro, decided, act_bytes) + fused_opt))
    return out


def _fuse(blocks: list[Block], decisions: list[list[Any]], act_bytes: int) -> list[Block]:
    out = []
    for blk, joins in zip(blocks, decisions, strict=True):
        rows, _ = fuse_records(_records(blk.rows), act_bytes, joins=lambda i, j=joins: j[i])
        later = blk.later
        if later:
            later_rows, _ = fuse_records(_records(later), act_bytes)
            later = _ops(later_rows)
        out.append(Block(_ops(rows), blk.repeat, later, blk.micro))
    return out


def _fused_optimizer(blocks: list[Block], layers: Any) -> list[Block]:
    """The optimizer's rows of every parameter group fused as `perf.kernel_fusion.fuse` does: each
    stage of every group in one launch (the layer group counted once per layer)."""
    records = []
    for blk in blocks:
        k, _ = multiplicity(blk, layers)
        for r in _records(blk.rows):
            if not (np.ndim(k) == 0 and k == 1):
                r = {**r, **{f: r[f] * k for f in ("flops", "bytes_read", "bytes_written",
                                                   "elements")}}
            records.append(r)
    if not records:
        return []
    fused, _ = fuse_records(records, 4)  # act bytes unused by the optimizer's fusion
    for r in fused:
        r.pop(FUSED_COLUMN, None)
    return [Block(_ops(fused), Repeat.ONCE)]


__all__ = ["variants"]
