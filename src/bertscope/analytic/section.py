"""The op vocabulary every analytic producer writes rows with: one method per kind of op,
emitting its forward row and registering its backward rows, so each family's backward pass is
its forward's mirror image and cannot drift from it.

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
op method takes the op's Megatron-LM split (`split=`), and backward rows inherit it. The
distributed model reads these roles, never op names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bertscope.config import Activation, Checkpoint, WeightCast
from bertscope.optable import Op
from bertscope.taxonomy import (
    Category,
    Issuer,
    Phase,
    PipelineStage,
    Sublayer,
    SublayerGroup,
    TensorSplit,
)

C, P, S, T = Category, Phase, Sublayer, TensorSplit

INDEX_BYTES = 8
"""int64 token / position ids."""
MASK_BYTES = 1
"""A dropout mask element (torch.bool)."""
LOSS_BYTES = 4
"""Cross-entropy runs in fp32 (autocast's fp32 list)."""
STAT_BYTES = 4
"""Layernorm mean and rstd are fp32."""
PARAM_BYTES = 4
"""Parameters and their gradients are fp32 under autocast (`Precision.autocast`)."""

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
    "rmsnorm": (5, 8),  # square, mean, rsqrt, scale, weight; data grad
    "rmsnorm_weight": (2, 0),  # dgamma = sum(dy * xhat)
    "rotary": (3, 3),  # x cos + rotate_half(x) sin; grad the transpose rotation
    "mul": (1, 2),  # y = u * v; grads du = dy v, dv = dy u
}


Composite = tuple[tuple[tuple[str, int, int], ...], tuple[tuple[str, int, int], ...]]
"""(forward kernels, backward kernels): each (ATen op, tensor operands read, tensors of
the input's size it saves for backward)."""
COMPOSITE: dict[str, Composite] = {
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) written out (Hugging Face's
    # NewGELUActivation, `measure.models.NewGELU`), as the profiler sees it on CPU (torch
    # 2.13): mul, pow, mul, add, mul, tanh, add, mul. Saved: x only, as Korthikanti et al.
    # count the GELU's (eager autograd also keeps tanh's output and both factors of the last
    # mul, 3 more t x f tensors: not counted, so that `parallel.memory`'s closed form and the
    # table agree; a known underestimate for eager gelu_new). Backward: the last mul's two
    # products, tanh_backward,
    # the scalar muls, pow's backward (pow, mul by 3, mul by the gradient) and the two adds
    # summing the three gradients of x. tests/integration/test_composite_activation.py
    Activation.GELU_NEW: (
        (("mul", 1, 0), ("pow", 1, 1), ("mul", 1, 0), ("add", 2, 0), ("mul", 1, 0),
         ("tanh", 1, 0), ("add", 1, 0), ("mul", 2, 0)),
        (("mul", 2, 0), ("mul", 2, 0), ("tanh_backward", 2, 0), ("mul", 1, 0), ("mul", 1, 0),
         ("pow", 1, 0), ("mul", 1, 0), ("mul", 2, 0), ("add_", 2, 0), ("mul", 1, 0),
         ("add_", 2, 0))),
}
"""Elementwise functions eager PyTorch runs as several kernels, by `Activation`."""


def per_use_casts(run: Any) -> bool:
    """Whether torch.autocast casts the weights in every micro-batch (fp16/bf16 with
    `WeightCast.PER_MICRO_BATCH`): fp32 parameters and gradients, casts as rows. A 16-bit
    model under `per_step` or `kept` casts nothing in forward or backward: its weights are
    made once per step (`optimizer`). `run`: a `RunConfig` or a sweep's view of one."""
    return bool(run.precision.autocast and run.weight_cast is WeightCast.PER_MICRO_BATCH)


def cast_policy(run: Any) -> dict[str, bool]:
    """A section's cast settings from the run: `autocast` (`per_use_casts`) and whether
    gradient accumulation is fused into the weight-gradient GEMMs."""
    return {"autocast": per_use_casts(run),
            "fused_accumulation": bool(run.fused_accumulation)}


