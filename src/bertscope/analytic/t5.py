"""Every op of one span-corruption pretraining iteration of T5 (Raffel et al. 2020), as Hugging
Face's T5ForConditionalGeneration runs it (transformers 5.x).

The encoder runs on `run.seq` input tokens, the decoder on `run.target_seq` target tokens
(T5's pretraining used 512 and 114). One embedding table (`shared`, V x h) feeds both stacks.
Each stack is pre-norm with T5LayerNorm (RMSNorm: no mean, no bias), no biases anywhere, and
a relative position bias: the first layer of each stack buckets the (s x s) relative positions
and looks them up in its own (buckets x heads) table; the resulting (1, heads, s, s) bias is
added to the scores of every layer of that stack (bidirectional buckets in the encoder, causal
in the decoder). Scores are not scaled by 1/sqrt(d) (T5 folds it into the init; Hugging Face
multiplies by `scaling = 1.0`, a no-op not modelled here).

Per layer, with t = b s encoder tokens, u = b s_t decoder tokens, i = heads x d_kv:

- encoder: RMSNorm, Q K V (h -> i), attention core (full s x s scores), O (i -> h), dropout,
  residual; RMSNorm, FFN (v1.0: wi h -> f, ReLU; v1.1: wi_0 and wi_1, gelu_new(wi_0) x wi_1),
  dropout, wo (f -> h), dropout, residual.
- decoder: the same self-attention on u tokens with a causal mask (every product still over
  the full s_t x s_t scores, as an eager kernel computes them and FlopCounterMode counts),
  then cross-attention: RMSNorm, Q of the decoder state (u x h -> i), K and V of the encoder
  output (t x h -> i, in every decoder layer), core over s_t x s scores, O, dropout,
  residual; then the FFN.
- after each stack: a final RMSNorm and dropout; after the decoder, v1.0 scales the output
  by h^-0.5 (its head is tied to the embedding) and the LM head (h -> V, no bias) and the
  cross-entropy run on all u target positions.

Roles (Megatron-LM's T5 split): Q, K, V, wi, wi_0, wi_1 and the LM head column-parallel;
O and wo row-parallel; the attention cores, the position-bias lookups and adds and the FFN
activation split by heads or FFN width; norms, dropouts, residual adds replicated. Pipeline
stages: the embeddings (and the encoder's bias) first, both stacks' layers in the stack, the
decoder's bias, the final norms, head and loss last.
"""

from __future__ import annotations

from bertscope.analytic.attention import attention_core
from bertscope.analytic.blocks import Block, Repeat
from bertscope.analytic.optimizer import accumulates, accumulation_blocks, optimizer_blocks
from bertscope.analytic.params import GroupLayout, ParamGroup, StackGroup
from bertscope.analytic.section import INDEX_BYTES, Section, cast_policy, checkpointed
from bertscope.config import ModelConfig, RunConfig
from bertscope.taxonomy import Category, Phase, PipelineStage, Sublayer, TensorSplit

C, P, S, T = Category, Phase, Sublayer, TensorSplit

BUCKET_FLOPS = 12
"""Approximate elementwise FLOPs per (query, key) pair of T5's `_relative_position_bucket`
(difference, sign, abs, compare, log, divide, scale, clamp, where, add)."""


def inner(m: ModelConfig) -> int:
    """Width of the attention projections: heads x d_kv (not always h: T5-3B/11B)."""
    return m.heads * m.head_dim


def _embed(m: ModelConfig, run: RunConfig, ab: int, name: str, tokens: int) -> Section:
    """One stack's input: the shared embedding's lookup of its token ids, then dropout."""
    sec = Section(-1, ab, PipelineStage.FIRST, **cast_policy(run))
    sec.lookup(f"{name}.embed_tokens", tokens, m.vocab_size, m.hidden)
    if run.dropout:
        sec.dropout(f"{name}.embed_dropout", S.EMBEDDING, tokens * m.hidden)
    return sec


