"""Every op of one pretraining iteration of an encoder Transformer (BERT, RoBERTa, ALBERT).

The forward pass is written once, op by op, the way Hugging Face's models run it (three
separate Q/K/V projections, explicit score/softmax/context matmuls, MLM logits for every
position), with the op vocabulary of `analytic.section` (FLOPs, bytes, saved bytes and
tensor/pipeline roles of each kind of op, and the backward rows it registers).
"""

from __future__ import annotations

import numpy as np

from bertscope.analytic.attention import attention_core
from bertscope.analytic.blocks import Block, expand
from bertscope.analytic.iteration import one_stack_blocks
from bertscope.analytic.params import layer_params, linear
from bertscope.analytic.section import INDEX_BYTES, Section, cast_policy
from bertscope.config import ModelConfig, RunConfig
from bertscope.optable import Op
from bertscope.packing import Packing, computed_tokens, per_sequence, sequences
from bertscope.taxonomy import Category, Phase, PipelineStage, Sublayer, TensorSplit

C, P, S, T = Category, Phase, Sublayer, TensorSplit

def fp32_stream(m: ModelConfig) -> bool:
    """Whether the residual stream is fp32 under autocast: the embeddings' fp32 sums pass
    the norm (CPU autocast keeps its input dtype) into every layer's residual adds, which
    promote the 16-bit branches, so each norm output a linear reads is cast first. ALBERT's
    embedding projection (a linear) starts a 16-bit stream instead: no input casts after it
    (measured: tests/integration/test_autocast_casts.py)."""
    return not m.family.factorized_embedding


def _embeddings(m: ModelConfig, run: RunConfig, ab: int) -> Section:
    sec = Section(-1, ab, PipelineStage.FIRST, **cast_policy(run))
    s, e = run.seq, m.emb
    t = computed_tokens(run)  # b s, or the real tokens unpadded (bertscope.packing)
    sec.lookup("word_embeddings", t, m.vocab_size, e)
    sec.lookup("token_type_embeddings", t, m.type_vocab_size, e)
    sec.lookup("position_embeddings", s, m.max_positions, e)
    sec.add("add_token_type", S.EMBEDDING, t * e)
    sec.add("add_position", S.EMBEDDING, t * e, s * e)
    # the position add broadcasts over the batch: its backward sums dy over b
    sec.on_backward(sec.row("add_position.grad_sum", S.EMBEDDING, C.REDUCTION,
                            P.BACKWARD_DATA, elements=t * e, flops=t * e,
                            bytes_read=ab * t * e, bytes_written=ab * s * e))
    sec.layernorm("embedding_norm", S.EMBEDDING, t, e)
    if run.dropout:
        sec.dropout("embedding_dropout", S.EMBEDDING, t * e)
    if m.family.factorized_embedding:
        sec.linear("embedding_project", S.EMBEDDING, t, e, m.hidden, cast_input=True)
    if m.share_layers:  # autocast caches the shared layer's weight casts for the forward
        h, f = m.hidden, m.intermediate
        sec.weight_casts("shared_layer", S.OTHER,
                         4 * linear(h, h) + linear(h, f) + linear(f, h))
    return sec


def _layer(m: ModelConfig, run: RunConfig, ab: int, layer: int) -> Section:
    """One encoder layer: attention block and feed-forward block, post-layernorm. Megatron-LM's
    split: Q, K, V and FFN1 column-parallel, the attention output and FFN2 row-parallel, the
    attention core and the activation between them split by heads and FFN width; layernorms,
    hidden dropouts and residual adds replicated."""
    # ALBERT's shared weights are cast once per forward (`_embeddings`), not per layer
    sec = Section(layer, ab, PipelineStage.STACK, **cast_policy(run),
                  cast_weights=not m.share_layers)
    b, s, h, a, f = run.batch, run.seq, m.hidden, m.heads, m.intermediate
    d = m.head_dim
    t, g = computed_tokens(run), b * a  # t: b s, or the real tokens unpadded
    f32 = fp32_stream(m)
    # the layer input feeds Q, K, V and the residual: autograd sums four gradients
    sec.grad_sum("input.grad_sum", S.QKV, t * h, n=2)
    sec.grad_sum("residual1.grad_sum", S.ATTN_ADD_NORM, t * h)
    sec.linear("q", S.QKV, t, h, h, cast_input=f32, split=T.COLUMN)  # saves X for Q, K, V
    sec.linear("k", S.QKV, t, h, h, save_input=False, cast_input=f32, split=T.COLUMN)
    sec.linear("v", S.QKV, t, h, h, save_input=False, cast_input=f32, split=T.COLUMN)
    attention_core(sec, run, b, s, g, d)  # scores, softmax, context (analytic/attention.py)
    sec.linear("attn_out", S.ATTN_OUTPUT, t, h, h, split=T.ROW)
    if run.dropout:
        sec.dropout("attn_out_dropout", S.ATTN_ADD_NORM, t * h)
    sec.add("residual1", S.ATTN_ADD_NORM, t * h, promotes=f32)
    sec.layernorm("attn_norm", S.ATTN_ADD_NORM, t, h)
    sec.grad_sum("residual2.grad_sum", S.FFN_ADD_NORM, t * h)  # norm output: FFN1 + residual
    sec.linear("ffn1", S.FFN1, t, h, f, cast_input=f32, split=T.COLUMN)
    sec.pointwise("act", S.FFN_ACT, C.ACTIVATION, t * f, m.activation, split=T.SPLIT)
    sec.linear("ffn2", S.FFN2, t, f, h, split=T.ROW)
    if run.dropout:
        sec.dropout("ffn_dropout", S.FFN_ADD_NORM, t * h)
    sec.add("residual2", S.FFN_ADD_NORM, t * h, promotes=f32)
    sec.layernorm("ffn_norm", S.FFN_ADD_NORM, t, h)
    return sec


