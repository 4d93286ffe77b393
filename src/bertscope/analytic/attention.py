"""The attention core of one encoder layer, as each `Attention` implementation runs it.

With g = batch x heads, s = sequence, d = head size, e = g s^2 score elements and a the
activation bytes (Q, K, V are the projections' outputs, t h = g s d elements each):

- **eager** (Hugging Face's BertSelfAttention): score = Q K^T (batched GEMM, 2 g s^2 d FLOPs),
  then scale, additive mask, softmax and dropout as separate kernels, each reading and writing
  the e-element score tensor, then context = P V (2 g s^2 d). Saved for backward (Korthikanti
  et al. 2022): Q, K, the softmax output, the dropout mask and output, V.
- **fused-softmax** (Megatron-LM / apex fused scale-mask-softmax with dropout): the two batched
  GEMMs as in eager, and one kernel between them that reads the scores and the mask once and
  writes the probabilities once (plus, with dropout, the softmax output backward needs and
  the 1-byte mask); its backward is one kernel too. Memory saved as eager.
- **sdpa** (FlashAttention, Dao et al. 2022; torch's scaled_dot_product_attention on its
  flash / memory-efficient path): one kernel reads Q, K, V and the mask and writes the output
  O and the fp32 log-sum-exp per row (4 g s bytes); the score matrix never reaches memory.
  FLOPs: both products (4 g s^2 d) plus the elementwise work on the scores done on chip.
  Backward recomputes the scores from Q, K and the log-sum-exp: five s x s x d products
  (Q K^T again, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: 10 g s^2 d FLOPs), reading
  Q, K, V, O, dO and writing dQ, dK, dV. (torch's FlopCounterMode counts the four gradient
  products, not the recompute.) Saved: Q, K, V, O and the log-sum-exp; no s x s tensor.

**Head split and merge copies** (eager and fused-softmax; measured on the reference models of
every family, `tests/integration/test_head_copies.py`). Splitting the projections into heads
(view + transpose) is free, but merging the context back, transpose(1, 2).contiguous(), copies
its g s d elements, and so does that copy's backward (the context product's gradient reshaped
from the strided head view). Backward also copies the Q, K and V gradients from the head layout
back to (tokens, features) before their projections' data-gradient GEMMs: three copies (dQ,
and dK and dV at their key/value head count); with one fused QKV projection (GPT-2) two, as
the split's backward concatenation reads dK in place. The sdpa kernel reads and writes the
strided head layout directly: no copies (on a CPU torch falls back to its math kernel with
attention dropout on, which copies as eager does; that fallback is not modelled).

Every product is over the full s x s scores (BERT's attention is bidirectional; a causal
kernel could skip masked tiles, an eager one cannot).

**Real sequence lengths** (`RunConfig.packing` and `seq_lengths`; `bertscope.packing`):
padded runs (`none`) price the dense core above on `seq`. A variable-length kernel (sdpa under
`unpadded` or `packed`: `flash_attn_varlen_func` with `cu_seqlens`, which launches thread
blocks per head of each sequence, Dao-AILab/flash-attention issue #850) costs each sequence
its own scores: with e = heads x sum_i L_i^2 score elements the FLOPs are those of the
dense kernel with g s^2 replaced by e, and its bytes are those of the real tokens' Q, K, V,
O and log-sum-exp (no mask tensor: the sequence bounds are cu_seqlens). It stays one row per
direction (one kernel launch), shaped as the kernel's grid: m = n = the longest sequence
(its `max_seqlen`), k = d, batch = sequences x heads; its FLOPs are the exact sum, not
2 m n k batch. Eager and fused-softmax kernels have no variable-length form: unpadded, the
core runs padded to the longest listed sequence (b, L_max, L_max); packed, on the full
(b, seq, seq) scores under a (b, 1, seq, seq) block-diagonal additive mask.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bertscope.analytic.section import _FLOPS, MASK_BYTES
from bertscope.config import Attention, RunConfig
from bertscope.packing import Packing, longest, parse_lengths, per_sequence, real_tokens
from bertscope.packing import sequences as micro_batch_sequences
from bertscope.taxonomy import Category, Phase, Sublayer, TensorSplit

C, P, S, T = Category, Phase, Sublayer, TensorSplit

LSE_BYTES = 4
"""FlashAttention keeps one fp32 log-sum-exp per score row."""


def attention_core(sec: Any, run: RunConfig, b: Any, s: Any, g: Any, d: Any, *,
                   skv: Any = None, kv_groups: int = 1, causal: bool = False,
                   scale: bool = True, bias_elems: Any = 0, cross: bool = False,
                   dropout: bool | None = None, mask: bool = True,
                   fused_qkv: bool = False) -> None:
    """Emit the attention core's rows (and register their backward rows) into the layer's
    section `sec` (`analytic.section.Section`): g = batch x query heads, s query positions,
    `skv` key positions (None: s; T5's cross-attention attends the encoder's), head size d.

    `kv_groups` query heads share each key/value head (grouped-query attention); eager
    kernels copy K and V to every query head first (`Section.repeat_kv`). `causal`: the
    additive mask is a (b, 1, s, skv) tensor (Hugging Face's 4-D causal mask) rather than a
    (b, 1, 1, skv) padding mask; every product is still over the full s x skv scores (the
    convention FlopCounterMode and Narayanan et al. 2021 count; an eager kernel computes the
    masked half, a FlashAttention kernel may skip its tiles). `scale`: scores divided by
    sqrt(d) (T5 does not). `bias_elems`: a position bias of that many elements added to the
    scores (T5's relative bias, broadcast over the batch). `cross`: the rows are
    cross-attention's (`Sublayer.CROSS_CORE`). `dropout`: whether the attention probabilities
    are dropped out (None: the run's setting; False for a family without dropout layers).
    `mask=False`: no additive mask at all (ViT's attention has none: every image has all
    its patches). `fused_qkv`: Q, K and V come from one projection split three ways (GPT-2):
    two gradient copies back from heads instead of three (see the module docstring)."""
    drop = run.dropout if dropout is None else dropout
    subs = _CROSS if cross else _SELF
    block_diagonal = False
    if skv is None and parse_lengths(run.seq_lengths) and run.packing is not Packing.NONE:
        if run.attention is Attention.SDPA:  # one variable-length kernel
            _flash_varlen(sec, run, drop, g // b, d, kv_groups, bias_elems, subs[3])
            return
        if run.packing is Packing.UNPADDED:  # padded back to the longest for the core
            s = longest(run)
        else:  # packed rows: dense scores under a block-diagonal mask
            block_diagonal = True
    skv = s if skv is None else skv
    mask_elems = (b * s * skv if causal or block_diagonal else b * skv) if mask else 0
    if run.attention is Attention.SDPA:
        _flash(sec, drop, s, skv, g, d, kv_groups, mask_elems + bias_elems, subs[3])
        return
    t_q, t_kv = g * s * d, g * skv * d  # elements of Q, and of K or V after any repeat
    # gradients copied back from heads before the projections' data-gradient GEMMs (emitted
    # last of the core's backward rows); K and V at their own head count
    qkv_sub = S.CROSS_QKV if cross else S.QKV
    sec.copy("q_heads", qkv_sub, t_q, forward=False)
    if not fused_qkv:
        sec.copy("k_heads", qkv_sub, t_kv // kv_groups, forward=False)
    sec.copy("v_heads", qkv_sub, t_kv // kv_groups, forward=False)
    if kv_groups > 1:
        sec.repeat_kv("repeat_k", t_kv // kv_groups, kv_groups)
        sec.repeat_kv("repeat_v", t_kv // kv_groups, kv_groups)
    scores = g * s * skv
    sec.bmm("score", subs[0], g, s, skv, d, saved_elems=t_q + t_kv, split=T.SPLIT)  # Q, K
    if run.attention is Attention.FUSED_SOFTMAX:
        _fused_softmax(sec, drop, scores, mask_elems + bias_elems, subs[1])
    else:
        if scale:
            sec.scale("score_scale", subs[0], scores, split=T.SPLIT)  # / sqrt(d)
        if np.any(bias_elems):  # T5's bias (arrays of sizes in a sweep)
            sec.add("position_bias", S.REL_POS_BIAS, scores, bias_elems, split=T.SPLIT)
        if mask:
            sec.add("score_mask", subs[0], scores, mask_elems, split=T.SPLIT)
        sec.softmax("softmax", subs[1], scores, split=T.SPLIT)
        if drop:  # keeps the probabilities the context product reads
            sec.dropout("attn_dropout", subs[1], scores, keeps_output=True, split=T.SPLIT)
    # P V: keeps V; its other operand, the probabilities, is counted by the dropout row (or,
    # with dropout off, is the softmax's saved output)
    sec.bmm("context", subs[2], g, s, d, skv, saved_elems=t_kv, split=T.SPLIT)
    sec.copy("context_merge", subs[2], t_q)  # (g, s, d) heads -> (b, s, heads d)


_SELF = (S.ATTN_SCORE, S.ATTN_SOFTMAX, S.ATTN_CONTEXT, S.ATTN_FUSED)
_CROSS = (S.CROSS_CORE,) * 4


def _flops(kind: str) -> tuple[int, int]:
    return _FLOPS[kind]  # the one table of per-element FLOPs


def _fused_softmax(sec: Any, drop: bool, e: Any, mask_elems: Any, sub: Sublayer) -> None:
    """Scale + mask + softmax (+ dropout) in one kernel, and its backward in one."""
    a = sec.ab
    sm_f, sm_b = _flops("softmax")
    dr_f, dr_b = _flops("dropout") if drop else (0, 0)
    mask = MASK_BYTES * e if drop else 0
    # with dropout: the probabilities after dropout (for the context GEMM), the softmax output
    # and the mask (for backward), all kept; without: the softmax output alone
    written = a * e + (a * e + mask if drop else 0)
    sec.fwd.append(sec.row("softmax", sub, C.SOFTMAX, P.FORWARD, split=T.SPLIT,
                           elements=e, flops=(1 + 1 + sm_f + dr_f) * e,
                           bytes_read=a * e + a * mask_elems, bytes_written=written,
                           saved_bytes=written))
    sec.on_backward(sec.row("softmax.grad", sub, C.SOFTMAX, P.BACKWARD_DATA,
                            split=T.SPLIT, elements=e, flops=(dr_b + sm_b + 1) * e,
                            bytes_read=2 * a * e + mask, bytes_written=a * e))


def _flash(sec: Any, drop: bool, s: Any, skv: Any, g: Any, d: Any, kv_groups: int,
           mask_elems: Any, sub: Sublayer) -> None:
    """One fused attention kernel forward, one backward (see the module docstring); with
    grouped-query attention it reads K and V once per key/value head."""
    t_q, t_kv = g * s * d, g * skv * d // kv_groups
    e = g * s * skv
    lse = LSE_BYTES * g * s
    _flash_rows(sec, drop, e, t_q, t_kv, lse, mask_elems, sub, shape=(s, skv, d, g))


def _flash_rows(sec: Any, drop: bool, e: Any, t_q: Any, t_kv: Any, lse: Any, mask_elems: Any,
                sub: Sublayer, *, shape: tuple[Any, Any, Any, Any]) -> None:
    """The forward and backward rows of one fused attention kernel: e score elements, t_q
    elements of Q (and of O), t_kv of K (and of V) as read, `lse` bytes of log-sum-exp, and
    the row shape (m, n, k, batch)."""
    a = sec.ab
    m, n, k, g = shape
    d = k
    sm_f, sm_b = _flops("softmax")
    dr_f, dr_b = _flops("dropout") if drop else (0, 0)
    fwd_flops = 2 * (2 * e * d) + (1 + 1 + sm_f + dr_f) * e
    sec.fwd.append(sec.row(
        "attention", sub, C.BATCHED_GEMM, P.FORWARD, split=T.SPLIT, m=m, n=n, k=k,
        batch=g, flops=fwd_flops, bytes_read=a * (t_q + 2 * t_kv + mask_elems),
        bytes_written=a * t_q + lse, saved_bytes=a * (2 * t_q + 2 * t_kv) + lse))  # QKV O lse
    # recompute scale, mask, softmax (and the dropout pattern), then their backward
    bwd_flops = 5 * (2 * e * d) + (1 + 1 + sm_f + dr_f + dr_b + sm_b + 1) * e
    sec.on_backward(sec.row(
        "attention.grad", sub, C.BATCHED_GEMM, P.BACKWARD_DATA, split=T.SPLIT, m=m,
        n=n, k=k, batch=g, flops=bwd_flops,
        bytes_read=a * (3 * t_q + 2 * t_kv + mask_elems) + lse,
        bytes_written=a * (t_q + 2 * t_kv)))


def _flash_varlen(sec: Any, run: RunConfig, drop: bool, heads: Any, d: Any, kv_groups: int,
                  bias_elems: Any, sub: Sublayer) -> None:
    """One variable-length fused attention kernel over a micro-batch's real sequences (the
    module docstring): e = heads x sum L^2 score elements, Q, K, V, O and the log-sum-exp of
    the real tokens only, no mask tensor; shaped as its grid (the longest sequence, batch =
    sequences x heads)."""
    tokens = real_tokens(run)
    e = heads * per_sequence(run, lambda L: L * L)
    t_q = heads * tokens * d
    t_kv = heads // kv_groups * tokens * d  # K and V at their own head count
    lse = LSE_BYTES * heads * tokens
    top = longest(run)
    _flash_rows(sec, drop, e, t_q, t_kv, lse, bias_elems, sub,
                shape=(top, top, d, heads * micro_batch_sequences(run)))


__all__ = ["LSE_BYTES", "attention_core"]