@dataclass(slots=True)
class Section:
    """Rows of one part of the model (embeddings, one layer, heads): forward rows in order,
    backward rows registered alongside and emitted in reverse.

    Roles are declared where an op is written: every row carries its section's pipeline
    stage, and each op function takes `split`, the op's Megatron-LM tensor-parallel role
    (`TensorSplit`; Shoeybi et al. 2019, section 3), which its backward rows inherit."""

    layer: int
    ab: int
    stage: PipelineStage = PipelineStage.STACK
    autocast: bool = False
    """torch.autocast's casts are rows (`Precision.autocast`): each linear's fp32 weight and
    bias cast to 16 bits in forward and their gradients cast back in backward, and inputs
    that arrive in fp32 (`cast_input`) likewise."""
    cast_weights: bool = True
    """False where the weights' casts are counted elsewhere, once (ALBERT's shared layer:
    autocast caches a weight's cast for the whole forward pass)."""
    fused_accumulation: bool = False
    """Each linear's weight-gradient GEMM adds into the fp32 main gradient (reads and writes
    4 bytes per weight element, Megatron-LM's gradient_accumulation_fusion) instead of
    writing the gradient for a separate accumulation; no cast of the weight's gradient."""
    fwd: list[Op] = field(default_factory=list)
    _bwd: list[list[Op]] = field(default_factory=list)

    def bwd(self) -> list[Op]:
        return [op for group in reversed(self._bwd) for op in group]

    def row(self, name: str, sub: Sublayer, cat: Category, phase: Phase, *,
            split: TensorSplit = T.REPLICATED, **kw: Any) -> Op:
        """A row of this section, at its pipeline stage, with tensor-parallel role `split`."""
        return Op(name, self.layer, sub, cat, phase, tp_split=split,  # type: ignore[arg-type]
                  pp_stage=self.stage, **kw)

    def on_backward(self, *ops: Op) -> None:
        self._bwd.append(list(ops))

    # -- compute-bound ---------------------------------------------------------------------
    def linear(self, name: str, sub: Sublayer, t: int, d_in: int, d_out: int, *,
               save_input: bool = True, bias: bool = True, input_grad: bool = True,
               cast_input: bool = False, split: TensorSplit = T.REPLICATED) -> None:
        """Y = X W^T + b with X: (t, d_in), W: (d_out, d_in). `split`: column- or
        row-parallel (or replicated); a row-parallel layer's bias is added after the
        all-reduce, whole on every rank, so its gradient is replicated. `input_grad=False`:
        X needs no gradient (ViT's patch embedding of the pixels), so no data-gradient GEMM.
        `cast_input`: X arrives in fp32 (a norm's output), so autocast casts it first."""
        a = self.ab
        casts = self._casts(name, sub, t * d_in, d_out * d_in, d_out, bias=bias,
                            cast_input=cast_input, input_grad=input_grad, split=split)
        # t (the tokens) is the one factor that may be a large array in a sweep: each
        # product takes it once, last (integers: exact in any order)
        flops = t * (2 * d_out * d_in)
        x_bytes, y_bytes, w_bytes = t * (a * d_in), t * (a * d_out), a * (d_out * d_in)
        self.fwd.append(self.row(
            name, sub, C.GEMM, P.FORWARD, split=split, m=t, n=d_out, k=d_in, batch=1,
            flops=flops, bytes_read=x_bytes + (w_bytes + (a * d_out if bias else 0)),
            bytes_written=y_bytes, saved_bytes=x_bytes if save_input else 0))
        grads = [
            self.row(f"{name}.dgrad", sub, C.GEMM, P.BACKWARD_DATA, split=split, m=t,
                     n=d_in, k=d_out, batch=1, flops=flops,
                     bytes_read=y_bytes + w_bytes, bytes_written=x_bytes),
        ] if input_grad else []
        if self.fused_accumulation:  # dW += dY^T X into the fp32 main gradient
            main = PARAM_BYTES * (d_out * d_in)
            wgrad_read, wgrad_written = y_bytes + x_bytes + main, main
        else:
            wgrad_read, wgrad_written = y_bytes + x_bytes, w_bytes
        grads += [
            self.row(f"{name}.wgrad", sub, C.GEMM, P.BACKWARD_WEIGHT, split=split, m=d_out,
                     n=d_in, k=t, batch=1, flops=flops,
                     bytes_read=wgrad_read, bytes_written=wgrad_written),
        ]
        if bias:
            bias_split = T.REPLICATED if split is T.ROW else split
            e_out = t * d_out
            grads.append(self.row(f"{name}.bias_grad", sub, C.REDUCTION, P.BACKWARD_WEIGHT,
                                  split=bias_split, elements=e_out, flops=e_out,
                                  bytes_read=y_bytes, bytes_written=a * d_out))
        self.on_backward(*grads, *casts)

    def _casts(self, name: str, sub: Sublayer, x_elems: int, w_elems: int, b_elems: int, *,
               bias: bool, cast_input: bool, input_grad: bool, split: TensorSplit) -> list[Op]:
        """Autocast's casts around one linear (`autocast`): the forward casts are appended
        to the forward rows now, before the GEMM; the casts of their gradients are returned
        for the linear's backward rows. `b_elems` (the bias's elements, cast when `bias`) may
        be an array in a sweep, so the flag, not its truth value, decides."""
        if not self.autocast:
            return []
        back = []
        if cast_input:
            x_split = T.SPLIT if split is T.ROW else T.REPLICATED
            back.append(self._cast(f"{name}.input", sub, x_elems, x_split,
                                   P.BACKWARD_DATA if input_grad else None))
        if self.cast_weights:  # a fused accumulation's GEMM writes the fp32 gradient itself
            back.append(self._cast(f"{name}.weight", sub, w_elems, split,
                                   None if self.fused_accumulation else P.BACKWARD_WEIGHT))
            if bias:
                bias_split = T.REPLICATED if split is T.ROW else split
                back.append(self._cast(f"{name}.bias", sub, b_elems, bias_split,
                                       P.BACKWARD_WEIGHT))
        return [op for op in back if op is not None]

    def _cast(self, label: str, sub: Sublayer, e: int, split: TensorSplit,
              grad_phase: Phase | None) -> Op | None:
        """One autocast cast of `e` fp32 elements to 16 bits, appended to the forward rows;
        returns the cast of its gradient back to fp32 (ToCopyBackward: 16-bit read, fp32
        written) in `grad_phase`, None where no gradient flows."""
        self.fwd.append(self.row(f"{label}_cast", sub, C.DATA_MOVEMENT, P.FORWARD, split=split,
                                 elements=e, bytes_read=PARAM_BYTES * e,
                                 bytes_written=self.ab * e, issuer=Issuer.AUTOCAST))
        if grad_phase is None:
            return None
        return self.row(f"{label}_grad_cast", sub, C.DATA_MOVEMENT, grad_phase, split=split,
                        elements=e, bytes_read=self.ab * e, bytes_written=PARAM_BYTES * e,
                        issuer=Issuer.AUTOCAST)

    def weight_casts(self, name: str, sub: Sublayer, e: int) -> None:
        """Autocast's casts of `e` fp32 weights used by many linears but cast once per
        forward (cached): ALBERT's shared layer, whose linears set `cast_weights=False`."""
        grad_phase = None if self.fused_accumulation else P.BACKWARD_WEIGHT
        if self.autocast and (back := self._cast(f"{name}.weight", sub, e, T.REPLICATED,
                                                 grad_phase)) is not None:
            self.on_backward(back)

    def bmm(self, name: str, sub: Sublayer, g: int, m: int, n: int, k: int, *,
            saved_elems: int, split: TensorSplit = T.REPLICATED, a_grad: bool = True,
            b_grad: bool = True) -> None:
        """C = A B for g independent (m x k) @ (k x n) products. `a_grad`/`b_grad`: whether
        A (B) needs a gradient (False for a constant operand: XLNet's target mapping and
        segment matrix), its data-gradient product run only where it does."""
        a = self.ab
        flops = 2 * g * m * n * k
        self.fwd.append(self.row(
            name, sub, C.BATCHED_GEMM, P.FORWARD, split=split, m=m, n=n, k=k, batch=g,
            flops=flops, bytes_read=a * g * (m * k + k * n), bytes_written=a * g * m * n,
            saved_bytes=a * saved_elems))
        grads = [
            self.row(f"{name}.dgrad_a", sub, C.BATCHED_GEMM, P.BACKWARD_DATA, split=split,
                     m=m, n=k, k=n, batch=g, flops=flops,
                     bytes_read=a * g * (m * n + k * n), bytes_written=a * g * m * k),
        ] if a_grad else []
        if b_grad:
            grads.append(self.row(
                f"{name}.dgrad_b", sub, C.BATCHED_GEMM, P.BACKWARD_DATA, split=split,
                m=k, n=n, k=m, batch=g, flops=flops,
                bytes_read=a * g * (m * k + m * n), bytes_written=a * g * k * n))
        self.on_backward(*grads)

    # -- memory-bound ----------------------------------------------------------------------
    def pointwise(self, name: str, sub: Sublayer, cat: Category, e: int, kind: str, *,
                  saves_input: bool = True, split: TensorSplit = T.REPLICATED) -> None:
        """y = f(x) elementwise (activation); backward reads x and dy, writes dx. A function
        eager PyTorch runs as several kernels (`COMPOSITE`: Hugging Face's gelu_new) gets a
        row per kernel."""
        if kind in COMPOSITE:
            self._composite(name, sub, e, COMPOSITE[kind], split=split)
            return
        a = self.ab
        ff, fb = _FLOPS[kind]
        self.fwd.append(self.row(name, sub, cat, P.FORWARD, split=split, elements=e,
                                 flops=ff * e, bytes_read=a * e, bytes_written=a * e,
                                 saved_bytes=a * e if saves_input else 0))
        self.on_backward(self.row(f"{name}.grad", sub, cat, P.BACKWARD_DATA, split=split,
                                  elements=e, flops=fb * e, bytes_read=2 * a * e,
                                  bytes_written=a * e))

    def _composite(self, name: str, sub: Sublayer, e: int, recipe: Composite, *,
                   split: TensorSplit) -> None:
        """The kernels of a composite elementwise function (`COMPOSITE`), each reading its
        tensor operands and writing one e-element tensor, one FLOP per element (two for a
        tanh backward); activation rows for the tanh kernels, elementwise for the rest."""
        a = self.ab

        def rows(phase: Phase, kernels: tuple[tuple[str, int, int], ...]) -> list[Op]:
            return [self.row(f"{name}.{i}.{op}", sub,
                             C.ACTIVATION if op.startswith("tanh") else C.ELEMENTWISE, phase,
                             split=split, elements=e, flops=(2 if op == "tanh_backward" else 1)
                             * e, bytes_read=reads * a * e, bytes_written=a * e,
                             saved_bytes=saved * a * e if phase is P.FORWARD else 0)
                    for i, (op, reads, saved) in enumerate(kernels)]

        self.fwd.extend(rows(P.FORWARD, recipe[0]))
        self.on_backward(*rows(P.BACKWARD_DATA, recipe[1]))

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
            promotes: bool = False, split: TensorSplit = T.REPLICATED) -> None:
        """y = x + z (z possibly broadcast, e_other elements); backward passes dy through.
        `promotes`: under autocast, a 16-bit x meets an fp32 z (a residual stream after a
        norm), so y is fp32 and x's gradient is cast down to 16 bits in backward."""
        a = self.ab
        other = e if e_other is None else e_other
        self.fwd.append(self.row(name, sub, C.ELEMENTWISE, P.FORWARD, split=split, elements=e,
                                 flops=e, bytes_read=a * (e + other), bytes_written=a * e))
        if promotes and self.autocast:
            self.on_backward(self.row(f"{name}.grad_cast", sub, C.DATA_MOVEMENT,
                                      P.BACKWARD_DATA, split=split, elements=e,
                                      bytes_read=PARAM_BYTES * e, bytes_written=a * e,
                                      issuer=Issuer.AUTOCAST))

    def grad_sum(self, name: str, sub: Sublayer, e: int, n: int = 1) -> None:
        """Backward only: autograd sums the gradients of a tensor used by n + 1 consumers."""
        a = self.ab
        self.on_backward(*[
            self.row(f"{name}.{i}" if n > 1 else name, sub, C.ELEMENTWISE, P.BACKWARD_DATA,
                     elements=e, flops=e, bytes_read=2 * a * e, bytes_written=a * e)
            for i in range(n)])

    def dropout(self, name: str, sub: Sublayer, e: int, *, keeps_output: bool = False,
                split: TensorSplit = T.REPLICATED) -> None:
        """Dropout; keeps a 1-byte mask for backward, and its output when the GEMM that reads
        it keeps it (the attention probabilities the context product needs): counted here,
        so the s x s tensors selective recomputation drops are the softmax's and dropout's
        rows."""
        a = self.ab
        ff, fb = _FLOPS["dropout"]
        self.fwd.append(self.row(name, sub, C.DROPOUT, P.FORWARD, split=split, elements=e,
                                 flops=ff * e, bytes_read=a * e,
                                 bytes_written=a * e + MASK_BYTES * e,
                                 saved_bytes=(MASK_BYTES + (a if keeps_output else 0)) * e))
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
        self.norm(False, name, sub, t, d)

    def lookup(self, name: str, rows: int, table_rows: int, d: int, *,
               sub: Sublayer = S.EMBEDDING, split: TensorSplit = T.REPLICATED) -> None:
        """Embedding gather of `rows` ids from a (table_rows x d) table; its backward zeroes
        the (table_rows x d) gradient and scatter-adds `rows` rows into it. `sub`: T5's
        relative position bias is a lookup too (`Sublayer.REL_POS_BIAS`, split by heads)."""
        a = self.ab
        self.fwd.append(self.row(name, sub, C.EMBEDDING, P.FORWARD, split=split,
                                 elements=rows * d,
                                 bytes_read=INDEX_BYTES * rows + a * rows * d,
                                 bytes_written=a * rows * d, saved_bytes=INDEX_BYTES * rows))
        self.on_backward(self.row(
            f"{name}.grad", sub, C.EMBEDDING, P.BACKWARD_WEIGHT, split=split,
            elements=rows * d,
            flops=rows * d, bytes_read=INDEX_BYTES * rows + a * rows * d,
            bytes_written=a * (table_rows * d + rows * d)))

    def cross_entropy(self, name: str, rows: int, classes: int, *, upcast: bool = False,
                      split: TensorSplit = T.REPLICATED) -> None:
        """log_softmax + nll in fp32 over (rows x classes) logits; keeps the log-probs. With
        16-bit activations autocast casts the logits up inside the loss's forward kernel, and
        its backward casts the fp32 gradient back down in a kernel of its own (a
        ToCopyBackward `aten::to`): a data-movement row. `upcast`: the model casts the logits
        to fp32 itself first (`logits.float()`, as Hugging Face's causal-LM loss does), a
        forward data-movement row, the loss then reading fp32."""
        a, e = self.ab, rows * classes
        ff, fb = _FLOPS["cross_entropy"]
        if upcast and a != LOSS_BYTES:
            self.fwd.append(self.row(f"{name}.upcast", S.LOSS, C.DATA_MOVEMENT, P.FORWARD,
                                     split=split, elements=e, bytes_read=a * e,
                                     bytes_written=LOSS_BYTES * e))
        read = LOSS_BYTES if upcast else a
        self.fwd.append(self.row(name, S.LOSS, C.LOSS, P.FORWARD, split=split, elements=e,
                                 flops=ff * e, bytes_read=read * e + INDEX_BYTES * rows,
                                 bytes_written=LOSS_BYTES * e, saved_bytes=LOSS_BYTES * e))
        grads = [self.row(f"{name}.grad", S.LOSS, C.LOSS, P.BACKWARD_DATA, split=split,
                          elements=e, flops=fb * e,
                          bytes_read=LOSS_BYTES * e + INDEX_BYTES * rows,
                          bytes_written=LOSS_BYTES * e)]
        if a != LOSS_BYTES:
            grads.append(self.row(f"{name}.grad_cast", S.LOSS, C.DATA_MOVEMENT,
                                  P.BACKWARD_DATA, split=split, elements=e,
                                  bytes_read=LOSS_BYTES * e, bytes_written=a * e,
                                  issuer=Issuer.AUTOCAST))
        self.on_backward(*grads)

    # -- families beyond BERT ---------------------------------------------------------------
    def rmsnorm(self, name: str, sub: Sublayer, t: int, d: int) -> None:
        """RMSNorm over d for t rows (Zhang & Sennrich 2019; Llama's LlamaRMSNorm, T5's
        T5LayerNorm): y = x / rms(x) * gamma, no mean and no bias; keeps its input; computes
        in fp32 and keeps the fp32 rstd per row (as the layernorm's statistics)."""
        self.norm(True, name, sub, t, d)

    def norm(self, rms: bool, name: str, sub: Sublayer, t: int, d: int) -> None:
        """The family's normalization over d for t rows: RMSNorm when `rms` (one fp32
        statistic per row, a weight), else LayerNorm (mean and rstd, weight and bias). Keeps
        its input; backward reads x, dy and the weight, and reduces the affine gradients."""
        a, e = self.ab, t * d
        kind, cat = ("rmsnorm", C.RMSNORM) if rms else ("layernorm", C.LAYERNORM)
        affine = 1 if rms else 2  # per-feature parameters: weight (and bias)
        ff, fb = _FLOPS[kind]
        stats = STAT_BYTES * (1 if rms else 2) * t
        self.fwd.append(self.row(name, sub, cat, P.FORWARD, elements=e, flops=ff * e,
                                 bytes_read=a * (e + affine * d), bytes_written=a * e + stats,
                                 saved_bytes=a * e))
        fw, _ = _FLOPS[f"{kind}_weight"]
        self.on_backward(
            self.row(f"{name}.grad", sub, cat, P.BACKWARD_DATA, elements=e,
                     flops=fb * e, bytes_read=a * (2 * e + d) + stats, bytes_written=a * e),
            self.row(f"{name}.weight_grad", sub, C.REDUCTION, P.BACKWARD_WEIGHT, elements=e,
                     flops=fw * e, bytes_read=2 * a * e + stats, bytes_written=a * affine * d),
        )

    def mul(self, name: str, sub: Sublayer, e: int, *,
            split: TensorSplit = T.REPLICATED) -> None:
        """y = u * v elementwise (a gated feed-forward's gate times its up projection);
        backward reads dy, u and v and writes du and dv; keeps both inputs."""
        a = self.ab
        ff, fb = _FLOPS["mul"]
        self.fwd.append(self.row(name, sub, C.ELEMENTWISE, P.FORWARD, split=split, elements=e,
                                 flops=ff * e, bytes_read=2 * a * e, bytes_written=a * e,
                                 saved_bytes=2 * a * e))
        self.on_backward(self.row(f"{name}.grad", sub, C.ELEMENTWISE, P.BACKWARD_DATA,
                                  split=split, elements=e, flops=fb * e,
                                  bytes_read=3 * a * e, bytes_written=2 * a * e))

    def rotary(self, name: str, e: int, s: int, d: int, *,
               split: TensorSplit = T.SPLIT) -> None:
        """Rotary embedding of an e-element query or key tensor (Su et al. 2021): x cos +
        rotate_half(x) sin with (s x d) cos and sin tables; its backward applies the
        transposed rotation to dy. Nothing saved beyond the tables."""
        a = self.ab
        ff, fb = _FLOPS["rotary"]
        self.fwd.append(self.row(name, S.ROTARY, C.ELEMENTWISE, P.FORWARD, split=split,
                                 elements=e, flops=ff * e, bytes_read=a * (e + 2 * s * d),
                                 bytes_written=a * e))
        self.on_backward(self.row(f"{name}.grad", S.ROTARY, C.ELEMENTWISE, P.BACKWARD_DATA,
                                  split=split, elements=e, flops=fb * e,
                                  bytes_read=a * (e + 2 * s * d), bytes_written=a * e))

    def copy(self, name: str, sub: Sublayer, e: int, *, forward: bool = True,
             split: TensorSplit = T.SPLIT) -> None:
        """A strided copy of e elements into a contiguous tensor (a head split or merge of
        eager attention: `.contiguous()` or a `reshape` that cannot be a view): reads and
        writes each element once, no FLOPs, nothing saved. `forward`: a forward copy, whose
        backward copies the e-element gradient back; `forward=False`: a copy only backward
        runs (a gradient reshaped back from heads)."""
        a = self.ab
        if forward:
            self.fwd.append(self.row(name, sub, C.DATA_MOVEMENT, P.FORWARD, split=split,
                                     elements=e, bytes_read=a * e, bytes_written=a * e))
        self.on_backward(self.row(f"{name}.grad", sub, C.DATA_MOVEMENT, P.BACKWARD_DATA,
                                  split=split, elements=e, bytes_read=a * e,
                                  bytes_written=a * e))

    def repeat_kv(self, name: str, e_kv: int, groups: int) -> None:
        """Grouped-query attention run by eager kernels (Hugging Face's repeat_kv): each of the
        e_kv key (or value) elements copied to `groups` query heads; backward sums the copies'
        gradients back."""
        a = self.ab
        self.fwd.append(self.row(name, S.ATTN_SCORE, C.DATA_MOVEMENT, P.FORWARD, split=T.SPLIT,
                                 elements=e_kv * groups, bytes_read=a * e_kv,
                                 bytes_written=a * e_kv * groups))
        self.on_backward(self.row(f"{name}.grad", S.ATTN_SCORE, C.REDUCTION, P.BACKWARD_DATA,
                                  split=T.SPLIT, elements=e_kv * groups, flops=e_kv * groups,
                                  bytes_read=a * e_kv * groups, bytes_written=a * e_kv))



