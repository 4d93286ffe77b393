"""Every op of one causal-LM pretraining iteration of a decoder-only Transformer: GPT-2 and the
GPT-3 sizes (`Family.GPT2`) and Llama-style models (`Family.LLAMA`).

Written the way Hugging Face's GPT2LMHeadModel and LlamaForCausalLM run eager training, with
the op vocabulary of `analytic.section`:

- **GPT-2** (Radford et al. 2019): token and learned position embeddings, embedding dropout;
  pre-LayerNorm layers whose Q, K and V come from one fused projection (`c_attn`, h -> 3h),
  causal attention over the full s x s scores (scaled by 1/sqrt(d)), attention and residual
  dropout, a 4h GELU (tanh approximation) feed-forward; a final LayerNorm; the LM head tied to
  the token embedding.
- **Llama** (Touvron et al. 2023): token embedding only; pre-RMSNorm layers with separate,
  bias-free Q, K, V projections, grouped-query attention (`kv_heads` key/value heads; eager
  kernels copy each to its query heads, `repeat_kv`), rotary embeddings applied to Q and K
  (the cos/sin tables computed once per forward from a (d/2 x 1) x (1 x s) product), a SwiGLU
  feed-forward (down(silu(gate(x)) * up(x))), no dropout; a final RMSNorm; an untied LM head.

Attention FLOPs follow the convention FlopCounterMode and Narayanan et al. 2021 count: the full
s x s score and context products, masked half included (an eager causal kernel computes it; a
FlashAttention kernel may skip masked tiles: `Attention.SDPA` rows count the same FLOPs). The
loss is a cross-entropy over every position's vocabulary logits (the last position's label is
padding). Megatron-LM's tensor-parallel split (Shoeybi et al. 2019): Q, K, V, gate, up and the
LM head column-parallel, the attention output and the down projection row-parallel, the
attention core, rotary, activation and gating split by heads or FFN width, norms, residual
adds and hidden dropouts replicated.
"""

from __future__ import annotations

from bertscope.analytic.attention import attention_core
from bertscope.analytic.blocks import Block
from bertscope.analytic.iteration import one_stack_blocks
from bertscope.analytic.params import GroupLayout, ParamGroup, StackGroup
from bertscope.analytic.section import Section, cast_policy
from bertscope.config import ModelConfig, Positions, RunConfig
from bertscope.packing import Packing, active, computed_tokens
from bertscope.taxonomy import Category, Phase, PipelineStage, Sublayer, TensorSplit

C, P, S, T = Category, Phase, Sublayer, TensorSplit

ROPE_BYTES = 4
"""Rotary cos/sin tables are computed in fp32 (Hugging Face disables autocast there)."""


def has_dropout(m: ModelConfig, run: RunConfig) -> bool:
    """Dropout layers run: the run asks for them and the family has them (Llama has none)."""
    return bool(run.dropout) and m.family.dropout


