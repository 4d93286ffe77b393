"""Every op of one XLNet pretraining iteration (Yang et al. 2019), as Hugging Face's
XLNetLMHeadModel runs it (transformers/models/xlnet/modeling_xlnet.py) with a permutation
mask, a target mapping, segment ids and the previous segment's memory.

Sizes: b sequences of s tokens, m = `mem_len` cached positions, K = m + s key positions,
R = m + 2s relative distances (the encodings run from K down to -s), P = s // k predicted
tokens per sequence (`partial_prediction` k: the last 1/k of each permutation, k = 6 in the
paper), n heads of d, h = n d. Per layer (post-norm, as the paper's Transformer-XL layers):

- memory: the cached states (m x b x h) concatenated before the layer input (`MEMORY`); K
  and V project the m + s positions (Hugging Face's einsum with (h, n, d) weights, a GEMM),
  Q the s positions, W_r the R encodings (a GEMM whose input needs no gradient: `REL_POS`).
- content stream (queries of the s positions): the r_w, r_r and r_s biases added to Q; the
  content scores (Q K^T), the position scores over the R distances and their relative shift
  (`rel_shift_bnij`: a copy and an index_select to K columns), the segment scores (Q against
  the (2, n, d) segment embedding, then the (s, K, b, 2) segment matrix contracted with them),
  their sum, the 1/sqrt(d) scale, the mask, softmax, dropout, the context over the K values,
  the output projection (no bias), dropout, residual add, LayerNorm.
- query stream (P positions per sequence, from the learned mask embedding in layer 0): Q of
  g, mapped to the s positions by the target mapping (a batched product by a constant), the
  same core as the content stream (the query mask), mapped back to P positions, the output
  projection, dropout, residual, LayerNorm (`QUERY_STREAM`: the core and mappings; its
  projections, position terms and norms are the shared sublayers').
- the feed-forward (Linear h -> f, GELU, dropout, Linear f -> h, dropout, residual,
  LayerNorm), on the P query-stream rows and then on the s content rows.
- the layer input (m of its last positions) cached as the next segment's memory (no grad).

After the stack: dropout of the query stream, the LM head (h -> V with a bias, its weight
tied to the word embedding) on the b P predicted tokens only, and the cross-entropy.
The core runs as `run.attention` says: eager kernels (Hugging Face's), one fused
scale-mask-softmax-dropout kernel, or (sdpa) one fused kernel over Q + r_w, K and V taking
the position and segment scores (computed as above) as its additive bias.
Backward: the last layer's content stream after K and V feeds nothing the loss reads, so
autograd runs none of its backward (the `last` block); gradients of every product with a
constant operand (the encodings, the target mapping, the segment matrix) are not computed.
"""

from __future__ import annotations

from bertscope.analytic.attention import LSE_BYTES, _flash_rows, _fused_softmax
from bertscope.analytic.blocks import Block, Repeat
from bertscope.analytic.optimizer import accumulates, accumulation_blocks, optimizer_blocks
from bertscope.analytic.params import GroupLayout, ParamGroup, StackGroup
from bertscope.analytic.section import INDEX_BYTES, Section, cast_policy, checkpointed
from bertscope.config import Attention, ModelConfig, RunConfig
from bertscope.taxonomy import Category, Phase, PipelineStage, Sublayer, TensorSplit

C, P, S, T = Category, Phase, Sublayer, TensorSplit

SINUSOID_FLOPS = 2
"""FLOPs per element of the relative encodings: the sin or cos of one angle (the outer
product of distances and inverse frequencies is counted with it)."""


def predicted(m: ModelConfig, run: RunConfig) -> int:
    """Predicted tokens per sequence: seq // K (`ModelConfig.partial_prediction`)."""
    return run.seq // m.partial_prediction


def _bias_add(sec: Section, name: str, sub: Sublayer, e: int, h: int) -> None:
    """Q + a per-head bias (r_w, r_r, r_s; n x d = h elements) broadcast over the e elements
    of Q; backward passes dy to Q and reduces it over the tokens into the bias's gradient."""
    a = sec.ab
    sec.fwd.append(sec.row(name, sub, C.ELEMENTWISE, P.FORWARD, split=T.SPLIT, elements=e,
                           flops=e, bytes_read=a * (e + h), bytes_written=a * e))
    sec.on_backward(sec.row(f"{name}.bias_grad", sub, C.REDUCTION, P.BACKWARD_WEIGHT,
                            split=T.SPLIT, elements=e, flops=e, bytes_read=a * e,
                            bytes_written=a * h))