def recompute(ops: list[Op]) -> list[Op]:
    """A layer's forward rows rerun in backward by full activation checkpointing: phase
    `recompute`, nothing saved."""
    return [op._replace(phase=P.RECOMPUTE, saved_bytes=0) for op in ops]


ATTENTION_CORE = frozenset(s for s in Sublayer
                           if s.group is SublayerGroup.ATTENTION_CORE and s is not S.ROTARY)
"""Sublayers selective recomputation reruns: the attention core (scores, scale, mask, bias,
softmax, dropout, context; cross-attention's too), as Megatron-LM's `core_attention`
checkpoint does (Korthikanti et al. 2022, section 4.2). Rotary embeddings are applied to Q
and K before it."""

_GEMMS = (C.GEMM, C.BATCHED_GEMM)


def checkpointed(fwd: list[Op], mode: Checkpoint) -> tuple[list[Op], list[Op]]:
    """A layer's forward rows as `mode` keeps them, and the rows it reruns in backward.

    none: the rows as they are, nothing rerun. full: the rows as they are (the memory model
    keeps only the layer's input, `analytic.memory`), all of them rerun. selective: the
    attention core's rows (`ATTENTION_CORE`) rerun, and its memory-bound rows save nothing
    (softmax output, dropout mask and output: Korthikanti et al.'s 5as/h bytes per token);
    its batched GEMMs keep their inputs Q, K and V, from which the core is recomputed."""
    if mode is Checkpoint.NONE:
        return fwd, []
    if mode is Checkpoint.FULL:
        return fwd, recompute(fwd)
    kept = [op._replace(saved_bytes=0)
            if op.sublayer in ATTENTION_CORE and op.category not in _GEMMS else op for op in fwd]
    return kept, recompute([op for op in fwd if op.sublayer in ATTENTION_CORE])


__all__ = ["ATTENTION_CORE", "INDEX_BYTES", "LOSS_BYTES", "MASK_BYTES", "STAT_BYTES", "Section",
           "checkpointed", "recompute"]