def masked_positions(run: RunConfig) -> int:
    """Rows the MLM head runs on: every token position computed, or 15% of each sequence
    (rounded up): of `seq` when padded, of each real sequence's length when unpadded or
    packed (`bertscope.packing`)."""
    if not run.masked_lm_only:
        return computed_tokens(run)
    if run.packing is not Packing.NONE:
        return per_sequence(run, lambda L: -(-L * 15 // 100))
    return run.batch * -(-run.seq * 15 // 100)


def gathers_masked(run: RunConfig) -> bool:
    """Whether the MLM head gathers the masked positions first: masked-LM-only runs with
    sequences longer than one token (a 1-token sequence's 15%, rounded up, is the token). A
    sweep's group of configurations shares the answer (`sweep.grid` splits on it)."""
    return bool(run.masked_lm_only) and bool(np.all(np.asarray(run.seq) > 1))


def _heads(m: ModelConfig, run: RunConfig, ab: int) -> Section:
    sec = Section(-1, ab, PipelineStage.LAST, **cast_policy(run))
    h, e, v = m.hidden, m.emb, m.vocab_size
    b = sequences(run)  # the pooler and NSP run once per sequence (packed: several a row)
    t = computed_tokens(run)
    tm = masked_positions(run)
    if gathers_masked(run):
        sec.fwd.append(sec.row("mlm_gather", S.MLM_HEAD, C.DATA_MOVEMENT, P.FORWARD,
                               elements=tm * h, bytes_read=ab * tm * h + INDEX_BYTES * tm,
                               bytes_written=ab * tm * h))
        sec.on_backward(sec.row("mlm_gather.grad", S.MLM_HEAD, C.DATA_MOVEMENT,
                                P.BACKWARD_DATA, elements=tm * h,
                                bytes_read=ab * tm * h + INDEX_BYTES * tm,
                                bytes_written=ab * (t * h + tm * h)))
    if m.has_pooler_head:
        # the last hidden state feeds the MLM head and the pooler's [CLS] slice
        sec.grad_sum("last_hidden.grad_sum", S.NSP_HEAD, b * h)
    d_mlm = e if m.family.factorized_embedding else h
    sec.linear("mlm_transform", S.MLM_HEAD, tm, h, d_mlm, cast_input=fp32_stream(m))
    sec.pointwise("mlm_act", S.MLM_HEAD, C.ACTIVATION, tm * d_mlm, m.activation)
    sec.layernorm("mlm_norm", S.MLM_HEAD, tm, d_mlm)
    # weight tied to word embeddings; column-parallel over the vocabulary
    sec.linear("mlm_decoder", S.MLM_HEAD, tm, d_mlm, v, split=T.COLUMN)
    # the tied weight's two gradients (embedding scatter, decoder wgrad) are summed, on the
    # last stage, split by vocabulary as the decoder is
    sec.on_backward(sec.row("tied_embedding.grad_sum", S.EMBEDDING, C.ELEMENTWISE,
                            P.BACKWARD_WEIGHT, split=T.SPLIT, elements=v * e, flops=v * e,
                            bytes_read=2 * ab * v * e, bytes_written=ab * v * e))
    if m.has_pooler_head:
        sec.linear("pooler", S.NSP_HEAD, b, h, h, cast_input=fp32_stream(m))
        sec.pointwise("pooler_tanh", S.NSP_HEAD, C.ACTIVATION, b * h, "tanh")
        sec.linear("nsp_classifier", S.NSP_HEAD, b, h, 2)
    sec.cross_entropy("mlm_loss", tm, v, split=T.SPLIT)  # vocabulary-parallel
    if m.has_pooler_head:
        sec.cross_entropy("nsp_loss", b, 2)
    return sec


def _shared_grad_sum(m: ModelConfig, ab: int) -> Op:
    """ALBERT: each layer after the first adds its weight gradients into the shared layer's
    (a `later` row of the backward block: layers 1..L-1)."""
    n = layer_params(m)
    return Op("shared_layer.grad_sum", 0, S.OTHER, C.ELEMENTWISE, P.BACKWARD_WEIGHT,
              elements=n, flops=n, bytes_read=2 * ab * n, bytes_written=ab * n)


def encoder_blocks(m: ModelConfig, run: RunConfig) -> list[Block]:
    """All rows of one training iteration (one optimizer step) of an encoder model, as blocks
    in execution order: embeddings, the layers' forward, heads (forward and backward), the
    layers' backward (last layer first; recompute first when checkpointing), the embeddings'
    backward, gradient accumulation, the optimizer. The pair is checked where it is made
    (`Job`, `parallel.Workload`, `sweep.grid`), not here."""
    ab = run.precision.act_bytes
    later = [_shared_grad_sum(m, ab)] if m.share_layers else []
    return one_stack_blocks(m, run, _embeddings(m, run, ab), _layer(m, run, ab, 0),
                            _heads(m, run, ab), later)


def encoder_ops(m: ModelConfig, run: RunConfig) -> list[Op]:
    """All rows of one training iteration of an encoder model, one per op site (every layer's
    rows: `expand` of `encoder_blocks`)."""
    return expand(encoder_blocks(m, run), m.num_layers, run.micro_batches)


__all__ = ["encoder_blocks", "encoder_ops", "masked_positions"]