def _core(sec: Section, m: ModelConfig, run: RunConfig, stream: str, score: Sublayer,
          softmax: Sublayer, context: Sublayer) -> None:
    """One stream's relative attention core (`rel_attn_core`) for s queries over the K keys
    (the sizes in the module docstring); `stream` prefixes the row names."""
    b, s, h, n, d = run.batch, run.seq, m.hidden, m.heads, m.head_dim
    kl, r = m.mem_len + s, m.mem_len + 2 * s
    g, t = b * n, b * s
    e = g * s * kl  # score elements
    sec.grad_sum(f"{stream}.q.grad_sum", score, t * h, n=2)
    _bias_add(sec, f"{stream}.r_w_bias", score, t * h, h)
    _bias_add(sec, f"{stream}.r_r_bias", S.REL_POS, t * h, h)
    _bias_add(sec, f"{stream}.r_s_bias", score, t * h, h)
    sec.bmm(f"{stream}.pos_score", S.REL_POS, g, s, r, d, saved_elems=t * h + b * r * h,
            split=T.SPLIT)
    # rel_shift_bnij: the (b, n, R, s) view sliced past its first row is copied, then K of
    # its R - 1 columns selected (index_select; backward: index_add into zeros, copy back)
    sec.copy(f"{stream}.rel_shift", S.REL_POS, g * s * (r - 1))
    sec.copy(f"{stream}.rel_shift_select", S.REL_POS, e)
    # segment scores: Q + r_s (s b, n, d) against the (2, n, d) segment embedding, then the
    # constant (s, K, b, 2) segment matrix contracted with the two per-head scores
    sec.bmm(f"{stream}.seg_score", score, n, t, 2, d, saved_elems=t * h + 2 * h,
            split=T.SPLIT)
    sec.bmm(f"{stream}.seg_matrix", score, t, kl, n, 2, saved_elems=0, split=T.SPLIT,
            a_grad=False)
    sec.add(f"{stream}.add_seg", score, e, t * n * 2, split=T.SPLIT)
    mask = b * s * kl  # the (s, K, b) mask, scaled by 1e30 in each layer and stream
    sec.fwd.append(sec.row(f"{stream}.mask_scale", score, C.ELEMENTWISE, P.FORWARD,
                           elements=mask, flops=mask, bytes_read=sec.ab * mask,
                           bytes_written=sec.ab * mask))
    if run.attention is Attention.SDPA:  # one fused kernel: Q + r_w, K, V, bias bd + ef
        _flash_rows(sec, run.dropout, e, t * h, b * kl * h, LSE_BYTES * g * s, e + mask,
                    S.ATTN_FUSED if score is S.ATTN_SCORE else score, shape=(s, kl, d, g))
        return
    sec.bmm(f"{stream}.score", score, g, s, kl, d, saved_elems=t * h + b * kl * h,
            split=T.SPLIT)
    sec.add(f"{stream}.add_pos", score, e, split=T.SPLIT)
    if run.attention is Attention.FUSED_SOFTMAX:  # scale, mask, softmax, dropout: one kernel
        _fused_softmax(sec, run.dropout, e, mask, softmax)
    else:
        sec.scale(f"{stream}.score_scale", score, e, split=T.SPLIT)  # / sqrt(d)
        sec.add(f"{stream}.score_mask", score, e, mask, split=T.SPLIT)
        sec.softmax(f"{stream}.softmax", softmax, e, split=T.SPLIT)
        if run.dropout:
            sec.dropout(f"{stream}.attn_dropout", softmax, e, keeps_output=True,
                        split=T.SPLIT)
    # the einsum writes the context as (s, b, n, d): heads merge as a view, no copy
    sec.bmm(f"{stream}.context", context, g, s, d, kl, saved_elems=b * kl * h, split=T.SPLIT)


def _post(sec: Section, run: RunConfig, h: int, rows: int, name: str, sub: Sublayer) -> None:
    """`post_attention`: the output projection (no bias), dropout, residual add, LayerNorm."""
    sec.linear(f"{name}.attn_out", sub, rows, h, h, bias=False, split=T.ROW)
    if run.dropout:
        sec.dropout(f"{name}.attn_out_dropout", S.ATTN_ADD_NORM, rows * h)
    sec.add(f"{name}.residual1", S.ATTN_ADD_NORM, rows * h)
    sec.layernorm(f"{name}.attn_norm", S.ATTN_ADD_NORM, rows, h)


