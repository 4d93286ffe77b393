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

Every product is over the full s x s scores (BERT's attention is bidirectional; a causal
kernel could skip masked tiles, an eager one cannot).
"""

from __future__ import annotations

from typing import Any

from bertscope.config import Attention, RunConfig
from bertscope.taxonomy import Category, Phase, Sublayer, TensorSplit

C, P, S, T = Category, Phase, Sublayer, TensorSplit

LSE_BYTES = 4
"""FlashAttention keeps one fp32 log-sum-exp per score row."""


def attention_core(sec: Any, run: RunConfig, b: Any, s: Any, g: Any, d: Any) -> None:
    """Emit the attention core's rows (and register their backward rows) into the layer's
    section `sec` (`encoder._Section`)."""
    if run.attention is Attention.SDPA:
        _flash(sec, run, b, s, g, d)
        return
    t_h = g * s * d  # elements of Q, K, V (batch x seq x hidden)
    scores = g * s * s
    sec.bmm("score", S.ATTN_SCORE, g, s, s, d, saved_elems=2 * t_h, split=T.SPLIT)  # keeps Q, K
    if run.attention is Attention.FUSED_SOFTMAX:
        _fused_softmax(sec, run, scores, b * s)
    else:
        sec.scale("score_scale", S.ATTN_SCORE, scores, split=T.SPLIT)  # / sqrt(d)
        sec.add("score_mask", S.ATTN_SCORE, scores, b * s, split=T.SPLIT)  # + (B, 1, 1, T)
        sec.softmax("softmax", S.ATTN_SOFTMAX, scores, split=T.SPLIT)
        if run.dropout:
            sec.dropout("attn_dropout", S.ATTN_SOFTMAX, scores, split=T.SPLIT)
    # P V: keeps V, and the dropout output (with dropout off, softmax's saved output serves)
    sec.bmm("context", S.ATTN_CONTEXT, g, s, d, s,
            saved_elems=t_h + (scores if run.dropout else 0), split=T.SPLIT)


def _flops(kind: str) -> tuple[int, int]:
    from bertscope.analytic.encoder import _FLOPS  # the one table of per-element FLOPs

    return _FLOPS[kind]


def _fused_softmax(sec: Any, run: RunConfig, e: Any, mask_elems: Any) -> None:
    """Scale + mask + softmax (+ dropout) in one kernel, and its backward in one."""
    from bertscope.analytic.encoder import MASK_BYTES

    a = sec.ab
    sm_f, sm_b = _flops("softmax")
    dr_f, dr_b = _flops("dropout") if run.dropout else (0, 0)
    mask = MASK_BYTES * e if run.dropout else 0
    # with dropout: the probabilities after dropout (for the context GEMM), the softmax output
    # and the mask (for backward); without: the softmax output alone
    written = a * e + (a * e + mask if run.dropout else 0)
    sec.fwd.append(sec.row("softmax", S.ATTN_SOFTMAX, C.SOFTMAX, P.FORWARD, split=T.SPLIT,
                           elements=e, flops=(1 + 1 + sm_f + dr_f) * e,
                           bytes_read=a * e + a * mask_elems, bytes_written=written,
                           saved_bytes=a * e + mask))
    sec.on_backward(sec.row("softmax.grad", S.ATTN_SOFTMAX, C.SOFTMAX, P.BACKWARD_DATA,
                            split=T.SPLIT, elements=e, flops=(dr_b + sm_b + 1) * e,
                            bytes_read=2 * a * e + mask, bytes_written=a * e))


def _flash(sec: Any, run: RunConfig, b: Any, s: Any, g: Any, d: Any) -> None:
    """One fused attention kernel forward, one backward (see the module docstring)."""
    a = sec.ab
    t_h = g * s * d
    e = g * s * s
    sm_f, sm_b = _flops("softmax")
    dr_f, dr_b = _flops("dropout") if run.dropout else (0, 0)
    lse = LSE_BYTES * g * s
    fwd_flops = 2 * (2 * e * d) + (1 + 1 + sm_f + dr_f) * e
    sec.fwd.append(sec.row(
        "attention", S.ATTN_FUSED, C.BATCHED_GEMM, P.FORWARD, split=T.SPLIT, m=s, n=s, k=d,
        batch=g, flops=fwd_flops, bytes_read=a * (3 * t_h + b * s),
        bytes_written=a * t_h + lse, saved_bytes=a * 4 * t_h + lse))  # Q, K, V, O, lse
    # recompute scale, mask, softmax (and the dropout pattern), then their backward
    bwd_flops = 5 * (2 * e * d) + (1 + 1 + sm_f + dr_f + dr_b + sm_b + 1) * e
    sec.on_backward(sec.row(
        "attention.grad", S.ATTN_FUSED, C.BATCHED_GEMM, P.BACKWARD_DATA, split=T.SPLIT, m=s,
        n=s, k=d, batch=g, flops=bwd_flops, bytes_read=a * (5 * t_h + b * s) + lse,
        bytes_written=a * 3 * t_h))


__all__ = ["LSE_BYTES", "attention_core"]