def _embeddings(m: ModelConfig, run: RunConfig, ab: int) -> Section:
    sec = Section(-1, ab, PipelineStage.FIRST, **cast_policy(run))
    s, h = run.seq, m.hidden
    t = computed_tokens(run)  # b s, or the real tokens unpadded (bertscope.packing)
    sec.lookup("word_embeddings", t, m.vocab_size, h)
    if m.family.positions is Positions.LEARNED:
        sec.lookup("position_embeddings", s, m.max_positions, h)
        sec.add("add_position", S.EMBEDDING, t * h, s * h)
        # the position add broadcasts over the batch: its backward sums dy over b
        sec.on_backward(sec.row("add_position.grad_sum", S.EMBEDDING, C.REDUCTION,
                                P.BACKWARD_DATA, elements=t * h, flops=t * h,
                                bytes_read=ab * t * h, bytes_written=ab * s * h))
        if has_dropout(m, run):
            sec.dropout("embedding_dropout", S.EMBEDDING, t * h)
    else:  # rotary tables: inv_freq (d/2 x 1) @ positions (1 x s), then cos and sin
        d = m.head_dim
        sec.fwd.append(sec.row("rotary_freqs", S.ROTARY, C.BATCHED_GEMM, P.FORWARD, m=d // 2,
                               n=s, k=1, batch=1, flops=d * s,
                               bytes_read=ROPE_BYTES * (d // 2 + s),
                               bytes_written=ROPE_BYTES * s * d // 2))
        sec.fwd.append(sec.row("rotary_tables", S.ROTARY, C.ELEMENTWISE, P.FORWARD,
                               elements=2 * s * d, flops=2 * s * d,
                               bytes_read=ROPE_BYTES * s * d,
                               bytes_written=ROPE_BYTES * 2 * s * d))
    return sec


def prenorm_layer(m: ModelConfig, run: RunConfig, ab: int, *, causal: bool = True) -> Section:
    """One pre-norm layer (see the module docstring for each family's layout): causal
    self-attention with its additive mask for the decoders; `causal=False` is a pre-norm
    encoder layer with no mask at all (ViT)."""
    sec = Section(0, ab, PipelineStage.STACK, **cast_policy(run))
    b, s, h, a, f = run.batch, run.seq, m.hidden, m.heads, m.intermediate
    kv, d = m.kv_head_count, m.head_dim
    t, g = computed_tokens(run), b * a  # t: b s, or the real tokens unpadded
    rms, bias, drop = m.family.rms_norm, m.family.bias, has_dropout(m, run)
    unpadded = active(run) and run.packing is Packing.UNPADDED
    # the layer input feeds the first norm and the residual: autograd sums two gradients
    sec.grad_sum("input.grad_sum", S.ATTN_ADD_NORM, t * h)
    sec.norm(rms, "attn_norm", S.ATTN_ADD_NORM, t, h)
    if m.family.fused_qkv:
        sec.linear("qkv", S.QKV, t, h, (a + 2 * kv) * d, bias=bias, cast_input=True,
                   split=T.COLUMN)
    else:  # the norm output feeds Q, K and V: two more gradient sums
        sec.grad_sum("norm_out.grad_sum", S.QKV, t * h, n=2)
        sec.linear("q", S.QKV, t, h, a * d, bias=bias, cast_input=True,
                   split=T.COLUMN)  # saves X once
        sec.linear("k", S.QKV, t, h, kv * d, save_input=False, bias=bias, cast_input=True,
                   split=T.COLUMN)
        sec.linear("v", S.QKV, t, h, kv * d, save_input=False, bias=bias, cast_input=True,
                   split=T.COLUMN)
    if m.family.positions is Positions.ROTARY:
        sec.rotary("rotary_q", t * a * d if unpadded else g * s * d, s, d)
        sec.rotary("rotary_k", t * kv * d if unpadded else b * kv * s * d, s, d)
    attention_core(sec, run, b, s, g, d, kv_groups=m.kv_groups, causal=causal, mask=causal,
                   dropout=drop, fused_qkv=m.family.fused_qkv)
    sec.linear("attn_out", S.ATTN_OUTPUT, t, a * d, h, bias=bias, split=T.ROW)
    if drop:
        sec.dropout("attn_out_dropout", S.ATTN_ADD_NORM, t * h)
    sec.add("residual1", S.ATTN_ADD_NORM, t * h, promotes=True)
    sec.grad_sum("residual1.grad_sum", S.FFN_ADD_NORM, t * h)  # feeds the norm + residual
    sec.norm(rms, "ffn_norm", S.FFN_ADD_NORM, t, h)
    if m.gated_ffn:  # the norm output feeds the gate and up projections
        sec.grad_sum("ffn_in.grad_sum", S.FFN1, t * h)
        sec.linear("ffn_gate", S.FFN_GATE, t, h, f, bias=bias, cast_input=True,
                   split=T.COLUMN)
        sec.linear("ffn1", S.FFN1, t, h, f, save_input=False, bias=bias, cast_input=True,
                   split=T.COLUMN)
        sec.pointwise("act", S.FFN_ACT, C.ACTIVATION, t * f, m.activation, split=T.SPLIT)
        sec.mul("gate_mul", S.FFN_ACT, t * f, split=T.SPLIT)
    else:
        sec.linear("ffn1", S.FFN1, t, h, f, bias=bias, cast_input=True, split=T.COLUMN)
        sec.pointwise("act", S.FFN_ACT, C.ACTIVATION, t * f, m.activation, split=T.SPLIT)
    sec.linear("ffn2", S.FFN2, t, f, h, bias=bias, split=T.ROW)
    if drop:
        sec.dropout("ffn_dropout", S.FFN_ADD_NORM, t * h)
    sec.add("residual2", S.FFN_ADD_NORM, t * h, promotes=True)
    return sec


def _heads(m: ModelConfig, run: RunConfig, ab: int) -> Section:
    sec = Section(-1, ab, PipelineStage.LAST, **cast_policy(run))
    t, h, v = computed_tokens(run), m.hidden, m.vocab_size
    sec.norm(m.family.rms_norm, "final_norm", S.FINAL_NORM, t, h)
    sec.linear("lm_head", S.LM_HEAD, t, h, v, bias=False, cast_input=True,
               split=T.COLUMN)  # vocab-parallel
    if m.tie_word_embeddings:
        # the tied weight's two gradients (embedding scatter, LM head wgrad) are summed on the
        # last stage, split by vocabulary as the head is
        sec.on_backward(sec.row("tied_embedding.grad_sum", S.EMBEDDING, C.ELEMENTWISE,
                                P.BACKWARD_WEIGHT, split=T.SPLIT, elements=v * h,
                                flops=v * h, bytes_read=2 * ab * v * h,
                                bytes_written=ab * v * h))
    sec.cross_entropy("lm_loss", t, v, upcast=True, split=T.SPLIT)  # logits.float()
    return sec


def decoder_blocks(m: ModelConfig, run: RunConfig) -> list[Block]:
    """All rows of one causal-LM training iteration (one optimizer step) of a decoder model,
    as blocks in execution order: embeddings, the layers' forward, the final norm, LM head and
    loss (forward and backward), the layers' backward (last layer first; recompute first when
    checkpointing), the embeddings' backward, gradient accumulation, the optimizer."""
    ab = run.precision.act_bytes
    return one_stack_blocks(m, run, _embeddings(m, run, ab), prenorm_layer(m, run, ab),
                            _heads(m, run, ab))


def _norm_params(m: ModelConfig) -> tuple[int, int]:
    """(parameters, tensors) of one norm of width h: LayerNorm's weight and bias, RMSNorm's
    weight."""
    return (m.hidden, 1) if m.family.rms_norm else (2 * m.hidden, 2)


def decoder_layer_params(m: ModelConfig) -> ParamGroup:
    """Layer 0's parameter group: two norms, the Q/K/V projections (fused in GPT-2), the
    attention output, the feed-forward (gate, up and down when gated). Tensor parallelism
    divides every weight and the column-parallel biases (Q/K/V, gate/up/FFN1); the norms and
    the row-parallel biases (attention output, FFN2) stay whole."""
    h, f, d = m.hidden, m.intermediate, m.head_dim
    q, kv = m.heads * d, m.kv_head_count * d
    bias = m.family.bias
    norm_n, norm_t = _norm_params(m)
    column = [(h, q + 2 * kv)] if m.family.fused_qkv else [(h, q), (h, kv), (h, kv)]
    column += [(h, f)] * (2 if m.gated_ffn else 1)
    row = [(q, h), (f, h)]
    weights = sum(i * o for i, o in column + row)
    col_bias = sum(o for _, o in column) if bias else 0
    row_bias = sum(o for _, o in row) if bias else 0
    tensors = len(column + row) * (2 if bias else 1) + 2 * norm_t
    return ParamGroup("layer", 0, weights + col_bias + row_bias + 2 * norm_n, tensors,
                      split=weights + col_bias)


def decoder_layout(m: ModelConfig, pretraining: bool = True) -> GroupLayout:
    """Parameter groups as Hugging Face builds GPT2LMHeadModel / LlamaForCausalLM
    (`pretraining=False`: GPT2Model / LlamaModel): embeddings (token; GPT-2 also positions),
    one group per layer, the final norm, and an untied LM head."""
    h = m.hidden
    word = m.vocab_size * h  # split by vocabulary under tensor parallelism
    emb, tensors = word, 1
    if m.family.positions is Positions.LEARNED:  # GPT-2's position table
        emb, tensors = emb + m.max_positions * h, 2
    after = [ParamGroup("final_norm", -1, *_norm_params(m))]
    if pretraining and not m.tie_word_embeddings:
        after.append(ParamGroup("heads", -1, word, 1, split=word))
    return GroupLayout([ParamGroup("embedding", -1, emb, tensors, split=word)],
                       [StackGroup(decoder_layer_params(m))], after)


__all__ = ["decoder_blocks", "decoder_layer_params", "decoder_layout", "has_dropout",
           "prenorm_layer"]