def _ffn(sec: Section, m: ModelConfig, run: RunConfig, rows: int, name: str) -> None:
    """XLNetFeedForward on `rows` tokens: layer_1, GELU, dropout, layer_2, dropout, residual
    add, LayerNorm; the norm's input (the attention output) also feeds the residual."""
    h, f = m.hidden, m.intermediate
    sec.grad_sum(f"{name}.ffn_input.grad_sum", S.FFN_ADD_NORM, rows * h)
    sec.linear(f"{name}.ffn1", S.FFN1, rows, h, f, split=T.COLUMN)
    sec.pointwise(f"{name}.act", S.FFN_ACT, C.ACTIVATION, rows * f, m.activation,
                  split=T.SPLIT)
    if run.dropout:
        sec.dropout(f"{name}.act_dropout", S.FFN_ACT, rows * f, split=T.SPLIT)
    sec.linear(f"{name}.ffn2", S.FFN2, rows, f, h, split=T.ROW)
    if run.dropout:
        sec.dropout(f"{name}.ffn_dropout", S.FFN_ADD_NORM, rows * h)
    sec.add(f"{name}.residual2", S.FFN_ADD_NORM, rows * h)
    sec.layernorm(f"{name}.ffn_norm", S.FFN_ADD_NORM, rows, h)


def _weight_sums(sec: Section, m: ModelConfig) -> None:
    """Weights both streams use (Q, O, the feed-forward, both norms): autograd adds their two
    gradients (backward only)."""
    h, f = m.hidden, m.intermediate
    sec.grad_sum("shared_weights.grad_sum", S.OTHER, 2 * h * h + 2 * h * f + f + 5 * h)


def _layer(m: ModelConfig, run: RunConfig, ab: int, *, content_grads: bool) -> Section:
    """One layer in execution order. `content_grads=False`: the last layer, whose content
    stream after K and V runs forward only (its rows' backward dropped)."""
    layer = 0 if content_grads else m.num_layers - 1
    sec = Section(layer, ab, PipelineStage.STACK, **cast_policy(run))
    fwd_only = sec if content_grads else Section(layer, ab, PipelineStage.STACK,
                                                 **cast_policy(run))
    b, s, h, mem = run.batch, run.seq, m.hidden, m.mem_len
    t, tg, kl, r = b * s, b * predicted(m, run), b * (mem + s), b * (mem + 2 * s)
    # the layer input: into the memory concatenation (K, V), Q and the residual
    sec.grad_sum("query_input.grad_sum", S.QKV, tg * h)  # Q of g and its residual
    if content_grads:  # (the last layer's content stream has no backward)
        sec.grad_sum("input.grad_sum", S.QKV, t * h, n=2)
        _weight_sums(sec, m)
    a = ab
    sec.fwd.append(sec.row("memory_concat", S.MEMORY, C.DATA_MOVEMENT, P.FORWARD,
                           elements=kl * h, bytes_read=a * kl * h, bytes_written=a * kl * h))
    sec.grad_sum("kv_input.grad_sum", S.QKV, kl * h)  # K and V read the concatenation
    sec.linear("k", S.QKV, kl, h, h, bias=False, split=T.COLUMN)  # keeps [mem; h] for K, V
    sec.linear("v", S.QKV, kl, h, h, bias=False, save_input=False, split=T.COLUMN)
    # backward copies one (m + s, b, n, d) key/value gradient back from the heads layout, and
    # the query stream's Q gradient (measured: tests/integration/test_head_copies.py)
    sec.copy("kv_heads", S.QKV, kl * h, forward=False)
    if content_grads:  # both streams read K, V and the projected encodings
        sec.grad_sum("kv_heads.grad_sum", S.QKV, 2 * kl * h)
        sec.grad_sum("pos_heads.grad_sum", S.REL_POS, r * h)
    # the encodings are kept once for every layer (the embeddings' row)
    sec.linear("r", S.REL_POS, r, h, h, bias=False, save_input=False, input_grad=False,
               split=T.COLUMN)
    fwd_only.linear("q", S.QKV, t, h, h, bias=False, split=T.COLUMN)
    _core(fwd_only, m, run, "content", S.ATTN_SCORE, S.ATTN_SOFTMAX, S.ATTN_CONTEXT)
    _post(fwd_only, run, h, t, "content", S.ATTN_OUTPUT)
    if not content_grads:
        sec.fwd += fwd_only.fwd
    # the query stream: Q of g mapped to the s positions, the core, mapped back
    sec.linear("query.q", S.QKV, tg, h, h, bias=False, split=T.COLUMN)
    sec.copy("query.q_heads", S.QKV, tg * h, forward=False)
    sec.bmm("query.map_in", S.QUERY_STREAM, b, s, h, predicted(m, run), saved_elems=0,
            split=T.SPLIT, a_grad=False)
    _core(sec, m, run, "query", S.QUERY_STREAM, S.QUERY_STREAM, S.QUERY_STREAM)
    sec.bmm("query.map_out", S.QUERY_STREAM, b, predicted(m, run), h, s, saved_elems=0,
            split=T.SPLIT, a_grad=False)
    _post(sec, run, h, tg, "query", S.ATTN_OUTPUT)
    _ffn(sec, m, run, tg, "query")
    mark = len(fwd_only.fwd)
    _ffn(fwd_only, m, run, t, "content")
    if not content_grads:
        sec.fwd += fwd_only.fwd[mark:]
    # the layer input cached as the next segment's memory: cat([mem, h])[-mem_len:], detached;
    # the m x b x h it keeps are state carried to the next iteration, not saved for this
    # one's backward: `analytic.memory.segment_memory_bytes` counts them
    sec.fwd.append(sec.row("memory_cache", S.MEMORY, C.DATA_MOVEMENT, P.FORWARD,
                           elements=kl * h, bytes_read=a * kl * h, bytes_written=a * kl * h))
    return sec