def _position_bias(m: ModelConfig, ab: int, layer: int, s: int, skv: int,
                   stage: PipelineStage) -> Section:
    """The first layer of a stack computes its relative position bias once: bucket the
    s x skv relative positions (int64), look them up in the (buckets x heads) table, lay the
    result out as (1, heads, s, skv). Its backward scatter-adds into the table. Run once per
    stack, not per layer, so not a stack row: the encoder's is on the first pipeline stage
    (with layer 0), the decoder's counted with the last (the stages have no role for the
    middle stage holding the decoder's first layer)."""
    sec = Section(layer, ab, stage)
    e = s * skv
    sec.fwd.append(sec.row("relative_position_bucket", S.REL_POS_BIAS, C.ELEMENTWISE, P.FORWARD,
                           elements=e, flops=BUCKET_FLOPS * e, bytes_read=2 * INDEX_BYTES * e,
                           bytes_written=INDEX_BYTES * e))
    sec.lookup("relative_attention_bias", e, m.relative_buckets, m.heads, sub=S.REL_POS_BIAS,
               split=T.SPLIT)
    sec.fwd.append(sec.row("position_bias_permute", S.REL_POS_BIAS, C.DATA_MOVEMENT, P.FORWARD,
                           split=T.SPLIT, elements=e * m.heads, bytes_read=ab * e * m.heads,
                           bytes_written=ab * e * m.heads))
    return sec


def _attention(sec: Section, m: ModelConfig, run: RunConfig, b: int, s: int, *,
               causal: bool) -> None:
    """A self-attention sublayer (pre-norm): RMSNorm, Q K V, core with the stack's bias, O,
    dropout, residual add."""
    h, i, t = m.hidden, inner(m), b * s
    sec.grad_sum("attn_input.grad_sum", S.ATTN_ADD_NORM, t * h)  # norm + residual
    sec.rmsnorm("attn_norm", S.ATTN_ADD_NORM, t, h)
    sec.grad_sum("attn_norm.grad_sum", S.QKV, t * h, n=2)  # the norm output feeds Q, K, V
    sec.linear("q", S.QKV, t, h, i, bias=False, split=T.COLUMN)  # saves X once for Q, K, V
    sec.linear("k", S.QKV, t, h, i, bias=False, save_input=False, split=T.COLUMN)
    sec.linear("v", S.QKV, t, h, i, bias=False, save_input=False, split=T.COLUMN)
    attention_core(sec, run, b, s, b * m.heads, m.head_dim, causal=causal, scale=False,
                   bias_elems=m.heads * s * s)
    sec.linear("attn_out", S.ATTN_OUTPUT, t, i, h, bias=False, split=T.ROW)
    if run.dropout:
        sec.dropout("attn_out_dropout", S.ATTN_ADD_NORM, t * h)
    sec.add("residual1", S.ATTN_ADD_NORM, t * h)


def _cross(sec: Section, m: ModelConfig, run: RunConfig, b: int, st: int, s: int) -> None:
    """Cross-attention of the decoder state (st positions) over the encoder output (s
    positions): the encoder output (kept once for every decoder layer, see `_final`) feeds K
    and V of every decoder layer, whose gradients autograd sums (the `later` rows)."""
    h, i, u, t = m.hidden, inner(m), b * st, b * s
    sec.grad_sum("cross_input.grad_sum", S.CROSS_ADD_NORM, u * h)
    sec.rmsnorm("cross_norm", S.CROSS_ADD_NORM, u, h)
    sec.linear("cross_q", S.CROSS_QKV, u, h, i, bias=False, split=T.COLUMN)
    sec.linear("cross_k", S.CROSS_QKV, t, h, i, bias=False, save_input=False, split=T.COLUMN)
    sec.linear("cross_v", S.CROSS_QKV, t, h, i, bias=False, save_input=False, split=T.COLUMN)
    attention_core(sec, run, b, st, b * m.heads, m.head_dim, skv=s, scale=False, cross=True)
    sec.linear("cross_out", S.CROSS_OUTPUT, u, i, h, bias=False, split=T.ROW)
    if run.dropout:
        sec.dropout("cross_out_dropout", S.CROSS_ADD_NORM, u * h)
    sec.add("residual_cross", S.CROSS_ADD_NORM, u * h)


def _ffn(sec: Section, m: ModelConfig, run: RunConfig, t: int) -> None:
    """The feed-forward sublayer: v1.0 wi, ReLU, dropout, wo; v1.1 (gated) gelu_new(wi_0 x)
    times wi_1 x, dropout, wo; then dropout and the residual add."""
    h, f = m.hidden, m.intermediate
    sec.grad_sum("ffn_input.grad_sum", S.FFN_ADD_NORM, t * h)
    sec.rmsnorm("ffn_norm", S.FFN_ADD_NORM, t, h)
    if m.gated_ffn:
        sec.grad_sum("ffn_norm.grad_sum", S.FFN_GATE, t * h)  # feeds wi_0 and wi_1
        sec.linear("ffn_gate", S.FFN_GATE, t, h, f, bias=False, split=T.COLUMN)
        sec.pointwise("act", S.FFN_ACT, C.ACTIVATION, t * f, m.activation, split=T.SPLIT)
        sec.linear("ffn1", S.FFN1, t, h, f, bias=False, save_input=False, split=T.COLUMN)
        sec.mul("gate_mul", S.FFN_ACT, t * f, split=T.SPLIT)
    else:
        sec.linear("ffn1", S.FFN1, t, h, f, bias=False, split=T.COLUMN)
        sec.pointwise("act", S.FFN_ACT, C.ACTIVATION, t * f, m.activation, split=T.SPLIT)
    if run.dropout:
        sec.dropout("ffn_act_dropout", S.FFN_ACT, t * f, split=T.SPLIT)
    sec.linear("ffn2", S.FFN2, t, f, h, bias=False, split=T.ROW)
    if run.dropout:
        sec.dropout("ffn_dropout", S.FFN_ADD_NORM, t * h)
    sec.add("residual2", S.FFN_ADD_NORM, t * h)


