"""Every op of one language-modelling training iteration of Transformer-XL (Dai et al. 2019),
as the authors' PyTorch code runs it (github.com/kimiyoung/transformer-xl,
`pytorch/mem_transformer.py`: `MemTransformerLM` with `RelPartialLearnableDecoderLayer`,
`AdaptiveEmbedding` and `ProjectedAdaptiveLogSoftmax`; post-norm, its `pre_lnorm=False`
default) and the reference model (`measure/models/transformer_xl.py`) runs it.

With b sequences of s = `run.seq` tokens (the segment, `tgt_len`), m = `mem_len` cached
positions, k = m + s key positions (`klen`), t = b s tokens, a heads of size d, h hidden:

- **adaptive input**: div_val 1: one (V x h) table; div_val > 1: cluster i (ids [c_i,
  c_{i+1})) looks its tokens up in a (c_{i+1} - c_i) x h / div_val^i table and projects them
  to h (a GEMM per cluster on its tokens only); then the sqrt(h) scale and dropout.
- **relative positions** (`Sublayer.REL_POS`, once per forward): the sinusoid table of the k
  key distances (k-1 ... 0) and its dropout; in every layer W_r projects it (k x h -> a d,
  one GEMM independent of the batch).
- **memory** (`Sublayer.MEMORY`): each layer concatenates its m cached input states (from the
  previous segment, detached: no gradient flows into them and nothing of the segment that
  made them is kept) with its s current ones; Q, K and V are one projection of all k positions
  (the queries of the memory positions are computed and dropped, as the authors' `qkv_net`
  over `cat` does); after the forward the last m positions of the concatenation are copied
  out as the next segment's memory (a copy no backward needs, never recomputed).
- **relative attention**: AC = (q + r_w) . k over (s x k) scores per head (batched over b a),
  BD = (q + r_r) . r with r shared by the batch (batched over the a heads, (b s) x k each),
  the relative shift (a copy of the scores padded by one column, viewed back), (AC + BD) /
  sqrt(d), the causal mask over the memory and the segment, softmax, dropout, context,
  output projection, dropout, residual add, LayerNorm; then the ReLU feed-forward, dropout,
  residual add, LayerNorm. r_w and r_r are shared by the layers (the PyTorch code's default).
- **adaptive softmax**: dropout, then the head cluster (the shortlist plus one logit per tail
  cluster; div_val > 1: through its own h -> h projection) on every token, and each tail
  cluster (a projection h -> h / div_val^i, its logits, their log-softmax) on the tokens whose
  target falls in it. Which tokens those are is data: the model's `cluster_shares` says what
  share of tokens each tail cluster gets (the presets assume Zipf's law,
  `presets.zipf_shares`); the head cluster's input tokens are the rest.

The attention core always runs as separate kernels here (relative attention has no fused
kernel in the reference), whatever `run.attention` says. Saved for backward (Korthikanti et
al. 2022's convention, `analytic.section`): the concatenation [memory; h] that the Q/K/V
projection keeps (the memory's rows are needed by the weight gradient), q + r_w, q + r_r, K,
the layer's r, the probabilities and V, the norms' inputs and the FFN's; the position table
once for all layers. The memory itself is state carried between iterations, not a saved
activation: no row of the previous segment is kept for backward.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bertscope.analytic.blocks import Block
from bertscope.analytic.iteration import one_stack_blocks
from bertscope.analytic.params import GroupLayout, ParamGroup, StackGroup
from bertscope.analytic.section import INDEX_BYTES, Section, cast_policy
from bertscope.config import ModelConfig, RunConfig
from bertscope.taxonomy import Category, Phase, PipelineStage, Sublayer, TensorSplit

C, P, S, T = Category, Phase, Sublayer, TensorSplit

def cluster_widths(m: Any) -> list[Any]:
    """Embedding width of each adaptive cluster, h / div_val^i (one entry, h, without
    cutoffs)."""
    return [m.hidden // m.div_val ** i for i in range(len(m.cutoffs) + 1)]


def cluster_tokens(m: Any, tokens: Any) -> list[Any]:
    """Tokens of `tokens` falling in each adaptive cluster under the model's `cluster_shares`,
    rounded to whole tokens (half to even, as the reference's batch maker rounds them); the
    head cluster gets the rest. `tokens`: an int, or an array in a sweep."""
    whole = round if isinstance(tokens, int) else np.round
    tails = [whole(tokens * p) for p in m.cluster_shares]
    return [tokens - sum(tails), *tails]


def table_params(m: Any) -> Any:
    """Parameters of the adaptive input's tables: (V x h) at div_val 1, else each cluster's
    (size x h / div_val^i)."""
    ends = (0, *m.cutoffs, m.vocab_size)
    return sum((hi - lo) * w for lo, hi, w in zip(ends, ends[1:], cluster_widths(m),
                                                   strict=False))


def _move(sec: Section, name: str, sub: Sublayer, phase: Phase, e: Any, read: Any,
          written: Any) -> None:
    """A data-movement row (a copy, a concatenation, a gather) of e elements."""
    row = sec.row(name, sub, C.DATA_MOVEMENT, phase, elements=e, bytes_read=read,
                  bytes_written=written)
    if phase is P.FORWARD:
        sec.fwd.append(row)
    else:
        sec.on_backward(row)


def _embeddings(m: ModelConfig, run: RunConfig, ab: int) -> Section:
    sec = Section(-1, ab, PipelineStage.FIRST, **cast_policy(run))
    h, k, t = m.hidden, run.seq + m.mem_len, run.batch * run.seq
    ends = (0, *m.cutoffs, m.vocab_size)
    if m.div_val == 1:  # one table, h wide
        sec.lookup("word_embeddings", t, m.vocab_size, h)
    else:  # a zeroed (t x h) output each cluster's projected rows are copied into
        _move(sec, "adaptive_zeros", S.EMBEDDING, P.FORWARD, t * h, 0, ab * t * h)
        for i, (n, w) in enumerate(zip(cluster_tokens(m, t), cluster_widths(m), strict=True)):
            _move(sec, f"cluster{i}.select", S.EMBEDDING, P.FORWARD, t,
                  INDEX_BYTES * t, INDEX_BYTES * n)
            sec.lookup(f"cluster{i}.embeddings", n, ends[i + 1] - ends[i], w)
            sec.linear(f"cluster{i}.project", S.EMBEDDING, n, w, h, bias=False,
                       cast_input=True, split=T.REPLICATED)
            _move(sec, f"cluster{i}.index_copy", S.EMBEDDING, P.FORWARD, n * h,
                  ab * n * h, ab * n * h)
            _move(sec, f"cluster{i}.index_copy.grad", S.EMBEDDING, P.BACKWARD_DATA, n * h,
                  ab * n * h, ab * n * h)
    sec.scale("embedding_scale", S.EMBEDDING, t * h)  # x sqrt(h)
    if run.dropout:
        sec.dropout("embedding_dropout", S.EMBEDDING, t * h)
    # the sinusoid table of the k key distances: the (k x h/2) outer product, then sin and
    # cos of it (one FLOP each, as `section._FLOPS` counts transcendental functions)
    kept = 0 if run.dropout else ab * k * h  # W_r's input, kept once for every layer
    sec.fwd.append(sec.row("position_table", S.REL_POS, C.ELEMENTWISE, P.FORWARD,
                           elements=k * h, flops=k * h // 2 + k * h,
                           bytes_read=ab * (k + h // 2), bytes_written=ab * k * h,
                           saved_bytes=kept))
    if run.dropout:
        sec.dropout("position_dropout", S.REL_POS, k * h, keeps_output=True)
    return sec


def txl_layer(m: ModelConfig, run: RunConfig, ab: int) -> Section:
    """One Transformer-XL layer (see the module docstring), post-norm."""
    sec = Section(0, ab, PipelineStage.STACK, **cast_policy(run))
    b, s, h, a, d, f = run.batch, run.seq, m.hidden, m.heads, m.head_dim, m.intermediate
    mem = m.mem_len
    k = s + mem
    t, tk, g, i = b * s, b * k, b * a, a * d
    e = g * s * k  # score elements
    drop = bool(run.dropout)
    # the layer input feeds the concatenation (Q, K, V) and the residual
    sec.grad_sum("input.grad_sum", S.ATTN_ADD_NORM, t * h)
    if mem:  # [memory; h]: no gradient flows into the memory (the backward is a view)
        _move(sec, "memory_concat", S.MEMORY, P.FORWARD, tk * h, ab * tk * h, ab * tk * h)
    sec.linear("qkv", S.QKV, tk, h, 3 * i, bias=False, cast_input=True, split=T.COLUMN)
    # backward: the head-layout gradients copied back before the projection's data
    # gradient, as for GPT-2's fused projection (`analytic.attention`): dq (the last s
    # positions, into the zeroed gradient of all k) and one of dK, dV (the split's
    # concatenation reads the other in place; measured, tests/integration/test_head_copies.py)
    sec.copy("q_heads", S.QKV, t * i, forward=False)
    sec.copy("k_heads", S.QKV, tk * i, forward=False)
    sec.linear("r_net", S.REL_POS, k, h, i, bias=False, save_input=False, input_grad=False,
               cast_input=True, split=T.COLUMN)
    sec.grad_sum("q.grad_sum", S.QKV, t * i)  # q feeds q + r_w and q + r_r
    _bias_add(sec, "r_w_bias", S.ATTN_SCORE, t * i, i)
    _bias_add(sec, "r_r_bias", S.REL_POS, t * i, i)
    sec.bmm("score", S.ATTN_SCORE, g, s, k, d, saved_elems=t * i + tk * i,  # q + r_w, K
            split=T.SPLIT)
    # BD: (q + r_r) laid out as (a, b s, d), times r^T (a, d, k)
    sec.copy("pos_query_heads", S.REL_POS, t * i)
    sec.bmm("pos_score", S.REL_POS, a, t, k, d, saved_elems=t * i + k * i, split=T.SPLIT)
    # relative shift: concatenate a zero column (g s (k + 1)), view, drop the first row
    _move(sec, "rel_shift", S.REL_POS, P.FORWARD, g * s * (k + 1), ab * e,
          ab * (e + g * s))
    _move(sec, "rel_shift.grad", S.REL_POS, P.BACKWARD_DATA, g * s * (k + 1), ab * e,
          ab * (e + g * s))
    sec.add("score_add", S.ATTN_SCORE, e, split=T.SPLIT)  # AC + BD
    sec.scale("score_scale", S.ATTN_SCORE, e, split=T.SPLIT)
    sec.add("score_mask", S.ATTN_SCORE, e, s * k, split=T.SPLIT)  # causal over [mem; seg]
    sec.softmax("softmax", S.ATTN_SOFTMAX, e, split=T.SPLIT)
    if drop:
        sec.dropout("attn_dropout", S.ATTN_SOFTMAX, e, keeps_output=True, split=T.SPLIT)
    sec.bmm("context", S.ATTN_CONTEXT, g, s, d, k, saved_elems=tk * i, split=T.SPLIT)  # V
    sec.copy("context_merge", S.ATTN_CONTEXT, t * i)
    sec.linear("attn_out", S.ATTN_OUTPUT, t, i, h, bias=False, split=T.ROW)
    if drop:
        sec.dropout("attn_out_dropout", S.ATTN_ADD_NORM, t * h)
    sec.add("residual1", S.ATTN_ADD_NORM, t * h)
    sec.norm(False, "attn_norm", S.ATTN_ADD_NORM, t, h)
    sec.grad_sum("attn_norm.grad_sum", S.FFN_ADD_NORM, t * h)  # feeds FFN1 + the residual
    sec.linear("ffn1", S.FFN1, t, h, f, cast_input=True, split=T.COLUMN)
    sec.pointwise("act", S.FFN_ACT, C.ACTIVATION, t * f, m.activation, split=T.SPLIT)
    if drop:
        sec.dropout("ffn_act_dropout", S.FFN_ACT, t * f, split=T.SPLIT)
    sec.linear("ffn2", S.FFN2, t, f, h, split=T.ROW)
    if drop:
        sec.dropout("ffn_dropout", S.FFN_ADD_NORM, t * h)
    sec.add("residual2", S.FFN_ADD_NORM, t * h)
    sec.norm(False, "ffn_norm", S.FFN_ADD_NORM, t, h)
    return sec


def _bias_add(sec: Section, name: str, sub: Sublayer, e: Any, n: Any) -> None:
    """q + a learned (a x d) bias broadcast over the tokens; backward sums dy over them for
    the bias's gradient (dy itself passes through)."""
    sec.add(name, sub, e, n, split=T.SPLIT)
    sec.on_backward(sec.row(f"{name}.grad", sub, C.REDUCTION, P.BACKWARD_WEIGHT,
                            split=T.SPLIT, elements=e, flops=e, bytes_read=sec.ab * e,
                            bytes_written=sec.ab * n))


def memory_update(m: ModelConfig, run: RunConfig, ab: int) -> list[Any]:
    """Each layer's copy of the last `mem_len` positions of its [memory; h] as the next
    segment's memory: forward only, run once (never recomputed), nothing saved."""
    if not m.mem_len:
        return []
    sec = Section(0, ab, PipelineStage.STACK)
    e = run.batch * m.mem_len * m.hidden
    _move(sec, "memory_update", S.MEMORY, P.FORWARD, e, ab * e, ab * e)
    return sec.fwd


def _heads(m: ModelConfig, run: RunConfig, ab: int) -> Section:
    sec = Section(-1, ab, PipelineStage.LAST, **cast_policy(run))
    t, h, v = run.batch * run.seq, m.hidden, m.vocab_size
    nc = len(m.cutoffs)
    ends = (0, *m.cutoffs, v)
    widths = cluster_widths(m)
    if run.dropout:
        sec.dropout("output_dropout", S.LM_HEAD, t * h)
    if not nc:  # one softmax over the vocabulary (enwik8's 204 symbols)
        sec.linear("lm_head", S.LM_HEAD, t, h, v, cast_input=True, split=T.COLUMN)
        sec.cross_entropy("lm_loss", t, v, split=T.SPLIT)
        _tied_grad_sum(sec, m)
        return sec
    head = ends[1] + nc  # the shortlist and one logit per tail cluster
    # the head's weight and bias: the shortlist's rows with the cluster rows appended
    _move(sec, "head_weight_cat", S.LM_HEAD, P.FORWARD, head * widths[0],
          ab * head * widths[0], ab * head * widths[0])
    if m.div_val > 1:
        sec.linear("head_project", S.LM_HEAD, t, h, widths[0], bias=False, cast_input=True,
                   split=T.REPLICATED)
    sec.linear("head_logits", S.LM_HEAD, t, widths[0], head, cast_input=m.div_val == 1,
               split=T.REPLICATED)
    sec.cross_entropy("head_loss", t, head)
    for i, n in enumerate(cluster_tokens(m, t)[1:], start=1):
        w, size = widths[i], ends[i + 1] - ends[i]
        _move(sec, f"cluster{i}.select", S.LM_HEAD, P.FORWARD, n * h, ab * n * h, ab * n * h)
        _move(sec, f"cluster{i}.select.grad", S.LM_HEAD, P.BACKWARD_DATA, t * h,
              ab * n * h, ab * t * h)  # index_select's backward: zeros + index_add
        if m.div_val > 1:
            sec.linear(f"cluster{i}.project", S.LM_HEAD, n, h, w, bias=False,
                       cast_input=True, split=T.REPLICATED)
        sec.linear(f"cluster{i}.logits", S.LM_HEAD, n, w, size, cast_input=m.div_val == 1,
                   split=T.REPLICATED)
        sec.cross_entropy(f"cluster{i}.loss", n, size)
    _tied_grad_sum(sec, m)
    return sec


def _tied_grad_sum(sec: Section, m: ModelConfig) -> None:
    """The tied tables' two gradients (the adaptive input's and the softmax's) summed."""
    if not m.tie_word_embeddings:
        return
    e = table_params(m)
    sec.on_backward(sec.row("tied_embedding.grad_sum", S.EMBEDDING, C.ELEMENTWISE,
                            P.BACKWARD_WEIGHT, elements=e, flops=e,
                            bytes_read=2 * sec.ab * e, bytes_written=sec.ab * e))


def txl_blocks(m: ModelConfig, run: RunConfig) -> list[Block]:
    """All rows of one Transformer-XL training iteration (one optimizer step), as blocks in
    execution order: adaptive input and position table, the layers' forward (each with its
    memory update), the adaptive softmax and loss (forward and backward), the layers'
    backward, the embeddings' backward, gradient accumulation, the optimizer."""
    ab = run.precision.act_bytes
    return one_stack_blocks(m, run, _embeddings(m, run, ab), txl_layer(m, run, ab),
                            _heads(m, run, ab), kept=memory_update(m, run, ab))


def txl_layout(m: ModelConfig, pretraining: bool = True) -> GroupLayout:
    """Parameter groups as the authors' PyTorch `MemTransformerLM` holds them: the adaptive
    input (tables and, with div_val > 1, one projection per cluster), the r_w and r_r biases
    (shared by the layers), one group per layer (Q/K/V, r and output projections without
    biases, two LayerNorms, the biased FFN), and the adaptive softmax (`pretraining=False`:
    without it): biases, the cluster rows, its head projection (div_val > 1) and the tail
    projections unless tied to the input's (`tie_projs`), the tables unless tied."""
    h, a, d, f = m.hidden, m.heads, m.head_dim, m.intermediate
    widths = cluster_widths(m)
    tables = table_params(m)
    n_tables = 1 if m.div_val == 1 else len(widths)
    projs = sum(w * h for w in widths) if m.div_val > 1 else 0
    n_projs = len(widths) if m.div_val > 1 else 0
    emb = ParamGroup("embedding", -1, tables + projs, n_tables + n_projs, split=0)
    r_bias = ParamGroup("rel_pos_bias", -1, 2 * a * d, 2, split=2 * a * d)
    i = a * d
    weights = 3 * h * i + i * h + h * i + h * f + f * h
    layer = ParamGroup("layer", 0, weights + f + h + 2 * 2 * h, 11, split=weights + f)
    after = []
    if pretraining:
        nc = len(m.cutoffs)
        n = m.vocab_size + (nc * widths[0] + nc if nc else 0)
        tensors = n_tables + (2 if nc else 0)  # biases, cluster weight and bias
        if m.div_val > 1:
            own = widths if not m.tie_projs else widths[:1]
            n, tensors = n + sum(w * h for w in own), tensors + len(own)
        if not m.tie_word_embeddings:
            n, tensors = n + tables, tensors + n_tables
        after.append(ParamGroup("heads", -1, n, tensors))
    return GroupLayout([emb, r_bias], [StackGroup(layer)], after)


__all__ = ["cluster_tokens", "cluster_widths", "memory_update", "table_params", "txl_blocks",
           "txl_layer", "txl_layout"]
