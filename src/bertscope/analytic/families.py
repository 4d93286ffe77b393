"""One producer of blocks per model family: the one place that says which code writes a
family's rows and its parameter groups.

A family is added by writing its producer (blocks of rows in execution order, as
`encoder.encoder_blocks` does) and its parameter layout (`params.GroupLayout`), and
registering both here; every consumer (op tables, memory, sweeps, the distributed model)
reaches the rows through `model_blocks` and never asks which family it holds.
"""

from __future__ import annotations

from collections.abc import Callable

from bertscope.analytic.blocks import Block, expand
from bertscope.analytic.decoder import decoder_blocks, decoder_layout
from bertscope.analytic.encoder import encoder_blocks
from bertscope.analytic.fp8 import to_fp8
from bertscope.analytic.params import GroupLayout, encoder_layout
from bertscope.analytic.t5 import t5_blocks, t5_layout
from bertscope.analytic.vit import vit_blocks, vit_layout
from bertscope.config import Family, ModelConfig, Precision, RunConfig
from bertscope.errors import BertscopeError
from bertscope.optable import Op

Producer = Callable[[ModelConfig, RunConfig], list[Block]]
Layout = Callable[[ModelConfig, bool], GroupLayout]
"""(model, pretraining) -> its parameter groups as written once."""

PRODUCERS: dict[Family, Producer] = {
    Family.BERT: encoder_blocks,
    Family.ROBERTA: encoder_blocks,
    Family.ALBERT: encoder_blocks,
    Family.GPT2: decoder_blocks,
    Family.LLAMA: decoder_blocks,
    Family.T5: t5_blocks,
    Family.VIT: vit_blocks,
}
"""Family -> the function writing its iteration's blocks."""

LAYOUTS: dict[Family, Layout] = {
    Family.BERT: encoder_layout,
    Family.ROBERTA: encoder_layout,
    Family.ALBERT: encoder_layout,
    Family.GPT2: decoder_layout,
    Family.LLAMA: decoder_layout,
    Family.T5: t5_layout,
    Family.VIT: vit_layout,
}
"""Family -> its parameter layout (`params.group_layout`)."""


def producer(m: ModelConfig) -> Producer:
    """The block producer of `m`'s family (refused in one line when it has none)."""
    fn = PRODUCERS.get(m.family)
    if fn is None:
        have = ", ".join(f.value for f in PRODUCERS)
        raise BertscopeError(f"model {m.name!r}: family {m.family.value!r} has no analytic "
                             f"op model yet; modelled: {have}")
    return fn


def layout(m: ModelConfig) -> Layout:
    """The parameter layout of `m`'s family (refused in one line when it has none)."""
    fn = LAYOUTS.get(m.family)
    if fn is None:
        raise BertscopeError(f"model {m.name!r}: family {m.family.value!r} has no parameter "
                             f"layout yet; modelled: {', '.join(f.value for f in LAYOUTS)}")
    return fn


def model_blocks(m: ModelConfig, run: RunConfig) -> list[Block]:
    """All rows of one training iteration (one optimizer step) of `m`, as blocks in
    execution order (the pair is checked where it is made: `Job`, `parallel.Workload`,
    `sweep.grid`). An fp8 run is its family's bf16 blocks with the FP8 recipe's rows
    (`fp8.to_fp8`), so every producer gets fp8 from this one place."""
    blocks = producer(m)(m, run)
    return to_fp8(blocks, m.num_layers) if run.precision is Precision.FP8 else blocks


def model_ops(m: ModelConfig, run: RunConfig) -> list[Op]:
    """All rows of one training iteration of `m`, one per op site (`expand` of
    `model_blocks`)."""
    return expand(model_blocks(m, run), m.num_layers, run.micro_batches)


__all__ = ["LAYOUTS", "PRODUCERS", "layout", "model_blocks", "model_ops", "producer"]