def _encoder_layer(m: ModelConfig, run: RunConfig, ab: int) -> Section:
    sec = Section(0, ab, PipelineStage.STACK, **cast_policy(run))
    _attention(sec, m, run, run.batch, run.seq, causal=False)
    _ffn(sec, m, run, run.batch * run.seq)
    return sec


def _decoder_layer(m: ModelConfig, run: RunConfig, ab: int) -> Section:
    sec = Section(m.num_layers, ab, PipelineStage.STACK, **cast_policy(run))
    b, st = run.batch, run.target_seq
    _attention(sec, m, run, b, st, causal=True)
    _cross(sec, m, run, b, st, run.seq)
    _ffn(sec, m, run, b * st)
    return sec


def _final(m: ModelConfig, run: RunConfig, ab: int, name: str, tokens: int, *,
           keeps_output: bool) -> Section:
    """A stack's final RMSNorm and dropout. The encoder's output (`keeps_output`) is kept for
    backward once, by every decoder layer's K and V projections (one tensor)."""
    sec = Section(-1, ab, PipelineStage.LAST, **cast_policy(run))
    h = m.hidden
    sec.rmsnorm(f"{name}.final_norm", S.FINAL_NORM, tokens, h)
    if run.dropout:
        sec.dropout(f"{name}.final_dropout", S.FINAL_NORM, tokens * h)
    if keeps_output:
        last = sec.fwd[-1]
        sec.fwd[-1] = last._replace(saved_bytes=last.saved_bytes + ab * tokens * h)
    return sec


def _head(m: ModelConfig, run: RunConfig, ab: int) -> Section:
    """v1.0's h^-0.5 scaling of the tied head's input, the LM head, the loss."""
    sec = Section(-1, ab, PipelineStage.LAST, **cast_policy(run))
    h, v = m.hidden, m.vocab_size
    u = run.batch * run.target_seq
    if m.tie_word_embeddings:
        sec.scale("lm_head_scale", S.LM_HEAD, u * h)
    sec.linear("lm_head", S.LM_HEAD, u, h, v, bias=False, split=T.COLUMN)
    if m.tie_word_embeddings:  # the LM head's gradient joins the shared table's
        sec.on_backward(sec.row("tied_embedding.grad_sum", S.EMBEDDING, C.ELEMENTWISE,
                                P.BACKWARD_WEIGHT, split=T.SPLIT, elements=v * h, flops=v * h,
                                bytes_read=2 * ab * v * h, bytes_written=ab * v * h))
    sec.cross_entropy("lm_loss", u, v, split=T.SPLIT)
    return sec


def _shared_grad_sum(m: ModelConfig, ab: int) -> Section:
    """The encoder's and the decoder's embedding gradients summed into the shared table."""
    sec = Section(-1, ab, PipelineStage.FIRST)
    n = m.vocab_size * m.hidden
    sec.on_backward(sec.row("shared_embedding.grad_sum", S.EMBEDDING, C.ELEMENTWISE,
                            P.BACKWARD_WEIGHT, elements=n, flops=n, bytes_read=2 * ab * n,
                            bytes_written=ab * n))
    return sec


