"""The blocks of one training iteration of a model with one layer stack (encoders, decoders,
ViT): the layout every such producer shares, written once."""

from __future__ import annotations

from bertscope.analytic.blocks import Block, Repeat
from bertscope.analytic.optimizer import accumulates, accumulation_blocks, optimizer_blocks
from bertscope.analytic.section import Section, checkpointed
from bertscope.config import ModelConfig, RunConfig
from bertscope.optable import Op


def one_stack_blocks(m: ModelConfig, run: RunConfig, emb: Section, layer: Section,
                     heads: Section, later: list[Op] | None = None,
                     kept: list[Op] | None = None) -> list[Block]:
    """All rows of one training iteration (one optimizer step), as blocks in execution order:
    the embeddings, the layers' forward, the heads and loss (forward and backward), the
    layers' backward (last layer first; recomputation first, `section.checkpointed`; `later`
    rows in every layer after the first, e.g. ALBERT's shared-weight gradient sums), the
    embeddings' backward, gradient accumulation, the optimizer. `kept`: forward rows each
    layer runs after its forward that checkpointing never reruns (Transformer-XL's memory
    update)."""
    fwd, rerun = checkpointed(layer.fwd, run.checkpoint)
    backward = rerun + layer.bwd()
    blocks = [Block(emb.fwd, micro=True),
              Block(fwd + (kept or []), Repeat.EACH_LAYER, micro=True),
              Block(heads.fwd + heads.bwd(), micro=True),
              Block(backward, Repeat.EACH_LAYER_REVERSED, later or [], micro=True),
              Block(emb.bwd(), micro=True)]
    if accumulates(run):
        blocks += accumulation_blocks(m, run)
    return blocks + optimizer_blocks(m, run)


__all__ = ["one_stack_blocks"]
