"""Every op of one image-classification training iteration of a Vision Transformer
(Dosovitskiy et al. 2021), as Hugging Face's ViTForImageClassification runs it.

With b images of c channels, p x p patches, n = (image / p)^2 patches and s = n + 1 tokens
(the class token first; `run.seq` must equal s, `RunConfig.check`):

- patch embedding: the p x p, stride-p convolution is a GEMM over the flattened patches,
  M = b n, K = c p^2, N = h, with a bias (written as a GEMM row, not a convolution row; the
  pixels need no gradient, so its backward is the weight gradient alone); the class token
  expanded over the batch and concatenated in front; the learned (s x h) position embedding
  added (broadcast over the batch); dropout.
- L pre-LayerNorm encoder layers with biases: LayerNorm, Q K V, attention core (full s x s
  scores, scaled by 1/sqrt(d), no mask: every image has all its patches), output projection,
  dropout, residual; LayerNorm, FFN1, GELU, FFN2, dropout, residual.
- a final LayerNorm over all s tokens, the classifier (h -> classes, `vocab_size`) on the
  class token alone, cross-entropy over the classes.

Roles: Megatron-LM's split inside the layers (Q, K, V, FFN1 column-parallel; the output
projection and FFN2 row-parallel; core and GELU split), the patch embedding on the first
pipeline stage and the final norm, classifier and loss on the last, replicated.
"""

from __future__ import annotations

from bertscope.analytic.blocks import Block
from bertscope.analytic.decoder import prenorm_layer
from bertscope.analytic.iteration import one_stack_blocks
from bertscope.analytic.params import GroupLayout, ParamGroup, StackGroup, linear
from bertscope.analytic.section import Section, cast_policy
from bertscope.config import ModelConfig, RunConfig
from bertscope.taxonomy import Category, Phase, PipelineStage, Sublayer, TensorSplit

C, P, S, T = Category, Phase, Sublayer, TensorSplit


def _embeddings(m: ModelConfig, run: RunConfig, ab: int) -> Section:
    sec = Section(-1, ab, PipelineStage.FIRST, **cast_policy(run))
    b, s, h, n = run.batch, run.seq, m.hidden, m.patches
    k = m.channels * m.patch_size ** 2
    # the pixels unfolded into (b n, c p^2) patches, then one GEMM (the stride-p convolution)
    sec.linear("patch_embed", S.PATCH_EMBED, b * n, k, h, input_grad=False)
    # the class token expanded over the batch and concatenated before the patches
    sec.fwd.append(sec.row("cls_concat", S.PATCH_EMBED, C.DATA_MOVEMENT, P.FORWARD,
                           elements=b * s * h, bytes_read=ab * (b * n * h + h),
                           bytes_written=ab * b * s * h))
    sec.on_backward(sec.row("cls_token.grad_sum", S.PATCH_EMBED, C.REDUCTION,
                            P.BACKWARD_WEIGHT, elements=b * h, flops=b * h,
                            bytes_read=ab * b * h, bytes_written=ab * h))
    sec.add("add_position", S.EMBEDDING, b * s * h, s * h)
    # the position add broadcasts over the batch: its backward sums dy over b
    sec.on_backward(sec.row("add_position.grad_sum", S.EMBEDDING, C.REDUCTION,
                            P.BACKWARD_WEIGHT, elements=b * s * h, flops=b * s * h,
                            bytes_read=ab * b * s * h, bytes_written=ab * s * h))
    if run.dropout:
        sec.dropout("embedding_dropout", S.EMBEDDING, b * s * h)
    return sec


def _head(m: ModelConfig, run: RunConfig, ab: int) -> Section:
    """Final LayerNorm, the class token's slice (its backward writes the zero-filled
    gradient of all s tokens), the classifier, the loss."""
    sec = Section(-1, ab, PipelineStage.LAST, **cast_policy(run))
    b, s, h = run.batch, run.seq, m.hidden
    sec.layernorm("final_norm", S.FINAL_NORM, b * s, h)
    sec.on_backward(sec.row("cls_select.grad", S.CLS_HEAD, C.DATA_MOVEMENT, P.BACKWARD_DATA,
                            elements=b * s * h, bytes_read=ab * b * h,
                            bytes_written=ab * b * s * h))
    sec.linear("classifier", S.CLS_HEAD, b, h, m.vocab_size)
    sec.cross_entropy("cls_loss", b, m.vocab_size, upcast=True)  # logits.float()
    return sec


def vit_blocks(m: ModelConfig, run: RunConfig) -> list[Block]:
    """All rows of one training iteration of a ViT, as blocks in execution order:
    embeddings, the layers' forward, head and loss (forward and backward), the layers'
    backward (last layer first; recompute first when checkpointing), the embeddings'
    backward, gradient accumulation, the optimizer."""
    ab = run.precision.act_bytes
    # a pre-LayerNorm layer as GPT-2's without its causal mask (ViTLayer attends every patch)
    return one_stack_blocks(m, run, _embeddings(m, run, ab),
                            prenorm_layer(m, run, ab, causal=False), _head(m, run, ab))


def vit_layout(m: ModelConfig, pretraining: bool = True) -> GroupLayout:
    """ViT's parameter groups as ViTForImageClassification builds them: the embeddings
    (class token, position table, patch convolution with bias), the layers, the final
    LayerNorm and the classifier. `pretraining=False`: the bare ViTModel without its pooler
    (as the classifier uses it) and without the classifier. Tensor parallelism splits the
    layers as BERT's (weights, Q/K/V/FFN1 biases); embeddings, norms and classifier whole."""
    h, f = m.hidden, m.intermediate
    emb = h + m.max_positions * h + linear(m.channels * m.patch_size ** 2, h)
    layer = 4 * linear(h, h) + linear(h, f) + linear(f, h) + 2 * (2 * h)
    after = [ParamGroup("final_norm", -1, 2 * h, 2)]
    if pretraining:
        after.append(ParamGroup("heads", -1, linear(h, m.vocab_size), 2))
    return GroupLayout([ParamGroup("embedding", -1, emb, 4)],
                       [StackGroup(ParamGroup("layer", 0, layer, 16,
                                              split=4 * h * h + 2 * h * f + 3 * h + f))],
                       after)


__all__ = ["vit_blocks", "vit_layout"]
