"""Every op of one pretraining iteration of an encoder Transformer (BERT, RoBERTa, ALBERT).

The forward pass is written once, op by op, the way Hugging Face's models run it (three
separate Q/K/V projections, explicit score/softmax/context matmuls, MLM logits for every
position). Each op function emits its forward row and registers its backward rows, so the
backward pass is the forward's mirror image and cannot drift from it:

- Linear  Y = X W^T + b   (X: T x K, W: N x K)
  forward        GEMM M=T N=N K=K            2TNK FLOPs
  data grad      dX = dY W     M=T N=K K=N   2TNK
  weight grad    dW = dY^T X   M=N N=K K=T   2TNK, plus the bias grad (a reduction over T)
- Batched GEMM  C = A B (batch G, A: m x k, B: k x n): dA = dC B^T (m, k, n) and
  dB = A^T dC (k, n, m), both data gradients.

Hence weight-gradient plus data-gradient GEMM FLOPs are exactly twice the forward's.

FLOPs of memory-bound ops are per-element estimates (`_FLOPS`), flagged as approximate;
their bytes are what the op must stream at least: each input read once, each output
written once. `saved_bytes` follows Korthikanti et al. 2022 (Reducing Activation
Recomputation in Large Transformer Models, section 4.1): inputs of GEMMs, softmax output,
GELU input, layernorm input, 1-byte dropout masks; layernorm mean/rstd are omitted as there.

Every row also carries its roles under tensor and pipeline parallelism (`Op.tp_split`,
`Op.pp_stage`), declared where the op is written: each section knows its pipeline stage, each
op function takes the op's Megatron-LM split (`split=`), and backward rows inherit it. The
distributed model reads these roles, never op names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bertscope.analytic.attention import attention_core
from bertscope.analytic.blocks import Block, Repeat, expand
from bertscope.analytic.optimizer import group_blocks, group_stage, optimizer_blocks
from bertscope.analytic.params import ParamGroup, layer_params
from bertscope.config import Activation, Family, ModelConfig, RunConfig
from bertscope.optable import Op
from bertscope.taxonomy import Category, Phase, PipelineStage, Sublayer, TensorSplit

C, P, S, T = Category, Phase, Sublayer, TensorSplit

INDEX_BYTES = 8
"""int64 token / position ids."""
MASK_BYTES = 1
"""A dropout mask element (torch.bool)."""
LOSS_BYTES = 4
"""Cross-entropy runs in fp32 (autocast's fp32 list)."""
STAT_BYTES = 4
"""Layernorm mean and rstd are fp32."""

# Approximate FLOPs per element (forward, backward) of memory-bound ops.
_FLOPS: dict[str, tuple[int, int]] = {
    Activation.GELU: (5, 8),  # 0.5 x (1 + erf(x / sqrt2)); grad cdf + x pdf
    Activation.GELU_NEW: (8, 12),  # tanh approximation
    Activation.GELU_FAST: (8, 12),
    Activation.GELU_PYTORCH_TANH: (8, 12),
    Activation.RELU: (1, 1),
    Activation.SILU: (4, 6),
    "tanh": (1, 2),
    "softmax": (5, 4),  # max, sub, exp, sum, div; grad y * (dy - sum(dy * y))
    "layernorm": (8, 10),  # mean, var, normalize, affine; data grad
    "layernorm_weight": (4, 0),  # dgamma = sum(dy * xhat), dbeta = sum(dy)
    "dropout": (2, 2),  # compare with random, scale; grad mask * scale
    "cross_entropy": (4, 3),  # log_softmax + nll; grad exp - onehot, scale
}


@dataclass(slots=True)
class _Section:
    """Rows of one part of the model (embeddings, one layer, heads): forward rows in order,
    backward rows registered alongside and emitted in reverse.

    Roles are declared where an op is written: every row carries its section's pipeline
    stage, and each op function takes `split`, the op's Megatron-LM tensor-parallel role
    (`TensorSplit`; Shoeybi et al. 2019, section 3), which its backward rows inherit."""

    layer: int
    ab: int
    stage: PipelineStage = PipelineStage.STACK
    fwd: list[Op] = field(default_factory=list)
    _bwd: list[list[Op]] = field(default_factory=list)

    def bwd(self) -> list[Op]:
        return [op for group in reversed(self._bwd) for op in group]

    def row(self, name: str, sub: Sublayer, cat: Category, phase: Phase, *,
            split: TensorSplit = T.REPLICATED, **kw: float) -> Op:
        """A row of this section, at its pipeline stage, with tensor-parallel role `split`."""
        return Op(name, self.layer, sub, cat, phase, tp_split=split,  # type: ignore[arg-type]
                  pp_stage=self.stage, **kw)

    def on_backward(self, *ops: Op) -> None:
        self._bwd.append(list(ops))

    # -- compute-bound ---------------------------------------------------------------------
    def linear(self, name: str, sub: Sublayer, t: int, d_in: int, d_out: int, *,
               save_input: bool = True, bias: bool = True,
               split: TensorSplit = T.REPLICATED) -> None:
        """Y = X W^T + b with X: (t, d_in), W: (d_out, d_in). `split`: column- or
        row-parallel (or replicated); a row-parallel layer's bias is added after the
        all-reduce, whole on every rank, so its gradient is replicated."""
        a = self.ab
        flops = 2 * t * d_out * d_in
        self.fwd.append(self.row(
            name, sub, C.GEMM, P.FORWARD, split=split, m=t, n=d_out, k=d_in, batch=1,
            flops=flops, bytes_read=a * (t * d_in + d_out * d_in + (d_out if bias else 0)),
            bytes_written=a * t * d_out, saved_bytes=a * t * d_in if save_input else 0))
        grads = [
            self.row(f"{name}.dgrad", sub, C.GEMM, P.BACKWARD_DATA, split=split, m=t,
                     n=d_in, k=d_out, batch=1, flops=flops,
                     bytes_read=a * (t * d_out + d_out * d_in), bytes_written=a * t * d_in),
            self.row(f"{name}.wgrad", sub, C.GEMM, P.BACKWARD_WEIGHT, split=split, m=d_out,
                     n=d_in, k=t, batch=1, flops=flops,
                     bytes_read=a * (t * d_out + t * d_in), bytes_written=a * d_out * d_in),
        ]
        if bias:
            bias_split = T.REPLICATED if split is T.ROW else split
            grads.append(self.row(f"{name}.bias_grad", sub, C.REDUCTION, P.BACKWARD_WEIGHT,
                                  split=bias_split, elements=t * d_out, flops=t * d_out,
                                  bytes_read=a * t * d_out, bytes_written=a * d_out))
        self.on_backward(*grads)

    def bmm(self, name: str, sub: Sublayer, g: int, m: int, n: int, k: int, *,
            saved_elems: int, split: TensorSplit = T.REPLICATED) -> None:
        """C = A B for g independent (m x k) @ (k x n) products."""
        a = self.ab
        flops = 2 * g * m * n * k
        self.fwd.append(self.row(
            name, sub, C.BATCHED_GEMM, P.FORWARD, split=split, m=m, n=n, k=k, batch=g,
            flops=flops, bytes_read=a * g * (m * k + k * n), bytes_written=a * g * m * n,
            saved_bytes=a * saved_elems))
        self.on_backward(
            self.row(f"{name}.dgrad_a", sub, C.BATCHED_GEMM, P.BACKWARD_DATA, split=split,
                     m=m, n=k, k=n, batch=g, flops=flops,
                     bytes_read=a * g * (m * n + k * n), bytes_written=a * g * m * k),
            self.row(f"{name}.dgrad_b", sub, C.BATCHED_GEMM, P.BACKWARD_DATA, split=split,
                     m=k, n=n, k=m, batch=g, flops=flops,
                     bytes_read=a * g * (m * k + m * n), bytes_written=a * g * k * n),
        )

    # -- memory-bound ----------------------------------------------------------------------
    def pointwise(self, name: str, sub: Sublayer, cat: Category, e: int, kind: str, *,
                  saves_input: bool = True, split: TensorSplit = T.REPLICATED) -> None:
        """y = f(x) elementwise (activation); backward reads x and dy, writes dx."""
        a = self.ab
        ff, fb = _FLOPS[kind]
        self.fwd.append(self.row(name, sub, cat, P.FORWARD, split=split, elements=e,
                                 flops=ff * e, bytes_read=a * e, bytes_written=a * e,
                                 saved_bytes=a * e if saves_input else 0))
        self.on_backward(self.row(f"{name}.grad", sub, cat, P.BACKWARD_DATA, split=split,
                                  elements=e, flops=fb * e, bytes_read=2 * a * e,
                                  bytes_written=a * e))

    def scale(self, name: str, sub: Sublayer, e: int, *,
              split: TensorSplit = T.REPLICATED) -> None:
        """y = x * c (c a constant); backward dx = dy * c."""
        a = self.ab
        self.fwd.append(self.row(name, sub, C.ELEMENTWISE, P.FORWARD, split=split, elements=e,
                                 flops=e, bytes_read=a * e, bytes_written=a * e))
        self.on_backward(self.row(f"{name}.grad", sub, C.ELEMENTWISE, P.BACKWARD_DATA,
                                  split=split, elements=e, flops=e, bytes_read=a * e,
                                  bytes_written=a * e))

    def add(self, name: str, sub: Sublayer, e: int, e_other: int | None = None, *,
            split: TensorSplit = T.REPLICATED) -> None:
        """y = x + z (z possibly broadcast, e_other elements); backward passes dy through."""
        a = self.ab
        other = e if e_other is None else e_other
        self.fwd.append(self.row(name, sub, C.ELEMENTWISE, P.FORWARD, split=split, elements=e,
                                 flops=e, bytes_read=a * (e + other), bytes_written=a * e))

    def grad_sum(self, name: str, sub: Sublayer, e: int, n: int = 1) -> None:
        """Backward only: autograd sums the gradients of a tensor used by n + 1 consumers."""
        a = self.ab
        self.on_backward(*[
            self.row(f"{name}.{i}" if n > 1 else name, sub, C.ELEMENTWISE, P.BACKWARD_DATA,
                     elements=e, flops=e, bytes_read=2 * a * e, bytes_written=a * e)
            for i in range(n)])

    def dropout(self, name: str, sub: Sublayer, e: int, *,
                split: TensorSplit = T.REPLICATED) -> None:
        """Dropout; keeps a 1-byte mask for backward."""
        a = self.ab
        ff, fb = _FLOPS["dropout"]
        self.fwd.append(self.row(name, sub, C.DROPOUT, P.FORWARD, split=split, elements=e,
                                 flops=ff * e, bytes_read=a * e,
                                 bytes_written=a * e + MASK_BYTES * e,
                                 saved_bytes=MASK_BYTES * e))
        self.on_backward(self.row(f"{name}.grad", sub, C.DROPOUT, P.BACKWARD_DATA,
                                  split=split, elements=e, flops=fb * e,
                                  bytes_read=a * e + MASK_BYTES * e, bytes_written=a * e))

    def softmax(self, name: str, sub: Sublayer, e: int, *,
                split: TensorSplit = T.REPLICATED) -> None:
        """Softmax over the last dim; keeps its output for backward."""
        a = self.ab
        ff, fb = _FLOPS["softmax"]
        self.fwd.append(self.row(name, sub, C.SOFTMAX, P.FORWARD, split=split, elements=e,
                                 flops=ff * e, bytes_read=a * e, bytes_written=a * e,
                                 saved_bytes=a * e))
        self.on_backward(self.row(f"{name}.grad", sub, C.SOFTMAX, P.BACKWARD_DATA,
                                  split=split, elements=e, flops=fb * e,
                                  bytes_read=2 * a * e, bytes_written=a * e))

    def layernorm(self, name: str, sub: Sublayer, t: int, d: int) -> None:
        """LayerNorm over d for t rows; keeps its input (mean/rstd omitted, as Korthikanti)."""
        a, e = self.ab, t * d
        ff, fb = _FLOPS["layernorm"]
        stats = STAT_BYTES * 2 * t
        self.fwd.append(self.row(name, sub, C.LAYERNORM, P.FORWARD, elements=e, flops=ff * e,
                                 bytes_read=a * (e + 2 * d), bytes_written=a * e + stats,
                                 saved_bytes=a * e))
        fw, _ = _FLOPS["layernorm_weight"]
        self.on_backward(
            self.row(f"{name}.grad", sub, C.LAYERNORM, P.BACKWARD_DATA, elements=e,
                     flops=fb * e, bytes_read=a * (2 * e + d) + stats, bytes_written=a * e),
            self.row(f"{name}.weight_grad", sub, C.REDUCTION, P.BACKWARD_WEIGHT, elements=e,
                     flops=fw * e, bytes_read=2 * a * e + stats, bytes_written=a * 2 * d),
        )

    def lookup(self, name: str, rows: int, table_rows: int, d: int) -> None:
        """Embedding gather of `rows` ids from a (table_rows x d) table; its backward zeroes
        the (table_rows x d) gradient and scatter-adds `rows` rows into it."""
        a = self.ab
        self.fwd.append(self.row(name, S.EMBEDDING, C.EMBEDDING, P.FORWARD, elements=rows * d,
                                 bytes_read=INDEX_BYTES * rows + a * rows * d,
                                 bytes_written=a * rows * d, saved_bytes=INDEX_BYTES * rows))
        self.on_backward(self.row(
            f"{name}.grad", S.EMBEDDING, C.EMBEDDING, P.BACKWARD_WEIGHT, elements=rows * d,
            flops=rows * d, bytes_read=INDEX_BYTES * rows + a * rows * d,
            bytes_written=a * (table_rows * d + rows * d)))

    def cross_entropy(self, name: str, rows: int, classes: int, *,
                      split: TensorSplit = T.REPLICATED) -> None:
        """log_softmax + nll in fp32 over (rows x classes) logits; keeps the log-probs."""
        a, e = self.ab, rows * classes
        ff, fb = _FLOPS["cross_entropy"]
        self.fwd.append(self.row(name, S.LOSS, C.LOSS, P.FORWARD, split=split, elements=e,
                                 flops=ff * e, bytes_read=a * e + INDEX_BYTES * rows,
                                 bytes_written=LOSS_BYTES * e, saved_bytes=LOSS_BYTES * e))
        self.on_backward(self.row(f"{name}.grad", S.LOSS, C.LOSS, P.BACKWARD_DATA,
                                  split=split, elements=e, flops=fb * e,
                                  bytes_read=LOSS_BYTES * e + INDEX_BYTES * rows,
                                  bytes_written=a * e))


def _embeddings(m: ModelConfig, run: RunConfig, ab: int) -> _Section:
    sec = _Section(-1, ab, PipelineStage.FIRST)
    b, s, e = run.batch, run.seq, m.emb
    t = b * s
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
    if m.family is Family.ALBERT:
        sec.linear("embedding_project", S.EMBEDDING, t, e, m.hidden)
    return sec


def _layer(m: ModelConfig, run: RunConfig, ab: int, layer: int) -> _Section:
    """One encoder layer: attention block and feed-forward block, post-layernorm. Megatron-LM's
    split: Q, K, V and FFN1 column-parallel, the attention output and FFN2 row-parallel, the
    attention core and the activation between them split by heads and FFN width; layernorms,
    hidden dropouts and residual adds replicated."""
    sec = _Section(layer, ab, PipelineStage.STACK)
    b, s, h, a, f = run.batch, run.seq, m.hidden, m.heads, m.intermediate
    d = m.head_dim
    t, g = b * s, b * a
    # the layer input feeds Q, K, V and the residual: autograd sums four gradients
    sec.grad_sum("input.grad_sum", S.QKV, t * h, n=2)
    sec.grad_sum("residual1.grad_sum", S.ATTN_ADD_NORM, t * h)
    sec.linear("q", S.QKV, t, h, h, split=T.COLUMN)  # saves X once for Q, K and V
    sec.linear("k", S.QKV, t, h, h, save_input=False, split=T.COLUMN)
    sec.linear("v", S.QKV, t, h, h, save_input=False, split=T.COLUMN)
    attention_core(sec, run, b, s, g, d)  # scores, softmax, context (analytic/attention.py)
    sec.linear("attn_out", S.ATTN_OUTPUT, t, h, h, split=T.ROW)
    if run.dropout:
        sec.dropout("attn_out_dropout", S.ATTN_ADD_NORM, t * h)
    sec.add("residual1", S.ATTN_ADD_NORM, t * h)
    sec.layernorm("attn_norm", S.ATTN_ADD_NORM, t, h)
    sec.grad_sum("residual2.grad_sum", S.FFN_ADD_NORM, t * h)  # norm output: FFN1 + residual
    sec.linear("ffn1", S.FFN1, t, h, f, split=T.COLUMN)
    sec.pointwise("act", S.FFN_ACT, C.ACTIVATION, t * f, m.activation, split=T.SPLIT)
    sec.linear("ffn2", S.FFN2, t, f, h, split=T.ROW)
    if run.dropout:
        sec.dropout("ffn_dropout", S.FFN_ADD_NORM, t * h)
    sec.add("residual2", S.FFN_ADD_NORM, t * h)
    sec.layernorm("ffn_norm", S.FFN_ADD_NORM, t, h)
    return sec


def masked_positions(run: RunConfig) -> int:
    """Rows the MLM head runs on: every token, or 15% of each sequence (rounded up)."""
    per_seq = -(-run.seq * 15 // 100) if run.masked_lm_only else run.seq
    return run.batch * per_seq


def gathers_masked(run: RunConfig) -> bool:
    """Whether the MLM head gathers the masked positions first: masked-LM-only runs with
    sequences longer than one token (a 1-token sequence's 15%, rounded up, is the token). A
    sweep's group of configurations shares the answer (`sweep.grid` splits on it)."""
    return bool(run.masked_lm_only) and bool(np.all(np.asarray(run.seq) > 1))


def _heads(m: ModelConfig, run: RunConfig, ab: int) -> _Section:
    sec = _Section(-1, ab, PipelineStage.LAST)
    b, h, e, v = run.batch, m.hidden, m.emb, m.vocab_size
    t = b * run.seq
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
    d_mlm = e if m.family is Family.ALBERT else h
    sec.linear("mlm_transform", S.MLM_HEAD, tm, h, d_mlm)
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
        sec.linear("pooler", S.NSP_HEAD, b, h, h)
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


def _recompute(ops: list[Op]) -> list[Op]:
    return [op._replace(phase=P.RECOMPUTE, saved_bytes=0) for op in ops]


def accumulates(run: RunConfig) -> bool:
    """Whether the iteration runs several micro-batches (gradient accumulation rows). A
    sweep's group of configurations shares the answer (`sweep.grid` splits on it)."""
    return bool(np.all(np.asarray(run.micro_batches) > 1))


def encoder_blocks(m: ModelConfig, run: RunConfig) -> list[Block]:
    """All rows of one training iteration (one optimizer step) of an encoder model, as blocks
    in execution order: embeddings, the layers' forward, heads (forward and backward), the
    layers' backward (last layer first; recompute first when checkpointing), the embeddings'
    backward, gradient accumulation, the optimizer. The pair is checked where it is made
    (`Job`, `parallel.Workload`, `sweep.grid`), not here."""
    ab = run.precision.act_bytes
    emb = _embeddings(m, run, ab)
    heads = _heads(m, run, ab)
    layer0 = _layer(m, run, ab, 0)
    backward = (_recompute(layer0.fwd) if run.checkpointing else []) + layer0.bwd()
    later = [_shared_grad_sum(m, ab)] if m.share_layers else []
    micro = [Block(emb.fwd, micro=True), Block(layer0.fwd, Repeat.EACH_LAYER, micro=True),
             Block(heads.fwd + heads.bwd(), micro=True),
             Block(backward, Repeat.EACH_LAYER_REVERSED, later, micro=True),
             Block(emb.bwd(), micro=True)]
    if accumulates(run):
        micro += _accumulate_grads(m, run, ab)
    return micro + optimizer_blocks(m, run)


def encoder_ops(m: ModelConfig, run: RunConfig) -> list[Op]:
    """All rows of one training iteration of an encoder model, one per op site (every layer's
    rows: `expand` of `encoder_blocks`)."""
    return expand(encoder_blocks(m, run), m.num_layers, run.micro_batches)


def _accumulate_grads(m: ModelConfig, run: RunConfig, ab: int) -> list[Block]:
    """Gradient accumulation: micro-batches after the first add into each .grad."""
    k = run.micro_batches - 1

    def rows(grp: ParamGroup) -> list[Op]:
        n = grp.params
        return [Op(f"{grp.name}.grad_accumulate", grp.layer, S.OTHER, C.ELEMENTWISE,
                   P.BACKWARD_WEIGHT, elements=n, count=k, flops=k * n,
                   bytes_read=k * 2 * ab * n, bytes_written=k * ab * n,
                   pp_stage=group_stage(grp))]

    return group_blocks(m, rows)


__all__ = ["accumulates", "encoder_blocks", "encoder_ops", "masked_positions"]