def t5_blocks(m: ModelConfig, run: RunConfig) -> list[Block]:
    """All rows of one training iteration of T5, as blocks in execution order: the encoder's
    embedding, its bias and layers, its final norm; the decoder's embedding, bias, layers and
    final norm; head and loss (forward and backward); the decoder's backward (last layer
    first, recomputation first: `section.checkpointed`), its bias and embedding backward; the
    encoder's final norm, layers, bias and embedding backward; the shared table's gradient
    sum; gradient accumulation and the optimizer. Decoder layers are numbered after the
    encoder's (`Block.first`)."""
    ab = run.precision.act_bytes
    b, s, st, h, ld = run.batch, run.seq, run.target_seq, m.hidden, m.decoder_layer_count
    enc_emb, dec_emb = _embed(m, run, ab, "encoder", b * s), _embed(m, run, ab, "decoder", b * st)
    enc_bias = _position_bias(m, ab, 0, s, s, PipelineStage.FIRST)
    dec_bias = _position_bias(m, ab, m.num_layers, st, st, PipelineStage.LAST)
    enc, dec = _encoder_layer(m, run, ab), _decoder_layer(m, run, ab)
    enc_final = _final(m, run, ab, "encoder", b * s, keeps_output=True)
    dec_final = _final(m, run, ab, "decoder", b * st, keeps_output=False)
    head = _head(m, run, ab)
    # the encoder output feeds K and V of each decoder layer: 2 ld - 1 gradient adds, one in
    # every decoder layer's backward and one more in each after the first (`later`)
    kv_sum = Section(m.num_layers, ab, PipelineStage.STACK, **cast_policy(run))
    kv_sum.grad_sum("encoder_output.grad_sum", S.CROSS_QKV, b * s * h)
    enc_fwd, enc_rerun = checkpointed(enc.fwd, run.checkpoint)
    dec_fwd, dec_rerun = checkpointed(dec.fwd, run.checkpoint)
    enc_bwd = enc_rerun + enc.bwd()
    dec_bwd = dec_rerun + kv_sum.bwd() + dec.bwd()
    blocks = [
        Block(enc_emb.fwd, micro=True), Block(enc_bias.fwd, micro=True),
        Block(enc_fwd, Repeat.EACH_LAYER, micro=True),
        Block(enc_final.fwd + dec_emb.fwd + dec_bias.fwd, micro=True),
        Block(dec_fwd, Repeat.EACH_LAYER, micro=True, layers=ld, first=m.num_layers, seq=st),
        Block(dec_final.fwd + head.fwd + head.bwd() + dec_final.bwd(), micro=True),
        Block(dec_bwd, Repeat.EACH_LAYER_REVERSED, kv_sum.bwd(), micro=True, layers=ld,
              first=m.num_layers, seq=st),
        Block(dec_bias.bwd() + dec_emb.bwd() + enc_final.bwd(), micro=True),
        Block(enc_bwd, Repeat.EACH_LAYER_REVERSED, micro=True),
        Block(enc_bias.bwd() + enc_emb.bwd() + _shared_grad_sum(m, ab).bwd(), micro=True),
    ]
    if accumulates(run):
        blocks += accumulation_blocks(m, run)
    return blocks + optimizer_blocks(m, run)


def _layer_params(m: ModelConfig, *, decoder: bool) -> int:
    """One layer: self-attention Q K V O (h x i each), one RMSNorm weight per sublayer, the
    FFN (wi or wi_0 and wi_1, wo); the decoder's cross-attention Q K V O."""
    h, i, f = m.hidden, inner(m), m.intermediate
    attn = 4 * h * i
    ffn = (3 if m.gated_ffn else 2) * h * f
    return (2 if decoder else 1) * attn + ffn + (3 if decoder else 2) * h


def t5_layout(m: ModelConfig, pretraining: bool = True) -> GroupLayout:
    """T5's parameter groups as T5ForConditionalGeneration builds them: the shared table,
    the encoder and decoder layers, both stacks' relative-bias tables (in each stack's first
    layer), the two final norms, and (untied, v1.1) the LM head. `pretraining=False`: the bare
    T5Model (no head). Tensor parallelism splits the tables by vocabulary or heads and every
    layer weight; the RMSNorm weights stay whole."""
    h, ffn_tensors = m.hidden, 3 if m.gated_ffn else 2
    v = m.vocab_size * h
    before = [ParamGroup("embedding", -1, v, 1, split=v)]
    enc, dec = _layer_params(m, decoder=False), _layer_params(m, decoder=True)
    enc_group = ParamGroup("encoder_layer", 0, enc, 6 + ffn_tensors, split=enc - 2 * h)
    dec_group = ParamGroup("decoder_layer", m.num_layers, dec, 11 + ffn_tensors,
                           split=dec - 3 * h)
    bias = 2 * m.relative_buckets * m.heads
    after = [ParamGroup("relative_bias", -1, bias, 2, split=bias),
             ParamGroup("final_norms", -1, 2 * h, 2)]
    if pretraining and not m.tie_word_embeddings:
        after.append(ParamGroup("lm_head", -1, v, 1, split=v))
    return GroupLayout(before, [StackGroup(enc_group),
                                StackGroup(dec_group, layers=m.decoder_layer_count)], after)


__all__ = ["t5_blocks", "t5_layout"]