def _inputs(m: ModelConfig, run: RunConfig, ab: int) -> Section:
    """Before the stack: the word embedding and the mask embedding of the query stream (each
    dropped out), the segment matrix, the two attention masks, the relative encodings."""
    sec = Section(-1, ab, PipelineStage.FIRST, **cast_policy(run))
    b, s, h, mem = run.batch, run.seq, m.hidden, m.mem_len
    p, kl, r = predicted(m, run), mem + s, mem + 2 * s
    sec.lookup("word_embedding", b * s, m.vocab_size, h)
    if run.dropout:
        sec.dropout("embedding_dropout", S.EMBEDDING, b * s * h)
    # mask_emb (1, 1, h) expanded to (P, b, h): its gradient sums over the b P rows
    sec.on_backward(sec.row("mask_emb.grad_sum", S.EMBEDDING, C.REDUCTION, P.BACKWARD_WEIGHT,
                            elements=b * p * h, flops=b * p * h, bytes_read=ab * b * p * h,
                            bytes_written=ab * h))
    if run.dropout:
        sec.dropout("mask_emb_dropout", S.EMBEDDING, b * p * h)
    # segment matrix (s, K, b, 2): ids compared, one-hot, float; kept for every layer
    seg = s * kl * b
    sec.fwd.append(sec.row("segment_matrix", S.EMBEDDING, C.ELEMENTWISE, P.FORWARD,
                           elements=2 * seg, flops=seg, bytes_read=2 * INDEX_BYTES * seg,
                           bytes_written=ab * 2 * seg, saved_bytes=ab * 2 * seg))
    # the permutation mask with the memory's zeros, and the content stream's (its own
    # position visible): (s, K, b) each; the target mapping (b, P, s) kept for every layer
    sec.fwd.append(sec.row("attention_masks", S.EMBEDDING, C.ELEMENTWISE, P.FORWARD,
                           elements=2 * seg, flops=2 * seg, bytes_read=ab * 2 * seg,
                           bytes_written=ab * 2 * seg, saved_bytes=ab * b * p * s))
    # the sinusoidal encodings of the R distances (sin, cos), broadcast over the batch and
    # dropped out: every layer's W_r reads (and keeps) the same b R h tensor
    sec.fwd.append(sec.row("relative_encoding", S.REL_POS, C.ELEMENTWISE, P.FORWARD,
                           elements=r * h, flops=SINUSOID_FLOPS * r * h, bytes_read=4 * r,
                           bytes_written=ab * r * h))
    if run.dropout:
        sec.dropout("relative_encoding_dropout", S.REL_POS, b * r * h)
    last = sec.fwd[-1]
    sec.fwd[-1] = last._replace(saved_bytes=last.saved_bytes + ab * b * r * h)
    return sec


def _head(m: ModelConfig, run: RunConfig, ab: int) -> Section:
    """The query stream's output dropped out and made batch-first, the LM head on the b P
    predicted tokens (its weight tied to the word embedding, its bias its own), the loss."""
    sec = Section(-1, ab, PipelineStage.LAST, **cast_policy(run))
    h, v = m.hidden, m.vocab_size
    u = run.batch * predicted(m, run)
    if run.dropout:
        sec.dropout("output_dropout", S.LM_HEAD, u * h)
    sec.copy("output_permute", S.LM_HEAD, u * h, split=T.REPLICATED)
    sec.linear("lm_loss", S.LM_HEAD, u, h, v, split=T.COLUMN)
    sec.on_backward(sec.row("tied_embedding.grad_sum", S.EMBEDDING, C.ELEMENTWISE,
                            P.BACKWARD_WEIGHT, split=T.SPLIT, elements=v * h, flops=v * h,
                            bytes_read=2 * ab * v * h, bytes_written=ab * v * h))
    sec.cross_entropy("lm_loss.loss", u, v, split=T.SPLIT)
    return sec


def xlnet_blocks(m: ModelConfig, run: RunConfig) -> list[Block]:
    """All rows of one XLNet pretraining iteration, as blocks in execution order: the
    inputs, the layers' forward, head and loss (forward and backward), the last layer's
    backward (query stream, K, V and W_r only), the other layers' backward (last first;
    recomputation first), the inputs' backward, gradient accumulation, the optimizer. Full
    checkpointing keeps both streams' inputs: s + P tokens per sequence (`Block.seq`)."""
    ab = run.precision.act_bytes
    full = _layer(m, run, ab, content_grads=True)
    last = _layer(m, run, ab, content_grads=False)
    inputs, head = _inputs(m, run, ab), _head(m, run, ab)
    fwd, rerun = checkpointed(full.fwd, run.checkpoint)
    _, rerun_last = checkpointed(last.fwd, run.checkpoint)
    streams = run.seq + predicted(m, run)
    blocks = [
        Block(inputs.fwd, micro=True),
        Block(fwd, Repeat.EACH_LAYER, micro=True, seq=streams),
        Block(head.fwd + head.bwd(), micro=True),
        Block(rerun_last + last.bwd(), Repeat.EACH_LAYER_REVERSED, micro=True, layers=1,
              first=m.num_layers - 1, seq=streams),
        Block(rerun + full.bwd(), Repeat.EACH_LAYER_REVERSED, micro=True,
              layers=m.num_layers - 1, seq=streams),
        Block(inputs.bwd(), micro=True),
    ]
    if accumulates(run):
        blocks += accumulation_blocks(m, run)
    return blocks + optimizer_blocks(m, run)


def layer_params(m: ModelConfig) -> int:
    """One XLNetLayer: q, k, v, o, r (h x n x d each), the r_r, r_s, r_w biases (n x d),
    the segment embedding (2 x n x d), two LayerNorms, layer_1 and layer_2 with biases."""
    h, f = m.hidden, m.intermediate
    return 5 * h * h + 5 * h + 2 * (2 * h) + (h * f + f) + (f * h + h)


def xlnet_layout(m: ModelConfig, pretraining: bool = True) -> GroupLayout:
    """XLNet's parameter groups as XLNetModel builds them (the word embedding and the mask
    embedding, the layers with untied relative biases), and XLNetLMHeadModel's LM-head bias
    (its weight is the word embedding). Tensor parallelism splits the word table by
    vocabulary, the projections and per-head biases by heads and layer_1/layer_2 by width;
    the LayerNorms, layer_2's bias and the mask embedding stay whole."""
    h, f, v = m.hidden, m.intermediate, m.vocab_size
    before = [ParamGroup("embedding", -1, v * h + h, 2, split=v * h)]
    layer = ParamGroup("layer", 0, layer_params(m), 17, split=5 * h * h + 5 * h + 2 * h * f + f)
    after = [ParamGroup("heads", -1, v, 1, split=v)] if pretraining else []
    return GroupLayout(before, [StackGroup(layer)], after)


__all__ = ["layer_params", "predicted", "xlnet_blocks", "xlnet_layout"]
